//! One connection's walk through sluice: target → caller → decision → destination → relay,
//! the same for every entry point (spec: "one pipeline").
//!
//! Owns the shared state of a running proxy (`Shared`), the per-connection entry point
//! (`serve`), the first request head, and the dispatch to `tunnel` (CONNECT tunnels) or
//! `http1` (absolute-form HTTP). The policy decision, the caller lookup and the destination
//! check live in `caller/identify.rs`, the policy module and `upstream/destination.rs`, and both entry points
//! call the same ones.
//!
//! The map: `phases/` holds each step written once (the connection phase, then per request
//! the request phase and the exchange, `phases/exchange.rs`, which owns a request's order
//! from judgement to the audited answer); `transports/` holds only the wire work of each
//! protocol, HTTP/1.1, HTTP/2 and the WebSocket handshake all calling that one exchange;
//! `caller/`, `client/`, `upstream/` and `state/` are what they name.

pub mod authority;
mod caller;
mod client;
mod denial;
pub mod doctor;
mod phases;
mod state;
pub mod target;
pub(crate) mod transports;
pub mod upstream;

pub use client::accepted::Conn;
pub(crate) use client::counted::Prefixed;
pub use client::stream::{ClientRead, ClientStream, ClientWrite, HopTls};
pub use phases::connection::revoke_disallowed;
pub use state::live::InForce;
pub use state::shared::{Limits, Parts, Shared, TlsState};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::audit::{self, Engine, Outcome, Via};
use crate::http::head::{self, HeadError};
use crate::http::respond::Code;
use crate::http::respond::Refusal;
use crate::tenants::cert::PeerCert;
use caller::identify::CallerState;
use denial::head_refusal;

/// A client connection as it arrives, before it names a target: its id and addresses, its
/// caller looked up at once (before it could hand the socket to another program), the
/// signal that stops it, and its per-caller slot. Every entry starts with [`arrive`] and,
/// once the client has sent its first bytes, [`settle`]s: the explicit proxy ([`serve`]),
/// and next a transparent listener, which then enters `transports::tunnel::tunnel`.
#[derive(Debug)]
pub(crate) struct Arrival {
    pub(crate) conn: Conn,
    pub(crate) caller: CallerState,
    /// A gateway client whose tenant waits for its first head's credentials holds one of
    /// its address's slots until then ([`state::caller_limits::awaiting_credentials`]); `None` only
    /// while [`by_credentials`] swaps it for its tenant's.
    slot: Option<state::caller_limits::CallerSlot>,
    /// The slot is its address's, held until the first head says whose connection it is.
    provisional: bool,
    /// While provisional, its place among the connections awaiting credentials, all
    /// addresses together ([`state::caller_limits::CallerLimits::awaiting`]).
    awaiting: Option<state::caller_limits::Awaiting>,
    /// The client's first head had arrived whole before its caller was looked up.
    head_before_lookup: bool,
}

/// A connection past its caller's limits (or all of sluice's): refused with 429 by the
/// entry, in its own way, and audited (see [`refuse_limited`]).
#[derive(Debug)]
pub(crate) struct Limited {
    pub(crate) conn: Conn,
    pub(crate) caller: CallerState,
    pub(crate) refusal: Refusal,
}

/// Whether an entry's first bytes are a request head that may name its caller (proxy
/// credentials): the explicit proxy's are; a transparent client's are not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FirstHead {
    MayName,
    Never,
}

/// An arrived connection whose client has sent its first bytes: its caller rechecked (or
/// looked up after them), and held (slot, periodic re-check) while it lasts.
#[derive(Debug)]
pub(crate) struct Settled {
    pub(crate) conn: Conn,
    pub(crate) caller: CallerState,
    _slot: Option<state::caller_limits::CallerSlot>,
    _watcher: Option<caller::holder::Watcher>,
}

/// The first step of every client connection: identify its caller, take its slot.
/// `head_before_lookup` says that the client's first head has arrived whole already (so
/// whoever wrote it did so before this lookup).
pub(crate) async fn arrive(
    shared: &Shared,
    peer: SocketAddr,
    local: SocketAddr,
    heads: FirstHead,
    head_before_lookup: bool,
) -> Result<Arrival, Limited> {
    arrive_presenting(shared, peer, local, None, heads, head_before_lookup).await
}

