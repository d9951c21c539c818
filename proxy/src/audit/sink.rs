//! Where audit events go: each event becomes one compact OCSF JSON line on the audit target
//! (`--audit-log PATH`, appended to, created 0600; or `-` for stdout) and one human line on
//! stderr (the §7.3 shorthand, or the same JSON with `--log-format json`).
//!
//! Every line is written whole and flushed at once, so a reader tailing the file while sluice
//! runs never waits for a buffer and never sees half a line (unless the disk fails mid-line;
//! the next line then starts on a fresh line). Auditing never stops the proxy: a failed write
//! is counted ([`AuditSink::write_errors`]) and reported once on stderr, never a panic.
//!
//! Every line passes through the redactor first (`set_redactor`): whatever a field holds (a
//! caller's command line with a real key in it, a reason quoting a value), a known secret
//! value never reaches a log. One redaction at the sink covers every field and every event.
//!
//! This module owns the I/O only; what a line says is `ocsf` and `shorthand`.

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::SystemTime;

use super::Event;
use super::ocsf::{self, Context};
use super::shorthand;

/// Replaces known secret values in a line about to be written (the credentials module
/// implements it over the secret store; audit knows nothing of secrets).
pub trait Redact: Send + Sync {
    /// The line with every secret replaced, or `None` when it holds none.
    fn redact(&self, line: &str) -> Option<String>;
}

/// What the human line on stderr looks like (`--log-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// The one-line shorthand of spec §7.3.
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

/// The audit output of one sluice instance. Cloning is cheap (one shared writer); it is
/// `Send + Sync`, so connections can hold a clone or an `Arc` of it.
#[derive(Clone)]
pub struct AuditSink {
    /// `None`: disabled, every event is dropped.
    inner: Option<Arc<Inner>>,
}

struct Inner {
    ctx: Context,
    format: LogFormat,
    /// What the audit target is, for the one error report (`-` or a path).
    target: String,
    audit: Mutex<LineWriter>,
    human: Mutex<LineWriter>,
    write_errors: AtomicU64,
    redactor: RwLock<Option<Arc<dyn Redact>>>,
}

impl AuditSink {
    /// Opens the audit target: `-` is stdout, anything else a file appended to (created with
    /// mode 0600). Human lines go to stderr in `log_format`.
    pub fn open(audit_log: &str, log_format: LogFormat) -> io::Result<AuditSink> {
        let audit: Box<dyn Write + Send> = if audit_log == "-" {
            Box::new(io::stdout())
        } else {
            Box::new(
                OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(audit_log)?,
            )
        };
        Ok(AuditSink::new(
            audit,
            Box::new(io::stderr()),
            log_format,
            this_instance(),
            audit_log,
        ))
    }

    /// A sink over any two writers: `audit` gets the JSON lines, `human` the `log_format`
    /// lines and the one error report. `target` names `audit` in that report.
    pub fn new(
        audit: Box<dyn Write + Send>,
        human: Box<dyn Write + Send>,
        log_format: LogFormat,
        ctx: Context,
        target: &str,
    ) -> AuditSink {
        AuditSink {
            inner: Some(Arc::new(Inner {
                ctx,
                format: log_format,
                target: target.to_owned(),
                audit: Mutex::new(LineWriter::new(audit)),
                human: Mutex::new(LineWriter::new(human)),
                write_errors: AtomicU64::new(0),
                redactor: RwLock::new(None),
            })),
        }
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
                .redactor
                .write()
                .unwrap_or_else(PoisonError::into_inner) = Some(redactor);
        }
    }

    /// Writes `event`: its JSON line to the audit target, its human line to stderr.
    pub fn emit(&self, event: &Event) {
        let Some(inner) = &self.inner else { return };
        super::observe::notify(event);
        let mut json = inner.redacted(ocsf::to_json(event, &inner.ctx).to_string());
        json.push('\n');
        inner.write_audit(json.as_bytes());
        let human = match inner.format {
            LogFormat::Json => json,
            LogFormat::Shorthand => {
                let mut line = inner.redacted(shorthand::shorthand(event));
                line.push('\n');
                line
            }
        };
        // A human line that cannot be written (stderr closed) is not worth more than that.
        let _ = lock(&inner.human).write_line(human.as_bytes());
    }

    /// How many audit lines could not be written.
    pub fn write_errors(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |i| i.write_errors.load(Ordering::Relaxed))
    }

    /// The instance facts every event carries; `None` when disabled.
    pub fn context(&self) -> Option<&Context> {
        self.inner.as_ref().map(|i| &i.ctx)
    }

    /// `line` with every known secret value replaced, as the sink's own lines are (other
    /// exports of the events, such as OTLP, pass their text through this).
    pub fn redact(&self, line: String) -> String {
        match &self.inner {
            Some(i) => i.redacted(line),
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
                .field("target", &i.target)
                .field("format", &i.format)
                .field("ctx", &i.ctx)
                .field("write_errors", &i.write_errors.load(Ordering::Relaxed))
                .finish(),
        }
    }
}

