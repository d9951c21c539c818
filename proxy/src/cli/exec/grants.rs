//! What the confined command may touch, and why: every filesystem grant `sluice exec` hands
//! the shim, each with the source that asked for it (for the shim's flags, and for the
//! refusal when a secret or the audit log would be in the command's reach).
//!
//! Owns the base grants (the minimum a runtime needs, listed in the README) and how the
//! policy's `filesystem_policy`, the exec flags, the private directory and the command's
//! toolchain add to them. A path both read-only and read-write is read-write.

use std::path::{Path, PathBuf};

use crate::policy::model::Sandbox;

/// Read-only paths every command needs: programs and libraries, configuration (resolver,
/// CA store, passwd for `getpwuid`), /proc and /sys (runtimes read their own entries, CPU
/// counts), the random devices.
pub const BASE_RO: &[&str] = &[
    "/usr",
    "/etc",
    "/proc",
    "/sys",
    "/dev/urandom",
    "/dev/random",
    "/lib",
    "/lib64",
];

/// Read-write devices every command needs.
pub const BASE_RW: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// Directories whose programs every command may execute, when they exist (git and npm run
/// helpers from the last four).
pub const BASE_EXEC: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/lib/git-core",
    "/usr/local/libexec/git-core",
    "/usr/lib/node_modules",
    "/usr/libexec",
];

/// How a path is granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Read files, list directories.
    ReadOnly,
    /// Also write, create, remove.
    ReadWrite,
    /// Read and execute.
    Execute,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::ReadOnly => "read",
            Access::ReadWrite => "read and write",
            Access::Execute => "read and execute",
        }
    }
}

/// One grant and the source that asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub path: PathBuf,
    pub access: Access,
    pub why: String,
}

/// What the grants are made from.
#[derive(Debug)]
pub struct GrantInputs<'a> {
    pub sandbox: &'a Sandbox,
    pub workdir: &'a Path,
    pub extra_ro: &'a [PathBuf],
    pub extra_rw: &'a [PathBuf],
    /// The directory holding `ca.pem` and `ca-bundle.pem`.
    pub ca_dir: &'a Path,
    /// The command's private TMPDIR.
    pub tmp: Option<&'a Path>,
    /// Execute grants for the command's toolchain (its PATH, its program).
    pub toolchain: &'a [Grant],
}

fn grant(path: impl Into<PathBuf>, access: Access, why: &str) -> Grant {
    Grant {
        path: path.into(),
        access,
        why: why.to_string(),
    }
}

