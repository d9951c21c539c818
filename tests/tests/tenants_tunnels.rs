//! Adversarial end-to-end tests of gateway tenants (`sluice run --tenants FILE`) in
//! inspected tunnels and across reloads: a tenant trying to use another tenant's pooled
//! upstream connection, identity or secret inside a tunnel, or to keep a tunnel, WebSocket or
//! HTTP/2 stream a reload should have revoked. Real sluice, real curl and Node, local origins
//! only.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::gateway::{
    self, ALPHA, BETA, DELTA_PASSWORD, GAMMA_PASSWORD, allow_ports, assert_never_logged, basic,
    connect_from, forward, get, mixed_gateway, mixed_tenants, passwords, read_response,
    rest_policy, status_line, token_provider, tunnel_from, write_secrets,
};
use sluice_e2e::origin::{
    HttpOrigin, OriginProcess, STREAMER, Script, WS_ECHO, spawn_tls, streaming_origin,
};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid};
use sluice_e2e::reload::{closed_within, read_head, replace};

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
        let log = dir.path().join("origin.jsonl");
        let (process, ca) = spawn_tls(
            dir.path(),
            Script::Node(COUNTING_ORIGIN),
            &[&log],
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
    dir.write("api.yaml", &rest_policy(&[("api", port)]));
    dir.write("providers.yaml", &token_provider(port));
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
    gateway::intercepting(dir, &tenants, &origin.ca, &passwords())
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
    // address), a request in it with gamma's. Inside a tunnel `Proxy-Authorization` is not
    // sluice's: it changes nothing. Each request is its tunnel's tenant's, given that
    // tenant's secret and never the other's, and the header goes no further.
    for (source, connect, inner, path, owner) in [
        (None, Some(&gamma), &delta, "/switched", "gamma"),
        (Some(ALPHA), None, &gamma, "/from-alpha", "alpha"),
    ] {
        let mut extra = vec!["-H", inner.as_str()];
        if let Some(c) = connect {
            extra.extend(["--proxy-header", c.as_str()]);
        }
        let (status, answer) = inspected(&gw, &ca, port, source, http, path, &extra);
        assert_eq!(status, "200", "{path}: {answer}\n{}", gw.stderr());
        holds_no_secret_but(&answer, None, path);
        let (_, auth) = origin.request(path).unwrap();
        assert_eq!(auth, format!("Bearer {}", secret_of(owner)), "{path}");
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
fn another_tenants_credentials_inside_an_http1_tunnel_change_nothing() {
    credentials_inside_the_tunnel("--http1.1");
}

#[test]
fn another_tenants_credentials_inside_an_http2_tunnel_change_nothing() {
    credentials_inside_the_tunnel("--http2");
}

#[test]
fn pipelined_requests_cannot_switch_tenant() {
    let (_dir, origin, gw) = mixed_gateway("tatk-pipe", &[]);
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

// === Reload: a WebSocket and an HTTP/2 stream do not outlive a rotated password ===

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
    let (streaming, ca_cert) = streaming_origin(dir.path());
    dir.write(
        "open.yaml",
        &rest_policy(&[("ws", ws.port), ("api", streaming.port)]),
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

// === Entries and profiles that name programs ===

#[test]
fn entries_and_profiles_that_name_programs_give_a_tenant_nothing() {
    let dir = TempDir::new("tatk-programs");
    let origin = Counting::start(&dir);
    let port = origin.port;
    let other = HttpOrigin::start();
    // The inspected origin: allowed to every program, its credential bound only for curl.
    // The other origin: allowed only by patterns that name programs (however wide).
    let wide = format!(
        "  wide:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}}}\n    binaries:\n      - path: \"/usr/bin/*\"\n      - path: \"/**/curl\"\n      - path: \"/*/*/*\"\n      - path: /usr/bin/curl\n",
        other.port()
    );
    dir.write("api.yaml", &(rest_policy(&[("api", port)]) + &wide));
    // Bound only for programs it names.
    let profile = token_provider(port) + "binaries: [{path: /usr/bin/curl}, {path: \"/usr/**\"}]\n";
    dir.write("providers.yaml", &profile);
    write_secrets(&dir, "alpha.env", "TOKEN=alpha-prog-tok-5d1e\n");
    let tenants = dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n    secrets_file: alpha.env\n"
        ),
    );
    let (gw, ca) = gateway::intercepting(&dir, &tenants, &origin.ca, &[]);
    let no = get(&gw, Some(ALPHA), &[], other.port());
    assert_eq!(no.status, 403, "{no:?}\n{}", gw.stderr());
    assert!(other.received().is_empty());
    let (status, answer) = inspected(&gw, &ca, port, Some(ALPHA), "--http1.1", "/tok", &[]);
    assert_ne!(status, "200", "{answer}");
    assert!(!answer.contains("alpha-prog-tok-5d1e"), "{answer}");
    for l in origin.lines() {
        assert!(!l.to_string().contains("alpha-prog-tok-5d1e"), "{l}");
    }
    assert_never_logged(&gw, "alpha-prog-tok-5d1e", "alpha's secret");
    assert_events_valid(&gw);
}
