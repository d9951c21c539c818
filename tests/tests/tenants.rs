//! End-to-end tests of gateway tenants (`sluice run --tenants FILE`): one sluice shared by
//! several agents, each identified by its source address or by proxy credentials, each with
//! its own policy and its own secrets. Real sluice, real curl, local origins only; tenants by
//! source address are told apart with loopback source addresses (`curl --interface
//! 127.0.0.2`: all of 127/8 is local on Linux) against a proxy on 127.0.0.1.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sluice_e2e::gateway::{
    self, ALPHA, BETA, allow_ports, assert_never_logged, base64, basic, connect_from, curl, get,
    l4_policy, read_response, rest_policy, status_line, token_provider, tunnel_from,
    two_source_tenants, write_secrets,
};
use sluice_e2e::ocsf::class;
use sluice_e2e::origin::{EchoOrigin, HttpOrigin};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid};
use sluice_e2e::reload::read_head;

// === 1. Identification by source address, each tenant its own policy ===

#[test]
fn source_tenants_reach_only_their_own_hosts_and_an_unknown_source_is_refused() {
    let dir = TempDir::new("tenants-src");
    let a = HttpOrigin::start();
    let b = HttpOrigin::start();
    let tenants = two_source_tenants(&dir, &[a.port()], &[b.port()]);
    let gw = gateway::start(&tenants, &[], &[]);

    let ok = get(&gw, Some(ALPHA), &[], a.port());
    assert_eq!(ok.status, 200, "alpha to its host: {ok:?}\n{}", gw.stderr());
    assert_eq!(ok.body, "hello from origin\n");
    let ok = get(&gw, Some(BETA), &[], b.port());
    assert_eq!(ok.status, 200, "beta to its host: {ok:?}\n{}", gw.stderr());

    // Each is refused the other's host.
    for (who, src, port) in [("alpha", ALPHA, b.port()), ("beta", BETA, a.port())] {
        let no = get(&gw, Some(src), &[], port);
        assert_eq!(no.status, 403, "{who} to the other's host: {no:?}");
        assert_eq!(no.json()["error"], "policy_denied", "{no:?}");
    }
    // Only the allowed requests reached the origins.
    assert_eq!(a.received().len(), 1, "{:?}", a.received());
    assert_eq!(b.received().len(), 1, "{:?}", b.received());

    // An address no tenant has (and 127.0.0.1, sluice's own) is refused with a reason that
    // says so and names no tenant.
    for src in ["127.0.0.4", "127.0.0.1"] {
        let no = get(&gw, Some(src), &[], a.port());
        assert_eq!(no.status, 403, "unknown source {src}: {no:?}");
        let body = no.json();
        assert_eq!(body["error"], "policy_denied", "{no:?}");
        let reason = body["reason"].as_str().unwrap_or_default();
        assert!(
            reason.to_ascii_lowercase().contains("tenant"),
            "the reason should say no tenant matches {src}: {no:?}"
        );
        assert!(
            !no.body.contains("alpha") && !no.body.contains("beta"),
            "the refusal of an unknown source names a tenant: {no:?}"
        );
    }
    assert_eq!(a.received().len(), 1, "{:?}", a.received());
    assert_events_valid(&gw);
}

/// Metrics name each tenant (`tenant:<name>`, few and named by the operator) and the hosts
/// the tenants' policies name, even for denied traffic (the label rules read every tenant's
/// policy, not only the gateway's own empty one).
#[test]
fn metrics_label_tenants_and_the_hosts_their_policies_name() {
    use sluice_e2e::scrape;
    let dir = TempDir::new("tenants-metrics");
    let a = HttpOrigin::start();
    let b = HttpOrigin::start();
    let tenants = two_source_tenants(&dir, &[a.port()], &[b.port()]);
    let gw = gateway::start(&tenants, &["--metrics-listen", "127.0.0.1:0"], &[]);
    assert_eq!(get(&gw, Some(ALPHA), &[], a.port()).status, 200);
    assert_eq!(get(&gw, Some(BETA), &[], a.port()).status, 403);
    let addr = scrape::metrics_addr(&gw);
    let (_, text) = scrape::openmetrics(addr);
    let samples = scrape::parse(&text);
    let v = |name: &str, labels: &[(&str, &str)]| scrape::value(&samples, name, labels);
    let by_binary = "sluice_decisions_by_binary_total";
    let alpha = [
        ("kind", "request"),
        ("decision", "allowed"),
        ("binary", "tenant:alpha"),
    ];
    assert_eq!(v(by_binary, &alpha), 1.0, "{text}");
    let beta = [
        ("kind", "request"),
        ("decision", "denied"),
        ("binary", "tenant:beta"),
    ];
    assert_eq!(v(by_binary, &beta), 1.0, "{text}");
    let denied = [
        ("kind", "request"),
        ("decision", "denied"),
        ("host", "127.0.0.1"),
    ];
    assert_eq!(v("sluice_decisions_by_host_total", &denied), 1.0, "{text}");
}

