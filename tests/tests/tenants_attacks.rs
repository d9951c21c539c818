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
    self, ALPHA, BETA, allow_ports, assert_never_logged, base64, basic, connect_from, get,
    read_response, status_line, tunnel_from, write_secrets,
};
use sluice_e2e::origin::{HttpOrigin, OriginProcess, make_cert};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid};
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

// === Inspected tunnels: pooled upstream connections, credentials inside the tunnel ===

/// An HTTPS origin (node; HTTP/2 and HTTP/1.1) logging, one JSON line per request, the TCP
/// connection it came on, its path, and its `authorization` and `proxy-authorization`; it
/// answers `hello` with the `authorization` and any `x-guess` it got.
const COUNTING_ORIGIN: &str = r#"
const http2 = require('http2'); const fs = require('fs');
const [cert, key, log] = process.argv.slice(1);
let n = 0;
const server = http2.createSecureServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert), allowHTTP1: true }, (req, res) => {
  const sock = req.httpVersion === '2.0' ? req.stream.session.socket : req.socket;
  fs.appendFileSync(log, JSON.stringify({ conn: sock.connId || 0, path: req.url,
    authorization: req.headers['authorization'] || null, proxy: req.headers['proxy-authorization'] || null }) + '\n');
  const guess = req.headers['x-guess'];
  res.end('hello ' + (req.headers['authorization'] || '') + (guess ? ' guess ' + guess : '') + '\n');
});
server.on('secureConnection', (s) => { n += 1; s.connId = n; });
server.listen(0, '127.0.0.1', () => { console.log(server.address().port); });
"#;

struct Counting {
    port: u16,
    ca: PathBuf,
    log: PathBuf,
    _process: OriginProcess,
}

impl Counting {
    fn start(dir: &TempDir) -> Counting {
        let (ca, cert, key) = make_cert(dir.path());
        let log = dir.path().join("origin.jsonl");
        let process = OriginProcess::spawn(
            Command::new("node")
                .arg("-e")
                .arg(COUNTING_ORIGIN)
                .arg(&cert)
                .arg(&key)
                .arg(&log),
            "the counting origin (node)",
        );
        Counting {
            port: process.port,
            ca,
            log,
            _process: process,
        }
    }

    /// The request to `path`: its connection and `authorization`, once it has arrived.
    fn request(&self, path: &str) -> Option<(u64, String)> {
        self.requests(path).into_iter().next()
    }

