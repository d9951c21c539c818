//! End-to-end tests that an IPv6 address carrying an IPv4 address is judged by that IPv4
//! address: the SIIT-translated `::ffff:0:a.b.c.d` form, NAT64, 6to4, Teredo, ISATAP and the
//! deprecated IPv4-compatible form of a loopback or metadata address are refused before
//! anything is dialled, as an IP literal after `CONNECT` and as the answer for a declared name
//! (`--resolve`), even under `--allow-loopback-upstream`, which opens only the local loopback
//! interface. The address classes themselves are unit- and property-tested in
//! `resolver/src/embedded.rs`; this file proves the proxy applies them.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use sluice_e2e::ocsf::{action, is_open};
use sluice_e2e::proxy::{Sluice, assert_events_valid, json_body, me, status_of};

/// Each form, with the IPv4 address it carries: loopback 127.0.0.1 and the metadata address
/// 169.254.169.254.
const FORMS: &[(&str, &str)] = &[
    // SIIT "IPv4-translated" (RFC 2765 §2.1), the finding's example.
    ("::ffff:0:7f00:1", "loopback"),
    ("::ffff:0:a9fe:a9fe", "link-local (cloud metadata)"),
    // IPv4-mapped (RFC 4291 §2.5.5.2).
    ("::ffff:a9fe:a9fe", "link-local (cloud metadata)"),
    // IPv4-compatible, deprecated (RFC 4291 §2.5.5.1).
    ("::7f00:1", "loopback"),
    // NAT64 well-known prefix (RFC 6052 §2.1).
    ("64:ff9b::7f00:1", "loopback"),
    // NAT64 local-use prefix (RFC 8215) with the address at the /48 and the /96 position.
    ("64:ff9b:1:7f00:0:1::", "local-use NAT64"),
    ("64:ff9b:1::7f00:1", "local-use NAT64"),
    // 6to4 (RFC 3056 §2).
    ("2002:7f00:1::1", "loopback"),
    // Teredo (RFC 4380 §4): server 192.0.2.1 (documentation), client 127.0.0.1 stored
    // inverted (0x80ff_fffe).
    ("2001:0:c000:201:0:f227:80ff:fffe", "loopback"),
    // ISATAP interface identifier (RFC 5214 §6.1) under a public prefix.
    (
        "2606:4700:1::200:5efe:a9fe:a9fe",
        "link-local (cloud metadata)",
    ),
];

const PORT: u16 = 8080;

fn connect_request(host: &str) -> String {
    format!("CONNECT {host}:{PORT} HTTP/1.1\r\nHost: {host}:{PORT}\r\n\r\n")
}

/// Asserts that `out` is a `403 ssrf_denied` naming the always-blocked range `range` and the
/// refusal kind `kind`.
#[track_caller]
fn assert_refused(out: &str, what: &str, range: &str, kind: &str) {
    assert_eq!(status_of(out), 403, "{what}: {out}");
    let body = json_body(out);
    assert_eq!(body["error"], "ssrf_denied", "{what}: {out}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("always blocked") && reason.contains(range),
        "{what}: the reason should name the always-blocked range `{range}`: {out}"
    );
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(kind),
        "{what}: detail should say `{kind}`: {out}"
    );
}

#[test]
fn ipv6_forms_of_loopback_and_metadata_are_refused_as_literals_and_as_answers() {
    // Two ways in for each form: the IP literal the policy declares, and a declared name that
    // resolves to it. (An `allowed_ips` entry that lists one is an error when the policy
    // loads, judged by the same classifier: `resolver/tests/embedded_forms.rs`.)
    let mut endpoints = String::new();
    let mut args = vec!["--allow-loopback-upstream".to_owned()];
    for (i, (ip, _)) in FORMS.iter().enumerate() {
        endpoints.push_str(&format!("      - {{host: \"{ip}\", port: {PORT}}}\n"));
        endpoints.push_str(&format!("      - {{host: form{i}.test, port: {PORT}}}\n"));
        args.extend(["--resolve".to_owned(), format!("form{i}.test={ip}")]);
    }
    let policy = format!(
        "version: 1\nnetwork_policies:\n  forms:\n    endpoints:\n{endpoints}    binaries:\n      - path: {}\n",
        me()
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sluice = Sluice::start(&policy, &args);
    for (i, (ip, range)) in FORMS.iter().enumerate() {
        let out = sluice.raw(connect_request(&format!("[{ip}]")).as_bytes());
        assert_refused(&out, ip, range, "internal address");
        let name = format!("form{i}.test");
        let out = sluice.raw(connect_request(&name).as_bytes());
        assert_refused(&out, &format!("{name} -> {ip}"), range, "internal address");
    }
    let ssrf = sluice.wait_event("ssrf denial", |e| {
        is_open(e) && e["firewall_rule"]["type"] == "ssrf"
    });
    assert_eq!(action(&ssrf), 2);
    assert_events_valid(&sluice);
}

#[test]
fn a_wildcard_host_never_reaches_a_private_address_through_an_ipv6_form() {
    // Under a wildcard host only public addresses are dialled; the SIIT, NAT64 and 6to4
    // forms of 10.0.0.1 are the private address they carry.
    let forms = ["::ffff:0:a00:1", "64:ff9b::a00:1", "2002:a00:1::1"];
    let mut args = vec!["--allow-loopback-upstream".to_owned()];
    for (i, ip) in forms.iter().enumerate() {
        args.push("--resolve".to_owned());
        args.push(format!("w{i}.wild.test={ip}"));
    }
    let policy = format!(
        "version: 1\nnetwork_policies:\n  wild:\n    endpoints:\n      - {{host: \"*.wild.test\", port: {PORT}}}\n    binaries:\n      - path: {}\n",
        me()
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sluice = Sluice::start(&policy, &args);
    for (i, ip) in forms.iter().enumerate() {
        let out = sluice.raw(connect_request(&format!("w{i}.wild.test")).as_bytes());
        assert_eq!(status_of(&out), 403, "{ip}: {out}");
        let body = json_body(&out);
        assert_eq!(body["error"], "ssrf_denied", "{ip}: {out}");
        let reason = body["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("internal (private 10.0.0.0/8)"),
            "{ip}: {out}"
        );
    }
    assert_events_valid(&sluice);
}
