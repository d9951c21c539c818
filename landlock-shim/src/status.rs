//! The JSON status line on `--status-fd` (spec §1.4 step 16): what was enforced, or why not.
//!
//! Owns the line's shape (one JSON object per line, `"status"` first). Does not decide
//! anything: it renders values the launch sequence collected. The descriptor is close-on-exec, so after a `ready` line the
//! supervisor sees EOF on a successful exec, or one more line saying why exec failed.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::cli::{Compat, DisabledLayers};
use crate::degradation::Degradation;
use crate::exec::InterpGrant;
use crate::landlock::{Enforced, Plan};
use crate::privilege::Dropped;
use crate::process::{Netns, Session};
use crate::seccomp::Programs;
use crate::sys;

/// Everything the `ready` line reports.
#[derive(Debug)]
pub struct Report<'a> {
    /// Compat mode.
    pub compat: Compat,
    /// Landlock plan.
    pub plan: &'a Plan,
    /// Landlock outcome.
    pub enforced: &'a Enforced,
    /// Allowed TCP connect ports.
    pub connect_ports: &'a [u16],
    /// Path rules added.
    pub path_rules: usize,
    /// Grant paths that did not exist.
    pub missing_paths: &'a [PathBuf],
    /// ELF interpreter decision.
    pub interpreter: &'a InterpGrant,
    /// seccomp programs installed.
    pub seccomp: &'a Programs,
    /// Whether the seccomp filter lets the command make UDP sockets.
    pub udp: bool,
    /// Verified credentials.
    pub dropped: &'a Dropped,
    /// no_new_privs read back.
    pub no_new_privs: bool,
    /// Parent-death signal read back.
    pub pdeathsig: i32,
    /// Hard RLIMIT_CORE read back.
    pub core_limit: u64,
    /// How the controlling terminal was shed.
    pub session: Session,
    /// Network namespace check.
    pub netns: Netns,
    /// All degradations.
    pub degraded: &'a [Degradation],
    /// The resolved command.
    pub exec: &'a Path,
    /// Test builds: disabled layers.
    pub disabled: DisabledLayers,
}

fn degradations(list: &[Degradation]) -> Value {
    list.iter()
        .map(|d| json!({"feature": d.feature, "detail": d.detail}))
        .collect()
}

impl Report<'_> {
    /// The `ready` line.
    pub fn to_json(&self) -> Value {
        let plan = self.plan;
        let mut scopes = Vec::new();
        if plan.scope {
            scopes.extend(["abstract_unix_socket", "signal"]);
        }
        let interpreter = match self.interpreter {
            InterpGrant::Grant(path) => json!({"path": path, "granted": true}),
            InterpGrant::Skip { path, reason } => {
                json!({"path": path, "granted": false, "reason": reason})
            }
            InterpGrant::None => Value::Null,
        };
        let mut line = json!({
            "status": "ready",
            "version": env!("CARGO_PKG_VERSION"),
            "compat": self.compat.as_str(),
            "landlock": {
                "kernel_abi": plan.kernel_abi,
                "abi": plan.abi,
                "errata": plan.errata,
                "ruleset": self.enforced.ruleset,
                "fs": plan.enforces() && plan.fs,
                "net": plan.enforces() && plan.net,
                "scopes": scopes,
                "connect_ports": if plan.net { self.connect_ports.to_vec() } else { Vec::new() },
                "path_rules": self.path_rules,
                "missing_paths": self.missing_paths,
                "interpreter": interpreter,
                "log_new_exec": plan.log_new_exec,
            },
            "seccomp": {
                "programs": self.seccomp.names(),
                "instructions": self.seccomp.instructions(),
                "hash": self.seccomp.hash(),
                "udp": if self.seccomp.0.is_empty() || self.udp { "allowed" } else { "denied" },
            },
            "uid": self.dropped.uid,
            "gid": self.dropped.gid,
            "groups": self.dropped.groups,
            "cap_bounding_cleared": self.dropped.bounding_cleared,
            "no_new_privs": self.no_new_privs,
            "pdeathsig": self.pdeathsig,
            "core_limit": self.core_limit,
            "session": self.session.as_str(),
            "netns": self.netns.as_str(),
            "degraded": degradations(self.degraded),
            "exec": self.exec,
        });
        if cfg!(feature = "test-hooks")
            && let Some(map) = line.as_object_mut()
        {
            map.insert("test_disabled_layers".into(), json!(self.disabled.names()));
        }
        line
    }
}

/// A `failed` line: the shim stopped before exec.
pub fn failure(stage: &str, error: &str, exit: u8) -> Value {
    json!({"status": "failed", "stage": stage, "error": error, "exit": exit})
}

/// An `exec_failed` line: everything was enforced, but `execve` failed.
pub fn exec_failure(path: &Path, err: &io::Error, exit: u8) -> Value {
    json!({
        "status": "exec_failed",
        "path": path,
        "errno": err.raw_os_error().map(errno_name),
        "error": err.to_string(),
        "exit": exit,
    })
}

/// The symbolic name of an errno (`EACCES`), or `E<n>` for unusual ones.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EACCES => "EACCES",
        libc::ENOEXEC => "ENOEXEC",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENOSYS => "ENOSYS",
        libc::ETXTBSY => "ETXTBSY",
        libc::ELOOP => "ELOOP",
        libc::E2BIG => "E2BIG",
        libc::ENOMEM => "ENOMEM",
        libc::ESRCH => "ESRCH",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::EFAULT => "EFAULT",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTTY => "ENOTTY",
        libc::EROFS => "EROFS",
        libc::ENOTSOCK => "ENOTSOCK",
        libc::EPROTOTYPE => "EPROTOTYPE",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::ESOCKTNOSUPPORT => "ESOCKTNOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ETIMEDOUT => "ETIMEDOUT",
        _ => return format!("E{errno}"),
    };
    name.to_owned()
}

/// Where status lines go: the adopted `--status-fd`, or nowhere.
#[derive(Debug, Default)]
pub struct StatusSink(Option<File>);

impl StatusSink {
    /// Adopts `fd` (marking it close-on-exec).
    pub fn adopt(fd: Option<RawFd>) -> io::Result<Self> {
        fd.map(|fd| sys::adopt_fd(fd).map(File::from))
            .transpose()
            .map(StatusSink)
    }

    /// Writes one line (a no-op without a status fd).
    pub fn write(&mut self, value: &Value) -> io::Result<()> {
        if let Some(file) = &mut self.0 {
            let mut line = value.to_string();
            line.push('\n');
            file.write_all(line.as_bytes())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_lines() {
        let v = failure("landlock", "Landlock ABI 9 required", 125);
        assert_eq!(v["status"], "failed");
        assert_eq!(v["exit"], 125);
        let v = exec_failure(
            Path::new("/x"),
            &io::Error::from_raw_os_error(libc::EACCES),
            126,
        );
        assert_eq!(v["errno"], "EACCES");
        assert_eq!(v["path"], "/x");
    }

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(libc::EACCES), "EACCES");
        assert_eq!(errno_name(9999), "E9999");
    }
}
