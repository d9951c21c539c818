//! The gateway as a fleet, one replica at a time, with real clients: one operator CA for
//! every replica (`--ca-cert`, `--ca-key`: leaves that verify under it, its chain served,
//! the key never written anywhere, its files checked, rotation by reload), the client's
//! address from a trusted balancer's PROXY header (`--proxy-protocol-from`, refused from
//! everyone else), and the drain on SIGTERM (`--drain-timeout`). The proxy hop over TLS
//! (`--tls-listen`; tenants by password over it, by client certificate subject or SPIFFE ID)
//! is `fleet_hop.rs`; the pool of replicas behind HAProxy is `gateway_pool.rs`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::fleet::{self, FleetCa};
use sluice_e2e::gateway::{self, ALPHA, curl_via, tenant_of};
use sluice_e2e::origin::{HttpOrigin, HttpsOrigin};
use sluice_e2e::proxy::{Sluice, TempDir};

// === Helpers ===

fn src_ip(e: &Value) -> Option<&str> {
    e["src_endpoint"]["ip"].as_str()
}

/// A PROXY protocol v2 header (PROXY command, TCP over IPv4) from `src`.
fn v2_header(src: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x21, 0x11, 0, 12]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&port.to_be_bytes());
    h.extend_from_slice(&3128u16.to_be_bytes());
    h
}

/// A PROXY protocol v2 LOCAL header (a balancer's own connection, e.g. a health check).
fn v2_local() -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend_from_slice(&[0x20, 0x00, 0, 0]);
    h
}

/// Sends `bytes` from `source` in pieces of `chunk` bytes (a pause between each), then
/// reads one response.
fn send_in_pieces(gw: &Sluice, source: [u8; 4], bytes: &[u8], chunk: usize) -> (String, String) {
    let mut s = gateway::connect_from(gw, source);
    for piece in bytes.chunks(chunk) {
        s.write_all(piece).unwrap();
        thread::sleep(Duration::from_millis(3));
    }
    gateway::read_response(&mut s)
}