impl Inner {
    fn redacted(&self, line: String) -> String {
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

    fn write_audit(&self, line: &[u8]) {
        let result = lock(&self.audit).write_line(line);
        if let Err(e) = result {
            // Report the first failure only: a full disk would otherwise add a line per event.
            if self.write_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                let report = format!(
                    "sluice: cannot write the audit log {}: {e}; later audit write errors are \
                     counted, not reported\n",
                    self.target
                );
                let _ = lock(&self.human).write_line(report.as_bytes());
            }
        }
    }
}

/// A lock that survives a panic of another holder: a writer's state is still usable.
fn lock(m: &Mutex<LineWriter>) -> MutexGuard<'_, LineWriter> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes whole lines and flushes each; remembers when a failure cut a line short, so that
/// the next line does not get glued to the fragment.
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
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use serde_json::Value;

    use super::super::Outcome;
    use super::super::ocsf::samples;
    use super::*;

    /// A writer whose bytes the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Accepts `budget` bytes, then fails `failures_left` calls, then accepts everything.
    struct Flaky {
        inner: Shared,
        budget: usize,
        failures_left: usize,
    }

    impl Write for Flaky {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.budget == 0 && self.failures_left > 0 {
                self.failures_left -= 1;
                return Err(io::Error::other("disk full"));
            }
            let n = if self.failures_left > 0 {
                buf.len().min(self.budget)
            } else {
                buf.len()
            };
            self.budget -= n.min(self.budget);
            self.inner.write(&buf[..n])
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn events() -> Vec<Event> {
        vec![
            Event::Lifecycle(samples::start()),
            Event::ConnectionOpen(samples::open(Outcome::Allowed)),
            Event::HttpRequest(samples::request(Outcome::Denied)),
            Event::ConnectionClose(samples::close()),
        ]
    }

    fn temp_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "sluice-audit-{}-{name}-{}.jsonl",
            std::process::id(),
            ocsf::epoch_millis(SystemTime::now())
        ))
    }

    #[test]
    fn sink_is_shareable() {
        fn assert_send_sync<T: Send + Sync + Clone + fmt::Debug>() {}
        assert_send_sync::<AuditSink>();
    }

    #[test]
    fn file_gets_one_json_line_per_event_appended_with_mode_0600() {
        let path = temp_path("file");
        let target = path.to_str().unwrap();
        let sink = AuditSink::open(target, LogFormat::Shorthand).unwrap();
        for e in events() {
            sink.emit(&e);
        }
        // Lines are flushed as they are emitted: readable while the sink is alive.
        let text = std::fs::read_to_string(&path).unwrap();
        let classes: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["class_uid"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(classes, [6002, 4001, 4002, 4001]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        drop(sink);
        let again = AuditSink::open(target, LogFormat::Json).unwrap();
        again.emit(&Event::Lifecycle(samples::start()));
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 5);
        assert_eq!(again.write_errors(), 0);
        std::fs::remove_file(&path).unwrap();
    }

    /// Replaces one word.
    struct Word(&'static str);

    impl Redact for Word {
        fn redact(&self, line: &str) -> Option<String> {
            line.contains(self.0)
                .then(|| line.replace(self.0, "[redacted:test/key]"))
        }
    }

    #[test]
    fn every_line_is_redacted_before_it_is_written() {
        let (audit, human) = (Shared::default(), Shared::default());
        let sink = AuditSink::new(
            Box::new(audit.clone()),
            Box::new(human.clone()),
            LogFormat::Shorthand,
            samples::ctx(),
            "test",
        );
        sink.set_redactor(Arc::new(Word("api.github.com")));
        sink.emit(&Event::ConnectionOpen(samples::open(Outcome::Allowed)));
        sink.emit(&Event::HttpRequest(samples::request(Outcome::Allowed)));
        for text in [audit.text(), human.text()] {
            assert!(!text.contains("api.github.com"), "{text}");
            assert!(text.contains("[redacted:test/key]"), "{text}");
        }
        for line in audit.text().lines() {
            serde_json::from_str::<Value>(line).unwrap();
        }
    }

    #[test]
    fn human_lines_follow_the_log_format() {
        let (audit, human) = (Shared::default(), Shared::default());
        let sink = AuditSink::new(
            Box::new(audit.clone()),
            Box::new(human.clone()),
            LogFormat::Shorthand,
            samples::ctx(),
            "test",
        );
        sink.emit(&Event::ConnectionOpen(samples::open(Outcome::Allowed)));
        assert_eq!(
            human.text(),
            "NET:OPEN [INFO] ALLOWED /usr/bin/curl(4242) -> api.github.com:443 \
             [policy:github engine:l4]\n"
        );
        let json: Value = serde_json::from_str(audit.text().trim_end()).unwrap();
        assert_eq!(json["metadata"]["uid"], "i-1:7:open");
        assert!(audit.text().ends_with("}\n"));
        assert_eq!(audit.text().lines().count(), 1);

        let human = Shared::default();
        let sink = AuditSink::new(
            Box::new(audit.clone()),
            Box::new(human.clone()),
            LogFormat::Json,
            samples::ctx(),
            "test",
        );
        sink.emit(&Event::ConnectionClose(samples::close()));
        assert_eq!(audit.text().lines().nth(1), human.text().lines().next());
    }

    #[test]
    fn write_failures_are_counted_and_reported_once() {
        let (audit, human) = (Shared::default(), Shared::default());
        let sink = AuditSink::new(
            Box::new(Flaky {
                inner: audit.clone(),
                budget: 0,
                failures_left: 3,
            }),
            Box::new(human.clone()),
            LogFormat::Shorthand,
            samples::ctx(),
            "/var/log/sluice.jsonl",
        );
        for _ in 0..4 {
            sink.emit(&Event::Lifecycle(samples::start()));
        }
        assert_eq!(sink.write_errors(), 3);
        let reports = human
            .text()
            .lines()
            .filter(|l| l.starts_with("sluice: cannot write the audit log /var/log/sluice.jsonl"))
            .count();
        assert_eq!(reports, 1);
        // Human lines kept flowing, and the audit recovered.
        assert_eq!(human.text().lines().count(), 5);
        assert_eq!(audit.text().lines().count(), 1);
    }

    #[test]
    fn a_line_cut_short_is_not_glued_to_the_next() {
        let audit = Shared::default();
        let sink = AuditSink::new(
            Box::new(Flaky {
                inner: audit.clone(),
                budget: 10,
                failures_left: 1,
            }),
            Box::new(io::sink()),
            LogFormat::Shorthand,
            samples::ctx(),
            "test",
        );
        sink.emit(&Event::Lifecycle(samples::start()));
        sink.emit(&Event::Lifecycle(samples::start()));
        let text = audit.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0].len(), 10);
        assert!(serde_json::from_str::<Value>(lines[1]).is_ok());
        assert_eq!(sink.write_errors(), 1);
    }

    #[test]
    fn disabled_sink_drops_everything() {
        let sink = AuditSink::disabled();
        for e in events() {
            sink.emit(&e);
        }
        assert_eq!(sink.write_errors(), 0);
        assert!(sink.context().is_none());
        assert_eq!(format!("{sink:?}"), "AuditSink(disabled)");
    }

    #[test]
    fn log_format_parses() {
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert_eq!("shorthand".parse(), Ok(LogFormat::Shorthand));
        assert_eq!(
            "xml".parse::<LogFormat>().unwrap_err().to_string(),
            "unknown log format `xml`: expected `shorthand` or `json`"
        );
    }

    #[test]
    fn instance_facts() {
        let ctx = this_instance();
        assert!(!ctx.hostname.is_empty());
        assert!(
            ctx.instance
                .ends_with(&format!("-{:x}", std::process::id()))
        );
    }
}
