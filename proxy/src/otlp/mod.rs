//! OpenTelemetry export (`--otlp-endpoint`, `OTEL_EXPORTER_OTLP_*`): every audit event as an
//! OTLP log record (the OCSF JSON line as body, its fields as attributes) and every HTTP
//! request as a span, over http/protobuf through the `opentelemetry-otlp` exporters.
//!
//! Never on the data path: the audit observer copies the event into a bounded queue and
//! returns (a full queue drops the event from the export, never from the audit log). One
//! dedicated thread batches (up to [`MAX_BATCH`] events or [`BATCH_WAIT`]), turns each event
//! into its redacted OCSF line, and exports. Every record lost (queue full, or a batch the
//! collector did not take after the exporter's retries) is counted in
//! `sluice_otlp_dropped_total`, and the first loss is audited once, as a Detection Finding
//! `sluice.otlp.records_dropped` (a blinded export is a security concern).

pub mod config;
pub mod record;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::InstrumentationScope;
use opentelemetry::logs::{Logger as _, LoggerProvider as _};
use opentelemetry::trace::SpanContext;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::{LogBatch, LogExporter as _, SdkLogRecord, SdkLoggerProvider};
use opentelemetry_sdk::trace::SpanExporter as _;
use ring::rand::SecureRandom;

pub use config::{ConfigError, OtlpConfig};

use crate::audit::observe::Observer;
use crate::audit::{self, AuditSink, Event};

/// Events waiting for the exporter thread; past it, events are dropped from the export.
pub const QUEUE: usize = 4096;
/// Events in one export request.
pub const MAX_BATCH: usize = 512;
/// Longest an event waits for its batch to fill.
pub const BATCH_WAIT: Duration = Duration::from_secs(1);
/// Time allowed for one export request, retries included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The finding type of the one audit event that reports lost records.
pub const FINDING_DROPPED: &str = "sluice.otlp.records_dropped";

/// Why export could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot set up the OTLP {signal} exporter: {source}")]
    Exporter {
        signal: &'static str,
        source: opentelemetry_otlp::ExporterBuildError,
    },
    #[error("cannot start the OTLP export thread: {0}")]
    Thread(std::io::Error),
}

enum Msg {
    Event(Box<Event>),
    /// Export what is queued, then answer.
    Flush(SyncSender<()>),
}

/// The audit observer: a bounded hand-off to the exporter thread.
struct Feed {
    tx: SyncSender<Msg>,
    dropped: Arc<AtomicU64>,
}

impl Observer for Feed {
    fn observe(&self, event: &Event) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.tx.try_send(Msg::Event(Box::new(event.clone())))
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            crate::metrics::otlp_dropped(1);
        }
    }
}

static FEED: OnceLock<SyncSender<Msg>> = OnceLock::new();

struct Exporters {
    logs: Option<opentelemetry_otlp::LogExporter>,
    traces: Option<opentelemetry_otlp::SpanExporter>,
}

/// Starts exporting every audit event from now on (once per process).
pub fn start(config: &OtlpConfig, audit: Arc<AuditSink>) -> Result<(), StartError> {
    let resource = resource(&audit);
    let logs = match &config.logs {
        Some(url) => {
            let mut e = opentelemetry_otlp::LogExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(url.clone())
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|source| StartError::Exporter {
                    signal: "logs",
                    source,
                })?;
            e.set_resource(&resource);
            Some(e)
        }
        None => None,
    };
    let traces = match &config.traces {
        Some(url) => {
            let mut e = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(url.clone())
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|source| StartError::Exporter {
                    signal: "traces",
                    source,
                })?;
            e.set_resource(&resource);
            Some(e)
        }
        None => None,
    };
    let (tx, rx) = mpsc::sync_channel(QUEUE);
    let dropped = Arc::new(AtomicU64::new(0));
    let worker = Worker {
        exporters: Exporters { logs, traces },
        audit,
        dropped: Arc::clone(&dropped),
        reported: false,
    };
    std::thread::Builder::new()
        .name("sluice-otlp".into())
        .spawn(move || worker.run(&rx))
        .map_err(StartError::Thread)?;
    let _ = FEED.set(tx.clone());
    audit::observe::install(Arc::new(Feed { tx, dropped }));
    Ok(())
}

/// Exports what is queued and waits for it, at most `timeout` (at shutdown, so that the last
/// events, the stop event included, reach the collector).
pub fn flush(timeout: Duration) {
    let Some(tx) = FEED.get() else { return };
    let (done, wait) = mpsc::sync_channel(1);
    let deadline = Instant::now() + timeout;
    let mut msg = Msg::Flush(done);
    loop {
        match tx.try_send(msg) {
            Ok(()) => break,
            Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                msg = back;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => return,
        }
    }
    let _ = wait.recv_timeout(deadline.saturating_duration_since(Instant::now()));
}

