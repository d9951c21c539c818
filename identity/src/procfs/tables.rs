//! Reads relative to one `/proc/<pid>` descriptor: its fd table (for a socket, noting the
//! other sockets it holds), and a kept process's table answered from what was kept while its
//! threads' scheduling counts say it has not run since (`quiet`).

use std::cell::OnceCell;
use std::ffi::OsString;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStringExt;

use rustix::fs::{Dir, Mode, OFlags};
use rustix::io::Errno;
use rustix::path::DecInt;

use super::parse::{SocketLink, StatFields, numeric_name, socket_inode};
use super::read::{Complete, SMALL_FILE_LIMIT, read_at, read_limited, read_stat};
use crate::kept::{KeptFile, KeptFiles, THREADS_KEPT};
use crate::quiet;
use crate::reads::Reads;

/// Reads the fd directory `dir` (`/proc/<pid>/fd`) for the socket.
pub(super) fn holding_fd_in(
    dir: &mut Dir,
    link: &SocketLink,
    reads: &mut Reads,
) -> rustix::io::Result<Option<u32>> {
    holding_fd_noting(dir, link, reads, None)
}

/// [`holding_fd_in`] for a kept process: answered from the table read last when the process
/// has not run since (see `quiet`), else read, and kept when it was read whole while every
/// thread of the process was blocked. `known`, its `stat` read before, saves the reads that
/// cannot lead to keeping anything: none for a process with more threads than
/// [`THREADS_KEPT`], no `wchan` for one whose first thread was running.
pub(super) fn holding_fd_kept(
    kept: &KeptFiles,
    dir: &mut Dir,
    link: &SocketLink,
    reads: &mut Reads,
    (known, found_quiet): (Option<StatFields>, &OnceCell<quiet::Counts>),
) -> rustix::io::Result<Option<u32>> {
    let threads = known.map_or(1, |stat| stat.num_threads.max(1));
    if usize::try_from(threads).map_or(true, |n| n > THREADS_KEPT) {
        // Too many threads to count: nothing is kept for it.
        return holding_fd_in(dir, link, reads);
    }
    // The counts of the threads the table was kept under (or of the one thread) now.
    let tids = kept
        .quiet()
        .tids()
        .or_else(|| (threads == 1).then(|| vec![kept.pid()]));
    let ran = tids.as_deref().and_then(|tids| thread_counts(kept, tids));
    if let Some(ran) = &ran
        && let Some(holds) = kept.quiet().holds(ran, link.inode)
    {
        reads.small(tids.as_ref().map_or(1, Vec::len));
        let _ = found_quiet.set(ran.clone());
        if !holds {
            return Ok(None);
        }
        // Held: the table says under which descriptor (what is kept stays true).
        return holding_fd_in(dir, link, reads);
    }
    // Steps 0 to 3 of `quiet`: the threads, their counts, each blocked, then as many
    // threads as listed.
    let quiet_now = if known.is_some_and(|stat| stat.running) {
        None
    } else {
        let listed = if threads == 1 {
            Some(vec![kept.pid()])
        } else {
            kept_tids(kept)
        };
        listed
            .filter(|listed| listed.len() <= THREADS_KEPT)
            .and_then(|listed| {
                // Counts read before the listing say nothing of threads listed after them.
                let counts = match ran {
                    Some(ran) if threads == 1 && ran.tids() == listed => ran,
                    _ => thread_counts(kept, &listed)?,
                };
                let blocked = listed.iter().all(|tid| thread_blocked(kept, *tid));
                (blocked
                    && read_stat(kept.stat())
                        .is_ok_and(|stat| usize::try_from(stat.num_threads) == Ok(listed.len())))
                .then_some(counts)
            })
    };
    let mut sockets = Vec::new();
    let held = holding_fd_noting(dir, link, reads, Some(&mut sockets))?;
    let whole = held.is_none() && !reads.spent();
    let keep = quiet_now.filter(|_| whole);
    if let Some(ran) = &keep {
        let _ = found_quiet.set(ran.clone());
    }
    kept.quiet().keep(keep.map(|ran| (ran, sockets)));
    Ok(held)
}

