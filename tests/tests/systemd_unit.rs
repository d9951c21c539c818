//! The systemd unit in `configs/systemd/`: `systemd-analyze verify` accepts it without a
//! warning, its offline security exposure stays low, it has the hardening the README
//! promises, and every flag its `ExecStart` passes is one `sluice run` knows. When CI=true a
//! missing `systemd-analyze` fails the test (`.ci/run` installs systemd).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::process::Command;

use sluice_e2e::proxy::{TempDir, run};
use sluice_e2e::sluice_bin;

const INSTALLED_PATH: &str = "/usr/local/bin/sluice";

fn unit() -> String {
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = tests.join("../configs/systemd/sluice.service");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether `systemd-analyze` is here; without it, the test fails in CI and is skipped
/// (with a note) elsewhere.
fn have_systemd_analyze() -> bool {
    let (code, _, _) = run(Command::new("sh").args(["-c", "command -v systemd-analyze"]));
    if code == 0 {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "systemd-analyze is missing (CI=true): .ci/run installs the systemd package"
    );
    eprintln!("note: systemd-analyze is not installed; the unit was not verified");
    false
}

/// The unit as installed, with `ExecStart` pointing at the binary under test (verify
/// checks that the command exists).
fn installed_copy(dir: &TempDir) -> std::path::PathBuf {
    let text = unit().replace(INSTALLED_PATH, &sluice_bin().display().to_string());
    dir.write("sluice.service", &text)
}

#[test]
fn systemd_analyze_verify_accepts_the_unit_without_warnings() {
    let text = unit();
    assert!(text.contains(&format!("ExecStart={INSTALLED_PATH} run")));
    if !have_systemd_analyze() {
        return;
    }
    let dir = TempDir::new("systemd");
    let path = installed_copy(&dir);
    let (code, out, err) = run(Command::new("systemd-analyze").arg("verify").arg(&path));
    assert_eq!(code, 0, "{out}{err}");
    // Unknown keys and bad values are warnings that do not change the exit code.
    assert!(
        !err.contains("sluice.service"),
        "systemd-analyze complained about the unit:\n{err}"
    );

    let (code, out, err) = run(Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=30"])
        .arg(&path));
    assert_eq!(code, 0, "exposure above 3.0:\n{out}{err}");
}

#[test]
fn the_unit_is_hardened_and_reloads_with_sighup() {
    let text = unit();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    for directive in [
        "User=sluice",
        "Group=sluice",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH",
        "AmbientCapabilities=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH",
        "ReadWritePaths=/var/log/sluice",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Restart=on-failure",
        "PrivateTmp=yes",
    ] {
        assert!(lines.contains(&directive), "the unit lacks `{directive}`");
    }
    // sluice identifies callers through /proc: hiding other processes would break it.
    assert!(!lines.iter().any(|l| l.starts_with("ProtectProc=")));
    assert!(!lines.iter().any(|l| l.starts_with("ProcSubset=")));
    // The audit log is where the unit lets sluice write.
    assert!(text.contains("--audit-log /var/log/sluice/"));
}

#[test]
fn every_flag_of_exec_start_is_a_run_flag() {
    let text = unit();
    let exec = text
        .split("ExecStart=")
        .nth(1)
        .unwrap()
        .split("\nExecReload")
        .next()
        .unwrap()
        .replace("\\\n", " ");
    let (code, help, err) = run(Command::new(sluice_bin()).args(["run", "--help"]));
    assert_eq!(code, 0, "{err}");
    let flags: Vec<&str> = exec
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .collect();
    assert!(flags.len() >= 4, "{exec}");
    for flag in flags {
        assert!(
            help.contains(&format!("{flag} ")),
            "`sluice run` has no {flag}"
        );
    }
}
