//! `sluice run` and the process limits it starts under: a soft open-file limit below the hard
//! one is raised (each proxied connection holds up to three descriptors, and caller
//! identification keeps some open), and a limit too small for
//! `--max-connections` is reported at start.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use sluice_e2e::sluice_bin;

/// Starts sluice under `sh -c "<ulimits> && exec sluice run ..."`; returns its open-file limits
/// (soft, hard) and its start-up stderr up to the listening line.
fn limits_under(ulimits: &str, extra: &[&str]) -> ((u64, u64), String) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("{ulimits} && exec \"$@\""))
        .arg("sh")
        .arg(sluice_bin())
        .args(["run", "--listen", "127.0.0.1:0", "--audit-log", "/dev/null"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "sluice exited: {seen}"
        );
        seen.push_str(&line);
        if line.starts_with("sluice: listening on") {
            break;
        }
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let row = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .skip(3)
        .take(2)
        .map(|v| v.parse().unwrap())
        .collect::<Vec<u64>>();
    ((row[0], row[1]), seen)
}

#[test]
fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
    let ((soft, hard), err) = limits_under("ulimit -S -n 256 && ulimit -H -n 3000", &[]);
    assert_eq!((soft, hard), (3000, 3000), "{err}");
}

#[test]
fn a_limit_too_small_for_max_connections_is_reported() {
    let ((soft, _), err) = limits_under("ulimit -n 600", &["--max-connections", "1000"]);
    assert_eq!(soft, 600);
    // The count is the limit less sluice's own descriptors (listeners, audit, watcher), four
    // per proxied connection: about 150, the exact figure moving with what sluice keeps open.
    let carried = err
        .split("open-file limit (600) carries about ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no open-file limit warning: {err}"));
    assert!((140..=160).contains(&carried), "{err}");
    assert!(
        err.contains(&format!(
            "carries about {carried} proxied connections, fewer than --max-connections 1000"
        )),
        "{err}"
    );
    let (_, err) = limits_under("ulimit -n 600", &["--max-connections", "100"]);
    assert!(!err.contains("open-file limit"), "{err}");
}
