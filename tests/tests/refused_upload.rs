//! End-to-end tests of a refusal sent while the client is still sending its body: sluice reads
//! and drops what is left (at most 1 MiB, within 2 s), so the client reads the refusal
//! rather than a reset: over HTTP/2 before it answers (else the stream is reset under the
//! client, curl's exit 92), over HTTP/1.1 after it answers and before it closes (else the
//! kernel resets the connection for the unread bytes, and the answer may be lost with it,
//! curl's exit 55 or 56). Real binary, real curl and an HTTP/2 client (node) that paces its
//! body.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::process::Command;

use serde_json::Value;
use sluice_e2e::h2client::{self, H2Request};
use sluice_e2e::origin::RecordingOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, run};

/// POST only under /items, for curl and node: a POST elsewhere is refused on its head.
fn policy(port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: POST, path: /items/**}}\n    binaries:\n      - path: /usr/bin/curl\n      - path: {}\n",
        h2client::node_path()
    )
}

#[test]
fn a_client_still_sending_its_body_reads_the_refusal_over_http2() {
    let dir = TempDir::new("h2-refusal");
    let origin = RecordingOrigin::start(dir.path());
    let (sluice, ca) =
        Sluice::intercepting(&dir, &policy(origin.port()), &[&origin.cert], None, &[]);
    // 768 KiB in 16 KiB frames, 20 ms apart: the stream is refused on its head, about a
    // second before its body ends.
    let body = vec![b'x'; 768 * 1024];
    let cuts: Vec<usize> = (1..48).map(|i| i * 16 * 1024).collect();
    let slow = H2Request {
        path: "/other".to_string(),
        content_type: "application/octet-stream".to_string(),
        body: body.clone(),
        cuts,
        pause_ms: 20,
    };
    let answers = h2client::send(sluice.addr(), origin.port(), &ca, dir.path(), &[slow]);
    let a = &answers[0];
    assert_eq!(a.status, 403, "{a:?}\n{}", sluice.stderr());
    assert_eq!(a.error, None, "the stream ended in an error: {a:?}");
    // The stream was not closed under the client: it sent its whole body (sluice read it)
    // and then read the answer.
    assert_eq!(a.sent, body.len(), "{a:?}");
    let json: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(json["error"], "policy_denied", "{json}");

    // curl, its upload held to 512 KiB/s.
    let file = dir.path().join("upload.bin");
    std::fs::write(&file, &body).unwrap();
    let (code, out, err) = run(Command::new("curl")
        .args([
            "-s",
            "--http2",
            "--max-time",
            "20",
            "--limit-rate",
            "512k",
            "-x",
        ])
        .arg(sluice.proxy_url())
        .arg("--cacert")
        .arg(&ca)
        .args(["-w", "\n%{http_code}", "-X", "POST", "--data-binary"])
        .arg(format!("@{}", file.display()))
        .arg(format!("https://127.0.0.1:{}/other", origin.port())));
    assert_eq!(code, 0, "curl: {err}\n{}", sluice.stderr());
    let (answer, status) = out.rsplit_once('\n').unwrap();
    assert_eq!(status, "403", "{answer}");
    assert!(
        origin.all().is_empty(),
        "a refused stream reached the origin"
    );
}

#[test]
fn a_client_still_sending_its_body_reads_the_refusal_over_http1_1() {
    let dir = TempDir::new("h1-refusal");
    let origin = RecordingOrigin::start(dir.path());
    let (sluice, ca) =
        Sluice::intercepting(&dir, &policy(origin.port()), &[&origin.cert], None, &[]);
    let file = dir.path().join("upload.bin");
    std::fs::write(&file, vec![b'x'; 4 << 20]).unwrap();
    for _ in 0..10 {
        // The head is refused at once; the body is still coming.
        let (code, out, err) = run(Command::new("curl")
            .args(["-s", "--http1.1", "--max-time", "20", "-x"])
            .arg(sluice.proxy_url())
            .arg("--cacert")
            .arg(&ca)
            // No `Expect: 100-continue`: the body follows the head at once.
            .args(["-H", "Expect:", "-w", "\n%{http_code}", "-X", "POST"])
            .arg("--data-binary")
            .arg(format!("@{}", file.display()))
            .arg(format!("https://127.0.0.1:{}/other", origin.port())));
        assert_eq!(code, 0, "curl: {err}\n{}", sluice.stderr());
        let (answer, status) = out.rsplit_once('\n').unwrap();
        assert_eq!(status, "403", "{answer}");
        let json: Value = serde_json::from_str(answer).unwrap();
        assert_eq!(json["error"], "policy_denied", "{json}");
    }
    assert!(
        origin.all().is_empty(),
        "a refused request reached the origin"
    );
}