/// `GET /ca.pem` sent to the proxy itself: the body.
fn fetch_ca(gw: &Sluice) -> String {
    let answer = gw.raw(b"GET /ca.pem HTTP/1.1\r\nHost: sluice\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// A gateway that terminates TLS with `ca`, its CA files written to `ca_dir`.
fn with_ca(tenants: &Path, ca: &FleetCa, origin_ca: &Path, ca_dir: &Path) -> Sluice {
    let mut flags = ca.flags();
    flags.extend([
        "--upstream-ca".to_string(),
        origin_ca.display().to_string(),
        "--ca-dir".to_string(),
        ca_dir.display().to_string(),
    ]);
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    gateway::start(tenants, &refs, &[])
}

/// A tenants file with `alpha` at 127.0.0.1 allowed (inspected) to the HTTPS origin on
/// `port`.
fn local_tenant(dir: &TempDir, port: u16) -> PathBuf {
    dir.write("alpha.yaml", &gateway::rest_policy(&[("origin", port)]));
    dir.write(
        "tenants.yaml",
        "tenants:\n  - name: alpha\n    sources: [127.0.0.1]\n    policy: [alpha.yaml]\n",
    )
}

// === One CA for every replica ===

#[test]
fn every_replica_issues_leaves_under_the_one_ca_serves_its_chain_and_writes_no_key() {
    let dir = TempDir::new("fleet-ca");
    let ca = FleetCa::new(dir.path(), "fleet");
    let origin = HttpsOrigin::start(dir.path());
    let tenants = local_tenant(&dir, origin.port());
    let chain = std::fs::read_to_string(&ca.chain).unwrap();
    let replicas: Vec<(Sluice, PathBuf)> = (0..2)
        .map(|i| {
            let ca_dir = dir.path().join(format!("ca-{i}"));
            (with_ca(&tenants, &ca, &origin.cert, &ca_dir), ca_dir)
        })
        .collect();
    let url = format!("https://127.0.0.1:{}/", origin.port());
    let root = ca.root.cert.display().to_string();
    for (gw, ca_dir) in &replicas {
        // The chain, the intermediate first, from every replica alike.
        assert_eq!(fetch_ca(gw).trim(), chain.trim());
        assert_eq!(
            std::fs::read_to_string(ca_dir.join("ca.pem"))
                .unwrap()
                .trim(),
            chain.trim()
        );
        // A client that trusts the root alone verifies each replica's leaf (the replica
        // presents the intermediate with it).
        let a = gateway::curl(gw, None, &["--cacert", &root], &url);
        assert_eq!(a.status, 200, "{a:?}\n{}", gw.stderr());
        assert!(a.body.contains("hello over tls"), "{a:?}");
    }
    // Nothing sluice wrote holds the key: not the CA directory, not the audit log, not
    // stderr.
    let body = fleet::key_body(&ca.intermediate.key);
    assert!(body.len() > 40);
    for (gw, ca_dir) in &replicas {
        for written in [ca_dir.as_path(), gw.dir.path()] {
            let found = fleet::files_containing(written, body.as_bytes());
            assert!(found.is_empty(), "the CA key is in {found:?}");
            let found = fleet::files_containing(written, b"PRIVATE KEY");
            assert!(found.is_empty(), "a private key is in {found:?}");
        }
        assert!(!gw.stderr().contains(&body[..40]));
    }
}

#[test]
fn a_ca_key_or_certificate_sluice_cannot_trust_stops_it_at_start() {
    let dir = TempDir::new("fleet-ca-files");
    let ca = FleetCa::new(dir.path(), "good");
    let other = fleet::root_ca(dir.path(), "other", "another CA");
    dir.write("open.yaml", &gateway::allow_ports(&[1]));
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  - name: a\n    sources: [127.0.0.1]\n    policy: [open.yaml]\n",
    );
    let run = |cert: &Path, key: &Path| {
        let t = tenants.display().to_string();
        let (c, k) = (cert.display().to_string(), key.display().to_string());
        gateway::exit_of(
            &[
                "run",
                "--tenants",
                &t,
                "--listen",
                "127.0.0.1:0",
                "--audit-log",
                "/dev/null",
                "--ca-cert",
                &c,
                "--ca-key",
                &k,
            ],
            &[],
        )
    };
    let loose = dir.path().join("loose.key");
    std::fs::copy(&ca.intermediate.key, &loose).unwrap();
    fleet::chmod(&loose, 0o640);
    let link = dir.path().join("link.key");
    std::os::unix::fs::symlink(&ca.intermediate.key, &link).unwrap();
    let fifo = dir.path().join("fifo.key");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    fleet::chmod(&fifo, 0o600);
    let leaf = fleet::client_cert(dir.path(), "leaf", &ca.intermediate, "/CN=leaf", None);
    let cases: Vec<(&str, &Path, &Path, &str)> = vec![
        ("a key others can read", &ca.chain, &loose, "mode 0640"),
        (
            "a link at the key's path",
            &ca.chain,
            &link,
            "symbolic link",
        ),
        (
            "a FIFO at the key's path",
            &ca.chain,
            &fifo,
            "not a regular file",
        ),
        (
            "another CA's key",
            &ca.chain,
            &other.key,
            "is not the key of the CA certificate",
        ),
        ("a leaf as the CA", &leaf.cert, &leaf.key, "is not a CA"),
        (
            "no such file",
            Path::new("/nonexistent/ca.pem"),
            &ca.intermediate.key,
            "cannot read",
        ),
    ];
    for (what, cert, key, says) in cases {
        let started = Instant::now();
        let (code, err) = run(cert, key);
        assert_eq!(code, Some(1), "{what}: {err}");
        assert!(err.contains(says), "{what}: {err}");
        // A FIFO is refused at once, not waited on.
        assert!(started.elapsed() < Duration::from_secs(15), "{what}");
    }
    if sluice_e2e::proxy::is_root() {
        let theirs = dir.path().join("theirs.key");
        std::fs::copy(&ca.intermediate.key, &theirs).unwrap();
        fleet::chmod(&theirs, 0o600);
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let (code, err) = run(&ca.chain, &theirs);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("owned by uid 65534"), "{err}");
    }
    // The good pair starts (the cases above fail for their own reason).
    let gw = gateway::start(
        &tenants,
        &ca.flags().iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    assert!(fetch_ca(&gw).contains("BEGIN CERTIFICATE"));
}

#[test]
fn a_reload_rotates_the_ca_and_no_leaf_of_the_old_one_is_issued_after_it() {
    let dir = TempDir::new("fleet-rotate");
    let old = FleetCa::new(dir.path(), "old");
    let new = FleetCa::new(dir.path(), "new");
    let origin = HttpsOrigin::start(dir.path());
    let tenants = local_tenant(&dir, origin.port());
    // The files a Secret would mount: replaced in place at rotation.
    let chain = dir.path().join("current-chain.pem");
    let key = dir.path().join("current.key");
    let install = |ca: &FleetCa| {
        std::fs::copy(&ca.chain, &chain).unwrap();
        std::fs::copy(&ca.intermediate.key, &key).unwrap();
        fleet::chmod(&key, 0o600);
    };
    install(&old);
    let current = FleetCa {
        root: old.root.clone(),
        intermediate: fleet::CaFiles {
            cert: chain.clone(),
            key: key.clone(),
        },
        chain: chain.clone(),
    };
    let gw = with_ca(&tenants, &current, &origin.cert, &dir.path().join("ca"));
    let url = format!("https://127.0.0.1:{}/", origin.port());
    let trusting = |ca: &FleetCa| {
        let root = ca.root.cert.display().to_string();
        gateway::curl(&gw, None, &["--cacert", &root], &url)
    };
    assert_eq!(trusting(&old).status, 200);
    install(&new);
    gw.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !gw.stderr().contains("CA rotated") {
        assert!(Instant::now() < deadline, "{}", gw.stderr());
        thread::sleep(Duration::from_millis(50));
    }
    // New leaves are the new CA's: a client of the old one refuses them, one of the new
    // one accepts them, and /ca.pem and --ca-dir serve the new chain.
    let refused = trusting(&old);
    assert_ne!(refused.status, 200, "{refused:?}");
    assert_eq!(trusting(&new).status, 200);
    let new_chain = std::fs::read_to_string(&new.chain).unwrap();
    assert_eq!(fetch_ca(&gw).trim(), new_chain.trim());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ca/ca.pem"))
            .unwrap()
            .trim(),
        new_chain.trim()
    );
}