/// `service.*` and `host.name`, from the audit sink's instance facts.
fn resource(audit: &AuditSink) -> Resource {
    let mut b = Resource::builder_empty()
        .with_service_name("sluice")
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ));
    if let Some(ctx) = audit.context() {
        b = b.with_attributes([
            opentelemetry::KeyValue::new("service.instance.id", ctx.instance.clone()),
            opentelemetry::KeyValue::new("host.name", ctx.hostname.clone()),
        ]);
    }
    b.build()
}

/// What one turn of the exporter thread took from the queue.
#[derive(Default)]
struct Batch {
    events: Vec<Event>,
    flushes: Vec<SyncSender<()>>,
}

impl Batch {
    fn take(&mut self, m: Msg) {
        match m {
            Msg::Event(e) => self.events.push(*e),
            Msg::Flush(done) => self.flushes.push(done),
        }
    }
}

struct Worker {
    exporters: Exporters,
    audit: Arc<AuditSink>,
    dropped: Arc<AtomicU64>,
    reported: bool,
}

impl Worker {
    fn run(mut self, rx: &Receiver<Msg>) {
        let provider = SdkLoggerProvider::builder().build();
        let logger = provider.logger("sluice");
        let scope = InstrumentationScope::builder("sluice")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let rng = ring::rand::SystemRandom::new();
        let random = |buf: &mut [u8]| {
            // The system's random source does not fail on Linux; a zero id is still made valid.
            let _ = rng.fill(buf);
        };
        while let Ok(first) = rx.recv() {
            let mut batch = Batch::default();
            batch.take(first);
            let deadline = Instant::now() + BATCH_WAIT;
            while batch.events.len() < MAX_BATCH && batch.flushes.is_empty() {
                match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(m) => batch.take(m),
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                }
            }
            // A flush exports everything queued before it.
            if !batch.flushes.is_empty() {
                while let Ok(m) = rx.try_recv() {
                    batch.take(m);
                }
            }
            let Batch { events, flushes } = batch;
            for chunk in events.chunks(MAX_BATCH) {
                self.export(chunk, &logger, &scope, &random);
            }
            self.report_drops();
            for done in flushes {
                let _ = done.try_send(());
            }
        }
    }

    fn export(
        &mut self,
        events: &[Event],
        logger: &opentelemetry_sdk::logs::SdkLogger,
        scope: &InstrumentationScope,
        random: &dyn Fn(&mut [u8]),
    ) {
        let ctx = self.audit.context().cloned();
        let mut records: Vec<SdkLogRecord> = Vec::with_capacity(events.len());
        let mut spans = Vec::new();
        for event in events {
            let Some(ctx) = &ctx else { return };
            let line = self
                .audit
                .redact(audit::ocsf::to_json(event, ctx).to_string());
            let Ok(ocsf) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let span: Option<SpanContext> = (matches!(event, Event::HttpRequest(_))
                && self.exporters.traces.is_some())
            .then(|| record::new_context(random));
            if let Some(context) = &span {
                spans.push(record::span(&ocsf, context.clone(), scope));
            }
            let mut rec = logger.create_log_record();
            record::fill(&mut rec, &line, &ocsf, span.as_ref());
            records.push(rec);
        }
        if let Some(logs) = &self.exporters.logs {
            let pairs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
                records.iter().map(|r| (r, scope)).collect();
            let sent = futures_executor::block_on(logs.export(LogBatch::new(&pairs)));
            if sent.is_err() {
                self.lost(records.len());
            }
        }
        if let Some(traces) = &self.exporters.traces
            && !spans.is_empty()
        {
            let n = spans.len();
            if futures_executor::block_on(traces.export(spans)).is_err() {
                self.lost(n);
            }
        }
    }

    fn lost(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.dropped.fetch_add(n, Ordering::Relaxed);
        crate::metrics::otlp_dropped(n);
    }

    /// The one audit event saying the export lost records (later losses are counted only).
    fn report_drops(&mut self) {
        let dropped = self.dropped.load(Ordering::Relaxed);
        if dropped == 0 || self.reported {
            return;
        }
        self.reported = true;
        self.audit.emit(&Event::Finding(audit::Finding {
            time: SystemTime::now(),
            id: 0,
            caller: None,
            src: SocketAddr::from(([0, 0, 0, 0], 0)),
            dst: audit::Destination::nowhere(),
            kind: FINDING_DROPPED.to_string(),
            guard: audit::Guard::Audit,
            title: format!(
                "the OpenTelemetry export lost {dropped} record(s) (queue of {QUEUE} full, or the collector refused or did not answer); the audit log keeps every event, and later losses are counted in sluice_otlp_dropped_total without another event"
            ),
            credential: None,
            policy: None,
            severity: audit::Severity::Medium,
        }));
    }
}
