//! End-to-end tests of the upstream connection pool of inspected tunnels: the real binary,
//! real curl and Python, real TLS origins that count every TCP connection they accept and
//! every TLS handshake they finish. One caller's sequential client connections share one
//! upstream connection (HTTP/1.1 and HTTP/2); another caller never gets it, nor the first
//! caller's credential; a response ended by `Connection: close` or left unread is not pooled;
//! an origin closing idle connections fails no request; a reload retires pooled connections
//! and closes the idle ones at once.
//! A kept-alive HTTP/1.1 client connection that goes idle gives its upstream connection back
//! (another client of the same caller reuses it, the idle one takes one again for its next
//! request), and a caller holding many idle connections makes sluice hold no more upstream
//! connections than the pool keeps.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use sluice_e2e::ocsf::class;
use sluice_e2e::origin::{OriginProcess, Script, spawn_tls};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python, run};

const SECRET: &str = "pooled-s3cr3t-4b1d";

/// An HTTPS origin (Python) that logs, one JSON line each, every TCP connection it accepts
/// (`accept`), every TLS handshake it finishes (`handshake`) and every request with the
/// connection it came on and its raw head. `/close` answers with `Connection: close`,
/// `/bytes/N` N bytes, anything else `hello`. With `idle` > 0 it closes a connection idle
/// that long.
const ORIGIN: &str = r#"
import http.server, ssl, sys, json, threading
cert, key, log, idle = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert, key)
lock = threading.Lock(); count = [0]
def write(rec):
    with lock:
        with open(log, 'a') as f: f.write(json.dumps(rec) + '\n')
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = idle if idle > 0 else None
    def log_message(self, *a): pass
    def setup(self):
        with lock:
            count[0] += 1; self.conn_id = count[0]
        write({"accept": self.conn_id})
        self.request.settimeout(10)
        self.request = ctx.wrap_socket(self.request, server_side=True)
        write({"handshake": self.conn_id})
        super().setup()
    def finish(self):
        try:
            super().finish()
        finally:
            write({"close": self.conn_id})
    def do_GET(self):
        write({"conn": self.conn_id, "path": self.path, "raw": self.requestline + "\r\n" + str(self.headers)})
        if self.path.startswith("/bytes/"):
            n = int(self.path[7:])
            self.send_response(200); self.send_header("Content-Length", str(n)); self.end_headers()
            block = b"y" * 65536
            try:
                while n > 0:
                    c = min(n, len(block)); self.wfile.write(block[:c]); n -= c
            except OSError:
                self.close_connection = True
            return
        body = b"closing\n" if self.path.startswith("/close") else b"hello\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if self.path.startswith("/close"):
            self.send_header("Connection", "close")
        self.end_headers(); self.wfile.write(body)
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

/// An HTTP/2 origin (Node) logging the same `accept` and request lines.
const H2_ORIGIN: &str = r#"
const http2 = require('http2'); const fs = require('fs');
const [cert, key, log] = process.argv.slice(1);
let n = 0;
const write = (r) => fs.appendFileSync(log, JSON.stringify(r) + '\n');
const server = http2.createSecureServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert), allowHTTP1: true }, (req, res) => {
  const sock = req.httpVersion === '2.0' ? req.stream.session.socket : req.socket;
  write({ conn: sock.connId || 0, path: req.url, raw: JSON.stringify(req.headers) });
  res.end('hello\n');
});
server.on('connection', () => { n += 1; write({ accept: n }); });
server.on('secureConnection', (s) => { s.connId = n; write({ handshake: n }); });
server.listen(0, '127.0.0.1', () => { console.log(server.address().port); });
"#;

struct Origin {
    port: u16,
    cert: PathBuf,
    log: PathBuf,
    _process: OriginProcess,
}

impl Origin {
    fn start(dir: &TempDir, idle: f64) -> Origin {
        let log = dir.path().join("origin.jsonl");
        let (process, ca) = spawn_tls(
            dir.path(),
            Script::Python(ORIGIN),
            &[&log, &idle.to_string()],
            "the counting https origin",
        );
        Origin {
            port: process.port,
            cert: ca,
            log,
            _process: process,
        }
    }

