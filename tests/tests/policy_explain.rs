//! Black-box tests of `sluice policy explain --batch`: one JSON answer line per query line,
//! whatever the query lines hold.
//!
//! Needs the binary: `cargo build -p sluice && cargo test -p sluice-e2e` (see `sluice_bin`).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::Write as _;
use std::process::{Command, Stdio};

use sluice_e2e::{sluice_bin, workspace_dir};

/// Runs `policy explain --batch` on the GitHub read-only example with `input` on stdin and
/// returns (exit code, stdout lines as JSON, stderr).
fn explain_batch(input: &[u8]) -> (Option<i32>, Vec<serde_json::Value>, String) {
    let policy = workspace_dir().join("configs/policies/github-readonly.yaml");
    let mut child = Command::new(sluice_bin())
        .args(["policy", "explain", "--batch", "--policy"])
        .arg(&policy)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run sluice: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON {l:?}: {e}")))
        .collect();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), lines, stderr)
}

const ALLOWED: &str =
    r#"{"binary":"/usr/bin/curl","host":"api.github.com","port":443,"path":"/user"}"#;

#[test]
fn a_non_utf8_line_gets_an_error_line_and_the_batch_goes_on() {
    let mut input = Vec::new();
    input.extend_from_slice(ALLOWED.as_bytes());
    input.extend_from_slice(b"\n{\"binary\":\"/usr/bin/\xff\xfe\",\"host\":\"x\",\"port\":1}\n");
    input.extend_from_slice(b"not json\n");
    input.extend_from_slice(ALLOWED.as_bytes());
    input.push(b'\n');
    let (code, lines, stderr) = explain_batch(&input);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(lines.len(), 4, "{lines:#?}\n{stderr}");
    assert_eq!(lines[0]["decision"], "allow", "{:#}", lines[0]);
    assert_eq!(lines[1]["line"], 2, "{:#}", lines[1]);
    let error = lines[1]["error"].as_str().unwrap_or_default();
    assert!(error.contains("not UTF-8"), "{error}");
    assert_eq!(lines[2]["line"], 3, "{:#}", lines[2]);
    assert!(
        lines[2]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("invalid query")
    );
    assert_eq!(lines[3], lines[0]);
    assert_eq!(
        code,
        Some(1),
        "malformed lines make the exit code 1: {stderr}"
    );
    assert!(stderr.contains("2 malformed query line(s)"), "{stderr}");
}
