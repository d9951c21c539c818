//! One connection's walk through sluice: target → caller → decision → destination → relay,
//! the same for every entry point (spec: "one pipeline").
//!
//! Owns the shared state of a running proxy (`Shared`), the per-connection entry point
//! (`serve`), the first request head, and the dispatch to `connect` (CONNECT tunnels) or
//! `forward` (absolute-form HTTP). The policy decision, the caller lookup and the destination
//! check live in `caller.rs`, the policy module and `destination.rs`, and both entry points
//! call the same ones.

pub mod admission;
pub mod caller;
pub mod connect;
mod counted;
pub mod destination;
pub mod doctor;
pub mod forward;
pub mod h2;
pub mod holder;
mod inject;
pub mod inspect;
pub mod judge;
pub mod target;
mod websocket;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use bytes::BytesMut;
use sluice_identity::IdentityResolver;
use sluice_resolver::Resolver;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::audit::{self, AuditSink, Engine, Outcome, Via};
use crate::http::head::{self, HeadError};
use crate::http::respond::Refusal;
use crate::policy::{Compat, Policy};

/// Timeouts and sizes; every wait on a peer has one (invariant 9).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest request head accepted (larger: 431).
    pub max_head_bytes: usize,
    /// Time allowed for the first request head.
    pub head_timeout: Duration,
    /// Time a kept-alive client connection may sit between requests.
    pub keepalive_timeout: Duration,
    /// Time allowed to establish an upstream TCP connection (per address).
    pub connect_timeout: Duration,
    /// Time allowed for upstream response headers once the request is sent (then 504).
    pub upstream_timeout: Duration,
    /// A tunnel or response stream with no bytes either way for this long is closed.
    pub idle_timeout: Duration,
    /// Concurrent client connections; past it, new ones get 503.
    pub max_connections: usize,
    /// How fast a client must send a request body (then 408).
    pub body_pace: crate::http::body::BodyPace,
    /// Concurrent connections of one caller (one executable); past it, 429.
    pub max_connections_per_caller: usize,
    /// New connections one caller may open per second (a token bucket of that size, refilled
    /// at that rate); past it, 429.
    pub max_new_connections_per_caller_per_sec: u32,
    /// A tunnel whose client has not sent a byte for this long after `200` is closed.
    pub unused_tunnel_timeout: Duration,
    /// How often the holder of an admitted connection's socket is checked again.
    pub caller_recheck_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 8192,
            head_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            upstream_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(3600),
            max_connections: 4096,
            body_pace: crate::http::body::BodyPace::default(),
            max_connections_per_caller: 1024,
            max_new_connections_per_caller_per_sec: 200,
            unused_tunnel_timeout: Duration::from_secs(60),
            caller_recheck_interval: Duration::from_secs(5),
        }
    }
}

/// Both sides of TLS termination.
#[derive(Debug)]
pub struct TlsState {
    pub terminator: crate::tls::server::Terminator,
    pub upstream: crate::tls::upstream::UpstreamTls,
}

/// What every connection shares: the policy snapshot, resolvers, audit, limits.
#[derive(Debug)]
pub struct Shared {
    pub policy: ArcSwap<Policy>,
    pub resolver: Resolver,
    pub identity: Arc<IdentityResolver>,
    pub audit: Arc<AuditSink>,
    pub limits: Limits,
    /// `--allow-loopback-upstream`: policies may reach 127.0.0.0/8 (tests only).
    pub allow_loopback: bool,
    /// Provider profiles and their secrets: which placeholder may become which secret where.
    pub credentials: Arc<crate::credentials::Bindings>,
    /// TLS termination (the CA's leaves and the verified upstream side); `None` when the CA
    /// could not be made, and then inspected endpoints are refused with 503.
    pub tls: Option<TlsState>,
    /// `--compat openshell` also changes one runtime rule: exactly declared hosts may resolve
    /// to private addresses (see `destination::plan_for`).
    pub compat: Compat,
    /// Per-caller connection limits (`--max-connections-per-caller` and the rate).
    pub callers: Arc<admission::CallerLimits>,
    next_id: AtomicU64,
}

