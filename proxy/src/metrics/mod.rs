//! Prometheus metrics (`--metrics-listen`): the process-wide registry, the few timings the
//! pipeline reports itself, and the functions other parts call (reloads, DNS answers).
//!
//! Decisions, requests, injections, scrubs and findings are not reported by the pipeline:
//! they are counted from the audit events ([`events`], an audit observer), so every audited
//! decision is counted exactly once and the metrics always agree with the audit log. What
//! the events cannot say (how long an identity lookup or an upstream connect took, leaf-cache
//! hits, live connections) is observed here through free functions that cost one load of a
//! `OnceLock` when metrics are off.
//!
//! Every label set is bounded: decision, engine and result are closed sets; policy entries
//! and credential names come from the loaded configuration. A host or executable the loaded
//! policy names literally is its own label ([`labels`]); any other one is its own label only
//! when its traffic was allowed, through [`bounded::Bounded`] (the first N distinct values,
//! then `_other`), and denied traffic to names no policy names counts under one fixed value,
//! so names a sandboxed program makes up cannot take the slots allowed traffic needs. No
//! path, query or port ever becomes a label.

pub mod bounded;
pub mod classic;
pub mod events;
pub mod labels;
pub mod serve;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::audit::AuditSink;

/// Distinct host labels kept before the rest count as `_other`.
pub const MAX_HOSTS: usize = 256;
/// Distinct executable labels kept before the rest count as `_other`.
pub const MAX_BINARIES: usize = 64;

/// A decision as audit reported it: which entry and which engine.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub decision: &'static str,
    pub policy: String,
    pub engine: &'static str,
}

/// A decision by the calling executable (bounded).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BinaryLabels {
    pub kind: &'static str,
    pub decision: &'static str,
    pub binary: String,
}

/// A decision by destination host (bounded).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    pub kind: &'static str,
    pub decision: &'static str,
    pub host: String,
}

/// One label: a closed set (`result`, `decision`, `class`, `kind`, `answer`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub decision: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CredentialLabel {
    pub credential: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: &'static str,
}

/// Every metric sluice exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub(crate) connections: Family<DecisionLabels, Counter>,
    pub(crate) requests: Family<DecisionLabels, Counter>,
    pub(crate) by_binary: Family<BinaryLabels, Counter>,
    pub(crate) by_host: Family<HostLabels, Counter>,
    pub(crate) request_seconds: Family<OutcomeLabel, Histogram>,
    pub(crate) upstream_connect_seconds: Family<ResultLabel, Histogram>,
    pub(crate) identity_lookup_seconds: Family<ResultLabel, Histogram>,
    pub(crate) leaf_cache: Family<ResultLabel, Counter>,
    pub(crate) upstream_reused: Counter,
    pub(crate) injections: Family<CredentialLabel, Counter>,
    pub(crate) scrubs: Family<CredentialLabel, Counter>,
    pub(crate) findings: Family<KindLabel, Counter>,
    pub(crate) audit_events: Family<ClassLabel, Counter>,
    pub(crate) active_connections: Gauge,
    pub(crate) active_tunnels: Gauge,
    pub(crate) reloads: Family<ResultLabel, Counter>,
    pub(crate) connections_revoked: Counter,
    pub(crate) identity_descriptors_exhausted: Counter,
    pub(crate) identity_off_worker: Counter,
    pub(crate) dns: Family<ResultLabel, Counter>,
    pub(crate) otlp_dropped: Counter,
    pub(crate) hosts: bounded::Bounded,
    pub(crate) binaries: bounded::Bounded,
    /// The hosts and executables the loaded policy names literally.
    pub(crate) named: labels::NamedNow,
}

const REQUEST_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const CONNECT_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const IDENTITY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
];

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS.iter().copied())
}

fn connect_histogram() -> Histogram {
    Histogram::new(CONNECT_BUCKETS.iter().copied())
}

fn identity_histogram() -> Histogram {
    Histogram::new(IDENTITY_BUCKETS.iter().copied())
}

