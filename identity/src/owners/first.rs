//! Where the first holder of a socket is looked for, before its fork family completes the
//! owner set (`owners`): the recent clients (around the descriptor each held its last socket
//! under), the processes forked last, then every process newest first.

use super::{OwnerSearch, thread_count};
use crate::procfs::ProcDir;
use crate::recent::RecentPid;
use crate::siblings::Siblings;

/// Newest children of each recent client checked before the scan (the scan covers the rest).
const RECENT_CHILDREN_LIMIT: usize = 8;
/// Descriptors the recent-client phase may read before it gives way to the scan: recent
/// clients can be long-lived programs with large fd tables, and a connection from an unrelated
/// fresh process must not pay for reading all of them.
pub(super) const RECENT_FD_BUDGET: usize = 256;
/// The first window of the descending scan; each next window is four times larger.
const FIRST_WINDOW: u32 = 8;
/// Descriptors looked at around a hint before a whole table is read, at least and at most
/// (see [`near`]).
const NEAR_MIN: u32 = 3;
const NEAR_MAX: u32 = 512;

impl OwnerSearch<'_> {
    pub(super) fn search_recent(
        &mut self,
        recent: &[RecentPid],
        stale: &mut Vec<RecentPid>,
    ) -> Option<u32> {
        for entry in recent {
            if self.reads.descriptors >= RECENT_FD_BUDGET || self.reads.spent() {
                break;
            }
            let kept = self
                .pinned
                .iter()
                .find(|pinned| pinned.pid() == entry.pid && pinned.start_time() == entry.start_time)
                .and_then(|pinned| pinned.proc_dir());
            let dir = match kept.map_or_else(|| self.proc.pid_dir(entry.pid), Ok) {
                Ok(dir)
                    if dir
                        .stat()
                        .is_ok_and(|stat| stat.start_time == entry.start_time) =>
                {
                    dir
                }
                _ => {
                    stale.push(*entry);
                    continue;
                }
            };
            let Err(dir) = self.check_dir_near(dir, entry.fd, entry.elsewhere) else {
                return Some(entry.pid);
            };
            let Err(dir) = self.check_dir_if_it_fits(dir) else {
                return Some(entry.pid);
            };
            if !self.may_list_children(thread_count(&dir)) {
                return None;
            }
            let children = dir.children().unwrap_or_default();
            for child in children.into_iter().rev().take(RECENT_CHILDREN_LIMIT) {
                if self.reads.descriptors >= RECENT_FD_BUDGET {
                    return None;
                }
                if self.check_by(child, Self::check_dir_if_it_fits) {
                    return Some(child);
                }
            }
        }
        None
    }

    pub(super) fn scan(&mut self, socket_uid: u32) -> Option<u32> {
        if self.reads.spent() {
            return None;
        }
        // The processes forked last first, as the process connector told them: a fresh
        // client is one of them, found without listing `/proc`.
        let forks = self
            .kept_siblings
            .map(Siblings::newest_forks)
            .unwrap_or_default();
        for pid in forks {
            if self.checked.contains(&pid) {
                continue;
            }
            if self.reads.spent() {
                return None;
            }
            self.reads.small(1);
            // Another uid's process is left for the scan, which reads those last. The newest
            // fork is most often the client: it is opened before its table is read, so that
            // a table that holds the socket needs no second look through the process.
            if self.proc.dir_uid(pid).is_ok_and(|uid| uid == socket_uid)
                && self.check_by(pid, Self::check_dir)
            {
                return Some(pid);
            }
        }
        let mut other_uids = Vec::new();
        let last = self.proc.last_pid().ok();
        for (lo, hi) in scan_windows(last) {
            let Ok(pids) = self.proc.pids_in(lo, hi) else {
                continue;
            };
            for pid in pids.into_iter().rev() {
                if self.checked.contains(&pid) {
                    continue;
                }
                if self.reads.spent() {
                    return None;
                }
                self.reads.small(1);
                match self.proc.dir_uid(pid) {
                    Ok(uid) if uid == socket_uid => {
                        if self.check(pid) {
                            return Some(pid);
                        }
                    }
                    Ok(_) => other_uids.push(pid),
                    Err(_) => {}
                }
            }
        }
        if let Some(pid) = other_uids.into_iter().find(|pid| self.check(*pid)) {
            return Some(pid);
        }
        if self.reads.spent() {
            return None;
        }
        let all = self.proc.all_pids().unwrap_or_default();
        all.into_iter().rev().find(|pid| self.check(*pid))
    }

    /// [`Self::check_dir`], unless this is a lookup (see [`Self::capping_recent_tables`])
    /// and the process's table is larger than what remains of [`RECENT_FD_BUDGET`]: then it
    /// is not read, nor marked as checked (the scan reads it in its turn).
    pub(super) fn check_dir_if_it_fits(&mut self, dir: ProcDir) -> Result<(), ProcDir> {
        if self.capped_recent_tables && !self.checked.contains(&dir.pid()) {
            self.reads.small(1);
            let left = RECENT_FD_BUDGET.saturating_sub(self.reads.descriptors);
            if dir
                .fd_count()
                .is_some_and(|n| n > u64::try_from(left).unwrap_or(u64::MAX))
            {
                return Err(dir);
            }
        }
        self.check_dir(dir)
    }

    /// Looks at descriptor `fd` and the ones next to it, then next to `elsewhere` (see
    /// [`near`]; one `readlink` each; in a lookup, until [`RECENT_FD_BUDGET`] descriptors
    /// have been read): where a recent client held its last socket (and an earlier one far
    /// from it), or where an identified one held this socket. Only a process
    /// that holds the socket at one of them now is an owner by it; else (`Err`) the caller
    /// reads its whole table or leaves it for later. A process already checked is answered
    /// from that check.
    pub(super) fn check_dir_near(
        &mut self,
        dir: ProcDir,
        fd: Option<u32>,
        elsewhere: Option<u32>,
    ) -> Result<(), ProcDir> {
        let pid = dir.pid();
        if self.checked.contains(&pid) {
            return self.check_dir(dir);
        }
        // `near` covers one run of numbers: the second hint skips what the first read.
        let first: Vec<u32> = fd.map(near).into_iter().flatten().collect();
        let (lo, hi) = (first.iter().min().copied(), first.iter().max().copied());
        let read_already =
            |fd: &u32| lo.is_some_and(|lo| lo <= *fd) && hi.is_some_and(|hi| *fd <= hi);
        let second = elsewhere.map(near).into_iter().flatten();
        for fd in first
            .iter()
            .copied()
            .chain(second.filter(|fd| !read_already(fd)))
        {
            // A lookup's recent pass probes no more than its own budget: another caller's
            // lookup must not spend hundreds of reads around a busy client's hint.
            if self.reads.spent()
                || (self.capped_recent_tables && self.reads.descriptors >= RECENT_FD_BUDGET)
            {
                return Err(dir);
            }
            self.reads.descriptor();
            if dir.fd_is(fd, &self.link) {
                self.checked.insert(pid);
                self.fds.insert(pid, fd);
                self.owners.insert(pid, dir);
                return Ok(());
            }
        }
        Err(dir)
    }
}

