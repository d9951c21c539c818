//! Where audit events go: each event becomes one compact OCSF JSON line on the audit target
//! (`--audit-log PATH`, appended to, created 0600; or `-` for stdout) and one human line on
//! stderr (the shorthand, or the same JSON with `--log-format json`).
//!
//! The request path only serializes: [`AuditSink::emit`] turns the event into its two lines
//! and hands them to a bounded queue ([`QUEUE_LINES`] events). One writer thread drains it,
//! redacts each line, writes every line it finds waiting in one go and flushes when the queue
//! is empty, so a reader tailing the file sees each event within a moment and never half a
//! line (unless the disk fails mid-line; the next line then starts on a fresh line). Nothing
//! is dropped: when the queue is full the emitter waits for room, and each such wait is
//! counted ([`AuditSink::backpressure_waits`]). [`AuditSink::flush`] waits until everything
//! emitted before it is written; the last sink dropped flushes and stops the writer.
//!
//! Two ways to open a sink: [`AuditSink::open_queued`] (the proxy: `emit` returns once the
//! event is queued) and [`AuditSink::open`] (tools and one-shot callers: `emit` returns once
//! the event's lines are written, as a caller reading the file right after expects).
//! Auditing never stops the proxy: a failed write is counted ([`AuditSink::write_errors`])
//! and reported once on stderr, never a panic.
//!
//! Every line passes through the redactor first (`set_redactor`): whatever a field holds (a
//! caller's command line with a real key in it, a reason quoting a value), a known secret
//! value never reaches a log. One redaction at the sink covers every field and every event.
//!
//! This module owns the I/O only; what a line says is `ocsf` and `shorthand`.

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::SystemTime;

use super::Event;
use super::ocsf::{self, Context};
use super::shorthand;

/// Events the queue holds before an emitter has to wait for the writer.
pub const QUEUE_LINES: usize = 4096;

/// How long a queued sink's writer rests after writing a batch. Emitters then only push to the
/// queue (no wake-up of a sleeping writer per event, which costs a context switch each), and
/// the writer writes what gathered meanwhile in one go; a line reaches the file within about
/// this long.
const WRITE_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

/// Bytes gathered before a write to the audit target or stderr (a burst of lines becomes
/// one write system call).
const WRITE_BUFFER: usize = 64 * 1024;

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

/// The audit output of one sluice instance. Cloning is cheap (one shared queue and writer);
/// it is `Send + Sync`, so connections can hold a clone or an `Arc` of it.
#[derive(Clone)]
pub struct AuditSink {
    /// `None`: disabled, every event is dropped.
    inner: Option<Arc<Inner>>,
}

struct Inner {
    ctx: Context,
    format: LogFormat,
    /// Whether `emit` waits until its lines are written.
    wait: bool,
    queue: SyncSender<Msg>,
    state: Arc<State>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The capacity to give the next audit line (the last line's length and some room).
    line_hint: AtomicUsize,
}

/// What the emitters and the writer thread share.
struct State {
    /// What the audit target is, for the one error report (`-` or a path).
    target: String,
    /// Events emitted and not yet taken by the writer.
    depth: AtomicUsize,
    /// Times an emitter found the queue full and waited.
    waits: AtomicU64,
    write_errors: AtomicU64,
    redactor: RwLock<Option<Arc<dyn Redact>>>,
}

impl State {
    /// `line` with every secret value the current redactor knows replaced.
    fn redacted(&self, line: Vec<u8>) -> Vec<u8> {
        let redactor = self
            .redactor
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match redactor.and_then(|r| r.redact(&line)) {
            Some(clean) => clean,
            None => line,
        }
    }
}

/// What the queue carries to the writer.
enum Msg {
    /// One event's lines, without their newlines; `human: None` repeats the audit line.
    Event {
        audit: Vec<u8>,
        human: Option<String>,
    },
    /// Write and flush everything before this, then answer.
    Flush(mpsc::Sender<()>),
    /// Write and flush everything before this, then stop.
    Stop,
}

impl AuditSink {
    /// Opens the audit target: `-` is stdout, anything else a file appended to (created with
    /// mode 0600). Human lines go to stderr in `log_format`. Each `emit` returns once its
    /// lines are written.
    pub fn open(audit_log: &str, log_format: LogFormat) -> io::Result<AuditSink> {
        AuditSink::open_with(audit_log, log_format, true)
    }

    /// Like [`AuditSink::open`], but `emit` returns once the event is queued for the writer
    /// (waiting only while the queue is full): the request path never writes. Call
    /// [`AuditSink::flush`] before exiting.
    pub fn open_queued(audit_log: &str, log_format: LogFormat) -> io::Result<AuditSink> {
        AuditSink::open_with(audit_log, log_format, false)
    }

