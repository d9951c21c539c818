//! Dropping to the sandbox uid/gid, and proving it (spec §1.4 step 9).
//!
//! Owns the order (bounding set while CAP_SETPCAP is still held, then groups, gid, uid) and the
//! verification (ids, no groups, `setuid(0)` fails, empty capability sets, empty bounding set).
//! Numeric ids only: no NSS, no `initgroups`. Does not own no_new_privs, PDEATHSIG or rlimits
//! (`process`), which come after the uid change.

use std::io;

use crate::degradation::Degradation;
use crate::sys::{self, CapSets};

/// How the shim was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// As root: drop everything.
    Root,
    /// Already as the target uid (like OpenShell's `prepare_current_user`): verify only.
    AlreadyTarget,
}

/// Why the privilege drop failed or could not be proven.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivilegeError {
    /// Neither root nor the target uid.
    #[error("must start as root or as the target uid {target} (euid is {euid})")]
    WrongUser {
        /// Current effective uid.
        euid: u32,
        /// Requested uid.
        target: u32,
    },
    /// A syscall of the drop failed.
    #[error("{call}: {source}")]
    Syscall {
        /// Which call.
        call: &'static str,
        /// The kernel's error.
        source: io::Error,
    },
    /// The drop did not hold.
    #[error("privilege drop verification failed: {what}: {detail}")]
    Verify {
        /// What was checked.
        what: &'static str,
        /// What was found.
        detail: String,
    },
}

fn syscall(call: &'static str) -> impl FnOnce(io::Error) -> PrivilegeError {
    move |source| PrivilegeError::Syscall { call, source }
}

fn verify_err(what: &'static str, detail: impl Into<String>) -> PrivilegeError {
    PrivilegeError::Verify {
        what,
        detail: detail.into(),
    }
}

/// Spec §1.4 step 1: `euid == 0`, or `euid == target uid`.
pub fn mode(target_uid: u32) -> Result<Mode, PrivilegeError> {
    match sys::geteuid() {
        0 => Ok(Mode::Root),
        euid if euid == target_uid => Ok(Mode::AlreadyTarget),
        euid => Err(PrivilegeError::WrongUser {
            euid,
            target: target_uid,
        }),
    }
}

/// The highest capability number this kernel knows.
fn last_cap() -> Result<u32, PrivilegeError> {
    let text = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .map_err(syscall("read /proc/sys/kernel/cap_last_cap"))?;
    text.trim()
        .parse()
        .map_err(|e| verify_err("cap_last_cap", format!("{text:?}: {e}")))
}

/// What the verification found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// Real = effective = saved uid.
    pub uid: u32,
    /// Real = effective = saved gid.
    pub gid: u32,
    /// Supplementary groups (empty unless degraded).
    pub groups: Vec<u32>,
    /// Whether the capability bounding set is empty.
    pub bounding_cleared: bool,
    /// Degradations (best-effort, already-unprivileged mode only).
    pub degraded: Vec<Degradation>,
}

/// Drops to `uid`/`gid` (when root) and verifies the result.
pub fn drop_and_verify(uid: u32, gid: u32, mode: Mode) -> Result<Dropped, PrivilegeError> {
    let last = last_cap()?;
    if mode == Mode::Root {
        // The bounding set can only shrink with CAP_SETPCAP, so it goes first.
        for cap in 0..=last {
            sys::capbset_drop(cap).map_err(syscall("prctl(PR_CAPBSET_DROP)"))?;
        }
        sys::ambient_clear_all().map_err(syscall("prctl(PR_CAP_AMBIENT_CLEAR_ALL)"))?;
        // Inheritable bits survive setuid; clear them while capset is still unrestricted.
        let held = sys::capget().map_err(syscall("capget"))?;
        sys::capset(CapSets {
            inheritable: 0,
            ..held
        })
        .map_err(syscall("capset(inheritable=0)"))?;
        sys::clear_groups().map_err(syscall("setgroups(0, NULL)"))?;
        sys::setresgid(gid).map_err(syscall("setresgid"))?;
        sys::setresuid(uid).map_err(syscall("setresuid"))?;
        // The kernel clears the sets on the uid change unless SECBIT_NO_SETUID_FIXUP is set;
        // clear them explicitly so a parent's securebits cannot keep them.
        sys::capset(CapSets::default()).map_err(syscall("capset(0)"))?;
    }
    verify(uid, gid, last, mode)
}

fn verify(uid: u32, gid: u32, last: u32, mode: Mode) -> Result<Dropped, PrivilegeError> {
    let mut degraded = Vec::new();
    let mut soft = |what: &'static str, detail: String| -> Result<(), PrivilegeError> {
        // Only a start as the target uid may run without these, in either mode: there is
        // nothing to drop, the groups and the bounding set are the invoker's own, and
        // no_new_privs keeps setuid bits and file capabilities from raising them. Reported.
        if mode == Mode::AlreadyTarget {
            degraded.push(Degradation {
                feature: what,
                detail,
            });
            Ok(())
        } else {
            Err(verify_err(what, detail))
        }
    };

    let uids = sys::getresuid().map_err(syscall("getresuid"))?;
    if uids != (uid, uid, uid) {
        return Err(verify_err(
            "uid",
            format!("getresuid = {uids:?}, want {uid}"),
        ));
    }
    let gids = sys::getresgid().map_err(syscall("getresgid"))?;
    if gids != (gid, gid, gid) {
        return Err(verify_err(
            "gid",
            format!("getresgid = {gids:?}, want {gid}"),
        ));
    }
    let groups = sys::getgroups().map_err(syscall("getgroups"))?;
    if !groups.is_empty() {
        soft("groups", format!("supplementary groups remain: {groups:?}"))?;
    }
    // CERT POS37-C: regaining root must fail.
    match sys::setuid(0) {
        Ok(()) => return Err(verify_err("setuid(0)", "succeeded")),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
        Err(e) => {
            return Err(verify_err(
                "setuid(0)",
                format!("failed with {e}, want EPERM"),
            ));
        }
    }
    let caps = sys::capget().map_err(syscall("capget"))?;
    if caps != CapSets::default() {
        return Err(verify_err("capabilities", format!("{caps:?}")));
    }
    let mut bounding_cleared = true;
    for cap in 0..=last {
        if sys::capbset_read(cap).map_err(syscall("prctl(PR_CAPBSET_READ)"))? {
            bounding_cleared = false;
            break;
        }
    }
    if !bounding_cleared {
        soft(
            "cap_bounding_set",
            "not empty (clearing it needs CAP_SETPCAP); no_new_privs still blocks file \
             capabilities"
                .into(),
        )?;
    }
    Ok(Dropped {
        uid,
        gid,
        groups,
        bounding_cleared,
        degraded,
    })
}
