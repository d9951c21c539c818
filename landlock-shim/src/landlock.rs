//! Landlock: probe the kernel, plan per compat mode, prepare as root, enforce after the drop.
//!
//! Owns the ABI decision (spec §1.3, §1.12), the access rights of each grant class (spec §1.5),
//! the TCP port rules (§1.6) and the scopes (§1.7). The split follows the spec's order: the
//! ruleset and its `PathFd`s are built as root (step 5, so mode-700 parents still resolve) and
//! `restrict_self` runs only after the privilege drop and no_new_privs (step 14).
//! Does not own the seccomp filters, which cover what Landlock cannot (AF_UNIX, MPTCP...).

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, Erratum, NetPort,
    PathBeneath, PathFd, PathFdError, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    RulesetStatus, Scope,
};

use crate::cli::{Compat, DisabledLayers};
use crate::degradation::Degradation;
use crate::sys;

/// Lowest ABI strict mode accepts: scopes (signals, abstract UNIX sockets) arrive in ABI 6.
pub const STRICT_MIN_ABI: u8 = 6;
/// ABI of the audit flags (`--audit-denials`).
pub const AUDIT_MIN_ABI: u8 = 7;

/// What the kernel said about Landlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Supported, with this ABI and these fixed errata.
    Available {
        /// ABI version.
        abi: i32,
        /// Fixed errata bit mask.
        errata: u32,
    },
    /// ENOSYS: not built into the kernel.
    NotImplemented,
    /// EOPNOTSUPP: built in but disabled at boot.
    NotEnabled,
    /// EPERM: a seccomp profile (container runtime) blocks the syscall.
    Blocked,
    /// Any other errno.
    Failed(i32),
}

impl Availability {
    fn reason(self) -> String {
        match self {
            Availability::Available { abi, .. } => format!("ABI {abi}"),
            Availability::NotImplemented => "not built into this kernel (ENOSYS)".into(),
            Availability::NotEnabled => "disabled at boot (EOPNOTSUPP)".into(),
            Availability::Blocked => "blocked by a seccomp profile (EPERM)".into(),
            Availability::Failed(errno) => format!("probe failed with errno {errno}"),
        }
    }
}

/// Asks the kernel (spec §1.4 step 3).
pub fn probe() -> Availability {
    match sys::landlock_abi_version() {
        Ok(abi) => Availability::Available {
            abi,
            errata: Erratum::current().bits(),
        },
        Err(e) => match e.raw_os_error() {
            Some(libc::ENOSYS) => Availability::NotImplemented,
            Some(libc::EOPNOTSUPP) => Availability::NotEnabled,
            Some(libc::EPERM) => Availability::Blocked,
            other => Availability::Failed(other.unwrap_or(0)),
        },
    }
}

/// The inputs of the plan besides the kernel's answer.
#[derive(Clone, Copy, Debug)]
pub struct PlanRequest {
    /// Strict or best-effort.
    pub compat: Compat,
    /// `--min-abi`.
    pub min_abi: Option<u8>,
    /// `--audit-denials`.
    pub audit_denials: bool,
    /// `--allow-unconfined`.
    pub allow_unconfined: bool,
    /// Test override of the kernel ABI (test-hooks builds only).
    pub test_max_abi: Option<u8>,
    /// Test-disabled layers.
    pub disabled: DisabledLayers,
}

/// What will be enforced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// ABI reported by the kernel (0 when unavailable).
    pub kernel_abi: i32,
    /// ABI the ruleset targets (kernel ABI, capped by the test override); 0 = no Landlock.
    pub abi: u8,
    /// Fixed errata.
    pub errata: u32,
    /// Handle filesystem rights.
    pub fs: bool,
    /// Handle TCP bind/connect.
    pub net: bool,
    /// Scope signals and abstract UNIX sockets.
    pub scope: bool,
    /// Log denials after exec.
    pub log_new_exec: bool,
    /// Every protection left out, and why.
    pub degraded: Vec<Degradation>,
}

impl Plan {
    /// Whether any Landlock ruleset will be built.
    pub fn enforces(&self) -> bool {
        self.abi > 0 && (self.fs || self.net || self.scope)
    }
}

