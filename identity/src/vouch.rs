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
use std::sync::OnceLock;

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

/// sluice's own user namespace (`/proc/self/ns/user`), read once.
fn own_user_namespace() -> io::Result<(u64, u64)> {
    static OWN: OnceLock<Option<(u64, u64)>> = OnceLock::new();
    OWN.get_or_init(|| {
        rustix::fs::stat("/proc/self/ns/user")
            .ok()
            .map(|st| file_id(&st))
    })
    .ok_or_else(|| {
        io::Error::other("sluice's own user namespace (/proc/self/ns/user) cannot be read")
    })
}

/// Checks the process of `pid_dir` (its `/proc/<pid>`) against its executable path `exe`
/// (without ` (deleted)`; `deleted`: it had it). A few `stat`s; an unreadable `/proc` file is
/// an error (the caller fails closed).
pub(crate) fn vouch(pid_dir: impl AsFd, exe: &str, deleted: bool) -> io::Result<Vouch> {
    let dir = pid_dir.as_fd();
    let theirs = rustix::fs::statat(dir, "ns/user", AtFlags::empty())?;
    if file_id(&theirs) != own_user_namespace()? {
        return Ok(Vouch::OtherUserNamespace);
    }
    if !exe.starts_with('/') {
        return Ok(Vouch::Believed);
    }
    let named = if deleted {
        let mount = |at, path: &str| {
            rustix::fs::statx(at, path, AtFlags::empty(), StatxFlags::MNT_ID)
                .ok()
                .filter(|st| st.stx_mask & StatxFlags::MNT_ID.bits() != 0)
                .map(|st| st.stx_mnt_id)
        };
        let runs = rustix::fs::statx(dir, "exe", AtFlags::empty(), StatxFlags::MNT_ID)?;
        if runs.stx_mask & StatxFlags::MNT_ID.bits() == 0 {
            return Ok(Vouch::OtherFile);
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
        [above(rustix::fs::CWD, ""), above(dir, "root")].contains(&Some(runs.stx_mnt_id))
    } else {
        let runs = file_id(&rustix::fs::statat(dir, "exe", AtFlags::empty())?);
        let id = |at, path: &str| {
            rustix::fs::statat(at, path, AtFlags::empty())
                .ok()
                .map(|st| file_id(&st))
        };
        let in_theirs = format!("root{exe}");
        [id(rustix::fs::CWD, exe), id(dir, &in_theirs)].contains(&Some(runs))
    };
    Ok(if named {
        Vouch::Believed
    } else {
        Vouch::OtherFile
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
        assert_eq!(vouch(&dir, exe, false).unwrap(), Vouch::Believed);
        // Another program's path is not this process's file.
        assert_eq!(vouch(&dir, "/bin/sh", false).unwrap(), Vouch::OtherFile);
        assert_eq!(
            vouch(&dir, "/no/such/program", false).unwrap(),
            Vouch::OtherFile
        );
        // Taken as deleted: this process's mount is the one its path's directory is on, or
        // the nearest directory above it that exists.
        assert_eq!(vouch(&dir, exe, true).unwrap(), Vouch::Believed);
        let gone = format!("{}/gone/deeper/prog", exe.rsplit_once('/').unwrap().0);
        assert_eq!(vouch(&dir, &gone, true).unwrap(), Vouch::Believed);
        assert_eq!(vouch(&dir, "/proc/x", true).unwrap(), Vouch::OtherFile);
    }
}