/// The threads of a kept process (`task/`), through the listing kept with it: `None` when
/// another lookup is reading it, or it cannot be read.
fn kept_tids(kept: &KeptFiles) -> Option<Vec<u32>> {
    kept.with_threads(|threads| -> io::Result<Vec<u32>> {
        let task = match &mut threads.task {
            Some(task) => {
                task.rewind();
                task
            }
            None => threads.task.insert(Dir::new(crate::exhaust::openat(
                kept.dir(),
                "task",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?)?),
        };
        let mut tids = Vec::new();
        while let Some(entry) = task.read() {
            if let Some(tid) = numeric_name(entry?.file_name().to_bytes()) {
                tids.push(tid);
            }
        }
        Ok(tids)
    })?
    .ok()
}

/// The `schedstat` counts of the threads `tids` of a kept process now (see `quiet`): the
/// first thread's through the file kept with it, another's read through `task/<tid>/`.
/// `None` when one cannot be read (a thread that has exited) or the kernel keeps none.
pub(crate) fn thread_counts(kept: &KeptFiles, tids: &[u32]) -> Option<quiet::Counts> {
    let mut counts = Vec::with_capacity(tids.len());
    for &tid in tids {
        let contents = thread_file(kept, tid, KeptFile::Schedstat, "schedstat")?;
        counts.push((tid, quiet::parse_schedstat(&contents)?));
    }
    Some(quiet::Counts::new(counts))
}

/// Whether the thread `tid` of a kept process is blocked off the run queue (`wchan`).
fn thread_blocked(kept: &KeptFiles, tid: u32) -> bool {
    thread_file(kept, tid, KeptFile::Wchan, "wchan").is_some_and(|wchan| quiet::blocked(&wchan))
}

/// A small file of the thread `tid` of a kept process: the first thread's kept as `file`,
/// another's (`task/<tid>/<name>`) opened for this read.
fn thread_file(kept: &KeptFiles, tid: u32, file: KeptFile, name: &str) -> Option<Vec<u8>> {
    if tid == kept.pid() {
        let fd = kept.file(file).ok()?;
        return read_limited(fd, SMALL_FILE_LIMIT, Complete::OnShortRead).ok();
    }
    read_at(
        kept.dir(),
        &format!("task/{tid}/{name}"),
        SMALL_FILE_LIMIT,
        Complete::OnShortRead,
    )
    .ok()
}

/// [`holding_fd_in`], noting in `sockets` the inode of every socket the table holds (left
/// as far as it got when the socket is found or the reads are spent).
pub(super) fn holding_fd_noting(
    dir: &mut Dir,
    link: &SocketLink,
    reads: &mut Reads,
    mut sockets: Option<&mut Vec<u64>>,
) -> rustix::io::Result<Option<u32>> {
    let mut buffer = Vec::with_capacity(64);
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes().first() == Some(&b'.') {
            continue;
        }
        if reads.spent() {
            return Ok(None);
        }
        reads.descriptor();
        match rustix::fs::readlinkat(dir.fd()?, name, std::mem::take(&mut buffer)) {
            Ok(target) => {
                if link.matches(target.as_bytes()) {
                    return Ok(numeric_name(name.to_bytes()));
                }
                if let Some(sockets) = sockets.as_deref_mut()
                    && let Some(inode) = socket_inode(target.as_bytes())
                {
                    sockets.push(inode);
                }
                buffer = target.into_bytes();
                buffer.clear();
            }
            Err(Errno::NOENT) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(None)
}

pub(super) fn fd_is_in(pid_dir: BorrowedFd<'_>, fd: u32, link: &SocketLink) -> bool {
    // `fd/` and up to ten digits, and room for the link's target: no allocation per check.
    let mut path = [0u8; 16];
    path[..3].copy_from_slice(b"fd/");
    let digits = DecInt::new(fd);
    let digits = digits.as_bytes();
    let end = 3 + digits.len();
    path[3..end].copy_from_slice(digits);
    let Ok(path) = std::ffi::CStr::from_bytes_until_nul(&path[..=end]) else {
        return false;
    };
    rustix::fs::readlinkat(pid_dir, path, Vec::with_capacity(32))
        .is_ok_and(|target| link.matches(target.as_bytes()))
}

pub(super) fn exe_raw_in(pid_dir: BorrowedFd<'_>) -> io::Result<String> {
    let target = rustix::fs::readlinkat(pid_dir, "exe", Vec::new())?;
    Ok(OsString::from_vec(target.into_bytes())
        .to_string_lossy()
        .into_owned())
}
