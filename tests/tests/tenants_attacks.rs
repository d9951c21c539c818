//! Adversarial end-to-end tests of gateway tenants (`sluice run --tenants FILE`): a client
//! that is no tenant, or a tenant, trying to get more than it was given: the whole gateway's
//! connection slots, another tenant's identity through ambiguous or odd proxy credentials or
//! an IPv4-mapped address, the transparent listener, and a proxy password surfacing anywhere
//! (audit, stderr, metrics, OTLP). Tunnels and reloads: `tenants_tunnels.rs`. Real sluice,
//! real curl, Python and raw sockets, local origins only.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::gateway::{
    self, ALPHA, BETA, DELTA_PASSWORD, GAMMA_PASSWORD, allow_ports, assert_never_logged, base64,
    basic, connect_from, exchange, forward, get, mixed_gateway, mixed_tenants, passwords,
    read_response, status_line, tunnel_from,
};
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{TempDir, assert_events_valid};

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

/// Keeps `share` connections from `source` open that never send a byte, opening a new one
/// whenever sluice closes one, until `stop`; returns how many it opened.
fn hold_silent(
    gw: std::net::SocketAddr,
    source: [u8; 4],
    share: usize,
    stop: &std::sync::atomic::AtomicBool,
) -> usize {
    let open = || {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&std::net::SocketAddr::from((source, 0)).into())
            .unwrap();
        s.connect_timeout(&gw.into(), Duration::from_secs(5))
            .ok()
            .map(|()| {
                let s: TcpStream = s.into();
                s.set_nonblocking(true).unwrap();
                s
            })
    };
    let mut held: Vec<TcpStream> = Vec::new();
    let mut opened = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        // A connection sluice answered or closed is replaced.
        held.retain(|s| {
            let mut b = [0u8; 1];
            matches!(s.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        });
        while held.len() < share {
            match open() {
                Some(s) => {
                    held.push(s);
                    opened += 1;
                }
                None => break,
            }
        }
        thread::sleep(Duration::from_millis(5));
    }
    opened
}

