//! End-to-end tests of request-body pacing: a body that trickles in (a byte at a time) is cut
//! off with `408 request_timeout` and an audit event, after about `--body-timeout`, while an
//! upload that keeps arriving at a modest rate for many times that long goes through. Over
//! HTTP/2 the same pace holds per stream: a trickling stream is answered 408 (or reset, once
//! its answer has begun) while other streams on the connection are served. Real binary, real
//! Python, curl and Node, local origins.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::process::Command;
use std::time::{Duration, Instant};

use sluice_e2e::ocsf::{action, class};
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{
    Sluice, TempDir, assert_events_valid, json_body, me, python, run, status_of,
};

fn policy(port: u16, binaries: &[&str]) -> String {
    let mut p = format!(
        "version: 1\nnetwork_policies:\n  local:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}}}\n    binaries:\n"
    );
    for b in binaries {
        p.push_str(&format!("      - path: {b}\n"));
    }
    p
}

/// Python that sends a POST head for a 1000-byte body through the proxy, then one byte every
/// 200 ms until the proxy answers; prints the answer.
fn trickle(proxy: std::net::SocketAddr, origin_port: u16) -> String {
    format!(
        r#"
import select, socket, sys
s = socket.create_connection(('{ip}', {port}))
s.sendall(b'POST http://127.0.0.1:{origin_port}/upload HTTP/1.1\r\nHost: 127.0.0.1:{origin_port}\r\nContent-Length: 1000\r\n\r\n')
answer = b''
for _ in range(1000):
    r, _, _ = select.select([s], [], [], 0.2)
    if r:
        break
    try:
        s.sendall(b'x')
    except OSError:
        break
while True:
    c = s.recv(65536)
    if not c:
        break
    answer += c
sys.stdout.write(answer.decode())
"#,
        ip = proxy.ip(),
        port = proxy.port()
    )
}

#[test]
fn a_trickling_body_gets_408_after_the_body_timeout() {
    let origin = HttpOrigin::start();
    let p = policy(origin.port(), &[&me(), &python()]);
    let sluice = Sluice::start(
        &p,
        &[
            "--allow-loopback-upstream",
            "--body-timeout",
            "2s",
            "--body-min-rate",
            "256",
        ],
    );
    let started = Instant::now();
    let (code, out, err) = run(Command::new("python3")
        .arg("-c")
        .arg(trickle(sluice.addr(), origin.port())));
    let took = started.elapsed();
    assert_eq!(code, 0, "{err}");
    assert_eq!(status_of(&out), 408, "{out}\n{}", sluice.stderr());
    let body = json_body(&out);
    assert_eq!(body["error"], "request_timeout", "{out}");
    assert!(
        body["detail"].as_str().unwrap().contains("too slow"),
        "{out}"
    );
    // About ten bytes in two seconds of waiting: cut after the 2 s silence budget, not after
    // the 200 s the whole body would take.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let event = sluice.wait_event("timed-out request", |e| class(e) == 4002 && action(e) == 2);
    assert_eq!(event["http_response"]["code"], 408, "{event}");
    assert_events_valid(&sluice);
}

#[test]
fn an_upload_at_a_modest_rate_outlasts_the_body_timeout() {
    let dir = TempDir::new("pace");
    let upload = dir.write("upload.bin", &"y".repeat(16 * 1024));
    let origin = HttpOrigin::start();
    let p = policy(origin.port(), &["/usr/bin/curl"]);
    let sluice = Sluice::start(&p, &["--allow-loopback-upstream", "--body-timeout", "2s"]);
    // 16 KiB at 4 KiB/s: about four seconds, twice the body timeout. (curl's rate limit sends in
    // bursts with pauses of up to about a second, so the timeout leaves room for one.)
    let started = Instant::now();
    let (code, out, err) = run(Command::new("curl")
        .args(["-s", "--max-time", "30", "-x", &sluice.proxy_url()])
        .args([
            "--limit-rate",
            "4K",
            "-w",
            "\n%{http_code}",
            "--data-binary",
        ])
        .arg(format!("@{}", upload.display()))
        .arg(format!("http://127.0.0.1:{}/echo", origin.port())));
    assert_eq!(code, 0, "{err}\n{}", sluice.stderr());
    assert!(out.ends_with("\n200"), "{out}\n{}", sluice.stderr());
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let received = origin.received();
    assert_eq!(received.last().unwrap().body.len(), 16 * 1024);
    assert_events_valid(&sluice);
}

