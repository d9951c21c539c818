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

/// `--tenant NAME`: asked as a gateway tenant, with the tenant's own files (the example
/// gateway's): an entry for every program (`/**`) applies, one naming programs does not,
/// and the answer says what to add.
#[test]
fn a_tenant_is_asked_about_with_its_own_files() {
    let gateway = workspace_dir().join("configs/gateway");
    let explain = |policy: &std::path::Path, url: &str| {
        let out = Command::new(sluice_bin())
            .args([
                "policy", "explain", "--json", "--tenant", "team-a", "--policy",
            ])
            .arg(policy)
            .arg("--providers")
            .arg(gateway.join("anthropic.yaml"))
            .arg(url)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let team_a = gateway.join("team-a.yaml");
    let allowed = explain(&team_a, "https://pypi.org/simple/requests/");
    assert_eq!(allowed["decision"], "allow", "{allowed}");
    assert_eq!(allowed["binary"], "tenant:team-a", "{allowed}");
    let messages = explain(&team_a, "https://api.anthropic.com/v1/messages");
    assert_eq!(
        messages["decision"], "deny",
        "GET is not among the rules: {messages}"
    );
    assert_eq!(messages["stage"], "l7", "{messages}");
    // A policy whose entry names programs gives a tenant nothing, and says what to add.
    let named = workspace_dir().join("configs/policies/package-registries.yaml");
    let refused = explain(&named, "https://pypi.org/simple/requests/");
    assert_eq!(refused["decision"], "deny", "{refused}");
    assert_eq!(refused["stage"], "l4", "{refused}");
    let reason = refused["reason"].as_str().unwrap();
    assert!(
        reason.contains("does not apply to tenant 'team-a'"),
        "{refused}"
    );
    let hints = refused["suggestions"].to_string();
    assert!(hints.contains(r#"{path: \"/**\"}"#), "{refused}");
    // A tenant is asked about as a tenant only: with --binary it is a usage error.
    let both = Command::new(sluice_bin())
        .args([
            "policy",
            "explain",
            "--tenant",
            "x",
            "--binary",
            "/usr/bin/curl",
        ])
        .arg("--policy")
        .arg(&team_a)
        .arg("https://pypi.org/")
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2), "{both:?}");
}

/// The conformance corpus's own `query` objects, fed verbatim (`cmdline_paths` included), are
/// all answered, and where both engines deny a program at L4, sluice's reason names the
/// caller's command-line paths as the reference's does.
#[test]
fn the_corpus_queries_are_answered_verbatim_with_their_cmdline_paths() {
    let corpus = workspace_dir().join("proxy/tests/conformance/corpus");
    let out = Command::new("gzip")
        .arg("-dc")
        .arg(corpus.join("decisions.jsonl.gz"))
        .output()
        .expect("gzip runs");
    assert!(out.status.success());
    let mut by_policy: std::collections::BTreeMap<String, Vec<serde_json::Value>> =
        std::collections::BTreeMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        if case["query"].get("cmdline_paths").is_some() {
            let policy = case["policy"].as_str().unwrap().to_string();
            by_policy.entry(policy).or_default().push(case);
        }
    }
    let (mut answered, mut reasons_compared) = (0usize, 0usize);
    for (policy, cases) in &by_policy {
        let mut child = Command::new(sluice_bin())
            .args([
                "policy",
                "explain",
                "--compat",
                "openshell",
                "--batch",
                "--policy",
            ])
            .arg(corpus.join(policy))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        for case in cases {
            writeln!(stdin, "{}", case["query"]).unwrap();
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let answers: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            answers.len(),
            cases.len(),
            "{policy}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "{policy}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for (case, answer) in cases.iter().zip(&answers) {
            assert!(answer.get("error").is_none(), "{policy}: {answer}");
            answered += 1;
            let want = case["expect"]["reason"].as_str().unwrap_or_default();
            let got = answer["reason"].as_str().unwrap_or_default();
            if want.starts_with("binary '") && got.starts_with("binary '") {
                let named = |r: &str| r.split("). ").next().unwrap_or_default().to_string();
                assert_eq!(named(got), named(want), "{policy}: {}", case["query"]);
                reasons_compared += 1;
            }
        }
    }
    assert!(answered > 3_000, "{answered} queries with cmdline_paths");
    assert!(
        reasons_compared > 100,
        "{reasons_compared} L4 reasons compared"
    );
}

/// The shared half of the reference's protocol corpus, through `policy explain --compat
/// openshell --batch` with its query lines as they are (body, headers, ws_text): every case
/// of every policy gets the reference's decision (a WebSocket message's when it was judged,
/// else the upgrade's), GraphQL over HTTP and WebSocket included.
#[test]
fn the_protocol_corpus_through_explain_batch() {
    use std::collections::BTreeMap;
    let dir = workspace_dir().join("proxy/tests/conformance_protocols/corpus");
    let unzipped = Command::new("gzip")
        .arg("-dc")
        .arg(dir.join("decisions.jsonl.gz"))
        .output()
        .unwrap();
    let text = String::from_utf8(unzipped.stdout).unwrap();
    let mut by_policy: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for line in text.lines() {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let policy = case["policy"].as_str().unwrap().to_string();
        by_policy.entry(policy).or_default().push(case);
    }
    let (mut agree, mut differ) = (0, Vec::new());
    for (policy, cases) in &by_policy {
        let mut child = Command::new(sluice_bin())
            .args([
                "policy",
                "explain",
                "--compat",
                "openshell",
                "--batch",
                "--policy",
            ])
            .arg(dir.join(policy))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        for c in cases {
            // A policy sluice refuses ends it before it reads a line.
            if writeln!(stdin, "{}", c["query"]).is_err() {
                break;
            }
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            !stdout.is_empty(),
            "{policy}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for (c, line) in cases.iter().zip(stdout.lines()) {
            let a: serde_json::Value = serde_json::from_str(line).unwrap();
            let e = &c["expect"];
            let want = match (e["l4"].as_str(), e["l7"].as_str()) {
                (Some("allow"), Some("reject")) => "deny",
                (Some("allow"), Some(l7)) => l7,
                (Some("allow"), None) => "none",
                _ => "deny",
            };
            let ws_unjudged = c["query"].get("ws_text").is_some()
                && e["l4"] == "allow"
                && a["ws_stage"] != "message";
            let got = if ws_unjudged && (a["ws_stage"] == "none" || a["decision"] == "deny") {
                "none"
            } else {
                a["decision"].as_str().unwrap()
            };
            // The answer's entry is the request's deciding one; the corpus names the L4
            // entry (checked by proxy/tests/conformance_protocols).
            let entry_ok =
                e["l4"] != "allow" || c["query"]["path"].is_string() || a["entry"] == e["entry"];
            if got == want && entry_ok {
                agree += 1;
            } else {
                differ.push(format!(
                    "{policy} {}: {got} where the reference says {want}",
                    c["label"]
                ));
            }
        }
    }
    println!("protocol corpus through explain --batch: agree {agree}");
    assert!(
        differ.is_empty(),
        "{} differences:\n{}",
        differ.len(),
        differ.join("\n")
    );
    assert_eq!(agree, 4015);
}
