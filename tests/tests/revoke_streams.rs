//! End to end: a reload that revokes a connection closes it even while a response streams:
//! an HTTP/2 connection with a streaming response (Node origin), and a forwarded WebSocket.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use sluice_e2e::origin::{OriginProcess, STREAMER, WS_ECHO, streaming_origin};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, me, python};
use sluice_e2e::reload::{
    PROMPTLY, closed_within, inspected_entry, l4_entry, lines_of, policy, read_head, reload_to,
    revoked_close,
};

#[test]
fn an_http2_connection_with_a_streaming_response_is_closed_when_revoked() {
    let dir = TempDir::new("revoke-h2");
    let (origin, ca_cert) = streaming_origin(dir.path());
    let port = origin.port;
    let py = python();
    let ca_dir = dir.path().join("ca");
    let sluice = Sluice::start(
        &policy(&[inspected_entry(port, &["/**"], &py)]),
        &[
            "--allow-loopback-upstream",
            "--ca-dir",
            ca_dir.to_str().unwrap(),
            "--upstream-ca",
            ca_cert.to_str().unwrap(),
        ],
    );
    let mut client = Command::new("python3")
        .arg("-c")
        .arg(STREAMER)
        .arg(sluice.proxy_url())
        .arg(ca_dir.join("ca.pem"))
        .arg(format!("https://127.0.0.1:{port}"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let lines = lines_of(client.stdout.take().unwrap());
    let next = || {
        lines
            .recv_timeout(Duration::from_secs(30))
            .expect("no line")
    };
    assert_eq!(next(), "STATUS 200 HTTP/2", "{}", sluice.stderr());
    assert_eq!(next(), "line 0");
    assert_eq!(next(), "line 1");

    reload_to(&sluice, &policy(&[l4_entry("other", 9, &[&py])]), 2);
    let started = Instant::now();
    let end = loop {
        let line = lines
            .recv_timeout(PROMPTLY)
            .expect("the stream did not end after the revocation");
        if line.starts_with("END") {
            break line;
        }
        assert!(started.elapsed() < PROMPTLY, "still streaming: {line}");
    };
    assert_ne!(end, "END complete", "the stream ended as if complete");
    // The upstream stream ended too: nothing keeps streaming behind the closed connection.
    let deadline = Instant::now() + PROMPTLY;
    let closed = || std::fs::read_to_string(dir.path().join("closed.txt")).unwrap_or_default();
    while closed().is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(closed(), "closed\n", "the upstream stream is still open");
    revoked_close(
        &sluice,
        port,
        &format!("entry api no longer allows CONNECT 127.0.0.1:{port}"),
    );
    let _ = client.kill();
    let _ = client.wait();
    assert_events_valid(&sluice);
}

#[test]
fn a_forwarded_websocket_is_closed_when_revoked() {
    let server = OriginProcess::spawn(
        Command::new("python3").args(["-c", WS_ECHO]),
        "the WebSocket echo (python)",
    );
    let port = server.port;
    let me = me();
    let entry = format!(
        "  ws:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}, protocol: rest, enforcement: enforce, rules: [{{allow: {{method: GET, path: /ws}}}}]}}\n    binaries:\n      - path: {me}\n"
    );
    let sluice = Sluice::start(&policy(&[entry]), &["--allow-loopback-upstream"]);
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    write!(
        s,
        "GET http://127.0.0.1:{port}/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(b"ping").unwrap();
    let mut back = [0u8; 4];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping");

    reload_to(&sluice, &policy(&[l4_entry("other", 9, &[&me])]), 2);
    assert!(
        closed_within(&mut s).is_some(),
        "the WebSocket is still open after its revocation"
    );
    let close = revoked_close(
        &sluice,
        port,
        &format!("entry ws no longer allows requests to 127.0.0.1:{port}"),
    );
    assert_eq!(close["firewall_rule"]["name"], "ws", "{close:#}");
    assert_events_valid(&sluice);
}
