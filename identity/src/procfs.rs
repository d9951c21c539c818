//! Reading `/proc`: small handles around the few files sluice needs (the parsers are in
//! `parse`, reading one file in `read`, fd tables in `tables`).
//!
//! Everything about one process is read through a [`ProcDir`], a file descriptor for
//! `/proc/<pid>` opened once (or kept from an earlier lookup, with the process's files: see
//! `kept`). The kernel ties that descriptor to the process it was opened for: once that process
//! exits, reads through it fail even if the pid number is reused, so the fd table, exe, status
//! and cmdline read through one `ProcDir` always describe one process.
//!
//! It does not decide which processes to look at (`owners`) or how to assemble an identity
//! (`identity`).

mod family;
mod parse;
mod read;
mod tables;

use std::cell::OnceCell;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, Mode, OFlags};
use rustix::io::Errno;
use rustix::path::DecInt;

pub(crate) use family::Snapshot;
pub(crate) use parse::{
    SocketLink, StatFields, parse_children, parse_cmdline, parse_stat,
    parse_status_is_namespace_init, parse_status_real_uid, strip_deleted,
};
pub(crate) use read::is_gone;

use crate::kept::{KeptFile, KeptFiles, KeptProcs, THREADS_KEPT, Threads};
use crate::order;
use crate::quiet;
use crate::reads::Reads;
use parse::numeric_name;
use read::{
    CMDLINE_LIMIT, Complete, SMALL_FILE_LIMIT, invalid, is_out_of_descriptors, read_at,
    read_limited, read_stat,
};
pub(crate) use tables::thread_counts;
use tables::{exe_raw_in, fd_is_in, holding_fd_in, holding_fd_kept, holding_fd_noting};

/// The directory position of pid `n` in the procfs root is `n + TGID_OFFSET`
/// (`FIRST_PROCESS_ENTRY + 2` in `fs/proc/base.c`). Seeking there lists pids `>= n` without
/// reading the ones below; callers still filter by range, so a kernel that numbers positions
/// differently costs time, not correctness.
const TGID_OFFSET: i64 = 258;

// === impl ProcFs ===

/// An open procfs root (normally `/proc`).
#[derive(Debug)]
pub(crate) struct ProcFs {
    root: OwnedFd,
    /// The pid namespace the mount shows (`ns/pid`'s target), when it is the reader's own.
    pid_ns: Option<Vec<u8>>,
    /// Processes lookups keep meeting (see `kept`).
    kept: KeptProcs,
    /// `sys/kernel/ns_last_pid`, opened on first use.
    last_pid: std::sync::OnceLock<OwnedFd>,
}

