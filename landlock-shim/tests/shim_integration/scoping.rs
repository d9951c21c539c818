//! Landlock scopes (signals, abstract UNIX sockets) and the ptrace rule behind
//! `/proc/<pid>/environ`, against a same-uid process outside the sandbox.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};

use crate::harness::{Fixture, Shim, VICTIM_SECRET, Victim, abstract_name, listener};
use crate::require_root;

#[test]
fn signals_to_an_outside_same_uid_process_are_eperm() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let victim = Victim::start();
    let pid = victim.pid().to_string();
    Shim::new(&fx, port)
        .probe(&["kill", &pid])
        .assert_errno("EPERM");
    // Canary: the same uid may signal it when the signal scope is off.
    Shim::new(&fx, port)
        .disable("scope")
        .probe(&["kill", &pid])
        .assert_ok();
}

#[test]
fn abstract_unix_connect_is_eperm_from_two_layers() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let name = abstract_name();
    let _server = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
    // Full stack: seccomp refuses the AF_UNIX socket itself.
    Shim::new(&fx, port)
        .probe(&["abstract_connect", &name])
        .assert_errno("EPERM")
        .assert_stage("socket");
    // Without seccomp, Landlock's abstract-socket scope refuses the connect.
    Shim::new(&fx, port)
        .disable("seccomp")
        .probe(&["abstract_connect", &name])
        .assert_errno("EPERM")
        .assert_stage("connect");
    // Canary: with neither, the outside listener is reachable.
    Shim::new(&fx, port)
        .disable("seccomp")
        .disable("scope")
        .probe(&["abstract_connect", &name])
        .assert_ok();
}

#[test]
fn another_process_environ_is_eacces() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let victim = Victim::start();
    let pid = victim.pid().to_string();
    Shim::new(&fx, port)
        .probe(&["read_environ", &pid])
        .assert_errno("EACCES");
    // Canary: without a Landlock domain the same uid reads it in full.
    let canary = Shim::new(&fx, port)
        .disable("landlock")
        .probe(&["read_environ", &pid]);
    canary.assert_ok();
    assert!(
        canary.json()["environ"]
            .as_str()
            .unwrap()
            .contains(VICTIM_SECRET),
        "{}",
        canary.stdout
    );
}