// === The client's address from a trusted balancer ===

/// alpha (127.0.0.2) and beta (127.0.0.3) by address, each allowed to its own origin; the
/// balancer is 127.0.0.9.
fn behind_a_balancer(tag: &str) -> (TempDir, HttpOrigin, HttpOrigin, Sluice) {
    let dir = TempDir::new(tag);
    let (a, b) = (HttpOrigin::start(), HttpOrigin::start());
    let tenants = gateway::two_source_tenants(&dir, &[a.port()], &[b.port()]);
    let gw = gateway::start(&tenants, &["--proxy-protocol-from", "127.0.0.9/32"], &[]);
    (dir, a, b, gw)
}

#[test]
fn a_trusted_balancers_header_names_the_client_however_it_arrives() {
    let (_dir, a, b, gw) = behind_a_balancer("pp-trusted");
    let request = |port| gateway::forward(port, "/", None).into_bytes();
    let cases: Vec<(&str, Vec<u8>, usize)> = vec![
        (
            "v2, then the request in the same write",
            v2_header([127, 0, 0, 2], 4000),
            4096,
        ),
        (
            "v2, cut into 3-byte writes",
            v2_header([127, 0, 0, 2], 4001),
            3,
        ),
        (
            "v1, cut into 5-byte writes",
            b"PROXY TCP4 127.0.0.2 127.0.0.1 4002 3128\r\n".to_vec(),
            5,
        ),
    ];
    for (what, header, chunk) in cases {
        let mut bytes = header.clone();
        bytes.extend(request(a.port()));
        let (head, body) = send_in_pieces(&gw, [127, 0, 0, 9], &bytes, chunk);
        assert_eq!(gateway::status_line(&head), 200, "{what}: {head}{body}");
        // alpha's policy, not beta's: the carried address decides.
        let mut bytes = header;
        bytes.extend(request(b.port()));
        let (head, body) = send_in_pieces(&gw, [127, 0, 0, 9], &bytes, chunk);
        assert_eq!(gateway::status_line(&head), 403, "{what}: {head}{body}");
    }
    assert!(b.received().is_empty());
    // Audited as alpha, from alpha's address (not the balancer's).
    let e = gw.wait_event("alpha's forwarded request", |e| {
        tenant_of(e) == Some("alpha") && e["class_uid"] == 4002
    });
    assert_eq!(src_ip(&e), Some(ALPHA), "{e}");
    assert!(
        !gw.events()
            .iter()
            .any(|e| tenant_of(e).is_some() && src_ip(e) == Some("127.0.0.9"))
    );
}

