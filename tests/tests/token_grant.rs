//! End-to-end: token grants (`token_grant`, spec §3.7) through the real `sluice` binary.
//! sluice fetches JWT-SVIDs from a SPIFFE Workload API served over a Unix socket from the
//! published proto (grpcio), trades each at a token endpoint (oauthlib's server over TLS,
//! checking the SVID as an RFC 7523 client assertion) for tokens that live two seconds, and
//! sets them on the profile's requests: the default audience's, and an `audience_overrides`
//! entry's on its path. Requests made across several expiries all succeed, each with a
//! current token. Attacks: the client's own `Authorization` is replaced; the token echoed
//! back by the origin never reaches the client; no token or SVID in sluice's log or audit; a
//! host the grant is not bound to gets none; a bound endpoint over plain HTTP is refused, not
//! sent the token; a sluice without a usable Workload API socket (the sandbox cannot name
//! one) and a token endpoint that stops granting both end in `502 token_grant_failed`, as the
//! reference answers.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::origin::{EchoOrigin, HttpOrigin, OriginProcess, make_cert};
use sluice_e2e::proxy::{Sluice, TempDir, run};

const SVID_AUDIENCE: &str = "https://token-issuer.test";

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

/// OpenShell's demo profile's shape, on local origins: the default grant, and `alpha`'s on
/// `/alpha/**`.
fn profile(token_port: u16, api_port: u16, plain_port: u16) -> String {
    format!(
        "\
id: spiffe-token-demo
credentials:
  - name: access_token
    required: false
    auth_style: bearer
    header_name: Authorization
    token_grant:
      token_endpoint: 'https://127.0.0.1:{token_port}/token'
      audience: demo-default
      jwt_svid_audience: '{SVID_AUDIENCE}'
      client_assertion_type: urn:ietf:params:oauth:client-assertion-type:jwt-spiffe
      scopes: [demo]
      audience_overrides:
        - {{host: 127.0.0.1, port: {api_port}, path: '/alpha/**', audience: alpha, scopes: [alpha]}}
endpoints:
  - {{host: 127.0.0.1, port: {api_port}, protocol: rest, access: read-write, enforcement: enforce}}
  - {{host: 127.0.0.1, port: {plain_port}, protocol: rest, access: read-write, enforcement: enforce}}
binaries: [/usr/bin/curl]
"
    )
}

fn policy(other_port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  other:\n    endpoints: [{{host: 127.0.0.1, port: {other_port}, protocol: rest, access: full}}]\n    binaries: [{{path: /usr/bin/curl}}]\n"
    )
}

struct Grants {
    server: OriginProcess,
    ca: PathBuf,
    socket: PathBuf,
    log: PathBuf,
}

fn grant_server(dir: &Path) -> Grants {
    // Each TLS server its own directory: a certificate made in one replaces the one before.
    let dir = &sub(dir, "grants");
    let (ca, cert, key) = make_cert(dir);
    let socket = dir.join("agent.sock");
    let log = dir.join("grants.jsonl");
    let server = OriginProcess::spawn(
        Command::new("python3")
            .arg(clients().join("spiffe_grant_server.py"))
            .arg(&cert)
            .arg(&key)
            .arg(&log)
            .arg(&socket)
            .env("SVID_AUDIENCE", SVID_AUDIENCE)
            .env(
                "ASSERTION_TYPE",
                "urn:ietf:params:oauth:client-assertion-type:jwt-spiffe",
            )
            .env("EXPIRES_IN", "32"),
        "the SPIFFE grant server",
    );
    Grants {
        server,
        ca,
        socket,
        log,
    }
}

