//! `sluice netfence apply` for real: in a fresh "app" network namespace joined by a veth to an
//! "internet" namespace that holds the origins, the fence is applied by the sluice binary and
//! then probed with real sockets. TCP from a sandboxed uid lands on the transparent port (which
//! reads the original destination back), DNS on the policy DNS port, every other UDP (QUIC on
//! 443 too) is refused, IPv6 likewise, and sluice's own uid goes out untouched. Needs root.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use sluice_e2e::netns::{pod_namespaces, sh};
use sluice_e2e::package_dir;
use sluice_e2e::proxy::privileged;

const TRANSPARENT_PORT: &str = "15001";
const DNS_PORT: &str = "15053";
const PROXY_UID: &str = "4242";

/// Two namespaces and a veth between them; removed on drop, with the servers started in them.
struct Pod {
    app: String,
    net: String,
    v4: String,
    v6: String,
    servers: Vec<Child>,
}

impl Pod {
    fn new() -> Pod {
        let id = std::process::id();
        let octet = id % 200 + 1;
        let app = format!("sl-fa-{id}");
        let net = format!("sl-fn-{id}");
        pod_namespaces(&app, &net);
        let v4 = format!("10.215.{octet}.2");
        let v6 = format!("fd00:215:{octet:x}::2");
        sh(&[
            "ip",
            "-n",
            &app,
            "addr",
            "add",
            &format!("10.215.{octet}.1/30"),
            "dev",
            "a0",
        ]);
        sh(&[
            "ip",
            "-n",
            &net,
            "addr",
            "add",
            &format!("{v4}/30"),
            "dev",
            "n0",
        ]);
        sh(&[
            "ip",
            "-n",
            &app,
            "-6",
            "addr",
            "add",
            &format!("fd00:215:{octet:x}::1/64"),
            "dev",
            "a0",
            "nodad",
        ]);
        sh(&[
            "ip",
            "-n",
            &net,
            "-6",
            "addr",
            "add",
            &format!("{v6}/64"),
            "dev",
            "n0",
            "nodad",
        ]);
        sh(&["ip", "-n", &app, "link", "set", "a0", "up"]);
        sh(&["ip", "-n", &net, "link", "set", "n0", "up"]);
        Pod {
            app,
            net,
            v4,
            v6,
            servers: Vec::new(),
        }
    }

    /// Starts `fence_servers.py LABEL SPECS...` in `ns` and waits until it is bound.
    fn serve(&mut self, ns: &str, label: &str, specs: &[String]) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "python3"])
            .arg(package_dir().join("clients/fence_servers.py"))
            .arg(label)
            .args(specs)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "{label} servers did not start");
        self.servers.push(child);
    }

    /// One probe from the app namespace, as `uid` (None: root).
    fn probe(&self, uid: Option<&str>, proto: &str, host: &str, port: &str) -> String {
        let script = package_dir().join("clients/fence_probe.py");
        let script = script.to_str().unwrap();
        let mut args = vec!["ip", "netns", "exec", &self.app];
        let ids;
        if let Some(uid) = uid {
            ids = [format!("--reuid={uid}"), format!("--regid={uid}")];
            args.extend(["setpriv", &ids[0], &ids[1], "--clear-groups"]);
        }
        args.extend(["/usr/bin/python3", script, proto, host, port]);
        sh(&args).trim().to_string()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.app, &self.net] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