#[test]
fn a_trusted_balancer_must_send_a_header_and_local_is_its_own_connection() {
    let (_dir, a, _b, gw) = behind_a_balancer("pp-required");
    // No header: refused, audited.
    let (head, body) = send_in_pieces(
        &gw,
        [127, 0, 0, 9],
        gateway::forward(a.port(), "/", None).as_bytes(),
        4096,
    );
    assert_eq!(gateway::status_line(&head), 400, "{head}{body}");
    assert!(body.contains("PROXY protocol header"), "{body}");
    gw.wait_event("the refused connection", |e| {
        e["status_code"] == "400"
            || e["unmapped"]["status"] == 400
            || e.to_string().contains("no PROXY protocol header")
    });
    // LOCAL (a health check): the balancer's own address, which is no tenant's.
    let mut bytes = v2_local();
    bytes.extend(gateway::forward(a.port(), "/", None).into_bytes());
    let (head, _) = send_in_pieces(&gw, [127, 0, 0, 9], &bytes, 4096);
    assert_eq!(gateway::status_line(&head), 403, "{head}");
    // A malformed header.
    let mut bad = v2_header([127, 0, 0, 2], 1);
    bad[12] = 0x31;
    let (head, _) = send_in_pieces(&gw, [127, 0, 0, 9], &bad, 4096);
    assert_eq!(gateway::status_line(&head), 400, "{head}");
    assert!(a.received().is_empty(), "{:?}", a.received());
}

#[test]
fn a_header_from_anyone_else_is_refused_and_names_nobody() {
    let (_dir, a, b, gw) = behind_a_balancer("pp-untrusted");
    // alpha forges beta's address: refused, beta's origin never reached.
    for header in [
        v2_header([127, 0, 0, 3], 5000),
        b"PROXY TCP4 127.0.0.3 127.0.0.1 5000 3128\r\n".to_vec(),
    ] {
        let mut bytes = header;
        bytes.extend(gateway::forward(b.port(), "/", None).into_bytes());
        let (head, body) = send_in_pieces(&gw, [127, 0, 0, 2], &bytes, 4096);
        assert_eq!(gateway::status_line(&head), 400, "{head}{body}");
        let json: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["error"], "bad_request");
        assert!(
            json["detail"]
                .as_str()
                .unwrap()
                .contains("--proxy-protocol-from does not trust"),
            "{json}"
        );
    }
    assert!(b.received().is_empty());
    assert!(a.received().is_empty());
    // Without --proxy-protocol-from at all, a header is refused the same way.
    let dir = TempDir::new("pp-none");
    let tenants = gateway::two_source_tenants(&dir, &[a.port()], &[b.port()]);
    let plain = gateway::start(&tenants, &[], &[]);
    let mut bytes = v2_header([127, 0, 0, 3], 5000);
    bytes.extend(gateway::forward(b.port(), "/", None).into_bytes());
    let (head, _) = send_in_pieces(&plain, [127, 0, 0, 2], &bytes, 4096);
    assert_eq!(gateway::status_line(&head), 400, "{head}");
    assert!(b.received().is_empty());
    // --proxy-protocol-from without --tenants is a usage error.
    let (code, err) = gateway::exit_of(
        &[
            "run",
            "--proxy-protocol-from",
            "127.0.0.9/32",
            "--audit-log",
            "/dev/null",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
}

#[test]
fn wrong_passwords_are_counted_under_the_address_the_header_carries() {
    let dir = TempDir::new("pp-guesses");
    let origin = HttpOrigin::start();
    let tenants = gateway::mixed_tenants(&dir, &[origin.port()]);
    let gw = gateway::start(
        &tenants,
        &["--proxy-protocol-from", "127.0.0.9/32"],
        &gateway::passwords(),
    );
    let attempt = |client: [u8; 4], password: &str| {
        let mut bytes = v2_header(client, 6000);
        let auth = gateway::basic("gamma", password);
        bytes.extend(gateway::forward(origin.port(), "/", Some(auth.as_str())).into_bytes());
        let (head, _) = send_in_pieces(&gw, [127, 0, 0, 9], &bytes, 4096);
        gateway::status_line(&head)
    };
    // One client behind the balancer guesses until it is throttled.
    let mut throttled = false;
    for _ in 0..40 {
        if attempt([198, 51, 100, 5], "wrong") == 429 {
            throttled = true;
            break;
        }
    }
    assert!(throttled, "never throttled");
    assert_eq!(attempt([198, 51, 100, 5], gateway::GAMMA_PASSWORD), 429);
    // Another client behind the same balancer is not: each is counted as itself.
    assert_eq!(attempt([198, 51, 100, 6], gateway::GAMMA_PASSWORD), 200);
}

// === Drain ===

#[test]
fn sigterm_lets_requests_in_flight_finish_refuses_new_ones_and_exits_0() {
    let dir = TempDir::new("drain");
    let origin = HttpOrigin::start();
    let tenants = gateway::two_source_tenants(&dir, &[origin.port()], &[]);
    let mut gw = gateway::start(&tenants, &["--metrics-listen", "127.0.0.1:0"], &[]);
    let metrics = sluice_e2e::scrape::metrics_addr(&gw);
    assert_eq!(sluice_e2e::scrape::get(metrics, "/readyz").0, 200);
    // An idle kept-alive connection, and a request in flight.
    let mut idle = gateway::connect_from(&gw, [127, 0, 0, 2]);
    idle.write_all(gateway::forward(origin.port(), "/", None).as_bytes())
        .unwrap();
    let (head, _) = gateway::read_response(&mut idle);
    assert_eq!(gateway::status_line(&head), 200);
    let proxy = gw.proxy_url();
    let slow = format!("http://127.0.0.1:{}/slow/2500", origin.port());
    let in_flight = thread::spawn(move || curl_via(&proxy, Some(ALPHA), &[], &slow));
    // The slow request has reached the origin.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !origin
        .received()
        .iter()
        .any(|r| r.request_line.contains("/slow/"))
    {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(20));
    }
    let started = Instant::now();
    gw.signal("TERM");
    // Not ready at once; the listener stops accepting.
    let deadline = Instant::now() + Duration::from_secs(2);
    while sluice_e2e::scrape::get(metrics, "/readyz").0 != 503 {
        assert!(Instant::now() < deadline, "readyz still ready");
        thread::sleep(Duration::from_millis(10));
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while TcpStream::connect(gw.addr()).is_ok() {
        assert!(Instant::now() < deadline, "still accepting");
        thread::sleep(Duration::from_millis(10));
    }
    // The idle connection is closed, not kept for the drain.
    idle.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(idle.read(&mut byte).unwrap_or(0), 0);
    // The request in flight finishes, whole.
    let answer = in_flight.join().unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.body.contains("slow hello"), "{answer:?}");
    assert_eq!(
        gw.wait_exit(Duration::from_secs(15)),
        Some(0),
        "{}",
        gw.stderr()
    );
    // Well before the 30 s drain timeout: nothing was left to wait for.
    assert!(started.elapsed() < Duration::from_secs(20));
    let stopped = gw
        .events()
        .into_iter()
        .find(|e| e.to_string().contains("sluice stopped"))
        .expect("the lifecycle event");
    assert!(stopped.to_string().contains("drained"), "{stopped}");
}

