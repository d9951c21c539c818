//! Landlock TCP rules (connect only to the proxy port, no bind) and the seccomp socket filter
//! (AF_UNIX, MPTCP and other families and protocols).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;

use crate::harness::{Fixture, Shim, host_allows, listener, loud};
use crate::require_root;

#[test]
fn connect_only_to_the_proxy_port() {
    require_root!();
    let fx = Fixture::new();
    let (_proxy, proxy_port) = listener();
    let (_other, other_port) = listener();
    let out = Shim::new(&fx, proxy_port).probe(&["connect", &format!("127.0.0.1:{proxy_port}")]);
    out.assert_ok();
    assert_eq!(
        out.ready()["landlock"]["connect_ports"],
        serde_json::json!([proxy_port])
    );
    Shim::new(&fx, proxy_port)
        .probe(&["connect", &format!("127.0.0.1:{other_port}")])
        .assert_errno("EACCES")
        .assert_stage("connect");
    // Canary: without Landlock's TCP rules the other port is reachable.
    Shim::new(&fx, proxy_port)
        .disable("landlock-net")
        .probe(&["connect", &format!("127.0.0.1:{other_port}")])
        .assert_ok();
}

#[test]
fn transparent_ports_are_added_to_the_connect_list() {
    require_root!();
    let fx = Fixture::new();
    let (_proxy, proxy_port) = listener();
    let (_other, other_port) = listener();
    Shim::new(&fx, proxy_port)
        .arg("--transparent-port")
        .arg(other_port.to_string())
        .probe(&["connect", &format!("127.0.0.1:{other_port}")])
        .assert_ok();
}

#[test]
fn any_bind_is_eacces() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    for addr in ["127.0.0.1:18080", "127.0.0.1:0"] {
        Shim::new(&fx, port)
            .probe(&["bind", addr])
            .assert_errno("EACCES")
            .assert_stage("bind");
    }
    Shim::new(&fx, port)
        .disable("landlock-net")
        .probe(&["bind", "127.0.0.1:0"])
        .assert_ok();
}

#[test]
fn af_unix_sockets_are_eperm_but_socketpair_works() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    for kind in ["unix", "unix_dgram"] {
        Shim::new(&fx, port)
            .probe(&["socket", kind])
            .assert_errno("EPERM");
    }
    Shim::new(&fx, port).probe(&["socketpair_unix"]).assert_ok();
}

#[test]
fn pathname_unix_connect_is_closed_by_seccomp_only() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let sock = fx.outside.join("sock");
    let _server = UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = sock.to_str().unwrap();
    Shim::new(&fx, port)
        .probe(&["unix_connect", sock])
        .assert_errno("EPERM")
        .assert_stage("socket");
    // Canary: Landlock ABI < 9 does not govern pathname UNIX sockets.
    Shim::new(&fx, port)
        .disable("seccomp")
        .probe(&["unix_connect", sock])
        .assert_ok();
}

#[test]
fn mptcp_socket_is_eperm_and_would_bypass_landlock() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let (_other, other_port) = listener();
    let other = format!("127.0.0.1:{other_port}");
    Shim::new(&fx, port)
        .probe(&["socket", "mptcp"])
        .assert_errno("EPERM");
    Shim::new(&fx, port)
        .probe(&["mptcp_connect", &other])
        .assert_errno("EPERM")
        .assert_stage("socket");
    // Canary: with both layers off an MPTCP connect reaches the port, so the refusal above
    // is seccomp's doing. Whether Landlock alone sees MPTCP (its erratum 1: older kernels
    // treat it as not TCP) depends on the kernel; that is reported, not assumed.
    if host_allows("net/mptcp/enabled", &["0"])
        && std::path::Path::new("/proc/sys/net/mptcp/enabled").exists()
    {
        Shim::new(&fx, port)
            .disable("seccomp")
            .disable("landlock-net")
            .probe(&["mptcp_connect", &other])
            .assert_ok();
        let landlock_alone = Shim::new(&fx, port)
            .disable("seccomp")
            .probe(&["mptcp_connect", &other]);
        loud(&format!(
            "mptcp_connect: Landlock alone {}",
            match landlock_alone.errno() {
                Some(_) => format!("refuses it ({})", landlock_alone.refused_by()),
                None => "does not see it; seccomp is what refuses".to_owned(),
            }
        ));
    }
    Shim::new(&fx, port)
        .disable("seccomp")
        .probe(&["connect", &other])
        .assert_errno("EACCES");
}

