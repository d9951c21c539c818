//! An admitted CONNECT to an endpoint whose requests are inspected: detect the protocol,
//! terminate TLS with a leaf from the ephemeral CA, open a verified TLS connection upstream,
//! and serve the requests through the one HTTP request loop (`http1::serve` with
//! `Route::Tunnel`).
//!
//! Owns the protocol detection after `200 Connection Established` (TLS, plaintext HTTP, or
//! anything else, refused), the order of the two handshakes (the client's ClientHello is read
//! first, the upstream is offered the same ALPN, the client handshake completes with what the
//! upstream chose) and the tunnel's upstream HTTP connection.
//!
//! Both legs speak the same protocol: HTTP/2 (`transports/http2.rs`) when the upstream chose `h2` from the
//! client's offer, else HTTP/1.1 through the one request loop, so an h1-only upstream never
//! sees HTTP/2 and a gRPC client gets h2 end to end.
//!
//! The upstream TLS connection may come from the pool (`state/pool.rs`) instead, when one fits this
//! caller, destination, vetted address, offer and configuration. An HTTP/1.1 tunnel's goes
//! back to it whenever the client idles and when the client leaves (`transports/lease.rs`); an h2
//! tunnel's, whose streams share it, when the client leaves.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use crate::pipeline::client::stream::{ClientRead, ClientStream, ClientWrite};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::LazyConfigAcceptor;

use super::http1::{self, Route, Session, Tunnel};
use super::lease::Lease;
use crate::audit::{self, Engine, Outcome, Via};
use crate::http::head;
use crate::http::respond::{Code, Refusal};
use crate::pipeline::caller::identify::Known;
use crate::pipeline::client::accepted::Conn;
use crate::pipeline::client::counted::{Counted, Prefixed, Traffic};
use crate::pipeline::phases::connection::{self, Admitted, Dialled, Scheme};
use crate::pipeline::phases::record::Record;
use crate::pipeline::state::live::Registration;
use crate::pipeline::state::pool::{self, Client, Returned, Wanted};
use crate::pipeline::state::shared::{Shared, TlsState};
use crate::pipeline::upstream::open;
use crate::tls::server::Alpn;
use crate::tls::upstream::Offer;

/// Time the client has to send its first bytes after `200 Connection Established`.
const DETECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the client sent first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Detected {
    Tls,
    Http,
    /// HTTP/2 with prior knowledge, in cleartext (`PRI * HTTP/2.0`).
    H2c,
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
    if first.starts_with(b"PRI ") {
        return Detected::H2c;
    }
    Detected::Other
}

/// An admitted tunnel whose requests are inspected, as the CONNECT entry hands it over.
#[derive(Debug)]
pub struct Inspected<'a> {
    pub shared: &'a Arc<Shared>,
    pub conn: &'a Conn,
    pub caller: Known,
    pub admitted: Admitted,
    /// The upstream socket (or the pooled connection to take), and the address it reached.
    pub upstream: (Dialled, SocketAddr),
    /// The client side's bytes, for the tunnel's close event.
    pub traffic: &'a Arc<Traffic>,
    /// How the tunnel entered (`CONNECT`, or redirected to the transparent listener).
    pub via: Via,
    /// Set to the address the upstream was reached at in the end, when it is not the one
    /// above (for the tunnel's close event).
    pub reached: &'a OnceLock<SocketAddr>,
}