#[test]
fn the_fence_sends_tcp_to_sluice_dns_to_the_policy_dns_and_refuses_other_udp() {
    if !privileged("the_fence_sends_tcp_to_sluice_dns_to_the_policy_dns_and_refuses_other_udp") {
        return;
    }
    let mut pod = Pod::new();
    let (v4, v6) = (pod.v4.clone(), pod.v6.clone());
    let net = pod.net.clone();
    let app = pod.app.clone();
    pod.serve(
        &net,
        "origin",
        &[
            format!("tcp:{v4}:443"),
            format!("tcp:[{v6}]:443"),
            format!("udp:{v4}:9999"),
            format!("udp:{v4}:443"),
        ],
    );
    pod.serve(
        &app,
        "transparent",
        &[
            format!("tcp:127.0.0.1:{TRANSPARENT_PORT}"),
            format!("tcp:[::1]:{TRANSPARENT_PORT}"),
        ],
    );
    pod.serve(
        &app,
        "dns",
        &[
            format!("udp:127.0.0.1:{DNS_PORT}"),
            format!("tcp:127.0.0.1:{DNS_PORT}"),
        ],
    );
    // Two services of the pod on loopback: one the fence lets every program reach (named with
    // --allow-loopback-port, as sluice's explicit listener would be), and one it must not (a
    // collector or mesh proxy of another container: a way out around sluice).
    pod.serve(&app, "named", &["tcp:127.0.0.1:3128".to_string()]);
    pod.serve(&app, "collector", &["tcp:127.0.0.1:4318".to_string()]);
    // Canary: without the fence the origin is reached directly, UDP included, and the
    // collector answers on loopback.
    assert_eq!(pod.probe(None, "tcp", &v4, "443"), "origin -");
    assert!(
        pod.probe(None, "tcp", "127.0.0.1", "4318")
            .starts_with("collector ")
    );
    assert_eq!(pod.probe(None, "udp", &v4, "9999"), "origin");

    let out = Command::new("ip")
        .args(["netns", "exec", &app])
        .arg(sluice_e2e::sluice_bin())
        .args([
            "netfence",
            "apply",
            "--transparent-port",
            TRANSPARENT_PORT,
            "--dns-port",
            DNS_PORT,
            "--proxy-uid",
            PROXY_UID,
            "--allow-loopback-port",
            "3128",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "netfence apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = sh(&["ip", "netns", "exec", &app, "nft", "list", "ruleset"]);
    assert!(listed.contains("table inet sluice_fence"), "{listed}");
    assert!(
        listed.contains(&format!("redirect to :{TRANSPARENT_PORT}")),
        "{listed}"
    );

    // A sandboxed program (root, or any uid but sluice's): TCP lands on the transparent port,
    // whatever the port, and the original destination is there to read.
    for uid in [None, Some("4243")] {
        assert_eq!(
            pod.probe(uid, "tcp", &v4, "443"),
            format!("transparent {v4}:443")
        );
        assert_eq!(
            pod.probe(uid, "tcp", &v4, "22"),
            format!("transparent {v4}:22")
        );
        assert_eq!(
            pod.probe(uid, "tcp", &v6, "443"),
            format!("transparent [{v6}]:443")
        );
        // DNS goes to the policy DNS, over UDP and TCP.
        assert_eq!(pod.probe(uid, "udp", &v4, "53"), "dns");
        assert_eq!(
            pod.probe(uid, "tcp", &v4, "53").split(' ').next(),
            Some("dns")
        );
        // Every other UDP is refused (the send fails, or ICMP unreachable comes back): QUIC on
        // 443 as well, over IPv4 and IPv6.
        for (host, port) in [(&v4, "9999"), (&v4, "443"), (&v6, "443")] {
            let got = pod.probe(uid, "udp", host, port);
            assert!(
                got == "blocked" || got == "refused",
                "UDP to {host}:{port} as {uid:?}: {got}"
            );
        }
    }
    // Loopback: the named port is reached, the collector is not (any uid but sluice's).
    for uid in [None, Some("4243")] {
        let got = pod.probe(uid, "tcp", "127.0.0.1", "3128");
        assert!(
            got.starts_with("named "),
            "named loopback port as {uid:?}: {got}"
        );
        let got = pod.probe(uid, "tcp", "127.0.0.1", "4318");
        assert!(
            got == "reset" || got == "refused" || got == "blocked",
            "loopback collector as {uid:?}: {got}"
        );
    }
    assert!(
        pod.probe(Some(PROXY_UID), "tcp", "127.0.0.1", "4318")
            .starts_with("collector "),
        "sluice's uid reaches a loopback service"
    );
    // sluice's own uid is neither redirected nor filtered: its upstream connections reach the
    // origin, not itself.
    assert_eq!(pod.probe(Some(PROXY_UID), "tcp", &v4, "443"), "origin -");
    assert_eq!(pod.probe(Some(PROXY_UID), "tcp", &v6, "443"), "origin -");
    assert_eq!(pod.probe(Some(PROXY_UID), "udp", &v4, "9999"), "origin");

    // Applying again replaces the fence (one table, not two).
    let again = Command::new("ip")
        .args(["netns", "exec", &app])
        .arg(sluice_e2e::sluice_bin())
        .args([
            "netfence",
            "apply",
            "--transparent-port",
            TRANSPARENT_PORT,
            "--dns-port",
            DNS_PORT,
            "--proxy-uid",
            PROXY_UID,
        ])
        .status()
        .unwrap();
    assert!(again.success());
    let listed = sh(&["ip", "netns", "exec", &app, "nft", "list", "ruleset"]);
    assert_eq!(
        listed.matches("table inet sluice_fence").count(),
        1,
        "{listed}"
    );
}

#[test]
fn netfence_print_refuses_a_fence_that_root_would_bypass() {
    let out = Command::new(sluice_e2e::sluice_bin())
        .args([
            "netfence",
            "print",
            "--transparent-port",
            "15001",
            "--dns-port",
            "15053",
            "--proxy-uid",
            "0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must not be 0"));
}
