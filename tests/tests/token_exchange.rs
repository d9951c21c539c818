//! End-to-end: RFC 8693 token exchange (`token_grant` with `grant: token_exchange`, sluice's
//! extension) through the real `sluice` binary. sluice fetches a JWT-SVID from a SPIFFE
//! Workload API served over a Unix socket from the published proto (grpcio) and sends it as
//! the `subject_token` of a token exchange at a token endpoint: oauthlib's server with the
//! token-exchange grant registered through its extension point, checking the subject token
//! against the trust bundle (JWKS) it reads from the same Workload API (FetchJWTBundles), the
//! audience and resource against its own lists (`tests/clients/spiffe_grant_server.py`). The
//! tokens live two seconds: requests across several expiries all succeed, each with a current
//! token; the token is never echoed back to the client nor logged. An answer whose
//! `issued_token_type` is not a token a header can carry ends in `502 token_grant_failed`, not
//! in sending it; a misconfigured exchange is refused at start, naming the field.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::origin::{EchoOrigin, OriginProcess, make_cert};
use sluice_e2e::proxy::{Sluice, TempDir, run};

const SVID_AUDIENCE: &str = "https://sts.example.test";
const RESOURCE: &str = "https://api.example.test/v1";
const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

fn profile(token_port: u16, api_port: u16, extra: &str) -> String {
    format!(
        "\
id: exchange
credentials:
  - name: access_token
    required: false
    auth_style: bearer
    token_grant:
      token_endpoint: 'https://127.0.0.1:{token_port}/token'
      grant: token_exchange
      audience: api-default
      jwt_svid_audience: '{SVID_AUDIENCE}'
      scopes: [demo]
{extra}endpoints:
  - {{host: 127.0.0.1, port: {api_port}, protocol: rest, access: read-write, enforcement: enforce}}
binaries: [/usr/bin/curl]
"
    )
}

const POLICY: &str = "version: 1\nnetwork_policies:\n  unrelated:\n    endpoints: [{host: unrelated.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n";

struct Exchanger {
    server: OriginProcess,
    ca: PathBuf,
    socket: PathBuf,
    log: PathBuf,
}

/// The Workload API and the token-exchange endpoint, issuing `issued_type` if given.
fn exchanger(dir: &Path, issued_type: Option<&str>) -> Exchanger {
    let dir = dir.join("exchange");
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, cert, key) = make_cert(&dir);
    let socket = dir.join("agent.sock");
    let log = dir.join("grants.jsonl");
    let mut cmd = Command::new("python3");
    cmd.arg(clients().join("spiffe_grant_server.py"))
        .arg(&cert)
        .arg(&key)
        .arg(&log)
        .arg(&socket)
        .env("GRANT", "token_exchange")
        .env("SVID_AUDIENCE", SVID_AUDIENCE)
        .env("EXCHANGE_AUDIENCES", "api-default")
        .env("EXCHANGE_RESOURCES", RESOURCE)
        .env("EXPIRES_IN", "32");
    if let Some(t) = issued_type {
        cmd.env("ISSUED_TYPE", t);
    }
    let server = OriginProcess::spawn(&mut cmd, "the token-exchange server");
    Exchanger {
        server,
        ca,
        socket,
        log,
    }
}

fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn get(sluice: &Sluice, ca: &Path, url: &str) -> String {
    run(Command::new("/usr/bin/curl")
        .args(["-s", "-i", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"])
        .args(["-H", "Authorization: Bearer agent-made-up"])
        .arg(url))
    .1
}

fn start(dir: &TempDir, ex: &Exchanger, api: &EchoOrigin, extra: &str) -> (Sluice, PathBuf) {
    let providers = dir.write("exchange.yaml", &profile(ex.server.port, api.port(), extra));
    let socket = format!("unix://{}", ex.socket.display());
    Sluice::intercepting(
        dir,
        POLICY,
        &[&ex.ca, &api.cert],
        Some(&providers),
        &[("SPIFFE_ENDPOINT_SOCKET", socket.as_str())],
    )
}

#[test]
fn the_svid_is_exchanged_for_tokens_set_on_bound_requests_across_expiries() {
    let dir = TempDir::new("token-exchange");
    // 32 s less sluice's 30 s margin: each token is kept 2 s.
    let ex = exchanger(dir.path(), None);
    let api_dir = dir.path().join("api");
    std::fs::create_dir_all(&api_dir).unwrap();
    let api = EchoOrigin::start(&api_dir);
    let extra = format!("      resource: '{RESOURCE}'\n      requested_token_type: '{JWT_TYPE}'\n");
    let (sluice, ca) = start(&dir, &ex, &api, &extra);
    let url = format!("https://127.0.0.1:{}/echo", api.port());
    let mut client_saw = String::new();
    let begin = Instant::now();
    while begin.elapsed() < Duration::from_secs(6) {
        let out = get(&sluice, &ca, &url);
        assert!(out.ends_with("200"), "{out}\n{}", sluice.stderr());
        client_saw.push_str(&out);
        sleep(Duration::from_millis(300));
    }
    // Every request carried an exchanged token (the agent's own header replaced), renewed.
    let received: BTreeSet<String> = std::fs::read_to_string(&api.log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| r["headers"]["authorization"].as_str().unwrap().to_string())
        .collect();
    assert!(
        received
            .iter()
            .all(|a| a.starts_with("Bearer xchg-api-default-")),
        "{received:?}"
    );
    assert!(received.len() >= 3, "not renewed: {received:?}");
    // The exchanges as RFC 8693 has them, every one granted.
    let grants: Vec<Value> = logged(&ex.log)
        .into_iter()
        .filter(|g| g["server"] == "token")
        .collect();
    assert!(grants.len() >= 3, "{grants:?}");
    for g in &grants {
        assert_eq!(g["status"], 200, "{g}");
        let form = &g["form"];
        assert_eq!(
            form["grant_type"],
            "urn:ietf:params:oauth:grant-type:token-exchange"
        );
        assert_eq!(form["subject_token_type"], JWT_TYPE);
        assert_eq!(form["audience"], "api-default");
        assert_eq!(form["resource"], RESOURCE);
        assert_eq!(form["scope"], "demo");
        assert_eq!(form["requested_token_type"], JWT_TYPE);
        assert!(
            form.get("client_assertion_type").is_none(),
            "a client assertion was sent: {form}"
        );
    }
    // No token, and no SVID, reaches the client, the audit log or sluice's output.
    let audit = serde_json::to_string(&sluice.events()).unwrap();
    let svids: Vec<String> = logged(&ex.log)
        .iter()
        .filter_map(|g| g["svid"].as_str().map(str::to_string))
        .collect();
    assert!(!svids.is_empty());
    for secret in grants
        .iter()
        .filter_map(|g| g["token"].as_str().map(str::to_string))
        .chain(svids)
    {
        assert!(!client_saw.contains(&secret), "the client saw {secret}");
        assert!(!audit.contains(&secret), "the audit log holds {secret}");
        assert!(!sluice.stderr().contains(&secret), "stderr holds {secret}");
    }
}

/// An exchange that issues a refresh token (not a credential for an API request) is not sent:
/// the request gets `502 token_grant_failed`, and sluice's log says why.
#[test]
fn an_unusable_issued_token_type_is_never_sent() {
    let dir = TempDir::new("token-exchange-type");
    let ex = exchanger(
        dir.path(),
        Some("urn:ietf:params:oauth:token-type:refresh_token"),
    );
    let api_dir = dir.path().join("api");
    std::fs::create_dir_all(&api_dir).unwrap();
    let api = EchoOrigin::start(&api_dir);
    let (sluice, ca) = start(&dir, &ex, &api, &format!("      resource: '{RESOURCE}'\n"));
    let out = get(
        &sluice,
        &ca,
        &format!("https://127.0.0.1:{}/echo", api.port()),
    );
    assert!(out.ends_with("502"), "{out}\n{}", sluice.stderr());
    assert!(out.contains("token_grant_failed"), "{out}");
    assert!(
        std::fs::read_to_string(&api.log)
            .unwrap_or_default()
            .is_empty(),
        "the origin was reached"
    );
    assert!(
        sluice.stderr().contains("refresh_token"),
        "{}",
        sluice.stderr()
    );
}

/// A token exchange written wrong does not load: each problem names its field.
#[test]
fn a_misconfigured_token_exchange_is_refused_at_start() {
    let dir = TempDir::new("token-exchange-bad");
    for (extra, field, says) in [
        (
            "      resource: 'api.example.test'\n",
            "token_grant.resource",
            "absolute URI",
        ),
        (
            "      requested_token_type: 'urn:ietf:params:oauth:token-type:refresh_token'\n",
            "token_grant.requested_token_type",
            "not a token sluice can place",
        ),
        (
            "      client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'\n",
            "token_grant.client_assertion_type",
            "no client assertion",
        ),
    ] {
        let providers = dir.write("bad.yaml", &profile(1, 2, extra));
        let policy = dir.write("policy.yaml", POLICY);
        let (code, out, err) = run(Command::new(sluice_e2e::sluice_bin())
            .args(["policy", "check"])
            .arg(&policy)
            .arg("--providers")
            .arg(&providers));
        let err = format!("{out}{err}");
        assert_ne!(code, 0, "{extra}: {err}");
        assert!(err.contains(field) && err.contains(says), "{extra}: {err}");
    }
    // `resource` without the exchange.
    let providers = dir.write(
        "bad.yaml",
        &profile(1, 2, &format!("      resource: '{RESOURCE}'\n"))
            .replace("      grant: token_exchange\n", ""),
    );
    let policy = dir.write("policy.yaml", POLICY);
    let (code, out, err) = run(Command::new(sluice_e2e::sluice_bin())
        .args(["policy", "check"])
        .arg(&policy)
        .arg("--providers")
        .arg(&providers));
    let err = format!("{out}{err}");
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("grant: token_exchange"), "{err}");
}