#[test]
fn other_families_and_protocols_are_eperm() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    for kind in [
        "mptcp6",
        "sctp",
        "icmp",
        "alg",
        "packet",
        "vsock",
        "netlink_diag",
        "seqpacket",
        "raw_udp",
    ] {
        let out = Shim::new(&fx, port).probe(&["socket", kind]);
        assert_eq!(
            out.errno().as_deref(),
            Some("EPERM"),
            "{kind}: {}",
            out.stdout
        );
    }
    for kind in ["tcp", "tcp6", "netlink_route"] {
        let out = Shim::new(&fx, port).probe(&["socket", kind]);
        assert_eq!(out.errno(), None, "{kind}: {}", out.stdout);
    }
}

/// A UDP socket on the host's loopback, and a reader that reports whatever arrives.
fn udp_listener() -> (std::net::UdpSocket, String) {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let addr = sock.local_addr().unwrap().to_string();
    (sock, addr)
}

fn arrived(sock: &std::net::UdpSocket) -> Option<Vec<u8>> {
    let mut buf = [0u8; 64];
    sock.recv_from(&mut buf)
        .ok()
        .map(|(n, _)| buf[..n].to_vec())
}

#[test]
fn udp_in_the_host_network_namespace_is_eperm_and_nothing_arrives() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let (udp, to) = udp_listener();
    let out = Shim::new(&fx, port).probe(&["udp_send", &to]);
    out.assert_errno("EPERM");
    assert_eq!(out.ready()["seccomp"]["udp"], "denied");
    assert_eq!(arrived(&udp), None, "a datagram left the sandbox");
    for kind in ["udp", "udp_nonblock", "udp6"] {
        let out = Shim::new(&fx, port).probe(&["socket", kind]);
        assert_eq!(
            out.errno().as_deref(),
            Some("EPERM"),
            "{kind}: {}",
            out.stdout
        );
    }
    // socketpair(AF_UNIX) stays: Python's asyncio and libuv need it.
    Shim::new(&fx, port).probe(&["socketpair_unix"]).assert_ok();
    // Canary: Landlock (ABI < 10) does not cover UDP, so without seccomp it arrives.
    Shim::new(&fx, port)
        .disable("seccomp")
        .probe(&["udp_send", &to])
        .assert_ok();
    assert_eq!(arrived(&udp).as_deref(), Some(&b"probe"[..]));
}

#[test]
fn allow_udp_is_an_explicit_reported_opt_out() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let (udp, to) = udp_listener();
    let out = Shim::new(&fx, port)
        .arg("--allow-udp")
        .probe(&["udp_send", &to]);
    out.assert_ok();
    assert_eq!(out.ready()["seccomp"]["udp"], "allowed");
    let degraded = out.ready()["degraded"].to_string();
    assert!(degraded.contains("--allow-udp"), "{degraded}");
    assert_eq!(arrived(&udp).as_deref(), Some(&b"probe"[..]));
}