    fn open_with(audit_log: &str, log_format: LogFormat, wait: bool) -> io::Result<AuditSink> {
        let audit: Box<dyn Write + Send> = if audit_log == "-" {
            Box::new(BufWriter::with_capacity(WRITE_BUFFER, io::stdout()))
        } else {
            Box::new(BufWriter::with_capacity(
                WRITE_BUFFER,
                OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(audit_log)?,
            ))
        };
        AuditSink::start(
            audit,
            Box::new(BufWriter::with_capacity(WRITE_BUFFER, io::stderr())),
            log_format,
            this_instance(),
            audit_log,
            wait,
        )
    }

    /// A sink over any two writers: `audit` gets the JSON lines, `human` the `log_format`
    /// lines and the one error report. `target` names `audit` in that report. Each `emit`
    /// returns once its lines are written.
    ///
    /// # Panics
    /// When the writer thread cannot be spawned (the process is out of threads at start).
    #[allow(clippy::expect_used)] // documented panic, at start only; `open` returns it
    pub fn new(
        audit: Box<dyn Write + Send>,
        human: Box<dyn Write + Send>,
        log_format: LogFormat,
        ctx: Context,
        target: &str,
    ) -> AuditSink {
        AuditSink::start(audit, human, log_format, ctx, target, true)
            .expect("cannot start the audit writer thread")
    }

