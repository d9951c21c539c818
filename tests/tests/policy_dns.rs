//! The policy DNS (`sluice run --dns-listen`), asked by a real DNS client (dnspython, over UDP
//! and TCP): names some policy endpoint allows get their vetted addresses, everything else
//! gets REFUSED without being looked up, allowed names that point at loopback or metadata
//! addresses are refused like connections to them would be, and every reply is an OCSF DNS
//! Activity event that validates against the schema copy.
//!
//! Every name here is answered from `--resolve` overrides: nothing is sent to a real resolver.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::package_dir;
use sluice_e2e::proxy::{Sluice, assert_events_valid};

const POLICY: &str = r#"
version: 1
network_policies:
  api:
    name: api
    endpoints:
      - { host: api.example.test, port: 443 }
      - { host: "*.svc.example.test", port: 5432, protocol: tcp }
      - { host: loop.example.test, port: 443 }
      - { host: meta.example.test, port: 443 }
    binaries:
      - { path: /usr/bin/curl }
"#;

/// sluice with the policy DNS on ephemeral loopback ports (IPv4 and IPv6), and those.
fn start() -> (Sluice, SocketAddr, SocketAddr) {
    let sluice = Sluice::start(
        POLICY,
        &[
            "--dns-listen",
            "127.0.0.1:0",
            "--dns-listen",
            "[::1]:0",
            "--resolve",
            "api.example.test=93.184.215.7,2606:2800:21f::7",
            "--resolve",
            "db.svc.example.test=93.184.215.8",
            "--resolve",
            "loop.example.test=127.0.0.1",
            "--resolve",
            "meta.example.test=169.254.169.254",
            "--resolve",
            "elsewhere.example.org=93.184.215.9",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let dns: Vec<SocketAddr> = sluice
            .stderr()
            .lines()
            .filter_map(|l| {
                l.strip_prefix("sluice: listening on ")
                    .filter(|rest| rest.contains("(policy DNS"))
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|a| a.parse().ok())
            })
            .collect();
        if let [v4, v6] = dns[..] {
            return (sluice, v4, v6);
        }
        assert!(
            Instant::now() < deadline,
            "no policy DNS listener announced:\n{}",
            sluice.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One question through dnspython.
fn ask(dns: SocketAddr, name: &str, rtype: &str, transport: &str) -> Value {
    let out = Command::new("python3")
        .arg(package_dir().join("clients/dns_ask.py"))
        .args([
            &dns.ip().to_string(),
            &dns.port().to_string(),
            name,
            rtype,
            transport,
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "dns_ask.py failed (is dnspython installed? tests/clients/requirements.txt): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: Value = serde_json::from_slice(&out.stdout).expect("dns_ask.py prints JSON");
    assert_eq!(reply["id_matches"], true, "{reply}");
    reply
}

fn dns_events(sluice: &Sluice) -> Vec<Value> {
    sluice
        .events()
        .into_iter()
        .filter(|e| e["class_uid"] == 4003)
        .collect()
}

#[test]
fn allowed_names_are_answered_over_udp_and_tcp_with_their_vetted_addresses() {
    let (sluice, dns, dns6) = start();
    assert!(dns6.is_ipv6());
    for (dns, transport) in [(dns, "udp"), (dns, "tcp"), (dns6, "udp"), (dns6, "tcp")] {
        let a = ask(dns, "api.example.test", "A", transport);
        assert_eq!(a["rcode"], "NOERROR", "{a}");
        assert_eq!(a["answers"], serde_json::json!(["93.184.215.7"]), "{a}");
        assert_eq!(a["ttls"], serde_json::json!([30]), "{a}");
        let aaaa = ask(dns, "API.Example.Test.", "AAAA", transport);
        assert_eq!(aaaa["rcode"], "NOERROR", "{aaaa}");
        assert_eq!(
            aaaa["answers"],
            serde_json::json!(["2606:2800:21f::7"]),
            "{aaaa}"
        );
        // A wildcard pattern of a `protocol: tcp` endpoint counts.
        let db = ask(dns, "db.svc.example.test", "A", transport);
        assert_eq!(db["answers"], serde_json::json!(["93.184.215.8"]), "{db}");
        // Other types of an allowed name: NOERROR, no records.
        let mx = ask(dns, "api.example.test", "MX", transport);
        assert_eq!(mx["rcode"], "NOERROR", "{mx}");
        assert_eq!(mx["answers"], serde_json::json!([]), "{mx}");
    }
    let events = dns_events(&sluice);
    let answered = events
        .iter()
        .find(|e| e["query"]["hostname"] == "api.example.test" && e["query"]["type"] == "A")
        .expect("an event for the answer");
    assert_eq!(answered["rcode_id"], 0);
    assert_eq!(answered["action_id"], 1);
    assert_eq!(answered["answers"][0]["rdata"], "93.184.215.7");
    assert_eq!(answered["firewall_rule"]["name"], "api");
    assert!(
        events
            .iter()
            .any(|e| e["connection_info"]["protocol_name"] == "tcp"),
        "TCP questions are audited as TCP"
    );
    assert_events_valid(&sluice);
}

#[test]
fn names_no_policy_allows_are_refused_and_audited() {
    let (sluice, dns, _) = start();
    for transport in ["udp", "tcp"] {
        for (name, why) in [
            ("elsewhere.example.org", "no policy endpoint allows"),
            ("svc.example.test", "no policy endpoint allows"),
            ("metadata.google.internal", "metadata"),
            ("loop.example.test", "may not dial"),
            ("meta.example.test", "may not dial"),
        ] {
            let r = ask(dns, name, "A", transport);
            assert_eq!(r["rcode"], "REFUSED", "{name} over {transport}: {r}");
            assert_eq!(r["answers"], serde_json::json!([]), "{r}");
            let event = sluice.wait_event(&format!("refusing {name}"), |e| {
                e["class_uid"] == 4003
                    && e["query"]["hostname"] == name
                    && e["connection_info"]["protocol_name"] == transport
            });
            assert_eq!(event["rcode_id"], 5, "{event}");
            assert_eq!(event["action_id"], 2, "{event}");
            assert_eq!(event["disposition_id"], 2, "{event}");
            let detail = event["status_detail"].as_str().unwrap_or_default();
            assert!(detail.contains(why), "{name}: {detail}");
        }
    }
    assert_events_valid(&sluice);
}

#[test]
fn dns_listen_is_refused_by_exec() {
    let out = Command::new(sluice_e2e::sluice_bin())
        .args(["exec", "--dns-listen", "127.0.0.1:0", "--", "true"])
        .output()
        .expect("sluice exec");
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dns-listen is for `sluice run`"));
}
