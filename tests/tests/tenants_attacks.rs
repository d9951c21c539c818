//! Adversarial end-to-end tests of gateway tenants (`sluice run --tenants FILE`): a tenant,
//! or a client that is no tenant, trying to get more than it was given — another tenant's
//! secret or pooled upstream connection, another tenant's identity mid-connection, ambiguous
//! or odd proxy credentials, the whole gateway's connection slots, a connection a reload
//! should have revoked. Real sluice, real curl, Python and raw sockets, local origins only.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::gateway::{
    self, ALPHA, BETA, allow_ports, assert_never_logged, base64, basic, connect_from, curl, get,
    read_response, status_line, tunnel_from, write_secrets,
};
use sluice_e2e::origin::{HttpOrigin, OriginProcess, make_cert};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python};
use sluice_e2e::reload::{closed_within, read_head, replace};

const GAMMA_PASSWORD: &str = "gamma-pw-8c1f0e77";
const DELTA_PASSWORD: &str = "delta-pw-3b9d2a64";

/// alpha by address (127.0.0.2), gamma and delta by proxy credentials; all allowed to each
/// of `ports` at L4.
fn mixed_tenants(dir: &TempDir, ports: &[u16]) -> PathBuf {
    dir.write("open.yaml", &allow_ports(ports));
    dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  \
               - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [open.yaml]\n  \
               - name: gamma\n    proxy_auth:\n      username: gamma\n      password_env: GAMMA_PW\n    policy: [open.yaml]\n  \
               - name: delta\n    proxy_auth:\n      username: delta\n      password_env: DELTA_PW\n    policy: [open.yaml]\n"
        ),
    )
}

fn passwords() -> [(&'static str, &'static str); 2] {
    [("GAMMA_PW", GAMMA_PASSWORD), ("DELTA_PW", DELTA_PASSWORD)]
}

/// An absolute-form GET to 127.0.0.1:`port``path`, with `Proxy-Authorization: auth` when given.
fn forward(port: u16, path: &str, auth: Option<&str>) -> String {
    let auth = auth.map_or(String::new(), |a| format!("Proxy-Authorization: {a}\r\n"));
    format!("GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n")
}

/// Sends `bytes` on a new connection from 127.0.0.1 and reads one response.
fn exchange(gw: &Sluice, bytes: &[u8]) -> (String, String) {
    let mut s = connect_from(gw, [127, 0, 0, 1]);
    s.write_all(bytes).unwrap();
    read_response(&mut s)
}

// === Connection slots: a client that sends nothing holds no tenant's share ===

