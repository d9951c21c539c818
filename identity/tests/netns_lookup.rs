//! Lookups of clients in their own network namespaces (`unshare -n`): found once the
//! namespace is registered, or named in the configuration, and not before. Needs root; fails
//! instead of skipping when `SLUICE_REQUIRE_PRIVILEGED=1` (CI).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::net::SocketAddr;
use std::process::Command;

use sluice_identity::{IdentityConfig, IdentityError, IdentityResolver};

mod common;

use common::*;

#[test]
fn client_in_another_network_namespace_is_found_once_registered() {
    if !privileged("client_in_another_network_namespace_is_found_once_registered") {
        return;
    }
    // Server and client both live in a fresh network namespace; the lookup runs out here.
    let script = "import os, socket, sys\n\
                  def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
                  srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n\
                  port = srv.getsockname()[1]\n\
                  if os.fork() == 0:\n\
                  \x20   srv.close()\n\
                  \x20   c = socket.create_connection(('127.0.0.1', port))\n\
                  \x20   say('client', os.getpid())\n\
                  \x20   sys.stdin.read(); os._exit(0)\n\
                  conn, peer = srv.accept()\n\
                  say('server', peer[0], peer[1], *conn.getsockname())\n\
                  sys.stdin.read()\n";
    let mut namespaced = Client::spawn(
        Command::new("unshare")
            .args([
                "--net",
                "sh",
                "-c",
                &format!("ip link set lo up && exec {PYTHON} -c \"$0\""),
            ])
            .arg(script),
    );
    let (mut client_pid, mut addrs) = (0, None);
    for _ in 0..2 {
        let line = namespaced.line();
        assert!(line.len() >= 2, "unexpected report {line:?}");
        match line[0].as_str() {
            "client" => client_pid = line[1].parse().unwrap(),
            _ => {
                let peer: SocketAddr = format!("{}:{}", line[1], line[2]).parse().unwrap();
                let local: SocketAddr = format!("{}:{}", line[3], line[4]).parse().unwrap();
                addrs = Some((peer, local));
            }
        }
    }
    let (peer, local) = addrs.unwrap();

    let resolver = resolver();
    let err = resolver.lookup(peer, local).unwrap_err();
    assert!(
        matches!(err, IdentityError::SocketNotFound { .. }),
        "found outside its namespace: {err:?}"
    );

    resolver.add_namespace_pid(namespaced.pid());
    let identity = resolver.lookup(peer, local).unwrap();
    assert_eq!(identity.pid, client_pid);
    assert_eq!(identity.exe, real_path(PYTHON));
    assert_eq!(identity.ancestors[0].pid, namespaced.pid());
    assert!(
        identity
            .ancestors
            .iter()
            .any(|a| a.pid == std::process::id())
    );

    // Registering the same namespace again, or the proxy's own, changes nothing.
    resolver.add_namespace_pid(namespaced.pid());
    resolver.add_namespace_pid(std::process::id());
    assert_eq!(resolver.lookup(peer, local).unwrap().pid, client_pid);
}

#[test]
fn namespace_registered_in_config_is_searched() {
    if !privileged("namespace_registered_in_config_is_searched") {
        return;
    }
    let script = "import os, socket, sys\n\
                  def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
                  srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n\
                  c = socket.create_connection(srv.getsockname())\n\
                  conn, peer = srv.accept()\n\
                  say(peer[0], peer[1], *conn.getsockname())\n\
                  sys.stdin.read()\n";
    let mut namespaced = Client::spawn(
        Command::new("unshare")
            .args([
                "--net",
                "sh",
                "-c",
                &format!("ip link set lo up && exec {PYTHON} -c \"$0\""),
            ])
            .arg(script),
    );
    let line = namespaced.line();
    let peer: SocketAddr = format!("{}:{}", line[0], line[1]).parse().unwrap();
    let local: SocketAddr = format!("{}:{}", line[2], line[3]).parse().unwrap();
    let resolver = IdentityResolver::new(IdentityConfig {
        namespace_pids: vec![namespaced.pid()],
        ..IdentityConfig::default()
    });
    // One process holds both ends; the client end is the one with source = peer.
    assert_eq!(resolver.lookup(peer, local).unwrap().pid, namespaced.pid());
}

// === helpers ===
