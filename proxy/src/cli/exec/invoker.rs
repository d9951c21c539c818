//! Who the confined command runs as: the policy's `process.run_as_user/group` when given;
//! otherwise the user who invoked sluice (sluice's own user, or through `sudo` the user
//! `SUDO_UID`/`SUDO_GID` name), so their toolchain and files are theirs; as plain root,
//! `nobody` (65534), since the sandbox never runs as root. Pure.

use crate::policy::model::{RunAs, Sandbox};

/// The uid and gid of the unprivileged sandbox user.
pub const NOBODY: u32 = 65534;

/// The ids sluice runs with and the `sudo` variables it inherited.
#[derive(Clone, Debug, Default)]
pub struct Invocation {
    pub euid: u32,
    pub egid: u32,
    pub sudo_uid: Option<String>,
    pub sudo_gid: Option<String>,
}

impl Invocation {
    pub fn current() -> Invocation {
        Invocation {
            euid: rustix::process::geteuid().as_raw(),
            egid: rustix::process::getegid().as_raw(),
            sudo_uid: std::env::var("SUDO_UID").ok(),
            sudo_gid: std::env::var("SUDO_GID").ok(),
        }
    }

    /// The invoking user: sluice's own when not root, `sudo`'s caller when root through
    /// `sudo` (never root itself), else none.
    fn invoker(&self) -> Option<(u32, u32)> {
        if self.euid != 0 {
            return Some((self.euid, self.egid));
        }
        let id = |v: &Option<String>| v.as_deref()?.parse::<u32>().ok().filter(|n| *n != 0);
        Some((id(&self.sudo_uid)?, id(&self.sudo_gid)?))
    }
}

/// The command's uid and gid.
pub fn child_ids(sandbox: &Sandbox, inv: &Invocation) -> (u32, u32) {
    let fallback = inv.invoker().unwrap_or((NOBODY, NOBODY));
    let pick = |r: Option<RunAs>, default: u32| match r {
        Some(RunAs::Id(n)) => n,
        Some(RunAs::Sandbox) => NOBODY,
        None => default,
    };
    (
        pick(sandbox.run_as_user, fallback.0),
        pick(sandbox.run_as_group, fallback.1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv(euid: u32, sudo: Option<(&str, &str)>) -> Invocation {
        Invocation {
            euid,
            egid: euid,
            sudo_uid: sudo.map(|s| s.0.to_string()),
            sudo_gid: sudo.map(|s| s.1.to_string()),
        }
    }

    #[test]
    fn the_invoking_user_unless_the_policy_says_otherwise() {
        let none = Sandbox::default();
        assert_eq!(child_ids(&none, &inv(1000, None)), (1000, 1000));
        assert_eq!(
            child_ids(&none, &inv(0, Some(("1001", "1002")))),
            (1001, 1002)
        );
        assert_eq!(child_ids(&none, &inv(0, None)), (NOBODY, NOBODY));
        // sudo from root, or garbage: nobody, never root.
        assert_eq!(
            child_ids(&none, &inv(0, Some(("0", "0")))),
            (NOBODY, NOBODY)
        );
        assert_eq!(
            child_ids(&none, &inv(0, Some(("x", "1")))),
            (NOBODY, NOBODY)
        );
        let policy = Sandbox {
            run_as_user: Some(RunAs::Id(4242)),
            run_as_group: Some(RunAs::Sandbox),
            ..Sandbox::default()
        };
        assert_eq!(
            child_ids(&policy, &inv(0, Some(("1001", "1002")))),
            (4242, NOBODY)
        );
    }
}
