//! The bounded list of recently identified client processes, most recent first.
//!
//! An agent opens many connections from the same few processes, so their fd tables (and their
//! children's) are the first place to look for a new socket. An entry is a pid plus its start
//! time: a pid that now belongs to another process (same number, other start time) is dropped
//! instead of searched. Only *where to look* is cached; what a process is (exe, parent, argv)
//! is always read again, because execve and reparenting change it under the same pid.

use std::collections::VecDeque;

/// One process: a pid and the start time that tells its incarnations apart, and the
/// descriptor under which it held its last identified socket (looked at first: a client
/// that opens one connection after another mostly gets the same number again, or the next).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecentPid {
    pub(crate) pid: u32,
    pub(crate) start_time: u64,
    pub(crate) fd: Option<u32>,
    /// A descriptor far from `fd` under which it held an earlier socket, looked at next: a
    /// client holding many connections gets new ones above them and, once some have closed,
    /// in the gaps they left below.
    pub(crate) elsewhere: Option<u32>,
}

/// How far from the last descriptor an earlier one is remembered as `elsewhere`.
const FAR: u32 = 256;

#[derive(Debug)]
pub(crate) struct RecentPids {
    entries: VecDeque<RecentPid>,
    capacity: usize,
}

impl RecentPids {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    /// Moves (or adds) `entry` to the front, evicting the least recent beyond capacity.
    pub(crate) fn touch(&mut self, mut entry: RecentPid) {
        if let Some(known) = self
            .entries
            .iter()
            .find(|known| known.pid == entry.pid && known.start_time == entry.start_time)
        {
            entry.elsewhere = match (known.fd, entry.fd) {
                (Some(old), Some(new)) if old.abs_diff(new) > FAR => Some(old),
                _ => known
                    .elsewhere
                    .filter(|old| entry.fd.is_none_or(|new| old.abs_diff(new) > FAR)),
            };
        }
        self.entries.retain(|known| known.pid != entry.pid);
        if self.capacity == 0 {
            return;
        }
        self.entries.push_front(entry);
        self.entries.truncate(self.capacity);
    }

    /// Drops `entry` if it is still the one recorded (a concurrent lookup may have replaced it).
    pub(crate) fn forget(&mut self, entry: RecentPid) {
        self.entries.retain(|known| *known != entry);
    }

    /// The entries, most recent first, so the caller can search without holding the lock.
    pub(crate) fn snapshot(&self) -> Vec<RecentPid> {
        self.entries.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pid: u32, start_time: u64) -> RecentPid {
        RecentPid {
            pid,
            start_time,
            fd: None,
            elsewhere: None,
        }
    }

    fn at(pid: u32, fd: u32) -> RecentPid {
        RecentPid {
            fd: Some(fd),
            ..entry(pid, 10)
        }
    }

    #[test]
    fn a_far_earlier_descriptor_is_remembered_beside_the_last() {
        let mut recent = RecentPids::new(4);
        recent.touch(at(1, 3000));
        recent.touch(at(1, 3001));
        assert_eq!(recent.snapshot()[0].elsewhere, None);
        // A gap far below filled: the top is remembered.
        recent.touch(at(1, 40));
        assert_eq!(recent.snapshot()[0].elsewhere, Some(3001));
        // Next to the gap again: the top is still remembered.
        recent.touch(at(1, 41));
        assert_eq!(recent.snapshot()[0].elsewhere, Some(3001));
        // Back at the top: the gap is remembered instead.
        recent.touch(at(1, 3002));
        assert_eq!(recent.snapshot()[0].elsewhere, Some(41));
        // Another incarnation of the pid starts afresh.
        recent.touch(RecentPid {
            start_time: 11,
            ..at(1, 5)
        });
        assert_eq!(recent.snapshot()[0].elsewhere, None);
    }

    #[test]
    fn most_recent_first_and_bounded() {
        let mut recent = RecentPids::new(2);
        recent.touch(entry(1, 10));
        recent.touch(entry(2, 20));
        recent.touch(entry(3, 30));
        assert_eq!(recent.snapshot(), [entry(3, 30), entry(2, 20)]);
        recent.touch(entry(2, 20));
        assert_eq!(recent.snapshot(), [entry(2, 20), entry(3, 30)]);
    }

    #[test]
    fn a_reused_pid_replaces_the_old_incarnation() {
        let mut recent = RecentPids::new(4);
        recent.touch(entry(7, 10));
        recent.touch(entry(7, 99));
        assert_eq!(recent.snapshot(), [entry(7, 99)]);
        recent.forget(entry(7, 10));
        assert_eq!(recent.snapshot(), [entry(7, 99)]);
        recent.forget(entry(7, 99));
        assert!(recent.snapshot().is_empty());
    }

    #[test]
    fn zero_capacity_keeps_nothing() {
        let mut recent = RecentPids::new(0);
        recent.touch(entry(1, 1));
        assert!(recent.snapshot().is_empty());
    }
}
