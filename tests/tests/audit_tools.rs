//! `sluice audit` and `sluice policy suggest` on audit logs recorded from real traffic through
//! the real binary: the summary table, the filters, `--follow` across rotation, and a
//! suggested policy that, loaded next to the original, allows exactly the requests that were
//! denied when they are replayed (and nothing else newly).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, python, run};
use sluice_e2e::sluice_bin;

/// curl's and Python's requests: (program, method, port index, path).
type Request = (&'static str, &'static str, usize, &'static str);

/// The traffic recorded: allowed, denied by L7 rules, denied at L4 (a port no entry lists),
/// and from a program the policy does not list.
const TRAFFIC: [Request; 8] = [
    ("curl", "GET", 0, "/ok/a"),
    ("curl", "GET", 0, "/ok/b"),
    ("curl", "GET", 0, "/ok/c"),
    ("curl", "GET", 0, "/nope"),
    ("curl", "POST", 0, "/ok/a"),
    ("curl", "GET", 1, "/x"),
    ("curl", "GET", 1, "/x"),
    ("python", "GET", 0, "/ok/a"),
];

fn original_policy(port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /ok/**}}\n    binaries:\n      - path: /usr/bin/curl\n"
    )
}

/// Sends one request through `sluice` as `program`; the HTTP status it got.
fn send(sluice: &Sluice, program: &str, method: &str, port: u16, path: &str) -> u16 {
    let url = format!("http://127.0.0.1:{port}{path}");
    let (_, out, err) = match program {
        "curl" => run(Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "10",
            ])
            .args(["-x", &sluice.proxy_url(), "-X", method, &url])),
        _ => run(Command::new(python()).arg("-c").arg(format!(
            "import urllib.request as u, urllib.error as e\n\
             o = u.build_opener(u.ProxyHandler({{'http': '{}'}}))\n\
             try:\n    print(o.open(u.Request('{url}', method='{method}'), timeout=10).status)\n\
             except e.HTTPError as x:\n    print(x.code)\n",
            sluice.proxy_url()
        ))),
    };
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{program} {method} {url}: {out}{err}"))
}

/// Runs TRAFFIC through a sluice with the original policy; the audit log's text and the two
/// origins' ports.
fn record(dir: &TempDir) -> (String, [HttpOrigin; 2]) {
    let origins = [HttpOrigin::start(), HttpOrigin::start()];
    let ports = [origins[0].port(), origins[1].port()];
    let mut sluice = Sluice::start(&original_policy(ports[0]), &["--allow-loopback-upstream"]);
    let statuses: Vec<u16> = TRAFFIC
        .iter()
        .map(|(prog, m, i, p)| send(&sluice, prog, m, ports[*i], p))
        .collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 403, 403, 403, 403, 403],
        "{}",
        sluice.stderr()
    );
    sluice.stop();
    let text = std::fs::read_to_string(&sluice.audit_path).unwrap();
    std::fs::write(dir.path().join("recorded.jsonl"), &text).unwrap();
    (text, origins)
}

fn audit(args: &[&str]) -> (i32, String, String) {
    run(Command::new(sluice_bin()).arg("audit").args(args))
}

#[test]
fn summary_filters_and_malformed_lines() {
    let dir = TempDir::new("audit-cli");
    let (text, origins) = record(&dir);
    let file = dir.path().join("recorded.jsonl");
    // Lines that are not audit events are counted, not fatal.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    f.write_all(b"not json\n{\"class_uid\":\"x\"}\n\xff\xfe\n")
        .unwrap();
    drop(f);
    let path = file.to_str().unwrap();
    let (p0, p1) = (origins[0].port(), origins[1].port());
    let py = python();

    let (code, out, err) = audit(&["--summary", path]);
    assert_eq!(code, 0, "{err}");
    let (curl_first, py_first) = ("/usr/bin/curl", py.as_str());
    let mut binaries = [(4, curl_first), (1, py_first)];
    binaries.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let expected = format!(
        "decision   count\nallowed    3\ndenied     5\naudited    0\n\ntop denied hosts\n       3  127.0.0.1:{p0}\n       2  127.0.0.1:{p1}\n\ntop denied binaries\n{}\nmalformed lines: 3\n",
        binaries
            .iter()
            .map(|(n, b)| format!("{n:>8}  {b}\n"))
            .collect::<String>()
    );
    assert_eq!(out, expected);
    assert!(err.contains("3 malformed line(s) skipped"), "{err}");

    // The filters, alone and together.
    let lines = |args: &[&str]| -> Vec<String> {
        let mut all = args.to_vec();
        if !args.contains(&"--color") {
            all.extend(["--color", "never"]);
        }
        all.push(path);
        let (code, out, err) = audit(&all);
        assert_eq!(code, 0, "{err}");
        out.lines().map(str::to_string).collect()
    };
    assert_eq!(lines(&[]).len(), text.lines().count());
    let denied = lines(&["--denied"]);
    assert_eq!(denied.len(), 5, "{denied:#?}");
    assert!(denied.iter().all(|l| l.contains(" DENIED ")));
    let post = format!("-> POST http://127.0.0.1:{p0}/ok/a [policy:api engine:l7] [reason:");
    assert!(
        denied
            .iter()
            .any(|l| l.contains("DENIED /usr/bin/curl(") && l.contains(&post)),
        "{denied:#?}"
    );
    assert_eq!(lines(&["--denied", "--binary", "curl"]).len(), 4);
    assert_eq!(lines(&["--binary", &py]).len(), 1);
    assert_eq!(lines(&["--host", "127.0.0.1", "--denied"]).len(), 5);
    assert_eq!(lines(&["--host", "example.com"]).len(), 0);
    assert_eq!(
        lines(&["--policy", "api"]).len(),
        5,
        "3 allowed, 2 denied by L7"
    );
    assert_eq!(lines(&["--since", "10m"]).len(), text.lines().count());
    assert_eq!(
        lines(&["--since", "2000-01-01T00:00:00Z"]).len(),
        text.lines().count()
    );
    assert_eq!(lines(&["--since", "2999-01-01T00:00:00+02:00"]).len(), 0);
    let (code, _, err) = audit(&["--since", "yesterday", path]);
    assert_eq!(code, 2);
    assert!(err.contains("RFC 3339"), "{err}");
    // Colour only when asked (stdout here is a pipe).
    assert!(!lines(&[]).concat().contains('\x1b'));
    assert!(!lines(&["--color", "auto"]).concat().contains('\x1b'));
    assert!(
        lines(&["--color", "always"])
            .concat()
            .contains("\x1b[1;31mDENIED\x1b[0m")
    );
    // Standard input.
    let mut child = Command::new(sluice_bin())
        .args(["audit", "--denied", "--color", "never", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 5);
}

#[test]
fn follow_prints_appended_events_across_rotation() {
    let dir = TempDir::new("audit-follow");
    let (text, _origins) = record(&dir);
    let events: Vec<&str> = text.lines().collect();
    let denied: Vec<&str> = events
        .iter()
        .copied()
        .filter(|l| l.contains("\"action_id\":2"))
        .collect();
    let log = dir.path().join("live.jsonl");
    std::fs::write(&log, format!("{}\n", denied[0])).unwrap();
    let mut child = Command::new(sluice_bin())
        .args(["audit", "--follow", "--denied", "--color", "never"])
        .arg(&log)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = || {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("audit --follow printed nothing")
    };
    let first = next();
    assert!(first.contains(" DENIED "), "{first}");

    // Appended, in two writes (a line is printed once whole).
    let second = denied[1];
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(&second.as_bytes()[..20]).unwrap();
    f.flush().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    f.write_all(format!("{}\n", &second[20..]).as_bytes())
        .unwrap();
    // An allowed event is filtered out.
    let allowed = events
        .iter()
        .find(|l| l.contains("\"action_id\":1"))
        .unwrap();
    f.write_all(format!("{allowed}\n").as_bytes()).unwrap();
    drop(f);
    let got = next();
    assert!(got.contains(" DENIED "), "{got}");
    assert_ne!(got, first);

    // Rotation: the file renamed away, a new one created at the path.
    let started = Instant::now();
    std::fs::rename(&log, dir.path().join("live.jsonl.1")).unwrap();
    std::fs::write(&log, format!("{}\n", denied[2])).unwrap();
    let after = next();
    assert!(after.contains(" DENIED "), "{after}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(child.try_wait().unwrap().is_none(), "follow ended");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_suggested_policy_allows_exactly_what_was_denied() {
    let dir = TempDir::new("suggest");
    let (_, origins) = record(&dir);
    let ports = [origins[0].port(), origins[1].port()];
    let file = dir.path().join("recorded.jsonl");
    let (code, draft, err) = run(Command::new(sluice_bin())
        .args(["policy", "suggest", "--from"])
        .arg(&file));
    assert_eq!(code, 0, "{err}");
    assert!(
        draft.starts_with("# Drafted by `sluice policy suggest`"),
        "{draft}"
    );
    assert!(draft.contains("REVIEW BEFORE USE"));
    let suggested = dir.write("suggested.yaml", &draft);
    let original = dir.write("original.yaml", &original_policy(ports[0]));

    // `policy check` accepts it, alone and with the original.
    for files in [vec![&suggested], vec![&original, &suggested]] {
        let (code, out, err) = run(Command::new(sluice_bin())
            .args(["policy", "check"])
            .args(files.iter().map(|p| p.as_path())));
        assert_eq!(code, 0, "{draft}\n{out}{err}");
    }

    // Replayed under both: every request is allowed now.
    let sluice = Sluice::start(
        &original_policy(ports[0]),
        &[
            "--allow-loopback-upstream",
            "--policy",
            suggested.to_str().unwrap(),
        ],
    );
    for (prog, m, i, p) in TRAFFIC {
        assert_eq!(
            send(&sluice, prog, m, ports[i], p),
            200,
            "{prog} {m} {p}\n{draft}"
        );
    }
    // Nothing else newly: another path, method, port or program stays refused.
    let other_port = HttpOrigin::start();
    let still_denied: [(&str, &str, u16, &str); 6] = [
        ("curl", "GET", ports[0], "/nope2"),
        ("curl", "DELETE", ports[0], "/ok/a"),
        ("curl", "GET", ports[1], "/y"),
        ("curl", "POST", ports[1], "/x"),
        ("curl", "GET", other_port.port(), "/x"),
        ("python", "GET", ports[0], "/ok/b"),
    ];
    for (prog, m, port, p) in still_denied {
        assert_eq!(
            send(&sluice, prog, m, port, p),
            403,
            "{prog} {m} {port}{p}\n{draft}"
        );
    }
    assert_suggest_tolerates_garbage(&dir.write("garbage.jsonl", "not json\n{}\n"));
}

fn assert_suggest_tolerates_garbage(file: &Path) {
    let (code, out, err) = run(Command::new(sluice_bin())
        .args(["policy", "suggest", "--from"])
        .arg(file));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("2 line(s) that are not audit events skipped"),
        "{err}"
    );
    assert!(out.contains("network_policies: {}"), "{out}");
}
