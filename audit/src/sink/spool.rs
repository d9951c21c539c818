//! The audit spool's bounds and the state of the audit target, shared by the emitters (the
//! request path) and the writer thread: every record emitted and not yet written is in the
//! spool, in order, and counted here in records and in bytes.
//!
//! The spool holds what the target cannot take yet: a full disk, a broken or blocked pipe,
//! a slow disk. Within [`Limits`] every record waits for its turn, so nothing is lost and
//! nothing on the request path waits for the disk. Past them, [`OnFailure`] decides:
//!
//! - `closed` (the default): sluice *fails closed*: [`Spool::refusing`] turns true, and the
//!   pipeline refuses new connections and requests (`503 audit_unavailable`) until the target
//!   takes records again. Records still come (the refusals themselves, the ends of
//!   connections already open) and are kept in a reserve of a quarter of the limits
//!   ([`Limits::reserve`]); one past that too is lost, and counted;
//! - `open`: sluice serves on, and every record past the limits is lost, and counted.
//!
//! An *episode* runs from the first failed write, or the first record past the limits, to
//! the moment the target takes records again and the spool is back to half its limits: the
//! numbers of one episode are what the sink's own findings report. The sink's own findings
//! are always kept (at most a few per episode).
//!
//! This module decides; it does no I/O (`sink.rs` and `writer.rs` do).

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

/// Records the spool holds by default before it is full.
pub const DEFAULT_RECORDS: usize = 65_536;
/// Bytes the spool holds by default before it is full (each record counts the memory its
/// line takes, at least its length).
pub const DEFAULT_BYTES: usize = 32 * 1024 * 1024;
/// The least `--audit-spool-max-records` may be.
pub const MIN_RECORDS: usize = 16;
/// The least `--audit-spool-max-bytes` may be (a record is at most some tens of KiB).
pub const MIN_BYTES: usize = 1024 * 1024;

/// What sluice does when the audit spool is full (`--audit-on-failure`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnFailure {
    /// Refuse new connections and requests (`503 audit_unavailable`) until records can be
    /// written again.
    #[default]
    Closed,
    /// Serve on; every record that cannot be kept is lost, and counted.
    Open,
}

impl OnFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Closed => "closed",
            OnFailure::Open => "open",
        }
    }
}

impl FromStr for OnFailure {
    type Err = UnknownOnFailure;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "closed" => Ok(OnFailure::Closed),
            "open" => Ok(OnFailure::Open),
            other => Err(UnknownOnFailure(other.to_owned())),
        }
    }
}

/// An `--audit-on-failure` value other than `closed` or `open`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown audit failure mode `{0}`: expected `closed` or `open`")]
pub struct UnknownOnFailure(pub String);

/// How much the spool holds before it is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub records: usize,
    pub bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            records: DEFAULT_RECORDS,
            bytes: DEFAULT_BYTES,
        }
    }
}

impl Limits {
    /// What a failing-closed sink keeps beyond the limits: a quarter more.
    pub fn reserve(self) -> Limits {
        Limits {
            records: self.records / 4,
            bytes: self.bytes / 4,
        }
    }

    fn plus(self, other: Limits) -> Limits {
        Limits {
            records: self.records.saturating_add(other.records),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }

    fn exceeded_by(self, records: usize, bytes: usize) -> bool {
        records > self.records || bytes > self.bytes
    }
}

/// What becomes of one record offered to the spool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admitted {
    /// Kept, to be written in its turn. `filled`: it is the first past the limits (the
    /// sink now refuses, or loses: its finding goes out next).
    Kept { filled: bool },
    /// Not kept, and counted as lost. `filled` as above.
    Lost { filled: bool },
}

/// The numbers of one episode, for its findings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Episode {
    pub started: SystemTime,
    pub spooled: u64,
    pub lost: u64,
    pub refused: u64,
}

/// The counters at an episode's start.
#[derive(Clone, Copy, Debug)]
struct Start {
    at: SystemTime,
    spooled: u64,
    lost: u64,
    refused: u64,
}

/// What the emitters and the writer share about the spool and the target.
#[derive(Debug)]
pub struct Spool {
    pub limits: Limits,
    pub on_failure: OnFailure,
    records: AtomicUsize,
    bytes: AtomicUsize,
    /// `closed`: the spool is full; new connections and requests are refused.
    refusing: AtomicBool,
    /// `open`: the spool is full; records are being lost.
    losing: AtomicBool,
    /// The writer's last write failed; it tries again.
    failing: AtomicBool,
    /// When the write in progress started (milliseconds since the epoch), 0 when none is.
    writing_since: AtomicU64,
    spooled: AtomicU64,
    lost: AtomicU64,
    refused: AtomicU64,
    write_errors: AtomicU64,
    episode: Mutex<Option<Start>>,
}