/// A Node HTTP/2 client through sluice's CONNECT tunnel (TLS to sluice, its CA trusted): a
/// POST to `/upload` whose body either trickles a byte a second (`trickle`) or streams 24
/// blocks of 256 bytes, one every 250 ms (`steady`), or a trickle to `/early` (`early`),
/// which the origin answers before the body ends; then, on the same HTTP/2 connection, a
/// GET of `/ok/after`. Prints `upload status=S rst=R ms=T`, the upload's answer, and
/// `after status=S`.
const H2_CLIENT: &str = r#"
const http = require('http'), http2 = require('http2'), tls = require('tls'), fs = require('fs');
const [proxyHost, proxyPort, ca, originPort, mode] = process.argv.slice(1);
const started = Date.now();
const out = (s) => process.stdout.write(s + '\n');
setTimeout(() => { out('client gave up'); process.exit(2); }, 40000);
const connect = http.request({ host: proxyHost, port: Number(proxyPort), method: 'CONNECT', path: `127.0.0.1:${originPort}` });
connect.on('connect', (res, socket) => {
  if (res.statusCode !== 200) { out(`connect status=${res.statusCode}`); process.exit(1); }
  const session = http2.connect(`https://127.0.0.1:${originPort}`, {
    createConnection: () => tls.connect({ socket, host: '127.0.0.1', ALPNProtocols: ['h2'], ca: fs.readFileSync(ca) }),
  });
  session.on('error', (e) => out(`session error=${e.code || e.message}`));
  const path = mode === 'early' ? '/early' : '/upload';
  const req = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/octet-stream' });
  let status = 0, answer = '', timer = null, done = false;
  req.setEncoding('utf8');
  req.on('response', (h) => { status = h[':status']; });
  req.on('data', (c) => { answer += c; });
  req.on('error', (e) => out(`stream error=${e.code || e.message}`));
  req.on('close', () => {
    if (done) return;
    done = true;
    clearInterval(timer);
    out(`upload status=${status} rst=${req.rstCode} ms=${Date.now() - started}`);
    out(answer.trim());
    const after = session.request({ ':method': 'GET', ':path': '/ok/after' });
    after.on('response', (h) => { out(`after status=${h[':status']}`); });
    after.on('error', (e) => out(`after error=${e.code || e.message}`));
    after.resume();
    after.on('close', () => { session.close(); process.exit(0); });
  });
  if (mode === 'trickle' || mode === 'early') {
    timer = setInterval(() => { if (!req.destroyed && !req.writableEnded) req.write('x'); }, 1000);
  } else {
    let left = 24;
    timer = setInterval(() => {
      if (left-- > 0) req.write(Buffer.alloc(256, 121));
      else { clearInterval(timer); req.end(); }
    }, 250);
  }
});
connect.on('error', (e) => { out(`connect error=${e.message}`); process.exit(1); });
connect.end();
"#;

