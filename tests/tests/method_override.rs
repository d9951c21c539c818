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