impl Metrics {
    /// A fresh registry. `max_connections` and the audit sink are read at each scrape
    /// (saturation and the sink's own counters).
    pub fn new(max_connections: usize, audit: Option<Arc<AuditSink>>) -> Metrics {
        let mut registry = Registry::with_prefix("sluice");
        let connections = Family::<DecisionLabels, Counter>::default();
        let requests = Family::<DecisionLabels, Counter>::default();
        let by_binary = Family::<BinaryLabels, Counter>::default();
        let by_host = Family::<HostLabels, Counter>::default();
        let request_seconds = Family::<OutcomeLabel, Histogram>::new_with_constructor(
            request_histogram as fn() -> Histogram,
        );
        let upstream_connect_seconds = Family::<ResultLabel, Histogram>::new_with_constructor(
            connect_histogram as fn() -> Histogram,
        );
        let identity_lookup_seconds = Family::<ResultLabel, Histogram>::new_with_constructor(
            identity_histogram as fn() -> Histogram,
        );
        let leaf_cache = Family::<ResultLabel, Counter>::default();
        let upstream_reused = Counter::default();
        let injections = Family::<CredentialLabel, Counter>::default();
        let scrubs = Family::<CredentialLabel, Counter>::default();
        let findings = Family::<KindLabel, Counter>::default();
        let audit_events = Family::<ClassLabel, Counter>::default();
        let active_connections = Gauge::default();
        let active_tunnels = Gauge::default();
        let reloads = Family::<ResultLabel, Counter>::default();
        let connections_revoked = Counter::default();
        let identity_descriptors_exhausted = Counter::default();
        let identity_off_worker = Counter::default();
        let dns = Family::<ResultLabel, Counter>::default();
        let otlp_dropped = Counter::default();
        registry.register(
            "connections",
            "Connection decisions (audit Network Activity Open events), by decision, policy entry and engine",
            connections.clone(),
        );
        registry.register(
            "requests",
            "HTTP requests judged (audit HTTP Activity events), by decision, policy entry and engine",
            requests.clone(),
        );
        registry.register(
            "decisions_by_binary",
            "Connection and request decisions by calling executable (one a policy names; else, when allowed, the first 64 distinct, then _other; else _unlisted)",
            by_binary.clone(),
        );
        registry.register(
            "decisions_by_host",
            "Connection and request decisions by destination host (one a policy names; else, when allowed, the first 256 distinct, then _other; else _unlisted)",
            by_host.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from request head to the end of the response, by decision (millisecond resolution)",
            request_seconds.clone(),
        );
        registry.register(
            "upstream_connect_duration_seconds",
            "Time to dial an upstream (every vetted address in turn), by result",
            upstream_connect_seconds.clone(),
        );
        registry.register(
            "identity_lookup_duration_seconds",
            "Time to identify the caller of a new connection from its socket, by result",
            identity_lookup_seconds.clone(),
        );
        registry.register(
            "upstream_reused",
            "Upstream connections taken from the pool (same caller and destination) instead of dialled",
            upstream_reused.clone(),
        );
        registry.register(
            "leaf_cache",
            "TLS leaf certificate lookups, by result (hit or miss: a miss mints a leaf)",
            leaf_cache.clone(),
        );
        registry.register(
            "credential_injections",
            "Requests a credential was injected into, by credential name",
            injections.clone(),
        );
        registry.register(
            "credential_scrubs",
            "Responses an injected credential was scrubbed from, by credential name",
            scrubs.clone(),
        );
        registry.register(
            "findings",
            "Detection findings (credential misuse, uninspectable credential traffic), by type",
            findings.clone(),
        );
        registry.register(
            "audit_events",
            "Audit events written, by class",
            audit_events.clone(),
        );
        registry.register(
            "active_connections",
            "Client connections being served now",
            active_connections.clone(),
        );
        registry.register(
            "active_tunnels",
            "CONNECT tunnels established and not yet closed",
            active_tunnels.clone(),
        );
        registry.register(
            "reloads",
            "Configuration reloads, by result (ok or failed)",
            reloads.clone(),
        );
        registry.register(
            "connections_revoked",
            "Live connections closed because a reloaded policy no longer allows them",
            connections_revoked.clone(),
        );
        registry.register(
            "identity_descriptors_exhausted",
            "Caller identifications (lookups, confirmations, re-checks) that failed because sluice ran out of file descriptors; each such connection or request was refused or closed",
            identity_descriptors_exhausted.clone(),
        );
        registry.register(
            "identity_lookups_off_worker",
            "Caller lookups, confirmations and re-checks too large to run in place on a worker (512 descriptors' worth of /proc or more: a caller whose family has hundreds of processes or threads, or thousands of descriptors), run again in full under block_in_place",
            identity_off_worker.clone(),
        );
        registry.register(
            "dns_queries",
            "DNS queries answered by sluice's responder, by result (answered; refused, each audited; rate_limited, refused past a client's rate limit without an audit event each; dropped, UDP questions not read while 256 were being answered)",
            dns.clone(),
        );
        registry.register(
            "otlp_dropped",
            "Audit records and spans dropped because the OTLP export queue was full",
            otlp_dropped.clone(),
        );
        registry.register_collector(Box::new(serve::ScrapeTime {
            max_connections: max_connections as i64,
            audit,
        }));
        // Closed label sets start at zero, so that rates and alerts see them before the
        // first event.
        for result in ["ok", "error"] {
            let _ = upstream_connect_seconds.get_or_create(&ResultLabel { result });
            let _ = identity_lookup_seconds.get_or_create(&ResultLabel { result });
        }
        for result in ["hit", "miss"] {
            let _ = leaf_cache.get_or_create(&ResultLabel { result });
        }
        for result in ["ok", "failed"] {
            let _ = reloads.get_or_create(&ResultLabel { result });
        }
        for result in ["answered", "refused", "rate_limited", "dropped"] {
            let _ = dns.get_or_create(&ResultLabel { result });
        }
        Metrics {
            registry,
            connections,
            requests,
            by_binary,
            by_host,
            request_seconds,
            upstream_connect_seconds,
            identity_lookup_seconds,
            leaf_cache,
            upstream_reused,
            injections,
            scrubs,
            findings,
            audit_events,
            active_connections,
            active_tunnels,
            reloads,
            connections_revoked,
            identity_descriptors_exhausted,
            identity_off_worker,
            dns,
            otlp_dropped,
            hosts: bounded::Bounded::new(MAX_HOSTS),
            binaries: bounded::Bounded::new(MAX_BINARIES),
            named: labels::NamedNow::default(),
        }
    }

