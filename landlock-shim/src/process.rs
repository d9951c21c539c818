//! Process attributes around the privilege drop: threads, descriptors, session, network
//! namespace, parent-death signal, core dumps, no_new_privs (spec §1.4 steps 1, 2, 4, 8, 10–12).
//!
//! Owns each step's syscall sequence and its verification. Does not own the order of the steps
//! (`launch`) nor the credential change itself (`privilege`).

use std::fs::File;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::cli::Compat;
use crate::sys;

/// A failed process step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// The shim must be single-threaded: Landlock and seccomp (without TSYNC) bind one thread.
    #[error("the shim must be single-threaded, found {0} threads")]
    Threads(String),
    /// A syscall failed.
    #[error("{call}: {source}")]
    Syscall {
        /// Which call.
        call: &'static str,
        /// The kernel's error.
        source: io::Error,
    },
    /// Strict mode and the host network namespace.
    #[error(
        "running in the host network namespace: the supervisor must start the shim inside the \
         sandbox netns (or pass --allow-host-netns, e.g. for `sluice exec` without --netns)"
    )]
    HostNetns,
    /// Strict mode and no way to tell.
    #[error(
        "cannot tell whether this is the host network namespace (/proc/1/ns/net is unreadable \
         and the kernel predates fixed namespace inodes); pass --allow-host-netns if intended"
    )]
    UnknownNetns,
    /// The parent died before PDEATHSIG was armed.
    #[error("parent process changed from {expected} to {found} before PR_SET_PDEATHSIG took hold")]
    ParentGone {
        /// The launcher's pid.
        expected: u32,
        /// The current parent.
        found: u32,
    },
    /// The directory entered is not the one the supervisor pinned.
    #[error(
        "the working directory is not the one the supervisor started in (expected {expected}, \
         found {found} as DEV:INO): it was replaced"
    )]
    WorkdirReplaced {
        /// `DEV:INO` the supervisor gave.
        expected: String,
        /// `DEV:INO` of the directory entered.
        found: String,
    },
    /// A set value did not read back.
    #[error("{what} did not hold (read back {found})")]
    Verify {
        /// What was set.
        what: &'static str,
        /// What was read.
        found: String,
    },
}

fn syscall(call: &'static str) -> impl FnOnce(io::Error) -> ProcessError {
    move |source| ProcessError::Syscall { call, source }
}

/// Step 1: exactly one thread.
pub fn check_single_threaded() -> Result<(), ProcessError> {
    let status =
        std::fs::read_to_string("/proc/self/status").map_err(syscall("read /proc/self/status"))?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .map(str::trim)
        .unwrap_or("unknown");
    if threads == "1" {
        Ok(())
    } else {
        Err(ProcessError::Threads(threads.to_owned()))
    }
}

/// Step 2: closes every inherited descriptor ≥ 3 except `keep`, and makes sure 0–2 exist.
/// Inherited UNIX sockets and SCM_RIGHTS descriptors are invisible to seccomp.
pub fn sanitize_fds(keep: Option<RawFd>) -> Result<(), ProcessError> {
    let close =
        |first: u32, last: u32| sys::close_range(first, last).map_err(syscall("close_range"));
    match keep.and_then(|fd| u32::try_from(fd).ok()) {
        Some(fd) => {
            close(3, fd - 1)?;
            close(fd + 1, u32::MAX)?;
        }
        None => close(3, u32::MAX)?,
    }
    for fd in 0..=2 {
        sys::ensure_open_std_fd(fd).map_err(syscall("open /dev/null for a standard stream"))?;
    }
    Ok(())
}

/// Where the shim runs, network-wise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Netns {
    /// Not the host's (init's) network namespace.
    Isolated,
    /// The host's, allowed by `--allow-host-netns`.
    HostAllowed,
    /// The host's, in best-effort mode (a degradation).
    Host,
    /// Undetermined, in best-effort mode (a degradation).
    Unknown,
}

impl Netns {
    /// Status-line value.
    pub fn as_str(self) -> &'static str {
        match self {
            Netns::Isolated => "isolated",
            Netns::HostAllowed => "host-allowed",
            Netns::Host => "host",
            Netns::Unknown => "unknown",
        }
    }
}

