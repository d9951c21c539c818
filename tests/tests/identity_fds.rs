//! End-to-end test of caller identification when sluice runs out of file descriptors: the
//! real binary under a small open-file limit, held to its last descriptor by idle client
//! connections. A connection accepted with the last descriptor cannot have its caller's
//! `/proc` files opened; it is refused as sluice being out of descriptors (a typed reason and
//! a metric), never as its caller having exited or changed, and sluice serves again once
//! descriptors are free.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;
use sluice_e2e::ocsf::class;
use sluice_e2e::proxy::{Sluice, assert_events_valid, json_body, me, status_of};
use sluice_e2e::scrape;

/// What sluice answered a CONNECT on `s` (empty when it answered nothing in time: the
/// connection still waits in the accept queue).
fn answer(s: &mut TcpStream) -> String {
    let _ = s.write_all(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

#[test]
fn a_caller_lookup_out_of_descriptors_is_refused_as_such() {
    let me = me();
    let policy = format!(
        "version: 1\nnetwork_policies:\n  echo:\n    endpoints:\n      - {{host: 127.0.0.1, port: 9}}\n    binaries:\n      - path: {me}\n"
    );
    let sluice = Sluice::start_with_fd_limit(
        &policy,
        &[
            "--allow-loopback-upstream",
            "--watch-interval",
            "1h",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        64,
    );
    // Idle connections, each identified when accepted, until sluice has no descriptor left:
    // the rest wait in the kernel's accept queue.
    let mut held = Vec::new();
    for _ in 0..80 {
        held.push(TcpStream::connect(sluice.addr()).unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // Each asks for a tunnel in turn. The ones identified are admitted and fail to dial (no
    // one listens on port 9), and closing them frees descriptors for the ones queued; the
    // one accepted with the last descriptor is refused for want of one.
    let mut exhausted = Vec::new();
    let mut other_identity_failures = Vec::new();
    for s in &mut held {
        let text = answer(s);
        if text.is_empty() {
            continue;
        }
        if status_of(&text) != 403 {
            continue;
        }
        let body: Value = json_body(&text);
        if body["stage"] != "identity" {
            continue;
        }
        let reason = body["reason"].as_str().unwrap_or_default().to_string();
        if reason.contains("out of file descriptors") {
            exhausted.push(reason);
        } else {
            other_identity_failures.push(reason);
        }
    }
    drop(held);
    assert!(
        !exhausted.is_empty(),
        "no connection was refused for want of descriptors; other identity failures: {other_identity_failures:?}\n{}",
        sluice.stderr()
    );
    assert!(
        other_identity_failures.is_empty(),
        "an exhaustion was reported as something else: {other_identity_failures:?}"
    );
    assert!(
        exhausted[0].contains("too many open files"),
        "{}",
        exhausted[0]
    );
    // The refusal is audited with the same reason, and counted.
    let denied = sluice.wait_event("the identity refusal", |e| {
        class(e) == 4001 && e.to_string().contains("out of file descriptors")
    });
    assert_eq!(denied["action_id"], 2, "{denied}");
    std::thread::sleep(Duration::from_millis(300));
    let (status, metrics) = scrape::get(scrape::metrics_addr(&sluice), "/metrics");
    assert_eq!(status, 200);
    let count: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("sluice_identity_descriptors_exhausted_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no counter in:\n{metrics}"));
    assert!(count >= exhausted.len() as f64, "{count} {exhausted:?}");
    // With descriptors free again, a caller is identified as before.
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    let text = answer(&mut s);
    assert_eq!(status_of(&text), 502, "{text}");
    assert_events_valid(&sluice);
}
