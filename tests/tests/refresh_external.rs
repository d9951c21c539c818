//! End-to-end: `refresh.strategy: external` through the real `sluice` binary. A process
//! outside sluice (here, the test) keeps the value current in the secrets file together with
//! its expiry (`<KEY>_EXPIRES_AT`); sluice serves the value to its binding until then, takes a
//! rewrite in within a second or two, and fails closed: an expiry passed, removed or
//! unreadable is `503 credential_refresh_failed`, never the last value. The values never reach
//! the client (the origin echoes them back) nor sluice's log.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_e2e::origin::EchoOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, run};

const FIRST: &str = "external-FIRST-value-1c9e4b7a";
const SECOND: &str = "external-SECOND-value-8d2f6a03";

const POLICY: &str = "version: 1\nnetwork_policies:\n  unrelated:\n    endpoints: [{host: unrelated.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n";

fn profile(port: u16) -> String {
    format!(
        "\
id: api
credentials:
  - name: token
    env_vars: [API_TOKEN]
    auth_style: bearer
    refresh: {{strategy: external}}
endpoints:
  - {{host: 127.0.0.1, port: {port}, protocol: rest, enforcement: enforce, access: full}}
binaries: [/usr/bin/curl]
"
    )
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// What the outside process writes: atomically, as a secrets manager's agent does.
fn write_secrets(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn get(sluice: &Sluice, ca: &Path, url: &str) -> String {
    run(Command::new("/usr/bin/curl")
        .args(["-s", "-i", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"])
        .args([
            "-H",
            "Authorization: Bearer openshell:resolve:env:API_TOKEN",
        ])
        .arg(url))
    .1
}

/// Requests until one answers `want` (at most `within`); every answer seen.
fn until(sluice: &Sluice, ca: &Path, url: &str, want: &str, within: Duration) -> String {
    let start = Instant::now();
    let mut seen = String::new();
    loop {
        let out = get(sluice, ca, url);
        seen.push_str(&out);
        if out.ends_with(want) {
            return seen;
        }
        assert!(
            start.elapsed() < within,
            "no {want} within {within:?}: {out}\n{}",
            sluice.stderr()
        );
        sleep(Duration::from_millis(250));
    }
}

#[test]
fn an_externally_kept_value_is_served_until_its_expiry_and_never_after() {
    let dir = TempDir::new("refresh-external");
    let origin = EchoOrigin::start(dir.path());
    let providers = dir.write("api.yaml", &profile(origin.port()));
    let secrets = dir.path().join("secrets.env");
    write_secrets(
        &secrets,
        &format!("API_TOKEN={FIRST}\nAPI_TOKEN_EXPIRES_AT={}\n", now() + 600),
    );
    let secrets_arg = secrets.display().to_string();
    let (sluice, ca) = Sluice::intercepting_with(
        &dir,
        POLICY,
        &[&origin.cert],
        Some(&providers),
        // An environment value must never stand in for the external one.
        &[("API_TOKEN", "stale-ENVIRONMENT-value-55aa")],
        &["--secrets-file", &secrets_arg],
    );
    let url = format!("https://127.0.0.1:{}/echo", origin.port());
    let mut client_saw = get(&sluice, &ca, &url);
    assert!(
        client_saw.ends_with("200"),
        "{client_saw}\n{}",
        sluice.stderr()
    );

    // Rotated by the outside process: the next requests carry the new value.
    write_secrets(
        &secrets,
        &format!("API_TOKEN={SECOND}\nAPI_TOKEN_EXPIRES_AT={}\n", now() + 600),
    );
    let start = Instant::now();
    loop {
        let out = get(&sluice, &ca, &url);
        client_saw.push_str(&out);
        let log = std::fs::read_to_string(&origin.log).unwrap();
        if log.contains(SECOND) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not rotated: {log}"
        );
        sleep(Duration::from_millis(250));
    }

    // Expired (the outside process stopped keeping it): 503, not the last value.
    write_secrets(
        &secrets,
        &format!("API_TOKEN={SECOND}\nAPI_TOKEN_EXPIRES_AT={}\n", now() - 1),
    );
    client_saw.push_str(&until(&sluice, &ca, &url, "503", Duration::from_secs(10)));
    let out = get(&sluice, &ca, &url);
    assert!(out.contains("credential_refresh_failed"), "{out}");
    // Renewed: served again.
    write_secrets(
        &secrets,
        &format!("API_TOKEN={FIRST}\nAPI_TOKEN_EXPIRES_AT={}\n", now() + 600),
    );
    client_saw.push_str(&until(&sluice, &ca, &url, "200", Duration::from_secs(10)));
    // Its expiry removed, or unreadable: 503 again.
    for broken in [
        format!("API_TOKEN={FIRST}\n"),
        format!("API_TOKEN={FIRST}\nAPI_TOKEN_EXPIRES_AT=tomorrow\n"),
    ] {
        write_secrets(&secrets, &broken);
        client_saw.push_str(&until(&sluice, &ca, &url, "503", Duration::from_secs(10)));
        write_secrets(
            &secrets,
            &format!("API_TOKEN={FIRST}\nAPI_TOKEN_EXPIRES_AT={}\n", now() + 600),
        );
        client_saw.push_str(&until(&sluice, &ca, &url, "200", Duration::from_secs(10)));
    }

    let received = std::fs::read_to_string(&origin.log).unwrap();
    assert!(!received.contains("stale-ENVIRONMENT"), "{received}");
    for value in [FIRST, SECOND] {
        assert!(!client_saw.contains(value), "the client saw {value}");
        assert!(
            !sluice.stderr().contains(value),
            "sluice's log holds {value}"
        );
    }
    assert!(
        sluice.stderr().contains("API_TOKEN_EXPIRES_AT"),
        "{}",
        sluice.stderr()
    );
}
