//! The one error type of the crate: why a connection could not be tied to a single program.
//!
//! The texts of the first four variants are the reference's deny-reason shapes
//! (`spec/openshell-semantics.md` §2.8); the proxy puts them in `reason` verbatim. Callers match
//! on variants, never on the text.

use std::io;
use std::net::SocketAddr;

/// Why [`IdentityResolver::lookup`](crate::IdentityResolver::lookup) found no single identity.
///
/// Every variant means "deny": the proxy fails closed on all of them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// No ESTABLISHED TCP socket with exactly this 4-tuple exists in the proxy's network
    /// namespace or in any registered one (the client closed it, or it lives somewhere sluice
    /// does not search).
    #[error(
        "failed to resolve peer binary: No ESTABLISHED TCP connection found for {peer} -> {local}"
    )]
    SocketNotFound {
        /// The client's address (the accepted socket's peer).
        peer: SocketAddr,
        /// The proxy's address as the client sees it.
        local: SocketAddr,
    },

    /// The socket exists but no process that sluice may inspect holds it: the caller runs in
    /// a PID namespace sluice cannot see (a sidecar without `shareProcessNamespace`), or as
    /// another user while sluice lacks CAP_SYS_PTRACE. Never a guess: every policy entry that
    /// names binaries fails to match.
    #[error(
        "failed to resolve peer binary: socket inode {inode} has no owning process (the caller's \
         binary is not visible to sluice: it runs in another PID namespace, e.g. a sidecar \
         without shareProcessNamespace, or sluice lacks CAP_SYS_PTRACE or root to read other \
         processes' file descriptors)"
    )]
    NoOwner {
        /// The socket's inode number.
        inode: u64,
    },

    /// A process that held the socket (or one of its ancestors, while the chain was read)
    /// disappeared before its identity could be read in full.
    #[error("failed to resolve peer binary for PID {pid}: process exited during identification")]
    ProcessExited {
        /// The process that went away.
        pid: u32,
    },

    /// Several processes hold the socket and they do not share one policy identity (exe,
    /// ancestor exes, cmdline paths), so no single identity may be judged.
    #[error(
        "ambiguous shared socket ownership: inode {inode} is held by PIDs [{}] with different \
         policy identities",
        join_pids(.pids)
    )]
    AmbiguousOwners {
        /// The socket's inode number.
        inode: u64,
        /// Every owner found, ascending.
        pids: Vec<u32>,
    },

    /// A check of an identified connection ([`IdentityResolver::confirm`](crate::IdentityResolver::confirm))
    /// found its socket no longer held by the process identified before, but by others, by the
    /// same process running another program, or (while it is in flight in an `SCM_RIGHTS`
    /// message) by no process at all.
    #[error(
        "caller changed: socket inode {inode} was held by PID {pid} ({exe}) and is now held by {}",
        describe_holders(.now)
    )]
    HolderChanged {
        /// The socket's inode number.
        inode: u64,
        /// The process identified before.
        pid: u32,
        /// Its executable then.
        exe: String,
        /// The processes holding the socket now, ascending, with their executables.
        now: Vec<(u32, String)>,
    },

    /// The proxy's own NETLINK_SOCK_DIAG query failed (not "not found": the kernel refused).
    #[error("failed to resolve peer binary: sock_diag query failed")]
    SockDiag {
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },

    /// The socket was not found, and a registered network namespace could not be searched.
    #[error(
        "failed to resolve peer binary: cannot search the network namespace of PID {pid} \
         (sluice needs CAP_SYS_ADMIN to enter it)"
    )]
    NamespaceUnavailable {
        /// The registered process whose namespace could not be entered or queried.
        pid: u32,
        /// What entering or querying it returned.
        #[source]
        source: io::Error,
    },

    /// The procfs root could not be opened.
    #[error("failed to resolve peer binary: cannot open {}", .path.display())]
    ProcRoot {
        /// The configured procfs root.
        path: std::path::PathBuf,
        /// What opening it returned.
        #[source]
        source: io::Error,
    },

    /// sluice ran out of file descriptors (`EMFILE`, or `ENFILE` for the whole system) while
    /// identifying: the files that say who the caller is could not be opened, which says
    /// nothing about the caller. Whatever the identification found is not trusted.
    #[error(
        "failed to resolve peer binary: sluice is out of file descriptors (too many open files); \
         raise its open-file limit (LimitNOFILE) or lower --max-connections"
    )]
    DescriptorsExhausted,

    /// The owner runs in a user namespace other than sluice's, where it may have mounted any
    /// file over any path (`unshare -Urm` then `mount --bind`) or set its own `exe` link
    /// (`PR_SET_MM_EXE_FILE`): the executable path `/proc` shows cannot be believed, so no
    /// policy entry that names binaries may match it.
    #[error(
        "failed to resolve peer binary for PID {pid}: it runs {exe} in a user namespace other \
         than sluice's, where a process can mount any file over any path, so its executable \
         cannot be vouched for; run it in sluice's user namespace"
    )]
    OtherUserNamespace {
        /// The owner.
        pid: u32,
        /// Its executable as its own mount namespace names it.
        exe: String,
    },

    /// The owner's executable path leads to another file than the one it runs, in sluice's
    /// view and in the owner's own root (it executed a file from another mount namespace,
    /// whose path the kernel prints as it is there), or, deleted, was on another mount than
    /// its path's directory.
    #[error(
        "failed to resolve peer binary for PID {pid}: the file it runs is not the one {exe} \
         names (neither in sluice's view nor in its own root: it was reached through another \
         mount namespace), so its executable cannot be vouched for"
    )]
    OtherFile {
        /// The owner.
        pid: u32,
        /// Its executable path as `/proc` shows it.
        exe: String,
    },

    /// An owner's /proc entry exists but could not be read (permissions, a malformed file).
    #[error("failed to resolve peer binary for PID {pid}: cannot read its /proc entry")]
    ProcUnreadable {
        /// The owner.
        pid: u32,
        /// What reading returned.
        #[source]
        source: io::Error,
    },
}

