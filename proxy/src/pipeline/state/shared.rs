//! What every connection of a running proxy shares (`Shared`: the policy snapshot,
//! resolvers, audit, limits, credentials, TLS, the live connections), and the limits
//! themselves.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use sluice_identity::IdentityResolver;
use sluice_resolver::Resolver;

use super::caller_limits;
use super::live::{InForce, Live};
use crate::audit::AuditSink;
use crate::credentials::Bindings;
use crate::policy::{Compat, Policy};
use crate::tenants::{Claim, Table};

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
    /// Swapped whole on reload; a request loads it once.
    pub credentials: ArcSwap<Bindings>,
    /// On a gateway (`--tenants`), the tenants, each with its own policy and credentials
    /// (then `policy` and `credentials` above serve no caller); empty otherwise. Swapped
    /// whole on reload.
    pub tenants: ArcSwap<Table>,
    /// Wrong proxy credentials per client address, which throttle its next attempts (kept
    /// across reloads).
    pub(crate) failed_logins: crate::tenants::guesses::FailedLogins,
    /// TLS termination (the CA's leaves and the verified upstream side); `None` when the CA
    /// could not be made, and then inspected endpoints are refused with 503.
    pub tls: Option<TlsState>,
    /// `--compat openshell` also changes one runtime rule: exactly declared hosts may resolve
    /// to private addresses (see `destination::plan_for`).
    pub compat: Compat,
    /// Per-caller connection limits (`--max-connections-per-caller` and the rate).
    pub callers: Arc<caller_limits::CallerLimits>,
    /// The admitted connections alive now, re-judged after a reload (`live.rs`,
    /// `connection::hold`).
    pub(crate) live: Live,
    /// Idle upstream connections of inspected tunnels, kept per caller and destination.
    pub(crate) pool: Arc<super::pool::Pool>,
    /// The audit form of live connections' callers, one per unchanged process (`caller.rs`).
    pub(crate) seen: super::seen::Seen,
    /// The thread that runs the periodic re-checks of every connection's caller (`rechecks.rs`).
    pub(crate) rechecks: super::rechecks::Rechecks,
    /// Raised on SIGTERM: the listeners stop accepting and idle kept-alive connections close
    /// (`cli::run` waits for the rest).
    pub drain: crate::drain::Drain,
    next_id: AtomicU64,
}

/// What a running proxy is built from (see [`Shared`]'s fields).
#[derive(Debug)]
pub struct Parts {
    pub policy: Policy,
    pub resolver: Resolver,
    pub identity: Arc<IdentityResolver>,
    pub audit: Arc<AuditSink>,
    pub limits: Limits,
    pub allow_loopback: bool,
    pub compat: Compat,
    pub tls: Option<TlsState>,
    pub credentials: Arc<Bindings>,
    pub tenants: Table,
}

impl Shared {
    pub fn new(parts: Parts) -> Shared {
        let Parts {
            policy,
            resolver,
            identity,
            audit,
            limits,
            allow_loopback,
            compat,
            tls,
            credentials,
            tenants,
        } = parts;
        let callers = Arc::new(caller_limits::CallerLimits::new(
            limits.max_connections_per_caller,
            limits.max_new_connections_per_caller_per_sec,
            limits.max_connections,
        ));
        Shared {
            callers,
            pool: Arc::default(),
            seen: super::seen::Seen::default(),
            rechecks: super::rechecks::Rechecks::default(),
            failed_logins: crate::tenants::guesses::FailedLogins::default(),
            policy: ArcSwap::from_pointee(policy),
            resolver,
            identity,
            audit,
            limits,
            allow_loopback,
            compat,
            tls,
            credentials: ArcSwap::new(credentials),
            tenants: ArcSwap::from_pointee(tenants),
            live: Live::default(),
            drain: crate::drain::Drain::default(),
            next_id: AtomicU64::new(1),
        }
    }

    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Stops every live connection (tunnels, requests in flight) with `why`: the end of a
    /// drain whose time ran out. Each one's close event says why. Returns how many.
    pub fn stop_all(&self, why: &str) -> usize {
        self.live
            .stop_all(&crate::pipeline::client::stop::StopReason::Shutdown(
                why.to_string(),
            ))
    }
}

impl InForce for Shared {
    /// A tenant's policy now; a tenant a reload removed (or that no longer claims the
    /// connection) has none: everything is denied.
    fn policy(&self, tenant: Option<&Claim>) -> Arc<Policy> {
        match tenant {
            None => self.policy.load_full(),
            Some(claim) => match self.tenants.load().current(claim) {
                Some(t) => Arc::clone(&t.policy),
                None => Arc::new(Policy::empty()),
            },
        }
    }

    fn credentials(&self, tenant: Option<&Claim>) -> Arc<Bindings> {
        match tenant {
            None => self.credentials.load_full(),
            Some(claim) => match self.tenants.load().current(claim) {
                Some(t) => Arc::clone(&t.credentials),
                None => Arc::new(Bindings::default()),
            },
        }
    }
}