/// The inspected tunnel, from just after the `200` to the end: the client's halves, and
/// what it sent after its CONNECT head. Returns why it failed, if it did (for its close
/// event: the tunnel's open event was written at the `200`, and is not written twice).
pub async fn run(
    t: Inspected<'_>,
    (mut rd, wr): (ClientRead, ClientWrite),
    mut buf: BytesMut,
) -> Option<String> {
    let Inspected {
        shared,
        conn,
        caller,
        admitted,
        upstream: (upstream, addr),
        traffic,
        via,
        reached,
    } = t;
    let registered = addr;
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
    match detected {
        Detected::Other | Detected::H2c => {
            // Told, not dropped: a 403 in HTTP/1.1, which an HTTP client reads.
            let detail = if detected == Detected::H2c {
                "HTTP/2 prior-knowledge (h2c) is not supported for L7-inspected endpoints"
            } else {
                "Unsupported tunnel protocol for L7-inspected endpoint"
            };
            let refusal = Refusal::new(Code::UnsupportedL7Protocol, detail);
            let mut wr = wr;
            let _ = wr.write_all(&refusal.to_bytes()).await;
            let _ = wr.shutdown().await;
            shared
                .audit
                .emit(&audit::Event::ConnectionOpen(audit::ConnectionOpen {
                    time: SystemTime::now(),
                    id: conn.id,
                    via,
                    caller: Some(Arc::clone(&caller.audit)),
                    src: conn.peer,
                    dst: audit::Destination::new(admitted.dst.clone(), Some(addr.ip())),
                    outcome: Outcome::Denied,
                    policy: Some(admitted.admission.entry.to_string()),
                    engine: Engine::L7,
                    reason: Some(detail.to_string()),
                    status: 403,
                }));
            // What the client still sends is read (briefly) first, so that closing does not
            // reset the answer away.
            super::unread::linger(&mut rd).await;
            None
        }
        Detected::Http => {
            // Plaintext HTTP in a tunnel is never pooled: a deferred dial is made now.
            let (upstream, addr) = match Box::pin(socket(shared, upstream, addr)).await {
                Ok(x) => x,
                Err(e) => return Some(e),
            };
            let _moved = moved(
                shared,
                conn,
                &caller,
                &admitted,
                (registered, addr),
                reached,
            );
            let sender = match Box::pin(open::http1(upstream)).await {
                Ok(sender) => sender,
                Err(e) => return Some(format!("upstream HTTP handshake failed: {e}")),
            };
            let admitted = Admitted {
                scheme: Scheme::Http,
                ..admitted
            };
            let session = Session {
                shared,
                conn,
                caller: Ok(caller),
                route: Route::Tunnel(Box::new(Tunnel::new(admitted, sender, addr))),
                rd: Counted::new(rd, Arc::clone(traffic)),
                wr: Counted::new(wr, Arc::clone(traffic)),
                buf,
            };
            http1::serve(session, None).await;
            None
        }
        Detected::Tls => {
            let Some(tls) = &shared.tls else {
                return Some("TLS termination unavailable".to_string());
            };
            let Ok(client) = rd.reunite(wr) else {
                return None;
            };
            let stream = Prefixed::new(buf, Counted::new(client, Arc::clone(traffic)));
            // Boxed: the handshakes' states (about 5 KiB) exist only while they run; the
            // connection's future keeps only the size of the state it idles in.
            let phase = Handshakes {
                shared,
                tls,
                caller: &caller,
                admitted: &admitted,
                upstream,
                addr,
            };
            let Handshaken {
                client_tls,
                up,
                addr,
                alpn,
                offer,
                key,
                epoch,
            } = match Box::pin(handshakes(phase, stream)).await {
                Ok(h) => h,
                Err(Failed::Client(e)) => return Some(e),
                Err(Failed::Upstream(u)) => {
                    let tunnel = super::http2::H2Tunnel {
                        shared: Arc::clone(shared),
                        conn_id: conn.id,
                        peer: conn.peer,
                        known: caller,
                        admitted: Admitted {
                            scheme: Scheme::Https,
                            ..admitted
                        },
                        addr,
                    };
                    return Some(Box::pin(unreachable(tls, tunnel, *u)).await);
                }
            };
            let _moved = moved(
                shared,
                conn,
                &caller,
                &admitted,
                (registered, addr),
                reached,
            );
            let returned = |client| Returned {
                key: key.clone(),
                addr,
                offer,
                alpn,
                epoch: epoch.clone(),
                client,
            };
            if alpn == Alpn::H2 {
                let sender = match up {
                    Up::Pooled(Client::H2(s)) => s,
                    Up::Fresh(s) => match Box::pin(super::http2::connect(*s)).await {
                        Ok(s) => s,
                        Err(e) => return Some(e),
                    },
                    Up::Pooled(Client::H1(_)) => {
                        return Some("pooled upstream speaks HTTP/1.1, not h2".to_string());
                    }
                };
                let tenant = admitted.tenant.clone();
                let tunnel = super::http2::H2Tunnel {
                    shared: Arc::clone(shared),
                    conn_id: conn.id,
                    peer: conn.peer,
                    known: caller.clone(),
                    admitted: Admitted {
                        scheme: Scheme::Https,
                        ..admitted
                    },
                    addr,
                };
                return match Box::pin(super::http2::serve(tunnel, client_tls, sender.clone())).await
                {
                    Ok(()) => {
                        shared.pool.check_in(
                            returned(Client::H2(sender)),
                            connection::current_epoch_of(shared, tenant.as_deref()),
                        );
                        None
                    }
                    Err(e) => Some(e),
                };
            }
            let sender = match up {
                Up::Pooled(Client::H1(s)) => s,
                Up::Fresh(s) => match Box::pin(open::http1(*s)).await {
                    Ok(sender) => sender,
                    Err(e) => return Some(format!("upstream HTTP handshake failed: {e}")),
                },
                Up::Pooled(Client::H2(_)) => {
                    return Some("pooled upstream speaks h2, not HTTP/1.1".to_string());
                }
            };
            let admitted = Admitted {
                scheme: Scheme::Https,
                ..admitted
            };
            let (crd, mut cwr) = tokio::io::split(client_tls);
            // The upstream connection goes back to the pool whenever the client idles
            // (`transports/lease.rs`), and when it leaves.
            let lease = Lease::new(key, addr, offer, alpn, epoch);
            let session = Session {
                shared,
                conn,
                caller: Ok(caller.clone()),
                route: Route::Tunnel(Box::new(Tunnel::leased(admitted, sender, lease))),
                rd: crd,
                wr: &mut cwr,
                buf: BytesMut::new(),
            };
            let route = http1::serve_route(session, None).await;
            let _ = cwr.shutdown().await;
            if let Route::Tunnel(mut t) = route {
                t.release(shared);
            }
            None
        }
    }
}

