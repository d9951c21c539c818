//! End-to-end tests of method-override headers and the `_method` query parameter: a request
//! that names another method through them is judged as that method too, over HTTP/1.1 (plain
//! forward and inside an inspected tunnel) and HTTP/2, and refused when either is denied,
//! before anything reaches the origin. Real binary, real curl, local origins.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use sluice_e2e::ocsf::{action, class};
use sluice_e2e::origin::{H2Origin, HttpOrigin};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, run};

/// A policy for curl on `127.0.0.1:port`: GET anywhere, POST only under /items.
fn policy(port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /**}}\n          - allow: {{method: POST, path: /items/**}}\n    binaries:\n      - path: /usr/bin/curl\n"
    )
}

/// `curl -X POST` with `extra` arguments; returns (status, body).
fn post(sluice: &Sluice, ca: Option<&Path>, extra: &[&str], url: &str) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-s",
        "--max-time",
        "20",
        "-X",
        "POST",
        "-x",
        &sluice.proxy_url(),
    ]);
    if let Some(ca) = ca {
        cmd.arg("--cacert").arg(ca);
    }
    let (code, out, err) = run(cmd.args(["-w", "\n%{http_code}"]).args(extra).arg(url));
    assert_eq!(code, 0, "{err}\n{}", sluice.stderr());
    let (body, status) = out.rsplit_once('\n').unwrap();
    (status.parse().unwrap(), body.to_owned())
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
    // A form too large to read is refused where a method it named could be refused.
    let big_arg = format!("@{}", big.display());
    let args: Vec<&str> = extra
        .iter()
        .copied()
        .chain(["--data-binary", &big_arg])
        .collect();
    let (got, body) = post(sluice, ca, &args, &format!("{base}/items/big"));
    assert_eq!(got, 413, "{body}\n{}", sluice.stderr());
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"], "request_body_too_large", "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("_method"),
        "{body}"
    );
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
    let got = origin.received();
    let seen: Vec<String> = got
        .iter()
        .map(|r| r["url"].as_str().unwrap().to_string())
        .collect();
    let expected: Vec<&str> = PASSED.iter().chain(PASSED.iter()).copied().collect();
    assert_eq!(seen, expected, "{seen:?}");
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