impl Spool {
    pub fn new(limits: Limits, on_failure: OnFailure) -> Spool {
        Spool {
            limits,
            on_failure,
            records: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            refusing: AtomicBool::new(false),
            losing: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            writing_since: AtomicU64::new(0),
            spooled: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            episode: Mutex::new(None),
        }
    }

    /// Takes room for one record of `weight` bytes, or counts it lost (see the module).
    pub fn admit(&self, weight: usize) -> Admitted {
        let records = self.records.fetch_add(1, Ordering::AcqRel) + 1;
        let bytes = self.bytes.fetch_add(weight, Ordering::AcqRel) + weight;
        if !self.limits.exceeded_by(records, bytes) {
            return Admitted::Kept { filled: false };
        }
        let (flag, hard) = match self.on_failure {
            OnFailure::Closed => (&self.refusing, self.limits.plus(self.limits.reserve())),
            OnFailure::Open => (&self.losing, self.limits),
        };
        let filled = !flag.swap(true, Ordering::AcqRel);
        if filled {
            self.begin();
        }
        if hard.exceeded_by(records, bytes) {
            self.release(weight);
            self.lost.fetch_add(1, Ordering::Relaxed);
            return Admitted::Lost { filled };
        }
        Admitted::Kept { filled }
    }

    /// Takes room for one of the sink's own findings: always kept.
    pub fn admit_own(&self, weight: usize) {
        self.records.fetch_add(1, Ordering::AcqRel);
        self.bytes.fetch_add(weight, Ordering::AcqRel);
    }

    /// One record of `weight` bytes has left the spool (written, or given up).
    pub fn release(&self, weight: usize) {
        self.records.fetch_sub(1, Ordering::AcqRel);
        self.bytes.fetch_sub(weight, Ordering::AcqRel);
    }

    /// Records `n` more given up (still in the spool at exit, or the writer is gone).
    pub fn count_lost(&self, n: u64) {
        self.lost.fetch_add(n, Ordering::Relaxed);
    }

    /// Whether the pipeline must refuse new connections and requests now.
    pub fn refusing(&self) -> bool {
        self.refusing.load(Ordering::Acquire)
    }

    /// A connection or request refused because the spool is full.
    pub fn count_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// A write failed; true when it is the first of its episode.
    pub fn write_failed(&self) -> bool {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
        let first = !self.failing.swap(true, Ordering::AcqRel);
        if first {
            self.begin();
        }
        first
    }

    /// `n` records held back by a failed write (written later, or lost).
    pub fn count_spooled(&self, n: u64) {
        self.spooled.fetch_add(n, Ordering::Relaxed);
    }

    /// Whether the last write failed.
    pub fn failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// The writer is about to write (`Some(now)`) or has returned (`None`).
    pub fn writing(&self, since: Option<SystemTime>) {
        let ms = since.map_or(0, |t| super::super::ocsf::epoch_millis(t).max(1));
        self.writing_since.store(ms, Ordering::Release);
    }

    /// Whether a write has been under way for more than `stall_ms` at `now` (a blocked pipe,
    /// a hung file system).
    pub fn stalled(&self, now: SystemTime, stall_ms: u64) -> bool {
        let since = self.writing_since.load(Ordering::Acquire);
        since != 0 && super::super::ocsf::epoch_millis(now).saturating_sub(since) > stall_ms
    }

    /// A write succeeded. When the episode is over (the spool is back to half its limits),
    /// its numbers, once: the sink then serves and keeps everything again.
    pub fn wrote(&self) -> Option<Episode> {
        self.failing.store(false, Ordering::Release);
        let half = Limits {
            records: self.limits.records / 2,
            bytes: self.limits.bytes / 2,
        };
        let records = self.records.load(Ordering::Acquire);
        let bytes = self.bytes.load(Ordering::Acquire);
        if half.exceeded_by(records, bytes) {
            return None;
        }
        let start = self
            .episode
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        self.refusing.store(false, Ordering::Release);
        self.losing.store(false, Ordering::Release);
        Some(self.since(start))
    }

    /// The numbers of the episode under way, if one is.
    pub fn episode(&self) -> Option<Episode> {
        let start = *self.episode.lock().unwrap_or_else(PoisonError::into_inner);
        start.map(|s| self.since(s))
    }

    fn since(&self, start: Start) -> Episode {
        Episode {
            started: start.at,
            spooled: self.spooled().saturating_sub(start.spooled),
            lost: self.lost().saturating_sub(start.lost),
            refused: self.refused().saturating_sub(start.refused),
        }
    }

