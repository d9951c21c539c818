//! The human lines on stderr (the shorthand, or the JSON with `--log-format json`), written by
//! a thread of their own so that a stderr nobody reads (a blocked pipe, a suspended
//! terminal) never holds up the audit log nor the request path.
//!
//! Emitters hand each line over without waiting: the queue holds [`QUEUE_LINES`] lines, and
//! a line that finds it full is dropped and counted ([`Human::dropped`]). Those lines are a
//! view for people; the audit log is the record, and it is not bounded this way (`spool`).
//! Every line passes the redactor first, as the audit lines do.

use std::io::{self, BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::Duration;

use super::Redactor;

/// Lines waiting for stderr before a new one is dropped.
pub const QUEUE_LINES: usize = 4096;

/// Bytes gathered before a write to stderr.
const WRITE_BUFFER: usize = 64 * 1024;

enum Msg {
    /// One line, without its newline.
    Line(Vec<u8>),
    /// Write and flush everything before this, then answer.
    Flush(mpsc::Sender<()>),
}

/// The human output: a bounded, lossy queue to its writer thread (which ends once this is
/// dropped and what was queued is written).
pub(super) struct Human {
    tx: SyncSender<Msg>,
    dropped: AtomicU64,
}

impl Human {
    /// Starts the writer over `out`; it rests `pause` after writing what gathered (as the
    /// audit writer does: no wake-up per line under load).
    pub(super) fn start(
        out: Box<dyn Write + Send>,
        redactor: Redactor,
        pause: Duration,
    ) -> io::Result<Human> {
        let (tx, rx) = mpsc::sync_channel(QUEUE_LINES);
        let out = BufWriter::with_capacity(WRITE_BUFFER, out);
        std::thread::Builder::new()
            .name("sluice-log".into())
            .spawn(move || run(&rx, out, &redactor, pause))?;
        Ok(Human {
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    /// Hands `line` (no newline) over, or drops it when the queue is full.
    pub(super) fn line(&self, line: Vec<u8>) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.tx.try_send(Msg::Line(line))
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Returns once every line handed over before is written (it waits for stderr).
    pub(super) fn flush(&self) {
        let (done, wait) = mpsc::channel();
        if self.tx.send(Msg::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }

    /// Lines dropped because the queue was full.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Like [`Human::flush`], waiting at most `within` (a stderr nobody reads is given up
    /// on: the process is ending).
    pub(super) fn flush_within(&self, within: Duration) {
        let (done, wait) = mpsc::channel();
        if self.tx.try_send(Msg::Flush(done)).is_ok() {
            let _ = wait.recv_timeout(within);
        }
    }
}

fn run(
    rx: &Receiver<Msg>,
    mut out: BufWriter<Box<dyn Write + Send>>,
    redactor: &Redactor,
    pause: Duration,
) {
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                Msg::Line(line) => {
                    let mut line = redactor.redacted(line);
                    line.push(b'\n');
                    // A stderr that fails is not worth more than that.
                    let _ = out.write_all(&line);
                }
                Msg::Flush(done) => {
                    let _ = out.flush();
                    let _ = done.send(());
                }
            }
            next = rx.try_recv().ok();
        }
        let _ = out.flush();
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
}