impl Shared {
    #[allow(clippy::too_many_arguments)] // the shared parts of a running proxy, each distinct
    pub fn new(
        policy: Policy,
        resolver: Resolver,
        identity: Arc<IdentityResolver>,
        audit: Arc<AuditSink>,
        limits: Limits,
        allow_loopback: bool,
        compat: Compat,
        tls: Option<TlsState>,
        credentials: Arc<crate::credentials::Bindings>,
    ) -> Shared {
        let callers = Arc::new(admission::CallerLimits::new(
            limits.max_connections_per_caller,
            limits.max_new_connections_per_caller_per_sec,
            limits.max_connections,
        ));
        Shared {
            callers,
            policy: ArcSwap::from_pointee(policy),
            resolver,
            identity,
            audit,
            limits,
            allow_loopback,
            compat,
            tls,
            credentials,
            next_id: AtomicU64::new(1),
        }
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// One accepted client connection, and what is known about it so far.
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub started: std::time::Instant,
    /// Raised when the process identified as the caller no longer holds the socket.
    pub stop: holder::Stop,
}

/// Serves one client connection to the end.
pub async fn serve(shared: Arc<Shared>, stream: TcpStream, peer: SocketAddr, local: SocketAddr) {
    let _active = crate::metrics::connection_active();
    // A proxy that delays small writes stalls TLS handshakes by 40 ms (Nagle + delayed ACK).
    let _ = stream.set_nodelay(true);
    let (raise, stop) = holder::signal();
    let conn = Conn {
        id: shared.next_id(),
        peer,
        local,
        started: std::time::Instant::now(),
        stop,
    };
    let (mut rd, mut wr) = stream.into_split();
    // The caller, looked up at once: before it could hand the socket to another program.
    let accepted = caller::identify(&shared, peer, local).await;
    // Connections whose caller cannot be identified (refused later at the identity stage)
    // share one slot table entry, so that a flood of them cannot fill --max-connections.
    let exe = match &accepted {
        Ok(known) => known.exe.as_str(),
        Err(_) => admission::UNIDENTIFIED,
    };
    let _slot = match shared.callers.admit(exe, std::time::Instant::now()) {
        Ok(slot) => slot,
        Err(refused) => {
            let refusal = refused.refusal(exe);
            refuse_limited(&shared, &conn, rd, wr, refusal, accepted.as_ref().ok()).await;
            return;
        }
    };
    let mut buf = BytesMut::with_capacity(4096);
    let limits = &shared.limits;
    let head = match tokio::time::timeout(
        limits.head_timeout,
        head::read_head(&mut rd, &mut buf, limits.max_head_bytes),
    )
    .await
    {
        Ok(Ok(h)) => h,
        Ok(Err(HeadError::Closed)) => return,
        Ok(Err(e)) => {
            let refusal = head_refusal(&e);
            refuse_early(&shared, &conn, &mut wr, refusal, accepted.ok().as_ref()).await;
            return;
        }
        Err(_) => {
            let refusal = Refusal::new(
                408,
                "request_timeout",
                format!(
                    "no complete request head within {} s",
                    limits.head_timeout.as_secs()
                ),
            );
            refuse_early(&shared, &conn, &mut wr, refusal, accepted.ok().as_ref()).await;
            return;
        }
    };
    // The request is the caller's only if the process that connected still holds the socket.
    let caller = match accepted {
        Ok(known) => caller::recheck(&shared, &known).await.map(|()| known),
        Err(e) => Err(e),
    };
    let _watcher = caller
        .as_ref()
        .ok()
        .map(|known| holder::watch(Arc::clone(&shared), known.clone(), raise));
    if head.method.eq_ignore_ascii_case("CONNECT") {
        connect::run(&shared, &conn, caller, head, rd, wr, buf).await;
    } else {
        let known = caller.as_ref().ok().cloned();
        let forwarded = forward::serve(
            &shared,
            &conn,
            caller,
            forward::Route::Forward,
            Some(head),
            rd,
            wr,
            buf,
        );
        tokio::select! {
            () = forwarded => {}
            reason = conn.stop.wait() => stopped_forward(&shared, &conn, known, reason),
        }
    }
}

/// The audit of a forwarded connection closed because its caller changed (a tunnel's close
/// event says so itself).
fn stopped_forward(shared: &Shared, conn: &Conn, known: Option<caller::Known>, reason: String) {
    shared
        .audit
        .emit(&audit::Event::ConnectionClose(audit::ConnectionClose {
            time: SystemTime::now(),
            id: conn.id,
            via: Via::Forward,
            caller: known.map(|k| k.audit),
            src: conn.peer,
            dst: audit::Destination {
                host: String::new(),
                port: 0,
                ip: None,
            },
            policy: None,
            engine: Engine::Identity,
            bytes_in: 0,
            bytes_out: 0,
            duration_ms: u64::try_from(conn.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            reason,
        }));
}

/// Answers a connection past its caller's limits at once (429) and audits it; then reads
/// (briefly) what the client sent, so that closing does not reset the answer away.
async fn refuse_limited(
    shared: &Shared,
    conn: &Conn,
    mut rd: tokio::net::tcp::OwnedReadHalf,
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    refusal: Refusal,
    known: Option<&caller::Known>,
) {
    let _ = wr.write_all(&refusal.to_bytes()).await;
    let _ = wr.shutdown().await;
    shared
        .audit
        .emit(&audit::Event::ConnectionOpen(audit::ConnectionOpen {
            time: SystemTime::now(),
            id: conn.id,
            via: Via::Connect,
            caller: known.map(|known| known.audit.clone()),
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
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while matches!(
            tokio::io::AsyncReadExt::read(&mut rd, &mut sink).await,
            Ok(n) if n > 0
        ) {}
    })
    .await;
}

/// Records a security finding (Detection Finding 2004): credential misuse, or traffic that
/// would carry credentials uninspected.
#[allow(clippy::too_many_arguments)] // the parts of one finding
pub fn emit_finding(
    shared: &Shared,
    conn_id: u64,
    peer: SocketAddr,
    caller: Option<&caller::Known>,
    dst: audit::Destination,
    kind: &str,
    title: String,
    credential: Option<String>,
    policy: Option<String>,
) {
    shared.audit.emit(&audit::Event::Finding(audit::Finding {
        time: SystemTime::now(),
        id: conn_id,
        caller: caller.map(|c| c.audit.clone()),
        src: peer,
        dst,
        kind: kind.to_string(),
        title,
        credential,
        policy,
        severity: audit::Severity::High,
    }));
}

/// The refusal for a head that could not be read.
pub fn head_refusal(e: &HeadError) -> Refusal {
    match e {
        HeadError::TooLarge(max) => Refusal::new(
            431,
            "request_header_fields_too_large",
            format!("request head larger than {max} bytes"),
        ),
        other => Refusal::new(400, "bad_request", other.to_string()),
    }
}

/// Answers a connection refused before a target was known, and audits it.
async fn refuse_early(
    shared: &Shared,
    conn: &Conn,
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    refusal: Refusal,
    caller: Option<&caller::Known>,
) {
    let _ = wr.write_all(&refusal.to_bytes()).await;
    let _ = wr.shutdown().await;

    shared
        .audit
        .emit(&audit::Event::ConnectionOpen(audit::ConnectionOpen {
            time: SystemTime::now(),
            id: conn.id,
            via: Via::Connect,
            caller: caller.map(|c| c.audit.clone()),
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