#[test]
fn an_entry_naming_a_binary_does_not_apply_to_a_tenant() {
    // The gateway cannot see the remote program: only `binaries: [{path: "/**"}]` (or `**`)
    // applies to a tenant; an entry for /usr/bin/curl does not, even when curl is the client.
    let dir = TempDir::new("tenants-bin");
    let origin = HttpOrigin::start();
    let open = HttpOrigin::start();
    dir.write(
        "alpha.yaml",
        &l4_policy(&[
            ("curl_only", origin.port(), "/usr/bin/curl"),
            ("every_binary", open.port(), "**"),
        ]),
    );
    let tenants = dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [alpha.yaml]\n"
        ),
    );
    let gw = gateway::start(&tenants, &[], &[]);

    let no = get(&gw, Some(ALPHA), &[], origin.port());
    assert_eq!(no.status, 403, "{no:?}\n{}", gw.stderr());
    let body = no.json();
    assert_eq!(body["error"], "policy_denied", "{no:?}");
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("curl_only"),
        "the reason should say why `curl_only` does not apply: {no:?}"
    );
    assert!(origin.received().is_empty(), "{:?}", origin.received());

    // `**` does apply.
    let ok = get(&gw, Some(ALPHA), &[], open.port());
    assert_eq!(ok.status, 200, "{ok:?}\n{}", gw.stderr());
    assert_events_valid(&gw);
}

// === 2. Each tenant its own secrets ===

const ALPHA_SECRET: &str = "alpha-s3cr3t-4b9e17";
const BETA_SECRET: &str = "beta-s3cr3t-c02d58";
const ENV_SECRET: &str = "env-s3cr3t-913aa0";
const PLACEHOLDER: &str = "openshell:resolve:env:TOKEN";

#[test]
fn each_tenant_gets_its_own_secret_values() {
    let dir = TempDir::new("tenants-secrets");
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    dir.write("api.yaml", &rest_policy(&[("api", port)]));
    dir.write("providers.yaml", &token_provider(port));
    write_secrets(&dir, "alpha.env", &format!("TOKEN={ALPHA_SECRET}\n"));
    // beta's come from a directory, one file per key (`secrets_dir`, as Kubernetes renders
    // a Secret volume).
    std::fs::create_dir(dir.path().join("beta.keys")).unwrap();
    write_secrets(&dir, "beta.keys/TOKEN", &format!("{BETA_SECRET}\n"));
    // delta has no secrets file: its values come from sluice's environment.
    let tenants = dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  \
               - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n    secrets_file: alpha.env\n  \
               - name: beta\n    sources: [\"{BETA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n    secrets_dir: beta.keys\n  \
               - name: delta\n    sources: [\"127.0.0.4\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n"
        ),
    );
    let (gw, ca) = gateway::intercepting(&dir, &tenants, &origin.cert, &[("TOKEN", ENV_SECRET)]);
    // A remote client learns what to trust from the proxy itself: `GET /ca.pem`, from any
    // address, tenant or not, is the CA that signs what this sluice terminates.
    let fetched = std::process::Command::new("curl")
        .args(["-s", "--fail", "--interface", "127.0.0.9"])
        .arg(format!("http://{}/ca.pem", gw.addr()))
        .output()
        .unwrap();
    assert!(fetched.status.success(), "{fetched:?}");
    assert_eq!(
        String::from_utf8_lossy(&fetched.stdout),
        std::fs::read_to_string(&ca).unwrap()
    );
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");

    for (who, src) in [("alpha", ALPHA), ("beta", BETA), ("delta", "127.0.0.4")] {
        let a = curl(
            &gw,
            Some(src),
            &["--cacert", ca.to_str().unwrap(), "-H", &auth],
            &format!("https://127.0.0.1:{port}/v1/{who}"),
        );
        assert_eq!(a.status, 200, "{who}: {a:?}\n{}", gw.stderr());
        // The echo came back scrubbed: the placeholder, never a value.
        for secret in [ALPHA_SECRET, BETA_SECRET, ENV_SECRET] {
            assert!(
                !a.head.contains(secret) && !a.body.contains(secret),
                "{who} saw a secret: {a:?}"
            );
        }
        assert!(a.body.contains(PLACEHOLDER), "{who}: {a:?}");
    }
    let seen = |who: &str| -> String {
        origin
            .received()
            .iter()
            .find(|r| r["url"] == format!("/v1/{who}"))
            .and_then(|r| r["headers"]["authorization"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("no request of {who} reached the origin"))
    };
    assert_eq!(seen("alpha"), format!("Bearer {ALPHA_SECRET}"));
    assert_eq!(seen("beta"), format!("Bearer {BETA_SECRET}"));
    assert_eq!(seen("delta"), format!("Bearer {ENV_SECRET}"));

    for secret in [ALPHA_SECRET, BETA_SECRET, ENV_SECRET] {
        assert_never_logged(&gw, secret, "a secret value");
    }
    assert_events_valid(&gw);
}