    fn requests(&self, path: &str) -> Vec<(u64, String)> {
        self.lines()
            .iter()
            .filter(|l| l["path"] == path)
            .map(|l| {
                (
                    l["conn"].as_u64().unwrap(),
                    l["authorization"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

const PLACEHOLDER: &str = "openshell:resolve:env:TOKEN";
const SECRETS: [(&str, &str); 4] = [
    ("alpha", "alpha-tok-7e21c9"),
    ("beta", "beta-tok-0f6a3d"),
    ("gamma", "gamma-tok-b83e15"),
    ("delta", "delta-tok-4c9d70"),
];

fn secret_of(tenant: &str) -> &'static str {
    SECRETS.iter().find(|(t, _)| *t == tenant).unwrap().1
}

/// A gateway whose four tenants (alpha and beta by address, gamma and delta by credentials)
/// may all use the inspected origin, each with its own `TOKEN`; and the CA to trust.
fn inspected_gateway(dir: &TempDir, origin: &Counting) -> (Sluice, PathBuf) {
    let port = origin.port;
    dir.write(
        "api.yaml",
        &format!(
            "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: \"/**\"\n"
        ),
    );
    dir.write(
        "providers.yaml",
        &format!(
            "id: test-api\ncredentials:\n  - name: token\n    env_vars: [TOKEN]\n    auth_style: bearer\nendpoints:\n  - {{host: 127.0.0.1, port: {port}}}\n"
        ),
    );
    let mut text = String::from("tenants:\n");
    for (name, secret) in SECRETS {
        write_secrets(dir, &format!("{name}.env"), &format!("TOKEN={secret}\n"));
        let who = match name {
            "alpha" => format!("    sources: [\"{ALPHA}\"]\n"),
            "beta" => format!("    sources: [\"{BETA}\"]\n"),
            _ => format!(
                "    proxy_auth:\n      username: {name}\n      password_env: {}_PW\n",
                name.to_uppercase()
            ),
        };
        text.push_str(&format!(
            "  - name: {name}\n{who}    policy: [api.yaml]\n    providers: [providers.yaml]\n    secrets_file: {name}.env\n"
        ));
    }
    let tenants = dir.write("tenants.yaml", &text);
    let ca_dir = dir.path().join("ca");
    let gw = gateway::start(
        &tenants,
        &[
            "--ca-dir",
            ca_dir.to_str().unwrap(),
            "--upstream-ca",
            origin.ca.to_str().unwrap(),
        ],
        &passwords(),
    );
    (gw, ca_dir.join("ca.pem"))
}

/// curl to the inspected origin's `path` over `http` (`--http1.1`, `--http2`) from
/// `source`, the placeholder in `Authorization`, with `extra` arguments.
fn inspected(
    gw: &Sluice,
    ca: &Path,
    port: u16,
    source: Option<&str>,
    http: &str,
    path: &str,
    extra: &[&str],
) -> (String, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-i", "--max-time", "20", http, "-x", &gw.proxy_url()])
        .args(["--cacert", ca.to_str().unwrap()])
        .args(["-H", &format!("Authorization: Bearer {PLACEHOLDER}")])
        .args(["-w", "\n%{http_version} %{http_code}"])
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    if let Some(src) = source {
        cmd.args(["--interface", src]);
    }
    let out = cmd
        .args(extra)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (answer, last) = text.rsplit_once('\n').unwrap_or((&text, ""));
    let (version, status) = last.trim().split_once(' ').unwrap_or(("", last));
    // The client spoke the HTTP version the test asks for, to sluice.
    let want = if http == "--http2" { "2" } else { "1.1" };
    assert_eq!(version, want, "{path}: {text}");
    (status.to_string(), answer.to_string())
}

/// Every secret but `own` is absent from `text`.
fn holds_no_secret_but(text: &str, own: Option<&str>, what: &str) {
    for (tenant, secret) in SECRETS {
        if Some(tenant) != own {
            assert!(!text.contains(secret), "{what} holds {tenant}'s secret");
        }
    }
}

fn pooled_per_tenant(http: &str) {
    let dir = TempDir::new("tatk-pool");
    let origin = Counting::start(&dir);
    let (gw, ca) = inspected_gateway(&dir, &origin);
    let port = origin.port;
    // alpha, then beta, then alpha again, each a new client connection.
    for (who, src, path) in [
        ("alpha", ALPHA, "/alpha-1"),
        ("beta", BETA, "/beta"),
        ("alpha", ALPHA, "/alpha-2"),
    ] {
        let (status, answer) = inspected(&gw, &ca, port, Some(src), http, path, &[]);
        assert_eq!(status, "200", "{who} {path}: {answer}\n{}", gw.stderr());
        holds_no_secret_but(&answer, None, &format!("{who}'s answer"));
    }
    let (a1, auth1) = origin.request("/alpha-1").unwrap();
    let (b, auth_b) = origin.request("/beta").unwrap();
    let (a2, auth2) = origin.request("/alpha-2").unwrap();
    // The pool works (alpha's second connection reused its first upstream connection), and
    // never across tenants.
    assert_eq!(a1, a2, "alpha's upstream connection was not pooled");
    assert_ne!(b, a1, "beta was handed alpha's pooled upstream connection");
    assert_eq!(auth1, format!("Bearer {}", secret_of("alpha")));
    assert_eq!(auth2, format!("Bearer {}", secret_of("alpha")));
    assert_eq!(auth_b, format!("Bearer {}", secret_of("beta")));
    for (_, secret) in SECRETS {
        assert_never_logged(&gw, secret, "a tenant's secret");
    }
    assert_events_valid(&gw);
}

#[test]
fn a_pooled_http1_upstream_connection_never_serves_another_tenant() {
    pooled_per_tenant("--http1.1");
}

#[test]
fn a_pooled_http2_upstream_connection_never_serves_another_tenant() {
    pooled_per_tenant("--http2");
}

fn credentials_inside_the_tunnel(http: &str) {
    let dir = TempDir::new("tatk-inner");
    let origin = Counting::start(&dir);
    let (gw, ca) = inspected_gateway(&dir, &origin);
    let port = origin.port;
    let gamma = format!("Proxy-Authorization: {}", basic("gamma", GAMMA_PASSWORD));
    let delta = format!("Proxy-Authorization: {}", basic("delta", DELTA_PASSWORD));
    // Control: gamma's tunnel (its credentials on CONNECT), gamma's own in the tunnel too.
    let (status, answer) = inspected(
        &gw,
        &ca,
        port,
        None,
        http,
        "/own",
        &["--proxy-header", &gamma, "-H", &gamma],
    );
    assert_eq!(status, "200", "{answer}\n{}", gw.stderr());
    let (_, auth) = origin.request("/own").unwrap();
    assert_eq!(auth, format!("Bearer {}", secret_of("gamma")));
    // gamma's tunnel, a request in it with delta's credentials; alpha's tunnel (by its
    // address), a request in it with gamma's: refused, and nothing goes upstream.
    for (source, connect, inner, path) in [
        (None, Some(&gamma), &delta, "/switched"),
        (Some(ALPHA), None, &gamma, "/from-alpha"),
    ] {
        let mut extra = vec!["-H", inner.as_str()];
        if let Some(c) = connect {
            extra.extend(["--proxy-header", c.as_str()]);
        }
        let (status, answer) = inspected(&gw, &ca, port, source, http, path, &extra);
        assert_eq!(status, "407", "{path}: {answer}\n{}", gw.stderr());
        holds_no_secret_but(&answer, None, path);
        assert!(origin.requests(path).is_empty(), "{path} went upstream");
    }
    // No Proxy-Authorization ever reached the origin.
    for l in origin.lines() {
        assert!(l["proxy"].is_null(), "{l}");
    }
    for value in [GAMMA_PASSWORD, DELTA_PASSWORD] {
        assert_never_logged(&gw, value, "a proxy password");
    }
    assert_events_valid(&gw);
}

#[test]
fn another_tenants_credentials_inside_an_http1_tunnel_are_refused() {
    credentials_inside_the_tunnel("--http1.1");
}

#[test]
fn another_tenants_credentials_inside_an_http2_tunnel_are_refused() {
    credentials_inside_the_tunnel("--http2");
}

#[test]
fn pipelined_requests_cannot_switch_tenant() {
    let dir = TempDir::new("tatk-pipe");
    let origin = HttpOrigin::start();
    let tenants = mixed_tenants(&dir, &[origin.port()]);
    let gw = gateway::start(&tenants, &[], &passwords());
    let port = origin.port();
    let gamma = basic("gamma", GAMMA_PASSWORD);
    let delta = basic("delta", DELTA_PASSWORD);
    // gamma's request, then delta's and one without credentials, in one write.
    let mut s = connect_from(&gw, [127, 0, 0, 1]);
    let batch = [
        forward(port, "/gamma", Some(&gamma)),
        forward(port, "/delta", Some(&delta)),
        forward(port, "/after", None),
    ]
    .concat();
    s.write_all(batch.as_bytes()).unwrap();
    let (head, _) = read_response(&mut s);
    assert_eq!(status_line(&head), 200, "{head}\n{}", gw.stderr());
    let (head, body) = read_response(&mut s);
    assert_eq!(status_line(&head), 407, "{head}{body}");
    // Whatever follows on that connection is refused too, or never read.
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut rest = String::new();
    let _ = s.read_to_string(&mut rest);
    assert!(!rest.contains("200 OK"), "{rest}");
    let urls: Vec<String> = origin
        .received()
        .iter()
        .map(|r| r.request_line.clone())
        .collect();
    assert_eq!(urls, ["GET /gamma HTTP/1.1"], "{urls:?}");

    // alpha (by address) cannot become gamma after its first request either.
    let mut s = connect_from(&gw, [127, 0, 0, 2]);
    let batch = [
        forward(port, "/alpha", None),
        forward(port, "/as-gamma", Some(&gamma)),
    ]
    .concat();
    s.write_all(batch.as_bytes()).unwrap();
    let (head, _) = read_response(&mut s);
    assert_eq!(status_line(&head), 200, "{head}");
    let (head, body) = read_response(&mut s);
    assert_eq!(status_line(&head), 407, "{head}{body}");
    assert_eq!(origin.received().len(), 2);
    assert_events_valid(&gw);
}

// === Reload: what it revokes stays revoked ===

/// Waits until `gw`'s stderr holds `needle` (a reload's report).
fn wait_stderr(gw: &Sluice, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gw.stderr().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in:\n{}",
            gw.stderr()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The number of times `gw` reported a successful load.
fn loads(gw: &Sluice) -> usize {
    gw.stderr().matches("CONFIG:LOADED").count()
}

fn reload(gw: &Sluice, file: &Path, text: &str) {
    let before = loads(gw);
    replace(file, text);
    gateway::hup(gw);
    let deadline = Instant::now() + Duration::from_secs(10);
    while loads(gw) == before {
        assert!(Instant::now() < deadline, "no reload:\n{}", gw.stderr());
        thread::sleep(Duration::from_millis(50));
    }
}

/// A CONNECT tunnel with proxy credentials `auth` from 127.0.0.1: the socket, once its
/// first plain request came back 200.
fn credential_tunnel(gw: &Sluice, port: u16, auth: &str) -> TcpStream {
    let mut s = connect_from(gw, [127, 0, 0, 1]);
    s.write_all(
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {auth}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let head = read_head(&mut s);
    assert_eq!(status_line(&head), 200, "{head}\n{}", gw.stderr());
    used(&mut s, port);
    s
}

/// One plain request through an open tunnel, answered 200.
fn used(s: &mut TcpStream, port: u16) {
    s.write_all(format!("GET /held HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes())
        .unwrap();
    let (head, _) = read_response(s);
    assert_eq!(status_line(&head), 200, "{head}");
}

#[test]
fn a_rotated_proxy_password_revokes_its_tunnels_and_kept_alive_connections() {
    let dir = TempDir::new("tatk-rotate");
    let origin = HttpOrigin::start();
    let port = origin.port();
    let tenants = mixed_tenants(&dir, &[port]);
    let gw = gateway::start(
        &tenants,
        &["--watch-interval", "1h"],
        &[
            ("GAMMA_PW", GAMMA_PASSWORD),
            ("DELTA_PW", DELTA_PASSWORD),
            ("GAMMA_PW_NEW", "gamma-new-pw-19ab"),
        ],
    );
    let gamma = basic("gamma", GAMMA_PASSWORD);
    let delta = basic("delta", DELTA_PASSWORD);
    let mut gamma_tunnel = credential_tunnel(&gw, port, &gamma);
    let mut delta_tunnel = credential_tunnel(&gw, port, &delta);
    // gamma's kept-alive forward connection, idle between requests.
    let mut kept = connect_from(&gw, [127, 0, 0, 1]);
    kept.write_all(forward(port, "/kept", Some(&gamma)).as_bytes())
        .unwrap();
    let (head, _) = read_response(&mut kept);
    assert_eq!(status_line(&head), 200, "{head}");

    // gamma's password is rotated (its file names another variable).
    let text = std::fs::read_to_string(&tenants).unwrap();
    reload(&gw, &tenants, &text.replace("GAMMA_PW\n", "GAMMA_PW_NEW\n"));
    assert!(
        closed_within(&mut gamma_tunnel).is_some(),
        "gamma's tunnel outlived its password\n{}",
        gw.stderr()
    );
    // Its kept-alive connection serves no further request with the old password.
    let _ = kept.write_all(forward(port, "/after-rotation", Some(&gamma)).as_bytes());
    let mut rest = String::new();
    kept.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = kept.read_to_string(&mut rest);
    assert!(!rest.contains(" 200 "), "{rest}");
    // The old password opens nothing; the new one does; delta was not touched.
    let old = get(
        &gw,
        None,
        &["--proxy-user", &format!("gamma:{GAMMA_PASSWORD}")],
        port,
    );
    assert_eq!(old.status, 407, "{old:?}");
    let new = get(
        &gw,
        None,
        &["--proxy-user", "gamma:gamma-new-pw-19ab"],
        port,
    );
    assert_eq!(new.status, 200, "{new:?}");
    used(&mut delta_tunnel, port);
    assert!(
        !origin
            .received()
            .iter()
            .any(|r| r.request_line.contains("/after-rotation"))
    );
    assert_never_logged(&gw, "gamma-new-pw-19ab", "the new password");
    assert_events_valid(&gw);
}

#[test]
fn narrowed_sources_revoke_the_tunnels_of_the_addresses_left_out() {
    let dir = TempDir::new("tatk-narrow");
    let origin = HttpOrigin::start();
    let port = origin.port();
    dir.write("open.yaml", &allow_ports(&[port]));
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  - name: alpha\n    sources: [\"127.0.0.2/31\"]\n    policy: [open.yaml]\n",
    );
    let gw = gateway::start(&tenants, &["--watch-interval", "1h"], &[]);
    let (mut kept, head) = tunnel_from(&gw, [127, 0, 0, 2], port);
    assert_eq!(status_line(&head), 200, "{head}\n{}", gw.stderr());
    let (mut cut, head) = tunnel_from(&gw, [127, 0, 0, 3], port);
    assert_eq!(status_line(&head), 200, "{head}");
    used(&mut kept, port);
    used(&mut cut, port);

    reload(
        &gw,
        &tenants,
        "tenants:\n  - name: alpha\n    sources: [\"127.0.0.2\"]\n    policy: [open.yaml]\n",
    );
    assert!(
        closed_within(&mut cut).is_some(),
        "the tunnel from the address left out stayed open\n{}",
        gw.stderr()
    );
    used(&mut kept, port);
    let no = get(&gw, Some(BETA), &[], port);
    assert_eq!(no.status, 403, "{no:?}");
    wait_stderr(&gw, "tenant:alpha");
    assert_events_valid(&gw);
}

// === Entries and profiles that name programs ===

#[test]
fn entries_and_profiles_that_name_programs_give_a_tenant_nothing() {
    let dir = TempDir::new("tatk-programs");
    let origin = Counting::start(&dir);
    let port = origin.port;
    let other = HttpOrigin::start();
    // The inspected origin: allowed to every program, its credential bound only for curl.
    // The other origin: allowed only by patterns that name programs (however wide).
    dir.write(
        "api.yaml",
        &format!(
            "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: \"/**\"\n  \
               wide:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}}}\n    binaries:\n      - path: \"/usr/bin/*\"\n      - path: \"/**/curl\"\n      - path: \"/*/*/*\"\n      - path: /usr/bin/curl\n",
            other.port()
        ),
    );
    dir.write(
        "providers.yaml",
        &format!(
            "id: test-api\ncredentials:\n  - name: token\n    env_vars: [TOKEN]\n    auth_style: bearer\nendpoints:\n  - {{host: 127.0.0.1, port: {port}}}\nbinaries: [{{path: /usr/bin/curl}}, {{path: \"/usr/**\"}}]\n"
        ),
    );
    write_secrets(&dir, "alpha.env", "TOKEN=alpha-prog-tok-5d1e\n");
    let tenants = dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n    secrets_file: alpha.env\n"
        ),
    );
    let ca_dir = dir.path().join("ca");
    let gw = gateway::start(
        &tenants,
        &[
            "--ca-dir",
            ca_dir.to_str().unwrap(),
            "--upstream-ca",
            origin.ca.to_str().unwrap(),
        ],
        &[],
    );
    let no = get(&gw, Some(ALPHA), &[], other.port());
    assert_eq!(no.status, 403, "{no:?}\n{}", gw.stderr());
    assert!(other.received().is_empty());
    let ca = ca_dir.join("ca.pem");
    let (status, answer) = inspected(&gw, &ca, port, Some(ALPHA), "--http1.1", "/tok", &[]);
    assert_ne!(status, "200", "{answer}");
    assert!(!answer.contains("alpha-prog-tok-5d1e"), "{answer}");
    for l in origin.lines() {
        assert!(!l.to_string().contains("alpha-prog-tok-5d1e"), "{l}");
    }
    assert_never_logged(&gw, "alpha-prog-tok-5d1e", "alpha's secret");
    assert_events_valid(&gw);
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

// === Reload: a WebSocket and an HTTP/2 stream do not outlive a rotated password ===

/// An origin (node; HTTP/2 and HTTP/1.1) whose `/stream` sends a line every 200 ms.
const STREAMING_ORIGIN: &str = r#"
const http2 = require('http2'); const fs = require('fs');
const server = http2.createSecureServer({ key: fs.readFileSync(process.argv[2]), cert: fs.readFileSync(process.argv[1]), allowHTTP1: true },
  (req, res) => {
    res.setHeader('content-type', 'text/plain');
    let i = 0; const t = setInterval(() => { res.write(`line ${i++}\n`); }, 200);
    res.on('close', () => clearInterval(t));
  });
server.listen(0, '127.0.0.1', () => { console.log(server.address().port); });
"#;

/// An httpx HTTP/2 client streaming `/stream` through a proxy URL that carries the
/// credentials: prints each line as it arrives, then `END` and what ended the stream.
const STREAMER: &str = r#"
import sys, httpx
proxy, ca, base = sys.argv[1:4]
with httpx.Client(proxy=proxy, verify=ca, http1=False, http2=True, timeout=30) as c:
    try:
        with c.stream('GET', base + '/stream') as r:
            print('STATUS', r.status_code, r.http_version, flush=True)
            for line in r.iter_lines():
                print(line, flush=True)
        print('END complete', flush=True)
    except Exception as e:
        print('END', type(e).__name__, flush=True)
"#;

/// A WebSocket server (Python, raw sockets): answers the handshake with `101`, then echoes
/// every byte back until the client closes.
const WS_ECHO: &str = r#"
import base64, hashlib, socket, threading
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(5)
print(s.getsockname()[1], flush=True)
def serve(c):
    data = b''
    while b'\r\n\r\n' not in data:
        data += c.recv(4096)
    head, rest = data.split(b'\r\n\r\n', 1)
    key = [l.split(b':', 1)[1].strip() for l in head.split(b'\r\n') if l.lower().startswith(b'sec-websocket-key')][0]
    accept = base64.b64encode(hashlib.sha1(key + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())
    c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + b'\r\n\r\n' + rest)
    while True:
        d = c.recv(4096)
        if not d:
            break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// A forwarded WebSocket to `port` with proxy credentials `auth`, echoing once.
fn websocket(gw: &Sluice, port: u16, auth: &str) -> TcpStream {
    let mut s = connect_from(gw, [127, 0, 0, 1]);
    write!(
        s,
        "GET http://127.0.0.1:{port}/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {auth}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}\n{}", gw.stderr());
    echoes(&mut s);
    s
}

fn echoes(s: &mut TcpStream) {
    s.write_all(b"ping").unwrap();
    let mut back = [0u8; 4];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping");
}

#[test]
fn a_rotated_proxy_password_closes_its_websockets_and_http2_streams() {
    let dir = TempDir::new("tatk-rotate-streams");
    let ws = OriginProcess::spawn(
        Command::new("python3").args(["-c", WS_ECHO]),
        "the WebSocket echo (python)",
    );
    let (ca_cert, cert, key) = make_cert(dir.path());
    let streaming = OriginProcess::spawn(
        Command::new("node")
            .arg("-e")
            .arg(STREAMING_ORIGIN)
            .arg(&cert)
            .arg(&key),
        "the streaming origin (node)",
    );
    dir.write(
        "open.yaml",
        &format!(
            "version: 1\nnetwork_policies:\n  ws:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: \"/**\"\n  \
               api:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: \"/**\"\n",
            ws.port, streaming.port
        ),
    );
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  \
           - name: gamma\n    proxy_auth:\n      username: gamma\n      password_env: GAMMA_PW\n    policy: [open.yaml]\n  \
           - name: delta\n    proxy_auth:\n      username: delta\n      password_env: DELTA_PW\n    policy: [open.yaml]\n",
    );
    let ca_dir = dir.path().join("ca");
    let gw = gateway::start(
        &tenants,
        &[
            "--watch-interval",
            "1h",
            "--ca-dir",
            ca_dir.to_str().unwrap(),
            "--upstream-ca",
            ca_cert.to_str().unwrap(),
        ],
        &[
            ("GAMMA_PW", GAMMA_PASSWORD),
            ("DELTA_PW", DELTA_PASSWORD),
            ("GAMMA_PW_NEW", "gamma-new-pw-7d20"),
        ],
    );
    let mut gamma_ws = websocket(&gw, ws.port, &basic("gamma", GAMMA_PASSWORD));
    let mut delta_ws = websocket(&gw, ws.port, &basic("delta", DELTA_PASSWORD));
    let addr = gw.addr();
    let mut client = Command::new("python3")
        .arg("-c")
        .arg(STREAMER)
        .arg(format!("http://gamma:{GAMMA_PASSWORD}@{addr}"))
        .arg(ca_dir.join("ca.pem"))
        .arg(format!("https://127.0.0.1:{}", streaming.port))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let lines = sluice_e2e::reload::lines_of(client.stdout.take().unwrap());
    let next = || {
        lines
            .recv_timeout(Duration::from_secs(30))
            .expect("no line")
    };
    assert_eq!(next(), "STATUS 200 HTTP/2", "{}", gw.stderr());
    assert_eq!(next(), "line 0");

    let text = std::fs::read_to_string(&tenants).unwrap();
    reload(&gw, &tenants, &text.replace("GAMMA_PW\n", "GAMMA_PW_NEW\n"));
    assert!(
        closed_within(&mut gamma_ws).is_some(),
        "gamma's WebSocket outlived its password\n{}",
        gw.stderr()
    );
    let started = Instant::now();
    let end = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("gamma's HTTP/2 stream did not end after the rotation");
        if line.starts_with("END") {
            break line;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still streaming"
        );
    };
    assert_ne!(end, "END complete", "{end}");
    // delta's WebSocket is untouched.
    echoes(&mut delta_ws);
    let _ = client.kill();
    let _ = client.wait();
    assert_never_logged(&gw, GAMMA_PASSWORD, "gamma's old password");
    assert_events_valid(&gw);
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
    let text = std::fs::read_to_string(&audit).unwrap_or_default();
    for secret in [GAMMA_PASSWORD, "eps-pw-2f6b"] {
        assert!(!text.contains(secret), "the audit log holds a password");
    }
}

// === No oracle: another tenant's secret is nothing special in a tenant's traffic ===

#[test]
fn a_tenant_cannot_test_a_guess_of_another_tenants_secret_or_password() {
    let dir = TempDir::new("tatk-oracle");
    let origin = Counting::start(&dir);
    let (gw, ca) = inspected_gateway(&dir, &origin);
    let port = origin.port;
    // alpha sends literal values and the origin echoes them back: its own secret is
    // scrubbed (the control), another tenant's secret or proxy password, right or wrong,
    // comes back as it was sent, the same way a wrong guess does (nothing to tell them apart).
    let echo = |path: &str, value: &str| {
        let (status, answer) = inspected(
            &gw,
            &ca,
            port,
            Some(ALPHA),
            "--http1.1",
            path,
            &["-H", &format!("X-Guess: {value}")],
        );
        assert_eq!(status, "200", "{path}: {answer}\n{}", gw.stderr());
        answer.split("\r\n\r\n").last().unwrap().trim().to_string()
    };
    let hello = format!("hello Bearer {PLACEHOLDER} guess");
    assert_eq!(
        echo("/own", secret_of("alpha")),
        format!("{hello} {PLACEHOLDER}")
    );
    for (path, value) in [
        ("/beta-secret", secret_of("beta")),
        ("/wrong-secret", "beta-tok-000000"),
        ("/gamma-password", GAMMA_PASSWORD),
        ("/wrong-password", "gamma-pw-00000000"),
    ] {
        assert_eq!(echo(path, value), format!("{hello} {value}"), "{path}");
    }
    assert_events_valid(&gw);
}

// === Where a proxy password could surface: the audit log, stderr, metrics, OTLP ===

/// An OTLP/HTTP sink on loopback keeping every byte of every body POSTed to it.
fn otlp_sink() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use std::io::{BufRead, BufReader};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let shared = std::sync::Arc::clone(&got);
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let got = std::sync::Arc::clone(&shared);
            thread::spawn(move || {
                let mut rd = BufReader::new(stream.try_clone().unwrap());
                let mut wr = stream;
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    if rd.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut h = String::new();
                        if rd.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0u8; length];
                    if rd.read_exact(&mut body).is_err() {
                        return;
                    }
                    got.lock().unwrap().extend_from_slice(&body);
                    let _ = wr.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
                    );
                }
            });
        }
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
