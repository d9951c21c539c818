//! End-to-end: refreshed credentials per gateway tenant (`--tenants`). Two tenants use the
//! same provider profile (`oauth2_client_credentials`) with their own material: alpha's from
//! its `secrets_file`, beta's from its `secrets_dir`. sluice asks a real OAuth 2.0 token
//! endpoint (oauthlib's server, `tests/clients/oauth_token_server.py`, over TLS, knowing both
//! clients) for each tenant's tokens, which live three seconds: across several expiries every
//! request of each tenant succeeds and carries a current token of its own client, never the
//! other's; no token reaches a client (the origin echoes them) nor a log. A reload keeps the
//! refresher of a tenant whose material is unchanged (the same token serves on) and starts
//! anew for one whose material changed (a token of the new client at once). Token grants
//! (`token_grant`) are per tenant too: two tenants, two tokens.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::gateway::{self, ALPHA, Answer, BETA, curl, rest_policy, write_secrets};
use sluice_e2e::origin::{EchoOrigin, OriginProcess, make_cert};
use sluice_e2e::proxy::{Sluice, TempDir};

const ALPHA_ID: &str = "alpha-client";
const ALPHA_SECRET: &str = "alpha-SECRET-6e21b0c94f";
const BETA_ID: &str = "beta-client";
const BETA_SECRET: &str = "beta-SECRET-0d7a33e81c";
const BETA2_ID: &str = "beta-client-2";
const BETA2_SECRET: &str = "beta2-SECRET-91fe4c0a2b";
const PLACEHOLDER: &str = "openshell:resolve:env:CC_TOKEN";

fn clients() -> PathBuf {
    // This test's own package, not the library's (a build directory may be shared).
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

/// The token endpoint knowing the three clients, its tokens living `expires_in` seconds.
fn token_server(dir: &Path, log: &Path, expires_in: u32) -> (OriginProcess, PathBuf) {
    let (ca, cert, key) = make_cert(dir);
    let mut cmd = Command::new("python3");
    cmd.arg(clients().join("oauth_token_server.py"))
        .arg(&cert)
        .arg(&key)
        .arg(log)
        .env("CLIENT_ID", ALPHA_ID)
        .env("CLIENT_SECRET", ALPHA_SECRET)
        .env(
            "MORE_CLIENTS",
            format!("{BETA_ID}:{BETA_SECRET},{BETA2_ID}:{BETA2_SECRET}"),
        )
        .env("REFRESH_TOKEN", "unused-refresh-token")
        .env("EXPIRES_IN", expires_in.to_string());
    (OriginProcess::spawn(&mut cmd, "the token endpoint"), ca)
}

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
      material: [{{name: client_id}}, {{name: client_secret, secret: true}}]
endpoints:
  - {{host: 127.0.0.1, port: {api_port}, protocol: rest, enforcement: enforce, access: full}}
"
    )
}

/// A gateway: alpha (127.0.0.2, material in `alpha.env`) and beta (127.0.0.3, material in
/// the directory `beta.keys`), both with the same policy and profile. Returns the gateway,
/// the CA its clients trust, and the tenants file.
struct Setup {
    dir: TempDir,
    origin: EchoOrigin,
    gw: Sluice,
    ca: PathBuf,
    tenants: PathBuf,
}

fn setup(tag: &str, token_port: u16, token_ca: &Path) -> Setup {
    let dir = TempDir::new(tag);
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    dir.write("api.yaml", &rest_policy(&[("api", port)]));
    dir.write("providers.yaml", &profile(port, token_port));
    write_secrets(
        &dir,
        "alpha.env",
        &format!("CC_TOKEN_CLIENT_ID={ALPHA_ID}\nCC_TOKEN_CLIENT_SECRET={ALPHA_SECRET}\n"),
    );
    std::fs::create_dir(dir.path().join("beta.keys")).unwrap();
    write_secrets(&dir, "beta.keys/CC_TOKEN_CLIENT_ID", BETA_ID);
    write_secrets(&dir, "beta.keys/CC_TOKEN_CLIENT_SECRET", BETA_SECRET);
    let tenants = dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  \
               - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n    secrets_file: alpha.env\n  \
               - name: beta\n    sources: [\"{BETA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n    secrets_dir: beta.keys\n"
        ),
    );
    let ca_dir = dir.path().join("ca");
    let (ca_dir_s, origin_ca, token_ca) = (
        ca_dir.display().to_string(),
        origin.cert.display().to_string(),
        token_ca.display().to_string(),
    );
    let gw = gateway::start(
        &tenants,
        &[
            "--ca-dir",
            &ca_dir_s,
            "--upstream-ca",
            &origin_ca,
            "--upstream-ca",
            &token_ca,
        ],
        &[],
    );
    Setup {
        dir,
        origin,
        gw,
        ca: ca_dir.join("ca.pem"),
        tenants,
    }
}

