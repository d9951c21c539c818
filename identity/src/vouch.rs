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
//!   file's path as it is inside the mount tree it sits in. So the path is resolved again in
//!   the process's own root (`/proc/<pid>/root/<path>`) and must lead to the same file
//!   (device and inode) as the `exe` link. That holds for a program in a container of its
//!   own (a sidecar's neighbour): its root is its container's.
//!
//! An executable deleted since it started (` (deleted)`) has no path to resolve again; its
//! path is reported as deleted and is not checked here.

use std::io;
use std::os::fd::AsFd;
use std::sync::OnceLock;

use rustix::fs::AtFlags;

/// What a process's executable path is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vouch {
    /// The path names the file the process runs.
    Believed,
    /// The process runs in a user namespace other than sluice's.
    OtherUserNamespace,
    /// The path, resolved in the process's own root, leads to another file than it runs.
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
/// (without ` (deleted)`; `deleted`: it had it). Three `stat`s; an unreadable file is an
/// error (the caller fails closed).
pub(crate) fn vouch(pid_dir: impl AsFd, exe: &str, deleted: bool) -> io::Result<Vouch> {
    let dir = pid_dir.as_fd();
    let theirs = rustix::fs::statat(dir, "ns/user", AtFlags::empty())?;
    if file_id(&theirs) != own_user_namespace()? {
        return Ok(Vouch::OtherUserNamespace);
    }
    if deleted || !exe.starts_with('/') {
        return Ok(Vouch::Believed);
    }
    let runs = rustix::fs::statat(dir, "exe", AtFlags::empty())?;
    let named = match rustix::fs::statat(dir, format!("root{exe}"), AtFlags::empty()) {
        Ok(st) => st,
        // Nothing there in its own root: the path names no file it could have run.
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR) => {
            return Ok(Vouch::OtherFile);
        }
        Err(e) => return Err(e.into()),
    };
    Ok(if file_id(&runs) == file_id(&named) {
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
    }
}
