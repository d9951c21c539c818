//! The audit writer thread: it owns the audit target and writes every record, in order, whole.
//!
//! 1. It takes what the emitters queued (each record already counted in the spool), redacts
//!    each line, and appends it to its backlog.
//! 2. It writes the backlog with `writev` from where the last write stopped, byte for byte: a
//!    record cut short by a full disk is finished, not repeated nor glued to the next, once
//!    the disk has room. A record leaves the spool when its last byte is written.
//! 3. A failed write (ENOSPC, EPIPE, EIO, ...) holds everything in the backlog, counted as
//!    spooled, and is tried again after a pause that doubles up to [`MAX_RETRY`]; the first
//!    failure of an episode is reported on stderr once and audited as a finding
//!    ([`FINDING_WRITE_FAILED`]), which is itself spooled behind the records before it.
//! 4. When everything is written again and the spool is back to half its limits, the episode
//!    ends with a finding saying what it held, lost and refused ([`FINDING_RECOVERED`]).
//! 5. Asked to stop, it keeps trying until everything is written or its time is up; what is
//!    left then is printed on stderr (it is not in the audit log), and counted as lost.
//!
//! A write that blocks (a pipe nobody reads, a hung file system) blocks only this thread:
//! the emitters never wait for it, and the spool's limits decide what happens meanwhile.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use super::super::{Finding, Severity};
use super::{Outputs, spool::Episode};

/// The first pause after a failed write.
const FIRST_RETRY: Duration = Duration::from_millis(50);
/// The longest pause between two tries of a failing target.
pub const MAX_RETRY: Duration = Duration::from_secs(1);
/// Lines handed to one `writev`.
const LINES_PER_WRITE: usize = 64;

/// The finding type of a failing audit target (the first failed write of an episode).
pub const FINDING_WRITE_FAILED: &str = "sluice.audit.write_failed";
/// The finding type of an episode's end: the audit log is written again.
pub const FINDING_RECOVERED: &str = "sluice.audit.recovered";

/// What the queue carries to the writer.
pub(super) enum Msg {
    /// One record's audit line, without its newline, and the bytes the spool counts for it.
    Event { audit: Vec<u8>, weight: usize },
    /// Answer once everything before this is written, or the target is failing.
    Flush(mpsc::Sender<()>),
    /// Write what is queued, trying for at most `within`, then answer and stop.
    Stop {
        within: Duration,
        done: mpsc::Sender<Closed>,
    },
}

/// What stopping the writer left unwritten.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Closed {
    /// Records that could not be written to the audit target (printed on stderr instead).
    pub unwritten: usize,
}

/// One redacted line with its newline, as long as it is not written whole.
struct Line {
    bytes: Vec<u8>,
    /// What the spool counts for it.
    weight: usize,
    /// Counted as spooled (held back by a failed write), or one of the sink's own findings.
    marked: bool,
}

pub(super) struct Writer {
    out: Box<dyn Write + Send>,
    outputs: Arc<Outputs>,
    backlog: VecDeque<Line>,
    /// Bytes of the backlog's first line already written.
    front_done: usize,
    /// When to try a failing target again; `None` while it is not failing.
    retry_at: Option<Instant>,
    retry: Duration,
    /// The rest after a write ([`super::WRITE_PAUSE`], or none).
    pause: Duration,
    flushes: Vec<mpsc::Sender<()>>,
}

impl Writer {
    pub(super) fn new(out: Box<dyn Write + Send>, outputs: Arc<Outputs>, pause: Duration) -> Self {
        Writer {
            out,
            outputs,
            backlog: VecDeque::new(),
            front_done: 0,
            retry_at: None,
            retry: FIRST_RETRY,
            pause,
            flushes: Vec::new(),
        }
    }

