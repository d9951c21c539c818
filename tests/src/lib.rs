//! sluice-e2e: fixtures shared by the end-to-end tests (locating the built binaries, running
//! them, temporary policy files). The tests themselves live in `tests/tests/`.
//!
//! The tests drive the real `sluice` executable. Cargo does not build a binary of another
//! package before running this package's tests (a `[dev-dependencies]` entry only builds the
//! library), so build it first:
//!
//! ```text
//! cargo build -p sluice && cargo test -p sluice-e2e
//! ```
//!
//! or point `SLUICE_BIN` at an executable built elsewhere.
#![forbid(unsafe_code)]
// Test support: a failed expectation here is a failed test, reported with its message.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

pub mod fleet;
pub mod gateway;
pub mod h2client;
pub mod intercepted;
pub mod netns;
pub mod ocsf;
pub mod origin;
pub mod proxy;
pub mod reload;
pub mod scrape;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

/// The directory of this package (`tests/`), where `fixtures/` lives.
pub fn package_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace root (the parent of `tests/`).
pub fn workspace_dir() -> PathBuf {
    let dir = package_dir();
    dir.parent().map_or(dir.clone(), Path::to_path_buf)
}

/// `tests/fixtures/<rel>`.
pub fn fixture_dir(rel: &str) -> PathBuf {
    package_dir().join("fixtures").join(rel)
}

/// The `sluice` executable the tests run.
///
/// 1. `SLUICE_BIN`, if set (used as given; no staleness check).
/// 2. Otherwise `sluice` next to the `deps/` directory holding the running test executable:
///    `current_exe()` is `<target>/<profile>/deps/<test>-<hash>`, and `cargo build -p sluice`
///    puts the binary at `<target>/<profile>/sluice`. This follows `CARGO_TARGET_DIR`, `--target`
///    and the profile without configuration.
///
/// Panics with the command to run when the binary is missing, or when a source file it was built
/// from (as listed in cargo's `sluice.d` dep-info file) is newer than it: a stale binary would
/// test yesterday's code.
pub fn sluice_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("SLUICE_BIN").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "SLUICE_BIN is set to {}, which is not a file",
            path.display()
        );
        return path;
    }
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| panic!("cannot locate the running test executable: {e}"));
    // <target>/<profile>/deps/<test> → <target>/<profile>
    let profile_dir = exe
        .parent()
        .filter(|d| d.file_name() == Some(OsStr::new("deps")))
        .and_then(Path::parent)
        .or_else(|| exe.parent())
        .unwrap_or_else(|| panic!("unexpected test executable path {}", exe.display()));
    let bin = profile_dir.join(format!("sluice{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the sluice binary is not built: {} does not exist.\n\
         Cargo does not build another package's binary for these tests; run\n    \
         cargo build -p sluice && cargo test -p sluice-e2e\n\
         (with the same --profile/--release/--target as the tests), or set SLUICE_BIN.",
        bin.display()
    );
    if let Some(newer) = newer_source(&bin) {
        panic!(
            "the sluice binary {} is older than its source {}; run `cargo build -p sluice` \
             (with the same profile as the tests) first, or set SLUICE_BIN",
            bin.display(),
            newer.display()
        );
    }
    bin
}

/// A source file listed in cargo's dep-info for `bin` (`<bin>.d`) that was modified after
/// `bin`, if any. Missing or unreadable dep-info means no check.
fn newer_source(bin: &Path) -> Option<PathBuf> {
    let built = mtime(bin)?;
    let depinfo = std::fs::read_to_string(bin.with_extension("d")).ok()?;
    // `<target>: <dep> <dep> ...`, spaces inside paths escaped as `\ `.
    let line = depinfo.lines().next()?;
    let (_, deps) = line.split_once(": ")?;
    let deps = deps.replace("\\ ", "\u{0}");
    deps.split(' ')
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d.replace('\u{0}', " ")))
        .find(|d| mtime(d).is_some_and(|m| m > built))
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Runs `sluice` with `args` and returns its output (never panics on a non-zero exit).
pub fn run_sluice<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let bin = sluice_bin();
    Command::new(&bin)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()))
}

/// The outcome of `sluice policy check`, split the way the tests compare it.
#[derive(Debug)]
pub struct CheckOutput {
    /// The exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CheckOutput {
    /// The diagnostic lines of stderr about `file` (lines starting with its path), with every
    /// occurrence of the path replaced by `placeholder`.
    pub fn diagnostics_for(&self, file: &str, placeholder: &str) -> Vec<String> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with(file))
            .map(|l| l.replace(file, placeholder))
            .collect()
    }

    /// True if stderr looks like a Rust panic.
    pub fn panicked(&self) -> bool {
        self.stderr.contains("panicked at") || self.stderr.contains("RUST_BACKTRACE")
    }
}

/// Runs `sluice policy check <files...> <extra...>`.
pub fn policy_check(files: &[&Path], extra: &[&str]) -> CheckOutput {
    let mut args: Vec<&OsStr> = vec![OsStr::new("policy"), OsStr::new("check")];
    args.extend(files.iter().map(|f| f.as_os_str()));
    args.extend(extra.iter().map(OsStr::new));
    let out = run_sluice(args);
    CheckOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