/// sluice intercepting HTTP/2 for an origin with `--body-timeout 2s`, and the Node client
/// above run in `mode`: its output and how long it took.
fn h2_upload(mode: &str) -> (sluice_e2e::origin::H2Origin, Sluice, String, Duration) {
    let dir = TempDir::new("h2pace");
    let origin = sluice_e2e::origin::H2Origin::start(dir.path());
    let (ca_dir_path, node) = (
        dir.path().join("ca"),
        sluice_e2e::proxy::realpath("/usr/bin/node"),
    );
    let p = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /ok/**}}\n          - allow: {{method: POST, path: /upload}}\n          - allow: {{method: POST, path: /early}}\n    binaries:\n      - path: {node}\n",
        origin.port()
    );
    let mut args = vec![
        "--allow-loopback-upstream".to_string(),
        "--ca-dir".to_string(),
        ca_dir_path.display().to_string(),
        "--upstream-ca".to_string(),
        origin.cert.display().to_string(),
    ];
    args.extend(["--body-timeout", "2s", "--body-min-rate", "256"].map(String::from));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let sluice = Sluice::start(&p, &refs);
    let started = Instant::now();
    let (code, out, err) = run(Command::new(&node)
        .arg("-e")
        .arg(H2_CLIENT)
        .arg(sluice.addr().ip().to_string())
        .arg(sluice.addr().port().to_string())
        .arg(ca_dir_path.join("ca.pem"))
        .arg(origin.port().to_string())
        .arg(mode));
    let took = started.elapsed();
    assert_eq!(code, 0, "{out}\n{err}\n{}", sluice.stderr());
    // `dir` holds the CA and the origin's log: keep it as long as the test runs.
    std::mem::forget(dir);
    (origin, sluice, out, took)
}

#[test]
fn a_trickling_http2_body_gets_408_on_its_stream_and_the_connection_goes_on() {
    let (origin, sluice, out, took) = h2_upload("trickle");
    assert!(
        out.contains("upload status=408"),
        "{out}\n{}",
        sluice.stderr()
    );
    assert!(out.contains("\"error\":\"request_timeout\""), "{out}");
    assert!(out.contains("too slow"), "{out}");
    // Cut after the 2 s budget (a few bytes in), not after the upstream timeout or the
    // 1000 s the client would trickle for.
    assert!(took < Duration::from_secs(10), "took {took:?}\n{out}");
    // The other stream on the same connection is served.
    assert!(
        out.contains("after status=200"),
        "{out}\n{}",
        sluice.stderr()
    );
    // The origin's upload stream was reset, never ended; the GET reached it.
    let received = origin.received();
    let upload = received.iter().find(|r| r["url"] == "/upload").unwrap();
    assert_eq!(upload["aborted"], true, "{received:?}");
    assert!(
        received.iter().any(|r| r["url"] == "/ok/after"),
        "{received:?}"
    );
    let event = sluice.wait_event("timed-out HTTP/2 request", |e| {
        class(e) == 4002 && action(e) == 2 && e["http_response"]["code"] == 408
    });
    assert!(event.to_string().contains("too slow"), "{event}");
    assert_events_valid(&sluice);
}

#[test]
fn a_steady_http2_upload_outlasts_the_body_timeout() {
    let (origin, sluice, out, took) = h2_upload("steady");
    // 6 KiB at 1 KiB/s: about six seconds, three times the body timeout.
    assert!(
        out.contains("upload status=200"),
        "{out}\n{}",
        sluice.stderr()
    );
    assert!(out.contains("body=6144"), "{out}");
    assert!(took >= Duration::from_secs(5), "{took:?}");
    assert!(out.contains("after status=200"), "{out}");
    let received = origin.received();
    let upload = received.iter().find(|r| r["url"] == "/upload").unwrap();
    assert_eq!(upload["body"].as_str().unwrap().len(), 6144);
    assert_eq!(upload["aborted"], false, "{upload}");
    assert!(
        sluice
            .events()
            .iter()
            .all(|e| e["http_response"]["code"] != 408),
        "{:?}",
        sluice.events()
    );
    assert_events_valid(&sluice);
}

#[test]
fn a_trickling_http2_body_after_an_early_answer_is_cut_by_its_pace() {
    let (origin, sluice, out, took) = h2_upload("early");
    // The answer began, so the stream is reset rather than answered 408; within the pace,
    // not the idle timeout.
    assert!(
        out.contains("upload status=200"),
        "{out}\n{}",
        sluice.stderr()
    );
    assert!(out.contains("stream error="), "{out}");
    assert!(!out.contains("rst=0 "), "{out}");
    assert!(out.contains("early"), "{out}");
    assert!(!out.contains("body="), "{out}");
    assert!(took < Duration::from_secs(10), "took {took:?}\n{out}");
    assert!(
        out.contains("after status=200"),
        "{out}\n{}",
        sluice.stderr()
    );
    let received = origin.received();
    let early = received.iter().find(|r| r["url"] == "/early").unwrap();
    assert_eq!(early["aborted"], true, "{received:?}");
    assert_events_valid(&sluice);
}