#[test]
fn the_drain_timeout_closes_what_remains_and_audits_why() {
    let dir = TempDir::new("drain-timeout");
    let origin = HttpOrigin::start();
    let tenants = gateway::two_source_tenants(&dir, &[origin.port()], &[BETA_PORT_UNUSED]);
    let mut gw = gateway::start(&tenants, &["--drain-timeout", "1s"], &[]);
    // A raw tunnel, open and idle: a tunnel in flight that would not end by itself.
    let (mut tunnel, head) = gateway::tunnel_from(&gw, [127, 0, 0, 2], origin.port());
    assert_eq!(gateway::status_line(&head), 200, "{head}");
    tunnel
        .write_all(b"GET / HTTP/1.1\r\nHost: o\r\n\r\n")
        .unwrap();
    let (head, _) = gateway::read_response(&mut tunnel);
    assert_eq!(gateway::status_line(&head), 200);
    let started = Instant::now();
    gw.signal("TERM");
    assert_eq!(
        gw.wait_exit(Duration::from_secs(15)),
        Some(0),
        "{}",
        gw.stderr()
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    tunnel
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(tunnel.read(&mut byte).unwrap_or(0), 0);
    let close = gw
        .events()
        .into_iter()
        .find(sluice_e2e::ocsf::is_close)
        .expect("the tunnel's close event");
    assert!(
        close.to_string().contains("drain timeout (1 s) passed"),
        "{close}"
    );
}

/// A port no tenant's policy reaches.
const BETA_PORT_UNUSED: u16 = 9;