/// Why Landlock cannot be set up as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LandlockError {
    /// No Landlock at all.
    #[error("Landlock is unavailable: {reason}{hint}")]
    Unavailable {
        /// What the kernel said.
        reason: String,
        /// What the user can do.
        hint: &'static str,
    },
    /// The kernel's ABI is below what the request needs.
    #[error(
        "Landlock ABI {required} required by {required_by}, but this kernel provides ABI \
         {available}{note}"
    )]
    AbiTooOld {
        /// Needed ABI.
        required: u8,
        /// Available ABI.
        available: i32,
        /// Which flag or feature needs it.
        required_by: String,
        /// A note on a test override.
        note: String,
    },
    /// A grant path could not be opened.
    #[error("cannot open {path} for a Landlock rule: {source}")]
    Path {
        /// The path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The crate refused the ruleset.
    #[error("Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    /// `restrict_self` did not enforce everything (strict mode).
    #[error("Landlock ruleset is {0}, not fully enforced")]
    NotFullyEnforced(&'static str),
}

fn degrade(list: &mut Vec<Degradation>, feature: &'static str, detail: impl Into<String>) {
    list.push(Degradation {
        feature,
        detail: detail.into(),
    });
}

/// Decides what to enforce for this kernel and mode. Pure.
pub fn plan(avail: Availability, req: &PlanRequest) -> Result<Plan, LandlockError> {
    let (kernel_abi, errata) = match avail {
        Availability::Available { abi, errata } => (abi, errata),
        _ => (0, 0),
    };
    let abi = match req.test_max_abi {
        Some(cap) => kernel_abi.min(i32::from(cap)),
        None => kernel_abi,
    };
    let note = if abi < kernel_abi {
        format!(" (capped to {abi} by SLUICE_SHIM_TEST_MAX_ABI)")
    } else {
        String::new()
    };
    let too_old = |required: u8, required_by: String| LandlockError::AbiTooOld {
        required,
        available: abi,
        required_by,
        note: note.clone(),
    };
    if let Some(min) = req.min_abi
        && abi < i32::from(min)
    {
        return Err(too_old(min, format!("--min-abi {min}")));
    }

    let mut degraded = Vec::new();
    if abi <= 0 {
        let reason = if kernel_abi > 0 {
            format!("ABI capped to 0{note}")
        } else {
            avail.reason()
        };
        if req.compat == Compat::Strict {
            return Err(LandlockError::Unavailable {
                reason,
                hint: " (--compat strict requires it)",
            });
        }
        if !req.allow_unconfined {
            return Err(LandlockError::Unavailable {
                reason,
                hint: " (pass --allow-unconfined to run without filesystem and network confinement)",
            });
        }
        degrade(&mut degraded, "landlock", reason);
        return Ok(Plan {
            kernel_abi,
            abi: 0,
            errata,
            fs: false,
            net: false,
            scope: false,
            log_new_exec: false,
            degraded,
        });
    }
    let abi = u8::try_from(abi).unwrap_or(u8::MAX);

    if req.compat == Compat::Strict {
        if abi < STRICT_MIN_ABI {
            return Err(too_old(
                STRICT_MIN_ABI,
                "--compat strict (signal and abstract UNIX socket scoping)".into(),
            ));
        }
        if req.audit_denials && abi < AUDIT_MIN_ABI {
            return Err(too_old(AUDIT_MIN_ABI, "--audit-denials".into()));
        }
    }
    let table: [(u8, &'static str, &'static str); 5] = [
        (
            2,
            "landlock_refer",
            "ABI < 2: cross-directory rename and link always fail with EXDEV",
        ),
        (
            3,
            "landlock_truncate",
            "ABI < 3: truncation is not restricted (read-only files are truncatable if DAC allows)",
        ),
        (
            4,
            "landlock_net",
            "ABI < 4: no TCP port rules; the netns and nft fence is the only network control",
        ),
        (
            5,
            "landlock_ioctl_dev",
            "ABI < 5: device ioctls are not restricted",
        ),
        (
            6,
            "landlock_scope",
            "ABI < 6: signals and abstract UNIX sockets are not scoped; uid separation and the \
             seccomp AF_UNIX ban remain",
        ),
    ];
    for (needed, feature, detail) in table {
        if abi < needed {
            degrade(&mut degraded, feature, detail);
        }
    }
    if req.audit_denials && abi < AUDIT_MIN_ABI {
        degrade(
            &mut degraded,
            "landlock_audit",
            "ABI < 7: --audit-denials ignored",
        );
    }
    Ok(Plan {
        kernel_abi,
        abi,
        errata,
        fs: !req.disabled.landlock_fs,
        net: abi >= 4 && !req.disabled.landlock_net,
        scope: abi >= 6 && !req.disabled.landlock_scope,
        log_new_exec: req.audit_denials && abi >= AUDIT_MIN_ABI,
        degraded,
    })
}

/// The access class of a filesystem grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessClass {
    /// `--ro`: read files, list directories.
    ReadOnly,
    /// `--rw`: everything but execute.
    ReadWrite,
    /// `--exec`: execute, read files, list directories.
    Execute,
}

