//! Whether the executable path `/proc` shows for a process names the file it runs.
//!
//! `/proc/<pid>/exe` reads as a path, and a path is only as good as the mount table it is
//! read in. Two ways a program passes for another:
//!
//! - **A user namespace of its own.** There a process can make a mount namespace, mount any
//!   file over any path (`unshare -Urm`, then `mount --bind`; open to any user where
//!   unprivileged user namespaces are) and point its own `exe` link at another file
//!   (`PR_SET_MM_MAP`). Nothing it shows can be believed: such a process is not vouched for.
//!   `unshare` and `setns` move only the caller, so a child can stay behind in sluice's
//!   namespace while its parent moves on: each process in a chain is checked on its own.
//! - **A file from another mount namespace.** A process that stays in sluice's user
//!   namespace can still execute a file it reaches through another namespace's mounts (its
//!   parent's `/proc/<pid>/root/...`, or a descriptor passed to it): the kernel prints that
//!   file's path as it is inside the mount tree it sits in. So the path must lead to the file
//!   the process runs (device and inode, against the `exe` link), resolved either in sluice's
//!   own root (the kernel prints a path from the reader's root when it can: a chrooted
//!   process's path is its full path) or in the process's own root (`/proc/<pid>/root/<path>`:
//!   a program in a container of its own, a sidecar's neighbour).
//! - **A deleted file.** An executable deleted since it started (` (deleted)`) has no path to
//!   resolve, and deleting its own file is something a process can do: the mount it was run
//!   from (`STATX_MNT_ID`) must then be the mount its path's directory is on, in either root.
//!   When that directory is gone too (an install directory removed after an upgrade), its
//!   nearest ancestor that still exists stands for it. A package upgrade that replaced a
//!   running program passes; a file deleted inside another namespace's mount does not, nor
//!   does a `memfd` program (`/memfd:...`, whose name may hold `/` and meet a pattern).

use std::io;
use std::os::fd::AsFd;
use std::sync::{Mutex, OnceLock, PoisonError};

use rustix::fs::{AtFlags, StatxFlags};

/// What a process's executable path is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vouch {
    /// The path names the file the process runs.
    Believed,
    /// The process runs in a user namespace other than sluice's.
    OtherUserNamespace,
    /// The path leads to another file than it runs, in sluice's view and in the process's
    /// own root; or, deleted, it ran from another mount than its path's directory is on.
    OtherFile,
}

/// A file's identity: device and inode.
fn file_id(st: &rustix::fs::Stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// sluice's own user namespace, as `/proc/self/ns/user` reads (`user:[<inode>]`), read once.
/// The inode names one namespace among those alive, and sluice's is alive while it runs, so
/// another process whose link reads the same is in it. (A `readlink` of the link costs half
/// a `stat` of it, which makes the namespace's file first.)
fn own_user_namespace() -> io::Result<&'static [u8]> {
    static OWN: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    OWN.get_or_init(|| {
        rustix::fs::readlink("/proc/self/ns/user", Vec::new())
            .ok()
            .map(|target| target.into_bytes())
    })
    .as_deref()
    .ok_or_else(|| {
        io::Error::other("sluice's own user namespace (/proc/self/ns/user) cannot be read")
    })
}

/// A verdict kept with a process's files across lookups (`kept`), with what it was reached
/// from: the executable path as `/proc` showed it and the file the process ran (device and
/// inode of its `exe` link). It is used again only for the same process (the files it is
/// kept with fail every read once their process is gone, whatever later takes its pid) when
/// both read the same now, and only after its user namespace has been read again: an
/// `execve`, or a new `exe` link set with `prctl(PR_SET_MM_MAP)` (which needs a user
/// namespace of the process's own), changes one of the three. What the path would resolve
/// to later does not change what the process runs, which is what the verdict is about.
#[derive(Debug, Default)]
pub(crate) struct Remembered(Mutex<Option<Memo>>);

#[derive(Debug, Clone)]
struct Memo {
    exe: String,
    deleted: bool,
    file: (u64, u64),
    verdict: Vouch,
}

impl Remembered {
    fn get(&self, exe: &str, deleted: bool, file: (u64, u64)) -> Option<Vouch> {
        let memo = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        memo.as_ref()
            .filter(|memo| memo.exe == exe && memo.deleted == deleted && memo.file == file)
            .map(|memo| memo.verdict)
    }

    fn set(&self, exe: &str, deleted: bool, file: (u64, u64), verdict: Vouch) {
        // One assignment: a panicking holder leaves it whole.
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Memo {
            exe: exe.to_owned(),
            deleted,
            file,
            verdict,
        });
    }
}

