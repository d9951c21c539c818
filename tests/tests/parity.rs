//! HTTP/1.1 and HTTP/2 inside an inspected tunnel get the same treatment: L7 decisions,
//! credential injection, the body guard, opt-in body rewriting, refusal bodies and audit
//! records (request and response bytes, written when the exchange ends). One test body,
//! run once per protocol with curl `--http1.1` and `--http2` against a TLS origin that
//! speaks both; the origin's answer names the protocol it was reached over, so each run
//! proves it used the protocol it claims. And an IPv6-literal tunnel works over both.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use sluice_e2e::ocsf::class;
use sluice_e2e::origin::H2Origin;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, run};

const SECRET: &str = "s3cr3t-PARITY-41d2e8";
const PLACEHOLDER: &str = "openshell:resolve:env:TEST_API_KEY";

/// The protocol curl speaks to the origin through the tunnel.
#[derive(Clone, Copy, Debug)]
enum Http {
    H1,
    H2,
}

impl Http {
    fn flag(self) -> &'static str {
        match self {
            Http::H1 => "--http1.1",
            Http::H2 => "--http2",
        }
    }

    /// curl's `%{http_version}`.
    fn curl_version(self) -> &'static str {
        match self {
            Http::H1 => "1.1",
            Http::H2 => "2",
        }
    }

    /// What the origin reports as `proto=` (Node's `httpVersion`).
    fn origin_version(self) -> &'static str {
        match self {
            Http::H1 => "1.1",
            Http::H2 => "2.0",
        }
    }
}

/// One curl exchange through sluice: (status, curl's HTTP version, body).
fn curl(
    sluice: &Sluice,
    ca: &Path,
    http: Http,
    extra: &[&str],
    url: &str,
) -> (u16, String, String) {
    let (code, out, err) = run(Command::new("curl")
        .args(["-s", "--max-time", "20", http.flag(), "--cacert"])
        .arg(ca)
        .args([
            "-x",
            &sluice.proxy_url(),
            "-w",
            "\n%{http_code} %{http_version}",
        ])
        .args(extra)
        .arg(url));
    assert_eq!(code, 0, "curl {url}: {out}\n{err}\n{}", sluice.stderr());
    let (body, tail) = out.rsplit_once('\n').unwrap();
    let (status, version) = tail.split_once(' ').unwrap();
    (
        status.parse().unwrap(),
        version.to_string(),
        body.to_string(),
    )
}

/// The HTTP Activity event of the request to `path`, waited for.
fn request_event(sluice: &Sluice, path: &str) -> Value {
    sluice.wait_event(path, |e| {
        class(e) == 4002 && e["http_request"]["url"]["path"].as_str() == Some(path)
    })
}

/// Two origins behind one policy entry: `guarded` judges each request by rules and must never
/// receive a placeholder in a body; `rewriting` opts in to body rewriting. The provider's
/// bearer credential is bound to both.
fn setup(dir: &TempDir, ip: IpAddr) -> (Sluice, std::path::PathBuf, H2Origin, H2Origin) {
    // Each origin in its own directory: each makes its own CA and certificate.
    let (gdir, rdir) = (dir.path().join("guarded"), dir.path().join("rewriting"));
    std::fs::create_dir_all(&gdir).unwrap();
    std::fs::create_dir_all(&rdir).unwrap();
    let guarded = H2Origin::start_on(&gdir, ip);
    let rewriting = H2Origin::start_on(&rdir, ip);
    let host = ip.to_string();
    let policy = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: \"{host}\"\n        port: {g}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /ok/**}}\n          - allow: {{method: POST, path: /ok/**}}\n          - allow: {{method: GET, path: /bytes/*}}\n          - allow: {{method: GET, path: /sse}}\n        deny_rules:\n          - {{method: GET, path: /ok/private/**}}\n      - {{host: \"{host}\", port: {r}, protocol: rest, enforcement: enforce, access: full, request_body_credential_rewrite: true}}\n    binaries:\n      - path: /usr/bin/curl\n",
        g = guarded.port(),
        r = rewriting.port()
    );
    let providers = dir.write(
        "providers.yaml",
        &format!(
            "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\n    auth_style: bearer\nendpoints:\n  - {{host: \"{host}\", port: {}}}\n  - {{host: \"{host}\", port: {}}}\n",
            guarded.port(),
            rewriting.port()
        ),
    );
    let (sluice, ca) = Sluice::intercepting(
        dir,
        &policy,
        &[&guarded.cert, &rewriting.cert],
        Some(&providers),
        &[("TEST_API_KEY", SECRET)],
    );
    (sluice, ca, guarded, rewriting)
}