fn describe_holders(now: &[(u32, String)]) -> String {
    if now.is_empty() {
        return "no process".to_string();
    }
    let list = now
        .iter()
        .map(|(pid, exe)| format!("{pid} ({exe})"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("PIDs [{list}]")
}

fn join_pids(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_follow_the_reference_shapes() {
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        assert_eq!(
            IdentityError::SocketNotFound { peer, local }.to_string(),
            "failed to resolve peer binary: No ESTABLISHED TCP connection found for \
             127.0.0.1:40000 -> 127.0.0.1:3128"
        );
        assert_eq!(
            IdentityError::NoOwner { inode: 77 }.to_string(),
            "failed to resolve peer binary: socket inode 77 has no owning process (the caller's \
             binary is not visible to sluice: it runs in another PID namespace, e.g. a sidecar \
             without shareProcessNamespace, or sluice lacks CAP_SYS_PTRACE or root to read \
             other processes' file descriptors)"
        );
        assert_eq!(
            IdentityError::ProcessExited { pid: 42 }.to_string(),
            "failed to resolve peer binary for PID 42: process exited during identification"
        );
        assert_eq!(
            IdentityError::AmbiguousOwners {
                inode: 9,
                pids: vec![3, 17]
            }
            .to_string(),
            "ambiguous shared socket ownership: inode 9 is held by PIDs [3, 17] with different \
             policy identities"
        );
        let changed = |now| IdentityError::HolderChanged {
            inode: 9,
            pid: 3,
            exe: "/usr/bin/curl".into(),
            now,
        };
        assert_eq!(
            changed(vec![]).to_string(),
            "caller changed: socket inode 9 was held by PID 3 (/usr/bin/curl) and is now held by \
             no process"
        );
        assert_eq!(
            changed(vec![
                (3, "/usr/bin/python3".into()),
                (8, "/usr/bin/curl".into())
            ])
            .to_string(),
            "caller changed: socket inode 9 was held by PID 3 (/usr/bin/curl) and is now held by \
             PIDs [3 (/usr/bin/python3), 8 (/usr/bin/curl)]"
        );
    }
}