/// [`arrive`] for a connection whose proxy hop presented the client certificate `cert`.
async fn arrive_presenting(
    shared: &Shared,
    peer: SocketAddr,
    local: SocketAddr,
    cert: Option<Arc<PeerCert>>,
    heads: FirstHead,
    head_before_lookup: bool,
) -> Result<Arrival, Limited> {
    let (raise, stop) = client::stop::signal();
    let conn = Conn {
        id: shared.next_id(),
        peer,
        local,
        cert,
        started: std::time::Instant::now(),
        stop,
        raise,
    };
    // The caller, looked up at once: before it could hand the socket to another program.
    let caller = caller::identify::identify(shared, &conn).await;
    // On a gateway whose tenants may send credentials, the first head of an explicit-proxy
    // connection says whose it is (an address of one tenant may carry another's
    // credentials): until then it is counted by its address, so that one client sending
    // nothing cannot hold every connection the gateway has, nor take another tenant's.
    let provisional = caller::identify::awaits_credentials(&caller)
        || (heads == FirstHead::MayName && shared.tenants.load().has_credentials());
    let slot = if provisional {
        admit(
            shared,
            &state::caller_limits::awaiting_credentials(peer.ip()),
        )
    } else {
        take_slot(shared, &caller)
    };
    match slot {
        Ok(slot) => Ok(Arrival {
            conn,
            caller,
            slot: Some(slot),
            provisional,
            awaiting: provisional.then(|| shared.callers.awaiting()),
            head_before_lookup,
        }),
        Err(refusal) => Err(Limited {
            conn,
            caller,
            refusal,
        }),
    }
}

/// The caller's per-caller slot, or the 429 refusal of one past its limits.
fn take_slot(
    shared: &Shared,
    caller: &CallerState,
) -> Result<state::caller_limits::CallerSlot, Refusal> {
    // Connections whose caller cannot be identified (refused later at the identity stage)
    // share one slot table entry, so that a flood of them cannot fill --max-connections.
    let exe = match caller {
        Ok(known) => known.exe.as_str(),
        Err(_) => state::caller_limits::UNIDENTIFIED,
    };
    admit(shared, exe)
}

/// A slot counted under `key`, or the 429 refusal of one past its limits.
fn admit(shared: &Shared, key: &str) -> Result<state::caller_limits::CallerSlot, Refusal> {
    shared
        .callers
        .admit(key, std::time::Instant::now())
        .map_err(|refused| refused.refusal(key))
}

/// Resolves when a connection awaiting its credentials was displaced by a newer one; never
/// for one that awaits nothing.
async fn displaced(awaiting: Option<&state::caller_limits::Awaiting>) {
    match awaiting {
        Some(a) => a.displaced().await,
        None => std::future::pending().await,
    }
}

/// `GET /ca.pem` sent to the proxy itself (origin-form): a client fetching the CA to trust
/// (on a gateway, from the replica it reaches).
fn is_ca_request(head: &head::RequestHead) -> bool {
    head.method == "GET" && head.target == CA_PATH
}

/// Where the explicit listener serves sluice's CA certificate.
pub const CA_PATH: &str = "/ca.pem";

/// The CA certificate as an HTTP/1.1 response, or 404 when TLS termination is off.
fn ca_response(shared: &Shared) -> Vec<u8> {
    match &shared.tls {
        Some(tls) => {
            let ca = tls.terminator.ca();
            let pem = ca.cert_pem();
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/x-pem-file\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{pem}",
                pem.len()
            )
            .into_bytes()
        }
        None => Refusal::new(
            Code::TlsTerminationUnavailable,
            "TLS termination is unavailable: sluice has no CA to serve",
        )
        .to_bytes(),
    }
}

