//! Processes kept open across lookups: the `/proc/<pid>` files of the processes that lookups
//! keep meeting (the clients' ancestors), so that reading them again costs
//! one `pread` per file instead of an `open`, a `read` and a `close`.
//!
//! Only *how to reach* a process is kept, never what it is: every lookup reads `stat`,
//! `cmdline`, `exe`, `children` and the fd table again through these descriptors (the fd
//! table unless the process has not run since it was read: `quiet`), so an execve, a
//! reparenting or a changed fd table is seen as it would be with files opened now. The
//! kernel ties each descriptor to the process it was opened for: once that process
//! has exited and been reaped, every read through it fails, even if a new process got the same
//! pid. So a kept entry is used only after a read of its `stat` succeeds (then it is the
//! process that has that pid now), and dropped when one fails (see `ProcFs::pid_dir_kept`).
//! The one fact cached is whether the process is the init of its pid namespace, which cannot
//! change for a process: its pid namespace and its pid in it are fixed at fork.
//!
//! It does not decide which processes are kept: `owners` and `identity` ask for the ones they
//! climb through.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};

use rustix::fs::{Dir, Mode, OFlags};

/// Processes kept at most (each holds up to eight descriptors, and a process with several
/// threads up to [`THREADS_KEPT`] more: 224 in all); the least recently used one is closed to
/// make room. A client's ancestors below init are a handful.
pub(crate) const CAPACITY: usize = 16;
/// Open-file limit per process kept: the descriptors kept stay under a tenth of the limit, so
/// the connections they serve are not refused for want of descriptors (under a limit of 128
/// nothing is kept).
const LIMIT_PER_PROCESS: u64 = 128;

/// The descriptors kept for one process. `Sync`: concurrent lookups share them (`pread` and
/// `readlinkat` do not move a file position; the fd directory, which `getdents` reads from a
/// position, is used by one lookup at a time).
#[derive(Debug)]
pub(crate) struct KeptFiles {
    pid: u32,
    /// `/proc/<pid>`, opened `O_PATH`.
    dir: OwnedFd,
    stat: OwnedFd,
    cmdline: OnceLock<OwnedFd>,
    status: OnceLock<OwnedFd>,
    /// `task/<pid>/children`: the children of the thread whose tid is the pid.
    children: OnceLock<OwnedFd>,
    /// `schedstat` and `wchan`: whether it ran since its fd table was read (`quiet`).
    schedstat: OnceLock<OwnedFd>,
    wchan: OnceLock<OwnedFd>,
    fd_dir: KeptDir,
    threads: Mutex<Threads>,
    namespace_init: OnceLock<bool>,
    /// The last verdict on its executable path (see `vouch::Remembered`).
    vouched: crate::vouch::Remembered,
    /// Its fd table's sockets, while it has not run since they were read (see `quiet`).
    quiet: crate::quiet::Quiet,
    last_used: AtomicU64,
    /// When it was opened (see `order`): taken after its files were opened.
    opened: u64,
}

/// One of the files [`KeptFiles`] opens on first use.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeptFile {
    Cmdline,
    Status,
    Children,
    Schedstat,
    Wchan,
}

impl KeptFiles {
    pub(crate) fn new(pid: u32, dir: OwnedFd, stat: OwnedFd) -> Self {
        Self {
            pid,
            dir,
            stat,
            cmdline: OnceLock::new(),
            status: OnceLock::new(),
            children: OnceLock::new(),
            schedstat: OnceLock::new(),
            wchan: OnceLock::new(),
            fd_dir: KeptDir::default(),
            threads: Mutex::new(Threads::default()),
            namespace_init: OnceLock::new(),
            vouched: crate::vouch::Remembered::default(),
            quiet: crate::quiet::Quiet::default(),
            last_used: AtomicU64::new(0),
            opened: crate::order::next(),
        }
    }