/// Step 4 (optional part): enter the network namespace at `path` while still root.
pub fn enter_netns(path: &Path) -> Result<(), ProcessError> {
    let file = File::open(path).map_err(syscall("open --netns-path"))?;
    sys::enter_net_namespace(&OwnedFd::from(file)).map_err(syscall("setns(CLONE_NEWNET)"))
}

/// Inode of the initial network namespace on Linux ≥ 6.18 (`NET_NS_INIT_INO`, uapi nsfs.h).
/// Dynamically numbered namespaces start at 0xF0000000, so this value is unambiguous.
pub const NET_NS_INIT_INO: u64 = 0xEFFF_FFF9;

/// What the namespace comparison concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetnsKind {
    /// The host's (init's) network namespace.
    Host,
    /// Another one.
    Isolated,
    /// pid 1's namespace is unreadable and the kernel predates fixed init inodes.
    Unknown,
}

/// Compares our namespace `(dev, ino)` with pid 1's; when pid 1 is out of reach (the launcher
/// may itself run in a Landlock domain, or /proc is mounted with hidepid), falls back on the
/// fixed inode of the initial namespace (Linux ≥ 6.18). Pure.
pub fn classify_netns(ours: (u64, u64), init: Option<(u64, u64)>, release: &str) -> NetnsKind {
    if let Some(init) = init {
        return if ours == init {
            NetnsKind::Host
        } else {
            NetnsKind::Isolated
        };
    }
    if ours.1 == NET_NS_INIT_INO {
        return NetnsKind::Host;
    }
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    if (major, minor) >= (6, 18) {
        NetnsKind::Isolated
    } else {
        NetnsKind::Unknown
    }
}

/// Step 4: refuse the host network namespace in strict mode unless allowed.
pub fn check_netns(compat: Compat, allow_host: bool) -> Result<Netns, ProcessError> {
    let ns = |path: &str| std::fs::metadata(path).map(|m| (m.dev(), m.ino()));
    let ours = ns("/proc/self/ns/net").map_err(syscall("stat /proc/self/ns/net"))?;
    let init = match ns("/proc/1/ns/net") {
        Ok(init) => Some(init),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EACCES | libc::EPERM | libc::ENOENT)
            ) =>
        {
            None
        }
        Err(e) => return Err(syscall("stat /proc/1/ns/net")(e)),
    };
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    match classify_netns(ours, init, release.trim()) {
        NetnsKind::Isolated => Ok(Netns::Isolated),
        _ if allow_host => Ok(Netns::HostAllowed),
        kind if compat == Compat::BestEffort => Ok(match kind {
            NetnsKind::Unknown => Netns::Unknown,
            _ => Netns::Host,
        }),
        NetnsKind::Unknown => Err(ProcessError::UnknownNetns),
        _ => Err(ProcessError::HostNetns),
    }
}

/// How the controlling terminal was shed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Session {
    /// `setsid()` succeeded: new session, no controlling terminal.
    New,
    /// The shim leads its process group, so `setsid` is refused; `TIOCNOTTY` dropped the
    /// controlling terminal instead (or there was none).
    TtyDetached,
}

impl Session {
    /// Status-line value.
    pub fn as_str(self) -> &'static str {
        match self {
            Session::New => "new",
            Session::TtyDetached => "tty-detached",
        }
    }
}

/// Step 8: a new session, so `TIOCSTI` on an inherited terminal needs CAP_SYS_ADMIN.
pub fn new_session() -> Result<Session, ProcessError> {
    match sys::setsid() {
        Ok(()) => Ok(Session::New),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            sys::detach_controlling_tty().map_err(syscall("ioctl(TIOCNOTTY)"))?;
            Ok(Session::TtyDetached)
        }
        Err(e) => Err(syscall("setsid")(e)),
    }
}

/// Step 10: SIGKILL when the launcher dies. Must follow the uid change, which clears it;
/// re-checking the parent closes the race with a launcher that died just before.
pub fn set_parent_death_signal(launcher: u32) -> Result<i32, ProcessError> {
    sys::set_parent_death_signal(libc::SIGKILL).map_err(syscall("prctl(PR_SET_PDEATHSIG)"))?;
    let signal = sys::parent_death_signal().map_err(syscall("prctl(PR_GET_PDEATHSIG)"))?;
    if signal != libc::SIGKILL {
        return Err(ProcessError::Verify {
            what: "PR_SET_PDEATHSIG",
            found: signal.to_string(),
        });
    }
    let parent = std::os::unix::process::parent_id();
    if parent != launcher {
        return Err(ProcessError::ParentGone {
            expected: launcher,
            found: parent,
        });
    }
    Ok(signal)
}

