//! End-to-end: refreshed credentials (`refresh`, `oauth2_client_credentials` and
//! `oauth2_refresh_token`) through the real `sluice` binary. sluice asks a real OAuth 2.0
//! token endpoint (oauthlib's server, `tests/clients/oauth_token_server.py`, over TLS) for
//! tokens that live three seconds, before they are needed and again before they expire; the
//! client only ever holds placeholders. Requests made across several expiries all succeed,
//! each with a current token; the tokens never reach the client (the origin echoes them) nor
//! the audit log. With the token endpoint down, the last token serves until it expires, then
//! `503`; back up, the next refresh restores service.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::origin::{EchoOrigin, OriginProcess, make_cert};
use sluice_e2e::proxy::{Sluice, TempDir, run};

const CLIENT_ID: &str = "sluice-test-client";
const CLIENT_SECRET: &str = "client-SECRET-4b1d9e7a55c2";
const REFRESH_TOKEN: &str = "refresh-TOKEN-8f2c6a1d0b93";

fn clients() -> PathBuf {
    // This test's own package, not the library's (a build directory may be shared).
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

const POLICY: &str = "version: 1\nnetwork_policies:\n  unrelated:\n    endpoints: [{host: unrelated.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n";

fn profile(api_port: u16, token_port: u16) -> String {
    format!(
        "\
id: api
credentials:
  - name: service
    env_vars: [CC_TOKEN]
    auth_style: bearer
    refresh:
      strategy: oauth2_client_credentials
      token_url: 'https://127.0.0.1:{token_port}/token'
      scopes: [read]
      refresh_before_seconds: 1
      max_lifetime_seconds: 3600
      material: [{{name: client_id}}, {{name: client_secret, secret: true}}]
  - name: user
    env_vars: [RT_TOKEN]
    header_name: x-user-token
    refresh:
      strategy: oauth2_refresh_token
      token_url: 'https://127.0.0.1:{token_port}/token'
      refresh_before_seconds: 1
      material: [{{name: client_id}}, {{name: client_secret}}, {{name: refresh_token, secret: true}}]
endpoints:
  - {{host: 127.0.0.1, port: {api_port}, protocol: rest, enforcement: enforce, access: full}}
binaries: [/usr/bin/curl]
"
    )
}

fn token_server(dir: &Path, log: &Path) -> (OriginProcess, PathBuf) {
    let (ca, cert, key) = make_cert(dir);
    let mut cmd = Command::new("python3");
    cmd.arg(clients().join("oauth_token_server.py"))
        .arg(&cert)
        .arg(&key)
        .arg(log)
        .env("CLIENT_ID", CLIENT_ID)
        .env("CLIENT_SECRET", CLIENT_SECRET)
        .env("REFRESH_TOKEN", REFRESH_TOKEN)
        .env("EXPIRES_IN", "3");
    (OriginProcess::spawn(&mut cmd, "the token endpoint"), ca)
}

fn control(ca: &Path, port: u16, what: &str) {
    let (code, _, err) = run(Command::new("/usr/bin/curl")
        .args(["-s", "-X", "POST", "--cacert"])
        .arg(ca)
        .arg(format!("https://127.0.0.1:{port}/{what}")));
    assert_eq!(code, 0, "{err}");
}

fn get(sluice: &Sluice, ca: &Path, url: &str) -> String {
    run(Command::new("/usr/bin/curl")
        .args(["-s", "-i", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"])
        .args(["-H", "Authorization: Bearer openshell:resolve:env:CC_TOKEN"])
        .args(["-H", "x-user-token: openshell:resolve:env:RT_TOKEN"])
        .arg(url))
    .1
}

#[test]
fn tokens_are_refreshed_before_they_expire_and_a_failing_endpoint_ends_in_503() {
    let token_dir = TempDir::new("refresh-token");
    let token_log = token_dir.path().join("tokens.jsonl");
    let (tokens, token_ca) = token_server(token_dir.path(), &token_log);
    let dir = TempDir::new("refresh");
    let origin = EchoOrigin::start(dir.path());
    let providers = dir.write("api.yaml", &profile(origin.port(), tokens.port));
    let (sluice, ca) = Sluice::intercepting(
        &dir,
        POLICY,
        &[&origin.cert, &token_ca],
        Some(&providers),
        &[
            ("CC_TOKEN_CLIENT_ID", CLIENT_ID),
            ("CC_TOKEN_CLIENT_SECRET", CLIENT_SECRET),
            ("RT_TOKEN_CLIENT_ID", CLIENT_ID),
            ("RT_TOKEN_CLIENT_SECRET", CLIENT_SECRET),
            ("RT_TOKEN_REFRESH_TOKEN", REFRESH_TOKEN),
        ],
    );
    let url = format!("https://127.0.0.1:{}/echo", origin.port());
    let mut client_saw = String::new();
    // Across three expiries, every request succeeds.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(8) {
        let out = get(&sluice, &ca, &url);
        assert!(out.ends_with("200"), "{out}\n{}", sluice.stderr());
        client_saw.push_str(&out);
        sleep(Duration::from_millis(300));
    }
    let received: Vec<Value> = std::fs::read_to_string(&origin.log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bearer: BTreeSet<String> = received
        .iter()
        .map(|r| r["headers"]["authorization"].as_str().unwrap().to_string())
        .collect();
    let user: BTreeSet<String> = received
        .iter()
        .map(|r| r["headers"]["x-user-token"].as_str().unwrap().to_string())
        .collect();
    assert!(bearer.len() >= 3, "{bearer:?}");
    assert!(user.len() >= 3, "{user:?}");
    assert!(
        bearer.iter().all(|b| b.starts_with("Bearer tok-")),
        "{bearer:?}"
    );
    assert!(user.iter().all(|u| u.starts_with("tok-")), "{user:?}");
    // The token endpoint granted both kinds of grant, each with a rotated refresh token.
    let grants: Vec<Value> = std::fs::read_to_string(&token_log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(grants.iter().all(|g| g["status"] == 200), "{grants:?}");
    for kind in ["client_credentials", "refresh_token"] {
        assert!(
            grants.iter().filter(|g| g["grant"] == kind).count() >= 3,
            "{grants:?}"
        );
    }
    // No token, client secret or refresh token reaches the client or the audit log.
    let audit = serde_json::to_string(&sluice.events()).unwrap();
    for g in &grants {
        let token = g["token"].as_str().unwrap();
        assert!(!client_saw.contains(token), "the client saw {token}");
        assert!(!audit.contains(token), "the audit log holds {token}");
    }
    for secret in [CLIENT_SECRET, REFRESH_TOKEN] {
        assert!(!client_saw.contains(secret) && !audit.contains(secret));
        assert!(!sluice.stderr().contains(secret));
    }
    assert!(
        client_saw.contains("openshell:resolve:env:CC_TOKEN"),
        "the echo was not scrubbed back"
    );
    // Each new token was swapped into the credentials alone: the configuration was loaded
    // once, at start (one Device Config State Change), not once per refresh.
    let loads = sluice
        .events()
        .iter()
        .filter(|e| e["class_uid"] == 5019)
        .count();
    assert_eq!(loads, 1, "{}", sluice.stderr());
    assert!(
        !sluice.stderr().contains("configuration reloaded"),
        "{}",
        sluice.stderr()
    );

    // The endpoint goes down: the last token serves until it expires, then 503.
    control(&token_ca, tokens.port, "fail");
    let down = Instant::now();
    let mut statuses = Vec::new();
    while down.elapsed() < Duration::from_secs(6) {
        let out = get(&sluice, &ca, &url);
        statuses.push(out.rsplit('\n').next().unwrap().to_string());
        sleep(Duration::from_millis(300));
    }
    assert_eq!(
        statuses.first().map(String::as_str),
        Some("200"),
        "{statuses:?}"
    );
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("503"),
        "{statuses:?}"
    );
    let out = get(&sluice, &ca, &url);
    assert!(out.contains("credential_refresh_failed"), "{out}");
    // Back up: the next attempt (backoff at most a few seconds here) restores service.
    control(&token_ca, tokens.port, "recover");
    let up = Instant::now();
    loop {
        let out = get(&sluice, &ca, &url);
        if out.ends_with("200") {
            break;
        }
        assert!(
            up.elapsed() < Duration::from_secs(20),
            "not restored: {out}"
        );
        sleep(Duration::from_millis(300));
    }
}

#[test]
fn missing_material_refuses_to_start_naming_the_variable() {
    let dir = TempDir::new("refresh-material");
    let providers = dir.write("api.yaml", &profile(8443, 9443));
    let out = Command::new(sluice_e2e::sluice_bin())
        .args(["run", "--listen", "127.0.0.1:0", "--providers"])
        .arg(&providers)
        .env("CC_TOKEN_CLIENT_ID", CLIENT_ID)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("refresh material `client_secret` is not set: set CC_TOKEN_CLIENT_SECRET"),
        "{stderr}"
    );
}

#[test]
fn a_service_account_signs_its_own_assertions_for_tokens() {
    let token_dir = TempDir::new("refresh-sa-token");
    let key = token_dir.path().join("sa-key.pem");
    let public = token_dir.path().join("sa-public.pem");
    let (code, _, err) = run(Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&key));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&key)
        .arg("-out")
        .arg(&public));
    assert_eq!(code, 0, "{err}");
    let token_log = token_dir.path().join("tokens.jsonl");
    let (ca, cert, tls_key) = make_cert(token_dir.path());
    let tokens = OriginProcess::spawn(
        Command::new("python3")
            .arg(clients().join("oauth_token_server.py"))
            .arg(&cert)
            .arg(&tls_key)
            .arg(&token_log)
            .env("CLIENT_ID", CLIENT_ID)
            .env("CLIENT_SECRET", CLIENT_SECRET)
            .env("REFRESH_TOKEN", REFRESH_TOKEN)
            .env("EXPIRES_IN", "3")
            .env("SA_EMAIL", "agent@project.iam.gserviceaccount.com")
            .env("SA_PUBLIC_KEY", &public),
        "the token endpoint",
    );
    let dir = TempDir::new("refresh-sa");
    let origin = EchoOrigin::start(dir.path());
    let providers = dir.write(
        "gcp.yaml",
        &format!(
            "\
id: google-cloud
credentials:
  - name: service_account_token
    env_vars: [GCP_SA_ACCESS_TOKEN]
    auth_style: bearer
    header_name: authorization
    refresh:
      strategy: google_service_account_jwt
      token_url: 'https://127.0.0.1:{}/token'
      scopes: [https://www.googleapis.com/auth/cloud-platform]
      refresh_before_seconds: 1
      material: [{{name: client_email}}, {{name: private_key, secret: true}}]
endpoints:
  - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}
binaries: [/usr/bin/curl]
",
            tokens.port,
            origin.port()
        ),
    );
    let pem = std::fs::read_to_string(&key).unwrap();
    let (sluice, sluice_ca) = Sluice::intercepting(
        &dir,
        POLICY,
        &[&origin.cert, &ca],
        Some(&providers),
        &[
            (
                "GCP_SA_ACCESS_TOKEN_CLIENT_EMAIL",
                "agent@project.iam.gserviceaccount.com",
            ),
            ("GCP_SA_ACCESS_TOKEN_PRIVATE_KEY", &pem),
        ],
    );
    let url = format!("https://127.0.0.1:{}/echo", origin.port());
    let start = Instant::now();
    let mut seen = String::new();
    while start.elapsed() < Duration::from_secs(5) {
        let (_, out, _) = run(Command::new("/usr/bin/curl")
            .args(["-s", "--max-time", "20", "--cacert"])
            .arg(&sluice_ca)
            .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"])
            .args([
                "-H",
                "Authorization: Bearer openshell:resolve:env:GCP_SA_ACCESS_TOKEN",
            ])
            .arg(&url));
        assert!(out.ends_with("200"), "{out}\n{}", sluice.stderr());
        seen.push_str(&out);
        sleep(Duration::from_millis(400));
    }
    let grants: Vec<Value> = std::fs::read_to_string(&token_log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(grants.len() >= 2, "{grants:?}");
    assert!(
        grants
            .iter()
            .all(|g| g["grant"] == "jwt-bearer" && g["status"] == 200),
        "{grants:?}"
    );
    let received: Vec<Value> = std::fs::read_to_string(&origin.log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bearer: BTreeSet<&str> = received
        .iter()
        .map(|r| r["headers"]["authorization"].as_str().unwrap())
        .collect();
    assert!(bearer.len() >= 2, "{bearer:?}");
    let key_body = pem.lines().nth(1).unwrap();
    for text in [
        seen,
        sluice.stderr(),
        serde_json::to_string(&sluice.events()).unwrap(),
    ] {
        assert!(!text.contains(key_body), "the private key leaked");
    }
}
