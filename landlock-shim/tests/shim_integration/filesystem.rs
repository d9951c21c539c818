//! Landlock filesystem rules: ro, rw and exec sets, the ELF interpreter grant.

use crate::harness::{Fixture, PROBE, Shim, listener, probe_dir};
use crate::require_root;

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn write_outside_rw_is_eacces_and_landlock_fs_is_load_bearing() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let target = fx.outside.join("new");
    Shim::new(&fx, port)
        .probe(&["write", path(&target)])
        .assert_errno("EACCES");
    // Canary: the directory is nobody's, so DAC alone allows the write.
    Shim::new(&fx, port)
        .disable("landlock-fs")
        .probe(&["write", path(&target)])
        .assert_ok();
}

#[test]
fn read_outside_ro_is_eacces_and_landlock_fs_is_load_bearing() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let file = fx.outside.join("file");
    Shim::new(&fx, port)
        .probe(&["read", path(&file)])
        .assert_errno("EACCES");
    Shim::new(&fx, port)
        .disable("landlock-fs")
        .probe(&["read", path(&file)])
        .assert_ok();
}

#[test]
fn write_and_truncate_of_a_ro_file_are_eacces() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let file = fx.ro.join("file");
    Shim::new(&fx, port)
        .probe(&["write", path(&file)])
        .assert_errno("EACCES");
    Shim::new(&fx, port)
        .probe(&["truncate", path(&file)])
        .assert_errno("EACCES");
    Shim::new(&fx, port)
        .probe(&["mkdir", path(&fx.ro.join("d"))])
        .assert_errno("EACCES");
    // The file belongs to nobody: without Landlock the same writes succeed.
    Shim::new(&fx, port)
        .disable("landlock-fs")
        .probe(&["truncate", path(&file)])
        .assert_ok();
}

#[test]
fn rw_is_writable_and_ro_is_readable() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    Shim::new(&fx, port)
        .probe(&["write", path(&fx.rw.join("out"))])
        .assert_ok();
    assert_eq!(
        std::fs::read_to_string(fx.rw.join("out")).unwrap(),
        "probe\n"
    );
    Shim::new(&fx, port)
        .probe(&["mkdir", path(&fx.rw.join("sub"))])
        .assert_ok();
    let read = Shim::new(&fx, port).probe(&["read", path(&fx.ro.join("file"))]);
    read.assert_ok();
    assert_eq!(read.json()["bytes"], 8);
    Shim::new(&fx, port)
        .probe(&["readdir", path(&fx.ro)])
        .assert_ok();
}

#[test]
fn exec_from_a_writable_directory_is_eacces() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let copy = fx.rw.join("true");
    std::fs::copy("/usr/bin/true", &copy).unwrap();
    Shim::new(&fx, port)
        .probe(&["exec", path(&copy)])
        .assert_errno("EACCES")
        .assert_stage("execve");
    // The shim itself refuses it the same way: 126.
    let direct = Shim::new(&fx, port).run(&[&copy]);
    assert_eq!(direct.code, Some(126), "{}", direct.stderr);
    assert_eq!(direct.status.last().unwrap()["errno"], "EACCES");
    // Canary: without Landlock FS rules the copy runs (and prints nothing).
    let canary = Shim::new(&fx, port)
        .disable("landlock-fs")
        .probe(&["exec", path(&copy)]);
    assert_eq!(canary.code, Some(0), "{}", canary.stdout);
    assert!(canary.stdout.is_empty(), "{}", canary.stdout);
}

#[test]
fn the_elf_interpreter_needs_execute() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    // By default the shim grants Execute on PT_INTERP because it lies under --ro /usr.
    let out = Shim::new(&fx, port).probe(&["noop"]);
    out.assert_ok();
    let interp = &out.ready()["landlock"]["interpreter"];
    assert_eq!(interp["granted"], true);
    assert!(
        interp["path"].as_str().unwrap().contains("ld-linux"),
        "{interp}"
    );
    // Without it, every dynamic binary fails to exec with EACCES: exit 126.
    let out = Shim::new(&fx, port)
        .arg("--no-interp-grant")
        .run(&[PROBE, "noop"]);
    assert_eq!(out.code, Some(126), "{}", out.stderr);
    let last = out.status.last().unwrap();
    assert_eq!(last["status"], "exec_failed");
    assert_eq!(last["errno"], "EACCES");
}

#[test]
fn the_interpreter_is_not_granted_outside_the_granted_roots() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    // Only the probe's directory is granted: ld.so under /usr is not readable, so the shim
    // does not widen access to reach it, and exec fails.
    let out = Shim::bare(port)
        .arg("--exec")
        .arg(probe_dir())
        .arg("--rw")
        .arg(&fx.rw)
        .arg("--allow-host-netns")
        .run(&[PROBE, "noop"]);
    assert_eq!(out.code, Some(126), "{}", out.stderr);
    let ready = out.ready();
    assert_eq!(ready["landlock"]["interpreter"]["granted"], false);
}

#[test]
fn missing_grant_paths_are_skipped_and_reported() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let missing = fx.outside.join("does-not-exist");
    let out = Shim::new(&fx, port)
        .arg("--ro")
        .arg(&missing)
        .probe(&["noop"]);
    out.assert_ok();
    assert_eq!(
        out.ready()["landlock"]["missing_paths"],
        serde_json::json!([missing.to_str().unwrap()])
    );
}