/// `https://host:port` for an origin (IPv6 literals in brackets).
fn base(origin: &H2Origin) -> String {
    match origin.addr {
        std::net::SocketAddr::V4(a) => format!("https://{a}"),
        std::net::SocketAddr::V6(a) => format!("https://[{}]:{}", a.ip(), a.port()),
    }
}

/// The whole parity walk over one protocol.
fn parity(http: Http) {
    let dir = TempDir::new(&format!("parity-{http:?}").to_ascii_lowercase());
    let (sluice, ca, guarded, rewriting) = setup(&dir, IpAddr::from([127, 0, 0, 1]));
    let g = base(&guarded);
    let v = http.curl_version();
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");

    // An allowed request: the placeholder becomes the secret upstream, over this protocol
    // end to end; the client never sees the secret.
    let (status, version, body) =
        curl(&sluice, &ca, http, &["-H", &auth], &format!("{g}/ok/a?x=1"));
    assert_eq!((status, version.as_str()), (200, v), "{body}");
    assert!(
        body.starts_with(&format!(
            "proto={} method=GET path=/ok/a?x=1",
            http.origin_version()
        )),
        "{body}"
    );
    assert!(!body.contains(SECRET), "{body}");
    let got = guarded.received();
    let r = got.last().unwrap();
    assert_eq!(
        r["headers"]["authorization"],
        format!("Bearer {SECRET}"),
        "{r}"
    );
    let e = request_event(&sluice, "/ok/a");
    assert_eq!(
        e["unmapped"]["credentials_injected"][0], "test-api/api-key",
        "{e}"
    );

    // An L7 denial: the same refusal body whatever the protocol.
    let (status, version, body) = curl(
        &sluice,
        &ca,
        http,
        &["-X", "DELETE"],
        &format!("{g}/ok/b?token=abc"),
    );
    assert_eq!((status, version.as_str()), (403, v), "{body}");
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["error"], "policy_denied", "{refusal}");
    assert_eq!(refusal["layer"], "l7", "{refusal}");
    assert_eq!(refusal["method"], "DELETE", "{refusal}");
    assert_eq!(refusal["path"], "/ok/b", "{refusal}");
    assert_eq!(refusal["port"], guarded.port(), "{refusal}");
    assert!(!body.contains("token=abc"), "{body}");
    let (status, _, body) = curl(&sluice, &ca, http, &[], &format!("{g}/ok/private/x"));
    assert_eq!(status, 403, "{body}");
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["rule"], "GET /ok/private/**", "{refusal}");
    let e = request_event(&sluice, "/ok/private/x");
    assert_eq!(e["http_response"]["code"], 403, "{e}");

    // The body guard: a placeholder in the body of an endpoint that does not opt in never
    // reaches the upstream, unresolved or resolved.
    let (status, version, body) = curl(
        &sluice,
        &ca,
        http,
        &[
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &format!(r#"{{"token":"{PLACEHOLDER}"}}"#),
        ],
        &format!("{g}/ok/body"),
    );
    assert_eq!((status, version.as_str()), (403, v), "{body}");
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["error"], "credential_in_body", "{refusal}");
    for r in guarded.received() {
        let text = r.to_string();
        assert!(
            !text.contains(PLACEHOLDER) && !text.contains(SECRET)
                || r["url"] != "/ok/body"
                || r["aborted"] == true,
            "{r}"
        );
    }

    // Opt-in body rewriting: the secret goes into the body, whose length is fixed.
    let sent = format!(r#"{{"token":"{PLACEHOLDER}","n":1}}"#);
    let (status, version, body) = curl(
        &sluice,
        &ca,
        http,
        &[
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &sent,
        ],
        &format!("{}/v1/json", base(&rewriting)),
    );
    assert_eq!((status, version.as_str()), (200, v), "{body}");
    assert!(
        body.starts_with(&format!("proto={} method=POST", http.origin_version())),
        "{body}"
    );
    assert!(!body.contains(SECRET), "{body}");
    let got = rewriting.received();
    let r = got.last().unwrap();
    let expected = format!(r#"{{"token":"{SECRET}","n":1}}"#);
    assert_eq!(r["body"], expected, "{r}");
    if let Http::H1 = http {
        assert_eq!(
            r["headers"]["content-length"],
            expected.len().to_string(),
            "{r}"
        );
    }
    let e = request_event(&sluice, "/v1/json");
    assert_eq!(
        e["unmapped"]["credentials_injected"][0], "test-api/api-key",
        "{e}"
    );
    assert_eq!(e["traffic"]["bytes_out"], sent.len(), "{e}");

    // Two Content-Types: which kind of body the secret goes into would be the upstream's
    // guess; refused, nothing forwarded.
    let before = rewriting.received().len();
    let (status, _, body) = curl(
        &sluice,
        &ca,
        http,
        &[
            "-H",
            "Content-Type: text/plain",
            "-H",
            "Content-Type: multipart/form-data; boundary=x",
            "--data-binary",
            &sent,
        ],
        &format!("{}/v1/two-types", base(&rewriting)),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("more than one Content-Type"), "{body}");
    assert_eq!(rewriting.received().len(), before);

    // A body to rewrite is bounded (256 KiB), whatever the protocol.
    let big = dir.write(
        "big.json",
        &format!(
            r#"{{"token":"{PLACEHOLDER}","pad":"{}"}}"#,
            "p".repeat(300 * 1024)
        ),
    );
    let (status, _, body) = curl(
        &sluice,
        &ca,
        http,
        &[
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            &format!("@{}", big.display()),
        ],
        &format!("{}/v1/big", base(&rewriting)),
    );
    assert_eq!(status, 413, "{body}");
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["error"], "request_body_too_large", "{refusal}");
    assert!(rewriting.received().iter().all(|r| r["url"] != "/v1/big"));

    // Audit: bytes each way, counted as the bodies went.
    let (status, _, body) = curl(&sluice, &ca, http, &[], &format!("{g}/bytes/100000"));
    assert_eq!((status, body.len()), (200, 100_000));
    let e = request_event(&sluice, "/bytes/100000");
    assert_eq!(e["traffic"]["bytes_in"], 100_000, "{e}");
    let upload = "u".repeat(5000);
    let (status, _, body) = curl(
        &sluice,
        &ca,
        http,
        &["--data-binary", &upload],
        &format!("{g}/ok/up"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("body=5000"), "{body}");
    let e = request_event(&sluice, "/ok/up");
    assert_eq!(e["traffic"]["bytes_out"], 5000, "{e}");
    assert!(e["traffic"]["bytes_in"].as_u64().unwrap() > 0, "{e}");

    // Written when the exchange ends: a response streamed over two seconds and more is
    // audited after it, with its duration and every byte.
    let (status, _, body) = curl(&sluice, &ca, http, &[], &format!("{g}/sse"));
    assert_eq!(status, 200, "{body}");
    let e = request_event(&sluice, "/sse");
    assert!(e["duration"].as_u64().unwrap() >= 1900, "{e}");
    assert_eq!(e["traffic"]["bytes_in"], body.len(), "{e}");

    // Nothing anywhere holds the secret: not the audit log, not sluice's output.
    assert!(
        !std::fs::read_to_string(&sluice.audit_path)
            .unwrap()
            .contains(SECRET)
    );
    assert!(!sluice.stderr().contains(SECRET));
    assert_events_valid(&sluice);
}

#[test]
fn inspected_requests_over_http1_1() {
    parity(Http::H1);
}

#[test]
fn inspected_requests_over_http2() {
    parity(Http::H2);
}

/// A tunnel to an IPv6 literal (`CONNECT [::1]:port`) carries both protocols.
#[test]
fn an_ipv6_literal_tunnel_carries_http1_1_and_http2() {
    let dir = TempDir::new("parity-v6");
    let (sluice, ca, guarded, _rewriting) =
        setup(&dir, IpAddr::from(std::net::Ipv6Addr::LOCALHOST));
    for http in [Http::H1, Http::H2] {
        let auth = format!("Authorization: Bearer {PLACEHOLDER}");
        let (status, version, body) = curl(
            &sluice,
            &ca,
            http,
            &["-H", &auth],
            &format!("{}/ok/v6", base(&guarded)),
        );
        assert_eq!(
            (status, version.as_str()),
            (200, http.curl_version()),
            "{http:?}: {body}\n{}",
            sluice.stderr()
        );
        assert!(
            body.starts_with(&format!(
                "proto={} method=GET path=/ok/v6",
                http.origin_version()
            )),
            "{body}"
        );
        let got = guarded.received();
        assert_eq!(
            got.last().unwrap()["headers"]["authorization"],
            format!("Bearer {SECRET}")
        );
    }
    assert_events_valid(&sluice);
}