fn existing<'a>(paths: &'a [&'a str]) -> impl Iterator<Item = &'a str> {
    paths.iter().copied().filter(|p| Path::new(p).exists())
}

/// Every grant, deduplicated (first source wins the explanation); a path both read-only and
/// read-write is read-write only.
pub fn collect(i: &GrantInputs<'_>) -> Vec<Grant> {
    let base = "a base grant of sluice exec";
    let mut all: Vec<Grant> = Vec::new();
    all.extend(existing(BASE_RO).map(|p| grant(p, Access::ReadOnly, base)));
    all.extend(
        i.sandbox
            .read_only
            .iter()
            .filter(|p| Path::new(p).exists())
            .map(|p| grant(p, Access::ReadOnly, "filesystem_policy.read_only")),
    );
    all.extend(
        i.extra_ro
            .iter()
            .map(|p| grant(p, Access::ReadOnly, "--ro")),
    );
    all.push(grant(i.ca_dir, Access::ReadOnly, "sluice's CA directory"));
    all.extend(existing(BASE_RW).map(|p| grant(p, Access::ReadWrite, base)));
    if let Some(tmp) = i.tmp {
        all.push(grant(
            tmp,
            Access::ReadWrite,
            "the command's private TMPDIR",
        ));
    }
    all.extend(
        i.sandbox
            .read_write
            .iter()
            .filter(|p| Path::new(p).exists())
            .map(|p| grant(p, Access::ReadWrite, "filesystem_policy.read_write")),
    );
    if i.sandbox.include_workdir.unwrap_or(true) {
        all.push(grant(
            i.workdir,
            Access::ReadWrite,
            "the working directory (filesystem_policy.include_workdir)",
        ));
    }
    all.extend(
        i.extra_rw
            .iter()
            .map(|p| grant(p, Access::ReadWrite, "--rw")),
    );
    all.extend(existing(BASE_EXEC).map(|p| grant(p, Access::Execute, base)));
    all.extend(i.toolchain.iter().cloned());

    let rw: Vec<PathBuf> = all
        .iter()
        .filter(|g| g.access == Access::ReadWrite)
        .map(|g| g.path.clone())
        .collect();
    all.retain(|g| g.access != Access::ReadOnly || !rw.contains(&g.path));
    let mut seen = std::collections::BTreeSet::new();
    all.retain(|g| seen.insert((g.access, g.path.clone())));
    all.sort_by(|a, b| (a.access, &a.path).cmp(&(b.access, &b.path)));
    all
}

/// The shim flags for the grants (`--ro`, `--rw`, `--exec`).
pub fn shim_flags(grants: &[Grant]) -> Vec<String> {
    let mut a = Vec::new();
    for g in grants {
        let flag = match g.access {
            Access::ReadOnly => "--ro",
            Access::ReadWrite => "--rw",
            Access::Execute => "--exec",
        };
        a.extend([flag.to_string(), g.path.display().to_string()]);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_flags_and_private_dirs_become_grants_and_host_tmp_is_not_one() {
        let sandbox = Sandbox {
            include_workdir: Some(true),
            read_only: vec!["/usr".into(), "/does/not/exist".into()],
            read_write: vec!["/usr".into()],
            ..Sandbox::default()
        };
        let tool = [grant("/opt/tool/bin", Access::Execute, "a PATH directory")];
        let g = collect(&GrantInputs {
            sandbox: &sandbox,
            workdir: Path::new("/work"),
            extra_ro: &[PathBuf::from("/data/ro")],
            extra_rw: &[PathBuf::from("/data/rw")],
            ca_dir: Path::new("/tmp/sluice-exec-x/ca"),
            tmp: Some(Path::new("/tmp/sluice-exec-x/tmp")),
            toolchain: &tool,
        });
        let has = |p: &str, a: Access| g.iter().any(|x| x.path == Path::new(p) && x.access == a);
        assert!(has("/work", Access::ReadWrite));
        assert!(has("/data/rw", Access::ReadWrite));
        assert!(has("/data/ro", Access::ReadOnly));
        assert!(has("/tmp/sluice-exec-x/ca", Access::ReadOnly));
        assert!(has("/tmp/sluice-exec-x/tmp", Access::ReadWrite));
        assert!(has("/opt/tool/bin", Access::Execute));
        assert!(has("/usr/bin", Access::Execute));
        // Read-only and read-write: read-write wins.
        assert!(has("/usr", Access::ReadWrite) && !has("/usr", Access::ReadOnly));
        assert!(!g.iter().any(|x| x.path == Path::new("/does/not/exist")));
        assert!(!g.iter().any(|x| x.path == Path::new("/tmp")), "{g:?}");
        let flags = shim_flags(&g).join(" ");
        assert!(flags.contains("--rw /work") && flags.contains("--exec /opt/tool/bin"));
    }

    #[test]
    fn include_workdir_false_leaves_the_workdir_out() {
        let sandbox = Sandbox {
            include_workdir: Some(false),
            ..Sandbox::default()
        };
        let g = collect(&GrantInputs {
            sandbox: &sandbox,
            workdir: Path::new("/work"),
            extra_ro: &[],
            extra_rw: &[],
            ca_dir: Path::new("/c"),
            tmp: None,
            toolchain: &[],
        });
        assert!(!g.iter().any(|x| x.path == Path::new("/work")));
    }
}
