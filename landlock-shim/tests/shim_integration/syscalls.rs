//! The seccomp deny-list: one probe per syscall family, canaries for the ones whose bypass the
//! spec verified (memfd exec, user namespaces, ptrace, io_uring), and clone3 → ENOSYS.

use crate::harness::{Fixture, Shim, host_allows, listener};
use crate::require_root;

#[test]
fn denied_syscalls_are_eperm() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    for op in [
        "io_uring_setup",
        "memfd_create",
        "execveat_empty",
        "ptrace_traceme",
        "process_vm_readv",
        "bpf",
        "userfaultfd",
        "perf_event_open",
        "unshare_user",
        "unshare_net",
        "clone_newuser",
        "clone_parent",
        "clone_files",
        "setns",
        "mount",
        "keyctl",
        "tiocsti",
    ] {
        let out = Shim::new(&fx, port).probe(&[op]);
        assert_eq!(
            out.errno().as_deref(),
            Some("EPERM"),
            "{op}: {}",
            out.stdout
        );
    }
}

/// `op` is refused (EPERM) by the seccomp program and by nothing else, and `kin`, the
/// ordinary operation it is a variant of, is not.
fn refused_by_seccomp_alone(op: &str, kin: &str) {
    let fx = Fixture::new();
    let (_l, port) = listener();
    Shim::new(&fx, port).probe(&[op]).assert_errno("EPERM");
    Shim::new(&fx, port)
        .disable("seccomp")
        .probe(&[op])
        .assert_ok();
    Shim::new(&fx, port).probe(&[kin]).assert_ok();
}

#[test]
fn a_child_made_a_sibling_of_its_maker_is_refused_but_plain_forks_are_not() {
    require_root!();
    refused_by_seccomp_alone("clone_parent", "fork");
}

#[test]
fn a_process_sharing_its_makers_fd_table_is_refused_but_threads_are_not() {
    require_root!();
    refused_by_seccomp_alone("clone_files", "thread");
}

#[test]
fn clone3_is_enosys_so_libc_falls_back_to_clone() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    Shim::new(&fx, port)
        .probe(&["clone3"])
        .assert_errno("ENOSYS");
    Shim::new(&fx, port)
        .disable("seccomp")
        .probe(&["clone3"])
        .assert_ok();
}

#[test]
fn stacking_another_seccomp_filter_is_allowed() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    Shim::new(&fx, port).probe(&["seccomp_filter"]).assert_ok();
}

#[test]
fn seccomp_canaries_memfd_exec_userns_ptrace_io_uring() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    Shim::new(&fx, port)
        .probe(&["memfd_exec"])
        .assert_errno("EPERM")
        .assert_stage("memfd_create");
    // memfd exec bypasses Landlock's Execute right: it runs /usr/bin/true's bytes.
    if host_allows("vm/memfd_noexec", &["1", "2"]) {
        let memfd = Shim::new(&fx, port)
            .disable("seccomp")
            .probe(&["memfd_exec"]);
        assert_eq!(memfd.code, Some(0), "{}{}", memfd.stdout, memfd.stderr);
        assert!(memfd.stdout.is_empty(), "{}", memfd.stdout);
    }
    let canaries = [
        (
            "unshare_user",
            host_allows("user/max_user_namespaces", &["0"])
                && host_allows("kernel/unprivileged_userns_clone", &["0"]),
        ),
        (
            "ptrace_traceme",
            host_allows("kernel/yama/ptrace_scope", &["3"]),
        ),
        (
            "io_uring_setup",
            host_allows("kernel/io_uring_disabled", &["1", "2"]),
        ),
    ];
    for (op, open_on_host) in canaries {
        if open_on_host {
            Shim::new(&fx, port)
                .disable("seccomp")
                .probe(&[op])
                .assert_ok();
        }
    }
}