/// A gateway client's first head: its proxy credentials name its tenant (or why none), which
/// then takes its own slot. `None` when the connection is past its tenant's limits (refused
/// and audited here).
async fn by_credentials(
    shared: &Shared,
    mut arrival: Arrival,
    head: &head::RequestHead,
    wr: &mut ClientWrite,
) -> Option<Arrival> {
    // Its head is here: it awaits nothing more.
    arrival.awaiting = None;
    let changed =
        caller::identify::by_credentials(shared, &mut arrival.caller, &arrival.conn, head, true);
    // Its own caller's slot already, or credentials that name no tenant (refused next): the
    // slot it was admitted with stays (a failed guess is not counted in a bucket other
    // clients share).
    let settled = !changed && !arrival.provisional;
    if arrival.slot.is_some() && (settled || arrival.caller.is_err()) {
        return Some(arrival);
    }
    // The slot it holds goes first.
    arrival.slot = None;
    arrival.provisional = false;
    match take_slot(shared, &arrival.caller) {
        Ok(slot) => {
            arrival.slot = Some(slot);
            Some(arrival)
        }
        Err(refusal) => {
            let known = arrival.caller.as_ref().ok();
            refuse_early(shared, &arrival.conn, wr, refusal, known).await;
            None
        }
    }
}

/// The client sent its first bytes: they are the caller's only if the process that
/// connected still holds the socket (a full re-check); from here on it is re-checked
/// periodically, and the connection stopped when it no longer holds it.
///
/// A head that had arrived whole before the lookup needs no re-check: it was written
/// before the lookup read the socket's holders (the holder's fork family and the
/// ancestors' other children, a superset of what a re-check reads), so a re-check now
/// would only repeat that look at a later moment, which says nothing more about who wrote
/// the head. (Who uses the connection later is what the per-request confirmations, a
/// tunnel's first-use re-check and the periodic re-checks are for.)
pub(crate) async fn settle(shared: &Arc<Shared>, arrival: Arrival) -> Settled {
    let Arrival {
        conn,
        caller,
        slot,
        head_before_lookup,
        ..
    } = arrival;
    let caller = match caller {
        Ok(known) if head_before_lookup => Ok(known),
        Ok(known) => caller::identify::recheck(shared, &known)
            .await
            .map(|()| known),
        Err(e) => Err(e),
    };
    let watcher = caller
        .as_ref()
        .ok()
        .and_then(|known| caller::holder::watch(Arc::clone(shared), known, conn.raise.clone()));
    Settled {
        conn,
        caller,
        _slot: slot,
        _watcher: watcher,
    }
}