// === 3. Identification by proxy credentials ===

const GAMMA_PASSWORD: &str = "gamma-pw-71c3e9d2";
const DELTA_PASSWORD: &str = "delta-pw-5a0b44f1";

/// Tenants gamma and delta by proxy credentials (no sources), both allowed to `port`.
fn credential_tenants(dir: &TempDir, port: u16) -> PathBuf {
    dir.write("open.yaml", &allow_ports(&[port]));
    dir.write(
        "tenants.yaml",
        "tenants:\n  \
           - name: gamma\n    proxy_auth:\n      username: gamma\n      password_env: GAMMA_PROXY_PASSWORD\n    policy: [open.yaml]\n  \
           - name: delta\n    proxy_auth:\n      username: delta\n      password_env: DELTA_PROXY_PASSWORD\n    policy: [open.yaml]\n",
    )
}

fn start_credential_tenants(tenants: &Path) -> Sluice {
    gateway::start(
        tenants,
        &[],
        &[
            ("GAMMA_PROXY_PASSWORD", GAMMA_PASSWORD),
            ("DELTA_PROXY_PASSWORD", DELTA_PASSWORD),
        ],
    )
}

/// A 407 the way the contract has it: the Basic challenge and a JSON `proxy_auth_required`.
fn assert_407(head: &str, body: &str, what: &str) {
    assert_eq!(status_line(head), 407, "{what}: {head}{body}");
    let challenge = head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.trim()
            .eq_ignore_ascii_case("proxy-authenticate")
            .then(|| v.trim().to_string())
    });
    // `Basic realm="sluice"`, possibly with RFC 7617's `charset="UTF-8"` after it.
    let challenge = challenge.unwrap_or_else(|| panic!("{what}: no Proxy-Authenticate: {head}"));
    assert!(
        challenge == "Basic realm=\"sluice\"" || challenge.starts_with("Basic realm=\"sluice\","),
        "{what}: {head}"
    );
    let json: Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("{what}: body is not JSON ({e}): {body:?}"));
    assert_eq!(json["error"], "proxy_auth_required", "{what}: {body}");
}