/// The descriptors looked at around `hint` before a whole fd table is read: `hint`, then
/// alternately above and below it (`hint + 1`, `hint - 1`, `hint + 2`, ...). The kernel gives
/// a new descriptor the lowest free number, so a client's next socket lands next to its last
/// one when it keeps its connections open (above it), or in a gap it just closed (below it);
/// and since the numbers in use are about as many as the highest one, a quarter of `hint`
/// (at least [`NEAR_MIN`], at most [`NEAR_MAX`]) costs a small part of reading the table
/// that a miss reads anyway. A client holding thousands of connections is then found in a
/// few reads instead of one per connection it holds.
pub(crate) fn near(hint: u32) -> impl Iterator<Item = u32> {
    let probes = (hint / 4).clamp(NEAR_MIN, NEAR_MAX);
    (0..probes).filter_map(move |i| {
        let step = i.div_ceil(2);
        if i % 2 == 1 {
            hint.checked_add(step)
        } else {
            hint.checked_sub(step)
        }
    })
}

/// The pid ranges of the descending scan: growing windows from `last` down to 1, then
/// everything above `last` (pids handed out before a wrap-around, or since `last` was read).
/// Without `last`, one range covering every pid.
pub(crate) fn scan_windows(last: Option<u32>) -> Vec<(u32, u32)> {
    let Some(last) = last.filter(|last| *last > 0) else {
        return vec![(1, u32::MAX)];
    };
    let mut windows = Vec::new();
    let mut hi = last;
    let mut size = FIRST_WINDOW;
    loop {
        let lo = hi.saturating_sub(size - 1).max(1);
        windows.push((lo, hi));
        if lo == 1 {
            break;
        }
        hi = lo - 1;
        size = size.saturating_mul(4);
    }
    if last < u32::MAX {
        windows.push((last + 1, u32::MAX));
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_every_pid_once_newest_first() {
        let windows = scan_windows(Some(1000));
        assert_eq!(windows[0], (993, 1000));
        assert_eq!(windows[1], (961, 992));
        assert_eq!(windows.last(), Some(&(1001, u32::MAX)));
        let mut covered: Vec<(u32, u32)> = windows.clone();
        covered.sort_unstable();
        assert_eq!(covered[0].0, 1);
        for pair in covered.windows(2) {
            assert_eq!(pair[0].1 + 1, pair[1].0, "gap or overlap in {windows:?}");
        }
        assert_eq!(covered.last().map(|w| w.1), Some(u32::MAX));
    }

    #[test]
    fn descriptors_near_a_hint_alternate_outwards() {
        assert_eq!(near(5).collect::<Vec<_>>(), [5, 6, 4]);
        assert_eq!(near(0).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(
            near(40).collect::<Vec<_>>(),
            [40, 41, 39, 42, 38, 43, 37, 44, 36, 45]
        );
        assert_eq!(near(10_000).count(), 512);
        assert_eq!(near(10_000).max(), Some(10_256));
        assert_eq!(near(10_000).min(), Some(9_745));
        assert_eq!(near(u32::MAX).max(), Some(u32::MAX));
    }

    #[test]
    fn small_and_missing_last_pid() {
        assert_eq!(scan_windows(Some(1)), [(1, 1), (2, u32::MAX)]);
        assert_eq!(scan_windows(Some(10)), [(3, 10), (1, 2), (11, u32::MAX)]);
        assert_eq!(scan_windows(None), [(1, u32::MAX)]);
        assert_eq!(scan_windows(Some(0)), [(1, u32::MAX)]);
        let top = scan_windows(Some(u32::MAX));
        assert_eq!(top.first().map(|w| w.1), Some(u32::MAX));
        assert_eq!(top.last().map(|w| w.0), Some(1));
    }
}
