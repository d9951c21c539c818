//! Where audit events go: each event becomes one compact OCSF JSON line on the audit target
//! (`--audit-log PATH`, appended to, created 0600; or `-` for stdout) and one human line on
//! stderr (the shorthand, or the same JSON with `--log-format json`).
//!
//! The request path only serializes and hands over; it never waits for a disk or a pipe.
//! [`AuditSink::emit`] turns the event into its two lines: the audit line goes to the audit
//! spool (`spool.rs`: every record emitted and not yet written, bounded in records and bytes)
//! and its writer thread (`writer.rs`), which writes every record in order and whole, holds
//! them while the target fails (a full disk, a broken pipe) and writes them when it recovers;
//! the human line goes to its own thread (`human.rs`), which drops lines rather than wait for
//! a stderr nobody reads. When the spool is full, `--audit-on-failure` decides: `closed` (the
//! default) makes [`AuditSink::refusing`] true, and the pipeline refuses new connections and
//! requests with `503 audit_unavailable`; `open` serves on and counts every record lost. Both
//! are audited as findings, with their human lines, and so is the recovery.
//!
//! Two ways to open a sink: [`AuditSink::open_queued`] (the proxy: `emit` returns once the
//! event is handed over) and [`AuditSink::open`] (tools and one-shot callers: `emit` returns
//! once the event's lines are written, or the target is failing). [`AuditSink::close`] writes
//! what is spooled before the process exits, for a bounded time.
//!
//! Every line passes through the redactor first (`set_redactor`): whatever a field holds (a
//! caller's command line with a real key in it, a reason quoting a value), a known secret
//! value never reaches a log. One redaction at the sink covers every field and every event.
//!
//! This module owns the I/O only; what a line says is `ocsf` and `shorthand`.

mod human;
pub mod spool;
mod writer;

pub use spool::{Limits, OnFailure, Spool};
pub use writer::{Closed, FINDING_RECOVERED, FINDING_WRITE_FAILED};

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use super::Event;
use super::ocsf::{self, Context};
use super::shorthand;
use human::Human;
use spool::Admitted;
use writer::{Msg, Writer};

/// How long a queued sink's writer rests after writing a batch. Emitters then only push to the
/// queue (no wake-up of a sleeping writer per event, which costs a context switch each), and
/// the writer writes what gathered meanwhile in one go; a line reaches the file within about
/// this long.
const WRITE_PAUSE: Duration = Duration::from_millis(2);

/// How long closing a sink (and dropping the last one) tries to write what is spooled.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// The finding type of a spool that filled with `--audit-on-failure closed`: sluice refuses.
pub const FINDING_FAILING_CLOSED: &str = "sluice.audit.failing_closed";
/// The finding type of a spool that filled with `--audit-on-failure open`: records are lost.
pub const FINDING_RECORDS_LOST: &str = "sluice.audit.records_lost";

/// Replaces known secret values in a line about to be written (the credentials module
/// implements it over the secret store; audit knows nothing of secrets).
pub trait Redact: Send + Sync {
    /// The line with every secret replaced, or `None` when it holds none. Replacements are
    /// ASCII and secrets whole UTF-8 strings, so a UTF-8 line stays UTF-8.
    fn redact(&self, line: &[u8]) -> Option<Vec<u8>>;
}

/// What the human line on stderr looks like (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// The one-line shorthand.
    #[default]
    Shorthand,
    /// The OCSF JSON object, as in the audit log.
    Json,
}

impl FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "shorthand" => Ok(LogFormat::Shorthand),
            "json" => Ok(LogFormat::Json),
            other => Err(UnknownLogFormat(other.to_owned())),
        }
    }
}

/// A `--log-format` value other than `shorthand` or `json`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown log format `{0}`: expected `shorthand` or `json`")]
pub struct UnknownLogFormat(pub String);

/// What the spool holds and what happens when it is full (`--audit-on-failure`,
/// `--audit-spool-max-records`, `--audit-spool-max-bytes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpoolConfig {
    pub limits: Limits,
    pub on_failure: OnFailure,
}

/// The audit output of one sluice instance. Cloning is cheap (one shared queue and writer);
/// it is `Send + Sync`, so connections can hold a clone or an `Arc` of it.
#[derive(Clone)]
pub struct AuditSink {
    /// `None`: disabled, every event is dropped.
    inner: Option<Arc<Inner>>,
}