/// Reads, without waiting, what the client has sent so far into `buf` (one read of at most
/// 4 KiB, within `max` head bytes); the usual reader then parses the head from `buf`, and
/// reads more only if it is not whole yet.
fn read_ready(stream: &TcpStream, buf: &mut BytesMut, max: usize) {
    use std::io::Read;
    let mut chunk = [0u8; 4096];
    let want = chunk.len().min(max.saturating_sub(buf.len()));
    // The socket is non-blocking: nothing there yet is `WouldBlock`, read later as usual.
    if want > 0
        && let Ok(n) = (&*socket2::SockRef::from(stream)).read(&mut chunk[..want])
    {
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// How long a new connection waits for its client's first head, when it has not arrived
/// whole yet, before its caller is looked up anyway (see [`first_head_soon`]).
const HEAD_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// Reads what the client has sent into `buf`, at once (see [`read_ready`]) and then, while
/// its first head is not whole, as it arrives for at most `wait` ([`HEAD_WAIT`]). A client
/// sends its head as it connects: waiting that long lets the caller's lookup be made after
/// the head arrived, which then needs no re-check of its own (`settle`). What the lookup proves of
/// the head is what the re-check would have: who held the socket at a look made after the
/// head was written (a lookup before it, then a re-check, proves no more of the head: its
/// writer need only hold the socket when it writes). A client that sends nothing within
/// the wait is looked up then, as before, and its head re-checked when it comes.
async fn first_head_soon(
    stream: &TcpStream,
    buf: &mut BytesMut,
    max: usize,
    wait: std::time::Duration,
) {
    read_ready(stream, buf, max);
    let deadline = tokio::time::Instant::now() + wait;
    let mut chunk = [0u8; 4096];
    while !head::is_whole(buf) && buf.len() < max {
        match tokio::time::timeout_at(deadline, stream.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return,
        }
        let want = chunk.len().min(max.saturating_sub(buf.len()));
        // A read that would block clears the runtime's readiness: the next wait is a real one.
        match stream.try_read(&mut chunk[..want]) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// Serves one explicit-proxy client connection to the end: its first request head names
/// the target (`CONNECT host:port`, or an absolute-form request).
pub async fn serve(shared: Arc<Shared>, stream: TcpStream, peer: SocketAddr, local: SocketAddr) {
    // A proxy that delays small writes stalls TLS handshakes by 40 ms (Nagle + delayed ACK).
    let _ = stream.set_nodelay(true);
    let client = Client {
        stream: ClientStream::Tcp(stream),
        peer,
        local,
        cert: None,
        buf: BytesMut::new(),
    };
    serve_client(shared, client).await;
}

/// An explicit-proxy client as its listener hands it over: its transport, the address it is
/// (the socket's peer, or the one a trusted balancer's PROXY header gave), sluice's address,
/// the client certificate of its TLS hop, and what was read ahead of the transport.
#[derive(Debug)]
pub struct Client {
    pub stream: ClientStream,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub cert: Option<Arc<PeerCert>>,
    /// Bytes of the client's first request already read (after a PROXY header).
    pub buf: BytesMut,
}

/// [`serve`], for a client however it arrived (plain, after a PROXY header, over TLS).
pub async fn serve_client(shared: Arc<Shared>, client: Client) {
    let _active = crate::metrics::connection_active();
    let Client {
        stream,
        peer,
        local,
        cert,
        buf,
    } = client;
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = if buf.is_empty() {
        BytesMut::with_capacity(4096)
    } else {
        buf
    };
    let limits = &shared.limits;
    // The head is most likely here by now (the client sent it as it connected): read before
    // the lookup, so that a head already whole needs no re-check (`settle`).
    if let Some(tcp) = rd.tcp() {
        first_head_soon(tcp, &mut buf, limits.max_head_bytes, HEAD_WAIT).await;
    }
    let head_before_lookup = head::is_whole(&buf);
    // The one-off phases are boxed: the connection's future keeps only the size of the
    // state it idles in.
    let arriving = arrive_presenting(
        &shared,
        peer,
        local,
        cert,
        FirstHead::MayName,
        head_before_lookup,
    );
    let arrival = match Box::pin(arriving).await {
        Ok(a) => a,
        Err(limited) => {
            // Boxed: its 4 KiB drain buffer would otherwise be part of every connection's
            // future.
            Box::pin(refuse_limited(&shared, limited, rd, wr)).await;
            return;
        }
    };
    let reading = Box::pin(tokio::time::timeout(
        limits.head_timeout,
        head::read_head(&mut rd, &mut buf, limits.max_head_bytes),
    ));
    let read = tokio::select! {
        read = reading => Some(read),
        () = displaced(arrival.awaiting.as_ref()) => None,
    };
    let Some(read) = read else {
        let refusal = Refusal::new(
            Code::TooManyConnections,
            "sluice's connections awaiting their proxy credentials are all taken and this one \
             had waited longest for its first request; send the request as you connect, or retry",
        );
        refuse_early(&shared, &arrival.conn, &mut wr, refusal, None).await;
        return;
    };
    let head = match read {
        Ok(Ok(h)) => h,
        Ok(Err(HeadError::Closed)) => return,
        Ok(Err(e)) if crate::proxy_protocol::is_header(&buf) => {
            // A PROXY protocol header from a peer not trusted to send one (`listen::front`
            // reads it from those that are): a client must not name its own address.
            let refusal = Refusal::new(Code::BadRequest,
                format!("a PROXY protocol header from {peer}, which --proxy-protocol-from does not trust: refused"),
            ).with_reason(format!("not a request head: {e}"));
            let known = arrival.caller.as_ref().ok();
            refuse_early(&shared, &arrival.conn, &mut wr, refusal, known).await;
            return;
        }
        Ok(Err(e)) => {
            let refusal = head_refusal(&e);
            let known = arrival.caller.as_ref().ok();
            let nowhere = audit::Destination {
                host: String::new(),
                port: 0,
                ip: None,
            };
            let audited = known.map(|k| Arc::clone(&k.audit));
            denial::smuggling_finding(&shared, &arrival.conn, audited, nowhere, &e);
            refuse_early(&shared, &arrival.conn, &mut wr, refusal, known).await;
            return;
        }
        Err(_) => {
            let refusal = Refusal::new(
                Code::RequestTimeout,
                format!(
                    "no complete request head within {} s",
                    limits.head_timeout.as_secs()
                ),
            );
            let known = arrival.caller.as_ref().ok();
            refuse_early(&shared, &arrival.conn, &mut wr, refusal, known).await;
            return;
        }
    };
    if is_ca_request(&head) {
        // Public, and needed before a client can trust anything sluice terminates: served to
        // any client, no tenant or caller needed.
        let _ = wr.write_all(&ca_response(&shared)).await;
        let _ = wr.shutdown().await;
        return;
    }
    let Some(arrival) = Box::pin(by_credentials(&shared, arrival, &head, &mut wr)).await else {
        return;
    };
    let Settled {
        conn,
        caller,
        _slot: _held,
        _watcher: _watching,
    } = Box::pin(settle(&shared, arrival)).await;
    let conn = &conn;
    if head.method.eq_ignore_ascii_case("CONNECT") {
        transports::tunnel::run(&shared, conn, caller, head, rd, wr, buf).await;
    } else {
        let known = caller.as_ref().ok().cloned();
        let session = transports::http1::Session {
            shared: &shared,
            conn,
            caller,
            route: transports::http1::Route::Forward,
            rd,
            wr,
            buf,
        };
        // Boxed: `select!` would hold a second copy of the future it is handed.
        let forwarded = Box::pin(transports::http1::serve(session, Some(head)));
        tokio::select! {
            () = forwarded => {}
            reason = conn.stop.wait() => stopped_forward(&shared, conn, known, reason),
        }
    }
}

/// The audit of a forwarded connection stopped from outside: its caller changed, or a reload
/// revoked the request it was serving (a tunnel's close event says so itself).
fn stopped_forward(
    shared: &Shared,
    conn: &Conn,
    known: Option<caller::identify::Known>,
    reason: client::stop::StopReason,
) {
    let revoked = reason.revoked();
    shared
        .audit
        .emit(&audit::Event::ConnectionClose(audit::ConnectionClose {
            time: SystemTime::now(),
            id: conn.id,
            via: Via::Forward,
            caller: known.map(|k| k.audit),
            src: conn.peer,
            // A revoked request's destination and entry; a caller change's are unknown here.
            dst: audit::Destination {
                host: revoked
                    .map(|(_, d)| d.host().to_string())
                    .unwrap_or_default(),
                port: revoked.map_or(0, |(_, d)| d.port()),
                ip: None,
            },
            policy: revoked.map(|(entry, _)| entry.to_string()),
            engine: reason.engine(Engine::L4),
            bytes_in: 0,
            bytes_out: 0,
            duration_ms: u64::try_from(conn.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            reason: reason.to_string(),
        }));
}

/// Answers a connection past its caller's limits at once (429) and audits it; then reads
/// (briefly) what the client sent, so that closing does not reset the answer away.
async fn refuse_limited(
    shared: &Shared,
    limited: Limited,
    mut rd: ClientRead,
    mut wr: ClientWrite,
) {
    let Limited {
        conn,
        caller,
        refusal,
    } = limited;
    let known = caller.as_ref().ok();
    let _ = wr.write_all(&refusal.to_bytes()).await;
    let _ = wr.shutdown().await;
    shared
        .audit
        .emit(&audit::Event::ConnectionOpen(audit::ConnectionOpen {
            time: SystemTime::now(),
            id: conn.id,
            via: Via::Connect,
            caller: known.map(|known| Arc::clone(&known.audit)),
            src: conn.peer,
            dst: audit::Destination {
                host: String::new(),
                port: 0,
                ip: None,
            },
            outcome: Outcome::Denied,
            policy: None,
            engine: Engine::Proxy,
            reason: Some(refusal.detail.clone()),
            status: refusal.status,
        }));
    // At most an eighth of the proxy's slots linger this way, all callers together.
    let cap = shared.limits.max_connections / 8;
    transports::unread::linger_refused(&mut rd, cap).await;
}

/// Audits a connection its listener refused before handing it over (a trusted balancer's
/// missing or malformed PROXY header, a failed TLS hop): `peer` as far as it is known,
/// `status` the answer it was given (0: closed unanswered).
pub(crate) fn audit_unreceived(shared: &Shared, peer: SocketAddr, reason: String, status: u16) {
    shared
        .audit
        .emit(&audit::Event::ConnectionOpen(audit::ConnectionOpen {
            time: SystemTime::now(),
            id: shared.next_id(),
            via: Via::Connect,
            caller: None,
            src: peer,
            dst: audit::Destination {
                host: String::new(),
                port: 0,
                ip: None,
            },
            outcome: Outcome::Denied,
            policy: None,
            engine: Engine::Proxy,
            reason: Some(reason),
            status,
        }));
}

/// Answers a connection refused before a target was known, and audits it.
async fn refuse_early(
    shared: &Shared,
    conn: &Conn,
    wr: &mut ClientWrite,
    refusal: Refusal,
    caller: Option<&caller::identify::Known>,
) {
    let _ = wr.write_all(&refusal.to_bytes()).await;
    let _ = wr.shutdown().await;

    shared
        .audit
        .emit(&audit::Event::ConnectionOpen(audit::ConnectionOpen {
            time: SystemTime::now(),
            id: conn.id,
            via: Via::Connect,
            caller: caller.map(|c| Arc::clone(&c.audit)),
            src: conn.peer,
            dst: audit::Destination {
                host: String::new(),
                port: 0,
                ip: None,
            },
            outcome: Outcome::Denied,
            policy: None,
            engine: Engine::HttpParser,
            reason: Some(refusal.detail.clone()),
            status: refusal.status,
        }));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair over loopback: sluice's side and the client's.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (server, client)
    }

    #[tokio::test]
    async fn what_is_there_is_read_at_once_and_nothing_waits_for_more() {
        let (server, mut client) = pair().await;
        let mut buf = BytesMut::new();
        // Nothing sent yet: no bytes, and no wait.
        read_ready(&server, &mut buf, 8192);
        assert!(buf.is_empty());
        client
            .write_all(b"CONNECT a.example:443 HTTP/1.1\r\n\r\n\x16\x03\x01")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        read_ready(&server, &mut buf, 8192);
        assert_eq!(
            &buf[..],
            b"CONNECT a.example:443 HTTP/1.1\r\n\r\n\x16\x03\x01"
        );
        // The usual reader takes the head from it, leaving what followed.
        let (mut rd, _wr) = server.into_split();
        let head = head::read_head(&mut rd, &mut buf, 8192).await.unwrap();
        assert_eq!(head.method, "CONNECT");
        assert_eq!(&buf[..], b"\x16\x03\x01");
    }

    /// A head sent in two writes, the second a little later: waited for, and whole before
    /// the lookup. A client that sends nothing is waited for no longer than the bound.
    #[tokio::test]
    async fn a_head_arriving_just_after_the_accept_is_waited_for_briefly() {
        let (server, mut client) = pair().await;
        client.write_all(b"CONNECT a.example:443 ").await.unwrap();
        let rest = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            client.write_all(b"HTTP/1.1\r\n\r\nabc").await.unwrap();
            client
        });
        let mut buf = BytesMut::new();
        let long = std::time::Duration::from_secs(10);
        first_head_soon(&server, &mut buf, 8192, long).await;
        assert_eq!(&buf[..], b"CONNECT a.example:443 HTTP/1.1\r\n\r\nabc");
        let _client = rest.await.unwrap();

        let (server, _silent) = pair().await;
        let mut buf = BytesMut::new();
        let started = std::time::Instant::now();
        first_head_soon(&server, &mut buf, 8192, HEAD_WAIT).await;
        assert!(buf.is_empty());
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[tokio::test]
    async fn never_past_the_head_limit() {
        let (server, mut client) = pair().await;
        client.write_all(&[b'a'; 100]).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let mut buf = BytesMut::new();
        read_ready(&server, &mut buf, 10);
        assert_eq!(buf.len(), 10);
        read_ready(&server, &mut buf, 10);
        assert_eq!(buf.len(), 10);
        // A closed client: nothing more, no error.
        drop(client);
        let mut rest = BytesMut::new();
        read_ready(&server, &mut rest, 4096);
        assert_eq!(rest.len(), 90);
    }
}
