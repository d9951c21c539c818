//! End-to-end tests of `_method` members of JSON bodies (Laravel, Express's `method-override`
//! with a body getter): a `POST` whose top-level JSON object names another method is judged
//! as that method too, over HTTP/1.1 and HTTP/2 inside an inspected tunnel and on plain HTTP
//! forwarding, and refused as a form override is; the origin never receives the member.
//! Allowed overrides and other JSON pass byte for byte. Real binary, real curl, local origins.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::Path;

use serde_json::Value;
use sluice_e2e::ocsf::{action, class};
use sluice_e2e::origin::{HttpOrigin, RecordingOrigin};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, curl_post};

/// A policy for curl on `127.0.0.1:port`: GET anywhere, POST only under /items.
fn policy(port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /**}}\n          - allow: {{method: POST, path: /items/**}}\n    binaries:\n      - path: /usr/bin/curl\n"
    )
}

/// `curl -X POST` of the file `body` with `args` before it; returns (status, body).
fn post(
    sluice: &Sluice,
    ca: Option<&Path>,
    args: &[&str],
    body: &Path,
    url: &str,
) -> (u16, String) {
    let data = format!("@{}", body.display());
    let mut extra = args.to_vec();
    extra.extend(["--data-binary", &data]);
    curl_post(sluice, ca, &extra, url)
}

const JSON: &[&str] = &["-H", "Content-Type: application/json"];

/// One case: name (the path's last segment), curl arguments (its Content-Type), body, and
/// the refusal (status, error code) or `None` when it passes.
type Case = (
    &'static str,
    &'static [&'static str],
    Vec<u8>,
    Option<(u16, &'static str)>,
);

fn cases() -> Vec<Case> {
    let pad = "p".repeat(3 * 1024 * 1024);
    let denied = Some((403, "policy_denied"));
    let invalid = Some((400, "invalid_method_override"));
    vec![
        ("delete", JSON, br#"{"_method":"DELETE"}"#.to_vec(), denied),
        (
            "escaped",
            JSON,
            br#"{"a":[1,{"b":"}"}], "\u005fMETHOD" : "delete"}"#.to_vec(),
            denied,
        ),
        (
            "vnd",
            &[
                "-H",
                "Content-Type: application/vnd.api+json; charset=utf-8",
            ],
            br#"{"_method":"PUT"}"#.to_vec(),
            denied,
        ),
        // A POST without a Content-Type: read as a form and as JSON.
        (
            "untyped",
            &["-H", "Content-Type:"],
            br#"{"_method":"DELETE"}"#.to_vec(),
            denied,
        ),
        (
            "big-delete",
            JSON,
            format!(r#"{{"pad":"{pad}","_method":"DELETE"}}"#).into_bytes(),
            denied,
        ),
        // Refused at its first member, with megabytes still to come: the client, still
        // sending, must read the refusal all the same (HTTP/1.1 and HTTP/2).
        (
            "early-delete",
            JSON,
            format!(r#"{{"_method":"DELETE","pad":"{pad}"}}"#).into_bytes(),
            denied,
        ),
        // Duplicates: each is judged.
        (
            "twice",
            JSON,
            br#"{"_method":"GET","_method":"DELETE"}"#.to_vec(),
            denied,
        ),
        (
            "array",
            JSON,
            br#"{"_method":["DELETE"]}"#.to_vec(),
            invalid,
        ),
        (
            "spaced",
            JSON,
            br#"{"_method":"DEL ETE"}"#.to_vec(),
            invalid,
        ),
        // GET is allowed everywhere: the override passes, as do nested members and others.
        ("get", JSON, br#"{"_method":"get","a":1}"#.to_vec(), None),
        (
            "nested",
            JSON,
            br#"{"a":{"_method":"DELETE"},"b":["_method","DELETE"]}"#.to_vec(),
            None,
        ),
        (
            "plain",
            JSON,
            format!(r#"{{"pad":"{pad}","n":[1,2]}}"#).into_bytes(),
            None,
        ),
        (
            "big-get",
            JSON,
            format!(r#"{{"pad":"{pad}","_method":"GET"}}"#).into_bytes(),
            None,
        ),
    ]
}

/// Runs every case over `http` (curl arguments) against `base`, `tag` in each path.
fn check(sluice: &Sluice, ca: Option<&Path>, dir: &TempDir, base: &str, tag: &str, http: &[&str]) {
    for (name, ct, body, refusal) in cases() {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, &body).unwrap();
        let args: Vec<&str> = http.iter().chain(ct).copied().collect();
        let url = format!("{base}/items/{name}/{tag}");
        let (status, answer) = post(sluice, ca, &args, &file, &url);
        match refusal {
            Some((want, code)) => {
                assert_eq!(status, want, "{url}: {answer}\n{}", sluice.stderr());
                let answer: Value = serde_json::from_str(&answer).unwrap();
                assert_eq!(answer["error"], code, "{url}: {answer}");
                if want == 403 {
                    assert_eq!(answer["method_override"], "JSON member _method", "{answer}");
                    assert!(
                        answer["detail"].as_str().unwrap().contains(" as "),
                        "{answer}"
                    );
                }
            }
            None => assert_eq!(status, 200, "{url}: {answer}\n{}", sluice.stderr()),
        }
    }
}

/// The refused cases never delivered their member (nor a whole body); the others arrived
/// byte for byte. `got(path)` lists (complete, body) of what reached the origin for `path`.
fn check_origin(tag: &str, got: impl Fn(&str) -> Vec<(bool, Vec<u8>)>) {
    for (name, _, body, refusal) in cases() {
        let path = format!("/items/{name}/{tag}");
        let seen = got(&path);
        if refusal.is_some() {
            for (complete, b) in &seen {
                assert!(!complete, "{path}: the origin got a complete body");
                let text = String::from_utf8_lossy(b).to_ascii_lowercase();
                assert!(
                    !text.contains("method"),
                    "{path}: the origin saw the member"
                );
            }
        } else {
            assert_eq!(seen.len(), 1, "{path}");
            assert!(seen[0].0, "{path}");
            assert!(seen[0].1 == body, "{path}: the origin got other bytes");
        }
    }
}

#[test]
fn json_method_members_are_judged_in_inspected_tunnels_over_http1_and_http2() {
    let dir = TempDir::new("override-json");
    let origin = RecordingOrigin::start(dir.path());
    let port = origin.port();
    let (sluice, ca) = Sluice::intercepting(&dir, &policy(port), &[&origin.cert], None, &[]);
    let base = format!("https://127.0.0.1:{port}");
    check(&sluice, Some(&ca), &dir, &base, "h1", &["--http1.1"]);
    check(
        &sluice,
        Some(&ca),
        &dir,
        &base,
        "h1c",
        &["--http1.1", "-H", "Transfer-Encoding: chunked"],
    );
    check(&sluice, Some(&ca), &dir, &base, "h2", &["--http2"]);
    // Let cut-off requests be recorded.
    let _ = origin.received("/items/big-get/h2");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let all = origin.all();
    for tag in ["h1", "h1c", "h2"] {
        check_origin(tag, |path| {
            all.iter()
                .filter(|r| r.url == path)
                .map(|r| (r.complete, r.body.clone()))
                .collect()
        });
    }
    let denied = sluice.wait_event("JSON override denied", |e| {
        class(e) == 4002 && action(e) == 2 && e["http_request"]["url"]["path"] == "/items/delete/h2"
    });
    assert_eq!(denied["http_request"]["http_method"], "POST", "{denied}");
    assert_events_valid(&sluice);
}

#[test]
fn json_method_members_are_judged_on_plain_http_forwarding() {
    let dir = TempDir::new("override-json-h1");
    let origin = HttpOrigin::start();
    let sluice = Sluice::start(&policy(origin.port()), &["--allow-loopback-upstream"]);
    let base = format!("http://127.0.0.1:{}", origin.port());
    check(&sluice, None, &dir, &base, "plain", &[]);
    let got = origin.received();
    check_origin("plain", |path| {
        got.iter()
            .filter(|r| r.request_line == format!("POST {path} HTTP/1.1"))
            .map(|r| (true, r.body.clone()))
            .collect()
    });
    assert_events_valid(&sluice);
}
