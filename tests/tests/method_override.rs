//! End-to-end tests of method-override headers and the `_method` query parameter: a request
//! that names another method through them is judged as that method too, over HTTP/1.1 (plain
//! forward and inside an inspected tunnel) and HTTP/2, and refused when either is denied,
//! before anything reaches the origin. Real binary, real curl, local origins.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::Path;

use serde_json::Value;
use sluice_e2e::ocsf::{action, class};
use sluice_e2e::origin::{H2Origin, HttpOrigin, RecordingOrigin};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, curl_post as post};

/// A policy for curl on `127.0.0.1:port`: GET anywhere, POST only under /items.
fn policy(port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /**}}\n          - allow: {{method: POST, path: /items/**}}\n    binaries:\n      - path: /usr/bin/curl\n"
    )
}

/// The overrides every transport must judge: (curl arguments, path, status, error code).
const CASES: &[(&[&str], &str, u16, Option<&str>)] = &[
    (
        &["-H", "X-HTTP-Method-Override: DELETE"],
        "/items/1",
        403,
        Some("policy_denied"),
    ),
    (
        &["-H", "X-HTTP-Method: delete"],
        "/items/2",
        403,
        Some("policy_denied"),
    ),
    (
        &["-H", "X-Method-Override: GET, PUT"],
        "/items/3",
        403,
        Some("policy_denied"),
    ),
    (&[], "/items/4?_method=DELETE", 403, Some("policy_denied")),
    (
        &["-H", "X-HTTP-Method-Override: DEL ETE"],
        "/items/5",
        400,
        Some("invalid_method_override"),
    ),
    // GET is allowed on every path, so POST-as-GET passes where POST does.
    (
        &["-H", "X-HTTP-Method-Override: GET"],
        "/items/6",
        200,
        None,
    ),
    // The request line's method is still judged: POST-as-GET outside /items is refused.
    (
        &["-H", "X-HTTP-Method-Override: GET"],
        "/other",
        403,
        Some("policy_denied"),
    ),
];

fn check_cases(sluice: &Sluice, ca: Option<&Path>, base: &str, extra: &[&str]) {
    for (args, path, status, error) in CASES {
        let args: Vec<&str> = extra.iter().chain(args.iter()).copied().collect();
        let (got, body) = post(sluice, ca, &args, &format!("{base}{path}"));
        assert_eq!(got, *status, "{args:?} {path}: {body}\n{}", sluice.stderr());
        if let Some(error) = error {
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["error"], *error, "{args:?} {path}: {body}");
            if *status == 403 && !path.ends_with("/other") {
                assert!(body["method_override"].is_string(), "{body}");
                assert!(body["detail"].as_str().unwrap().contains(" as "), "{body}");
            }
        }
    }
}

#[test]
fn overrides_are_judged_on_plain_http_forwarding() {
    let origin = HttpOrigin::start();
    let sluice = Sluice::start(&policy(origin.port()), &["--allow-loopback-upstream"]);
    check_cases(
        &sluice,
        None,
        &format!("http://127.0.0.1:{}", origin.port()),
        &[],
    );
    // Only the two allowed requests reached the origin.
    let paths: Vec<String> = origin
        .received()
        .iter()
        .map(|r| r.request_line.clone())
        .collect();
    assert_eq!(paths, ["POST /items/6 HTTP/1.1"], "{paths:?}");
    let denied = sluice.wait_event("override denied", |e| class(e) == 4002 && action(e) == 2);
    assert_eq!(denied["http_request"]["http_method"], "POST", "{denied}");
    assert_events_valid(&sluice);
}

#[test]
fn overrides_are_judged_in_inspected_tunnels_over_http1_and_http2() {
    let dir = TempDir::new("override");
    let origin = H2Origin::start(dir.path());
    let (sluice, ca) =
        Sluice::intercepting(&dir, &policy(origin.port()), &[&origin.cert], None, &[]);
    let base = format!("https://127.0.0.1:{}", origin.port());
    check_cases(&sluice, Some(&ca), &base, &["--http1.1"]);
    check_cases(&sluice, Some(&ca), &base, &["--http2"]);
    let seen: Vec<String> = origin
        .received()
        .iter()
        .map(|r| format!("{} {}", r["method"], r["url"]))
        .collect();
    assert_eq!(
        seen,
        ["\"POST\" \"/items/6\"", "\"POST\" \"/items/6\""],
        "{seen:?}"
    );
    assert_events_valid(&sluice);
}

/// One form case: curl arguments, path, status, error code, where the override was found.
type FormCase = (
    &'static [&'static str],
    &'static str,
    u16,
    Option<&'static str>,
    Option<&'static str>,
);

/// `_method` fields of form bodies every transport must judge.
const FORM_CASES: &[FormCase] = &[
    (
        &["-d", "_method=DELETE"],
        "/items/10",
        403,
        Some("policy_denied"),
        Some("form field _method"),
    ),
    // Percent-encoded name, a lower-case value after other fields.
    (
        &["-d", "a=1&%5Fmethod=delete"],
        "/items/11",
        403,
        Some("policy_denied"),
        Some("form field _method"),
    ),
    // PHP reads `.method` as `_method`.
    (
        &["-d", ".method=PUT"],
        "/items/12",
        403,
        Some("policy_denied"),
        Some("form field _method"),
    ),
    // A POST without a Content-Type is a form to Rack.
    (
        &["-H", "Content-Type:", "-d", "_method=DELETE"],
        "/items/13",
        403,
        Some("policy_denied"),
        Some("form field _method"),
    ),
    // A chunked body is read the same.
    (
        &[
            "-H",
            "Transfer-Encoding: chunked",
            "-d",
            "a=1&_method=DELETE",
        ],
        "/items/20",
        403,
        Some("policy_denied"),
        Some("form field _method"),
    ),
    (
        &["-F", "a=b", "-F", "_method=DELETE"],
        "/items/14",
        403,
        Some("policy_denied"),
        Some("multipart field _method"),
    ),
    (
        &["-d", "_method=DEL+ETE"],
        "/items/15",
        400,
        Some("invalid_method_override"),
        None,
    ),
    // A compressed form cannot be read, so it cannot go where some method is refused.
    (
        &["-H", "Content-Encoding: gzip", "-d", "_method=GET"],
        "/items/16",
        415,
        Some("form_body_encoded"),
        None,
    ),
    // Allowed: GET is allowed everywhere; a body that is not a form is not read.
    (&["-d", "_method=GET&a=1"], "/items/17", 200, None, None),
    (
        &["-F", "_method=get", "-F", "a=b"],
        "/items/18",
        200,
        None,
        None,
    ),
    (
        &["-H", "Content-Type: text/plain", "-d", "_method=DELETE"],
        "/items/19",
        200,
        None,
        None,
    ),
];

fn check_form_cases(sluice: &Sluice, ca: Option<&Path>, base: &str, extra: &[&str], big: &Path) {
    for (args, path, status, error, found_in) in FORM_CASES {
        let args: Vec<&str> = extra.iter().chain(args.iter()).copied().collect();
        let (got, body) = post(sluice, ca, &args, &format!("{base}{path}"));
        assert_eq!(got, *status, "{args:?} {path}: {body}\n{}", sluice.stderr());
        if let Some(error) = error {
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["error"], *error, "{args:?} {path}: {body}");
            if let Some(found_in) = found_in {
                assert_eq!(body["method_override"], *found_in, "{body}");
                assert!(body["detail"].as_str().unwrap().contains(" as "), "{body}");
            }
        }
    }
    // A form larger than sluice ever buffers is streamed, its last field still judged.
    let big_arg = format!("@{}", big.display());
    let args: Vec<&str> = extra
        .iter()
        .copied()
        .chain(["--data-binary", &big_arg])
        .collect();
    let (got, body) = post(sluice, ca, &args, &format!("{base}/items/big"));
    assert_eq!(got, 403, "{body}\n{}", sluice.stderr());
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"], "policy_denied", "{body}");
    assert_eq!(body["method_override"], "form field _method", "{body}");
}

/// A form of more than 256 KiB whose last field names DELETE.
fn big_form(dir: &TempDir) -> std::path::PathBuf {
    dir.write(
        "big.form",
        &format!("pad={}&_method=DELETE", "p".repeat(300 * 1024)),
    )
}

/// The form bodies that reached the origin: (request line or method and path, body).
const PASSED: [&str; 3] = ["/items/17", "/items/18", "/items/19"];

#[test]
fn form_method_fields_are_judged_on_plain_http_forwarding() {
    let dir = TempDir::new("override-form-h1");
    let origin = HttpOrigin::start();
    let sluice = Sluice::start(&policy(origin.port()), &["--allow-loopback-upstream"]);
    let base = format!("http://127.0.0.1:{}", origin.port());
    check_form_cases(&sluice, None, &base, &[], &big_form(&dir));
    let got = origin.received();
    let seen: Vec<&str> = got.iter().map(|r| r.request_line.as_str()).collect();
    let expected: Vec<String> = PASSED
        .iter()
        .map(|p| format!("POST {p} HTTP/1.1"))
        .collect();
    assert_eq!(seen, expected, "{seen:?}");
    // Bodies read whole go upstream unchanged.
    assert_eq!(got[0].body, b"_method=GET&a=1");
    assert!(String::from_utf8_lossy(&got[1].body).contains("name=\"_method\""));
    let denied = sluice.wait_event("form override denied", |e| {
        class(e) == 4002 && action(e) == 2 && e["http_request"]["url"]["path"] == "/items/14"
    });
    assert_eq!(denied["http_request"]["http_method"], "POST", "{denied}");
    assert_events_valid(&sluice);
}

#[test]
fn form_method_fields_are_judged_in_inspected_tunnels_over_http1_and_http2() {
    let dir = TempDir::new("override-form");
    let origin = H2Origin::start(dir.path());
    let (sluice, ca) =
        Sluice::intercepting(&dir, &policy(origin.port()), &[&origin.cert], None, &[]);
    let base = format!("https://127.0.0.1:{}", origin.port());
    let big = big_form(&dir);
    check_form_cases(&sluice, Some(&ca), &base, &["--http1.1"], &big);
    check_form_cases(&sluice, Some(&ca), &base, &["--http2"], &big);
    // A refused form's request may have begun upstream (its body streams), but was cut off
    // before its end and before the `_method` field.
    let got = origin.received();
    for r in got.iter().filter(|r| r["aborted"] == true) {
        assert!(!r["body"].as_str().unwrap().contains("method"), "{r}");
    }
    let seen: Vec<String> = got
        .iter()
        .filter(|r| r["aborted"] != true)
        .map(|r| r["url"].as_str().unwrap().to_string())
        .collect();
    let expected: Vec<&str> = PASSED.iter().chain(PASSED.iter()).copied().collect();
    assert_eq!(seen, expected, "{got:?}");
    for r in got.iter().filter(|r| r["url"] == "/items/17") {
        assert_eq!(r["body"], "_method=GET&a=1", "{r}");
    }
    assert_events_valid(&sluice);
}

#[test]
fn form_bodies_pass_unread_where_no_method_is_refused() {
    let dir = TempDir::new("override-form-open");
    let origin = H2Origin::start(dir.path());
    let open = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: \"*\", path: /**}}\n    binaries:\n      - path: /usr/bin/curl\n",
        origin.port()
    );
    let (sluice, ca) = Sluice::intercepting(&dir, &open, &[&origin.cert], None, &[]);
    let base = format!("https://127.0.0.1:{}", origin.port());
    let big_arg = format!("@{}", big_form(&dir).display());
    for http in ["--http1.1", "--http2"] {
        for args in [
            &[http, "--data-binary", big_arg.as_str()][..],
            &[http, "-H", "Content-Encoding: gzip", "-d", "_method=DELETE"],
        ] {
            let (got, body) = post(&sluice, Some(&ca), args, &format!("{base}/open"));
            assert_eq!(got, 200, "{args:?}: {body}");
        }
    }
    assert_eq!(origin.received().len(), 4);
}

/// A 3 MiB multipart body (boundary `sluice-test-boundary`): a file part of pseudo-random
/// bytes (CR, LF and `--` included, never a delimiter), then an optional `_method` part.
fn big_multipart(method: Option<&str>) -> Vec<u8> {
    let mut body = b"--sluice-test-boundary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"upload.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n".to_vec();
    let mut x: u32 = 0x2545_f491;
    for _ in 0..3 * 1024 * 1024 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        body.push(match x % 7 {
            0 => b'\r',
            1 => b'\n',
            2 => b'-',
            _ => (x >> 8) as u8,
        });
    }
    if let Some(m) = method {
        body.extend_from_slice(b"\r\n--sluice-test-boundary\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\n");
        body.extend_from_slice(m.as_bytes());
    }
    body.extend_from_slice(b"\r\n--sluice-test-boundary--\r\n");
    body
}

/// `curl -X POST` of the file at `body` with `content_type` over `http` (`--http1.1`,
/// `--http2`), `extra` arguments after; returns (status, body).
fn upload(
    sluice: &Sluice,
    ca: &Path,
    http: &str,
    content_type: &str,
    body: &Path,
    extra: &[&str],
    url: &str,
) -> (u16, String) {
    let data = format!("@{}", body.display());
    let ct = format!("Content-Type: {content_type}");
    let args: Vec<&str> = [http, "-H", &ct, "--data-binary", &data]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    post(sluice, Some(ca), &args, url)
}

#[test]
fn large_forms_stream_and_a_denied_method_field_never_reaches_the_origin() {
    let dir = TempDir::new("override-stream");
    let origin = RecordingOrigin::start(dir.path());
    let port = origin.port();
    let (sluice, ca) = Sluice::intercepting(&dir, &policy(port), &[&origin.cert], None, &[]);
    let base = format!("https://127.0.0.1:{port}");
    let multipart = "multipart/form-data; boundary=sluice-test-boundary";
    let urlencoded = "application/x-www-form-urlencoded";
    let pad = "p".repeat(3 * 1024 * 1024);
    let bodies = [
        ("none", multipart, big_multipart(None)),
        ("get", multipart, big_multipart(Some("GET"))),
        ("delete", multipart, big_multipart(Some("DELETE"))),
        (
            "form-get",
            urlencoded,
            format!("pad={pad}&_method=GET&a=1").into_bytes(),
        ),
        (
            "form-delete",
            urlencoded,
            format!("pad={pad}&_method=DELETE").into_bytes(),
        ),
    ];
    for http in ["--http1.1", "--http2"] {
        // Over HTTP/1.1 also chunked, and with `Expect: 100-continue`.
        let framings: &[&[&str]] = if http == "--http1.1" {
            &[
                &[],
                &["-H", "Transfer-Encoding: chunked"],
                &["-H", "Expect: 100-continue"],
            ]
        } else {
            &[&[]]
        };
        for (f, extra) in framings.iter().enumerate() {
            for (name, content_type, body) in &bodies {
                let file = dir.path().join(format!("{name}.body"));
                std::fs::write(&file, body).unwrap();
                let url = format!("/items/{name}/{}{f}", &http[2..]);
                let (status, answer) = upload(
                    &sluice,
                    &ca,
                    http,
                    content_type,
                    &file,
                    extra,
                    &format!("{base}{url}"),
                );
                let got = origin.received(&url);
                if name.ends_with("delete") {
                    assert_eq!(
                        status,
                        403,
                        "{url} {extra:?}: {answer}\n{}",
                        sluice.stderr()
                    );
                    let answer: Value = serde_json::from_str(&answer).unwrap();
                    assert_eq!(answer["error"], "policy_denied", "{answer}");
                    let found_in = if content_type == &multipart {
                        "multipart field _method"
                    } else {
                        "form field _method"
                    };
                    assert_eq!(answer["method_override"], found_in, "{answer}");
                    // The request began upstream (its body streamed) and was cut off: the
                    // origin never saw the whole body, nor the `_method` field.
                    assert_eq!(got.len(), 1, "{url}");
                    for r in &got {
                        assert!(!r.complete, "{url}: the origin got a complete body");
                        assert!(r.body.len() < body.len(), "{url}");
                        let text = String::from_utf8_lossy(&r.body);
                        assert!(!text.contains("_method"), "{url}: the origin saw _method");
                    }
                } else {
                    assert_eq!(
                        status,
                        200,
                        "{url} {extra:?}: {answer}\n{}",
                        sluice.stderr()
                    );
                    assert_eq!(got.len(), 1, "{url}");
                    assert!(got[0].complete, "{url}");
                    assert_eq!(got[0].url, url);
                    assert!(got[0].body == *body, "{url}: the origin got other bytes");
                }
            }
        }
    }
    let denied = sluice.wait_event("streamed form override denied", |e| {
        class(e) == 4002
            && action(e) == 2
            && e["http_request"]["url"]["path"] == "/items/delete/http20"
    });
    assert_eq!(denied["http_request"]["http_method"], "POST", "{denied}");
    assert_events_valid(&sluice);
}
