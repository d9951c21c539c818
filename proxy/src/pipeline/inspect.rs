//! An admitted CONNECT to an endpoint whose requests are inspected: detect the protocol,
//! terminate TLS with a leaf from the ephemeral CA, open a verified TLS connection upstream,
//! and serve the requests through the one HTTP request loop (`forward::serve` with
//! `Route::Tunnel`).
//!
//! Owns the protocol detection after `200 Connection Established` (TLS, plaintext HTTP, or
//! anything else, refused), the order of the two handshakes (the client's ClientHello is read
//! first, the upstream is offered the same ALPN, the client handshake completes with what the
//! upstream chose) and the tunnel's upstream HTTP connection.
//!
//! Both legs speak the same protocol: HTTP/2 (`h2.rs`) when the upstream chose `h2` from the
//! client's offer, else HTTP/1.1 through the one request loop, so an h1-only upstream never
//! sees HTTP/2 and a gRPC client gets h2 end to end.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::{Buf, BytesMut};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_rustls::{LazyConfigAcceptor, TlsConnector};

use super::caller::Known;
use super::counted::{Counted, Traffic};
use super::forward::{self, Route, Tunnel};
use super::{Conn, Shared};
use crate::audit::{self, Engine, Outcome, Via};
use crate::policy::Policy;
use crate::policy::decide::Admission;
use crate::tls::server::Alpn;
use crate::tls::upstream::Offer;

/// Time the client has to send its first bytes after `200 Connection Established`.
const DETECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A stream that first yields bytes already read from it.
#[derive(Debug)]
pub struct Prefixed<S> {
    prefix: BytesMut,
    inner: S,
}