    fn begin(&self) {
        let mut episode = self.episode.lock().unwrap_or_else(PoisonError::into_inner);
        if episode.is_none() {
            *episode = Some(Start {
                at: SystemTime::now(),
                spooled: self.spooled(),
                lost: self.lost(),
                refused: self.refused(),
            });
        }
    }

    // === What the metrics read ===

    /// Records in the spool now.
    pub fn records(&self) -> usize {
        self.records.load(Ordering::Acquire)
    }

    /// Bytes in the spool now.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    pub fn spooled(&self) -> u64 {
        self.spooled.load(Ordering::Relaxed)
    }

    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(on_failure: OnFailure) -> Spool {
        Spool::new(
            Limits {
                records: 8,
                bytes: 1000,
            },
            on_failure,
        )
    }

    #[test]
    fn modes_parse_by_exactly_their_names() {
        assert_eq!("closed".parse(), Ok(OnFailure::Closed));
        assert_eq!("open".parse(), Ok(OnFailure::Open));
        assert_eq!(OnFailure::default(), OnFailure::Closed);
        assert_eq!(
            "Closed".parse::<OnFailure>().unwrap_err().to_string(),
            "unknown audit failure mode `Closed`: expected `closed` or `open`"
        );
    }

    #[test]
    fn closed_refuses_past_the_limits_keeps_a_reserve_then_loses() {
        let s = small(OnFailure::Closed);
        for _ in 0..8 {
            assert_eq!(s.admit(10), Admitted::Kept { filled: false });
        }
        assert!(!s.refusing());
        // The ninth record fills it: refusing, and that one is kept (the reserve).
        assert_eq!(s.admit(10), Admitted::Kept { filled: true });
        assert!(s.refusing());
        // The reserve: a quarter of 8 records.
        assert_eq!(s.admit(10), Admitted::Kept { filled: false });
        assert_eq!(s.records(), 10);
        assert_eq!(s.admit(10), Admitted::Lost { filled: false });
        assert_eq!((s.records(), s.bytes(), s.lost()), (10, 100, 1));
        // Bytes bound it too: one record larger than the limit and its reserve.
        assert_eq!(s.admit(2000), Admitted::Lost { filled: false });
        // The sink's own findings are always kept.
        s.admit_own(50);
        assert_eq!(s.records(), 11);
    }

    #[test]
    fn open_loses_past_the_limits_and_never_refuses() {
        let s = small(OnFailure::Open);
        for _ in 0..8 {
            assert_eq!(s.admit(10), Admitted::Kept { filled: false });
        }
        assert_eq!(s.admit(10), Admitted::Lost { filled: true });
        assert_eq!(s.admit(10), Admitted::Lost { filled: false });
        assert!(!s.refusing());
        assert_eq!((s.records(), s.lost()), (8, 2));
        // A record heavier than all the bytes is lost even in an empty spool.
        let t = small(OnFailure::Open);
        assert_eq!(t.admit(1001), Admitted::Lost { filled: true });
        assert_eq!((t.records(), t.bytes()), (0, 0));
    }

    #[test]
    fn an_episode_ends_when_writes_succeed_and_the_spool_is_back_to_half() {
        let s = small(OnFailure::Closed);
        assert!(s.write_failed());
        assert!(!s.write_failed());
        assert!(s.failing());
        for _ in 0..9 {
            s.admit(10);
        }
        s.count_spooled(9);
        s.count_refused();
        assert!(s.refusing());
        // Written down to 5 records: more than half of 8, still refusing.
        for _ in 0..4 {
            s.release(10);
        }
        assert_eq!(s.wrote(), None);
        assert!(s.refusing() && !s.failing());
        s.release(10);
        let e = s.wrote().unwrap();
        assert_eq!((e.spooled, e.lost, e.refused), (9, 0, 1));
        assert!(!s.refusing());
        // Once.
        assert_eq!(s.wrote(), None);
        assert_eq!(s.write_errors(), 2);
    }

    #[test]
    fn a_stalled_write_is_one_under_way_for_too_long() {
        let s = small(OnFailure::Closed);
        let t0 = SystemTime::now();
        assert!(!s.stalled(t0, 1000));
        s.writing(Some(t0));
        assert!(!s.stalled(t0 + std::time::Duration::from_millis(500), 1000));
        assert!(s.stalled(t0 + std::time::Duration::from_millis(1500), 1000));
        s.writing(None);
        assert!(!s.stalled(t0 + std::time::Duration::from_millis(1500), 1000));
    }
}