/// Silent clients from several addresses, each within its address's share, together held
/// every connection the gateway has: a tenant with valid credentials was answered `503
/// too_many_connections` (44 of 95 tries in the finding; 40 of 40 here). Connections still waiting for
/// their credentials are capped all addresses together, so a tenant gets through every time.
#[test]
fn silent_clients_from_several_addresses_cannot_starve_a_tenant_with_credentials() {
    let (_dir, origin, gw) = mixed_gateway(
        "tatk-starve-many",
        &[
            "--max-connections",
            "16",
            "--max-connections-per-caller",
            "4",
            "--head-timeout",
            "60s",
        ],
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    let addr = gw.addr();
    let (failed, tries) = thread::scope(|scope| {
        let holders: Vec<_> = (2..=5u8)
            .map(|last| {
                let stop = &stop;
                scope.spawn(move || hold_silent(addr, [127, 0, 0, last], 4, stop))
            })
            .collect();
        // Every address holds its share before the tenant comes.
        thread::sleep(Duration::from_millis(500));
        let auth = basic("gamma", GAMMA_PASSWORD);
        let mut failed = Vec::new();
        let tries = 95;
        for _ in 0..tries {
            let mut s = connect_from(&gw, [127, 0, 0, 1]);
            s.write_all(forward(origin.port(), "/", Some(&auth)).as_bytes())
                .unwrap();
            let (head, body) = read_response(&mut s);
            if status_line(&head) != 200 {
                failed.push(format!("{head}{body}"));
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let opened: usize = holders.into_iter().map(|h| h.join().unwrap()).sum();
        eprintln!("silent connections opened: {opened}");
        (failed, tries)
    });
    assert!(
        failed.is_empty(),
        "the tenant was refused {} of {tries} tries: {:?}\n{}",
        failed.len(),
        failed.first(),
        gw.stderr()
    );
    assert_events_valid(&gw);
}

#[test]
fn the_doctor_host_answers_tenants_only_and_is_audited() {
    let dir = TempDir::new("tatk-doctor");
    let origin = HttpOrigin::start();
    let tenants = mixed_tenants(&dir, &[origin.port()]);
    let gw = gateway::start(&tenants, &[], &passwords());
    let doctor =
        "CONNECT doctor.sluice.internal:443 HTTP/1.1\r\nHost: doctor.sluice.internal:443\r\n\r\n";
    // A client no tenant claims: refused as for any host, before any `200` (it could hold
    // the gateway's slots unaudited before).
    let mut nobody = connect_from(&gw, [127, 0, 0, 9]);
    nobody.write_all(doctor.as_bytes()).unwrap();
    let (head, _) = read_response(&mut nobody);
    assert_eq!(status_line(&head), 407, "{head}");
    // A tenant: answered by sluice itself, and audited; its request sent with the CONNECT,
    // before the `200` (that hung: the doctor waited for a first byte it had already read).
    let mut alpha = connect_from(&gw, [127, 0, 0, 2]);
    alpha.write_all(doctor.as_bytes()).unwrap();
    alpha
        .write_all(b"GET / HTTP/1.1\r\nHost: doctor.sluice.internal\r\n\r\n")
        .unwrap();
    let (head, _) = read_response(&mut alpha);
    assert_eq!(status_line(&head), 200, "{head}");
    let (head, body) = read_response(&mut alpha);
    assert_eq!(status_line(&head), 200, "{head}");
    assert!(body.contains("reached through sluice"), "{body}");
    let open = gw.wait_event("the doctor tunnel's open", |e| {
        e["class_uid"] == 4001 && e.to_string().contains("answered by sluice itself")
    });
    assert_eq!(open["actor"]["user"]["name"], "alpha", "{open:#}");
    // In plain HTTP (absolute form): refused to nobody, answered to a tenant, audited.
    let plain =
        b"GET http://doctor.sluice.internal/ HTTP/1.1\r\nHost: doctor.sluice.internal\r\n\r\n";
    let mut nobody = connect_from(&gw, [127, 0, 0, 9]);
    nobody.write_all(plain).unwrap();
    let (head, _) = read_response(&mut nobody);
    assert_eq!(status_line(&head), 407, "{head}");
    let mut alpha = connect_from(&gw, [127, 0, 0, 2]);
    alpha.write_all(plain).unwrap();
    let (head, body) = read_response(&mut alpha);
    assert_eq!(status_line(&head), 200, "{head}");
    assert!(body.contains("reached through sluice"), "{body}");
    gw.wait_event("the plain doctor request's record", |e| {
        e["class_uid"] == 4002 && e.to_string().contains("answered by sluice itself")
    });
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

/// A password guesser: after 20 wrong passwords for one username from one address, its
/// next attempts at that username are refused unchecked (`429 too_many_failed_logins`,
/// `Retry-After`), the right password included (so the refusals say nothing about a guess),
/// and audited; another tenant behind the same address, and a client at another address,
/// are not affected; nor is a right login followed by wrong ones counted twice.
#[test]
fn a_password_guesser_is_throttled_and_learns_nothing_more() {
    let (_dir, origin, gw) = mixed_gateway("tatk-guesser", &[]);
    let port = origin.port();
    let as_user = |source: [u8; 4], user: &str, password: &str| {
        let mut s = connect_from(&gw, source);
        let auth = basic(user, password);
        s.write_all(forward(port, "/", Some(&auth)).as_bytes())
            .unwrap();
        read_response(&mut s)
    };
    let attempt = |source: [u8; 4], password: &str| as_user(source, "gamma", password);
    let guesser = [127, 0, 0, 23];
    for i in 0..20 {
        let (head, body) = attempt(guesser, &format!("guess-{i}"));
        assert_eq!(status_line(&head), 407, "guess {i}: {head}{body}");
    }
    for password in ["guess-20", GAMMA_PASSWORD] {
        let (head, body) = attempt(guesser, password);
        assert_eq!(status_line(&head), 429, "{password}: {head}{body}");
        let retry: u64 = head
            .lines()
            .find_map(|l| l.strip_prefix("Retry-After: "))
            .unwrap_or_else(|| panic!("no Retry-After: {head}"))
            .trim()
            .parse()
            .unwrap();
        assert!((1..=3).contains(&retry), "{head}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"], "too_many_failed_logins", "{body}");
        assert_eq!(body["stage"], "tenant", "{body}");
        assert_eq!(body["retry_after"], retry, "{body}");
        assert!(!head.contains("Proxy-Authenticate"), "{head}");
    }
    // Delta, behind the guesser's address: its own count, its login passes.
    let (head, body) = as_user(guesser, "delta", DELTA_PASSWORD);
    assert_eq!(status_line(&head), 200, "{head}{body}");
    // Another address: its wrong guess is a plain 407, the right password passes.
    let (head, _) = attempt([127, 0, 0, 24], "guess-x");
    assert_eq!(status_line(&head), 407, "{head}");
    let (head, body) = attempt([127, 0, 0, 24], GAMMA_PASSWORD);
    assert_eq!(status_line(&head), 200, "{head}{body}");
    // The guesser earns one attempt back within a refill: the right password then passes.
    thread::sleep(Duration::from_millis(3100));
    let (head, body) = attempt(guesser, GAMMA_PASSWORD);
    assert_eq!(status_line(&head), 200, "{head}{body}");
    assert_eq!(origin.received().len(), 3);
    gw.wait_event("the throttled attempt", |e| {
        e["status_code"] == "429"
            && e["status_detail"]
                .as_str()
                .is_some_and(|d| d.contains("too many wrong proxy credentials"))
    });
    assert_never_logged(&gw, GAMMA_PASSWORD, "gamma's proxy password");
    assert_events_valid(&gw);
}

/// A client at an address of a tenant known by address, sending another tenant's
/// credentials, is that other tenant's from its first head on: it is not counted against
/// the address tenant's limits (nor refused in its name) before its credentials are read.
#[test]
fn credentials_from_another_tenants_address_are_not_charged_to_that_tenant() {
    let dir = TempDir::new("tatk-charged");
    let origin = HttpOrigin::start();
    dir.write("open.yaml", &allow_ports(&[origin.port()]));
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  - name: ci\n    sources: [127.0.0.0/24]\n    policy: [open.yaml]\n  \
           - name: gamma\n    proxy_auth: {username: gamma, password_env: GAMMA_PW}\n    policy: [open.yaml]\n",
    );
    let gw = gateway::start(
        &tenants,
        &["--max-connections-per-caller", "1"],
        &passwords(),
    );
    let port = origin.port();
    // ci holds its one connection.
    let (_held, head) = tunnel_from(&gw, [127, 0, 0, 7], port);
    assert_eq!(status_line(&head), 200, "{head}\n{}", gw.stderr());
    // gamma, from an address in ci's range, with its credentials: its own share.
    let mut s = connect_from(&gw, [127, 0, 0, 8]);
    let auth = basic("gamma", GAMMA_PASSWORD);
    write!(
        s,
        "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {auth}\r\n\r\n"
    )
    .unwrap();
    let (head, body) = read_response(&mut s);
    assert_eq!(status_line(&head), 200, "{head}{body}\n{}", gw.stderr());
    // And ci is still at its limit: its next connection is refused, naming only itself.
    let (_s, answer) = tunnel_from(&gw, [127, 0, 0, 9], port);
    assert_eq!(status_line(&answer), 429, "{answer}");
    assert!(!answer.contains("gamma"), "{answer}");
}

// === Identification ===

#[test]
fn two_proxy_authorization_headers_are_refused_whichever_comes_first() {
    let (_dir, origin, gw) = mixed_gateway("tatk-dup", &[]);
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
    let (_dir, origin, gw) = mixed_gateway("tatk-odd", &[]);
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

// === /ca.pem ===

#[test]
fn the_ca_request_carries_nothing_after_it() {
    let dir = TempDir::new("tatk-ca");
    let origin = HttpOrigin::start();
    let tenants = mixed_tenants(&dir, &[origin.port()]);
    let ca_dir = dir.path().join("ca");
    let gw = gateway::start(
        &tenants,
        &["--ca-dir", ca_dir.to_str().unwrap()],
        &passwords(),
    );
    let port = origin.port();
    // A client that is no tenant asks for the CA, and pipelines a forward request (and a
    // CONNECT) behind it: only the CA comes back.
    let mut s = connect_from(&gw, [127, 0, 0, 9]);
    let batch = format!(
        "GET /ca.pem HTTP/1.1\r\nHost: x\r\n\r\n{}CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n",
        forward(port, "/smuggled", None)
    );
    s.write_all(batch.as_bytes()).unwrap();
    let mut all = String::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read_to_string(&mut all);
    assert!(all.starts_with("HTTP/1.1 200 "), "{all}");
    assert_eq!(all.matches("HTTP/1.1").count(), 1, "{all}");
    assert!(all.contains("BEGIN CERTIFICATE"), "{all}");
    assert!(origin.received().is_empty(), "{:?}", origin.received());
    // Only that exact path is the CA: anything else from a non-tenant is refused.
    for target in ["/ca.pem?x=1", "/ca.pem/", "//ca.pem", "/CA.PEM"] {
        let (head, body) = exchange(
            &gw,
            format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        );
        assert_ne!(status_line(&head), 200, "{target}: {head}{body}");
        assert!(!body.contains("BEGIN CERTIFICATE"), "{target}");
    }
}

// === The transparent listener: tenants by address only ===

/// A network namespace of its own (loopback only) where local connections from any 127/8
/// address but 127.0.0.1 to 127.0.0.1:`origin` are redirected to sluice's transparent
/// listener at 127.0.0.1:`listener`; the processes started in it; removed on drop.
struct Redirected {
    ns: String,
    children: Vec<std::process::Child>,
}

impl Redirected {
    fn new(origin: u16, listener: u16) -> Redirected {
        let ns = format!("sl-tatk-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        sluice_e2e::netns::sh(&["ip", "netns", "add", &ns]);
        let r = Redirected {
            ns,
            children: Vec::new(),
        };
        sluice_e2e::netns::sh(&["ip", "-n", &r.ns, "link", "set", "lo", "up"]);
        let rules = format!(
            "table ip tatk {{\n chain out {{\n  type nat hook output priority -100;\n  ip daddr 127.0.0.1 ip saddr != 127.0.0.1 tcp dport {origin} redirect to :{listener};\n }}\n}}\n"
        );
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &r.ns, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        nft.stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        assert!(nft.wait().unwrap().success(), "nft refused the redirect");
        r
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns, program]);
        cmd
    }

    /// curl (no proxy) from `source` to `url` with `extra` arguments: (status, body).
    fn curl(&self, source: &str, extra: &[&str], url: &str) -> (String, String) {
        let out = self
            .command("curl")
            .args(["-s", "--max-time", "10", "--interface", source])
            .args(["-w", "\n%{http_code}"])
            .args(extra)
            .arg(url)
            .env_remove("http_proxy")
            .env_remove("HTTP_PROXY")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        (status.trim().to_string(), body.to_string())
    }
}

impl Drop for Redirected {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

#[test]
fn a_transparent_listener_knows_tenants_by_address_and_takes_no_credentials() {
    if !sluice_e2e::proxy::privileged("tenants transparent") {
        return;
    }
    let dir = TempDir::new("tatk-transparent");
    // Ports of a namespace of the test's own: free.
    let (origin, listener) = (18081, 15001);
    let mut pod = Redirected::new(origin, listener);
    std::fs::write(dir.path().join("hello.txt"), "hello from origin\n").unwrap();
    let origin_log = dir.path().join("origin.log");
    pod.children.push(
        pod.command("python3")
            .args([
                "-m",
                "http.server",
                &origin.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--directory")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&origin_log).unwrap())
            .spawn()
            .unwrap(),
    );
    dir.write("open.yaml", &allow_ports(&[origin]));
    let tenants = dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  \
               - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [open.yaml]\n  \
               - name: epsilon\n    sources: [\"127.0.0.5\"]\n    proxy_auth:\n      username: eps\n      password_env: EPS_PW\n    policy: [open.yaml]\n  \
               - name: gamma\n    proxy_auth:\n      username: gamma\n      password_env: GAMMA_PW\n    policy: [open.yaml]\n"
        ),
    );
    let audit = dir.path().join("audit.jsonl");
    let mut sluice = pod.command(sluice_e2e::sluice_bin().to_str().unwrap());
    sluice
        .arg("run")
        .arg("--tenants")
        .arg(&tenants)
        .args(["--listen", "127.0.0.1:3128"])
        .args(["--transparent-listen", &format!("127.0.0.1:{listener}")])
        .arg("--allow-loopback-upstream")
        .arg("--audit-log")
        .arg(&audit)
        .env("GAMMA_PW", GAMMA_PASSWORD)
        .env("EPS_PW", "eps-pw-2f6b")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = sluice.spawn().unwrap();
    let lines = sluice_e2e::reload::lines_of(child.stderr.take().unwrap());
    pod.children.push(child);
    let mut stderr = String::new();
    while stderr.matches("listening on").count() < 2 {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("sluice did not start:\n{stderr}"));
        stderr.push_str(&line);
        stderr.push('\n');
    }
    let url = format!("http://127.0.0.1:{origin}/hello.txt");
    // The origin is up (from 127.0.0.1, not redirected).
    let deadline = Instant::now() + Duration::from_secs(10);
    while pod.curl("127.0.0.1", &[], &url).0 != "200" {
        assert!(Instant::now() < deadline, "the origin did not start");
        thread::sleep(Duration::from_millis(100));
    }
    let served = || {
        std::fs::read_to_string(&origin_log)
            .unwrap_or_default()
            .matches("GET /hello.txt")
            .count()
    };
    let before = served();

    // alpha, by its address, through the transparent listener.
    let (status, body) = pod.curl(ALPHA, &[], &url);
    assert_eq!(status, "200", "alpha: {body}");
    assert_eq!(body, "hello from origin\n");
    // No address of a tenant without credentials: closed, whatever credentials it sends
    // (a transparent client has no proxy to send them to).
    let gamma = format!("Proxy-Authorization: {}", basic("gamma", GAMMA_PASSWORD));
    let eps = format!("Proxy-Authorization: {}", basic("eps", "eps-pw-2f6b"));
    for (source, extra) in [
        ("127.0.0.9", vec![]),
        ("127.0.0.9", vec!["-H", gamma.as_str()]),
        ("127.0.0.5", vec!["-H", eps.as_str()]),
    ] {
        let (status, body) = pod.curl(source, &extra, &url);
        assert_eq!(status, "000", "{source} {extra:?}: {body}");
    }
    assert_eq!(served(), before + 1, "a refused client reached the origin");

    // Audited: alpha's connection as alpha's; the others denied, as nobody's.
    let denied = |events: &[Value]| {
        events
            .iter()
            .filter(|e| e["action_id"] == 2 && e["actor"].get("user").is_none())
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let events = loop {
        let events: Vec<Value> = std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if denied(&events) >= 3 || Instant::now() > deadline {
            break events;
        }
        thread::sleep(Duration::from_millis(100));
    };
    let alpha: Vec<&Value> = events
        .iter()
        .filter(|e| e["actor"]["user"]["name"] == "alpha")
        .collect();
    assert!(!alpha.is_empty(), "{events:#?}");
    assert!(alpha.iter().all(|e| e["action_id"] != 2), "{alpha:#?}");
    assert_eq!(denied(&events), 3, "{events:#?}");
    // Each says why: no tenant (not a policy that allows no name, which nobody has).
    for e in events.iter().filter(|e| e["action_id"] == 2) {
        let reason = e["status_detail"].as_str().unwrap_or_default();
        assert!(reason.contains("tenant"), "{e:#}");
        assert_eq!(e["firewall_rule"]["type"], "identity", "{e:#}");
    }
    let text = std::fs::read_to_string(&audit).unwrap_or_default();
    for secret in [GAMMA_PASSWORD, "eps-pw-2f6b"] {
        assert!(!text.contains(secret), "the audit log holds a password");
    }
}

// === Where a proxy password could surface: the audit log, stderr, metrics, OTLP ===

/// An OTLP/HTTP sink on loopback keeping every byte of every body POSTed to it.
fn otlp_sink() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let shared = std::sync::Arc::clone(&got);
    let port = sluice_e2e::origin::serve_posts(move |_, body| {
        shared.lock().unwrap().extend_from_slice(&body);
    });
    (port, got)
}

#[test]
fn a_proxy_password_reaches_no_log_metric_or_collector_even_in_a_url() {
    let dir = TempDir::new("tatk-sweep");
    let origin = HttpOrigin::start();
    let port = origin.port();
    let tenants = mixed_tenants(&dir, &[port]);
    let (otlp, received) = otlp_sink();
    let mut gw = gateway::start(
        &tenants,
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--otlp-endpoint",
            &format!("http://127.0.0.1:{otlp}"),
        ],
        &passwords(),
    );
    let right = format!("gamma:{GAMMA_PASSWORD}");
    // gamma (carelessly) puts its own password and delta's in a URL; another client guesses
    // with delta's password under gamma's name; a CONNECT carries them too.
    let path = format!("/v1/{GAMMA_PASSWORD}/{DELTA_PASSWORD}");
    let url = format!("http://127.0.0.1:{port}{path}");
    let ok = gateway::curl(&gw, None, &["--proxy-user", &right], &url);
    assert_eq!(ok.status, 200, "{ok:?}\n{}", gw.stderr());
    let no = get(
        &gw,
        None,
        &["--proxy-user", &format!("gamma:{DELTA_PASSWORD}")],
        port,
    );
    assert_eq!(no.status, 407, "{no:?}");
    let no = gateway::curl(&gw, Some(ALPHA), &[], &format!("http://127.0.0.1:9{path}"));
    assert_eq!(no.status, 403, "{no:?}");
    let (head, _) = exchange(
        &gw,
        format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {}\r\n\r\n",
            basic("delta", GAMMA_PASSWORD)
        )
        .as_bytes(),
    );
    assert_eq!(status_line(&head), 407, "{head}");
    gw.wait_event("the refused CONNECT", |e| e["status_code"] == "407");

    let metrics = sluice_e2e::scrape::get(sluice_e2e::scrape::metrics_addr(&gw), "/metrics").1;
    assert!(metrics.contains("tenant:gamma"), "{metrics}");
    // Stopped: every record flushed to the collector.
    gw.stop();
    let otlp_bytes = received.lock().unwrap().clone();
    assert!(
        otlp_bytes.windows(b"tenant".len()).any(|w| w == b"tenant"),
        "nothing of the tenants reached the collector"
    );
    let audit = gateway::audit_text(&gw);
    assert!(audit.contains("[redacted:proxy password]"), "{audit}");
    for value in [
        GAMMA_PASSWORD.to_string(),
        DELTA_PASSWORD.to_string(),
        base64(right.as_bytes()),
        base64(format!("gamma:{DELTA_PASSWORD}").as_bytes()),
        base64(format!("delta:{GAMMA_PASSWORD}").as_bytes()),
    ] {
        assert!(!audit.contains(&value), "the audit log holds {value}");
        assert!(!gw.stderr().contains(&value), "stderr holds {value}");
        assert!(!metrics.contains(&value), "the metrics hold {value}");
        assert!(
            !otlp_bytes
                .windows(value.len())
                .any(|w| w == value.as_bytes()),
            "the collector got {value}"
        );
    }
}
