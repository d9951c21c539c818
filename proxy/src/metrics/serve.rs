//! The metrics listener (`--metrics-listen ADDR`): `GET /metrics` (OpenMetrics text from
//! `prometheus-client` when the scraper asks for it, as Prometheus does, else the same samples
//! in the Prometheus text format 0.0.4 that `curl` and `promtool check metrics` read),
//! `GET /healthz` (the process answers) and `GET /readyz` (a valid policy is loaded and the
//! proxy listeners accept). Also the values read at each scrape
//! rather than counted (saturation bound, the audit sink's own counters).
//!
//! An agent may reach this port too. It must not be able to starve the scrapes and probes by
//! holding connections open: the accept loop never waits, a head must arrive within
//! [`HEAD_TIMEOUT`], each connection serves one request, and past [`MAX_CONNECTIONS`] a new
//! connection closes one still waiting for its head, the oldest of the busiest address.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use tokio::net::TcpListener;

use super::classic;
use crate::audit::AuditSink;
use crate::slots::Slots;

/// Connections served at once. Past it, a new connection closes an older one (see
/// [`Slots::admit`]) rather than waiting: a scrape or a probe is never queued behind idle or
/// slow clients.
pub const MAX_CONNECTIONS: usize = 64;
/// A client must send its whole request head within this (a scraper sends it at once).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// A connection's whole life: one request and its answer (no keep-alive).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `addr` and serves the endpoints until the process ends. Returns the bound address.
pub async fn start(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let slots = Slots::new(MAX_CONNECTIONS, MAX_CONNECTIONS);
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                // Out of descriptors or similar: try again shortly rather than spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let (slot, closed) = slots.admit(peer.ip());
            tokio::spawn(async move {
                let slot = Arc::new(slot);
                let marks = Arc::clone(&slot);
                let service = service_fn(move |req| {
                    // The head arrived: no longer idle.
                    marks.busy(true);
                    answer(req)
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEAD_TIMEOUT)
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(stream), service);
                tokio::select! {
                    _ = tokio::time::timeout(CONNECTION_TIMEOUT, conn) => {}
                    // Another connection needed the slot: this one is dropped, and so closed.
                    _ = closed => {}
                }
                drop(slot);
            });
        }
    });
    Ok(bound)
}

async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n"));
    }
    Ok(match req.uri().path() {
        "/metrics" => match super::global() {
            Some(m) => {
                let accept = req
                    .headers()
                    .get(hyper::header::ACCEPT)
                    .and_then(|v| v.to_str().ok());
                let (body, content_type) = if classic::wants_openmetrics(accept) {
                    (m.encode(), OPENMETRICS)
                } else {
                    (classic::render(&m.encode()), classic::CONTENT_TYPE)
                };
                let mut r = Response::new(Full::new(Bytes::from(body)));
                if let Ok(v) = content_type.parse() {
                    r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
                }
                r
            }
            None => text(StatusCode::SERVICE_UNAVAILABLE, "metrics not installed\n"),
        },
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if super::is_ready() => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: /metrics, /healthz, /readyz\n",
        ),
    })
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r
}

/// Values read at each scrape.
#[derive(Debug)]
pub struct ScrapeTime {
    pub max_connections: i64,
    pub audit: Option<Arc<AuditSink>>,
}

/// A write to the audit target under way for longer than this counts as failing (a pipe
/// nobody reads, a hung file system).
pub const AUDIT_STALL_MS: u64 = 1000;

impl Collector for ScrapeTime {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        gauge(
            &mut encoder,
            "max_connections",
            "The --max-connections bound (saturation: active_connections / max_connections)",
            self.max_connections,
        )?;
        let Some(sink) = &self.audit else {
            return Ok(());
        };
        let Some(spool) = sink.spool() else {
            return Ok(());
        };
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        let failing =
            spool.failing() || spool.stalled(std::time::SystemTime::now(), AUDIT_STALL_MS);
        gauge(
            &mut encoder,
            "audit_sink_failing",
            "1 while the audit target does not take records (its last write failed, or one has been under way for more than a second), else 0",
            i64::from(failing),
        )?;
        gauge(
            &mut encoder,
            "audit_failing_closed",
            "1 while the audit spool is full and sluice refuses new connections and requests (503 audit_unavailable; --audit-on-failure closed), else 0",
            i64::from(spool.refusing()),
        )?;
        gauge(
            &mut encoder,
            "audit_spool_records",
            "Audit records emitted and not yet written (the audit spool)",
            n(spool.records()),
        )?;
        gauge(
            &mut encoder,
            "audit_spool_bytes",
            "Memory the audit records not yet written hold, in bytes",
            n(spool.bytes()),
        )?;
        gauge(
            &mut encoder,
            "audit_spool_max_records",
            "The --audit-spool-max-records bound (the spool is full past it)",
            n(spool.limits.records),
        )?;
        gauge(
            &mut encoder,
            "audit_spool_max_bytes",
            "The --audit-spool-max-bytes bound (the spool is full past it)",
            n(spool.limits.bytes),
        )?;
        counter(
            &mut encoder,
            "audit_spooled",
            "Audit records held in the spool by a failed write, to be written when the target recovers",
            spool.spooled(),
        )?;
        counter(
            &mut encoder,
            "audit_lost",
            "Audit records never written: past the spool's limits (with --audit-on-failure open, or past the closed mode's reserve), or still unwritten at exit",
            spool.lost(),
        )?;
        counter(
            &mut encoder,
            "audit_refused",
            "Connections and requests refused with 503 audit_unavailable because the audit spool was full",
            spool.refused(),
        )?;
        counter(
            &mut encoder,
            "audit_write_errors",
            "Failed writes to the audit target (each failing write is tried again)",
            spool.write_errors(),
        )?;
        counter(
            &mut encoder,
            "log_lines_dropped",
            "Human lines (stderr) dropped because stderr did not take them in time",
            sink.log_lines_dropped(),
        )
    }
}

/// The caller re-checks passed so far, read from the resolver at each scrape: how many read
/// the family snapshot kept with the caller, and how many walked its fork family
/// (docs/identity.md, "Family snapshots").
#[derive(Debug)]
pub struct Rechecks(pub Arc<sluice_identity::IdentityResolver>);

impl Collector for Rechecks {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let passed = self.0.rechecks();
        counter(
            &mut encoder,
            "identity_rechecks_snapshot",
            "Caller re-checks passed on the kept snapshot of the caller's fork family (a few reads)",
            passed.by_snapshot,
        )?;
        counter(
            &mut encoder,
            "identity_rechecks_walked",
            "Caller re-checks passed after walking the caller's fork family (every ancestor and descendant)",
            passed.walked,
        )
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(value);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(value);
    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)
}
