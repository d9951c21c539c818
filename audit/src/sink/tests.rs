//! The audit sink's tests: lines written whole, in order, redacted; held in the spool while
//! the target fails and written when it recovers; a full spool refusing (closed) or losing
//! and counting (open); emitters never waiting for a blocked target.

use std::os::unix::fs::PermissionsExt;

use std::time::{Duration, Instant};

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

/// What a [`Target`] does with the next writes.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Takes everything.
    Accept,
    /// Takes this many bytes more, then fails every write (a disk filling up).
    Budget(usize),
    /// Fails every write.
    Fail,
}

/// An audit target the test turns on and off, as a disk that fills and is freed.
#[derive(Clone)]
struct Target {
    inner: Shared,
    mode: Arc<Mutex<Mode>>,
}

impl Target {
    fn new(mode: Mode) -> Target {
        Target {
            inner: Shared::default(),
            mode: Arc::new(Mutex::new(mode)),
        }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

impl Write for Target {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut mode = self.mode.lock().unwrap();
        let n = match *mode {
            Mode::Accept => buf.len(),
            Mode::Fail | Mode::Budget(0) => {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            Mode::Budget(left) => {
                let n = buf.len().min(left);
                *mode = Mode::Budget(left - n);
                n
            }
        };
        self.inner.write(&buf[..n])
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A sink over `target` with `spool`, queued (`wait` false) or waiting.
fn sink_over(target: &Target, human: &Shared, spool: SpoolConfig, wait: bool) -> AuditSink {
    AuditSink::start(
        Box::new(target.clone()),
        Box::new(human.clone()),
        LogFormat::Shorthand,
        samples::ctx(),
        "/var/log/sluice.jsonl",
        spool,
        wait,
    )
    .unwrap()
}

/// Waits (10 s at most) until `cond` holds.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The `finding_info.types[0]` of each finding line, else the class, of each audit line.
fn kinds(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            match v["finding_info"]["types"][0].as_str() {
                Some(t) => t.to_string(),
                None => v["class_uid"].to_string(),
            }
        })
        .collect()
}

/// An HTTP Activity event whose path says which it is.
fn numbered(i: usize) -> Event {
    let mut e = samples::request(Outcome::Allowed);
    e.path = format!("/n/{i}");
    Event::HttpRequest(e)
}

/// The paths of the HTTP Activity lines, in order.
fn paths(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["http_request"]["url"]["path"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
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

/// A disk that fills: the record being written and every one after it are kept in order,
/// the failure is reported once (stderr) and audited once, and when the disk has room again
/// everything is written, in order, followed by the recovery finding.
#[test]
fn a_failing_target_keeps_every_record_in_order_and_writes_them_when_it_recovers() {
    let (target, human) = (Target::new(Mode::Fail), Shared::default());
    let sink = sink_over(&target, &human, SpoolConfig::default(), true);
    for i in 0..4 {
        sink.emit(&numbered(i));
    }
    let spool = sink.spool().unwrap();
    assert!(spool.failing());
    assert_eq!(spool.records(), 5, "four records and the finding wait");
    assert_eq!(target.inner.text(), "");
    // Tried again and again meanwhile, reported once.
    eventually("a few more tries", || sink.write_errors() >= 3);
    let reports = human
        .text()
        .lines()
        .filter(|l| {
            l.starts_with(
                "sluice: cannot write the audit log /var/log/sluice.jsonl: No space left on device",
            )
        })
        .count();
    assert_eq!(reports, 1, "{}", human.text());

    target.set(Mode::Accept);
    eventually("the recovery", || {
        target.inner.text().contains(FINDING_RECOVERED)
    });
    let text = target.inner.text();
    assert_eq!(
        kinds(&text),
        [
            "4002",
            FINDING_WRITE_FAILED,
            "4002",
            "4002",
            "4002",
            FINDING_RECOVERED
        ]
    );
    assert_eq!(paths(&text), ["/n/0", "/n/1", "/n/2", "/n/3"]);
    let recovered = text.lines().last().unwrap();
    assert!(
        recovered.contains("4 record(s) were held in the spool and are written in order, 0 lost"),
        "{recovered}"
    );
    let spool = sink.spool().unwrap();
    assert_eq!((spool.spooled(), spool.lost(), spool.records()), (4, 0, 0));
    assert!(!spool.failing());
    // The human lines kept flowing: the four events, the report, the two findings.
    sink.flush();
    assert_eq!(human.text().lines().count(), 7, "{}", human.text());
}

/// A disk that fills in the middle of a line: the rest of that line is written when it has
/// room again, so the line is whole, and the next starts on its own line.
#[test]
fn a_line_cut_short_is_finished_when_the_target_recovers() {
    let (target, human) = (Target::new(Mode::Budget(10)), Shared::default());
    let sink = sink_over(&target, &human, SpoolConfig::default(), true);
    sink.emit(&numbered(0));
    sink.emit(&numbered(1));
    assert_eq!(target.inner.text().len(), 10);
    target.set(Mode::Accept);
    eventually("the recovery", || {
        target.inner.text().contains(FINDING_RECOVERED)
    });
    let text = target.inner.text();
    assert_eq!(
        kinds(&text),
        ["4002", FINDING_WRITE_FAILED, "4002", FINDING_RECOVERED]
    );
    assert_eq!(paths(&text), ["/n/0", "/n/1"]);
}

fn small(on_failure: OnFailure) -> SpoolConfig {
    SpoolConfig {
        limits: Limits {
            records: 16,
            bytes: 1 << 20,
        },
        on_failure,
    }
}

/// `closed`: past the spool's limits, the sink asks the pipeline to refuse (and says so, as
/// a finding with a human line); the reserve keeps what comes meanwhile; once written again,
/// it serves, and nothing it kept is lost.
#[test]
fn a_full_spool_fails_closed_until_it_is_written_again() {
    let (target, human) = (Target::new(Mode::Fail), Shared::default());
    let sink = sink_over(&target, &human, small(OnFailure::Closed), false);
    for i in 0..16 {
        sink.emit(&numbered(i));
    }
    eventually("the write failure", || sink.spool().unwrap().failing());
    // 16 records and the failure finding: full.
    sink.emit(&numbered(16));
    assert!(sink.refusing());
    sink.refused();
    // The reserve (a quarter) keeps a few more; past it they are lost, and counted.
    for i in 17..30 {
        sink.emit(&numbered(i));
    }
    let spool = sink.spool().unwrap();
    assert!(spool.lost() > 0, "{spool:?}");
    let kept = spool.records();
    assert!(kept <= 16 + 4 + 2, "{kept} records kept");
    eventually("the finding's human line", || {
        human.text().contains(FINDING_FAILING_CLOSED)
    });

    target.set(Mode::Accept);
    eventually("the recovery", || !sink.refusing());
    eventually("the recovery finding", || {
        target.inner.text().contains(FINDING_RECOVERED)
    });
    let text = target.inner.text();
    let written = paths(&text);
    // Every record kept is written, in order, with none between them missing: the lost
    // ones are the last.
    let expected: Vec<String> = (0..written.len()).map(|i| format!("/n/{i}")).collect();
    assert_eq!(written, expected);
    assert_eq!(written.len() as u64 + spool.lost(), 30);
    let last = text.lines().last().unwrap();
    assert!(
        last.contains("1 connection(s) or request(s) refused"),
        "{last}"
    );
    assert_eq!(spool.refused(), 1);
}

/// `open`: past the limits the sink never refuses; records it cannot keep are lost and
/// counted, and the loss is a finding.
#[test]
fn a_full_spool_in_open_mode_loses_and_counts() {
    let (target, human) = (Target::new(Mode::Fail), Shared::default());
    let sink = sink_over(&target, &human, small(OnFailure::Open), false);
    for i in 0..40 {
        sink.emit(&numbered(i));
        assert!(!sink.refusing());
    }
    let spool = sink.spool().unwrap();
    assert!(spool.lost() >= 40 - 16, "{spool:?}");
    eventually("the finding's human line", || {
        human.text().contains(FINDING_RECORDS_LOST)
    });
    target.set(Mode::Accept);
    eventually("the recovery finding", || {
        target.inner.text().contains(FINDING_RECOVERED)
    });
    let text = target.inner.text();
    assert_eq!(paths(&text).len() as u64 + spool.lost(), 40);
    assert!(text.contains(FINDING_RECORDS_LOST));
}

/// A target that never recovers: closing tries for the time given, then prints what is left
/// on stderr (redacted) and counts it lost.
#[test]
fn closing_a_failed_sink_prints_what_is_left_and_counts_it() {
    let (target, human) = (Target::new(Mode::Fail), Shared::default());
    let sink = sink_over(&target, &human, SpoolConfig::default(), false);
    for i in 0..3 {
        sink.emit(&numbered(i));
    }
    let started = Instant::now();
    let closed = sink.close(Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(5));
    // Three records and the failure finding.
    assert_eq!(closed.unwritten, 4);
    assert_eq!(sink.spool().unwrap().lost(), 4);
    assert_eq!(target.inner.text(), "");
    // Emitted after closing: lost too, never a panic.
    sink.emit(&numbered(9));
    assert_eq!(sink.spool().unwrap().lost(), 5);
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

/// A writer that cannot keep up (a FIFO whose reader does not read yet) never makes an
/// emitter wait: they are spooled; once the reader reads, every event arrives, none dropped.
#[test]
fn a_blocked_target_never_makes_emitters_wait_and_loses_nothing() {
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
    let sink = AuditSink::open_queued(
        path.to_str().unwrap(),
        LogFormat::Json,
        SpoolConfig::default(),
    )
    .unwrap();
    // The pipe holds 64 KiB: most of these wait in the spool, and no emit waits for them.
    let total = 8192;
    for _ in 0..total {
        sink.emit(&Event::HttpRequest(samples::request(Outcome::Allowed)));
    }
    let spool = sink.spool().unwrap();
    assert!(spool.records() > total / 2, "{}", spool.records());
    eventually("the write stalls", || spool.stalled(SystemTime::now(), 50));
    assert!(!sink.refusing());
    let mut text = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while spool.records() > 0 {
        match reader.read(&mut buf) {
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{e}"),
        }
    }
    sink.close(Duration::from_secs(5));
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
    assert_eq!((spool.write_errors(), spool.lost()), (0, 0));
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