impl ProcFs {
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let root = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let pid_ns = own_pid_ns_if_the_mounts(&root);
        Ok(Self {
            root,
            pid_ns,
            kept: KeptProcs::default(),
            last_pid: std::sync::OnceLock::new(),
        })
    }

    /// Whether `dir` is the init of its pid namespace. A process in the mount's own pid
    /// namespace is one only as pid 1, where every climb stops anyway, so one `readlink` of
    /// its `ns/pid` answers for most processes; the others are read from `status` (see
    /// [`parse_status_is_namespace_init`]).
    pub(crate) fn is_namespace_init(&self, dir: &ProcDir) -> bool {
        let compute = || {
            if let Some(own) = &self.pid_ns
                && dir.pid() > 1
                && rustix::fs::readlinkat(dir.files.dir(), "ns/pid", Vec::with_capacity(32))
                    .is_ok_and(|target| target.as_bytes() == own.as_slice())
            {
                return false;
            }
            dir.is_namespace_init()
        };
        match &dir.files {
            Files::Kept(kept) => kept.namespace_init(compute),
            Files::Own(_) => compute(),
        }
    }

    /// Opens `/proc/<pid>`; from then on every read names that process or fails.
    pub(crate) fn pid_dir(&self, pid: u32) -> io::Result<ProcDir> {
        let fd = crate::exhaust::openat(
            &self.root,
            DecInt::new(pid),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(ProcDir {
            pid,
            files: Files::Own(fd),
            stat: OnceCell::new(),
            quiet: OnceCell::new(),
        })
    }

    /// Like [`Self::pid_dir`], for a process lookups are likely to meet again (an ancestor):
    /// its files are kept open for them (see `kept`). A kept entry is used
    /// only when a read of its `stat` succeeds now: then it is the process that has the pid
    /// (a process that exited fails every read, however its pid was reused since), and that
    /// `stat` is the handle's first.
    pub(crate) fn pid_dir_kept(&self, pid: u32) -> io::Result<ProcDir> {
        if !self.kept.has_room() {
            // A low open-file limit: the descriptors go to connections, not to keeping.
            return self.pid_dir(pid);
        }
        if let Some(kept) = self.kept.get(pid) {
            let read_at = order::next();
            match read_stat(kept.stat()) {
                Ok(stat) => return Ok(ProcDir::kept(kept, stat, read_at)),
                Err(_) => self.kept.forget(&kept),
            }
        }
        let before = crate::exhaust::seen();
        let dir = match self.pid_dir(pid) {
            // Out of descriptors: the kept ones go first, then it is tried once more.
            Err(err) if is_out_of_descriptors(&err) => {
                self.kept.clear();
                let retried = self.pid_dir(pid)?;
                // Closing them made room: nothing was missed.
                crate::exhaust::recovered(before);
                retried
            }
            opened => opened?,
        };
        let opened = crate::exhaust::openat(
            dir.files.dir(),
            "stat",
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let Ok(stat_fd) = opened else {
            // Gone or unreadable: the plain handle says which, as it would without keeping.
            return Ok(dir);
        };
        let read_at = order::next();
        let Ok(stat) = read_stat(stat_fd.as_fd()) else {
            return Ok(dir);
        };
        let Files::Own(dir_fd) = dir.files else {
            return Ok(dir);
        };
        let kept = std::sync::Arc::new(KeptFiles::new(pid, dir_fd, stat_fd));
        self.kept.insert(&kept);
        Ok(ProcDir::kept(kept, stat, read_at))
    }

    /// Reads the fd table of the process that has `pid` now (`/proc/<pid>/fd`, opened on its
    /// own: one `open` fewer than through a [`ProcDir`]) for the socket, as
    /// [`ProcDir::holding_fd`] does. It names no process beyond this read: a caller that finds
    /// the socket opens the process and checks the descriptor again through its handle.
    pub(crate) fn table_holding(
        &self,
        pid: u32,
        link: &SocketLink,
        reads: &mut Reads,
    ) -> io::Result<Option<u32>> {
        let fd_dir = crate::exhaust::openat(
            &self.root,
            format!("{pid}/fd").as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(holding_fd_in(&mut Dir::new(fd_dir)?, link, reads)?)
    }

    /// [`Self::table_holding`], with the inodes of every socket in the table when it was read
    /// in full without finding the socket (`None` otherwise).
    pub(crate) fn table_sockets(
        &self,
        pid: u32,
        link: &SocketLink,
        reads: &mut Reads,
    ) -> io::Result<(Option<u32>, Option<Vec<u64>>)> {
        let fd_dir = crate::exhaust::openat(
            &self.root,
            format!("{pid}/fd").as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut sockets = Vec::new();
        let held = holding_fd_noting(&mut Dir::new(fd_dir)?, link, reads, Some(&mut sockets))?;
        let whole = held.is_none() && !reads.spent();
        Ok((held, whole.then_some(sockets)))
    }

    /// The owner of `/proc/<pid>`: the process's effective uid (root for a non-dumpable one).
    /// One `statat`, far cheaper than reading the fd table, so it orders the scan.
    pub(crate) fn dir_uid(&self, pid: u32) -> io::Result<u32> {
        let stat = rustix::fs::statat(&self.root, DecInt::new(pid), AtFlags::empty())?;
        Ok(stat.st_uid)
    }

    /// The last pid the kernel handed out in the reader's pid namespace.
    pub(crate) fn last_pid(&self) -> io::Result<u32> {
        let fd = match self.last_pid.get() {
            Some(fd) => fd,
            None => {
                let opened = crate::exhaust::openat(
                    &self.root,
                    "sys/kernel/ns_last_pid",
                    OFlags::RDONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                self.last_pid.get_or_init(|| opened)
            }
        };
        let contents = read_limited(fd.as_fd(), SMALL_FILE_LIMIT, Complete::OnShortRead)?;
        std::str::from_utf8(&contents)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .ok_or_else(|| invalid("ns_last_pid"))
    }

    /// The pids in `lo..=hi` that are processes (thread group leaders), ascending.
    pub(crate) fn pids_in(&self, lo: u32, hi: u32) -> io::Result<Vec<u32>> {
        // A fresh listing each time: it reads only as many entries as its first (small)
        // buffer holds, where a kept one would read as many as its grown buffer does.
        let mut dir = self.root_dir()?;
        dir.seek(TGID_OFFSET + i64::from(lo))?;
        let mut pids = Vec::new();
        while let Some(entry) = dir.read() {
            let Some(pid) = numeric_name(entry?.file_name().to_bytes()) else {
                continue;
            };
            if pid > hi {
                break;
            }
            if pid >= lo {
                pids.push(pid);
            }
        }
        Ok(pids)
    }

    /// Every process, ascending: a full listing, with no reliance on directory positions.
    pub(crate) fn all_pids(&self) -> io::Result<Vec<u32>> {
        let mut dir = self.root_dir()?;
        let mut pids = Vec::new();
        while let Some(entry) = dir.read() {
            if let Some(pid) = numeric_name(entry?.file_name().to_bytes()) {
                pids.push(pid);
            }
        }
        pids.sort_unstable();
        Ok(pids)
    }

    fn root_dir(&self) -> io::Result<Dir> {
        // A fresh open file: directory positions are per open file, and lookups run in parallel.
        let fd = crate::exhaust::openat(
            &self.root,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Dir::new(fd)?)
    }
}

/// The reader's own pid namespace, when it is the one the mount shows: `NSpid` in the
/// reader's `status` lists its pid in each namespace from the mount's down to its own, so a
/// single column means they are one. (The mount's init's `ns/pid` may not be readable.)
fn own_pid_ns_if_the_mounts(root: &OwnedFd) -> Option<Vec<u8>> {
    let fd = crate::exhaust::openat(
        root,
        "self/status",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let status = read_limited(fd.as_fd(), SMALL_FILE_LIMIT, Complete::OnShortRead).ok()?;
    let levels = std::str::from_utf8(&status)
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))?
        .split_ascii_whitespace()
        .count();
    if levels != 1 {
        return None;
    }
    rustix::fs::readlinkat(root, "self/ns/pid", Vec::new())
        .ok()
        .map(|target| target.into_bytes())
}

/// The children a thread's `children` file (kept open) lists now.
pub(crate) fn read_children(fd: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    Ok(parse_children(&read_limited(
        fd,
        SMALL_FILE_LIMIT,
        Complete::SmallRecords,
    )?))
}

/// The number a `/proc` directory entry names (a pid or tid), if it is one.
pub(crate) fn numeric(name: &[u8]) -> Option<u32> {
    numeric_name(name)
}

// === impl ProcDir ===

/// A handle on one process's `/proc/<pid>` directory.
#[derive(Debug)]
pub(crate) struct ProcDir {
    pid: u32,
    files: Files,
    /// The first `stat` read through this handle, and when (see [`order`]). Within one lookup
    /// an earlier read is as good as a later one (see `identity::next_ancestor`), and it is
    /// read by the search, the owner set completion and the identity alike.
    stat: OnceCell<(StatFields, u64)>,
    /// The scheduling counts under which this lookup found the process quiet (its kept fd
    /// table answered, or was kept: see `quiet`), read before anything else this handle
    /// read after its fd table.
    quiet: OnceCell<quiet::Counts>,
}

/// Where a [`ProcDir`] reads from: `/proc/<pid>` opened for this lookup, or a process's
/// files kept across lookups.
#[derive(Debug)]
enum Files {
    Own(OwnedFd),
    Kept(std::sync::Arc<KeptFiles>),
}

impl Files {
    fn dir(&self) -> BorrowedFd<'_> {
        match self {
            Files::Own(fd) => fd.as_fd(),
            Files::Kept(kept) => kept.dir(),
        }
    }

    /// `cmdline`: through the kept descriptor, or opened and read now.
    fn cmdline(&self) -> io::Result<Vec<u8>> {
        match self {
            Files::Kept(kept) => read_limited(
                kept.file(KeptFile::Cmdline)?,
                CMDLINE_LIMIT,
                Complete::OnShortRead,
            ),
            Files::Own(fd) => read_at(fd.as_fd(), "cmdline", CMDLINE_LIMIT, Complete::OnShortRead),
        }
    }

    /// `known`: the process's `stat` as read before, if it was; `quiet` is set to the
    /// counts under which a kept process was found quiet (see `quiet`).
    fn holding_fd(
        &self,
        link: &SocketLink,
        reads: &mut Reads,
        known: Option<StatFields>,
        quiet: &OnceCell<quiet::Counts>,
    ) -> io::Result<Option<u32>> {
        if let Files::Kept(kept) = self
            && let Some(found) =
                kept.with_fd_dir(|dir| holding_fd_kept(kept, dir, link, reads, (known, quiet)))
        {
            return Ok(found?);
        }
        let fd_dir = crate::exhaust::openat(
            self.dir(),
            "fd",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(holding_fd_in(&mut Dir::new(fd_dir)?, link, reads)?)
    }
}

impl ProcDir {
    fn kept(kept: std::sync::Arc<KeptFiles>, stat: StatFields, read_at: u64) -> Self {
        Self {
            pid: kept.pid(),
            files: Files::Kept(kept),
            stat: OnceCell::from((stat, read_at)),
            quiet: OnceCell::new(),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether any of the process's descriptors is the socket. A descriptor closed while the
    /// table is read is skipped; an unreadable table (exited, not permitted) is an error.
    pub(crate) fn holds(&self, link: &SocketLink) -> io::Result<bool> {
        Ok(self.holding_fd(link, &mut Reads::unlimited())?.is_some())
    }

    /// Like [`Self::holds`], with the descriptor number under which it holds the socket.
    /// `reads` counts the descriptors looked at; once it is spent, the rest of the table is
    /// not read and the answer is `None` (the caller must look at `reads`).
    pub(crate) fn holding_fd(
        &self,
        link: &SocketLink,
        reads: &mut Reads,
    ) -> io::Result<Option<u32>> {
        let known = self.stat.get().map(|(stat, _)| *stat);
        self.files.holding_fd(link, reads, known, &self.quiet)
    }

    /// The executable path this process was credited with as an ancestor (vouched for, or
    /// empty) when it was last read under the scheduling counts it was found quiet under in
    /// this lookup: it has not run since, so nothing that path depends on has changed (see
    /// `quiet::Quiet::exe`). `None` when this lookup did not find it quiet, or nothing was
    /// kept.
    pub(crate) fn quiet_exe(&self) -> Option<String> {
        let Files::Kept(kept) = &self.files else {
            return None;
        };
        kept.quiet().exe(self.quiet.get()?)
    }

    /// Keeps `exe`, read through this handle after it was found quiet, for
    /// [`Self::quiet_exe`].
    pub(crate) fn keep_quiet_exe(&self, exe: &str) {
        if let (Files::Kept(kept), Some(ran)) = (&self.files, self.quiet.get()) {
            kept.quiet().keep_exe(ran, exe);
        }
    }

    /// Whether descriptor `fd` is the socket now (one `readlink`; false when it is closed, is
    /// something else, or cannot be read).
    pub(crate) fn fd_is(&self, fd: u32, link: &SocketLink) -> bool {
        fd_is_in(self.files.dir(), fd, link)
    }

    /// The kept files and the scheduling counts under which this search found the process
    /// quiet (its fd table answered from what was kept, or read whole and kept: see
    /// `quiet`); `None` when it was not found quiet or nothing is kept for it.
    pub(crate) fn quiet_proof(&self) -> Option<(std::sync::Arc<KeptFiles>, quiet::Counts)> {
        let Files::Kept(kept) = &self.files else {
            return None;
        };
        Some((std::sync::Arc::clone(kept), self.quiet.get()?.clone()))
    }

    /// Keeps this handle for later checks of the same process (see [`Pinned`]). While a
    /// place is free (see `kept::pinned_files_slot`) the process's other files are kept with
    /// it, as an ancestor's are: its `stat` now, its fd directory, `children` and threads
    /// when first read, so that the re-checks and next lookups that start from it read them
    /// with one `pread` or a rewind each.
    pub(crate) fn pin(self, start_time: u64) -> Pinned {
        let (files, slot) = match self.files {
            Files::Own(dir) => match crate::kept::pinned_files_slot() {
                Some(slot) => match crate::exhaust::openat(
                    &dir,
                    "stat",
                    OFlags::RDONLY | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(stat) => (
                        Files::Kept(std::sync::Arc::new(KeptFiles::new(self.pid, dir, stat))),
                        Some(slot),
                    ),
                    Err(_) => (Files::Own(dir), None),
                },
                None => (Files::Own(dir), None),
            },
            files => (files, None),
        };
        Pinned {
            pid: self.pid,
            start_time,
            files,
            slot,
            family: std::sync::Mutex::new(None),
        }
    }

    /// `stat`, read once per handle.
    pub(crate) fn stat(&self) -> io::Result<StatFields> {
        if let Some((stat, _)) = self.stat.get() {
            return Ok(*stat);
        }
        let read_at = order::next();
        let stat = self.stat_fresh()?;
        Ok(self.stat.get_or_init(|| (stat, read_at)).0)
    }

    /// Whether this handle has named one process since before `child`'s first `stat` was
    /// read: it was opened before that read (a handle kept from an earlier lookup), and its
    /// own first `stat` was read after it. The kernel fails every read through a handle
    /// once its process has been reaped, and a pid is free for reuse only then, so that
    /// process held this pid the whole time, and was the one that pid named when `child`'s
    /// `stat` was read.
    pub(crate) fn held_its_pid_when_read(&self, child: &ProcDir) -> bool {
        let Files::Kept(kept) = &self.files else {
            return false;
        };
        match (child.stat.get(), self.stat.get()) {
            (Some((_, child_read)), Some((_, own_read))) => {
                kept.opened() < *child_read && child_read < own_read
            }
            _ => false,
        }
    }

    /// How many descriptors the process has open, from the size the kernel gives its fd
    /// directory (Linux 6.2 and later); `None` where that size is not given (it reads 0).
    pub(crate) fn fd_count(&self) -> Option<u64> {
        let stat = rustix::fs::statat(self.files.dir(), "fd", AtFlags::empty()).ok()?;
        u64::try_from(stat.st_size).ok().filter(|n| *n > 0)
    }

    /// `stat`, read now.
    pub(crate) fn stat_fresh(&self) -> io::Result<StatFields> {
        match &self.files {
            Files::Kept(kept) => read_stat(kept.stat()),
            Files::Own(fd) => parse_stat(&read_at(
                fd.as_fd(),
                "stat",
                SMALL_FILE_LIMIT,
                Complete::OnShortRead,
            )?)
            .ok_or_else(|| invalid("stat")),
        }
    }

    /// The real uid (`Uid:` in `status`).
    pub(crate) fn real_uid(&self) -> io::Result<u32> {
        parse_status_real_uid(&self.read_status()?).ok_or_else(|| invalid("status"))
    }

    /// Whether the process is the init of its pid namespace (see
    /// [`parse_status_is_namespace_init`]); an unreadable `status` is not.
    pub(crate) fn is_namespace_init(&self) -> bool {
        self.read_status()
            .is_ok_and(|status| parse_status_is_namespace_init(&status))
    }

    fn read_status(&self) -> io::Result<Vec<u8>> {
        match &self.files {
            Files::Kept(kept) => read_limited(
                kept.file(KeptFile::Status)?,
                SMALL_FILE_LIMIT,
                Complete::OnShortRead,
            ),
            Files::Own(fd) => read_at(
                fd.as_fd(),
                "status",
                SMALL_FILE_LIMIT,
                Complete::OnShortRead,
            ),
        }
    }

    pub(crate) fn cmdline(&self) -> io::Result<Vec<String>> {
        Ok(parse_cmdline(&self.files.cmdline()?))
    }

    /// The raw `exe` link target (may end in ` (deleted)`).
    pub(crate) fn exe_raw(&self) -> io::Result<String> {
        exe_raw_in(self.files.dir())
    }

    /// What the executable path `exe` (without ` (deleted)`) is worth for this process (see
    /// `vouch`): through files kept across lookups, the verdict kept with them is reused when
    /// it was reached from the same path and file.
    pub(crate) fn vouch(&self, exe: &str, deleted: bool) -> io::Result<crate::vouch::Vouch> {
        let remembered = match &self.files {
            Files::Kept(kept) => Some(kept.vouched()),
            Files::Own(_) => None,
        };
        crate::vouch::vouch(self.files.dir(), exe, deleted, remembered)
    }

    /// Children of every thread of the process (a child's parent is the thread that forked it),
    /// in the order the kernel lists them: oldest first.
    pub(crate) fn children(&self) -> io::Result<Vec<u32>> {
        if self.stat()?.num_threads <= 1 {
            // One thread: its tid is the pid, no need to list `task/`.
            let children = match &self.files {
                Files::Kept(kept) => read_limited(
                    kept.file(KeptFile::Children)?,
                    SMALL_FILE_LIMIT,
                    Complete::SmallRecords,
                )?,
                Files::Own(fd) => read_at(
                    fd.as_fd(),
                    &format!("task/{}/children", self.pid),
                    SMALL_FILE_LIMIT,
                    Complete::SmallRecords,
                )?,
            };
            return Ok(parse_children(&children));
        }
        if let Files::Kept(kept) = &self.files
            && let Some(children) = kept.with_threads(|threads| self.threads_children(threads))
        {
            return children;
        }
        self.threads_children(&mut Threads::default())
    }

    /// The children of every thread, listed through `threads` (filled as it goes, and
    /// emptied of threads that have exited).
    fn threads_children(&self, threads: &mut Threads) -> io::Result<Vec<u32>> {
        let Threads {
            task,
            children: kept,
        } = threads;
        let task = match task {
            Some(task) => {
                task.rewind();
                task
            }
            None => task.insert(Dir::new(crate::exhaust::openat(
                self.files.dir(),
                "task",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?)?),
        };
        let read = |fd: BorrowedFd<'_>| read_limited(fd, SMALL_FILE_LIMIT, Complete::SmallRecords);
        let mut listed = Vec::new();
        let mut children = Vec::new();
        while let Some(entry) = task.read() {
            let entry = entry?;
            let Some(tid) = numeric_name(entry.file_name().to_bytes()) else {
                continue;
            };
            listed.push(tid);
            // A kept file that fails belongs to a thread that has exited (its tid may be
            // another thread's now): opened again.
            if let Some(contents) = kept.get(&tid).and_then(|fd| read(fd.as_fd()).ok()) {
                children.extend(parse_children(&contents));
                continue;
            }
            kept.remove(&tid);
            let path = format!("{tid}/children");
            match crate::exhaust::openat(
                task.fd()?,
                path.as_str(),
                OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => {
                    children.extend(parse_children(&read(fd.as_fd())?));
                    if kept.len() < THREADS_KEPT {
                        kept.insert(tid, fd);
                    }
                }
                // A thread that exited while the list was read has no children left to report.
                Err(Errno::NOENT) | Err(Errno::SRCH) if tid != self.pid => {}
                Err(err) => return Err(err.into()),
            }
        }
        kept.retain(|tid, _| listed.contains(tid));
        Ok(children)
    }
}

impl AsFd for ProcDir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.files.dir()
    }
}

// === impl Parents ===

/// Parents opened by one search, by the child they were opened for (pid and start time):
/// each was opened after that child's `stat` named it as the parent, which is the order the
/// ancestor walk needs (see `identity::next_ancestor`), so the walk reads them through these
/// handles instead of opening them again.
#[derive(Debug, Default)]
pub(crate) struct Parents(HashMap<(u32, u64), ProcDir>);

impl Parents {
    pub(crate) fn keep(&mut self, child: u32, child_start_time: u64, parent: ProcDir) {
        self.0.insert((child, child_start_time), parent);
    }

    /// The handle opened for the parent of the process `child` names, if it was opened under
    /// the pid `ppid`.
    pub(crate) fn of(&self, child: u32, child_start_time: u64, ppid: u32) -> Option<&ProcDir> {
        self.0
            .get(&(child, child_start_time))
            .filter(|parent| parent.pid() == ppid)
    }
}

// === impl Pinned ===

/// One process's `/proc/<pid>` kept open after a lookup, for the checks of its connections
/// that follow (one per request). The kernel ties the descriptor to that process: once it
/// exits, every read through it fails, even when a new process got the same pid, so a read
/// that succeeds names the process whose start time was recorded here, without reading
/// `stat` again. `Sync`: the connections of one process share one.
#[derive(Debug)]
pub(crate) struct Pinned {
    pid: u32,
    start_time: u64,
    files: Files,
    /// Held while files of this process other than `/proc/<pid>` are kept with it.
    slot: Option<crate::kept::PinnedFilesSlot>,
    /// Its fork family as a passed recheck last read it (see [`family`]); kept only with a
    /// slot (its descriptors are counted with the slot's).
    family: std::sync::Mutex<Option<std::sync::Arc<Snapshot>>>,
}

impl Pinned {
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The start time read through the handle when it was pinned.
    pub(crate) fn start_time(&self) -> u64 {
        self.start_time
    }

    /// See [`ProcDir::fd_is`].
    pub(crate) fn fd_is(&self, fd: u32, link: &SocketLink) -> bool {
        fd_is_in(self.files.dir(), fd, link)
    }

    /// `/proc/<pid>`, for opening the process's other files.
    pub(crate) fn dir(&self) -> BorrowedFd<'_> {
        self.files.dir()
    }

    /// Whether descriptors beyond `/proc/<pid>` may be kept with this process (it holds one
    /// of the places `kept::pinned_files_slot` gives).
    pub(crate) fn may_keep_files(&self) -> bool {
        self.slot.is_some()
    }

    /// The family snapshot kept with this process, if any.
    pub(crate) fn family(&self) -> Option<std::sync::Arc<Snapshot>> {
        family::lock(&self.family).clone()
    }

    /// Keeps `snapshot` (or none) as this process's family snapshot.
    pub(crate) fn keep_family(&self, snapshot: Option<std::sync::Arc<Snapshot>>) {
        *family::lock(&self.family) = snapshot;
    }

    /// See [`ProcDir::holding_fd`].
    pub(crate) fn holding_fd(
        &self,
        link: &SocketLink,
        reads: &mut Reads,
    ) -> io::Result<Option<u32>> {
        self.files.holding_fd(link, reads, None, &OnceCell::new())
    }

    /// See [`ProcDir::exe_raw`].
    pub(crate) fn exe_raw(&self) -> io::Result<String> {
        exe_raw_in(self.files.dir())
    }

    /// A handle for a search that starts from this process, reading through the files kept
    /// with it: `None` when none are kept, or when a read of its `stat` fails (it has exited:
    /// the kernel fails every read through the handle then, whoever has the pid now).
    pub(crate) fn proc_dir(&self) -> Option<ProcDir> {
        let Files::Kept(kept) = &self.files else {
            return None;
        };
        let read_at = order::next();
        let stat = read_stat(kept.stat()).ok()?;
        (stat.start_time == self.start_time)
            .then(|| ProcDir::kept(std::sync::Arc::clone(kept), stat, read_at))
    }
}

#[cfg(test)]
mod tests;