    pub(super) fn run(mut self, rx: &Receiver<Msg>) {
        let mut stop: Option<(Instant, mpsc::Sender<Closed>)> = None;
        let mut gone = false;
        loop {
            // 1. Wait for work: forever when there is none, until the next try when the
            // target is failing, not at all otherwise.
            let wake = if self.backlog.is_empty() && stop.is_none() {
                None
            } else {
                let mut at = self.retry_at.unwrap_or_else(Instant::now);
                if let Some((deadline, _)) = &stop {
                    at = at.min(*deadline);
                }
                Some(at.saturating_duration_since(Instant::now()))
            };
            let first = match wake {
                None => match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => {
                        gone = true;
                        None
                    }
                },
                Some(d) => match rx.recv_timeout(d) {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => {
                        gone = true;
                        None
                    }
                },
            };
            // 2. Take everything queued.
            let mut next = first;
            while let Some(msg) = next {
                match msg {
                    Msg::Event { audit, weight } => self.push(audit, weight, false),
                    Msg::Flush(done) => self.flushes.push(done),
                    Msg::Stop { within, done } => stop = Some((Instant::now() + within, done)),
                }
                next = rx.try_recv().ok();
            }
            if gone && stop.is_none() {
                // Every sink is gone without a stop (a panic unwinding): one last try.
                let (done, _) = mpsc::channel();
                stop = Some((Instant::now(), done));
            }
            // 3. Write when a try is due.
            let due = self.retry_at.is_none_or(|at| Instant::now() >= at);
            let wrote = !self.backlog.is_empty() && due && self.write_all();
            // 4. A flush is answered once nothing waits, or the target is failing.
            if self.backlog.is_empty() || self.retry_at.is_some() {
                for done in self.flushes.drain(..) {
                    let _ = done.send(());
                }
            }
            // 5. Stopping: done when everything is written, or time is up.
            if let Some((deadline, _)) = &stop
                && (self.backlog.is_empty() || Instant::now() >= *deadline)
            {
                let closed = self.give_up();
                if let Some((_, done)) = stop {
                    let _ = done.send(closed);
                }
                return;
            }
            if wrote && !self.pause.is_zero() {
                std::thread::sleep(self.pause);
            }
        }
    }

    /// Appends one line (redacted here, off the request path).
    fn push(&mut self, audit: Vec<u8>, weight: usize, own: bool) {
        let mut bytes = self.outputs.redactor.redacted(audit);
        bytes.push(b'\n');
        // What comes while the target is failing waits for it: spooled.
        let failing = self.retry_at.is_some();
        if failing && !own {
            self.outputs.spool.count_spooled(1);
        }
        self.backlog.push_back(Line {
            bytes,
            weight,
            marked: own || failing,
        });
    }

    /// Writes the backlog until it is empty (then the episode may end) or a write fails.
    /// True when anything was written.
    fn write_all(&mut self) -> bool {
        let mut wrote = false;
        while !self.backlog.is_empty() {
            let slices: Vec<IoSlice<'_>> = self
                .backlog
                .iter()
                .take(LINES_PER_WRITE)
                .enumerate()
                .map(|(i, l)| {
                    let from = if i == 0 { self.front_done } else { 0 };
                    IoSlice::new(l.bytes.get(from..).unwrap_or_default())
                })
                .collect();
            self.outputs.spool.writing(Some(SystemTime::now()));
            let result = self.out.write_vectored(&slices);
            self.outputs.spool.writing(None);
            match result {
                Ok(0) => {
                    self.failed(&io::Error::from(io::ErrorKind::WriteZero));
                    return wrote;
                }
                Ok(n) => {
                    wrote = true;
                    self.advance(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed(&e);
                    return wrote;
                }
            }
            if self.backlog.is_empty() {
                self.retry_at = None;
                self.retry = FIRST_RETRY;
                if let Some(episode) = self.outputs.spool.wrote() {
                    self.recovered(episode);
                }
            }
        }
        wrote
    }

    /// `n` more bytes written: the lines they complete leave the spool.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.backlog.front() else {
                return;
            };
            let left = front.bytes.len() - self.front_done;
            if n < left {
                self.front_done += n;
                return;
            }
            n -= left;
            self.front_done = 0;
            if let Some(line) = self.backlog.pop_front() {
                self.outputs.spool.release(line.weight);
            }
        }
    }

    fn failed(&mut self, e: &io::Error) {
        let spool = &self.outputs.spool;
        let first = spool.write_failed();
        // Everything waiting now waits for the target: spooled (the marked ones are the
        // front of the backlog, so the unmarked are found from its end).
        let mut held = 0;
        for line in self.backlog.iter_mut().rev() {
            if line.marked {
                break;
            }
            line.marked = true;
            held += 1;
        }
        spool.count_spooled(held);
        self.retry_at = Some(Instant::now() + self.retry);
        self.retry = (self.retry * 2).min(MAX_RETRY);
        if first {
            let target = &self.outputs.target;
            let limits = spool.limits;
            let report = format!(
                "sluice: cannot write the audit log {target}: {e}; records are kept in order in \
                 the audit spool (up to {} records or {} bytes) and written when it can be (tried \
                 again at least every {} s); until then, later write errors are counted, not \
                 reported",
                limits.records,
                limits.bytes,
                MAX_RETRY.as_secs()
            );
            self.outputs.human.line(report.into_bytes());
            let title = format!(
                "sluice cannot write its audit log {target}: {e}; records are kept in order in \
                 the spool (up to {} records or {} bytes) and written when it can be; past that, \
                 --audit-on-failure {} applies",
                limits.records,
                limits.bytes,
                spool.on_failure.as_str()
            );
            self.own(FINDING_WRITE_FAILED, title, Severity::High);
        }
    }

    fn recovered(&mut self, e: Episode) {
        let secs = SystemTime::now()
            .duration_since(e.started)
            .unwrap_or_default()
            .as_secs();
        let title = format!(
            "the audit log {} is written again after {secs} s: {} record(s) were held in the \
             spool and are written in order, {} lost, {} connection(s) or request(s) refused \
             with 503 audit_unavailable",
            self.outputs.target, e.spooled, e.lost, e.refused
        );
        self.own(FINDING_RECOVERED, title, Severity::Informational);
    }

    /// One of the sink's own findings: its human line now, its audit line at the end of the
    /// backlog (written in its turn, always kept).
    fn own(&mut self, kind: &str, title: String, severity: Severity) {
        let event = own_finding(kind, title, severity);
        let (audit, weight) = self.outputs.own_event(&event);
        self.push(audit, weight, true);
    }

    /// Stopping with lines unwritten: they go to stderr (redacted, as they are), and are lost
    /// to the audit log.
    fn give_up(&mut self) -> Closed {
        let unwritten = self.backlog.len();
        if unwritten > 0 {
            let mut err = io::stderr().lock();
            let _ = writeln!(
                err,
                "sluice: {unwritten} audit record(s) could not be written to {} before exit; \
                 here they are:",
                self.outputs.target
            );
            for line in self.backlog.drain(..) {
                let _ = err.write_all(&line.bytes);
                self.outputs.spool.release(line.weight);
            }
            let _ = err.flush();
            self.outputs.spool.count_lost(unwritten as u64);
        }
        for done in self.flushes.drain(..) {
            let _ = done.send(());
        }
        Closed { unwritten }
    }
}

/// A finding of the sink itself: no caller, no connection.
pub(super) fn own_finding(kind: &str, title: String, severity: Severity) -> super::super::Event {
    super::super::Event::Finding(Finding {
        time: SystemTime::now(),
        id: 0,
        caller: None,
        src: std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
        dst: super::super::Destination::nowhere(),
        kind: kind.to_string(),
        guard: super::super::Guard::Audit,
        title,
        credential: None,
        policy: None,
        severity,
    })
}