#[test]
fn udp_is_allowed_inside_the_supervisors_network_namespace() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let mut holder = std::process::Command::new("unshare")
        .args(["--net", "--", "sleep", "30"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ns = format!("/proc/{}/ns/net", holder.id());
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::fs::read_link(&ns).ok().is_none_or(|l| l == ours) {
        assert!(std::time::Instant::now() < deadline, "no netns");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = Shim::new(&fx, port)
        .arg("--netns-path")
        .arg(&ns)
        .probe(&["socket", "udp"]);
    // A namespace the shim was merely started in (a container's) does not count.
    let unshared = Shim::new(&fx, port)
        .wrapped_in(&["unshare", "--net", "--"])
        .probe(&["socket", "udp"]);
    let _ = holder.kill();
    let _ = holder.wait();
    out.assert_ok();
    assert_eq!(out.ready()["seccomp"]["udp"], "allowed");
    unshared.assert_errno("EPERM");
}

/// Whether a connection reached `listener` (non-blocking accept after the probe has exited).
fn accepted(listener: &std::net::TcpListener) -> bool {
    listener.set_nonblocking(true).unwrap();
    match listener.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    }
}

#[test]
fn tcp_fast_open_never_leaves_the_sandbox() {
    require_root!();
    let fx = Fixture::new();
    let (_proxy, proxy_port) = listener();
    let (other, other_port) = listener();
    let to = format!("127.0.0.1:{other_port}");
    // The property: a Fast Open send (an implicit connect) to a port plain connect() may not
    // reach is refused and no connection arrives. Which layer refuses depends on the kernel:
    // seccomp refuses MSG_FASTOPEN (EPERM) on every kernel; a Landlock that sees Fast Open's
    // implicit connect (newer kernels) refuses it first (EACCES). Both are reported.
    for op in ["tfo_sendto", "tfo_sendmsg"] {
        let stage = op.trim_start_matches("tfo_");
        let out = Shim::new(&fx, proxy_port).probe(&[op, &to]);
        let layer = out.assert_stage(stage).refused_by();
        loud(&format!("{op}: refused by {layer}"));
        assert!(!accepted(&other), "{op}: a connection left the sandbox");
        // Each layer on its own: seccomp always refuses; Landlock alone may or may not.
        let seccomp_alone = Shim::new(&fx, proxy_port)
            .disable("landlock-net")
            .probe(&[op, &to]);
        assert_eq!(seccomp_alone.refused_by(), "seccomp", "{op}");
        assert!(
            !accepted(&other),
            "{op}: a connection left under seccomp alone"
        );
        let landlock_alone = Shim::new(&fx, proxy_port)
            .disable("seccomp")
            .probe(&[op, &to]);
        match landlock_alone.errno() {
            Some(_) => {
                loud(&format!(
                    "{op}: Landlock alone refuses it too ({})",
                    landlock_alone.refused_by()
                ));
                assert!(!accepted(&other), "{op}: refused, yet a connection arrived");
            }
            None => {
                loud(&format!(
                    "{op}: Landlock alone does not see it; seccomp is what refuses"
                ));
                let _ = accepted(&other);
            }
        }
    }
    // The options that turn a later connect() into Fast Open are seccomp's to refuse.
    for op in ["tcp_fastopen_connect", "tcp_fastopen"] {
        Shim::new(&fx, proxy_port)
            .probe(&[op])
            .assert_errno("EPERM")
            .assert_stage("setsockopt");
    }
    // Canary: with both layers off the same Fast Open send does reach the port, so the
    // checks above can see a connection that left (where the host lets clients use it).
    if host_allows("net/ipv4/tcp_fastopen", &["0", "2"]) {
        for op in ["tfo_sendto", "tfo_sendmsg"] {
            Shim::new(&fx, proxy_port)
                .disable("seccomp")
                .disable("landlock-net")
                .probe(&[op, &to])
                .assert_ok();
            assert!(accepted(&other), "{op}: canary connection did not arrive");
        }
    }
    // Plain sends on a connected socket (flags without MSG_FASTOPEN) are untouched.
    Shim::new(&fx, proxy_port)
        .probe(&["connect", &format!("127.0.0.1:{proxy_port}")])
        .assert_ok();
}