#[test]
fn proxy_credentials_identify_a_tenant_and_never_travel_upstream_or_into_logs() {
    let dir = TempDir::new("tenants-auth");
    let origin = HttpOrigin::start();
    let tenants = credential_tenants(&dir, origin.port());
    let gw = start_credential_tenants(&tenants);
    let right = format!("gamma:{GAMMA_PASSWORD}");
    let wrong_password = "not-the-pw-0d9c61";
    let wrong = format!("gamma:{wrong_password}");

    let ok = get(&gw, None, &["--proxy-user", &right], origin.port());
    assert_eq!(ok.status, 200, "{ok:?}\n{}", gw.stderr());
    assert_eq!(ok.body, "hello from origin\n");
    let received = origin.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(
        received[0].header("proxy-authorization"),
        None,
        "Proxy-Authorization was forwarded upstream: {:?}",
        received[0]
    );

    // Wrong password, unknown user, no credentials: 407 with the challenge.
    for (what, args) in [
        ("wrong password", vec!["--proxy-user", wrong.as_str()]),
        ("unknown user", vec!["--proxy-user", "nobody:whatever"]),
        ("no credentials", vec![]),
    ] {
        let no = get(&gw, None, &args, origin.port());
        assert_407(&no.head, &no.body, what);
    }
    // The same for a CONNECT without credentials.
    let mut s = connect_from(&gw, [127, 0, 0, 1]);
    let port = origin.port();
    s.write_all(
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let (head, body) = read_response(&mut s);
    assert_407(&head, &body, "CONNECT without credentials");
    // A CONNECT with them opens the tunnel.
    let mut s = connect_from(&gw, [127, 0, 0, 1]);
    s.write_all(
        format!(
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: {}\r\n\r\n",
            basic("gamma", GAMMA_PASSWORD)
        )
        .as_bytes(),
    )
    .unwrap();
    let head = read_head(&mut s);
    assert_eq!(status_line(&head), 200, "{head}\n{}", gw.stderr());
    s.write_all(format!("GET /tunnelled HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes())
        .unwrap();
    let (head, body) = read_response(&mut s);
    assert_eq!(status_line(&head), 200, "{head}{body}");
    drop(s);
    assert_eq!(origin.received().len(), 2, "{:?}", origin.received());
    for r in origin.received() {
        assert_eq!(r.header("proxy-authorization"), None, "{r:?}");
    }

    // Neither password, nor the header that carried them, reached a log.
    for value in [
        GAMMA_PASSWORD.to_string(),
        wrong_password.to_string(),
        base64(right.as_bytes()),
        base64(wrong.as_bytes()),
    ] {
        assert_never_logged(&gw, &value, "a proxy password");
    }
    assert_events_valid(&gw);
}

#[test]
fn a_kept_alive_connection_stays_with_its_tenant() {
    let dir = TempDir::new("tenants-keepalive");
    let origin = HttpOrigin::start();
    let tenants = credential_tenants(&dir, origin.port());
    let gw = start_credential_tenants(&tenants);
    let port = origin.port();
    let request = |auth: Option<&str>| {
        let auth = auth.map_or(String::new(), |a| format!("Proxy-Authorization: {a}\r\n"));
        format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n")
    };
    let mut s = connect_from(&gw, [127, 0, 0, 1]);
    s.write_all(request(Some(&basic("gamma", GAMMA_PASSWORD))).as_bytes())
        .unwrap();
    let (head, _) = read_response(&mut s);
    assert_eq!(status_line(&head), 200, "{head}\n{}", gw.stderr());
    // The same credentials again: still gamma's.
    s.write_all(request(Some(&basic("gamma", GAMMA_PASSWORD))).as_bytes())
        .unwrap();
    let (head, _) = read_response(&mut s);
    assert_eq!(status_line(&head), 200, "{head}");
    // Another tenant's (valid) credentials on gamma's connection: refused.
    s.write_all(request(Some(&basic("delta", DELTA_PASSWORD))).as_bytes())
        .unwrap();
    let (head, body) = read_response(&mut s);
    assert_407(&head, &body, "delta's credentials on gamma's connection");
    assert_eq!(origin.received().len(), 2, "{:?}", origin.received());
    // Every event of that connection that admitted a request is gamma's.
    let events = gw.events();
    let mine: Vec<&Value> = events
        .iter()
        .filter(|e| e["dst_endpoint"]["port"].as_u64() == Some(u64::from(port)))
        .filter(|e| e["action_id"] != 2)
        .collect();
    assert!(!mine.is_empty(), "no events to the origin: {events:#?}");
    for e in mine {
        assert_eq!(e["actor"]["user"]["name"], "gamma", "{e:#}");
    }
    assert_events_valid(&gw);
}

#[test]
fn a_tenant_with_sources_and_credentials_needs_both() {
    let dir = TempDir::new("tenants-both");
    let origin = HttpOrigin::start();
    dir.write("open.yaml", &allow_ports(&[origin.port()]));
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  - name: epsilon\n    sources: [\"127.0.0.5\"]\n    proxy_auth:\n      username: eps\n      password_env: EPS_PASSWORD\n    policy: [open.yaml]\n",
    );
    let gw = gateway::start(&tenants, &[], &[("EPS_PASSWORD", "eps-pw-66f2")]);
    let creds = ["--proxy-user", "eps:eps-pw-66f2"];

    let ok = get(&gw, Some("127.0.0.5"), &creds, origin.port());
    assert_eq!(ok.status, 200, "{ok:?}\n{}", gw.stderr());
    // The right credentials from another address, the right address without credentials.
    let no = get(&gw, Some("127.0.0.6"), &creds, origin.port());
    assert_407(&no.head, &no.body, "credentials from another address");
    let no = get(&gw, Some("127.0.0.5"), &[], origin.port());
    assert_407(&no.head, &no.body, "the address without credentials");
    assert_eq!(origin.received().len(), 1, "{:?}", origin.received());
    assert_events_valid(&gw);
}

// === 4. Audit ===

#[test]
fn a_tenants_events_name_the_tenant_and_validate_as_ocsf() {
    let dir = TempDir::new("tenants-audit");
    let a = HttpOrigin::start();
    let b = HttpOrigin::start();
    let tenants = two_source_tenants(&dir, &[a.port()], &[b.port()]);
    let gw = gateway::start(&tenants, &[], &[]);

    // Plain-HTTP forwards (HTTP Activity events) and a CONNECT tunnel (Network Activity
    // open and close).
    assert_eq!(get(&gw, Some(ALPHA), &[], a.port()).status, 200);
    assert_eq!(get(&gw, Some(ALPHA), &[], b.port()).status, 403);
    assert_eq!(get(&gw, Some(BETA), &[], b.port()).status, 200);
    let (mut tunnel, head) = tunnel_from(&gw, [127, 0, 0, 2], a.port());
    assert_eq!(status_line(&head), 200, "{head}");
    tunnel
        .write_all(format!("GET /t HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n", a.port()).as_bytes())
        .unwrap();
    let (head, _) = read_response(&mut tunnel);
    assert_eq!(status_line(&head), 200, "{head}");
    drop(tunnel);

    let from = |e: &Value, src: &str| e["src_endpoint"]["ip"].as_str() == Some(src);
    let open = gw.wait_event("alpha's tunnel open", |e| {
        class(e) == 4001 && e["activity_id"] == 1 && from(e, ALPHA)
    });
    assert_eq!(open["actor"]["user"]["name"], "alpha", "{open:#}");
    let close = gw.wait_event("alpha's tunnel close", |e| {
        class(e) == 4001 && e["activity_id"] == 2 && from(e, ALPHA)
    });
    assert_eq!(close["actor"]["user"]["name"], "alpha", "{close:#}");
    gw.wait_event("beta's request", |e| class(e) == 4002 && from(e, BETA));
    let denied = gw.wait_event("alpha's denial", |e| {
        e["action_id"] == 2 && e["dst_endpoint"]["port"].as_u64() == Some(u64::from(b.port()))
    });
    assert_eq!(denied["actor"]["user"]["name"], "alpha", "{denied:#}");
    let events = gw.events();
    for (src, tenant) in [(ALPHA, "alpha"), (BETA, "beta")] {
        let theirs: Vec<&Value> = events.iter().filter(|e| from(e, src)).collect();
        assert!(!theirs.is_empty(), "no events from {tenant}: {events:#?}");
        for e in theirs {
            assert_eq!(e["actor"]["user"]["name"], tenant, "{e:#}");
            assert!(
                e["actor"].get("process").is_none(),
                "a tenant's event claims a process: {e:#}"
            );
        }
    }
    // stderr's shorthand names the tenant where it names the binary.
    let stderr = gw.stderr();
    assert!(stderr.contains("tenant:alpha"), "{stderr}");
    assert!(stderr.contains("tenant:beta"), "{stderr}");
    assert_events_valid(&gw);
}

// === Per-caller limits count per tenant ===

#[test]
fn connection_limits_count_per_tenant_not_per_address() {
    let dir = TempDir::new("tenants-limits");
    let origin = HttpOrigin::start();
    dir.write("open.yaml", &allow_ports(&[origin.port()]));
    // alpha has two addresses; beta one.
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  - name: alpha\n    sources: [\"127.0.0.2\", \"127.0.0.7\"]\n    policy: [open.yaml]\n  - name: beta\n    sources: [\"127.0.0.3\"]\n    policy: [open.yaml]\n",
    );
    let gw = gateway::start(&tenants, &["--max-connections-per-caller", "2"], &[]);
    let port = origin.port();
    let (_one, a) = tunnel_from(&gw, [127, 0, 0, 2], port);
    assert_eq!(status_line(&a), 200, "{a}\n{}", gw.stderr());
    let (_two, a) = tunnel_from(&gw, [127, 0, 0, 7], port);
    assert_eq!(status_line(&a), 200, "{a}");
    // alpha's share is taken, from whichever of its addresses.
    for src in [[127, 0, 0, 2], [127, 0, 0, 7]] {
        let (_s, a) = tunnel_from(&gw, src, port);
        assert_eq!(status_line(&a), 429, "{src:?}: {a}");
        let body: Value = serde_json::from_str(a.split_once("\r\n\r\n").unwrap().1)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {a}"));
        assert_eq!(body["error"], "caller_connection_limit", "{a}");
    }
    // beta is not held back by alpha.
    let (_b, a) = tunnel_from(&gw, [127, 0, 0, 3], port);
    assert_eq!(status_line(&a), 200, "beta: {a}");
    let refused = gw.wait_event("alpha's 429", |e| {
        class(e) == 4001 && e["activity_id"] == 1 && e["status_code"] == "429"
    });
    assert_eq!(refused["actor"]["user"]["name"], "alpha", "{refused:#}");
    assert_events_valid(&gw);
}

/// A tenant's profile cannot name what is not the tenant's: another tenant's proxy password
/// (in sluice's environment, as every `password_env` is) never resolves for it, and a tenant
/// with its own secrets file gets nothing from sluice's environment.
#[test]
fn a_tenants_profile_cannot_read_a_proxy_password_or_the_environment_past_its_file() {
    let dir = TempDir::new("tenants-env");
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    dir.write("api.yaml", &rest_policy(&[("api", port)]));
    // One profile reaching for gamma's proxy password, one for a value in sluice's
    // environment; both bound to the origin.
    dir.write(
        "providers.yaml",
        &format!(
            "id: grab\ncredentials:\n  - name: pw\n    env_vars: [GAMMA_PROXY_PASSWORD]\n    auth_style: bearer\n  - name: env\n    env_vars: [ENV_TOKEN]\n    auth_style: header\n    header_name: x-env\nendpoints:\n  - {{host: 127.0.0.1, port: {port}}}\n"
        ),
    );
    write_secrets(&dir, "beta.env", "UNRELATED=1\n");
    let tenants = dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  \
               - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n  \
               - name: beta\n    sources: [\"{BETA}\"]\n    policy: [api.yaml]\n    providers: [providers.yaml]\n    secrets_file: beta.env\n  \
               - name: gamma\n    proxy_auth: {{username: gamma, password_env: GAMMA_PROXY_PASSWORD}}\n    policy: [api.yaml]\n"
        ),
    );
    let password = "gamma-pw-never-a-secret-9d1";
    let env_value = "env-token-for-local-callers-4c2";
    let (gw, ca) = gateway::intercepting(
        &dir,
        &tenants,
        &origin.cert,
        &[("GAMMA_PROXY_PASSWORD", password), ("ENV_TOKEN", env_value)],
    );
    let placeholders = [
        (
            "pw",
            "Authorization: Bearer openshell:resolve:env:GAMMA_PROXY_PASSWORD",
        ),
        ("env", "x-env: openshell:resolve:env:ENV_TOKEN"),
    ];
    for (who, src) in [("alpha", ALPHA), ("beta", BETA)] {
        for (what, header) in placeholders {
            let a = curl(
                &gw,
                Some(src),
                &["--cacert", ca.to_str().unwrap(), "-H", header],
                &format!("https://127.0.0.1:{port}/v1/{who}/{what}"),
            );
            for value in [password, env_value] {
                assert!(
                    !a.head.contains(value) && !a.body.contains(value),
                    "{who}: {a:?}"
                );
            }
        }
    }
    let text = origin.log_text();
    assert!(
        !text.contains(password),
        "a tenant's request carried a proxy password: {text}"
    );
    // alpha (no secrets file) still gets sluice's environment, only not a proxy password;
    // beta (its own file) gets nothing from it.
    let env_of = |who: &str| {
        origin
            .received()
            .iter()
            .find(|r| r["url"] == format!("/v1/{who}/env"))
            .and_then(|r| r["headers"]["x-env"].as_str().map(str::to_string))
    };
    assert_eq!(env_of("alpha").as_deref(), Some(env_value), "{text}");
    assert_ne!(env_of("beta").as_deref(), Some(env_value), "{text}");
    assert_never_logged(&gw, password, "a proxy password");
}