struct Inner {
    /// Whether `emit` waits until its lines are written.
    wait: bool,
    queue: mpsc::Sender<Msg>,
    outputs: Arc<Outputs>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The capacity to give the next audit line (the last line's length and some room).
    line_hint: AtomicUsize,
    closed: AtomicBool,
}

/// What the emitters and both writer threads share.
struct Outputs {
    ctx: Context,
    format: LogFormat,
    /// What the audit target is, for reports and findings (`-` or a path).
    target: String,
    spool: Spool,
    redactor: Redactor,
    human: Human,
}

/// The redactor in force, shared by the emitters and both writers.
#[derive(Clone, Default)]
struct Redactor(Arc<RwLock<Option<Arc<dyn Redact>>>>);

impl Redactor {
    fn set(&self, redactor: Arc<dyn Redact>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Some(redactor);
    }

    /// `line` with every secret value the current redactor knows replaced.
    fn redacted(&self, line: Vec<u8>) -> Vec<u8> {
        let redactor = self
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match redactor.and_then(|r| r.redact(&line)) {
            Some(clean) => clean,
            None => line,
        }
    }
}

impl Outputs {
    /// The human line of `event`, handed to stderr's writer.
    fn human_line(&self, event: &Event, audit: &[u8]) {
        let line = match self.format {
            LogFormat::Json => audit.to_vec(),
            LogFormat::Shorthand => shorthand::shorthand(event).into_bytes(),
        };
        self.human.line(line);
    }

    /// One of the sink's own events: seen by the observers, its human line handed over, its
    /// audit line and weight returned (counted in the spool, always kept).
    fn own_event(&self, event: &Event) -> (Vec<u8>, usize) {
        super::observe::notify(event);
        let mut audit = Vec::with_capacity(1024);
        ocsf::write_json(event, &self.ctx, &mut audit);
        self.human_line(event, &audit);
        let weight = audit.capacity().max(1);
        self.spool.admit_own(weight);
        (audit, weight)
    }
}

impl AuditSink {
    /// Opens the audit target: `-` is stdout, anything else a file appended to (created with
    /// mode 0600). Human lines go to stderr in `log_format`. Each `emit` returns once its
    /// lines are written (or the target is failing).
    pub fn open(audit_log: &str, log_format: LogFormat) -> io::Result<AuditSink> {
        AuditSink::open_with(audit_log, log_format, SpoolConfig::default(), true)
    }

    /// Like [`AuditSink::open`], but `emit` returns once the event is handed over: the
    /// request path never writes nor waits. Call [`AuditSink::close`] before exiting.
    pub fn open_queued(
        audit_log: &str,
        log_format: LogFormat,
        spool: SpoolConfig,
    ) -> io::Result<AuditSink> {
        AuditSink::open_with(audit_log, log_format, spool, false)
    }

    fn open_with(
        audit_log: &str,
        log_format: LogFormat,
        spool: SpoolConfig,
        wait: bool,
    ) -> io::Result<AuditSink> {
        // Written with `writev` and nothing in between (`writer.rs` knows what reached the
        // target byte for byte): stdout through a descriptor of its own, not `io::Stdout`'s
        // buffer.
        let audit = if audit_log == "-" {
            std::fs::File::from(io::stdout().as_fd().try_clone_to_owned()?)
        } else {
            OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o600)
                .open(audit_log)?
        };
        AuditSink::start(
            Box::new(audit),
            Box::new(io::stderr()),
            log_format,
            this_instance(),
            audit_log,
            spool,
            wait,
        )
    }

    /// A sink over any two writers: `audit` gets the JSON lines (written as they come: it
    /// should not buffer), `human` the `log_format` lines and the reports. `target` names
    /// `audit` in those. Each `emit` returns once its lines are written.
    ///
    /// # Panics
    /// When the writer threads cannot be spawned (the process is out of threads at start).
    #[allow(clippy::expect_used)] // documented panic, at start only; `open` returns it
    pub fn new(
        audit: Box<dyn Write + Send>,
        human: Box<dyn Write + Send>,
        log_format: LogFormat,
        ctx: Context,
        target: &str,
    ) -> AuditSink {
        AuditSink::start(
            audit,
            human,
            log_format,
            ctx,
            target,
            SpoolConfig::default(),
            true,
        )
        .expect("cannot start the audit writer threads")
    }

