//! Whether a kept process can have changed its fd table since it was last read: a process
//! none of whose threads has been given a CPU since has not run, and a process's fd table
//! changes only when a thread that uses it runs.
//!
//! A descriptor reaches a process only through something its own thread executes: `recvmsg`
//! of `SCM_RIGHTS`, `pidfd_getfd`, `dup`, `open`, `socket`, a seccomp supervisor's added
//! descriptor (installed by the target in its own context), a binder transaction's (the
//! same). Nothing another process does (`pidfd_getfd` reads a table, it does not write one;
//! `ptrace` and `process_vm_writev` change memory, which runs only when the process does)
//! writes into it while it is off every CPU. So a table read while each of the process's
//! threads was blocked, none run since, is the table now.
//!
//! How "not run since" is read, for processes of at most six threads (`kept::THREADS_KEPT`):
//!
//! 0. With several threads, the threads are listed (`task/`).
//! 1. `schedstat` of each: the thread's time on a CPU (ns) and the number of times it was
//!    given one. The kernel counts an arrival at every switch to the thread after it was
//!    queued to run, and a blocked thread is queued when woken.
//! 2. `wchan` of each: a symbol only when the thread is blocked and off the run queue (the
//!    kernel checks this under the lock a wake-up takes; a thread running, runnable, about
//!    to sleep or on its way to a CPU reads `0`, and nothing is kept).
//! 3. `stat`, read after that: as many threads as listed. Another thread can only be made
//!    by one that runs: while none of those listed has been given a CPU again, none is.
//! 4. The fd table, read in full.
//!
//! Then, at a later read: the `schedstat` of each thread listed reads the same count and
//! time as at step 1 (a thread that has exited since fails the read) → no thread has been
//! given a CPU since before step 2, when each was blocked → the table read at step 4 is the
//! table now, and its sockets answer for it. Anything else (another count, a thread gone, a
//! `schedstat` of zeros where the kernel does not keep these counts) reads the table again.
//!
//! What this does not see, that reading the table would: a process made with
//! `clone(CLONE_FILES)` but not as a thread (it shares the table, and runs on its own
//! counts). It is a child of the process or of another such one, so what it can do with a
//! socket it received a process forked the usual way can do too, and that one is not found
//! either (see `siblings`, and the re-checks, which read no siblings).

use std::sync::{Mutex, MutexGuard, PoisonError};

/// What `schedstat` says of a thread: its time on a CPU and how many times it was given one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ran {
    ns: u64,
    arrivals: u64,
}

/// Parses `/proc/<pid>/schedstat` (`<ns on CPU> <ns waiting> <arrivals>`). `None` for a
/// kernel that does not keep these counts (it prints zeros) or anything malformed.
pub(crate) fn parse_schedstat(contents: &[u8]) -> Option<Ran> {
    let text = std::str::from_utf8(contents).ok()?;
    let mut fields = text.split_ascii_whitespace();
    let ns: u64 = fields.next()?.parse().ok()?;
    let arrivals: u64 = fields.nth(1)?.parse().ok()?;
    // A thread that ran at all has spent time on a CPU: zeros are the kernel not counting.
    (ns > 0 && arrivals > 0).then_some(Ran { ns, arrivals })
}

/// The counts of every thread of a process (by tid, ascending): a process has not run since
/// its counts were read when every thread it had then reads the same now (a new thread is
/// made only by one that runs, and one that exits runs to do so; its files then fail every
/// read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counts(Vec<(u32, Ran)>);

impl Counts {
    pub(crate) fn new(mut threads: Vec<(u32, Ran)>) -> Self {
        threads.sort_unstable_by_key(|(tid, _)| *tid);
        Self(threads)
    }

    /// The threads counted, ascending.
    pub(crate) fn tids(&self) -> Vec<u32> {
        self.0.iter().map(|(tid, _)| *tid).collect()
    }
}

/// Whether `wchan` names where the thread is blocked (`0`: it is not, or it cannot be said).
pub(crate) fn blocked(wchan: &[u8]) -> bool {
    !wchan.is_empty() && wchan != b"0"
}

/// The sockets a quiet process's table held when read, and the counts it was read under.
#[derive(Debug, Default)]
pub(crate) struct Quiet(Mutex<Option<Kept>>);

#[derive(Debug, Clone)]
struct Kept {
    ran: Counts,
    sockets: Vec<u64>,
    /// The executable path the process was credited with as an ancestor, read under the
    /// same counts (see [`Quiet::exe`]).
    exe: Option<String>,
}

impl Quiet {
    /// Whether the table kept holds `inode`, when the process has not run since (`ran` are
    /// its counts now): `None` when nothing is kept or the counts differ.
    pub(crate) fn holds(&self, ran: &Counts, inode: u64) -> Option<bool> {
        let kept = lock(&self.0);
        let kept = kept.as_ref().filter(|kept| kept.ran == *ran)?;
        Some(kept.sockets.contains(&inode))
    }

    /// Keeps `sockets`, the whole table read after the process was seen blocked with the
    /// counts `ran` (steps 1 to 4 of the module documentation); `None` forgets what was kept.
    pub(crate) fn keep(&self, read: Option<(Counts, Vec<u64>)>) {
        *lock(&self.0) = read.map(|(ran, sockets)| Kept {
            ran,
            sockets,
            exe: None,
        });
    }

