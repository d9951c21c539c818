//! Borrowed identity: a program the policy does not list hands its proxy socket
//! (`SCM_RIGHTS`) to a program the policy lists, so that a look at /proc finds the listed one,
//! then takes the socket back and uses it (`tests/clients/hand_over.py`, real processes: the
//! attacker is Python, the listed program a copy of python3 at a path of its own).
//!
//! sluice identifies the caller when the connection is accepted and confirms the same process
//! (pid, start time, executable) holds the socket when the request arrives, at every later
//! request of a kept-alive or inspected connection, and periodically on tunnels.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sluice_e2e::ocsf::{action, is_close, is_open};
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, json_body, privileged, python, run};
use sluice_e2e::{package_dir, sluice_bin};

/// A copy of the system python3 at a path only the policy names.
fn listed_python(dir: &TempDir) -> PathBuf {
    let copy = dir.path().join("listed-python3");
    std::fs::copy("/usr/bin/python3", &copy).expect("copy python3");
    copy
}

fn policy(listed: &Path, l4_port: u16, inspected_port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  plain:\n    endpoints:\n      - {{host: 127.0.0.1, port: {l4_port}}}\n    binaries:\n      - path: {listed}\n  inspected:\n    endpoints:\n      - {{host: 127.0.0.1, port: {inspected_port}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: {listed}\n",
        listed = listed.display()
    )
}

/// Runs the attacker (unlisted: the test's python3) in `mode`; one JSON object per line.
fn attack(listed: &Path, sluice: &Sluice, mode: &str, args: &[String]) -> Vec<Value> {
    let script = package_dir().join("clients/hand_over.py");
    let (code, out, err) = run(Command::new(python())
        .arg(script)
        .arg(mode)
        .arg(listed)
        .arg(sluice.addr().port().to_string())
        .args(args));
    assert_eq!(
        code,
        0,
        "attacker failed: {err}\n{out}\nsluice: {}",
        sluice.stderr()
    );
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn src_port(e: &Value) -> u64 {
    e["src_endpoint"]["port"].as_u64().unwrap_or(0)
}

fn caller_path(e: &Value) -> &str {
    e["actor"]["process"]["path"].as_str().unwrap_or("")
}

/// Every audit event of the connection from the attacker's local `port`.
fn events_of(sluice: &Sluice, port: u64) -> Vec<Value> {
    sluice
        .events()
        .into_iter()
        .filter(|e| src_port(e) == port)
        .collect()
}

/// The attacker's connection from `port` was denied in the audit, and no event of it credits
/// the listed program (or admits it).
fn assert_denied_and_not_credited(sluice: &Sluice, port: u64, listed: &Path) {
    let events = events_of(sluice, port);
    assert!(
        events.iter().any(|e| is_open(e) && action(e) == 2),
        "no denial audited for {port}: {events:#?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| action(e) == 1 || caller_path(e) == listed.to_str().unwrap()),
        "the listed program was credited with the attacker's connection: {events:#?}"
    );
}

/// No byte of any attempt reached the origin.
fn assert_unreached(origin: &HttpOrigin) {
    assert!(
        origin.received().is_empty(),
        "the origin was reached: {:?}",
        origin.received()
    );
}

fn start(listed: &Path, l4: &HttpOrigin, inspected: &HttpOrigin) -> Sluice {
    Sluice::start(
        &policy(listed, l4.port(), inspected.port()),
        &[
            "--allow-loopback-upstream",
            "--caller-recheck-interval",
            "300ms",
        ],
    )
}

#[test]
fn a_socket_handed_to_a_listed_program_for_the_lookup_is_refused_every_time() {
    let dir = TempDir::new("borrowed");
    let listed = listed_python(&dir);
    let (l4, inspected) = (HttpOrigin::start(), HttpOrigin::start());
    let sluice = start(&listed, &l4, &inspected);
    let target = format!("127.0.0.1:{}", l4.port());
    // The attacker holds the socket when sluice accepts it; the corked CONNECT head leaves
    // while only the listed helper holds it (the lookup the old pipeline made).
    let attempts = attack(
        &listed,
        &sluice,
        "cork",
        &["20".into(), "50".into(), target.clone()],
    );
    assert_eq!(attempts.len(), 20);
    for a in &attempts {
        assert_eq!(a["status"], 403, "{a:#}");
        let body = json_body(a["answer"].as_str().unwrap());
        assert_eq!(body["error"], "policy_denied", "{a:#}");
        assert_eq!(body["stage"], "identity", "{a:#}");
        let reason = body["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("caller changed: ")
                && reason.contains(&listed.display().to_string()),
            "{reason}"
        );
        assert_denied_and_not_credited(&sluice, a["port"].as_u64().unwrap(), &listed);
    }
    assert_unreached(&l4);
    assert_events_valid(&sluice);
}

#[test]
fn a_socket_lent_to_a_listed_grandchild_is_refused_and_never_credited_to_it() {
    let dir = TempDir::new("borrowed-grandchild");
    let listed = listed_python(&dir);
    let (l4, inspected) = (HttpOrigin::start(), HttpOrigin::start());
    let sluice = start(&listed, &l4, &inspected);
    let target = format!("127.0.0.1:{}", l4.port());
    // No SCM_RIGHTS: the listed program inherited the attacker's socket through a helper
    // that closed its copy, and stays blocked holding it while the attacker talks.
    let attempts = attack(&listed, &sluice, "borrow", &["5".into(), target.clone()]);
    assert_eq!(attempts.len(), 5);
    for a in &attempts {
        assert_eq!(a["status"], 403, "{a:#}");
        let body = json_body(a["answer"].as_str().unwrap());
        assert_eq!(
            (&body["error"], &body["stage"]),
            (&"policy_denied".into(), &"identity".into()),
            "{a:#}"
        );
        assert_denied_and_not_credited(&sluice, a["port"].as_u64().unwrap(), &listed);
    }
    assert_unreached(&l4);
    assert_events_valid(&sluice);
}

#[test]
fn a_hand_over_racing_the_accept_is_refused_or_cut_by_the_recheck() {
    let dir = TempDir::new("borrowed-race");
    let listed = listed_python(&dir);
    let (l4, inspected) = (HttpOrigin::start(), HttpOrigin::start());
    let sluice = start(&listed, &l4, &inspected);
    let target = format!("127.0.0.1:{}", l4.port());
    // No delay: the socket may already be with the helper when sluice looks at it first.
    let attempts = attack(
        &listed,
        &sluice,
        "cork",
        &["20".into(), "0".into(), target.clone()],
    );
    let mut won = 0;
    for a in &attempts {
        let port = a["port"].as_u64().unwrap();
        if a["status"] == 403 {
            let body = json_body(a["answer"].as_str().unwrap());
            assert_eq!(body["stage"], "identity", "{a:#}");
            continue;
        }
        // The helper was the only holder at both looks (a race the attacker can win); the
        // attacker's first bytes in the tunnel are checked before they go anywhere.
        won += 1;
        assert_eq!(a["status"], 200, "{a:#}");
        assert_ne!(a["used"], 200, "the attacker used the tunnel: {a:#}");
        assert_ne!(a["later"], 200, "the tunnel outlived the recheck: {a:#}");
        let close = sluice.wait_event("close after the hand-back", |e| {
            is_close(e) && src_port(e) == port
        });
        let reason = close["status_detail"].as_str().unwrap_or_default();
        assert!(reason.starts_with("caller changed: "), "{close:#}");
    }
    eprintln!(
        "hand-overs that passed both looks (then cut at first use): {won} of {}",
        attempts.len()
    );
    assert_unreached(&l4);
    assert_events_valid(&sluice);
}

#[test]
fn a_kept_alive_forward_connection_handed_over_is_refused_at_the_next_request() {
    let dir = TempDir::new("borrowed-forward");
    let listed = listed_python(&dir);
    let (l4, inspected) = (HttpOrigin::start(), HttpOrigin::start());
    let sluice = start(&listed, &l4, &inspected);
    let out = attack(&listed, &sluice, "forward", &[l4.port().to_string()]);
    let a = &out[0];
    assert!(
        a["first"].as_str().unwrap().starts_with("HTTP/1.1 200"),
        "the listed program's own request: {a:#}"
    );
    assert_eq!(a["status"], 403, "{a:#}");
    let body = json_body(a["second"].as_str().unwrap());
    assert_eq!(
        (&body["error"], &body["stage"]),
        (&"policy_denied".into(), &"identity".into())
    );
    assert_eq!(
        l4.received().len(),
        1,
        "only the listed program's request went out"
    );
    let events = events_of(&sluice, a["port"].as_u64().unwrap());
    let requests: Vec<&Value> = events.iter().filter(|e| e["class_uid"] == 4002).collect();
    assert_eq!(requests.len(), 2, "{events:#?}");
    assert_eq!(action(requests[0]), 1);
    assert_eq!(caller_path(requests[0]), listed.to_str().unwrap());
    assert_eq!(action(requests[1]), 2, "{:#}", requests[1]);
    assert_events_valid(&sluice);
}

#[test]
fn an_inspected_tunnel_handed_over_is_refused_at_the_next_request() {
    let dir = TempDir::new("borrowed-tunnel");
    let listed = listed_python(&dir);
    let (l4, inspected) = (HttpOrigin::start(), HttpOrigin::start());
    let sluice = start(&listed, &l4, &inspected);
    let out = attack(&listed, &sluice, "tunnel", &[inspected.port().to_string()]);
    let a = &out[0];
    let first = a["first"].as_str().unwrap();
    assert!(
        first.starts_with("HTTP/1.1 200") && first.contains("hello from origin"),
        "the listed program's own request: {a:#}"
    );
    assert_eq!(a["status"], 403, "{a:#}");
    let body = json_body(a["second"].as_str().unwrap());
    assert_eq!(body["stage"], "identity", "{a:#}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .starts_with("caller changed: ")
    );
    assert_eq!(inspected.received().len(), 1);
    assert_events_valid(&sluice);
}

#[test]
fn a_tunnel_handed_over_after_it_opened_is_closed_by_the_recheck() {
    let dir = TempDir::new("borrowed-steal");
    let listed = listed_python(&dir);
    let (l4, inspected) = (HttpOrigin::start(), HttpOrigin::start());
    let sluice = start(&listed, &l4, &inspected);
    let out = attack(
        &listed,
        &sluice,
        "steal",
        &[l4.port().to_string(), "1500".into()],
    );
    assert_taken_over_tunnel_cut(&sluice, &out[0]);
    assert!(l4.received().is_empty(), "{:?}", l4.received());
}

/// A `steal` attempt `a`: the listed program's tunnel opened, the attacker's request in it
/// got no answer from the origin, and the tunnel was closed because its caller changed.
fn assert_taken_over_tunnel_cut(sluice: &Sluice, a: &Value) {
    assert_eq!(
        a["status"], 200,
        "the listed program's tunnel opened: {a:#}"
    );
    assert_ne!(
        a["later_status"], 200,
        "the attacker used the tunnel: {a:#}"
    );
    let port = a["port"].as_u64().unwrap();
    let close = sluice.wait_event("close of the handed-over tunnel", |e| {
        is_close(e) && src_port(e) == port
    });
    let reason = close["status_detail"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("caller changed: ") && reason.contains(&python()),
        "{close:#}"
    );
    assert_events_valid(sluice);
}

/// The listed program's first request rides in the same write as its CONNECT head (checked
/// with the head); the attacker that takes the tunnel over afterwards is still cut at its
/// first bytes, not let through until the periodic re-check.
#[test]
fn a_tunnel_opened_with_pipelined_bytes_then_handed_over_is_closed_at_first_use() {
    let dir = TempDir::new("borrowed-steal-pipelined");
    let listed = listed_python(&dir);
    let (l4, inspected) = (HttpOrigin::start(), HttpOrigin::start());
    // A periodic re-check too rare to be what stops the attacker here.
    let sluice = Sluice::start(
        &policy(&listed, l4.port(), inspected.port()),
        &[
            "--allow-loopback-upstream",
            "--caller-recheck-interval",
            "60s",
        ],
    );
    let out = attack(
        &listed,
        &sluice,
        "steal-pipelined",
        &[l4.port().to_string(), "300".into()],
    );
    assert_taken_over_tunnel_cut(&sluice, &out[0]);
    assert_eq!(l4.received().len(), 1, "only the listed program's request");
}

#[test]
fn inside_sluice_exec_the_hand_over_is_refused_too() {
    if !privileged("inside_sluice_exec_the_hand_over_is_refused_too") {
        return;
    }
    // The sandbox keeps socketpair(AF_UNIX) (runtimes need it), so SCM_RIGHTS works there.
    let dir = TempDir::new("borrowed-exec");
    let tools = dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let listed = tools.join("listed-python3");
    std::fs::copy("/usr/bin/python3", &listed).unwrap();
    // The attacker runs from the same directory (an unlisted copy), which the sandbox may
    // execute from because the command lives there.
    let attacker = tools.join("attacker-python3");
    std::fs::copy("/usr/bin/python3", &attacker).unwrap();
    let script = tools.join("hand_over.py");
    std::fs::copy(package_dir().join("clients/hand_over.py"), &script).unwrap();
    for p in [dir.path(), tools.as_path()] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (l4, inspected) = (HttpOrigin::start(), HttpOrigin::start());
    let policy_path = dir.write("policy.yaml", &policy(&listed, l4.port(), inspected.port()));
    // The audit log lies outside everything the command is granted (exec refuses it inside).
    let audit_dir = TempDir::new("borrowed-exec-audit");
    let audit = audit_dir.path().join("audit.jsonl");
    let target = format!("127.0.0.1:{}", l4.port());
    let out = Command::new(sluice_bin())
        .arg("exec")
        .arg("--policy")
        .arg(&policy_path)
        .arg("--audit-log")
        .arg(&audit)
        .args(["--allow-loopback-upstream", "--user", "65534", "--ro"])
        .arg(&tools)
        .arg("--")
        .arg(&attacker)
        .arg(&script)
        .args(["cork"])
        .arg(&listed)
        .args(["env", "10", "50", &target])
        .current_dir(dir.path())
        .output()
        .expect("run sluice exec");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let attempts: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(attempts.len(), 10, "{stdout}\n{stderr}");
    for a in &attempts {
        assert_eq!(a["status"], 403, "{a:#}");
        let body = json_body(a["answer"].as_str().unwrap());
        assert_eq!(body["stage"], "identity", "{a:#}");
        // The hand-over itself worked in the sandbox: sluice saw the socket change hands.
        let reason = body["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("caller changed: ") && reason.contains("listed-python3"),
            "{reason}"
        );
    }
    let text = std::fs::read_to_string(&audit).unwrap();
    for line in text.lines() {
        let e: Value = serde_json::from_str(line).unwrap();
        assert!(
            !(is_open(&e) && action(&e) == 1),
            "a connection was allowed: {e:#}"
        );
    }
    assert!(l4.received().is_empty());
}

/// Of 200 hand-overs after identification, at most this many may reach the origin.
const HAND_OVER_WINS_AT_MOST: usize = 4;

/// The finding: the listed program connects and is identified, then hands the socket
/// (`SCM_RIGHTS`) to an unlisted one while keeping its copy; the unlisted one sends a
/// request and hides the socket at once (in flight in a message to itself, where no /proc
/// entry shows it), so that a look at /proc sees the listed program alone. Identification
/// from /proc cannot see a socket in flight, so such a race can be narrowed, not closed:
/// this measures the rate over 200 tries (printed; docs/identity.md states it) and bounds it.
#[test]
fn a_socket_handed_over_after_identification_rarely_reaches_the_origin() {
    let dir = TempDir::new("borrowed-handover");
    let listed = listed_python(&dir);
    let (l4, inspected) = (HttpOrigin::start(), HttpOrigin::start());
    let sluice = start(&listed, &l4, &inspected);
    let tries = 200;
    let attempts = attack(
        &listed,
        &sluice,
        "handover",
        &[tries.to_string(), l4.port().to_string()],
    );
    assert_eq!(attempts.len(), tries);
    let won = attempts.iter().filter(|a| a["won"] == true).count();
    eprintln!(
        "hand-overs after identification that reached the origin: {won} of {tries} ({:.1}%)",
        won as f64 * 100.0 / tries as f64
    );
    for a in attempts.iter().filter(|a| a["won"] != true) {
        assert_eq!(a["status"], 403, "{a:#}");
        let body = json_body(a["answer"].as_str().unwrap());
        assert_eq!(body["stage"], "identity", "{a:#}");
        let reason = body["reason"].as_str().unwrap();
        assert!(reason.starts_with("caller changed: "), "{reason}");
    }
    // The listed helper's own first requests, and the attacker's that won.
    assert_eq!(
        l4.received().len(),
        tries + won,
        "every request that went out was the helper's or a win"
    );
    assert!(
        won <= HAND_OVER_WINS_AT_MOST,
        "{won} of {tries} hand-overs reached the origin (at most {HAND_OVER_WINS_AT_MOST})"
    );
    assert_events_valid(&sluice);
}

/// What the checks cannot see, measured so that docs/identity.md says it as it is: the same
/// hand-over with the request corked, so that its bytes leave while the socket is hidden in
/// flight. Every check then sees the listed program alone; every try wins.
#[test]
fn a_request_that_leaves_while_its_socket_is_in_flight_is_credited_to_the_listed_program() {
    let dir = TempDir::new("borrowed-handover-corked");
    let listed = listed_python(&dir);
    let (l4, inspected) = (HttpOrigin::start(), HttpOrigin::start());
    let sluice = start(&listed, &l4, &inspected);
    let tries = 5;
    let attempts = attack(
        &listed,
        &sluice,
        "handover",
        &[tries.to_string(), l4.port().to_string(), "cork".into()],
    );
    let won = attempts.iter().filter(|a| a["won"] == true).count();
    eprintln!("corked hand-overs that reached the origin: {won} of {tries}");
    assert_eq!(won, tries, "{attempts:#?}");
}
