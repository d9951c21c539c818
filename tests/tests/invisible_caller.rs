//! Where sluice cannot see the caller's processes it does not guess. The shape of a sidecar
//! without `shareProcessNamespace`: sluice shares the client's network namespace but runs in
//! its own PID namespace (with its own /proc), so the client's socket is found and its owner
//! is not. A policy entry naming the client's binary does not match, the client gets a `403`
//! that says the binary was not visible, and the audit event has no actor and says so. The
//! canary: the same policy, sluice in the client's PID namespace, allows it. Needs root.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, privileged, run};
use sluice_e2e::sluice_bin;

fn policy(port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  local:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}}}\n    binaries:\n      - path: /usr/bin/curl\n"
    )
}

/// `sluice run` as pid 1 of a new PID namespace with its own /proc (same network namespace).
struct Hidden {
    child: Child,
    addr: SocketAddr,
    audit: std::path::PathBuf,
    _dir: TempDir,
}

impl Hidden {
    fn start(policy: &str) -> Hidden {
        let dir = TempDir::new("invisible");
        let p = dir.write("policy.yaml", policy);
        let audit = dir.path().join("audit.jsonl");
        let mut child = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .arg(sluice_bin())
            .args([
                "run",
                "--listen",
                "127.0.0.1:0",
                "--allow-loopback-upstream",
            ])
            .arg("--policy")
            .arg(&p)
            .arg("--audit-log")
            .arg(&audit)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("sluice ended before listening")
                .unwrap();
            if let Some(a) = line
                .strip_prefix("sluice: listening on ")
                .and_then(|r| r.split(' ').next())
                .and_then(|a| a.parse().ok())
            {
                break a;
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Hidden {
            child,
            addr,
            audit,
            _dir: dir,
        }
    }

    /// The first denial (Network Activity for a tunnel, HTTP Activity for a forwarded request).
    fn wait_denial(&self) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&self.audit).unwrap_or_default();
            if let Some(e) = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|e| (e["class_uid"] == 4001 || e["class_uid"] == 4002) && e["action_id"] == 2)
            {
                return e;
            }
            assert!(Instant::now() < deadline, "no denial event:\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Hidden {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn curl_via(proxy: SocketAddr, origin: &HttpOrigin) -> (i32, String, String) {
    run(Command::new("/usr/bin/curl")
        .args(["-sS", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
        .args(["-x", &format!("http://{proxy}")])
        .arg(format!("http://127.0.0.1:{}/x", origin.port())))
}

#[test]
fn a_caller_sluice_cannot_see_matches_no_binary_and_the_audit_says_so() {
    if !privileged("a_caller_sluice_cannot_see_matches_no_binary_and_the_audit_says_so") {
        return;
    }
    let origin = HttpOrigin::start();
    let p = policy(origin.port());

    // Canary: the same policy and client, with sluice able to see the client.
    let visible = Sluice::start(&p, &["--allow-loopback-upstream"]);
    let (code, out, err) = curl_via(visible.addr(), &origin);
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("\n200"), "{out}");
    let seen = origin.received().len();
    assert_eq!(seen, 1);

    let hidden = Hidden::start(&p);
    let (code, out, err) = curl_via(hidden.addr, &origin);
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("\n403"), "{out}");
    assert!(out.contains("not visible"), "the refusal says why: {out}");
    assert_eq!(origin.received().len(), seen, "nothing reached the origin");

    let open = hidden.wait_denial();
    assert_eq!(open["action_id"], 2, "{open:#}");
    assert_eq!(open["firewall_rule"]["type"], "identity", "{open:#}");
    assert!(open.get("actor").is_none(), "no guessed actor: {open:#}");
    let detail = open["status_detail"].as_str().unwrap_or_default();
    assert!(detail.contains("binary is not visible"), "{detail}");
}