/// Reads, within `wait`, whatever `s` answers (empty when nothing came).
fn answer_within(s: &mut TcpStream, wait: Duration) -> String {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_client_that_never_sends_credentials_cannot_take_every_tenants_connection_slots() {
    let dir = TempDir::new("tatk-starve");
    let origin = HttpOrigin::start();
    let tenants = mixed_tenants(&dir, &[origin.port()]);
    let gw = gateway::start(
        &tenants,
        &[
            "--max-connections",
            "12",
            "--max-connections-per-caller",
            "4",
            "--head-timeout",
            "60s",
        ],
        &passwords(),
    );
    // A client at an address no tenant claims opens the gateway's every connection and sends
    // nothing: it may wait for its first head (its credentials), but only with one caller's
    // share of the slots.
    let idle: Vec<TcpStream> = (0..12).map(|_| connect_from(&gw, [127, 0, 0, 9])).collect();
    thread::sleep(Duration::from_millis(300));
    let refused = idle
        .into_iter()
        .map(|mut s| answer_within(&mut s, Duration::from_millis(200)))
        .filter(|a| a.starts_with("HTTP/1.1 429"))
        .count();
    assert_eq!(
        refused, 8,
        "connections past one caller's share were not refused"
    );

    let right = format!("gamma:{GAMMA_PASSWORD}");
    let ok = get(&gw, None, &["--proxy-user", &right], origin.port());
    assert_eq!(ok.status, 200, "gamma was starved: {ok:?}\n{}", gw.stderr());
    let ok = get(&gw, Some(ALPHA), &[], origin.port());
    assert_eq!(ok.status, 200, "alpha was starved: {ok:?}");
    assert_events_valid(&gw);
}

#[test]
fn failed_credentials_do_not_drain_a_bucket_other_clients_share() {
    let dir = TempDir::new("tatk-badcreds");
    let origin = HttpOrigin::start();
    let tenants = mixed_tenants(&dir, &[origin.port()]);
    let gw = gateway::start(
        &tenants,
        &["--max-new-connections-per-caller-per-sec", "3"],
        &passwords(),
    );
    let port = origin.port();
    // A client at 127.0.0.9 guesses passwords as fast as it can.
    for i in 0..6 {
        let mut s = connect_from(&gw, [127, 0, 0, 9]);
        let guess = basic("gamma", &format!("guess-{i}"));
        s.write_all(forward(port, "/", Some(&guess)).as_bytes())
            .unwrap();
        let _ = answer_within(&mut s, Duration::from_millis(500));
    }
    // Another client, elsewhere, whose first request has no credentials (the challenge
    // round of most clients), is still asked for them, not refused as a flood.
    let mut s = connect_from(&gw, [127, 0, 0, 1]);
    s.write_all(forward(port, "/", None).as_bytes()).unwrap();
    let (head, body) = read_response(&mut s);
    assert_eq!(status_line(&head), 407, "{head}{body}");
    assert_eq!(origin.received().len(), 0);
}

// === Identification ===

#[test]
fn two_proxy_authorization_headers_are_refused_whichever_comes_first() {
    let dir = TempDir::new("tatk-dup");
    let origin = HttpOrigin::start();
    let tenants = mixed_tenants(&dir, &[origin.port()]);
    let gw = gateway::start(&tenants, &[], &passwords());
    let port = origin.port();
    let gamma = basic("gamma", GAMMA_PASSWORD);
    let delta = basic("delta", DELTA_PASSWORD);
    for (first, second) in [
        (gamma.as_str(), delta.as_str()),
        (delta.as_str(), gamma.as_str()),
        ("Basic Zm9vOmJhcg==", gamma.as_str()),
        (gamma.as_str(), gamma.as_str()),
    ] {
        for head in [
            format!(
                "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {first}\r\nProxy-Authorization: {second}\r\n\r\n"
            ),
            format!(
                "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {first}\r\nproxy-authorization: {second}\r\n\r\n"
            ),
        ] {
            let (head, body) = exchange(&gw, head.as_bytes());
            assert_eq!(status_line(&head), 407, "{first} + {second}: {head}{body}");
        }
    }
    // The same, from an address that is a tenant's by itself (alpha's).
    let mut s = connect_from(&gw, [127, 0, 0, 2]);
    s.write_all(
        format!(
            "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {gamma}\r\nProxy-Authorization: {delta}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let (head, body) = read_response(&mut s);
    assert_eq!(status_line(&head), 407, "{head}{body}");
    assert_eq!(origin.received().len(), 0, "{:?}", origin.received());
    assert_events_valid(&gw);
}

#[test]
fn odd_spellings_of_credentials_identify_nobody_and_never_reach_a_log() {
    let dir = TempDir::new("tatk-odd");
    let origin = HttpOrigin::start();
    let tenants = mixed_tenants(&dir, &[origin.port()]);
    let gw = gateway::start(&tenants, &[], &passwords());
    let port = origin.port();
    let b64 = |s: &[u8]| base64(s);
    let right = format!("gamma:{GAMMA_PASSWORD}");
    let near: Vec<(String, Vec<u8>)> = vec![
        (
            "the username's case".into(),
            format!(
                "Basic {}",
                b64(format!("Gamma:{GAMMA_PASSWORD}").as_bytes())
            )
            .into_bytes(),
        ),
        (
            "a space after the username".into(),
            format!(
                "Basic {}",
                b64(format!("gamma :{GAMMA_PASSWORD}").as_bytes())
            )
            .into_bytes(),
        ),
        (
            "a space after the password".into(),
            format!("Basic {}", b64(format!("{right} ").as_bytes())).into_bytes(),
        ),
        (
            "a NUL after the password".into(),
            format!("Basic {}", b64(format!("{right}\0").as_bytes())).into_bytes(),
        ),
        (
            "a non-UTF-8 username".into(),
            format!(
                "Basic {}",
                b64(&[b"\xffgamma:", GAMMA_PASSWORD.as_bytes()].concat())
            )
            .into_bytes(),
        ),
        (
            "no padding".into(),
            format!("Basic {}", b64(right.as_bytes()).trim_end_matches('=')).into_bytes(),
        ),
        (
            "a trailing token".into(),
            format!("Basic {} x", b64(right.as_bytes())).into_bytes(),
        ),
        (
            "a no-break space after the scheme".into(),
            [&b"Basic\xa0"[..], b64(right.as_bytes()).as_bytes()].concat(),
        ),
        ("obs-text".into(), b"Basic \xff\xfe\xfd\xfc".to_vec()),
        (
            "the password alone".into(),
            format!("Basic {}", b64(GAMMA_PASSWORD.as_bytes())).into_bytes(),
        ),
        (
            "the password in clear".into(),
            format!("Basic {right}").into_bytes(),
        ),
        (
            "another scheme".into(),
            format!("Bearer {GAMMA_PASSWORD}").into_bytes(),
        ),
        (
            "a long value".into(),
            format!("Basic {}", "QUFB".repeat(1500)).into_bytes(),
        ),
    ];
    for (what, value) in &near {
        let mut req = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: ").into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n\r\n");
        let (head, body) = exchange(&gw, &req);
        assert_eq!(status_line(&head), 407, "{what}: {head}{body}");
        assert!(!body.contains(GAMMA_PASSWORD), "{what}: {body}");
    }
    // A head past the limit is refused as such, and sluice goes on serving.
    let huge = format!("Basic {}", "QUFB".repeat(4000));
    let (head, _) = exchange(&gw, forward(port, "/", Some(&huge)).as_bytes());
    assert_eq!(status_line(&head), 431, "{head}");
    // What RFC 7617 allows: any case of the scheme, more whitespace.
    for value in [
        format!("basic {}", b64(right.as_bytes())),
        format!("BASIC\t{}", b64(right.as_bytes())),
        format!("Basic   {}  ", b64(right.as_bytes())),
    ] {
        let (head, body) = exchange(&gw, forward(port, "/", Some(&value)).as_bytes());
        assert_eq!(status_line(&head), 200, "{value:?}: {head}{body}");
    }
    assert_eq!(origin.received().len(), 3);
    for value in [GAMMA_PASSWORD.to_string(), b64(right.as_bytes())] {
        assert_never_logged(&gw, &value, "gamma's proxy password");
    }
    assert_events_valid(&gw);
}

#[test]
fn an_ipv4_mapped_source_is_the_ipv4_address_it_maps() {
    let dir = TempDir::new("tatk-mapped");
    let origin = HttpOrigin::start();
    dir.write("open.yaml", &allow_ports(&[origin.port()]));
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  - name: alpha\n    sources: [\"::ffff:127.0.0.2\"]\n    policy: [open.yaml]\n",
    );
    let gw = gateway::start(&tenants, &[], &[]);
    let a = get(&gw, Some(ALPHA), &[], origin.port());
    assert_eq!(a.status, 200, "{a:?}\n{}", gw.stderr());
    let b = get(&gw, Some(BETA), &[], origin.port());
    assert_eq!(b.status, 403, "{b:?}");

    // Written either way, one address is one address: two tenants without credentials may
    // not both claim it.
    let bad = TempDir::new("tatk-mapped-overlap");
    bad.write("open.yaml", &allow_ports(&[origin.port()]));
    let file = bad.write(
        "tenants.yaml",
        "tenants:\n  - name: alpha\n    sources: [\"127.0.0.0/24\"]\n    policy: [open.yaml]\n  - name: beta\n    sources: [\"::ffff:127.0.0.3/128\"]\n    policy: [open.yaml]\n",
    );
    let (code, err) = gateway::exit_of(
        &[
            "run",
            "--tenants",
            file.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("tenants[1].sources") && err.contains("overlaps"),
        "{err}"
    );
}