/// Why the handshakes failed.
enum Failed {
    /// The client's side: the tunnel ends, with this reason.
    Client(String),
    /// The upstream could not be reached over TLS after the client's `200`.
    Upstream(Box<Unreached>),
}

/// An upstream not reached after the `200`: the client's handshake, begun, to complete with
/// sluice's own leaf so that its requests are answered `502` with the reason.
struct Unreached {
    start: tokio_rustls::StartHandshake<ClientIo>,
    sni: Option<String>,
    offer: Offer,
    reason: String,
}

/// Completes the client's handshake (h2 when it offered it, else HTTP/1.1) and answers its
/// requests `502 upstream_unreachable` with the reason, each audited like any refused
/// request. Returns the reason, for the tunnel's close event.
async fn unreachable(tls: &TlsState, tunnel: super::http2::H2Tunnel, u: Unreached) -> String {
    let Unreached {
        start,
        sni,
        offer,
        reason,
    } = u;
    let alpn = match offer {
        Offer::H2AndHttp11 | Offer::H2 => Alpn::H2,
        Offer::Http11 => Alpn::Http11,
        Offer::None => Alpn::None,
    };
    let host = tunnel.admitted.dst.host();
    let Ok(config) = tls.terminator.config_for(sni.as_deref(), host, alpn) else {
        return reason;
    };
    let Ok(Ok(client_tls)) = tokio::time::timeout(DETECT_TIMEOUT, start.into_stream(config)).await
    else {
        return reason;
    };
    let x = crate::pipeline::phases::request::Exchange {
        shared: &tunnel.shared,
        admitted: &tunnel.admitted,
    };
    let denial = x.upstream_failed(reason.clone());
    if alpn == Alpn::H2 {
        let _ = super::http2::refuse_streams(tunnel, client_tls, denial).await;
        return reason;
    }
    let (mut rd, mut wr) = tokio::io::split(client_tls);
    let mut buf = BytesMut::new();
    let limits = &tunnel.shared.limits;
    let read = head::read_head(&mut rd, &mut buf, limits.max_head_bytes);
    if let Ok(Ok(h)) = tokio::time::timeout(limits.head_timeout, read).await {
        let mut rec = Record::open(
            &tunnel.shared,
            tunnel.conn_id,
            tunnel.peer,
            Some(&tunnel.known),
        );
        rec.on(&tunnel.admitted);
        rec.request(&h.method, &h.target);
        let _ = wr.write_all(&denial.refusal.to_bytes()).await;
        rec.deny(&denial);
        rec.finish();
    }
    let _ = wr.shutdown().await;
    super::unread::linger(&mut rd).await;
    reason
}

/// Registers the tunnel in the live registry again when its upstream was reached at another
/// address (`now`) than the one the connection phase registered it at (a deferred dial whose
/// pooled connection was gone, or a pooled connection at another vetted address), so that a
/// reload judges the address the bytes go to; a reload that already narrowed the plan stops
/// it at once (`connection::hold`). The registration lasts while the returned value does.
fn moved<'s>(
    shared: &'s Shared,
    conn: &Conn,
    caller: &Known,
    admitted: &Admitted,
    (registered, now): (SocketAddr, SocketAddr),
    reached: &OnceLock<SocketAddr>,
) -> Option<Registration<'s>> {
    if now == registered {
        return None;
    }
    let _ = reached.set(now);
    let kind = connection::Kind::InspectedTunnel;
    Some(connection::hold(
        shared,
        conn,
        caller,
        admitted,
        kind,
        Some(now),
    ))
}

