//! End-to-end tests of request-body pacing: a body that trickles in (a byte at a time) is cut
//! off with `408 request_timeout` and an audit event, after about `--body-timeout`, while an
//! upload that keeps arriving at a modest rate for many times that long goes through.
//! Real binary, real Python and curl, a local origin.
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
    let upload = dir.write("upload.bin", &"y".repeat(12 * 1024));
    let origin = HttpOrigin::start();
    let p = policy(origin.port(), &["/usr/bin/curl"]);
    let sluice = Sluice::start(&p, &["--allow-loopback-upstream", "--body-timeout", "1s"]);
    // 12 KiB at 3 KiB/s: about four seconds, four times the body timeout.
    let started = Instant::now();
    let (code, out, err) = run(Command::new("curl")
        .args(["-s", "--max-time", "30", "-x", &sluice.proxy_url()])
        .args([
            "--limit-rate",
            "3K",
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
    assert_eq!(received.last().unwrap().body.len(), 12 * 1024);
    assert_events_valid(&sluice);
}
