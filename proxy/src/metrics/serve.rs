//! The metrics listener (`--metrics-listen ADDR`): `GET /metrics` (OpenMetrics text from
//! `prometheus-client`), `GET /healthz` (the process answers) and `GET /readyz` (a valid
//! policy is loaded and the proxy listeners accept). Also the values read at each scrape
//! rather than counted (saturation bound, the audit sink's own counters).
//!
//! An agent may reach this port too. It must not be able to starve the scrapes and probes by
//! holding connections open: the accept loop never waits, a head must arrive within
//! [`HEAD_TIMEOUT`], each connection serves one request, and past [`MAX_CONNECTIONS`] a new
//! connection closes one still waiting for its head, the oldest of the busiest address.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
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
use tokio::sync::oneshot;

use crate::audit::AuditSink;

/// Connections served at once. Past it, a new connection closes an older one (see
/// [`Table::admit`]) rather than waiting: a scrape or a probe is never queued behind idle or
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
    let table = Arc::new(Mutex::new(Table::default()));
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                // Out of descriptors or similar: try again shortly rather than spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let (closer, closed) = oneshot::channel::<()>();
            let id = lock(&table).admit(peer.ip(), closer);
            let table = Arc::clone(&table);
            tokio::spawn(async move {
                let marks = Arc::clone(&table);
                let service = service_fn(move |req| {
                    lock(&marks).answering(id);
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
                lock(&table).leave(id);
            });
        }
    });
    Ok(bound)
}

fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One live connection: its client's address, whether its request head has arrived, and the
/// sender whose drop closes it.
#[derive(Debug)]
struct Slot {
    ip: IpAddr,
    answering: bool,
    _closer: oneshot::Sender<()>,
}

/// The live connections, by arrival order.
#[derive(Debug, Default)]
struct Table {
    next: u64,
    live: BTreeMap<u64, Slot>,
}

impl Table {
    /// Admits a connection from `ip`. When [`MAX_CONNECTIONS`] are live, one is closed first
    /// ([`Table::victim`]).
    fn admit(&mut self, ip: IpAddr, closer: oneshot::Sender<()>) -> u64 {
        if self.live.len() >= MAX_CONNECTIONS
            && let Some(victim) = self.victim()
        {
            // Dropping the sender closes that connection.
            self.live.remove(&victim);
        }
        let id = self.next;
        self.next += 1;
        self.live.insert(
            id,
            Slot {
                ip,
                answering: false,
                _closer: closer,
            },
        );
        id
    }

    /// The connection to close: one still waiting for its head (idle or slow: a scraper sends
    /// its head at once), and of those the oldest of the client address holding the most. A
    /// client flooding the port closes its own connections first while another address
    /// holds fewer; a request already being answered is closed only when every connection is
    /// (each lasts milliseconds).
    fn victim(&self) -> Option<u64> {
        let waiting = || self.live.iter().filter(|(_, s)| !s.answering);
        let mut per_ip: HashMap<IpAddr, usize> = HashMap::new();
        for (_, s) in waiting() {
            *per_ip.entry(s.ip).or_default() += 1;
        }
        match per_ip.into_iter().max_by_key(|(_, n)| *n) {
            // The map is in arrival order: the first of that address is its oldest.
            Some((busiest, _)) => waiting().find(|(_, s)| s.ip == busiest).map(|(id, _)| *id),
            None => self.live.keys().next().copied(),
        }
    }

    /// The connection's request head arrived: it is being answered.
    fn answering(&mut self, id: u64) {
        if let Some(s) = self.live.get_mut(&id) {
            s.answering = true;
        }
    }

    fn leave(&mut self, id: u64) {
        self.live.remove(&id);
    }
}

async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n"));
    }
    Ok(match req.uri().path() {
        "/metrics" => match super::global() {
            Some(m) => {
                let mut r = Response::new(Full::new(Bytes::from(m.encode())));
                if let Ok(v) = OPENMETRICS.parse() {
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

/// What the audit sink's queue holds and how often an emitter waited for room.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditQueue {
    pub depth: u64,
    pub backpressure_waits: u64,
}

/// The audit sink's bounded queue: events waiting for the writer, and how often an emitter
/// found it full and waited.
pub fn audit_queue(sink: &AuditSink) -> AuditQueue {
    AuditQueue {
        depth: sink.queue_depth() as u64,
        backpressure_waits: sink.backpressure_waits(),
    }
}

/// Values read at each scrape.
#[derive(Debug)]
pub struct ScrapeTime {
    pub max_connections: i64,
    pub audit: Option<Arc<AuditSink>>,
}

impl Collector for ScrapeTime {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let max = ConstGauge::new(self.max_connections);
        max.encode(encoder.encode_descriptor(
            "max_connections",
            "The --max-connections bound (saturation: active_connections / max_connections)",
            None,
            max.metric_type(),
        )?)?;
        let Some(sink) = &self.audit else {
            return Ok(());
        };
        let errors = ConstCounter::new(sink.write_errors());
        errors.encode(encoder.encode_descriptor(
            "audit_write_errors",
            "Audit lines that could not be written",
            None,
            errors.metric_type(),
        )?)?;
        let queue = audit_queue(sink);
        let depth = ConstGauge::new(i64::try_from(queue.depth).unwrap_or(i64::MAX));
        depth.encode(encoder.encode_descriptor(
            "audit_queue_depth",
            "Audit events waiting to be written",
            None,
            depth.metric_type(),
        )?)?;
        let waits = ConstCounter::new(queue.backpressure_waits);
        waits.encode(encoder.encode_descriptor(
            "audit_backpressure_waits",
            "Times an emitter waited for room in the audit queue",
            None,
            waits.metric_type(),
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_closes_the_oldest_of_the_busiest_address() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut t = Table::default();
        let mut receivers = Vec::new();
        let (tx, rx) = oneshot::channel();
        let scrape = t.admit(b, tx);
        let mut scrape_rx = rx;
        for _ in 1..MAX_CONNECTIONS {
            let (tx, rx) = oneshot::channel();
            receivers.push((t.admit(a, tx), rx));
        }
        assert_eq!(t.live.len(), MAX_CONNECTIONS);
        // One more from `a`: `a`'s oldest goes, the scrape from `b` (older still) stays.
        t.answering(receivers[1].0);
        let (tx, _rx) = oneshot::channel();
        let _ = t.admit(a, tx);
        assert_eq!(t.live.len(), MAX_CONNECTIONS);
        let (oldest_a, mut oldest_rx) = receivers.remove(0);
        assert!(!t.live.contains_key(&oldest_a));
        assert!(oldest_rx.try_recv().is_err(), "its sender was dropped");
        assert!(t.live.contains_key(&scrape));
        assert_eq!(
            scrape_rx.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
        // A connection being answered is passed over: `a`'s next oldest waiting one goes.
        let (answered, _) = &receivers[0];
        let (next_waiting, _) = &receivers[1];
        let (tx, _rx2) = oneshot::channel();
        let _ = t.admit(a, tx);
        assert!(t.live.contains_key(answered));
        assert!(!t.live.contains_key(next_waiting));
        t.leave(scrape);
        assert_eq!(t.live.len(), MAX_CONNECTIONS - 1);
    }
}