/// Step 11: `RLIMIT_CORE = 0`, which survives exec (`PR_SET_DUMPABLE` does not).
pub fn disable_core_dumps() -> Result<u64, ProcessError> {
    sys::disable_core_dumps().map_err(syscall("setrlimit(RLIMIT_CORE)"))?;
    let limit = sys::core_limit().map_err(syscall("getrlimit(RLIMIT_CORE)"))?;
    if limit != 0 {
        return Err(ProcessError::Verify {
            what: "RLIMIT_CORE",
            found: limit.to_string(),
        });
    }
    Ok(limit)
}

/// Step 12: no_new_privs, set explicitly and read back (Landlock and seccomp need it when
/// unprivileged; it also makes setuid binaries and file capabilities inert).
pub fn set_no_new_privs() -> Result<bool, ProcessError> {
    sys::set_no_new_privs().map_err(syscall("prctl(PR_SET_NO_NEW_PRIVS)"))?;
    let on = sys::no_new_privs().map_err(syscall("prctl(PR_GET_NO_NEW_PRIVS)"))?;
    if !on {
        return Err(ProcessError::Verify {
            what: "PR_SET_NO_NEW_PRIVS",
            found: "0".into(),
        });
    }
    Ok(on)
}

/// Step 13: the working directory, entered as the target uid so DAC applies.
pub fn change_dir(dir: &Path) -> Result<(), ProcessError> {
    std::env::set_current_dir(dir).map_err(syscall("chdir --workdir"))
}

/// The environment variable in which a supervisor (`sluice exec`, which pinned the directory
/// when it started) names the directory `--workdir` must be once entered, as `DEV:INO`.
pub const WORKDIR_ID_ENV: &str = "SLUICE_SHIM_WORKDIR_ID";

/// Step 13, continued: the directory entered is the one the supervisor named, if it named one
/// (the path could have been swapped for a link to another's directory in between).
pub fn verify_workdir(expected: Option<&str>) -> Result<(), ProcessError> {
    verify_dir_id(Path::new("."), expected)
}

fn verify_dir_id(dir: &Path, expected: Option<&str>) -> Result<(), ProcessError> {
    use std::os::unix::fs::MetadataExt;
    let Some(expected) = expected else {
        return Ok(());
    };
    let m = std::fs::metadata(dir).map_err(syscall("stat --workdir"))?;
    let found = format!("{}:{}", m.dev(), m.ino());
    if found != expected {
        return Err(ProcessError::WorkdirReplaced {
            expected: expected.to_string(),
            found,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workdir_other_than_the_one_named_is_refused() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir();
        let m = std::fs::metadata(&dir).unwrap();
        let id = format!("{}:{}", m.dev(), m.ino());
        assert!(verify_dir_id(&dir, None).is_ok());
        assert!(verify_dir_id(&dir, Some(&id)).is_ok());
        let other = verify_dir_id(Path::new("/"), Some(&id)).unwrap_err();
        assert!(
            matches!(other, ProcessError::WorkdirReplaced { .. }),
            "{other}"
        );
    }

    #[test]
    fn netns_by_comparison_with_pid_1() {
        assert_eq!(
            classify_netns((4, 10), Some((4, 10)), "5.15.0"),
            NetnsKind::Host
        );
        assert_eq!(
            classify_netns((4, 11), Some((4, 10)), "5.15.0"),
            NetnsKind::Isolated
        );
    }

    #[test]
    fn netns_fallback_on_fixed_init_inode() {
        assert_eq!(
            classify_netns((4, NET_NS_INIT_INO), None, "6.18.44"),
            NetnsKind::Host
        );
        assert_eq!(
            classify_netns((4, 0xF000_0123), None, "6.18.44-fc"),
            NetnsKind::Isolated
        );
        assert_eq!(
            classify_netns((4, 0xF000_0123), None, "7.0.1"),
            NetnsKind::Isolated
        );
        assert_eq!(
            classify_netns((4, 0xF000_0123), None, "6.12.9"),
            NetnsKind::Unknown
        );
        assert_eq!(
            classify_netns((4, 0xF000_0123), None, ""),
            NetnsKind::Unknown
        );
    }
}
