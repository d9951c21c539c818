//! What a recheck of one connection needs from the caller's fork family when nothing in it
//! has changed since the last recheck that read it in full: a snapshot of the family, kept
//! with the identified process and checked in a few reads per request instead of a walk.
//!
//! A full recheck (`IdentityResolver::recheck`) proves that no process of the family holds
//! the socket but the identified one: it reads every ancestor below init (each one's fd
//! table, or the table kept while it has not run: `quiet`) and the identified process's
//! descendants. When that recheck found the identified process the only holder, it had no
//! children (but sluice itself), and every ancestor was quiet, its answer stays true for any
//! socket of that process for as long as the following do, which a later recheck reads
//! instead of walking the family again:
//!
//! 1. **No child.** Each of the process's threads' `children` files (kept open: a thread that
//!    has exited fails every read) lists no process but sluice, and `task/` (kept open; its
//!    link count is the number of threads plus two) counts the threads listed when the
//!    snapshot was taken. A process that gets the socket by fork is a child while its
//!    parent lives; one that has since exited holds nothing. (A child that forked a
//!    grandchild and exited leaves the grandchild to init or a subreaper, where the full
//!    recheck does not look either: see the crate's limits.)
//! 2. **No ancestor has run.** Each ancestor's threads read the same scheduling counts as
//!    when its table was read while every thread was blocked (`quiet`): its table is the one
//!    read then. A process receives a descriptor (`recvmsg`, `pidfd_getfd`) or forks only by
//!    running; an ancestor that exits runs to do so, and one reparented after its parent
//!    exits has a chain that is a part of this one.
//! 3. **The socket is in no ancestor's table as read then** (a socket made since the snapshot
//!    is in none).
//!
//! The identified process itself is read as at every recheck (its descriptor and `exe`).
//! Any read that fails or differs drops the snapshot, and the recheck walks the family in
//! full (and takes a new snapshot when it passes).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rustix::fs::{Dir, Mode, OFlags};

use super::{Pinned, numeric, read_children, thread_counts};
use crate::kept::{FAMILY_MIN_OPEN_FILES, FAMILY_THREADS, KeptFiles};
use crate::quiet::Counts;
use crate::reads::Reads;

/// One ancestor below init, as the full recheck found it: quiet under `ran`, its table then
/// holding `sockets`.
#[derive(Debug)]
struct Ancestor {
    kept: Arc<KeptFiles>,
    /// The threads `ran` counts.
    tids: Vec<u32>,
    ran: Counts,
    sockets: Vec<u64>,
}

/// A fork family read in full by a passed recheck (see the module documentation).
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// `task/` of the identified process, for its thread count.
    task: OwnedFd,
    /// Each thread's `children` file.
    children: Vec<OwnedFd>,
    ancestors: Vec<Ancestor>,
    /// sluice itself, a child of the identified process when that process started it.
    own_pid: u32,
}

impl Snapshot {
    /// The snapshot of `pinned`'s family after a recheck that found it the socket's only
    /// holder, with `ancestry`: every ancestor below init with the counts it was found quiet
    /// under. `None` when the family does not qualify (a child, too many threads, an
    /// ancestor whose table was not kept) or a read fails.
    pub(crate) fn take(
        pinned: &Pinned,
        ancestry: Vec<(Arc<KeptFiles>, Counts)>,
        own_pid: u32,
    ) -> Option<Snapshot> {
        if !pinned.may_keep_files() || crate::kept::open_file_limit() < FAMILY_MIN_OPEN_FILES {
            return None;
        }
        let ancestors = ancestry
            .into_iter()
            .map(|(kept, ran)| {
                let sockets = kept.quiet().sockets(&ran)?;
                Some(Ancestor {
                    tids: ran.tids(),
                    kept,
                    ran,
                    sockets,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let task = crate::exhaust::openat(pinned.dir(), "task", flags, Mode::empty()).ok()?;
        let mut tids = Vec::new();
        let mut listing = Dir::read_from(&task).ok()?;
        while let Some(entry) = listing.read() {
            let name = entry.ok()?;
            if let Some(tid) = numeric(name.file_name().to_bytes()) {
                if tids.len() == FAMILY_THREADS {
                    return None;
                }
                tids.push(tid);
            }
        }
        let children = tids
            .iter()
            .map(|tid| {
                crate::exhaust::openat(
                    pinned.dir(),
                    format!("task/{tid}/children").as_str(),
                    OFlags::RDONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .ok()
            })
            .collect::<Option<Vec<_>>>()?;
        let snapshot = Snapshot {
            task,
            children,
            ancestors,
            own_pid,
        };
        // Read once now: a child forked since the recheck, or a thread made since the
        // listing, and there is no snapshot.
        snapshot
            .childless(&mut Reads::unlimited())
            .then_some(snapshot)
    }

    /// Whether the family is as the snapshot found it (points 1 and 2 of the module
    /// documentation) and no ancestor held `inode` then (point 3). Each read counts in
    /// `reads`; a `false` after they are spent says nothing.
    pub(crate) fn unchanged_for(&self, inode: u64, reads: &mut Reads) -> bool {
        self.childless(reads)
            && self.ancestors.iter().all(|ancestor| {
                reads.small(ancestor.tids.len());
                !reads.spent()
                    && !ancestor.sockets.contains(&inode)
                    && thread_counts(&ancestor.kept, &ancestor.tids).as_ref() == Some(&ancestor.ran)
            })
    }

    /// Point 1: the threads are those listed, and none has a child but sluice.
    fn childless(&self, reads: &mut Reads) -> bool {
        reads.small(1 + self.children.len());
        if reads.spent() {
            return false;
        }
        let threads = rustix::fs::fstat(self.task.as_fd()).map(|stat| stat.st_nlink);
        threads.ok() == u64::try_from(self.children.len() + 2).ok()
            && self.children.iter().all(|file| {
                read_children(file.as_fd())
                    .is_ok_and(|children| children.iter().all(|pid| *pid == self.own_pid))
            })
    }
}

/// The snapshot's lock: one assignment per critical section, so a poisoned lock is used as
/// is.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