impl<S> Prefixed<S> {
    pub fn new(prefix: BytesMut, inner: S) -> Self {
        Prefixed { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What the client sent first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Detected {
    Tls,
    Http,
    Other,
}

/// TLS record (handshake, TLS 1.x) or an HTTP/1 method followed by a space.
fn detect(first: &[u8]) -> Detected {
    if first.len() >= 2 && first[0] == 0x16 && first[1] == 0x03 {
        return Detected::Tls;
    }
    const METHODS: &[&[u8]] = &[
        b"GET ",
        b"HEAD ",
        b"POST ",
        b"PUT ",
        b"DELETE ",
        b"PATCH ",
        b"OPTIONS ",
        b"TRACE ",
    ];
    if METHODS.iter().any(|m| first.starts_with(m)) {
        return Detected::Http;
    }
    Detected::Other
}

/// The inspected tunnel, from just after the `200` to the end.
#[allow(clippy::too_many_arguments)] // one admitted connection's parts
pub async fn run(
    shared: &Arc<Shared>,
    conn: &Conn,
    caller: Known,
    host: String,
    port: u16,
    policy: Arc<Policy>,
    admission: Admission,
    (mut rd, wr): (OwnedReadHalf, OwnedWriteHalf),
    mut buf: BytesMut,
    upstream: TcpStream,
    addr: SocketAddr,
    traffic: &Arc<Traffic>,
) {
    let entry = admission.entry.to_string();
    // Protocol detection: enough bytes to tell TLS from HTTP, within the timeout.
    let detected = tokio::time::timeout(DETECT_TIMEOUT, async {
        while buf.len() < 8 {
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if buf.len() >= 2 && detect(&buf) == Detected::Tls {
                break;
            }
        }
        detect(&buf)
    })
    .await
    .unwrap_or(Detected::Other);
    // What the client sent after its CONNECT head so far; from here on, `Counted` counts.
    traffic.add_in(buf.len() as u64);
    let fail = |reason: String| {
        shared
            .audit
            .emit(&audit::Event::ConnectionOpen(audit::ConnectionOpen {
                time: SystemTime::now(),
                id: conn.id,
                via: Via::Connect,
                caller: Some(caller.audit.clone()),
                src: conn.peer,
                dst: audit::Destination {
                    host: host.clone(),
                    port,
                    ip: Some(addr.ip()),
                },
                outcome: Outcome::Denied,
                policy: Some(entry.clone()),
                engine: Engine::L7,
                reason: Some(reason),
                status: 0,
            }));
    };
    match detected {
        Detected::Other => {
            fail("Unsupported tunnel protocol for L7-inspected endpoint".to_string());
        }
        Detected::Http => {
            let sender = match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
                Ok((sender, connection)) => {
                    tokio::spawn(async move {
                        let _ = connection.with_upgrades().await;
                    });
                    sender
                }
                Err(e) => {
                    fail(format!("upstream HTTP handshake failed: {e}"));
                    return;
                }
            };
            let tunnel = Tunnel::new(host.clone(), port, "http", policy, admission, sender, addr);
            forward::serve(
                shared,
                conn,
                Ok(caller.clone()),
                Route::Tunnel(tunnel),
                None,
                Counted::new(rd, Arc::clone(traffic)),
                Counted::new(wr, Arc::clone(traffic)),
                buf,
            )
            .await;
        }
        Detected::Tls => {
            let Some(tls) = &shared.tls else {
                fail("TLS termination unavailable".to_string());
                return;
            };
            let Ok(client) = rd.reunite(wr) else {
                return;
            };
            let stream = Prefixed::new(buf, Counted::new(client, Arc::clone(traffic)));
            let start = match tokio::time::timeout(
                DETECT_TIMEOUT,
                LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream),
            )
            .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    fail(format!("client TLS: {e}"));
                    return;
                }
                Err(_) => {
                    fail("client TLS: no ClientHello in time".to_string());
                    return;
                }
            };
            let hello = start.client_hello();
            let sni = hello.server_name().map(str::to_ascii_lowercase);
            // Offer the upstream exactly what the client offered (of h2 and http/1.1).
            let offer = hello.alpn().map_or(Offer::None, Offer::from_client);
            // The upstream is verified against its real name (SNI = the CONNECT host).
            let Ok(server_name) = ServerName::try_from(host.clone()) else {
                fail(format!("`{host}` is not a valid TLS server name"));
                return;
            };
            let connector = TlsConnector::from(tls.upstream.config(offer));
            let upstream_tls = match tokio::time::timeout(
                shared.limits.connect_timeout,
                connector.connect(server_name, upstream),
            )
            .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    fail(format!("upstream TLS to {host}:{port} failed: {e}"));
                    return;
                }
                Err(_) => {
                    fail(format!("upstream TLS to {host}:{port} timed out"));
                    return;
                }
            };
            let alpn = Alpn::from_protocol(upstream_tls.get_ref().1.alpn_protocol());
            let config = match tls.terminator.config_for(sni.as_deref(), &host, alpn) {
                Ok(c) => c,
                Err(e) => {
                    fail(format!("no certificate for {host}: {e}"));
                    return;
                }
            };
            let client_tls =
                match tokio::time::timeout(DETECT_TIMEOUT, start.into_stream(config)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        fail(format!("client TLS handshake failed: {e}"));
                        return;
                    }
                    Err(_) => {
                        fail("client TLS handshake timed out".to_string());
                        return;
                    }
                };
            if alpn == Alpn::H2 {
                let tunnel = super::h2::H2Tunnel {
                    shared: Arc::clone(shared),
                    conn_id: conn.id,
                    peer: conn.peer,
                    known: caller.clone(),
                    host: host.clone(),
                    port,
                    policy,
                    admission,
                    addr,
                };
                if let Err(e) = super::h2::serve(tunnel, client_tls, upstream_tls).await {
                    fail(e);
                }
                return;
            }
            let sender =
                match hyper::client::conn::http1::handshake(TokioIo::new(upstream_tls)).await {
                    Ok((sender, connection)) => {
                        tokio::spawn(async move {
                            let _ = connection.with_upgrades().await;
                        });
                        sender
                    }
                    Err(e) => {
                        fail(format!("upstream HTTP handshake failed: {e}"));
                        return;
                    }
                };
            let tunnel = Tunnel::new(host.clone(), port, "https", policy, admission, sender, addr);
            let (crd, mut cwr) = tokio::io::split(client_tls);
            forward::serve(
                shared,
                conn,
                Ok(caller.clone()),
                Route::Tunnel(tunnel),
                None,
                crd,
                &mut cwr,
                BytesMut::new(),
            )
            .await;
            let _ = cwr.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection() {
        assert_eq!(detect(&[0x16, 0x03, 0x01]), Detected::Tls);
        assert_eq!(detect(b"GET / HTTP/1.1"), Detected::Http);
        assert_eq!(detect(b"PRI * HTTP/2.0"), Detected::Other);
        assert_eq!(detect(b"SSH-2.0"), Detected::Other);
    }

    #[tokio::test]
    async fn prefixed_reads_the_prefix_first() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b"world").await.unwrap();
        drop(a);
        let mut p = Prefixed::new(BytesMut::from(&b"hello "[..]), b);
        let mut out = String::new();
        p.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