    fn start(
        audit: Box<dyn Write + Send>,
        human: Box<dyn Write + Send>,
        log_format: LogFormat,
        ctx: Context,
        target: &str,
        spool: SpoolConfig,
        wait: bool,
    ) -> io::Result<AuditSink> {
        // A caller waiting for each line gets it at once.
        let pause = if wait { Duration::ZERO } else { WRITE_PAUSE };
        let redactor = Redactor::default();
        let outputs = Arc::new(Outputs {
            ctx,
            format: log_format,
            target: target.to_owned(),
            spool: Spool::new(spool.limits, spool.on_failure),
            human: Human::start(human, redactor.clone(), pause)?,
            redactor,
        });
        let (queue, rx) = mpsc::channel();
        let writer = Writer::new(audit, Arc::clone(&outputs), pause);
        let handle = std::thread::Builder::new()
            .name("sluice-audit".into())
            .spawn(move || writer.run(&rx))?;
        Ok(AuditSink {
            inner: Some(Arc::new(Inner {
                wait,
                queue,
                outputs,
                writer: Mutex::new(Some(handle)),
                line_hint: AtomicUsize::new(1024),
                closed: AtomicBool::new(false),
            })),
        })
    }

    /// A sink that drops every event (tests, and tools that audit nothing).
    pub fn disabled() -> AuditSink {
        AuditSink { inner: None }
    }

    /// Sets what removes secret values from every line from now on (the secrets are loaded
    /// after the sink opens, so that a failed load can be audited). A reload replaces it with
    /// one that knows every value loaded so far, old and new.
    pub fn set_redactor(&self, redactor: Arc<dyn Redact>) {
        if let Some(inner) = &self.inner {
            inner.outputs.redactor.set(redactor);
        }
    }

    /// Hands `event` over: its JSON line to the audit spool, its human line to stderr's
    /// writer. Never waits for either (but in the waiting mode of [`AuditSink::open`]).
    pub fn emit(&self, event: &Event) {
        let Some(inner) = &self.inner else { return };
        let outputs = &inner.outputs;
        super::observe::notify(event);
        // Room for a line as long as the last one and its newline: no regrowth (and copy)
        // while serializing, nor when the writer appends the newline.
        let hint = inner.line_hint.load(Ordering::Relaxed);
        let mut audit = Vec::with_capacity(hint.max(1024));
        ocsf::write_json(event, &outputs.ctx, &mut audit);
        inner.line_hint.store(audit.len() + 256, Ordering::Relaxed);
        outputs.human_line(event, &audit);
        // The spool counts the memory the line holds.
        let weight = audit.capacity().max(1);
        match outputs.spool.admit(weight) {
            Admitted::Kept { filled } => {
                inner.send(Msg::Event { audit, weight }, weight);
                if filled {
                    inner.filled();
                }
            }
            Admitted::Lost { filled } => {
                if filled {
                    inner.filled();
                }
            }
        }
        if inner.wait {
            self.flush();
        }
    }

    /// Returns once every event emitted before the call is written (or the audit target is
    /// failing: then it stays in the spool), and its human line too.
    pub fn flush(&self) {
        let Some(inner) = &self.inner else { return };
        let (done, wait) = mpsc::channel();
        if inner.queue.send(Msg::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
        inner.outputs.human.flush();
    }

    /// Writes what is spooled, trying for at most `within` (a full disk may free up), then
    /// stops the writer. What could not be written is printed on stderr and counted as lost.
    /// Events emitted afterwards are lost. Returns what was left unwritten.
    pub fn close(&self, within: Duration) -> Closed {
        match &self.inner {
            Some(inner) => inner.close(within),
            None => Closed::default(),
        }
    }

    /// Whether new connections and requests must be refused now: the audit spool is full and
    /// `--audit-on-failure` is `closed`. Each refusal is counted by [`AuditSink::refused`].
    pub fn refusing(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.outputs.spool.refusing())
    }

    /// One connection or request refused because [`AuditSink::refusing`].
    pub fn refused(&self) {
        if let Some(i) = &self.inner {
            i.outputs.spool.count_refused();
        }
    }

    /// The spool's bounds and counters; `None` when disabled.
    pub fn spool(&self) -> Option<&Spool> {
        self.inner.as_ref().map(|i| &i.outputs.spool)
    }

    /// How many failed writes to the audit target there were.
    pub fn write_errors(&self) -> u64 {
        self.spool().map_or(0, Spool::write_errors)
    }