    /// The executable path (vouched for, or empty) the process was credited with when its
    /// counts read `ran`, as they do now: `None` when none was kept under them.
    ///
    /// What an ancestor's path is worth changes only with what the process does itself
    /// (`execve`; `unshare` or `setns` of its user namespace; a new `exe` link with
    /// `prctl`), and a process that has not run since does none of it. (A process sharing its
    /// memory with `clone(CLONE_VM)` but not its counts could set that memory's `exe` link
    /// from a namespace of its own: then the path kept is the one the process had, not the
    /// one it was given; a process sharing memory is the process, see "what identification
    /// cannot see".)
    pub(crate) fn exe(&self, ran: &Counts) -> Option<String> {
        let kept = lock(&self.0);
        kept.as_ref().filter(|kept| kept.ran == *ran)?.exe.clone()
    }

    /// The sockets of the table kept under the counts `ran` (`None` when the table kept is
    /// under other counts, or none is).
    pub(crate) fn sockets(&self, ran: &Counts) -> Option<Vec<u64>> {
        let kept = lock(&self.0);
        Some(
            kept.as_ref()
                .filter(|kept| kept.ran == *ran)?
                .sockets
                .clone(),
        )
    }

    /// The threads whose counts the table kept was read under.
    pub(crate) fn tids(&self) -> Option<Vec<u32>> {
        lock(&self.0).as_ref().map(|kept| kept.ran.tids())
    }

    /// Keeps `exe`, read after the counts read `ran`, with the table kept under them (nothing
    /// when the table kept is under other counts, or none is).
    pub(crate) fn keep_exe(&self, ran: &Counts, exe: &str) {
        if let Some(kept) = lock(&self.0).as_mut().filter(|kept| kept.ran == *ran) {
            kept.exe = Some(exe.to_owned());
        }
    }
}

/// One assignment per critical section: a poisoned lock is used as is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_gives_time_and_arrivals_and_zeros_are_nothing() {
        assert_eq!(
            parse_schedstat(b"110008383 898546520 319\n"),
            Some(Ran {
                ns: 110_008_383,
                arrivals: 319
            })
        );
        assert_eq!(parse_schedstat(b"0 0 0\n"), None);
        assert_eq!(parse_schedstat(b"12 5\n"), None);
        assert_eq!(parse_schedstat(b"x 1 2\n"), None);
    }

    #[test]
    fn only_a_symbol_is_blocked() {
        assert!(blocked(b"poll_schedule_timeout.constprop.0"));
        assert!(!blocked(b"0"));
        assert!(!blocked(b""));
    }

    #[test]
    fn a_kept_table_answers_only_under_the_same_counts() {
        let quiet = Quiet::default();
        let ran = Counts::new(vec![(
            1,
            Ran {
                ns: 10,
                arrivals: 2,
            },
        )]);
        assert_eq!(quiet.holds(&ran, 7), None);
        quiet.keep(Some((ran.clone(), vec![7, 8])));
        assert_eq!(quiet.holds(&ran, 7), Some(true));
        assert_eq!(quiet.holds(&ran, 9), Some(false));
        let later = Counts::new(vec![(
            1,
            Ran {
                ns: 10,
                arrivals: 3,
            },
        )]);
        assert_eq!(quiet.holds(&later, 9), None);
        let longer = Counts::new(vec![(
            1,
            Ran {
                ns: 11,
                arrivals: 2,
            },
        )]);
        assert_eq!(quiet.holds(&longer, 9), None);
        quiet.keep(None);
        assert_eq!(quiet.holds(&ran, 9), None);
        // Several threads: each must read the same, and one more or one fewer is not it.
        let one = Ran {
            ns: 10,
            arrivals: 2,
        };
        let two = Counts::new(vec![(5, one), (3, one)]);
        quiet.keep(Some((two.clone(), vec![7])));
        assert_eq!(two.tids(), [3, 5]);
        assert_eq!(
            quiet.holds(&Counts::new(vec![(3, one), (5, one)]), 7),
            Some(true)
        );
        assert_eq!(quiet.holds(&Counts::new(vec![(3, one)]), 7), None);
        let moved = Ran {
            ns: 10,
            arrivals: 3,
        };
        assert_eq!(
            quiet.holds(&Counts::new(vec![(3, one), (5, moved)]), 7),
            None
        );
    }

    #[test]
    fn a_kept_path_answers_only_under_the_counts_of_the_table_kept_with_it() {
        let quiet = Quiet::default();
        let ran = Counts::new(vec![(
            1,
            Ran {
                ns: 10,
                arrivals: 2,
            },
        )]);
        let later = Counts::new(vec![(
            1,
            Ran {
                ns: 12,
                arrivals: 3,
            },
        )]);
        // Nothing kept: no path kept either.
        quiet.keep_exe(&ran, "/usr/bin/make");
        assert_eq!(quiet.exe(&ran), None);
        quiet.keep(Some((ran.clone(), vec![7])));
        assert_eq!(quiet.exe(&ran), None);
        // A path read under other counts than the table's is not kept.
        quiet.keep_exe(&later, "/usr/bin/make");
        assert_eq!(quiet.exe(&ran), None);
        quiet.keep_exe(&ran, "/usr/bin/make");
        assert_eq!(quiet.exe(&ran).as_deref(), Some("/usr/bin/make"));
        // It ran since: nothing.
        assert_eq!(quiet.exe(&later), None);
        // A table kept again (it ran, then blocked) starts without a path.
        quiet.keep(Some((later.clone(), vec![7])));
        assert_eq!(quiet.exe(&later), None);
        assert_eq!(quiet.exe(&ran), None);
    }
}