fn sub(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn get(sluice: &Sluice, ca: &Path, url: &str, auth: Option<&str>) -> String {
    let mut cmd = Command::new("/usr/bin/curl");
    cmd.args(["-s", "-i", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"]);
    if let Some(a) = auth {
        cmd.args(["-H", &format!("Authorization: {a}")]);
    }
    run(cmd.arg(url)).1
}

fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn start(
    dir: &TempDir,
    grants: &Grants,
    api: &EchoOrigin,
    plain: &HttpOrigin,
    other: &EchoOrigin,
    socket: &str,
) -> (Sluice, PathBuf) {
    let providers = dir.write(
        "spiffe.yaml",
        &profile(grants.server.port, api.port(), plain.port()),
    );
    Sluice::intercepting(
        dir,
        &policy(other.port()),
        &[&grants.ca, &api.cert, &other.cert],
        Some(&providers),
        &[("SPIFFE_ENDPOINT_SOCKET", socket)],
    )
}

#[test]
fn svids_are_traded_for_tokens_set_on_bound_requests_across_expiries() {
    let dir = TempDir::new("token-grant");
    let grants = grant_server(dir.path());
    let api = EchoOrigin::start(&sub(dir.path(), "api"));
    let other = EchoOrigin::start(&sub(dir.path(), "other"));
    let plain = HttpOrigin::start();
    let socket = format!("unix://{}", grants.socket.display());
    let (sluice, ca) = start(&dir, &grants, &api, &plain, &other, &socket);
    let base = format!("https://127.0.0.1:{}", api.port());

    let mut client_saw = String::new();
    let begin = Instant::now();
    while begin.elapsed() < Duration::from_secs(6) {
        for (path, auth) in [
            ("/echo", None),
            ("/alpha/echo", Some("Bearer agent-made-up")),
        ] {
            let out = get(&sluice, &ca, &format!("{base}{path}"), auth);
            assert!(out.ends_with("200"), "{out}\n{}", sluice.stderr());
            client_saw.push_str(&out);
        }
        sleep(Duration::from_millis(300));
    }
    let received: Vec<Value> = std::fs::read_to_string(&api.log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tokens = |prefix: &str| -> BTreeSet<String> {
        received
            .iter()
            .map(|r| r["headers"]["authorization"].as_str().unwrap().to_string())
            .filter(|a| a.starts_with(prefix))
            .collect()
    };
    let default = tokens("Bearer grant-demo-default-");
    let alpha = tokens("Bearer grant-alpha-");
    assert!(default.len() >= 3, "not renewed: {default:?}");
    assert!(alpha.len() >= 3, "not renewed: {alpha:?}");
    assert_eq!(
        default.len() + alpha.len(),
        received
            .iter()
            .map(|r| r["headers"]["authorization"].as_str().unwrap())
            .collect::<BTreeSet<_>>()
            .len(),
        "a request carried something else (the agent's own header?)"
    );
    for r in &received {
        let url = r["url"].as_str().unwrap_or_default();
        let auth = r["headers"]["authorization"].as_str().unwrap();
        assert_eq!(
            url.contains("/alpha/"),
            auth.starts_with("Bearer grant-alpha-"),
            "{url}: {auth}"
        );
    }

    // A host the grant is not bound to gets no token; a bound one over plain HTTP is refused.
    let out = get(
        &sluice,
        &ca,
        &format!("https://127.0.0.1:{}/echo", other.port()),
        None,
    );
    assert!(out.ends_with("200"), "{out}");
    let elsewhere = std::fs::read_to_string(&other.log).unwrap();
    assert!(!elsewhere.contains("grant-"), "{elsewhere}");
    let out = get(
        &sluice,
        &ca,
        &format!("http://127.0.0.1:{}/x", plain.port()),
        None,
    );
    assert!(out.ends_with("403"), "{out}");
    assert!(out.contains("credential_requires_tls"), "{out}");
    assert!(
        plain.received().is_empty(),
        "the plain origin got a request"
    );

    // Nothing the grant made reaches the client, the log or the audit.
    let audit = serde_json::to_string(&sluice.events()).unwrap();
    let stderr = sluice.stderr();
    let entries = logged(&grants.log);
    let svids: Vec<&str> = entries.iter().filter_map(|e| e["svid"].as_str()).collect();
    let issued: Vec<&str> = entries.iter().filter_map(|e| e["token"].as_str()).collect();
    assert!(svids.len() >= 6 && issued.len() >= 6, "{entries:?}");
    for secret in svids.iter().chain(&issued) {
        assert!(!client_saw.contains(secret), "the client saw {secret}");
        assert!(!stderr.contains(secret), "sluice's log holds {secret}");
        assert!(!audit.contains(secret), "the audit log holds {secret}");
    }
    assert!(
        entries
            .iter()
            .filter(|e| e["server"] == "workload")
            .all(|e| e["audience"][0] == SVID_AUDIENCE)
    );

    // The token endpoint stops granting: once the last token expires, 502.
    let (code, _, err) = run(Command::new("/usr/bin/curl")
        .args(["-s", "-X", "POST", "--cacert"])
        .arg(&grants.ca)
        .arg(format!("https://127.0.0.1:{}/fail", grants.server.port)));
    assert_eq!(code, 0, "{err}");
    let down = Instant::now();
    loop {
        let out = get(&sluice, &ca, &format!("{base}/echo"), None);
        if out.ends_with("502") {
            assert!(out.contains("token_grant_failed"), "{out}");
            break;
        }
        assert!(down.elapsed() < Duration::from_secs(10), "{out}");
        sleep(Duration::from_millis(250));
    }
}

#[test]
fn without_a_usable_workload_socket_there_is_no_token_and_a_502() {
    let dir = TempDir::new("token-grant-socket");
    let grants = grant_server(dir.path());
    let api = EchoOrigin::start(&sub(dir.path(), "api"));
    let other = EchoOrigin::start(&sub(dir.path(), "other"));
    let plain = HttpOrigin::start();
    // A relative path is not taken (nothing the sandboxed side's working directory holds).
    let (sluice, ca) = start(&dir, &grants, &api, &plain, &other, "agent.sock");
    let out = get(
        &sluice,
        &ca,
        &format!("https://127.0.0.1:{}/echo", api.port()),
        Some("Bearer agent-made-up"),
    );
    assert!(out.ends_with("502"), "{out}");
    assert!(out.contains("token_grant_failed"), "{out}");
    assert!(
        sluice.stderr().contains("SPIFFE_ENDPOINT_SOCKET"),
        "{}",
        sluice.stderr()
    );
    assert!(
        std::fs::read_to_string(&api.log)
            .unwrap_or_default()
            .is_empty()
    );
}