/// The rights a grant of `class` gives on an inode, for `abi`. Non-directories get only the
/// file rights (the kernel refuses directory rights on a file with EINVAL).
pub fn rights(class: AccessClass, abi: ABI, is_dir: bool) -> BitFlags<AccessFs> {
    let execute = BitFlags::from(AccessFs::Execute);
    let base = match class {
        AccessClass::ReadOnly => AccessFs::from_read(abi) & !execute,
        AccessClass::ReadWrite => AccessFs::from_all(abi) & !execute,
        AccessClass::Execute => AccessFs::from_read(abi),
    };
    if is_dir {
        base
    } else {
        base & AccessFs::from_file(abi)
    }
}

/// One filesystem grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The path (opened as root).
    pub path: PathBuf,
    /// What it grants.
    pub class: AccessClass,
}

/// A ruleset built as root, waiting for `enforce`.
#[derive(Debug)]
pub struct Prepared {
    ruleset: Option<RulesetCreated>,
    /// Path rules added.
    pub path_rules: usize,
    /// Grant paths that do not exist (skipped: a missing grant only narrows access).
    pub missing: Vec<PathBuf>,
}

fn is_dir(fd: &PathFd) -> io::Result<bool> {
    // fstat through the same O_PATH descriptor the rule uses: no TOCTOU with the path.
    let file = File::from(fd.as_fd().try_clone_to_owned()?);
    Ok(file.metadata()?.is_dir())
}

/// Builds the ruleset (spec §1.4 step 5). Runs as root.
pub fn prepare(
    plan: &Plan,
    grants: &[Grant],
    connect_ports: &[u16],
) -> Result<Prepared, LandlockError> {
    let mut prepared = Prepared {
        ruleset: None,
        path_rules: 0,
        missing: Vec::new(),
    };
    if !plan.enforces() {
        return Ok(prepared);
    }
    let abi = ABI::from(i32::from(plan.abi));
    // Only rights of the planned ABI are requested, so a hard requirement can only fail on a
    // real inconsistency, and the final status is FullyEnforced.
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    if plan.fs {
        ruleset = ruleset.handle_access(AccessFs::from_all(abi))?;
    }
    if plan.net {
        // Handling BindTcp without any BindTcp rule denies every bind, port 0 included.
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    if plan.scope {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal)?;
    }
    let mut created = ruleset.create()?;
    if plan.fs {
        for grant in grants {
            let fd = match PathFd::new(&grant.path) {
                Ok(fd) => fd,
                Err(PathFdError::OpenCall { source, .. })
                    if source.kind() == io::ErrorKind::NotFound =>
                {
                    prepared.missing.push(grant.path.clone());
                    continue;
                }
                Err(PathFdError::OpenCall { source, path, .. }) => {
                    return Err(LandlockError::Path { path, source });
                }
                Err(other) => {
                    return Err(LandlockError::Path {
                        path: grant.path.clone(),
                        source: io::Error::other(other.to_string()),
                    });
                }
            };
            let dir = is_dir(&fd).map_err(|source| LandlockError::Path {
                path: grant.path.clone(),
                source,
            })?;
            created = created.add_rule(PathBeneath::new(fd, rights(grant.class, abi, dir)))?;
            prepared.path_rules += 1;
        }
    }
    if plan.net {
        for port in connect_ports {
            created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
        }
    }
    if plan.log_new_exec {
        created = created.log_new_exec(true)?;
    }
    prepared.ruleset = Some(created);
    Ok(prepared)
}

/// The outcome of `restrict_self`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enforced {
    /// `fully_enforced`, `partially_enforced`, `not_enforced`, or `none` (no ruleset).
    pub ruleset: &'static str,
    /// Degradations discovered at enforcement (best-effort only).
    pub degraded: Vec<Degradation>,
}