/// An upstream TLS connection made now, or taken from the pool.
enum Up {
    Fresh(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Pooled(Client),
}

/// What the handshake phase needs: the tunnel's upstream as the connection phase left it.
struct Handshakes<'a> {
    shared: &'a Shared,
    tls: &'a TlsState,
    caller: &'a Known,
    admitted: &'a Admitted,
    upstream: Dialled,
    addr: SocketAddr,
}

/// Both legs' TLS, done.
struct Handshaken {
    /// Boxed: moved into the client leg's halves right away.
    client_tls: Box<tokio_rustls::server::TlsStream<ClientIo>>,
    up: Up,
    addr: SocketAddr,
    alpn: Alpn,
    offer: Offer,
    key: pool::Key,
    epoch: pool::Epoch,
}

/// The client leg's transport under TLS.
type ClientIo = Prefixed<Counted<ClientStream>>;

/// The two handshakes in order: the client's ClientHello read, the upstream taken from the
/// pool or dialled and its TLS made with the same ALPN offer, then the client's handshake
/// completed with what the upstream chose. `Err`: why the tunnel fails (for its audit).
async fn handshakes(h: Handshakes<'_>, stream: ClientIo) -> Result<Handshaken, Failed> {
    let Handshakes {
        shared,
        tls,
        caller,
        admitted,
        upstream,
        addr,
    } = h;
    let host = admitted.dst.host();
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
    let start = match tokio::time::timeout(DETECT_TIMEOUT, acceptor).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(Failed::Client(format!("client TLS: {e}"))),
        Err(_) => {
            return Err(Failed::Client(
                "client TLS: no ClientHello in time".to_string(),
            ));
        }
    };
    let hello = start.client_hello();
    let sni = hello.server_name().map(str::to_ascii_lowercase);
    // Offer the upstream exactly what the client offered (of h2 and http/1.1).
    let offer = hello.alpn().map_or(Offer::None, Offer::from_client);
    let key = connection::pool_key(caller, &admitted.dst);
    let epoch = connection::epoch(shared, admitted);
    let taken = match &upstream {
        Dialled::Deferred(vetted) => shared.pool.take(
            &key,
            &Wanted {
                vetted,
                offer: Some(offer),
                alpn: None,
                epoch: &epoch,
            },
        ),
        Dialled::Socket(_) => None,
    };
    let (up, addr, alpn) = match taken {
        Some(t) => (Up::Pooled(t.client), t.addr, t.alpn),
        None => {
            let reached = match socket(shared, upstream, addr).await {
                Ok((socket, addr)) => open::tls(shared, tls, &admitted.dst, offer, socket)
                    .await
                    .map(|s| (s, addr)),
                Err(e) => Err(e),
            };
            let (s, addr) = match reached {
                Ok(r) => r,
                Err(reason) => {
                    return Err(Failed::Upstream(Box::new(Unreached {
                        start,
                        sni,
                        offer,
                        reason,
                    })));
                }
            };
            let alpn = Alpn::from_protocol(s.get_ref().1.alpn_protocol());
            (Up::Fresh(Box::new(s)), addr, alpn)
        }
    };
    let config = tls
        .terminator
        .config_for(sni.as_deref(), host, alpn)
        .map_err(|e| Failed::Client(format!("no certificate for {host}: {e}")))?;
    let client_tls = match tokio::time::timeout(DETECT_TIMEOUT, start.into_stream(config)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(Failed::Client(format!("client TLS handshake failed: {e}"))),
        Err(_) => {
            return Err(Failed::Client("client TLS handshake timed out".to_string()));
        }
    };
    Ok(Handshaken {
        client_tls: Box::new(client_tls),
        up,
        addr,
        alpn,
        offer,
        key,
        epoch,
    })
}

/// The upstream socket: the one dialled at CONNECT, or a dial now of the addresses vetted
/// then (the pooled connection that deferred it is gone, or did not fit the client's offer).
async fn socket(
    shared: &Shared,
    upstream: Dialled,
    addr: SocketAddr,
) -> Result<(TcpStream, SocketAddr), String> {
    match upstream {
        Dialled::Socket(s) => Ok((s, addr)),
        Dialled::Deferred(vetted) => connection::dial_vetted(shared, &vetted)
            .await
            .map_err(|e| format!("upstream connection failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection() {
        assert_eq!(detect(&[0x16, 0x03, 0x01]), Detected::Tls);
        assert_eq!(detect(b"GET / HTTP/1.1"), Detected::Http);
        assert_eq!(detect(b"PRI * HTTP/2.0"), Detected::H2c);
        assert_eq!(detect(b"SSH-2.0"), Detected::Other);
    }
}
