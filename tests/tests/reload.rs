//! End-to-end tests of hot reload with the real binary: a kept-alive HTTP/1.1 connection and
//! an HTTP/2 connection whose next request is judged by the new policy (and which is closed
//! once the policy no longer admits it at all; `revoke.rs` has the rest), an invalid file (the
//! old policy stays in force, the exact error is audited), a rotated secret (the origin sees
//! the new value from the next request, no value reaches the logs, and a value rotated out
//! that an upstream stored comes back as its placeholder), SIGHUP, and a Kubernetes
//! ConfigMap's `..data` symlink swap. Every audit event is validated against OCSF.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use sluice_e2e::ocsf::class;
use sluice_e2e::origin::EchoOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python, run};
use sluice_e2e::reload::{replace, replace_secret};

/// A Python `httpx` client holding one connection through sluice: each path written to it is
/// fetched on that connection (with the placeholder as `Authorization` under `/auth` and
/// `/store`), and its status, HTTP version and body (a JSON string) printed.
const CLIENT: &str = r#"
import json, sys, httpx
mode, proxy, ca, base = sys.argv[1:5]
c = httpx.Client(proxy=proxy, verify=ca, http1=(mode == 'h1'), http2=(mode == 'h2'), timeout=20)
for line in sys.stdin:
    path = line.strip()
    if not path:
        break
    r = c.get(base + path, headers={'authorization': 'Bearer openshell:resolve:env:TEST_API_KEY'} if path.startswith(('/auth', '/store')) else {})
    print(r.status_code, r.http_version, json.dumps(r.text), flush=True)
"#;

struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Client {
    fn start(mode: &str, sluice: &Sluice, ca: &Path, port: u16) -> Client {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(CLIENT)
            .arg(mode)
            .arg(sluice.proxy_url())
            .arg(ca)
            .arg(format!("https://127.0.0.1:{port}"))
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Client {
            child,
            stdin,
            stdout,
        }
    }

    /// Fetches `path` on the held connection: `(status, HTTP version)`.
    fn get(&mut self, path: &str) -> (u16, String) {
        let (status, version, _) = self.get_body(path);
        (status, version)
    }

    /// Fetches `path` on the held connection: `(status, HTTP version, body)`.
    fn get_body(&mut self, path: &str) -> (u16, String, String) {
        writeln!(self.stdin, "{path}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let mut parts = line.splitn(3, ' ');
        let status = parts
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("client failed on {path}: {line:?}"));
        let version = parts.next().unwrap_or_default().to_string();
        let body: String = serde_json::from_str(parts.next().unwrap_or("\"\"")).unwrap();
        (status, version, body)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An inspected endpoint on `port` for Python, allowing GET on each of `paths`.
fn policy(port: u16, paths: &[&str]) -> String {
    let rules: String = paths
        .iter()
        .map(|p| format!("          - allow: {{method: GET, path: \"{p}\"}}\n"))
        .collect();
    format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n{rules}    binaries:\n      - path: {}\n",
        python()
    )
}

/// The Device Config State Change events so far.
fn config_events(sluice: &Sluice) -> Vec<Value> {
    sluice
        .events()
        .into_iter()
        .filter(|e| class(e) == 5019)
        .collect()
}

/// Waits for the `n`th config event (the first is the load at start) and returns it.
fn wait_config_event(sluice: &Sluice, n: usize) -> Value {
    sluice.wait_event(&format!("config change #{n}"), |_| {
        config_events(sluice).len() >= n
    });
    config_events(sluice)[n - 1].clone()
}

fn succeeded(e: &Value) -> bool {
    e["status_id"].as_u64() == Some(1)
}

/// The connection opens audited towards `port`.
fn opens_to(sluice: &Sluice, port: u16) -> usize {
    sluice
        .events()
        .iter()
        .filter(|e| class(e) == 4001 && e["activity_id"] == 1)
        .filter(|e| e["dst_endpoint"]["port"].as_u64() == Some(u64::from(port)))
        .count()
}

fn start(
    dir: &TempDir,
    text: &str,
    origin: &EchoOrigin,
    extra: &[&str],
) -> (Sluice, std::path::PathBuf) {
    let mut args = vec![
        "--allow-loopback-upstream".to_string(),
        "--ca-dir".to_string(),
        dir.path().join("ca").display().to_string(),
        "--upstream-ca".to_string(),
        origin.cert.display().to_string(),
    ];
    args.extend(extra.iter().map(ToString::to_string));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    (
        Sluice::start(text, &refs),
        dir.path().join("ca").join("ca.pem"),
    )
}

/// One held connection (HTTP/1.1 kept alive, or HTTP/2): after the policy file changes,
/// the very next request on it is judged by the new policy, and what the new one still
/// allows goes on.
fn next_request_on_a_held_connection_follows_the_new_policy(mode: &str, version: &str) {
    let dir = TempDir::new("reload-keep");
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    let (sluice, ca) = start(&dir, &policy(port, &["/a/**", "/b/**"]), &origin, &[]);
    let mut client = Client::start(mode, &sluice, &ca, port);
    assert_eq!(client.get("/a/1"), (200, version.to_string()));
    assert_eq!(client.get("/b/1"), (200, version.to_string()));

    replace(
        &sluice.dir.path().join("policy.yaml"),
        &policy(port, &["/a/**"]),
    );
    let change = wait_config_event(&sluice, 2);
    assert!(succeeded(&change), "{change:#}");

    assert_eq!(
        client.get("/b/2"),
        (403, version.to_string()),
        "{}",
        sluice.stderr()
    );
    // Judged on the connection held since before the reload (an HTTP/1.1 refusal then
    // closes it, so what follows may come on a new one).
    assert_eq!(opens_to(&sluice, port), 1, "the connection was not held");
    assert_eq!(client.get("/a/2"), (200, version.to_string()));
    let urls: Vec<String> = origin
        .received()
        .iter()
        .map(|r| r["url"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(urls, ["/a/1", "/b/1", "/a/2"]);
    let denied = sluice.wait_event("the denied /b/2", |e| {
        class(e) == 4002 && e["http_request"]["url"]["path"] == "/b/2"
    });
    assert_eq!(denied["action_id"], 2, "{denied:#}");

    // A policy without the endpoint: the held connection itself is no longer allowed, and
    // is closed at the reload, its close event saying why (`revoke.rs` tests the rest).
    replace(
        &sluice.dir.path().join("policy.yaml"),
        &policy(port, &["/a/**"]).replace(&format!("port: {port}"), "port: 1"),
    );
    assert!(succeeded(&wait_config_event(&sluice, 3)));
    let close = sluice.wait_event("the revoked connection's close", |e| {
        class(e) == 4001
            && e["activity_id"] == 2
            && e["dst_endpoint"]["port"].as_u64() == Some(u64::from(port))
            && e["status_detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("policy revoked"))
    });
    assert_eq!(
        close["status_detail"],
        format!(
            "policy revoked by reload (entry api no longer allows CONNECT 127.0.0.1:{port} by {})",
            python()
        ),
        "{close:#}"
    );
    assert_eq!(origin.received().len(), 3);
    drop(client);
    assert_events_valid(&sluice);
}

#[test]
fn a_kept_alive_http1_connection_is_judged_by_the_reloaded_policy() {
    next_request_on_a_held_connection_follows_the_new_policy("h1", "HTTP/1.1");
}

#[test]
fn new_http2_streams_are_judged_by_the_reloaded_policy() {
    next_request_on_a_held_connection_follows_the_new_policy("h2", "HTTP/2");
}

#[test]
fn an_invalid_policy_is_refused_and_the_old_one_stays_in_force() {
    let dir = TempDir::new("reload-bad");
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    let (sluice, ca) = start(&dir, &policy(port, &["/a/**"]), &origin, &[]);
    let mut client = Client::start("h1", &sluice, &ca, port);
    assert_eq!(client.get("/a/1").0, 200);

    // Line 11 has a field rules do not have; the file also widens the rules to /b.
    let bad = policy(port, &["/a/**", "/b/**"]).replace(
        "method: GET, path: \"/b/**\"",
        "method: GET, bogus: 1, path: \"/b/**\"",
    );
    let path = sluice.dir.path().join("policy.yaml");
    replace(&path, &bad);
    let change = wait_config_event(&sluice, 2);
    assert!(!succeeded(&change), "{change:#}");
    let detail = change["status_detail"].as_str().unwrap();
    let file = path.display().to_string();
    assert!(
        detail.starts_with(&format!("{file}:11:"))
            && detail.contains("rules[1].allow.bogus: unknown field"),
        "the error does not name the file, line and field: {detail}"
    );
    assert!(
        sluice.stderr().contains(detail),
        "the error is not logged: {}",
        sluice.stderr()
    );
    assert!(sluice.stderr().contains("last good configuration"));

    // The old policy is still enforced: /a allowed, /b still denied, on the held
    // connection and on a new one.
    assert_eq!(client.get("/a/2").0, 200);
    assert_eq!(client.get("/b/1").0, 403);
    let mut fresh = Client::start("h1", &sluice, &ca, port);
    assert_eq!(fresh.get("/b/2").0, 403);
    assert_eq!(fresh.get("/a/3").0, 200);

    // Fixing the file is picked up.
    replace(&path, &policy(port, &["/a/**", "/b/**"]));
    assert!(succeeded(&wait_config_event(&sluice, 3)));
    assert_eq!(fresh.get("/b/3").0, 200);
    assert_events_valid(&sluice);
}

/// A profile binding `TEST_API_KEY` (bearer) to the origin on `port`, and where its secrets
/// file goes (see [`replace_secret`]).
fn provider_and_secrets(dir: &TempDir, port: u16) -> (std::path::PathBuf, std::path::PathBuf) {
    let providers = dir.write(
        "providers.yaml",
        &format!(
            "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\n    auth_style: bearer\nendpoints:\n  - {{host: 127.0.0.1, port: {port}}}\n"
        ),
    );
    (providers, dir.path().join("secrets.env"))
}

#[test]
fn a_rotated_secret_is_used_from_the_next_request() {
    const OLD: &str = "old-s3cr3t-VALUE-4b1d";
    const NEW: &str = "new-s3cr3t-VALUE-9e2a";
    let dir = TempDir::new("reload-secret");
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    let (providers, secrets) = provider_and_secrets(&dir, port);
    replace_secret(&secrets, OLD);
    let (sluice, ca) = start(
        &dir,
        &policy(port, &["/auth/**"]),
        &origin,
        &[
            "--providers",
            providers.to_str().unwrap(),
            "--secrets-file",
            secrets.to_str().unwrap(),
        ],
    );
    let mut client = Client::start("h1", &sluice, &ca, port);
    assert_eq!(client.get("/auth/1").0, 200);

    replace_secret(&secrets, NEW);
    assert!(succeeded(&wait_config_event(&sluice, 2)));
    // The same kept-alive connection, then a new one.
    assert_eq!(client.get("/auth/2").0, 200);
    let mut fresh = Client::start("h1", &sluice, &ca, port);
    assert_eq!(fresh.get("/auth/3").0, 200);

    let seen: Vec<(String, String)> = origin
        .received()
        .iter()
        .map(|r| {
            (
                r["url"].as_str().unwrap().to_string(),
                r["headers"]["authorization"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("/auth/1".to_string(), format!("Bearer {OLD}")),
            ("/auth/2".to_string(), format!("Bearer {NEW}")),
            ("/auth/3".to_string(), format!("Bearer {NEW}")),
        ]
    );
    // Neither value reached sluice's logs.
    let audit = std::fs::read_to_string(&sluice.audit_path).unwrap();
    for secret in [OLD, NEW] {
        assert!(!audit.contains(secret), "the audit log holds a secret");
        assert!(!sluice.stderr().contains(secret), "stderr holds a secret");
    }
    assert_events_valid(&sluice);
}

#[test]
fn a_secret_rotated_out_and_stored_upstream_still_comes_back_as_its_placeholder() {
    const VALUES: [&str; 3] = [
        "first-s3cr3t-VALUE-1c7e",
        "second-s3cr3t-VALUE-5d0b",
        "third-s3cr3t-VALUE-8a4f",
    ];
    let dir = TempDir::new("reload-retired");
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    let (providers, secrets) = provider_and_secrets(&dir, port);
    replace_secret(&secrets, VALUES[0]);
    let (sluice, ca) = start(
        &dir,
        &policy(port, &["/store/**", "/fetch/**"]),
        &origin,
        &[
            "--providers",
            providers.to_str().unwrap(),
            "--secrets-file",
            secrets.to_str().unwrap(),
        ],
    );
    let mut client = Client::start("h1", &sluice, &ca, port);
    // The origin keeps the first value it was sent.
    assert_eq!(client.get("/store/1").0, 200);
    let placeholder = "Bearer openshell:resolve:env:TEST_API_KEY";
    let (status, _, body) = client.get_body("/fetch/1");
    assert_eq!((status, body.as_str()), (200, placeholder));
    // Rotated twice: the stored value is out of service, and still never reaches the client,
    // on the held connection or a new one.
    for (n, value) in VALUES.iter().enumerate().skip(1) {
        replace_secret(&secrets, value);
        assert!(succeeded(&wait_config_event(&sluice, n + 1)));
        let (status, _, body) = client.get_body(&format!("/fetch/{n}"));
        assert_eq!(
            (status, body.as_str()),
            (200, placeholder),
            "after rotation {n}"
        );
    }
    let mut fresh = Client::start("h2", &sluice, &ca, port);
    let (status, _, body) = fresh.get_body("/fetch/3");
    assert_eq!((status, body.as_str()), (200, placeholder));
    let audit = std::fs::read_to_string(&sluice.audit_path).unwrap();
    for secret in VALUES {
        assert!(!audit.contains(secret), "the audit log holds a secret");
        assert!(!sluice.stderr().contains(secret), "stderr holds a secret");
    }
    assert_events_valid(&sluice);
}

#[test]
fn sighup_reloads_and_a_file_change_alone_waits_for_it_when_watching_is_slow() {
    let dir = TempDir::new("reload-hup");
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    // A watch interval of an hour: only SIGHUP can reload within the test.
    let (sluice, ca) = start(
        &dir,
        &policy(port, &["/a/**"]),
        &origin,
        &["--watch-interval", "1h"],
    );
    let mut client = Client::start("h1", &sluice, &ca, port);
    assert_eq!(client.get("/b/1").0, 403);
    replace(
        &sluice.dir.path().join("policy.yaml"),
        &policy(port, &["/a/**", "/b/**"]),
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(client.get("/b/2").0, 403, "reloaded without SIGHUP");
    assert_eq!(config_events(&sluice).len(), 1);

    let (code, _, err) = run(Command::new("kill").args(["-HUP", &sluice.pid().to_string()]));
    assert_eq!(code, 0, "{err}");
    assert!(succeeded(&wait_config_event(&sluice, 2)));
    assert_eq!(client.get("/b/3").0, 200);
    assert!(sluice.stderr().contains("configuration reloaded (SIGHUP)"));
    assert_events_valid(&sluice);
}

#[test]
fn a_configmap_symlink_swap_is_reloaded() {
    let dir = TempDir::new("reload-cm");
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    // The layout the kubelet writes: policy.yaml -> ..data/policy.yaml, ..data -> ..<stamp>.
    let cm = dir.path().join("configmap");
    let version = |stamp: &str, text: &str| {
        let d = cm.join(stamp);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("policy.yaml"), text).unwrap();
    };
    version("..2026_12_01_a", &policy(port, &["/a/**"]));
    std::os::unix::fs::symlink("..2026_12_01_a", cm.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/policy.yaml", cm.join("policy.yaml")).unwrap();
    let cm_policy = cm.join("policy.yaml");
    // The file sluice starts with lists nothing; the ConfigMap's is the working policy.
    let (sluice, ca) = start(
        &dir,
        "version: 1\nnetwork_policies:\n  other:\n    endpoints:\n      - {host: example.com, port: 443}\n    binaries:\n      - path: /usr/bin/true\n",
        &origin,
        &["--policy", cm_policy.to_str().unwrap()],
    );
    let mut client = Client::start("h1", &sluice, &ca, port);
    assert_eq!(client.get("/a/1").0, 200);
    assert_eq!(client.get("/b/1").0, 403);
    let link_mtime = std::fs::symlink_metadata(&cm_policy)
        .unwrap()
        .modified()
        .unwrap();

    // The kubelet's update: a new directory, a new `..data` link renamed over the old one.
    version("..2026_12_01_b", &policy(port, &["/a/**", "/b/**"]));
    std::os::unix::fs::symlink("..2026_12_01_b", cm.join("..data_tmp")).unwrap();
    std::fs::rename(cm.join("..data_tmp"), cm.join("..data")).unwrap();
    std::fs::remove_dir_all(cm.join("..2026_12_01_a")).unwrap();
    assert_eq!(
        std::fs::symlink_metadata(&cm_policy)
            .unwrap()
            .modified()
            .unwrap(),
        link_mtime,
        "the watched path itself did not change"
    );

    assert!(succeeded(&wait_config_event(&sluice, 2)));
    assert_eq!(client.get("/b/2").0, 200);
    assert_events_valid(&sluice);
}

/// Publishes `value` as `TEST_API_KEY` in `dir` the way the kubelet updates a Secret volume:
/// a new timestamped directory (mode 0400 file), then the `..data` link swapped to it by a
/// rename; the key's own link (`TEST_API_KEY -> ..data/TEST_API_KEY`) never changes.
fn publish_k8s(dir: &Path, version: usize, value: &str) {
    use std::os::unix::fs::{OpenOptionsExt, symlink};
    let name = format!("..2026_12_07_v{version}");
    std::fs::create_dir(dir.join(&name)).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(dir.join(&name).join("TEST_API_KEY"))
        .unwrap();
    f.write_all(value.as_bytes()).unwrap();
    drop(f);
    symlink(&name, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    if version == 0 {
        symlink("..data/TEST_API_KEY", dir.join("TEST_API_KEY")).unwrap();
    }
}

#[test]
fn a_secrets_dir_swapped_like_a_kubernetes_volume_injects_the_new_value_and_scrubs_the_old() {
    const VALUES: [&str; 2] = ["k8s-first-s3cr3t-2f9c", "k8s-second-s3cr3t-7b31"];
    let dir = TempDir::new("reload-secrets-dir");
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    let (providers, _) = provider_and_secrets(&dir, port);
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).unwrap();
    publish_k8s(&volume, 0, VALUES[0]);
    let (sluice, ca) = start(
        &dir,
        &policy(port, &["/store/**", "/fetch/**", "/auth/**"]),
        &origin,
        &[
            "--providers",
            providers.to_str().unwrap(),
            "--secrets-dir",
            volume.to_str().unwrap(),
        ],
    );
    let mut client = Client::start("h1", &sluice, &ca, port);
    // The origin keeps the first value it was sent.
    assert_eq!(client.get("/store/1").0, 200, "{}", sluice.stderr());
    let placeholder = "Bearer openshell:resolve:env:TEST_API_KEY";
    publish_k8s(&volume, 1, VALUES[1]);
    assert!(
        succeeded(&wait_config_event(&sluice, 2)),
        "{}",
        sluice.stderr()
    );
    // The new value goes up; the stored old one still comes back as its placeholder.
    assert_eq!(client.get("/auth/1").0, 200);
    let (status, _, body) = client.get_body("/fetch/1");
    assert_eq!((status, body.as_str()), (200, placeholder));
    let seen: Vec<(String, String)> = origin
        .received()
        .iter()
        .filter_map(|r| {
            let auth = r["headers"]["authorization"].as_str()?;
            Some((r["url"].as_str()?.to_string(), auth.to_string()))
        })
        .collect();
    assert_eq!(
        seen[..2],
        [
            ("/store/1".to_string(), format!("Bearer {}", VALUES[0])),
            ("/auth/1".to_string(), format!("Bearer {}", VALUES[1])),
        ]
    );
    let audit = std::fs::read_to_string(&sluice.audit_path).unwrap();
    for secret in VALUES {
        assert!(!audit.contains(secret), "the audit log holds a secret");
        assert!(!sluice.stderr().contains(secret), "stderr holds a secret");
    }
    assert_events_valid(&sluice);
}