    /// Reads `identity`'s re-check counts at each scrape (`identity_rechecks_*`).
    pub fn read_rechecks_of(&mut self, identity: Arc<sluice_identity::IdentityResolver>) {
        self.registry
            .register_collector(Box::new(serve::Rechecks(identity)));
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

static METRICS: OnceLock<Metrics> = OnceLock::new();
static READY: AtomicBool = AtomicBool::new(false);

/// Makes `metrics` the process's registry and starts counting audit events into it. Once per
/// process; a second call changes nothing and returns false.
pub fn install(metrics: Metrics) -> bool {
    if METRICS.set(metrics).is_err() {
        return false;
    }
    if let Some(m) = METRICS.get() {
        crate::audit::observe::install(Arc::new(events::Counting(m)));
    }
    true
}

/// The process's registry, when `--metrics-listen` installed one.
pub fn global() -> Option<&'static Metrics> {
    METRICS.get()
}

/// A configuration was loaded (at start or by a reload): the hosts and executables its
/// policies name literally get their own labels from now on. `(tenant, policy)`: the local
/// policy (`None`) and each gateway tenant's, each naming its own hosts.
pub fn policy_loaded<'p>(
    policies: impl IntoIterator<Item = (Option<&'p str>, &'p crate::policy::Policy)>,
) {
    if let Some(m) = global() {
        m.named.set(labels::Named::of_all(policies));
    }
}

