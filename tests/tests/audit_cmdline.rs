//! End to end: what the audit log keeps of a caller's command line, with real processes.
//!
//! An agent chooses its own argv (and its children inherit it as their ancestor's): padded
//! to hundreds of KiB it would be repeated in every event of every connection it and its
//! children make, flooding the shared audit writer; and a command line often carries a secret
//! sluice does not know (`--token X`, a URL's user information). The log keeps each argument
//! and each command line within a bound, says what it cut, and redacts secret-shaped values.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::process::Command;

use sluice_e2e::proxy::{Sluice, assert_events_valid, run};

const UNKNOWN_SECRET: &str = "ghp_unknownToSluice0123456789";

/// A parent with a padded, secret-bearing argv runs curl through sluice to an address no
/// policy allows: curl's denial carries the parent as its ancestor.
#[test]
fn a_padded_or_secret_bearing_command_line_is_bounded_and_redacted_in_every_event() {
    let sluice = Sluice::start("version: 1\nnetwork_policies: {}\n", &[]);
    // One argument may hold at most 128 KiB (MAX_ARG_STRLEN): two of 100,000 bytes.
    let pad = "P".repeat(100_000);
    let script = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:5]).returncode)";
    let (_, out, err) = run(Command::new("python3").args([
        "-c",
        script,
        "curl",
        "-s",
        &format!("-x{}", sluice.proxy_url()),
        "http://127.0.0.1:9/refused",
        &pad,
        &pad,
        "--token",
        UNKNOWN_SECRET,
        &format!("https://agent:{UNKNOWN_SECRET}@example.test/x"),
    ]));
    assert!(out.contains("403") || out.contains("policy"), "{out}{err}");
    let e = sluice.wait_event("the denial of the padded caller's child", |e| {
        e["action_id"] == 2
            && e["actor"]["process"]["parent_process"]["cmd_line"]
                .as_str()
                .is_some_and(|c| c.contains("subprocess"))
    });
    let parent = e["actor"]["process"]["parent_process"]["cmd_line"]
        .as_str()
        .unwrap();
    assert!(parent.len() < 4096, "{} bytes kept", parent.len());
    assert!(
        parent
            .matches(&format!("…[+{} bytes]", 100_000 - 256))
            .count()
            == 2,
        "{parent}"
    );
    assert!(parent.contains("--token [redacted]"), "{parent}");
    assert!(
        parent.contains("https://[userinfo]@example.test/x"),
        "{parent}"
    );
    let log = std::fs::read_to_string(sluice.dir.path().join("audit.jsonl")).unwrap();
    assert!(
        !log.contains(UNKNOWN_SECRET),
        "the unknown secret was logged"
    );
    for line in log.lines() {
        assert!(
            line.len() < 16 * 1024,
            "an audit line of {} bytes",
            line.len()
        );
    }
    assert!(
        !sluice.stderr().contains(UNKNOWN_SECRET),
        "the unknown secret reached stderr"
    );
    assert_events_valid(&sluice);
}