    pub(crate) fn opened(&self) -> u64 {
        self.opened
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn dir(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    pub(crate) fn stat(&self) -> BorrowedFd<'_> {
        self.stat.as_fd()
    }

    /// `file`, opened on first use and kept.
    pub(crate) fn file(&self, file: KeptFile) -> rustix::io::Result<BorrowedFd<'_>> {
        let (cell, name) = match file {
            KeptFile::Cmdline => (&self.cmdline, String::from("cmdline")),
            KeptFile::Status => (&self.status, String::from("status")),
            KeptFile::Children => (&self.children, format!("task/{}/children", self.pid)),
            KeptFile::Schedstat => (&self.schedstat, String::from("schedstat")),
            KeptFile::Wchan => (&self.wchan, String::from("wchan")),
        };
        if let Some(fd) = cell.get() {
            return Ok(fd.as_fd());
        }
        let opened = crate::exhaust::openat(
            &self.dir,
            name.as_str(),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // A concurrent lookup may have opened it too: one is kept, the other closed.
        Ok(cell.get_or_init(|| opened).as_fd())
    }

    /// Runs `read` on the kept fd directory (see [`KeptDir::with`]).
    pub(crate) fn with_fd_dir<T>(
        &self,
        read: impl FnOnce(&mut Dir) -> rustix::io::Result<T>,
    ) -> Option<rustix::io::Result<T>> {
        self.fd_dir.with(
            || {
                crate::exhaust::openat(
                    &self.dir,
                    "fd",
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            },
            read,
        )
    }

    /// Runs `read` on the kept `task/` listing and the threads' `children` files, when no
    /// other lookup is reading them (`None` when one is).
    pub(crate) fn with_threads<T>(&self, read: impl FnOnce(&mut Threads) -> T) -> Option<T> {
        let mut threads = match self.threads.try_lock() {
            Ok(threads) => threads,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(read(&mut threads))
    }

    /// The last verdict on its executable path, and what it was reached from.
    pub(crate) fn vouched(&self) -> &crate::vouch::Remembered {
        &self.vouched
    }

    /// Its fd table's sockets kept while it has not run (see `quiet`).
    pub(crate) fn quiet(&self) -> &crate::quiet::Quiet {
        &self.quiet
    }

    /// Whether the process is its pid namespace's init, computed once by `compute`.
    pub(crate) fn namespace_init(&self, compute: impl FnOnce() -> bool) -> bool {
        *self.namespace_init.get_or_init(compute)
    }
}

/// What is kept for listing the children of a process with several threads (a child's parent
/// is the thread that forked it): `task/`, and each thread's `children` file by tid. A thread's
/// file fails every read once that thread has exited, as a process's do.
#[derive(Debug, Default)]
pub(crate) struct Threads {
    pub(crate) task: Option<Dir>,
    pub(crate) children: HashMap<u32, OwnedFd>,
}

/// Threads whose `children` file is kept, at most, per process; the others are opened for
/// each read. (Six, so that a process's `schedstat` and `wchan` fit in what eight kept.)
pub(crate) const THREADS_KEPT: usize = 6;

/// The kept processes, by pid.
#[derive(Debug, Default)]
pub(crate) struct KeptProcs {
    by_pid: Mutex<HashMap<u32, Arc<KeptFiles>>>,
    clock: AtomicU64,
}

impl KeptProcs {
    /// The entry kept for `pid`, if any (not yet checked: see the module documentation).
    pub(crate) fn get(&self, pid: u32) -> Option<Arc<KeptFiles>> {
        let kept = lock(&self.by_pid).get(&pid).cloned()?;
        kept.last_used.store(self.tick(), Ordering::Relaxed);
        Some(kept)
    }

    /// Keeps `files`, replacing an entry for the same pid and making room if needed (see
    /// [`capacity`]).
    pub(crate) fn insert(&self, files: &Arc<KeptFiles>) {
        files.last_used.store(self.tick(), Ordering::Relaxed);
        let capacity = capacity();
        let mut by_pid = lock(&self.by_pid);
        by_pid.remove(&files.pid);
        while by_pid.len() >= capacity {
            let oldest = by_pid
                .iter()
                .min_by_key(|(_, kept)| kept.last_used.load(Ordering::Relaxed))
                .map(|(pid, _)| *pid);
            match oldest {
                Some(pid) => by_pid.remove(&pid),
                None => return,
            };
        }
        by_pid.insert(files.pid, Arc::clone(files));
    }

    /// Whether processes may be kept at all under the open-file limit (see [`capacity`]).
    pub(crate) fn has_room(&self) -> bool {
        capacity() > 0
    }

    /// Closes every kept process (the process ran out of descriptors).
    pub(crate) fn clear(&self) {
        lock(&self.by_pid).clear();
    }

    /// Drops `files` if it is still the entry for its pid (its process is gone).
    pub(crate) fn forget(&self, files: &Arc<KeptFiles>) {
        let mut by_pid = lock(&self.by_pid);
        if by_pid
            .get(&files.pid)
            .is_some_and(|kept| Arc::ptr_eq(kept, files))
        {
            by_pid.remove(&files.pid);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.by_pid).len()
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }
}

/// How many processes may be kept now: [`CAPACITY`], fewer under a low open-file limit.
fn capacity() -> usize {
    capacity_under(open_file_limit())
}

/// How long the open-file limit read last is used before it is read again: a lookup asks for
/// it at every process it keeps (eight `getrlimit` calls a lookup, where it was read each
/// time), and it changes only when sluice sets it, at start.
const LIMIT_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// The soft open-file limit, read at most once per [`LIMIT_FOR`].
pub(crate) fn open_file_limit() -> u64 {
    static READ: Mutex<Option<(std::time::Instant, u64)>> = Mutex::new(None);
    let now = std::time::Instant::now();
    let mut read = lock(&READ);
    if let Some((at, limit)) = *read
        && now.saturating_duration_since(at) < LIMIT_FOR
    {
        return limit;
    }
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    *read = Some((now, limit));
    limit
}

fn capacity_under(limit: u64) -> usize {
    usize::try_from(limit / LIMIT_PER_PROCESS).map_or(CAPACITY, |room| room.min(CAPACITY))
}

/// Identified processes whose other files are kept with their pinned `/proc/<pid>` now.
static PINNED_WITH_FILES: AtomicUsize = AtomicUsize::new(0);

/// A place among the [`CAPACITY`] identified processes whose other files are kept with their
/// pinned `/proc/<pid>` (see `ProcDir::pin`); given back when dropped with the pin. `None`
/// under an open-file limit that does not keep [`CAPACITY`] ancestors, or when every place
/// is taken: those files live as long as the process's connections, so their number is
/// bounded however many processes have connections.
pub(crate) fn pinned_files_slot() -> Option<PinnedFilesSlot> {
    if capacity() < CAPACITY {
        return None;
    }
    PINNED_WITH_FILES
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |taken| {
            (taken < CAPACITY).then_some(taken + 1)
        })
        .ok()
        .map(|_| PinnedFilesSlot(()))
}

/// See [`pinned_files_slot`].
#[derive(Debug)]
pub(crate) struct PinnedFilesSlot(());

impl Drop for PinnedFilesSlot {
    fn drop(&mut self) {
        PINNED_WITH_FILES.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Threads of an identified process whose `children` files its family snapshot keeps at most
/// (`procfs::family`; a process with more is walked in full at every re-check).
pub(crate) const FAMILY_THREADS: usize = 8;

/// Descriptors a family snapshot keeps at most: `task/` and [`FAMILY_THREADS`] `children`
/// files.
pub(crate) const FAMILY_DESCRIPTORS: usize = 1 + FAMILY_THREADS;

/// The open-file limit under which no family snapshot is kept (each identified process with
/// a place for its files would keep [`FAMILY_DESCRIPTORS`] more: see [`most_descriptors`]).
pub(crate) const FAMILY_MIN_OPEN_FILES: u64 = 8192;

/// Descriptors one kept process holds at most: `/proc/<pid>`, `stat`, `cmdline`, `status`,
/// `children`, `schedstat`, `wchan`, the fd directory, and the `task/` listing with
/// [`THREADS_KEPT`] threads' `children` files.
const DESCRIPTORS_PER_PROCESS: usize = 8 + THREADS_KEPT;

/// The most descriptors kept processes hold under an open-file limit of `limit`: the
/// ancestors kept, and the files kept with pinned processes beside their `/proc/<pid>` (see
/// [`pinned_files_slot`]).
pub(crate) fn most_descriptors(limit: u64) -> u64 {
    let kept = capacity_under(limit);
    let pinned = if kept >= CAPACITY { CAPACITY } else { 0 };
    // Each pinned process with a place keeps a family snapshot too, under a limit that has
    // room for them (`procfs::family`): its `task/` and its threads' `children` files.
    let families = if pinned > 0 && limit >= FAMILY_MIN_OPEN_FILES {
        pinned * FAMILY_DESCRIPTORS
    } else {
        0
    };
    (kept * DESCRIPTORS_PER_PROCESS + pinned * (DESCRIPTORS_PER_PROCESS - 1) + families) as u64
}

/// A directory listing kept open: a directory's position belongs to its open file, so one
/// lookup at a time reads through it, and a lookup that finds it in use opens its own.
#[derive(Debug, Default)]
pub(crate) struct KeptDir(Mutex<Option<Dir>>);

impl KeptDir {
    /// Runs `read` on the directory (rewound; opened with `open` on first use), or `None`
    /// when another lookup is reading it.
    pub(crate) fn with<T>(
        &self,
        open: impl FnOnce() -> rustix::io::Result<OwnedFd>,
        read: impl FnOnce(&mut Dir) -> rustix::io::Result<T>,
    ) -> Option<rustix::io::Result<T>> {
        let mut slot = match self.0.try_lock() {
            Ok(slot) => slot,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let dir = match slot.as_mut() {
            Some(dir) => {
                dir.rewind();
                dir
            }
            None => match open().and_then(Dir::new) {
                Ok(dir) => slot.insert(dir),
                Err(err) => return Some(Err(err)),
            },
        };
        Some(read(dir))
    }
}

/// Every critical section is one map operation, so a poisoned lock is used as is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files of this test process, kept under the made-up pid `pid`.
    fn files(pid: u32) -> Arc<KeptFiles> {
        let open = |path: &str, flags: OFlags| {
            rustix::fs::open(path, flags | OFlags::CLOEXEC, Mode::empty()).unwrap()
        };
        Arc::new(KeptFiles::new(
            pid,
            open("/proc/self", OFlags::PATH | OFlags::DIRECTORY),
            open("/proc/self/stat", OFlags::RDONLY),
        ))
    }

    #[test]
    fn the_descriptors_kept_stay_within_a_tenth_of_the_limit() {
        assert_eq!(most_descriptors(100), 0);
        assert_eq!(most_descriptors(1024), 8 * 14);
        assert_eq!(most_descriptors(4096), 224 + 16 * 13);
        assert_eq!(most_descriptors(1 << 20), 224 + 16 * 13 + 16 * 9);
        for limit in [128, 600, 1024, 4096, 8192, 65536] {
            assert!(most_descriptors(limit) <= limit / 9, "{limit}");
        }
    }

    #[test]
    fn the_least_recently_used_process_makes_room() {
        let kept = KeptProcs::default();
        // The test's open-file limit decides the room (CAPACITY under a usual limit).
        let room = capacity();
        assert!(room > 2, "open-file limit too low for this test");
        for pid in 0..room {
            kept.insert(&files(u32::try_from(pid).unwrap()));
        }
        // pid 0 was used since pid 1 was kept: pid 1 is the least recently used.
        assert!(kept.get(0).is_some());
        kept.insert(&files(1000));
        assert_eq!(kept.len(), room);
        assert!(kept.get(1).is_none());
        assert!(kept.get(0).is_some() && kept.get(1000).is_some());
        // Keeping a pid again replaces its entry without evicting another.
        kept.insert(&files(1000));
        assert_eq!(kept.len(), room);
        kept.clear();
        assert_eq!(kept.len(), 0);
    }

    #[test]
    fn only_the_entry_found_gone_is_forgotten() {
        let kept = KeptProcs::default();
        let old = files(7);
        kept.insert(&old);
        let new = files(7);
        kept.insert(&new);
        kept.forget(&old);
        assert!(kept.get(7).is_some_and(|entry| Arc::ptr_eq(&entry, &new)));
        kept.forget(&new);
        assert!(kept.get(7).is_none());
    }

    #[test]
    fn the_fd_directory_is_read_by_one_lookup_at_a_time() {
        let entry = files(1);
        let count = |dir: &mut Dir| {
            let mut n = 0;
            while let Some(item) = dir.read() {
                item?;
                n += 1;
            }
            Ok(n)
        };
        let first = entry.with_fd_dir(count).unwrap().unwrap();
        // Rewound for the next reader: the same listing again, not the end of it.
        assert!(entry.with_fd_dir(count).unwrap().unwrap() > 2);
        assert!(first > 2);
        let nested = entry.with_fd_dir(|_| Ok(entry.with_fd_dir(count).is_none()));
        assert_eq!(nested.map(Result::ok), Some(Some(true)));
    }
}