/// `/readyz`: a valid policy is loaded and the proxy listeners accept.
pub fn set_ready(ready: bool) {
    READY.store(ready, Ordering::Release);
}

pub fn is_ready() -> bool {
    READY.load(Ordering::Acquire)
}

fn result_of(ok: bool) -> &'static str {
    if ok { "ok" } else { "error" }
}

/// Times the caller lookup of a new connection.
pub fn identity_lookup<T, E>(lookup: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let Some(m) = global() else { return lookup() };
    let started = Instant::now();
    let result = lookup();
    observe(
        &m.identity_lookup_seconds,
        result_of(result.is_ok()),
        started.elapsed(),
    );
    result
}

/// Times an upstream dial.
pub async fn upstream_connect<T, E>(dial: impl Future<Output = Result<T, E>>) -> Result<T, E> {
    let Some(m) = global() else {
        return dial.await;
    };
    let started = Instant::now();
    let result = dial.await;
    observe(
        &m.upstream_connect_seconds,
        result_of(result.is_ok()),
        started.elapsed(),
    );
    result
}

fn observe(family: &Family<ResultLabel, Histogram>, result: &'static str, took: Duration) {
    family
        .get_or_create(&ResultLabel { result })
        .observe(took.as_secs_f64());
}

/// A TLS leaf looked up in the cache: `hit`, or a miss that mints one.
pub fn leaf_cache(hit: bool) {
    if let Some(m) = global() {
        let result = if hit { "hit" } else { "miss" };
        m.leaf_cache.get_or_create(&ResultLabel { result }).inc();
    }
}

/// An upstream connection taken from the pool instead of dialled.
pub fn upstream_reused() {
    if let Some(m) = global() {
        m.upstream_reused.inc();
    }
}

/// A configuration reload: `ok`, or failed (the last good configuration stays).
pub fn reload(ok: bool) {
    if let Some(m) = global() {
        let result = if ok { "ok" } else { "failed" };
        m.reloads.get_or_create(&ResultLabel { result }).inc();
    }
}

/// Live connections a reload stopped (its policy no longer allows them).
pub fn connections_revoked(n: usize) {
    if let Some(m) = global()
        && n > 0
    {
        m.connections_revoked.inc_by(n as u64);
    }
}

/// A caller identification that failed for want of file descriptors.
pub fn identity_descriptors_exhausted() {
    if let Some(m) = global() {
        m.identity_descriptors_exhausted.inc();
    }
}

/// A caller lookup, confirmation or re-check that stopped at its in-place limit and runs
/// again in full where it blocks no worker.
pub fn identity_off_worker() {
    if let Some(m) = global() {
        m.identity_off_worker.inc();
    }
}

/// A policy DNS question refused past its client's rate limit without an audit event of its
/// own (the first of each burst is audited, and counted as `refused` from that event).
pub fn dns_rate_limited() {
    if let Some(m) = global() {
        m.dns
            .get_or_create(&ResultLabel {
                result: "rate_limited",
            })
            .inc();
    }
}

/// A UDP question to the policy DNS dropped because the most it answers at once were in
/// flight.
pub fn dns_dropped() {
    if let Some(m) = global() {
        m.dns
            .get_or_create(&ResultLabel { result: "dropped" })
            .inc();
    }
}

/// Records dropped by the OTLP export (its queue was full).
pub fn otlp_dropped(n: u64) {
    if let Some(m) = global() {
        m.otlp_dropped.inc_by(n);
    }
}

/// A client connection being served; the gauge goes down when the guard drops.
#[derive(Debug)]
pub struct Active(Option<&'static Metrics>);

pub fn connection_active() -> Active {
    let m = global();
    if let Some(m) = m {
        m.active_connections.inc();
    }
    Active(m)
}

impl Drop for Active {
    fn drop(&mut self) {
        if let Some(m) = self.0 {
            m.active_connections.dec();
        }
    }
}