    fn start(
        audit: Box<dyn Write + Send>,
        human: Box<dyn Write + Send>,
        log_format: LogFormat,
        ctx: Context,
        target: &str,
        wait: bool,
    ) -> io::Result<AuditSink> {
        let (queue, rx) = mpsc::sync_channel(QUEUE_LINES);
        let state = Arc::new(State {
            target: target.to_owned(),
            depth: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            redactor: RwLock::new(None),
        });
        let writer = Writer {
            audit: LineWriter::new(audit),
            human: LineWriter::new(human),
            state: Arc::clone(&state),
            // A caller waiting for each line gets it at once.
            pause: if wait {
                std::time::Duration::ZERO
            } else {
                WRITE_PAUSE
            },
        };
        let handle = std::thread::Builder::new()
            .name("sluice-audit".into())
            .spawn(move || writer.run(&rx))?;
        Ok(AuditSink {
            inner: Some(Arc::new(Inner {
                ctx,
                format: log_format,
                wait,
                queue,
                state,
                writer: Mutex::new(Some(handle)),
                line_hint: AtomicUsize::new(1024),
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
            *inner
                .state
                .redactor
                .write()
                .unwrap_or_else(PoisonError::into_inner) = Some(redactor);
        }
    }

    /// Queues `event`: its JSON line for the audit target, its human line for stderr. Waits
    /// while the queue is full (counted in [`AuditSink::backpressure_waits`]).
    pub fn emit(&self, event: &Event) {
        let Some(inner) = &self.inner else { return };
        super::observe::notify(event);
        // Room for a line as long as the last one and its newline: no regrowth (and copy)
        // while serializing, nor when the writer appends the newline.
        let hint = inner.line_hint.load(Ordering::Relaxed);
        let mut audit = Vec::with_capacity(hint.max(1024));
        ocsf::write_json(event, &inner.ctx, &mut audit);
        inner.line_hint.store(audit.len() + 256, Ordering::Relaxed);
        let human = match inner.format {
            LogFormat::Json => None,
            LogFormat::Shorthand => Some(shorthand::shorthand(event)),
        };
        inner.send(Msg::Event { audit, human });
        if inner.wait {
            self.flush();
        }
    }

    /// Returns once every event emitted before the call is written and flushed.
    pub fn flush(&self) {
        let Some(inner) = &self.inner else { return };
        let (done, wait) = mpsc::channel();
        inner.send(Msg::Flush(done));
        let _ = wait.recv();
    }

    /// How many audit lines could not be written.
    pub fn write_errors(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |i| i.state.write_errors.load(Ordering::Relaxed))
    }

    /// Events emitted and not yet taken by the writer (at most [`QUEUE_LINES`], plus the
    /// emitters waiting for room).
    pub fn queue_depth(&self) -> usize {
        self.inner
            .as_ref()
            .map_or(0, |i| i.state.depth.load(Ordering::Relaxed))
    }

    /// How many times an emitter found the queue full and had to wait for the writer.
    pub fn backpressure_waits(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |i| i.state.waits.load(Ordering::Relaxed))
    }

    /// The instance facts every event carries; `None` when disabled.
    pub fn context(&self) -> Option<&Context> {
        self.inner.as_ref().map(|i| &i.ctx)
    }

    /// `line` with every known secret value replaced, as the sink's own lines are (other
    /// exports of the events, such as OTLP, pass their text through this).
    pub fn redact(&self, line: String) -> String {
        match &self.inner {
            Some(i) => match String::from_utf8(i.state.redacted(line.into_bytes())) {
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
                .field("target", &i.state.target)
                .field("format", &i.format)
                .field("ctx", &i.ctx)
                .field(
                    "write_errors",
                    &i.state.write_errors.load(Ordering::Relaxed),
                )
                .finish(),
        }
    }
}

impl Inner {
    /// Queues `msg`, waiting for room when the queue is full. When the writer is gone (it
    /// panicked), the event is counted as a write error.
    fn send(&self, msg: Msg) {
        let counted = matches!(msg, Msg::Event { .. });
        if counted {
            self.state.depth.fetch_add(1, Ordering::Relaxed);
        }
        let result = match self.queue.try_send(msg) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(msg)) => {
                self.state.waits.fetch_add(1, Ordering::Relaxed);
                self.queue.send(msg).map_err(|_| ())
            }
            Err(TrySendError::Disconnected(_)) => Err(()),
        };
        if result.is_err() && counted {
            self.state.depth.fetch_sub(1, Ordering::Relaxed);
            self.state.write_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Inner {
    /// The last sink gone: write what is queued, flush, and stop the writer.
    fn drop(&mut self) {
        let _ = self.queue.send(Msg::Stop);
        let handle = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

/// The writer thread: owns both outputs.
struct Writer {
    audit: LineWriter,
    human: LineWriter,
    state: Arc<State>,
    /// The rest after each batch ([`WRITE_PAUSE`], or none).
    pause: std::time::Duration,
}

impl Writer {
    fn run(mut self, rx: &Receiver<Msg>) {
        while let Ok(first) = rx.recv() {
            let mut next = Some(first);
            // Everything already waiting is written before the one flush.
            while let Some(msg) = next {
                match msg {
                    Msg::Event { audit, human } => {
                        self.state.depth.fetch_sub(1, Ordering::Relaxed);
                        self.event(audit, human);
                    }
                    Msg::Flush(done) => {
                        self.flush();
                        let _ = done.send(());
                    }
                    Msg::Stop => {
                        self.flush();
                        return;
                    }
                }
                next = rx.try_recv().ok();
            }
            self.flush();
            if !self.pause.is_zero() {
                std::thread::sleep(self.pause);
            }
        }
        self.flush();
    }

    fn event(&mut self, audit: Vec<u8>, human: Option<String>) {
        let mut json = self.redacted(audit);
        json.push(b'\n');
        let result = self.audit.write_line(&json);
        self.audit_result(result);
        let human = match human {
            None => json,
            Some(line) => {
                let mut line = self.redacted(line.into_bytes());
                line.push(b'\n');
                line
            }
        };
        // A human line that cannot be written (stderr closed) is not worth more than that.
        let _ = self.human.write_line(&human);
    }

    fn flush(&mut self) {
        let result = self.audit.flush();
        self.audit_result(result);
        let _ = self.human.flush();
    }

    fn redacted(&self, line: Vec<u8>) -> Vec<u8> {
        self.state.redacted(line)
    }

    fn audit_result(&mut self, result: io::Result<()>) {
        if let Err(e) = result {
            // Report the first failure only: a full disk would otherwise add a line per event.
            if self.state.write_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                let report = format!(
                    "sluice: cannot write the audit log {}: {e}; later audit write errors are \
                     counted, not reported\n",
                    self.state.target
                );
                let _ = self.human.write_line(report.as_bytes());
                let _ = self.human.flush();
            }
        }
    }
}

/// Writes whole lines; remembers when a failure cut a line short, so that the next line does
/// not get glued to the fragment.
struct LineWriter {
    out: Box<dyn Write + Send>,
    partial: bool,
}

impl LineWriter {
    fn new(out: Box<dyn Write + Send>) -> Self {
        LineWriter {
            out,
            partial: false,
        }
    }

    fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        if self.partial {
            self.out.write_all(b"\n")?;
            self.partial = false;
        }
        let mut written = 0;
        while written < line.len() {
            match self.out.write(&line[written..]) {
                Ok(0) => {
                    self.partial = written > 0;
                    return Err(io::ErrorKind::WriteZero.into());
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.partial = written > 0;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
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
