//! From an admitted host:port to a connected upstream socket, SSRF-safe.
//!
//! Owns the choice of destination plan from the policy match (spec §6.4: `allowed_ips`, an IP
//! literal target, an exact declared host, else public addresses only), the single lookup,
//! the vetting of every address (all must pass), and dialling only vetted addresses, each in
//! turn with a timeout. The address classes and the vetting rules themselves are in the
//! `sluice-resolver` crate.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_resolver::{DestinationPlan, VetOptions};
use tokio::net::TcpStream;

use crate::audit::Engine;
use crate::http::respond::{Code, Refusal};
use crate::pipeline::authority::Authority;
use crate::pipeline::denial::Denial;
use crate::pipeline::state::shared::Shared;
use crate::policy::decide::Admission;
use crate::policy::glob::HostPattern;
use crate::policy::{Compat, Policy};

/// Why no upstream connection was made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DialError {
    /// The host is a cloud metadata service name (403 `ssrf_denied`).
    #[error("{host} is a cloud metadata service name")]
    MetadataHost { host: String },
    /// The destination check refused an address (403 `ssrf_denied`).
    #[error(transparent)]
    Refused(#[from] sluice_resolver::Refusal),
    /// The name did not resolve (502).
    #[error(transparent)]
    Resolve(#[from] sluice_resolver::ResolverError),
    /// Every vetted address refused or failed (502 `upstream_unreachable`): the last one.
    #[error("{addr}: {source}")]
    Unreachable {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// Some vetted addresses timed out, and the others refused: the last timed out.
    #[error("{addr}: connect timed out after {} s", .after.as_secs_f32())]
    LastTimedOut { addr: SocketAddr, after: Duration },
    /// There was no address to dial.
    #[error("no address to dial")]
    NoAddress,
    /// Every vetted address timed out (504).
    #[error("connect timed out")]
    Timeout,
}

impl DialError {
    /// The refusal of a failed destination step: `verb` is the refused request's method
    /// (`CONNECT`, `GET`), `dst` where it went.
    pub fn denial(&self, verb: &str, dst: &Authority) -> Denial {
        match self {
            DialError::MetadataHost { .. } => Denial::new(
                Engine::Ssrf,
                Refusal::new(
                    Code::SsrfDenied,
                    format!("{verb} {dst} blocked: metadata host"),
                )
                .with_reason(self.to_string()),
            ),
            DialError::Refused(r) => Denial::new(
                Engine::Ssrf,
                Refusal::new(
                    Code::SsrfDenied,
                    format!("{verb} {dst} blocked: {}", r.kind),
                )
                .with_reason(r.detail.clone()),
            ),
            DialError::Timeout => Denial::new(
                Engine::Proxy,
                Refusal::new(
                    Code::UpstreamTimeout,
                    format!("connection to {dst} timed out"),
                ),
            ),
            DialError::Resolve(_)
            | DialError::Unreachable { .. }
            | DialError::LastTimedOut { .. }
            | DialError::NoAddress => Denial::new(
                Engine::Proxy,
                Refusal::new(
                    Code::UpstreamUnreachable,
                    format!("connection to {dst} failed"),
                )
                .with_reason(self.to_string()),
            ),
        }
    }
}

/// The destination plan for an admitted connection.
///
/// By default a name must resolve to public addresses unless an endpoint lists `allowed_ips`
/// (an IP-literal target is its own declaration). The reference also lets an exactly declared
/// host name reach private ranges (spec §6.4 "ExactDeclaredHost"), so a DNS answer can steer
/// an allowed name into the internal network; sluice does that only in `--compat openshell`.
pub fn plan_for(
    policy: &Policy,
    admission: &Admission,
    host: &str,
    compat: Compat,
) -> DestinationPlan {
    let mut nets = Vec::new();
    let mut has_invalid = false;
    let mut exact = false;
    for r in &admission.endpoints {
        let ep = policy.endpoint(*r);
        nets.extend(ep.allowed_ips.nets.iter().copied());
        has_invalid |= ep.allowed_ips.has_invalid;
        exact |= matches!(&ep.host, HostPattern::Exact(h) if h == host);
    }
    if !nets.is_empty() || has_invalid {
        DestinationPlan::ExplicitAllowedIps { nets, has_invalid }
    } else if let Some(ip) = sluice_addr::ip_literal(host) {
        DestinationPlan::ImplicitIpLiteral(ip)
    } else if exact && compat == Compat::OpenShell {
        DestinationPlan::ExactDeclaredHost
    } else {
        DestinationPlan::DefaultPublicOnly
    }
}

/// Resolves, vets and dials `dst`. On success returns the stream and the address dialled.
pub async fn connect(
    shared: &Shared,
    plan: &DestinationPlan,
    dst: &Authority,
) -> Result<(TcpStream, SocketAddr), DialError> {
    let vetted = vet(shared, plan, dst).await?;
    crate::metrics::upstream_connect(dial(&vetted, shared.limits.connect_timeout)).await
}

/// Resolves and vets: the addresses of `dst` that `plan` lets this connection dial, in
/// order.
pub async fn vet(
    shared: &Shared,
    plan: &DestinationPlan,
    dst: &Authority,
) -> Result<Vec<SocketAddr>, DialError> {
    let (host, port) = (dst.host(), dst.port());
    if sluice_resolver::is_metadata_host(host) {
        return Err(DialError::MetadataHost {
            host: host.to_string(),
        });
    }
    let addrs = shared.resolver.resolve(host).await?;
    Ok(sluice_resolver::vet(
        plan,
        &addrs,
        port,
        VetOptions {
            allow_loopback: shared.allow_loopback,
        },
    )?)
}

/// Vets one given address (no lookup) against the plan and dials it: the pinned dial of a
/// transparently redirected connection.
pub async fn connect_at(
    shared: &Shared,
    plan: &DestinationPlan,
    host: &str,
    addr: SocketAddr,
) -> Result<(TcpStream, SocketAddr), DialError> {
    if sluice_resolver::is_metadata_host(host) {
        return Err(DialError::MetadataHost {
            host: host.to_string(),
        });
    }
    let vetted = sluice_resolver::vet(
        plan,
        &[addr.ip()],
        addr.port(),
        VetOptions {
            allow_loopback: shared.allow_loopback,
        },
    )?;
    crate::metrics::upstream_connect(dial(&vetted, shared.limits.connect_timeout)).await
}

/// Dials each address in turn; a refusal moves on at once, a timeout after `timeout`.
pub async fn dial(
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), DialError> {
    let mut last = DialError::NoAddress;
    let mut all_timed_out = !addrs.is_empty();
    for &addr in addrs {
        match tokio::time::timeout(timeout, connect_now(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok((stream, addr));
            }
            Ok(Err(source)) => {
                all_timed_out = false;
                last = DialError::Unreachable { addr, source };
            }
            Err(_) => {
                last = DialError::LastTimedOut {
                    addr,
                    after: timeout,
                }
            }
        }
    }
    if all_timed_out {
        Err(DialError::Timeout)
    } else {
        Err(last)
    }
}

/// Connects to `addr`, as `TcpStream::connect` does, without waiting for the runtime to
/// report the socket writable when the handshake finished within the `connect` call itself
/// (a loopback or otherwise local upstream, the kernel's work done inline): that wait is a
/// round through the reactor, often waking another worker that then takes the connection's
/// task, on the path of every new tunnel. Else it waits as `TcpStream::connect` does.
async fn connect_now(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM.nonblocking().cloexec(),
        Some(socket2::Protocol::TCP),
    )?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
        Err(e) => return Err(e),
    }
    let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    // Connected when the peer is known: the handshake finished.
    if stream.peer_addr().is_ok() {
        return Ok(stream);
    }
    stream.writable().await?;
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    // Writable without an error yet not connected cannot happen after a finished
    // handshake; the peer's address says which.
    stream.peer_addr()?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_dial_that_connects_at_once_is_a_connected_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stream, dialled) = dial(&[addr], Duration::from_secs(5)).await.unwrap();
        assert_eq!(dialled, addr);
        assert_eq!(stream.peer_addr().unwrap(), addr);
        assert!(stream.nodelay().unwrap());
        let (mut accepted, _) = listener.accept().await.unwrap();
        // Bytes go both ways: the socket is registered with the runtime as a dialled one is.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = stream;
        stream.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        accepted.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        accepted.write_all(b"pong").await.unwrap();
        stream.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");
    }

    #[tokio::test]
    async fn a_dial_to_a_closed_port_is_unreachable_and_the_next_address_is_tried() {
        // A port nobody listens on: bound, then closed.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        match dial(&[closed], Duration::from_secs(5)).await {
            Err(DialError::Unreachable { addr, .. }) => assert_eq!(addr, closed),
            other => panic!("{other:?}"),
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap();
        let (_, dialled) = dial(&[closed, open], Duration::from_secs(5)).await.unwrap();
        assert_eq!(dialled, open);
    }
}