    fn start_h2(dir: &TempDir) -> Origin {
        let log = dir.path().join("origin.jsonl");
        let (process, ca) = spawn_tls(
            dir.path(),
            Script::Node(H2_ORIGIN),
            &[&log],
            "the counting h2 origin (node)",
        );
        Origin {
            port: process.port,
            cert: ca,
            log,
            _process: process,
        }
    }

    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// TCP connections accepted, and TLS handshakes finished.
    fn connections(&self) -> (usize, usize) {
        let lines = self.lines();
        let n = |k: &str| lines.iter().filter(|l| l.get(k).is_some()).count();
        (n("accept"), n("handshake"))
    }

    /// Upstream connections still open at the origin.
    fn open(&self) -> usize {
        let lines = self.lines();
        let n = |k: &str| lines.iter().filter(|l| l.get(k).is_some()).count();
        n("accept") - n("close")
    }

    /// The requests received: (connection, path, raw head).
    fn requests(&self) -> Vec<(u64, String, String)> {
        self.lines()
            .iter()
            .filter(|l| l.get("path").is_some())
            .map(|l| {
                (
                    l["conn"].as_u64().unwrap(),
                    l["path"].as_str().unwrap().to_string(),
                    l["raw"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

/// An inspected endpoint on `port` for curl and Python, with `TEST_API_KEY` bound to it;
/// `extra` is one more rule.
fn setup(dir: &TempDir, origin: &Origin, extra: &str) -> (Sluice, PathBuf) {
    let policy = policy_text(origin.port, extra);
    let providers = dir.write(
        "providers.yaml",
        &format!(
            "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\nendpoints:\n  - host: 127.0.0.1\n    port: {}\n",
            origin.port
        ),
    );
    Sluice::intercepting(
        dir,
        &policy,
        &[&origin.cert],
        Some(&providers),
        &[("TEST_API_KEY", SECRET)],
    )
}

fn policy_text(port: u16, extra: &str) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: \"/**\"}}\n{extra}    binaries:\n      - path: /usr/bin/curl\n      - path: {}\n",
        python()
    )
}

/// One curl process (one client connection) fetching `path`: its output and status.
fn curl(sluice: &Sluice, ca: &Path, port: u16, path: &str, args: &[&str]) -> (String, String) {
    let (_, out, err) = run(Command::new("curl")
        .args(["-s", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"])
        .args(args)
        .arg(format!("https://127.0.0.1:{port}{path}")));
    (out, err)
}

fn ok(out: &(String, String), sluice: &Sluice) {
    assert!(out.0.ends_with("200"), "{out:?}\n{}", sluice.stderr());
}

/// The HTTP audit events for `path`.
fn audited(sluice: &Sluice, path: &str) -> usize {
    sluice
        .events()
        .iter()
        .filter(|e| class(e) == 4002 && e["http_request"]["url"]["path"] == path)
        .count()
}

/// Waits until the origin has logged `n` requests (its log is written as it answers).
fn wait_requests(origin: &Origin, n: usize) {
    for _ in 0..100 {
        if origin.requests().len() >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the origin logged {:?}", origin.requests());
}

#[test]
fn sequential_connections_of_one_caller_share_one_upstream_connection() {
    let dir = TempDir::new("pool-reuse");
    let origin = Origin::start(&dir, 0.0);
    let (sluice, ca) = setup(&dir, &origin, "");
    let auth = "Authorization: Bearer openshell:resolve:env:TEST_API_KEY";
    for path in ["/a", "/b", "/c"] {
        let out = curl(&sluice, &ca, origin.port, path, &["--http1.1", "-H", auth]);
        ok(&out, &sluice);
        assert!(!out.0.contains(SECRET));
    }
    wait_requests(&origin, 3);
    assert_eq!(origin.connections(), (1, 1), "{:?}", origin.lines());
    // Every request was judged, injected and audited on its own.
    for (_, _, raw) in origin.requests() {
        assert!(raw.contains(&format!("Bearer {SECRET}")), "{raw}");
    }
    for path in ["/a", "/b", "/c"] {
        sluice.wait_event(path, |e| {
            class(e) == 4002 && e["http_request"]["url"]["path"] == path
        });
    }
    // Three client connections, each audited open and close.
    let opens = sluice
        .events()
        .iter()
        .filter(|e| class(e) == 4001 && e["activity_id"] == 1)
        .count();
    assert_eq!(opens, 3);
    assert_events_valid(&sluice);
}

#[test]
fn another_caller_gets_its_own_connection_and_never_the_first_callers_credential() {
    let dir = TempDir::new("pool-callers");
    let origin = Origin::start(&dir, 0.0);
    let (sluice, ca) = setup(&dir, &origin, "");
    let auth = "Authorization: Bearer openshell:resolve:env:TEST_API_KEY";
    ok(
        &curl(
            &sluice,
            &ca,
            origin.port,
            "/curl",
            &["--http1.1", "-H", auth],
        ),
        &sluice,
    );
    wait_requests(&origin, 1);
    // Python, another caller, to the same destination without a credential.
    let script = format!(
        "import http.client, ssl\nctx = ssl.create_default_context(cafile={ca:?})\nc = http.client.HTTPSConnection('127.0.0.1', {sport}, context=ctx, timeout=20)\nc.set_tunnel('127.0.0.1', {port})\nc.request('GET', '/python')\nr = c.getresponse()\nprint(r.status, r.read().decode())\n",
        ca = ca.display().to_string(),
        sport = sluice.addr().port(),
        port = origin.port
    );
    let (code, out, err) = run(Command::new("python3").arg("-c").arg(&script));
    assert_eq!(code, 0, "{out}{err}\n{}", sluice.stderr());
    assert!(out.starts_with("200"), "{out}");
    assert!(!out.contains(SECRET) && !err.contains(SECRET));
    // curl again: its own pooled connection.
    ok(
        &curl(
            &sluice,
            &ca,
            origin.port,
            "/curl2",
            &["--http1.1", "-H", auth],
        ),
        &sluice,
    );
    wait_requests(&origin, 3);
    assert_eq!(origin.connections(), (2, 2), "{:?}", origin.lines());
    let requests = origin.requests();
    let conn_of = |p: &str| requests.iter().find(|r| r.1 == p).unwrap().0;
    assert_ne!(conn_of("/curl"), conn_of("/python"));
    assert_eq!(conn_of("/curl"), conn_of("/curl2"));
    // Every byte the origin received on Python's connection is free of the secret.
    let python_conn = conn_of("/python");
    for (conn, path, raw) in &requests {
        if *conn == python_conn {
            assert!(!raw.contains(SECRET), "{path}: {raw}");
        } else {
            assert!(raw.contains(SECRET), "{path}: {raw}");
        }
    }
    assert_eq!(audited(&sluice, "/python"), 1);
    assert_events_valid(&sluice);
}

#[test]
fn a_response_with_connection_close_is_not_pooled() {
    let dir = TempDir::new("pool-close");
    let origin = Origin::start(&dir, 0.0);
    let (sluice, ca) = setup(&dir, &origin, "");
    ok(
        &curl(&sluice, &ca, origin.port, "/close", &["--http1.1"]),
        &sluice,
    );
    ok(
        &curl(&sluice, &ca, origin.port, "/", &["--http1.1"]),
        &sluice,
    );
    wait_requests(&origin, 2);
    assert_eq!(origin.connections(), (2, 2), "{:?}", origin.lines());
}

#[test]
fn a_response_left_unread_is_not_pooled() {
    let dir = TempDir::new("pool-unread");
    let origin = Origin::start(&dir, 0.0);
    let (sluice, ca) = setup(&dir, &origin, "");
    // curl gives up after a second, far from the end of the body.
    let (out, _) = curl(
        &sluice,
        &ca,
        origin.port,
        "/bytes/200000000",
        &[
            "--http1.1",
            "--limit-rate",
            "200k",
            "--max-time",
            "1",
            "-o",
            "/dev/null",
        ],
    );
    assert!(!out.ends_with("200\n"), "{out}");
    ok(
        &curl(&sluice, &ca, origin.port, "/", &["--http1.1"]),
        &sluice,
    );
    wait_requests(&origin, 2);
    assert_eq!(origin.connections(), (2, 2), "{:?}", origin.lines());
}

#[test]
fn an_origin_closing_idle_connections_fails_no_request() {
    let dir = TempDir::new("pool-idle");
    let origin = Origin::start(&dir, 0.5);
    let (sluice, ca) = setup(&dir, &origin, "");
    for round in 0..3 {
        ok(
            &curl(&sluice, &ca, origin.port, "/", &["--http1.1"]),
            &sluice,
        );
        wait_requests(&origin, round + 1);
        // The origin closes the pooled connection meanwhile.
        std::thread::sleep(Duration::from_millis(1200));
    }
    assert_eq!(origin.connections(), (3, 3), "{:?}", origin.lines());
}

#[test]
fn a_reload_retires_pooled_connections() {
    let dir = TempDir::new("pool-reload");
    let origin = Origin::start(&dir, 0.0);
    let (sluice, ca) = setup(&dir, &origin, "");
    ok(
        &curl(&sluice, &ca, origin.port, "/", &["--http1.1"]),
        &sluice,
    );
    ok(
        &curl(&sluice, &ca, origin.port, "/", &["--http1.1"]),
        &sluice,
    );
    wait_requests(&origin, 2);
    assert_eq!(origin.connections(), (1, 1), "{:?}", origin.lines());
    let path = sluice.dir.path().join("policy.yaml");
    let tmp = path.with_extension("tmp");
    std::fs::write(
        &tmp,
        policy_text(origin.port, "          - allow: {method: POST, path: /x}\n"),
    )
    .unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    sluice.wait_event("the reload", |_| {
        sluice
            .events()
            .iter()
            .filter(|e| class(e) == 5019 && e["status_id"].as_u64() == Some(1))
            .count()
            >= 2
    });
    ok(
        &curl(&sluice, &ca, origin.port, "/", &["--http1.1"]),
        &sluice,
    );
    ok(
        &curl(&sluice, &ca, origin.port, "/", &["--http1.1"]),
        &sluice,
    );
    wait_requests(&origin, 4);
    // One new connection after the reload, pooled in turn.
    assert_eq!(origin.connections(), (2, 2), "{:?}", origin.lines());
}

#[test]
fn a_reload_closes_idle_pooled_connections_at_once() {
    let dir = TempDir::new("pool-reload-close");
    let origin = Origin::start(&dir, 0.0);
    let (sluice, ca) = setup(&dir, &origin, "");
    for http in ["--http1.1", "--http2"] {
        ok(&curl(&sluice, &ca, origin.port, "/", &[http]), &sluice);
    }
    wait_requests(&origin, 2);
    let done = std::time::Instant::now();
    // Kept idle for the next client connection of the same caller, one per ALPN offer (the
    // origin speaks HTTP/1.1 only; curl offers h2 too with --http2).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(origin.open(), 2, "{:?}", origin.lines());
    let (code, _, err) = run(Command::new("kill").args(["-HUP", &sluice.pid().to_string()]));
    assert_eq!(code, 0, "{err}");
    sluice.wait_event("the reload", |e| class(e) == 5019);
    // Closed at the reload, not when its idle timeout (4 s) runs out.
    while origin.open() > 0 {
        assert!(
            done.elapsed() < Duration::from_millis(3000),
            "a pooled connection outlived the reload: {:?}",
            origin.lines()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(origin.connections(), (2, 2), "{:?}", origin.lines());
}

#[test]
fn http2_connections_of_one_caller_are_pooled_too() {
    let dir = TempDir::new("pool-h2");
    let origin = Origin::start_h2(&dir);
    let (sluice, ca) = setup(&dir, &origin, "");
    let auth = "Authorization: Bearer openshell:resolve:env:TEST_API_KEY";
    for path in ["/a", "/b"] {
        let out = curl(&sluice, &ca, origin.port, path, &["--http2", "-H", auth]);
        ok(&out, &sluice);
        assert!(out.0.starts_with("hello"), "{out:?}");
    }
    wait_requests(&origin, 2);
    assert_eq!(origin.connections(), (1, 1), "{:?}", origin.lines());
    for (_, _, raw) in origin.requests() {
        assert!(raw.contains(&format!("Bearer {SECRET}")), "{raw}");
    }
    // An HTTP/1.1 client offers another ALPN: its own connection.
    ok(
        &curl(&sluice, &ca, origin.port, "/c", &["--http1.1"]),
        &sluice,
    );
    wait_requests(&origin, 3);
    assert_eq!(origin.connections().0, 2, "{:?}", origin.lines());
    assert_events_valid(&sluice);
}

/// A kept-alive Python client connection through sluice's tunnel to the origin, sending the
/// credential placeholder: one request per path written to it, its status and body read back.
/// It stays open (idle) between requests.
struct KeptAlive {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl KeptAlive {
    fn open(sluice: &Sluice, ca: &Path, port: u16) -> KeptAlive {
        let script = format!(
            "import http.client, ssl, sys\nctx = ssl.create_default_context(cafile={ca:?})\nc = http.client.HTTPSConnection('127.0.0.1', {sport}, context=ctx, timeout=20)\nc.set_tunnel('127.0.0.1', {port})\nfor line in sys.stdin:\n    c.request('GET', line.strip(), headers={{'Authorization': 'Bearer openshell:resolve:env:TEST_API_KEY'}})\n    r = c.getresponse()\n    print(r.status, r.read().decode().strip(), flush=True)\n",
            ca = ca.display().to_string(),
            sport = sluice.addr().port(),
        );
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let out = BufReader::new(child.stdout.take().unwrap());
        KeptAlive { child, out }
    }

    /// `GET path` on this same client connection: "STATUS BODY".
    fn get(&mut self, path: &str) -> String {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{path}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }
}

impl Drop for KeptAlive {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_idle_client_connection_lends_its_upstream_to_the_next_client_and_takes_one_back() {
    let dir = TempDir::new("pool-idle-lend");
    let origin = Origin::start(&dir, 0.0);
    let (sluice, ca) = setup(&dir, &origin, "");
    let mut a = KeptAlive::open(&sluice, &ca, origin.port);
    assert_eq!(a.get("/a1"), "200 hello", "{}", sluice.stderr());
    // A stays connected and idle; B, the same caller, comes along.
    std::thread::sleep(Duration::from_millis(1000));
    {
        let mut b = KeptAlive::open(&sluice, &ca, origin.port);
        assert_eq!(b.get("/b"), "200 hello", "{}", sluice.stderr());
    }
    std::thread::sleep(Duration::from_millis(500));
    // A's next request on its same client connection.
    assert_eq!(a.get("/a2"), "200 hello", "{}", sluice.stderr());
    wait_requests(&origin, 3);
    let requests = origin.requests();
    let conn_of = |p: &str| requests.iter().find(|r| r.1 == p).unwrap().0;
    // B was served on the very upstream connection A used, and so was A again.
    assert_eq!(conn_of("/b"), conn_of("/a1"), "{requests:?}");
    assert_eq!(conn_of("/a2"), conn_of("/a1"), "{requests:?}");
    assert_eq!(origin.connections(), (1, 1), "{:?}", origin.lines());
    // Each request was judged, injected and audited on its own, with its destination.
    for (_, path, raw) in &requests {
        assert!(raw.contains(&format!("Bearer {SECRET}")), "{path}: {raw}");
    }
    for path in ["/a1", "/b", "/a2"] {
        let e = sluice.wait_event(path, |e| {
            class(e) == 4002 && e["http_request"]["url"]["path"] == path
        });
        assert_eq!(e["dst_endpoint"]["ip"], "127.0.0.1", "{e}");
        assert_eq!(e["dst_endpoint"]["port"], origin.port, "{e}");
        assert_eq!(audited(&sluice, path), 1);
    }
    assert_events_valid(&sluice);
}

#[test]
fn idle_connections_hold_no_more_upstreams_than_the_pool_keeps_and_none_reaches_another_caller() {
    let dir = TempDir::new("pool-idle-many");
    let origin = Origin::start(&dir, 0.0);
    let (sluice, ca) = setup(&dir, &origin, "");
    // One caller opens many kept-alive connections, each used once (with the credential),
    // then left idle.
    let mut held: Vec<KeptAlive> = (0..10)
        .map(|_| KeptAlive::open(&sluice, &ca, origin.port))
        .collect();
    for (i, c) in held.iter_mut().enumerate() {
        assert_eq!(c.get(&format!("/p{i}")), "200 hello", "{}", sluice.stderr());
    }
    wait_requests(&origin, 10);
    std::thread::sleep(Duration::from_millis(1500));
    // All ten client connections are still open; sluice keeps at most the pool's four
    // upstream connections for this caller and destination.
    let open = origin.open();
    assert!(
        open <= 4,
        "{open} upstream connections open: {:?}",
        origin.lines()
    );
    // Another caller (curl, no credential) never gets a connection that carried the first
    // caller's credential.
    ok(
        &curl(&sluice, &ca, origin.port, "/curl", &["--http1.1"]),
        &sluice,
    );
    // Every idle client connection still works.
    for (i, c) in held.iter_mut().enumerate() {
        assert_eq!(c.get(&format!("/q{i}")), "200 hello", "{}", sluice.stderr());
    }
    wait_requests(&origin, 21);
    let requests = origin.requests();
    let curl_conn = requests.iter().find(|r| r.1 == "/curl").unwrap().0;
    for (conn, path, raw) in &requests {
        if path == "/curl" {
            assert!(!raw.contains(SECRET), "{raw}");
        } else {
            assert!(raw.contains(&format!("Bearer {SECRET}")), "{path}: {raw}");
            assert_ne!(
                *conn, curl_conn,
                "{path} shared curl's connection: {requests:?}"
            );
        }
    }
    drop(held);
    assert_events_valid(&sluice);
}
