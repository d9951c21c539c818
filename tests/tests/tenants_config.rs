//! End-to-end tests of a gateway's tenants file (`sluice run --tenants FILE`): reloads that
//! change a tenant or remove one (and those refused), a malformed file refused at start with
//! every problem at its file, line and field, and the flags `--tenants` excludes. Real
//! sluice, real curl, local origins only.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use sluice_e2e::gateway::{
    self, ALPHA, BETA, allow_ports, col_of, eventually, exit_of, get, hup, line_of, read_response,
    status_line, tunnel_from, two_source_tenants, write_secrets,
};
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{TempDir, assert_events_valid};
use sluice_e2e::reload::{closed_within, replace};

// === 5. Reload ===

#[test]
fn sighup_reloads_a_tenants_policy_and_a_removed_tenant_is_refused_and_cut_off() {
    let dir = TempDir::new("tenants-reload");
    let a = HttpOrigin::start();
    let b = HttpOrigin::start();
    let tenants = two_source_tenants(&dir, &[a.port()], &[b.port()]);
    // A watch interval of an hour: only SIGHUP can reload within the test.
    let gw = gateway::start(&tenants, &["--watch-interval", "1h"], &[]);
    assert_eq!(get(&gw, Some(ALPHA), &[], a.port()).status, 200);
    assert_eq!(get(&gw, Some(ALPHA), &[], b.port()).status, 403);

    // alpha's own policy file changes: b is newly allowed.
    replace(
        &dir.path().join("alpha.yaml"),
        &allow_ports(&[a.port(), b.port()]),
    );
    thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        get(&gw, Some(ALPHA), &[], b.port()).status,
        403,
        "reloaded without SIGHUP"
    );
    hup(&gw);
    eventually(&gw, ALPHA, b.port(), 200, "alpha's new host after SIGHUP");
    assert_eq!(get(&gw, Some(BETA), &[], b.port()).status, 200);

    // beta holds a tunnel to b.
    let port = b.port();
    let (mut tunnel, head) = tunnel_from(&gw, [127, 0, 0, 3], port);
    assert_eq!(status_line(&head), 200, "{head}");
    tunnel
        .write_all(format!("GET /held HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes())
        .unwrap();
    let (head, _) = read_response(&mut tunnel);
    assert_eq!(status_line(&head), 200, "{head}");

    // beta is removed from the tenants file.
    replace(
        &tenants,
        &format!(
            "tenants:\n  - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [alpha.yaml]\n"
        ),
    );
    hup(&gw);
    eventually(&gw, BETA, b.port(), 403, "beta after its removal");
    // (A connection identified just before the swap is refused as beta's, by beta's empty
    // configuration; one made after it is nobody's.)
    let no = get(&gw, Some(BETA), &[], b.port());
    assert_eq!(no.status, 403, "{no:?}");
    assert_eq!(no.json()["error"], "policy_denied", "{no:?}");
    assert!(!no.body.contains("beta"), "{no:?}");
    // Its live tunnel is closed.
    assert!(
        closed_within(&mut tunnel).is_some(),
        "the removed tenant's tunnel stayed open\n{}",
        gw.stderr()
    );
    // alpha goes on under its new policy.
    assert_eq!(get(&gw, Some(ALPHA), &[], a.port()).status, 200);
    assert_eq!(get(&gw, Some(ALPHA), &[], b.port()).status, 200);
    assert_events_valid(&gw);
}

#[test]
fn a_failed_reload_keeps_every_tenants_last_good_configuration() {
    let dir = TempDir::new("tenants-badreload");
    let a = HttpOrigin::start();
    let b = HttpOrigin::start();
    let tenants = two_source_tenants(&dir, &[a.port()], &[b.port()]);
    let gw = gateway::start(&tenants, &["--watch-interval", "1h"], &[]);
    assert_eq!(get(&gw, Some(ALPHA), &[], b.port()).status, 403);

    // alpha's change is good, beta's file is broken: nothing of it may apply.
    replace(
        &dir.path().join("alpha.yaml"),
        &allow_ports(&[a.port(), b.port()]),
    );
    replace(
        &dir.path().join("beta.yaml"),
        "version: 1\nnetwork_policies:\n  broken:\n    endpoints:\n      - {host: 127.0.0.1, prot: 1}\n",
    );
    hup(&gw);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gw.stderr().contains("last good configuration") {
        assert!(
            Instant::now() < deadline,
            "no failed reload reported:\n{}",
            gw.stderr()
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert!(
        gw.stderr().contains("beta.yaml"),
        "the failure should name beta's file:\n{}",
        gw.stderr()
    );
    assert_eq!(
        get(&gw, Some(ALPHA), &[], b.port()).status,
        403,
        "half a reload applied"
    );
    assert_eq!(get(&gw, Some(ALPHA), &[], a.port()).status, 200);
    assert_eq!(get(&gw, Some(BETA), &[], b.port()).status, 200);
    assert_events_valid(&gw);
}

// === 6. A malformed tenants file ===

/// `sluice run --tenants FILE` must fail with exit 1 and, on stderr, a diagnostic line
/// `FILE:LINE:COL: ...` on `line` (and at `col`, when given) that mentions `field`.
fn assert_load_error(dir: &TempDir, text: &str, line: usize, col: Option<usize>, field: &str) {
    let (f, err) = load_failure(dir, text);
    let prefix = match col {
        Some(c) => format!("{f}:{line}:{c}: "),
        None => format!("{f}:{line}:"),
    };
    assert!(
        err.lines()
            .any(|l| l.starts_with(&prefix) && l.contains(field)),
        "no diagnostic `{prefix}...{field}...` on stderr:\n{err}\nfile:\n{text}"
    );
}

/// `sluice run --tenants` on `text` (written to `dir/tenants.yaml`), which must fail: the
/// file's path and stderr.
fn load_failure(dir: &TempDir, text: &str) -> (String, String) {
    let file = dir.write("tenants.yaml", text);
    let f = file.to_str().unwrap().to_string();
    let (code, err) = exit_of(
        &[
            "run",
            "--listen",
            "127.0.0.1:0",
            "--tenants",
            &f,
            "--audit-log",
            "/dev/null",
        ],
        &["MISSING_PROXY_PASSWORD"],
    );
    assert_eq!(code, Some(1), "exit code; stderr:\n{err}\nfile:\n{text}");
    assert!(!err.contains("listening on"), "{err}");
    assert!(!err.contains("panicked at"), "{err}");
    (f, err)
}

fn bad_dir(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    dir.write("alpha.yaml", &allow_ports(&[9]));
    dir
}

#[test]
fn a_tenants_file_with_an_unknown_field_stops_startup_at_its_line_and_column() {
    let dir = bad_dir("tenants-bad-field");
    let text = "tenants:\n  - name: alpha\n    sources: [\"127.0.0.2\"]\n    policy: [alpha.yaml]\n    colour: red\n";
    assert_load_error(
        &dir,
        text,
        line_of(text, "colour"),
        Some(col_of(text, "colour")),
        "colour",
    );
}

#[test]
fn overlapping_sources_of_tenants_without_credentials_stop_startup_at_the_sources_field() {
    let dir = bad_dir("tenants-bad-overlap");
    let text = "tenants:\n  - name: alpha\n    sources: [\"127.0.0.0/24\"]\n    policy: [alpha.yaml]\n  - name: beta\n    sources: [\"127.0.0.2\"]\n    policy: [alpha.yaml]\n";
    let first = line_of(text, "127.0.0.0/24");
    let second = line_of(text, "\"127.0.0.2\"");
    let (f, err) = load_failure(&dir, text);
    // The diagnostic names `sources` and points at a `sources` field, not at the tenant.
    assert!(
        err.lines().any(|l| {
            [first, second]
                .iter()
                .any(|n| l.starts_with(&format!("{f}:{n}:")))
                && l.contains("sources")
        }),
        "no diagnostic at either `sources` line ({first}, {second}):\n{err}"
    );
    // The same ranges are fine when both tenants need credentials.
    let text = "tenants:\n  - name: alpha\n    sources: [\"127.0.0.0/24\"]\n    proxy_auth: {username: a, password_env: A_PW}\n    policy: [alpha.yaml]\n  - name: beta\n    sources: [\"127.0.0.2\"]\n    proxy_auth: {username: b, password_env: B_PW}\n    policy: [alpha.yaml]\n";
    let tenants = dir.write("tenants.yaml", text);
    let gw = gateway::start(&tenants, &[], &[("A_PW", "a-pw"), ("B_PW", "b-pw")]);
    drop(gw);
}

#[test]
fn an_unset_password_env_stops_startup_at_its_line() {
    let dir = bad_dir("tenants-bad-pw");
    let text = "tenants:\n  - name: gamma\n    proxy_auth:\n      username: gamma\n      password_env: MISSING_PROXY_PASSWORD\n    policy: [alpha.yaml]\n";
    assert_load_error(
        &dir,
        text,
        line_of(text, "password_env"),
        None,
        "password_env",
    );
}

#[test]
fn every_error_of_a_tenants_file_is_reported() {
    let dir = bad_dir("tenants-bad-all");
    let text = "tenants:\n  - name: alpha\n    sources: [\"127.0.0.2\"]\n    policy: [alpha.yaml]\n    colour: red\n  - name: beta\n    sources: [\"10.0.0.0/33\"]\n    policy: [alpha.yaml]\n";
    let (f, err) = load_failure(&dir, text);
    for (needle, field) in [("colour", "colour"), ("10.0.0.0/33", "sources")] {
        let prefix = format!("{f}:{}:", line_of(text, needle));
        assert!(
            err.lines()
                .any(|l| l.starts_with(&prefix) && l.contains(field)),
            "not every error reported (missing {field}):\n{err}"
        );
    }
}

#[test]
fn an_unset_password_env_is_reported_along_with_the_files_other_errors() {
    // "every error on stderr": the environment is checked even when the file has another
    // error.
    let dir = bad_dir("tenants-bad-all-env");
    let text = "tenants:\n  - name: alpha\n    sources: [\"127.0.0.2\"]\n    policy: [alpha.yaml]\n    colour: red\n  - name: gamma\n    proxy_auth:\n      username: gamma\n      password_env: MISSING_PROXY_PASSWORD\n    policy: [alpha.yaml]\n";
    let (f, err) = load_failure(&dir, text);
    for field in ["colour", "password_env"] {
        let prefix = format!("{f}:{}:", line_of(text, field));
        assert!(
            err.lines()
                .any(|l| l.starts_with(&prefix) && l.contains(field)),
            "not every error reported (missing {field}):\n{err}"
        );
    }
}

// === 7. Usage ===

#[test]
fn tenants_conflicts_with_policy_providers_and_secrets_file() {
    let dir = TempDir::new("tenants-usage");
    dir.write("alpha.yaml", &allow_ports(&[9]));
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  - name: alpha\n    sources: [\"127.0.0.2\"]\n    policy: [alpha.yaml]\n",
    );
    let t = tenants.to_str().unwrap();
    let policy = dir.path().join("alpha.yaml");
    let p = policy.to_str().unwrap();
    let secrets = write_secrets(&dir, "s.env", "TOKEN=x\n");
    for (flag, value) in [
        ("--policy", p),
        ("--providers", p),
        ("--secrets-file", secrets.to_str().unwrap()),
    ] {
        let (code, err) = exit_of(
            &[
                "run",
                "--listen",
                "127.0.0.1:0",
                "--tenants",
                t,
                flag,
                value,
                "--audit-log",
                "/dev/null",
            ],
            &[],
        );
        assert_eq!(code, Some(2), "--tenants with {flag}: {err}");
        assert!(
            err.contains(flag),
            "the usage error should name {flag}: {err}"
        );
        assert!(!err.contains("listening on"), "{err}");
    }
    // `sluice exec` has no tenants.
    // (A usage error, or exec's own refusal before it runs anything.)
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let (code, err) = exit_of(&["exec", "--tenants", t, "--", "sh", "-c", &touch], &[]);
    assert!(
        matches!(code, Some(2 | 125)),
        "sluice exec --tenants: {code:?} {err}"
    );
    assert!(err.contains("--tenants"), "{err}");
    assert!(!marker.exists(), "sluice exec --tenants ran the command");
}