    /// Human lines dropped because stderr did not take them in time.
    pub fn log_lines_dropped(&self) -> u64 {
        self.inner.as_ref().map_or(0, |i| i.outputs.human.dropped())
    }

    /// The instance facts every event carries; `None` when disabled.
    pub fn context(&self) -> Option<&Context> {
        self.inner.as_ref().map(|i| &i.outputs.ctx)
    }

    /// `line` with every known secret value replaced, as the sink's own lines are (other
    /// exports of the events, such as OTLP, pass their text through this).
    pub fn redact(&self, line: String) -> String {
        match &self.inner {
            Some(i) => match String::from_utf8(i.outputs.redactor.redacted(line.into_bytes())) {
                Ok(line) => line,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            },
            None => line,
        }
    }
}

impl fmt::Debug for AuditSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            None => f.write_str("AuditSink(disabled)"),
            Some(i) => f
                .debug_struct("AuditSink")
                .field("target", &i.outputs.target)
                .field("format", &i.outputs.format)
                .field("ctx", &i.outputs.ctx)
                .field("spool", &i.outputs.spool)
                .finish(),
        }
    }
}

impl Inner {
    /// Queues `msg` for the writer; when it is gone (closed, or it panicked), the record of
    /// `weight` bytes is lost.
    fn send(&self, msg: Msg, weight: usize) {
        if self.queue.send(msg).is_err() {
            self.outputs.spool.release(weight);
            self.outputs.spool.count_lost(1);
        }
    }

    /// The spool has just filled: the finding that says what sluice does now.
    fn filled(&self) {
        let o = &self.outputs;
        let (records, bytes) = (o.spool.records(), o.spool.bytes());
        let (kind, title) = match o.spool.on_failure {
            OnFailure::Closed => (
                FINDING_FAILING_CLOSED,
                format!(
                    "sluice fails closed: new connections and requests are refused (503 \
                     audit_unavailable) until its audit log can be written; the audit spool is \
                     full ({records} records, {bytes} bytes not yet written to {})",
                    o.target
                ),
            ),
            OnFailure::Open => (
                FINDING_RECORDS_LOST,
                format!(
                    "audit records are being lost (--audit-on-failure open): the audit spool is \
                     full ({records} records, {bytes} bytes not yet written to {}); sluice serves \
                     on, and every record it cannot keep is counted in sluice_audit_lost_total",
                    o.target
                ),
            ),
        };
        let event = writer::own_finding(kind, title, super::Severity::Critical);
        let (audit, weight) = o.own_event(&event);
        self.send(Msg::Event { audit, weight }, weight);
    }

    fn close(&self, within: Duration) -> Closed {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Closed::default();
        }
        let (done, wait) = mpsc::channel();
        let unwritten = if self.queue.send(Msg::Stop { within, done }).is_ok() {
            // The writer stops trying at `within`; a write that blocks (a pipe nobody reads)
            // is waited for a moment more, then left behind.
            match wait.recv_timeout(within + Duration::from_secs(1)) {
                Ok(closed) => {
                    let handle = self
                        .writer
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .take();
                    if let Some(handle) = handle {
                        let _ = handle.join();
                    }
                    closed
                }
                Err(_) => {
                    let stuck = self.outputs.spool.records();
                    self.outputs.spool.count_lost(stuck as u64);
                    self.outputs.human.line(
                        format!(
                            "sluice: the audit log {} took nothing for {} s (a pipe nobody \
                             reads?): {stuck} audit record(s) were not written (counted in \
                             sluice_audit_lost_total)",
                            self.outputs.target,
                            within.as_secs() + 1
                        )
                        .into_bytes(),
                    );
                    Closed { unwritten: stuck }
                }
            }
        } else {
            Closed::default()
        };
        self.outputs.human.flush_within(Duration::from_secs(1));
        unwritten
    }
}

impl Drop for Inner {
    /// The last sink gone: write what is spooled (for a bounded time), and stop the writer.
    fn drop(&mut self) {
        self.close(CLOSE_WAIT);
    }
}

/// The facts of this sluice process: an instance id unique per start (start time in ms and
/// pid, in hex) and the host name.
fn this_instance() -> Context {
    let started = ocsf::epoch_millis(SystemTime::now());
    let hostname = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    Context {
        instance: format!("{started:x}-{:x}", std::process::id()),
        hostname,
    }
}

#[cfg(test)]
mod tests;