/// Checks the process of `pid_dir` (its `/proc/<pid>`) against its executable path `exe`
/// (without ` (deleted)`; `deleted`: it had it). A few `stat`s; an unreadable `/proc` file is
/// an error (the caller fails closed). With `remembered`, the verdict it holds for the same
/// executable (see [`Remembered`]) is reused and the one reached here kept: then the check
/// costs a `readlink` of the process's user namespace and a `stat` of its `exe`.
pub(crate) fn vouch(
    pid_dir: impl AsFd,
    exe: &str,
    deleted: bool,
    remembered: Option<&Remembered>,
) -> io::Result<Vouch> {
    let dir = pid_dir.as_fd();
    let theirs = rustix::fs::readlinkat(dir, "ns/user", Vec::with_capacity(32))?;
    if theirs.as_bytes() != own_user_namespace()? {
        return Ok(Vouch::OtherUserNamespace);
    }
    if !exe.starts_with('/') {
        return Ok(Vouch::Believed);
    }
    let runs = file_id(&rustix::fs::statat(dir, "exe", AtFlags::empty())?);
    if let Some(verdict) = remembered.and_then(|memo| memo.get(exe, deleted, runs)) {
        return Ok(verdict);
    }
    let verdict = if named(dir, exe, deleted, runs)? {
        Vouch::Believed
    } else {
        Vouch::OtherFile
    };
    if let Some(memo) = remembered {
        memo.set(exe, deleted, runs, verdict);
    }
    Ok(verdict)
}

/// Whether `exe` names the file the process runs (`runs`: its `exe` link's device and
/// inode), in sluice's view or in the process's own root; deleted, whether it was run from
/// the mount its path's directory (or the nearest one above that exists) is on.
fn named(
    dir: std::os::fd::BorrowedFd<'_>,
    exe: &str,
    deleted: bool,
    runs: (u64, u64),
) -> io::Result<bool> {
    Ok(if deleted {
        let mount = |at, path: &str| {
            rustix::fs::statx(at, path, AtFlags::empty(), StatxFlags::MNT_ID)
                .ok()
                .filter(|st| st.stx_mask & StatxFlags::MNT_ID.bits() != 0)
                .map(|st| st.stx_mnt_id)
        };
        let runs = rustix::fs::statx(dir, "exe", AtFlags::empty(), StatxFlags::MNT_ID)?;
        if runs.stx_mask & StatxFlags::MNT_ID.bits() == 0 {
            return Ok(false);
        }
        // The nearest directory above the file that exists, in one root.
        let above = |at, prefix: &str| {
            let mut path = exe;
            loop {
                path = match path.rfind('/') {
                    Some(0) | None => "/",
                    Some(i) => &path[..i],
                };
                if let Some(id) = mount(at, &format!("{prefix}{path}")) {
                    return Some(id);
                }
                if path == "/" {
                    return None;
                }
            }
        };
        // sluice's view first; the process's own root only when that one does not say so.
        let ran_from = Some(runs.stx_mnt_id);
        above(rustix::fs::CWD, "") == ran_from || above(dir, "root") == ran_from
    } else {
        let id = |at, path: &str| {
            rustix::fs::statat(at, path, AtFlags::empty())
                .ok()
                .map(|st| file_id(&st))
        };
        id(rustix::fs::CWD, exe) == Some(runs) || id(dir, &format!("root{exe}")) == Some(runs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_believed() {
        let dir = std::fs::File::open("/proc/self").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        assert_eq!(vouch(&dir, exe, false, None).unwrap(), Vouch::Believed);
        // Another program's path is not this process's file.
        assert_eq!(
            vouch(&dir, "/bin/sh", false, None).unwrap(),
            Vouch::OtherFile
        );
        assert_eq!(
            vouch(&dir, "/no/such/program", false, None).unwrap(),
            Vouch::OtherFile
        );
        // Taken as deleted: this process's mount is the one its path's directory is on, or
        // the nearest directory above it that exists.
        assert_eq!(vouch(&dir, exe, true, None).unwrap(), Vouch::Believed);
        let gone = format!("{}/gone/deeper/prog", exe.rsplit_once('/').unwrap().0);
        assert_eq!(vouch(&dir, &gone, true, None).unwrap(), Vouch::Believed);
        assert_eq!(
            vouch(&dir, "/proc/x", true, None).unwrap(),
            Vouch::OtherFile
        );
    }

    /// A kept verdict is used for the executable it was reached from only: another path, or
    /// the same path naming another file, is judged again (and remembered in its place).
    #[test]
    fn a_remembered_verdict_is_for_one_path_and_file() {
        let dir = std::fs::File::open("/proc/self").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap();
        let runs = file_id(&rustix::fs::stat("/proc/self/exe").unwrap());
        let memo = Remembered::default();
        assert_eq!(
            vouch(&dir, exe, false, Some(&memo)).unwrap(),
            Vouch::Believed
        );
        assert_eq!(memo.get(exe, false, runs), Some(Vouch::Believed));
        // A verdict remembered for this path from another file (a made-up one) is not this
        // file's: the path is judged again, and names this file.
        memo.set(exe, false, (runs.0, runs.1 ^ 1), Vouch::OtherFile);
        assert_eq!(
            vouch(&dir, exe, false, Some(&memo)).unwrap(),
            Vouch::Believed
        );
        // A wrong verdict remembered for this very path and file would be reused: the memo
        // is load-bearing, and what keys it is what the tests above vary.
        memo.set("/bin/sh", false, runs, Vouch::Believed);
        assert_eq!(
            vouch(&dir, "/bin/sh", false, Some(&memo)).unwrap(),
            Vouch::Believed
        );
        assert_eq!(
            vouch(&dir, "/bin/sh", false, None).unwrap(),
            Vouch::OtherFile
        );
        assert_eq!(memo.get("/bin/sh", true, runs), None);
    }
}
