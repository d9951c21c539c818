//! The audit sink's tests: lines written whole, redacted, queued with backpressure.

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
    // Lines are readable while the sink is alive, once the writer has had them.
    sink.flush();
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
    again.flush();
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 5);
    assert_eq!(again.write_errors(), 0);
    std::fs::remove_file(&path).unwrap();
}

/// Replaces one word.
struct Word(&'static str);

impl Redact for Word {
    fn redact(&self, line: &[u8]) -> Option<Vec<u8>> {
        let line = std::str::from_utf8(line).ok()?;
        line.contains(self.0)
            .then(|| line.replace(self.0, "[redacted:test/key]").into_bytes())
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
    sink.flush();
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
    sink.flush();
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
    sink.flush();
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
    sink.flush();
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
    sink.flush();
    let text = audit.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0].len(), 10);
    assert!(serde_json::from_str::<Value>(lines[1]).is_ok());
    assert_eq!(sink.write_errors(), 1);
}

/// The serialized line is the tree `ocsf::to_json` describes, key for key and in order.
#[test]
fn written_lines_are_the_ocsf_objects() {
    let audit = Shared::default();
    let sink = AuditSink::new(
        Box::new(audit.clone()),
        Box::new(io::sink()),
        LogFormat::Json,
        samples::ctx(),
        "test",
    );
    let all = [
        events(),
        vec![
            Event::HttpRequest(samples::request(Outcome::Allowed)),
            Event::HttpRequest(samples::request(Outcome::Audited)),
            Event::ConnectionOpen(samples::open(Outcome::Denied)),
        ],
    ]
    .concat();
    for e in &all {
        sink.emit(e);
    }
    sink.flush();
    let text = audit.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), all.len());
    for (line, e) in lines.iter().zip(&all) {
        assert_eq!(*line, ocsf::to_json(e, &samples::ctx()).to_string());
    }
}

/// A writer that cannot keep up (a FIFO whose reader does not read yet) makes emitters
/// wait, counted; once the reader reads, every event arrives, none dropped.
#[test]
fn a_full_queue_makes_emitters_wait_and_loses_nothing() {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt as _;

    let path = temp_path("fifo");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &path,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    // The reader end first (non-blocking open), so that the sink's open does not wait.
    let mut reader = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&path)
        .unwrap();
    let sink = AuditSink::open_queued(path.to_str().unwrap(), LogFormat::Json).unwrap();
    let total = QUEUE_LINES * 2;
    let emitter = {
        let sink = sink.clone();
        std::thread::spawn(move || {
            for _ in 0..total {
                sink.emit(&Event::HttpRequest(samples::request(Outcome::Allowed)));
            }
        })
    };
    // The pipe holds 64 KiB and the queue QUEUE_LINES events: the emitter must wait.
    while sink.backpressure_waits() == 0 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(sink.queue_depth() >= QUEUE_LINES, "{}", sink.queue_depth());
    let mut text = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while !emitter.is_finished() || sink.queue_depth() > 0 {
        match reader.read(&mut buf) {
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    emitter.join().unwrap();
    let flusher = {
        let sink = sink.clone();
        std::thread::spawn(move || sink.flush())
    };
    while !flusher.is_finished() {
        match reader.read(&mut buf) {
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    flusher.join().unwrap();
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8(text).unwrap();
    assert_eq!(text.lines().count(), total);
    for line in text.lines() {
        assert_eq!(
            serde_json::from_str::<Value>(line).unwrap()["class_uid"],
            4002
        );
    }
    assert!(sink.backpressure_waits() > 0);
    assert_eq!(sink.write_errors(), 0);
    std::fs::remove_file(&path).unwrap();
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