/// Enforces the prepared ruleset on this (single) thread (spec §1.4 step 14).
pub fn enforce(prepared: Prepared, compat: Compat) -> Result<Enforced, LandlockError> {
    let Some(ruleset) = prepared.ruleset else {
        return Ok(Enforced {
            ruleset: "none",
            degraded: Vec::new(),
        });
    };
    let status = ruleset.restrict_self()?;
    let name = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully_enforced",
        RulesetStatus::PartiallyEnforced => "partially_enforced",
        RulesetStatus::NotEnforced => "not_enforced",
    };
    let mut degraded = Vec::new();
    if status.ruleset != RulesetStatus::FullyEnforced {
        if compat == Compat::Strict {
            return Err(LandlockError::NotFullyEnforced(name));
        }
        degrade(&mut degraded, "landlock_ruleset", name);
    }
    Ok(Enforced {
        ruleset: name,
        degraded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(compat: Compat) -> PlanRequest {
        PlanRequest {
            compat,
            min_abi: None,
            audit_denials: false,
            allow_unconfined: false,
            test_max_abi: None,
            disabled: DisabledLayers::default(),
        }
    }

    fn kernel(abi: i32) -> Availability {
        Availability::Available { abi, errata: 7 }
    }

    #[test]
    fn strict_on_abi_7_enforces_everything() {
        let plan = plan(kernel(7), &req(Compat::Strict)).unwrap();
        assert_eq!(
            (plan.abi, plan.fs, plan.net, plan.scope),
            (7, true, true, true)
        );
        assert!(plan.degraded.is_empty());
        assert!(!plan.log_new_exec);
    }

    #[test]
    fn strict_refuses_old_abi_and_names_it() {
        let err = plan(kernel(5), &req(Compat::Strict)).unwrap_err();
        assert!(err.to_string().contains("ABI 6"), "{err}");
        assert!(err.to_string().contains("provides ABI 5"), "{err}");
    }

    #[test]
    fn min_abi_is_a_floor_in_both_modes() {
        for compat in [Compat::Strict, Compat::BestEffort] {
            let mut r = req(compat);
            r.min_abi = Some(9);
            let err = plan(kernel(7), &r).unwrap_err();
            assert!(
                err.to_string().contains("ABI 9 required by --min-abi 9"),
                "{err}"
            );
        }
    }

    #[test]
    fn test_override_caps_the_kernel_abi() {
        let mut r = req(Compat::Strict);
        r.test_max_abi = Some(5);
        let err = plan(kernel(7), &r).unwrap_err();
        assert!(
            err.to_string().contains("SLUICE_SHIM_TEST_MAX_ABI"),
            "{err}"
        );
    }

    #[test]
    fn best_effort_reports_each_missing_feature() {
        let plan = plan(kernel(3), &req(Compat::BestEffort)).unwrap();
        let features: Vec<_> = plan.degraded.iter().map(|d| d.feature).collect();
        assert_eq!(
            features,
            ["landlock_net", "landlock_ioctl_dev", "landlock_scope"]
        );
        assert!(plan.fs && !plan.net && !plan.scope);
    }

    #[test]
    fn unavailable_landlock_needs_allow_unconfined() {
        let err = plan(Availability::Blocked, &req(Compat::BestEffort)).unwrap_err();
        assert!(err.to_string().contains("--allow-unconfined"), "{err}");
        assert!(err.to_string().contains("EPERM"), "{err}");
        let err = plan(Availability::NotImplemented, &req(Compat::Strict)).unwrap_err();
        assert!(err.to_string().contains("ENOSYS"), "{err}");
        let mut r = req(Compat::BestEffort);
        r.allow_unconfined = true;
        let plan = plan(Availability::NotEnabled, &r).unwrap();
        assert!(!plan.enforces());
        assert_eq!(plan.degraded[0].feature, "landlock");
    }

    #[test]
    fn audit_denials_need_abi_7() {
        let mut r = req(Compat::Strict);
        r.audit_denials = true;
        assert!(plan(kernel(7), &r).unwrap().log_new_exec);
        r.compat = Compat::BestEffort;
        let p = plan(kernel(6), &r).unwrap();
        assert!(!p.log_new_exec);
        assert_eq!(p.degraded[0].feature, "landlock_audit");
    }

    #[test]
    fn disabled_layers_are_left_out() {
        let mut r = req(Compat::Strict);
        r.disabled.landlock_fs = true;
        r.disabled.landlock_net = true;
        r.disabled.landlock_scope = true;
        assert!(!plan(kernel(7), &r).unwrap().enforces());
    }

    #[test]
    fn rights_per_class() {
        let abi = ABI::V7;
        let ro = rights(AccessClass::ReadOnly, abi, true);
        assert_eq!(ro, AccessFs::ReadFile | AccessFs::ReadDir);
        let rw = rights(AccessClass::ReadWrite, abi, true);
        assert!(!rw.contains(AccessFs::Execute));
        assert!(rw.contains(AccessFs::Refer | AccessFs::Truncate | AccessFs::IoctlDev));
        assert!(rw.contains(AccessFs::MakeReg | AccessFs::RemoveFile | AccessFs::WriteFile));
        let ex = rights(AccessClass::Execute, abi, true);
        assert_eq!(
            ex,
            AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir
        );
    }

    #[test]
    fn file_grants_get_file_rights_only() {
        let abi = ABI::V7;
        assert_eq!(
            rights(AccessClass::ReadOnly, abi, false),
            BitFlags::from(AccessFs::ReadFile)
        );
        assert_eq!(
            rights(AccessClass::Execute, abi, false),
            AccessFs::Execute | AccessFs::ReadFile
        );
        assert_eq!(
            rights(AccessClass::ReadWrite, abi, false),
            AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
        );
        // ABI 2 has no Truncate or IoctlDev to grant.
        assert_eq!(
            rights(AccessClass::ReadWrite, ABI::V2, false),
            AccessFs::ReadFile | AccessFs::WriteFile
        );
    }
}
