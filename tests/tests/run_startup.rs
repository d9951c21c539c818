//! End-to-end tests of how `sluice run` starts: what stops it with a usage error (exit 2) and
//! what it survives with a warning. The real binary, real files; nothing is proxied.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_e2e::proxy::TempDir;
use sluice_e2e::sluice_bin;

/// `sluice run` on a free loopback port with `args`, stderr piped, audit to /dev/null.
fn start(args: &[&str]) -> Child {
    Command::new(sluice_bin())
        .args(["run", "--listen", "127.0.0.1:0", "--audit-log", "/dev/null"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice")
}

/// Waits for `child` to exit (it must, within 20 s) and returns (code, stderr).
fn exit_of(mut child: Child) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (status.code(), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice run did not exit within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_unreadable_upstream_ca_is_a_usage_error() {
    let dir = TempDir::new("startup-ca");
    let missing = dir.path().join("missing.pem");
    let (code, err) = exit_of(start(&["--upstream-ca", missing.to_str().unwrap()]));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--upstream-ca"), "{err}");
    assert!(err.contains("missing.pem"), "{err}");
    assert!(!err.contains("listening on"), "{err}");
}

#[test]
fn an_upstream_ca_file_without_a_certificate_is_a_usage_error() {
    let dir = TempDir::new("startup-ca");
    let empty = dir.write("empty.pem", "not a certificate\n");
    let (code, err) = exit_of(start(&["--upstream-ca", empty.to_str().unwrap()]));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--upstream-ca"), "{err}");
    assert!(err.contains("holds no usable certificate"), "{err}");
}

#[test]
fn an_unwritable_ca_dir_refuses_to_start_naming_the_directory_and_the_reason() {
    // A --ca-dir below a regular file cannot be created, and one sluice may not write to is
    // no better: clients would be pointed at a CA file that is not there, and every inspected
    // endpoint would answer 503. sluice refuses to start instead (a usage error), saying which
    // directory and why.
    let dir = TempDir::new("startup-ca");
    let file = dir.write("plain-file", "");
    let ca_dir = file.join("ca");
    let (code, err) = exit_of(start(&["--ca-dir", ca_dir.to_str().unwrap()]));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("--ca-dir {}", ca_dir.display())),
        "{err}"
    );
    assert!(err.contains("Not a directory"), "{err}");
    assert!(!err.contains("listening on"), "{err}");
    // A directory without write permission, for a user other than root (root writes anyway).
    if !sluice_e2e::proxy::is_root() {
        return;
    }
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    let (code, err) = exit_of(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(sluice_bin())
            .args(["run", "--listen", "127.0.0.1:0", "--audit-log", "/dev/null"])
            .args(["--ca-dir", locked.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sluice"),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("--ca-dir {}", locked.display())),
        "{err}"
    );
    assert!(err.contains("Permission denied"), "{err}");
}
