//! What an explicit-proxy listener does with a connection before the pipeline sees it: read
//! the PROXY protocol header of a trusted load balancer (`--proxy-protocol-from`), then, on a
//! TLS listener (`--tls-listen`), the hop's handshake; then hand the client over
//! (`pipeline::serve_client`) with the address and certificate it presented.
//!
//! Owns the order of those steps and their refusals: a trusted peer that sends no header, or
//! a malformed one, is answered `400` (on a plain listener) and closed; a failed handshake
//! is closed; each is audited. A peer that is not trusted and sends a header anyway is
//! refused by the pipeline, which sees the header where a request head should be.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use ipnet::IpNet;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::hop::Hop;
use crate::http::respond::{Code, Refusal};
use crate::pipeline::{self, Client, ClientStream, Prefixed, Shared};
use crate::proxy_protocol::{self, Carried};

/// How a listener receives its clients.
#[derive(Debug, Default)]
pub struct Front {
    /// Peers whose connections start with a PROXY protocol header (and must).
    pub proxy_from: Vec<IpNet>,
    /// The TLS hop, on a `--tls-listen` listener.
    pub hop: Option<Arc<Hop>>,
}

impl Front {
    /// Whether `peer` is a balancer trusted to say whom it forwards.
    pub fn trusts(&self, peer: SocketAddr) -> bool {
        let ip = peer.ip().to_canonical();
        self.proxy_from.iter().any(|n| n.contains(&ip))
    }
}

/// Receives one connection and serves it to the end.
pub async fn serve(
    shared: Arc<Shared>,
    front: Arc<Front>,
    mut stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
) {
    // A proxy that delays small writes stalls TLS handshakes by 40 ms (Nagle + delayed ACK).
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::new();
    let mut client_addr = peer;
    if front.trusts(peer) {
        // Bounded as a request head is: the balancer sends it first, at once.
        let within = shared.limits.head_timeout;
        let read = tokio::time::timeout(within, proxy_protocol::read(&mut stream, &mut buf));
        match Box::pin(read).await {
            Ok(Ok(Carried::Client(addr))) => client_addr = addr,
            Ok(Ok(Carried::Local)) => {}
            Ok(Err(e)) => {
                let why = e.to_string();
                refuse(&shared, &front, stream, peer, why).await;
                return;
            }
            Err(_) => {
                let why = format!(
                    "no PROXY protocol header within {} s, which --proxy-protocol-from requires from this peer",
                    within.as_secs()
                );
                refuse(&shared, &front, stream, peer, why).await;
                return;
            }
        }
    }
    let client = match &front.hop {
        None => Client {
            stream: ClientStream::Tcp(stream),
            peer: client_addr,
            local,
            cert: None,
            buf,
        },
        Some(hop) => {
            let within = shared.limits.head_timeout;
            match Box::pin(hop.accept(Prefixed::new(buf, stream), within)).await {
                Ok((tls, cert)) => Client {
                    stream: ClientStream::Tls(Box::new(tls)),
                    peer: client_addr,
                    local,
                    cert,
                    buf: BytesMut::new(),
                },
                Err(e) => {
                    pipeline::audit_unreceived(&shared, client_addr, e.to_string(), 0);
                    return;
                }
            }
        }
    };
    pipeline::serve_client(shared, client).await;
}

/// Refuses a connection from a trusted balancer that did not say whom it forwards: `400`
/// on a plain listener (the client behind it speaks HTTP), a close on a TLS one; audited.
async fn refuse(
    shared: &Shared,
    front: &Front,
    mut stream: TcpStream,
    peer: SocketAddr,
    why: String,
) {
    let status = if front.hop.is_none() {
        let refusal = Refusal::new(Code::BadRequest, why.clone());
        let _ = stream.write_all(&refusal.to_bytes()).await;
        400
    } else {
        0
    };
    let _ = stream.shutdown().await;
    pipeline::audit_unreceived(shared, peer, why, status);
}
