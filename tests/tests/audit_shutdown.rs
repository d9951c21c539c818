//! The audit writer runs behind a queue; stopping sluice loses nothing: every request served
//! before SIGTERM (or SIGINT) is in the audit log when the process has exited, followed by
//! the stop event. The log is a FIFO nobody reads until the signal is sent, so the writer is
//! stuck behind a full pipe and the events wait in the queue when the signal arrives. Real
//! binary, real curl, a local origin on loopback.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::Read;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use sluice_e2e::ocsf::{class, validate_line};
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, realpath};

/// Enough JSON lines (about 1.5 KiB each) to fill the pipe (64 KiB) and the writer's buffer
/// several times over.
const REQUESTS: usize = 300;

fn serve_then_stop(signal: &str, name: &str) {
    let origin = HttpOrigin::start();
    let policy = format!(
        "version: 1\nnetwork_policies:\n  local:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}}}\n    binaries:\n      - path: {}\n",
        origin.port(),
        realpath("/usr/bin/curl")
    );
    let dir = TempDir::new("audit-fifo");
    let fifo = dir.path().join("audit.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    // The reader opens the FIFO (meeting sluice's open for writing), then reads nothing until
    // told to, then everything until sluice closes its end by exiting.
    let (go, wait) = mpsc::channel::<()>();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::File::open(&fifo).unwrap();
            wait.recv().unwrap();
            let mut text = String::new();
            f.read_to_string(&mut text).unwrap();
            text
        })
    };
    let mut sluice = Sluice::start_with_audit_log(&policy, &["--allow-loopback-upstream"], &fifo);
    // One curl, one kept-alive connection, REQUESTS requests.
    let mut curl = Command::new("curl");
    curl.args(["-s", "--fail", "-x", &sluice.proxy_url()]);
    for i in 0..REQUESTS {
        curl.args([
            "-o".to_string(),
            "/dev/null".to_string(),
            format!("http://127.0.0.1:{}/n/{i}", origin.port()),
        ]);
    }
    let status = curl.status().unwrap();
    assert!(status.success(), "curl: {status}");
    assert_eq!(origin.received().len(), REQUESTS);
    // Let the last exchange finish on sluice's side (its event is emitted when it ends).
    std::thread::sleep(Duration::from_millis(500));

    let killed = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(sluice.pid().to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    go.send(()).unwrap();
    let text = reader.join().unwrap();
    sluice.stop();
    assert!(!sluice.is_running());

    let events: Vec<Value> = text
        .lines()
        .map(|l| validate_line(l).unwrap_or_else(|e| panic!("{l}\nis not valid OCSF: {e:#?}")))
        .collect();
    let requests = events.iter().filter(|e| class(e) == 4002).count();
    assert_eq!(requests, REQUESTS, "stderr:\n{}", sluice.stderr());
    let stop = events
        .iter()
        .find(|e| class(e) == 6002 && e["activity_id"] == 4)
        .unwrap_or_else(|| panic!("no stop event; stderr:\n{}", sluice.stderr()));
    let message = stop["message"].as_str().unwrap();
    assert!(message.contains(&format!("({name})")), "{message}");
}

#[test]
fn sigterm_with_the_audit_writer_behind_loses_no_event() {
    serve_then_stop("TERM", "SIGTERM");
}

#[test]
fn sigint_with_the_audit_writer_behind_loses_no_event() {
    serve_then_stop("INT", "SIGINT");
}