impl Setup {
    /// A request of the tenant at `src` to `/v1/<who>`, `header` its credential header.
    fn ask(&self, src: &str, who: &str, header: &str) -> Answer {
        curl(
            &self.gw,
            Some(src),
            &["--cacert", self.ca.to_str().unwrap(), "-H", header],
            &format!("https://127.0.0.1:{}/v1/{who}", self.origin.port()),
        )
    }

    /// The `Authorization` each request to `/v1/<who>` carried upstream, in order.
    fn seen(&self, who: &str) -> Vec<String> {
        self.origin_log()
            .iter()
            .filter(|r| r["url"] == format!("/v1/{who}"))
            .map(|r| {
                r["headers"]["authorization"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    fn origin_log(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.origin.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Each token the endpoint issued, with the client it was issued to.
fn issued(log: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|g| g["status"] == 200)
        .map(|g| {
            (
                g["token"].as_str().unwrap().to_string(),
                g["client"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every token in `seen` (`Bearer <token>`) was issued to `client`.
fn all_issued_to(seen: &[String], issued: &BTreeMap<String, String>, client: &str, who: &str) {
    for s in seen {
        let token = s.strip_prefix("Bearer ").unwrap_or(s);
        assert_eq!(
            issued.get(token).map(String::as_str),
            Some(client),
            "{who}'s request carried {s:?}, not a token of {client}: {issued:?}"
        );
    }
}

#[test]
fn each_tenant_has_its_own_refreshed_tokens_across_expiries() {
    let token_dir = TempDir::new("tenant-refresh-token");
    let token_log = token_dir.path().join("tokens.jsonl");
    let (tokens, token_ca) = token_server(token_dir.path(), &token_log, 3);
    let s = setup("tenant-refresh", tokens.port, &token_ca);
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    let mut client_saw = String::new();
    // Across three expiries, every request of each tenant succeeds.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(8) {
        for (who, src) in [("alpha", ALPHA), ("beta", BETA)] {
            let a = s.ask(src, who, &auth);
            assert_eq!(a.status, 200, "{who}: {a:?}\n{}", s.gw.stderr());
            // The echo came back scrubbed: the placeholder, never a token.
            assert!(a.body.contains(PLACEHOLDER), "{who}: {a:?}");
            client_saw.push_str(&a.head);
            client_saw.push_str(&a.body);
        }
        sleep(Duration::from_millis(250));
    }
    let issued = issued(&token_log);
    let (alpha, beta) = (s.seen("alpha"), s.seen("beta"));
    all_issued_to(&alpha, &issued, ALPHA_ID, "alpha");
    all_issued_to(&beta, &issued, BETA_ID, "beta");
    // Tokens expired during the test: each tenant's requests carried several, its own.
    let (alpha_set, beta_set): (BTreeSet<_>, BTreeSet<_>) =
        (alpha.iter().collect(), beta.iter().collect());
    assert!(alpha_set.len() >= 3, "{alpha_set:?}");
    assert!(beta_set.len() >= 3, "{beta_set:?}");
    assert!(
        alpha_set.is_disjoint(&beta_set),
        "{alpha_set:?} {beta_set:?}"
    );
    // No token, and no client secret, reaches a client, the audit log or sluice's output.
    let audit = std::fs::read_to_string(&s.gw.audit_path).unwrap();
    for token in issued.keys() {
        assert!(!client_saw.contains(token.as_str()), "a client saw {token}");
        assert!(
            !audit.contains(token.as_str()),
            "the audit log holds {token}"
        );
        assert!(
            !s.gw.stderr().contains(token.as_str()),
            "stderr holds {token}"
        );
    }
    for secret in [ALPHA_SECRET, BETA_SECRET] {
        assert!(!client_saw.contains(secret) && !audit.contains(secret));
        assert!(!s.gw.stderr().contains(secret));
    }
    // New tokens were swapped in without a reload: one configuration load, at start.
    let loads =
        s.gw.events()
            .iter()
            .filter(|e| e["class_uid"] == 5019)
            .count();
    assert_eq!(loads, 1, "{}", s.gw.stderr());
}

/// Tenant alpha's caller tries every way to have beta's token: the placeholder beta uses (the
/// same name), placeholders in other places of the request (query, a second header, the
/// body), while beta's token rotates; and it reads everything the origin echoes. It gets its
/// own token upstream only, and neither token back.
#[test]
fn a_tenant_never_gets_another_tenants_refreshed_token() {
    let token_dir = TempDir::new("tenant-refresh-attack-token");
    let token_log = token_dir.path().join("tokens.jsonl");
    let (tokens, token_ca) = token_server(token_dir.path(), &token_log, 2);
    let s = setup("tenant-refresh-attack", tokens.port, &token_ca);
    let mut alpha_saw = String::new();
    let mut statuses = BTreeMap::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        // beta keeps its token in use (and rotating) meanwhile.
        let b = s.ask(
            BETA,
            "beta",
            &format!("Authorization: Bearer {PLACEHOLDER}"),
        );
        assert_eq!(b.status, 200, "{b:?}\n{}", s.gw.stderr());
        // Where a placeholder may be and where it may not (a refusal is no leak either).
        let port = s.origin.port();
        let auth = format!("Authorization: Bearer {PLACEHOLDER}");
        let other = format!("X-Other: {PLACEHOLDER}");
        let body = format!("token={PLACEHOLDER}");
        let attempts: [(&[&str], String); 4] = [
            (&["-H", &auth], format!("https://127.0.0.1:{port}/v1/alpha")),
            (
                &["-H", &other],
                format!("https://127.0.0.1:{port}/v1/alpha-other"),
            ),
            (
                &["-H", &auth],
                format!("https://127.0.0.1:{port}/v1/alpha-query?t={PLACEHOLDER}"),
            ),
            (
                &["-H", &auth, "--data", &body],
                format!("https://127.0.0.1:{port}/v1/alpha-body"),
            ),
        ];
        for (args, url) in attempts {
            let mut all = vec!["--cacert", s.ca.to_str().unwrap()];
            all.extend_from_slice(args);
            let a = curl(&s.gw, Some(ALPHA), &all, &url);
            statuses.insert(
                url.split('?').next().unwrap_or_default().to_string(),
                a.status,
            );
            alpha_saw.push_str(&a.head);
            alpha_saw.push_str(&a.body);
        }
        sleep(Duration::from_millis(200));
    }
    let issued = issued(&token_log);
    let beta_tokens: Vec<&String> = issued
        .iter()
        .filter(|(_, c)| c.as_str() == BETA_ID)
        .map(|(t, _)| t)
        .collect();
    assert!(beta_tokens.len() >= 2, "{issued:?}");
    // Nothing of alpha's reached the origin with a token of beta's, anywhere in the request.
    for r in s.origin_log().iter().filter(|r| {
        r["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("/v1/alpha"))
    }) {
        let text = r.to_string();
        for t in &beta_tokens {
            assert!(
                !text.contains(t.as_str()),
                "alpha's request carried beta's {t}: {r}"
            );
        }
    }
    let alpha: Vec<String> = s
        .origin_log()
        .iter()
        .filter(|r| {
            r["url"]
                .as_str()
                .is_some_and(|u| u.starts_with("/v1/alpha"))
        })
        .filter_map(|r| r["headers"]["authorization"].as_str().map(str::to_string))
        .collect();
    assert!(!alpha.is_empty(), "{statuses:?}\n{}", s.gw.stderr());
    all_issued_to(&alpha, &issued, ALPHA_ID, "alpha");
    // alpha's caller read no token, its own or beta's.
    for token in issued.keys() {
        assert!(!alpha_saw.contains(token.as_str()), "alpha saw {token}");
    }
}

#[test]
fn a_reload_keeps_an_unchanged_tenants_refresher_and_restarts_a_changed_one() {
    let token_dir = TempDir::new("tenant-refresh-reload-token");
    let token_log = token_dir.path().join("tokens.jsonl");
    // Tokens that outlive the test: every new one is a refresher's first.
    let (tokens, token_ca) = token_server(token_dir.path(), &token_log, 300);
    let s = setup("tenant-refresh-reload", tokens.port, &token_ca);
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    for (who, src) in [("alpha", ALPHA), ("beta", BETA)] {
        let a = s.ask(src, who, &auth);
        assert_eq!(a.status, 200, "{who}: {a:?}\n{}", s.gw.stderr());
    }
    let before = issued(&token_log);
    assert_eq!(before.len(), 2, "{before:?}");
    // beta's material changes (another client); alpha's does not.
    write_secrets(&s.dir, "beta.keys/CC_TOKEN_CLIENT_ID", BETA2_ID);
    write_secrets(&s.dir, "beta.keys/CC_TOKEN_CLIENT_SECRET", BETA2_SECRET);
    gateway::hup(&s.gw);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let b = s.ask(BETA, "beta", &auth);
        assert_eq!(b.status, 200, "{b:?}\n{}", s.gw.stderr());
        let issued = issued(&token_log);
        let last = s.seen("beta").pop().unwrap();
        if issued
            .get(last.trim_start_matches("Bearer "))
            .map(String::as_str)
            == Some(BETA2_ID)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "beta never got a token of its new client: {issued:?}\n{}",
            s.gw.stderr()
        );
        sleep(Duration::from_millis(200));
    }
    let a = s.ask(ALPHA, "alpha", &auth);
    assert_eq!(a.status, 200, "{a:?}");
    let alpha = s.seen("alpha");
    assert_eq!(
        alpha.first(),
        alpha.last(),
        "alpha's token changed: {alpha:?}"
    );
    // Exactly one new token: beta's new client's (alpha asked for none).
    let after = issued(&token_log);
    assert_eq!(after.len(), 3, "{after:?}");
    assert_eq!(
        after.values().filter(|c| c.as_str() == ALPHA_ID).count(),
        1,
        "{after:?}"
    );
    // beta's material goes missing: the reload is refused, naming it, and beta serves on with
    // the token it has; the material back as it was, the refresher in force is kept.
    let beta_token = s.seen("beta").pop().unwrap();
    std::fs::remove_file(s.dir.path().join("beta.keys/CC_TOKEN_CLIENT_SECRET")).unwrap();
    gateway::hup(&s.gw);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !s
        .gw
        .stderr()
        .contains("refused, the last good configuration stays in force")
    {
        assert!(
            Instant::now() < deadline,
            "the reload was not refused\n{}",
            s.gw.stderr()
        );
        sleep(Duration::from_millis(100));
    }
    assert!(
        s.gw.stderr().contains("tenant `beta`") && s.gw.stderr().contains("CC_TOKEN_CLIENT_SECRET"),
        "{}",
        s.gw.stderr()
    );
    let b = s.ask(BETA, "beta", &auth);
    assert_eq!(b.status, 200, "{b:?}\n{}", s.gw.stderr());
    assert_eq!(s.seen("beta").pop().unwrap(), beta_token);
    write_secrets(&s.dir, "beta.keys/CC_TOKEN_CLIENT_SECRET", BETA2_SECRET);
    gateway::hup(&s.gw);
    sleep(Duration::from_millis(1500));
    let b = s.ask(BETA, "beta", &auth);
    assert_eq!(b.status, 200, "{b:?}\n{}", s.gw.stderr());
    assert_eq!(
        s.seen("beta").pop().unwrap(),
        beta_token,
        "beta's refresher was not kept"
    );
    assert_eq!(
        issued(&token_log).len(),
        3,
        "a reload asked for a token again"
    );

    // A tenant removed: its refresher stops; the other serves on.
    std::fs::write(
        &s.tenants,
        format!(
            "tenants:\n  - name: beta\n    sources: [\"{BETA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n    secrets_dir: beta.keys\n"
        ),
    )
    .unwrap();
    gateway::hup(&s.gw);
    let deadline = Instant::now() + Duration::from_secs(15);
    while s.ask(ALPHA, "alpha", &auth).status == 200 {
        assert!(
            Instant::now() < deadline,
            "alpha was not removed\n{}",
            s.gw.stderr()
        );
        sleep(Duration::from_millis(200));
    }
    let b = s.ask(BETA, "beta", &auth);
    assert_eq!(b.status, 200, "{b:?}\n{}", s.gw.stderr());
    assert_eq!(
        issued(&token_log).len(),
        3,
        "a reload asked for a token again"
    );
}

/// A tenant whose refresh material is missing stops the start, the message naming the tenant
/// and the key to set (in its own secrets, not sluice's environment).
#[test]
fn a_tenant_without_its_refresh_material_stops_startup_naming_it() {
    let dir = TempDir::new("tenant-refresh-missing");
    dir.write("api.yaml", &rest_policy(&[("api", 9)]));
    dir.write("providers.yaml", &profile(9, 10));
    write_secrets(&dir, "beta.env", &format!("CC_TOKEN_CLIENT_ID={BETA_ID}\n"));
    let tenants = dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  - name: beta\n    sources: [\"{BETA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n    secrets_file: beta.env\n"
        ),
    );
    // sluice's own environment has the value: a tenant with its own secrets never reads it.
    let out = Command::new("timeout")
        .arg("20")
        .arg(sluice_e2e::sluice_bin())
        .args(["run", "--tenants"])
        .arg(&tenants)
        .args(["--listen", "127.0.0.1:0"])
        .env("CC_TOKEN_CLIENT_SECRET", BETA_SECRET)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("tenant `beta`") && err.contains("CC_TOKEN_CLIENT_SECRET"),
        "{err}"
    );
    assert!(!err.contains(BETA_SECRET), "{err}");
}

/// Two tenants with the same `token_grant` profile: each its own grant, its own tokens (the
/// SPIFFE Workload API and oauthlib's token endpoint of `tests/tests/token_grant.rs`).
#[test]
fn each_tenant_has_its_own_token_grant() {
    let dir = TempDir::new("tenant-grant");
    let grants_dir = dir.path().join("grants");
    std::fs::create_dir_all(&grants_dir).unwrap();
    let (grant_ca, cert, key) = make_cert(&grants_dir);
    let socket = grants_dir.join("agent.sock");
    let log = grants_dir.join("grants.jsonl");
    let grants = OriginProcess::spawn(
        Command::new("python3")
            .arg(clients().join("spiffe_grant_server.py"))
            .arg(&cert)
            .arg(&key)
            .arg(&log)
            .arg(&socket)
            .env("SVID_AUDIENCE", "https://token-issuer.test")
            .env("EXPIRES_IN", "300"),
        "the SPIFFE grant server",
    );
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    dir.write("api.yaml", &rest_policy(&[("api", port)]));
    dir.write(
        "providers.yaml",
        &format!(
            "id: grant\ncredentials:\n  - name: access_token\n    required: false\n    auth_style: bearer\n    token_grant:\n      token_endpoint: 'https://127.0.0.1:{}/token'\n      audience: demo-default\n      jwt_svid_audience: 'https://token-issuer.test'\n      scopes: [demo]\nendpoints:\n  - {{host: 127.0.0.1, port: {port}, protocol: rest, enforcement: enforce, access: full}}\n",
            grants.port
        ),
    );
    let tenants = dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  \
               - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n  \
               - name: beta\n    sources: [\"{BETA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n"
        ),
    );
    let ca_dir = dir.path().join("ca");
    let (ca_dir_s, origin_ca, grant_ca_s) = (
        ca_dir.display().to_string(),
        origin.cert.display().to_string(),
        grant_ca.display().to_string(),
    );
    let sock = format!("unix://{}", socket.display());
    let gw = gateway::start(
        &tenants,
        &[
            "--ca-dir",
            &ca_dir_s,
            "--upstream-ca",
            &origin_ca,
            "--upstream-ca",
            &grant_ca_s,
        ],
        &[("SPIFFE_ENDPOINT_SOCKET", sock.as_str())],
    );
    let ca = ca_dir.join("ca.pem");
    for (who, src) in [("alpha", ALPHA), ("beta", BETA), ("alpha", ALPHA)] {
        let a = curl(
            &gw,
            Some(src),
            &["--cacert", ca.to_str().unwrap()],
            &format!("https://127.0.0.1:{port}/v1/{who}"),
        );
        assert_eq!(a.status, 200, "{who}: {a:?}\n{}", gw.stderr());
        assert!(
            !a.body.contains("grant-demo-default-"),
            "{who} saw a token: {a:?}"
        );
    }
    let seen = |who: &str| -> BTreeSet<String> {
        std::fs::read_to_string(&origin.log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["url"] == format!("/v1/{who}"))
            .map(|r| {
                r["headers"]["authorization"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let (alpha, beta) = (seen("alpha"), seen("beta"));
    assert_eq!(alpha.len(), 1, "alpha's token is cached: {alpha:?}");
    assert_eq!(beta.len(), 1, "{beta:?}");
    assert!(
        alpha
            .iter()
            .all(|a| a.starts_with("Bearer grant-demo-default-")),
        "{alpha:?}"
    );
    assert!(
        alpha.is_disjoint(&beta),
        "the tenants share a token: {alpha:?} {beta:?}"
    );
    let audit = std::fs::read_to_string(&gw.audit_path).unwrap();
    for t in alpha.iter().chain(&beta) {
        let token = t.trim_start_matches("Bearer ");
        assert!(
            !audit.contains(token) && !gw.stderr().contains(token),
            "{token} logged"
        );
    }
}
