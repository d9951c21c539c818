//! `sluice audit` and `sluice policy suggest` on audit logs recorded from real traffic through
//! the real binary: the summary table, the filters, `--follow` across rotation, and a
//! suggested policy that, loaded next to the original, allows exactly the requests that were
//! denied when they are replayed (and nothing else newly).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
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

/// An IPv6 literal destination is written `[::1]:port` wherever a port follows it: in the
/// OCSF record (`message`, `http_request.url.url_string`; `dst_endpoint.ip` and the URL's
/// `hostname` hold the bare address) and in `sluice audit`'s lines and summary, for a
/// forwarded request allowed, one denied by L7 rules, one denied at L4, and a tunnel.
#[test]
fn an_ipv6_destination_is_bracketed_in_the_record_and_in_sluice_audit() {
    let (rest, tunnelled, unlisted) = (
        HttpOrigin::start_on("[::1]:0"),
        HttpOrigin::start_on("[::1]:0"),
        HttpOrigin::start_on("[::1]:0"),
    );
    let (p, t, u) = (rest.port(), tunnelled.port(), unlisted.port());
    let policy = format!(
        "version: 1\nnetwork_policies:\n  v6:\n    endpoints:\n      - host: \"::1\"\n        port: {p}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /ok/**}}\n      - {{host: \"::1\", port: {t}}}\n    binaries:\n      - path: /usr/bin/curl\n"
    );
    let mut sluice = Sluice::start(&policy, &["--allow-loopback-upstream"]);
    let curl = |extra: &[&str], url: &str| -> (u16, String) {
        let (_, out, err) = run(Command::new("curl")
            .args(["-s", "--max-time", "10", "-w", "\n%{http_code}"])
            .args(["-x", &sluice.proxy_url()])
            .args(extra)
            .arg(url));
        let (body, status) = out.rsplit_once('\n').unwrap_or(("", &out));
        let status = status
            .parse()
            .unwrap_or_else(|_| panic!("curl {url}: {out}{err}"));
        (status, body.to_string())
    };
    assert_eq!(curl(&[], &format!("http://[::1]:{p}/ok/a")).0, 200);
    let (status, refusal) = curl(&["-X", "POST"], &format!("http://[::1]:{p}/ok/a"));
    assert_eq!(status, 403, "{refusal}");
    // The refusal names the host without brackets and the port apart, as for any host.
    let refusal: Value = serde_json::from_str(&refusal).unwrap();
    assert_eq!(
        (refusal["host"].as_str(), refusal["port"].as_u64()),
        (Some("::1"), Some(u64::from(p))),
        "{refusal:#}"
    );
    assert!(
        refusal["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("[::1]:{p}/ok/a")),
        "{refusal:#}"
    );
    assert_eq!(curl(&[], &format!("http://[::1]:{u}/x")).0, 403);
    assert_eq!(curl(&["-p"], &format!("http://[::1]:{t}/in")).0, 200);
    sluice.stop();

    let text = std::fs::read_to_string(&sluice.audit_path).unwrap();
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let unbracketed = |s: &str| s.replace("[::1]:", "").contains("::1:");
    for e in &events {
        let message = e["message"].as_str().unwrap_or_default();
        assert!(!unbracketed(message), "{e:#}");
        assert!(!unbracketed(&e.to_string()), "{e:#}");
    }
    let request = |method: &str| {
        events
            .iter()
            .find(|e| {
                e["class_uid"] == 4002
                    && e["http_request"]["http_method"] == method
                    && e["http_request"]["url"]["path"] == "/ok/a"
            })
            .unwrap_or_else(|| panic!("no {method} record: {text}"))
    };
    for method in ["GET", "POST"] {
        let url = &request(method)["http_request"]["url"];
        assert_eq!(
            url["url_string"],
            format!("http://[::1]:{p}/ok/a"),
            "{url:#}"
        );
        assert_eq!(
            (url["hostname"].as_str(), url["port"].as_u64()),
            (Some("::1"), Some(u64::from(p)))
        );
        assert!(
            request(method)["message"]
                .as_str()
                .unwrap()
                .contains(&format!("[::1]:{p}/ok/a"))
        );
        assert_eq!(request(method)["dst_endpoint"]["ip"], "::1");
    }
    let opened = |port: u16| {
        events.iter().any(|e| {
            e["class_uid"] == 4001
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.ends_with(&format!(" [::1]:{port}")))
        })
    };
    assert!(opened(t), "the tunnel's open event: {text}");
    let l4 = events
        .iter()
        .find(|e| e["http_request"]["url"]["path"] == "/x")
        .unwrap_or_else(|| panic!("no L4 denial: {text}"));
    assert_eq!(
        l4["message"],
        format!("HTTP denied GET [::1]:{u}/x"),
        "{l4:#}"
    );
    assert_eq!(
        l4["status_detail"],
        format!("endpoint [::1]:{u} is not allowed by any policy"),
        "{l4:#}"
    );

    let path = sluice.audit_path.to_str().unwrap();
    let (code, out, err) = audit(&["--color", "never", path]);
    assert_eq!(code, 0, "{err}");
    assert!(!unbracketed(&out), "{out}");
    assert!(out.contains(&format!("GET http://[::1]:{p}/ok/a")), "{out}");
    assert!(
        out.contains(&format!("POST http://[::1]:{p}/ok/a")),
        "{out}"
    );
    assert!(out.contains(&format!("[::1]:{t}")), "{out}");
    let (code, out, err) = audit(&["--summary", path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("  [::1]:{p}\n")), "{out}");
    assert!(out.contains(&format!("  [::1]:{u}\n")), "{out}");
    // The host filter takes the address with or without brackets.
    for host in ["::1", "[::1]"] {
        let (code, out, err) = audit(&["--host", host, "--denied", path]);
        assert_eq!(
            (code, out.lines().count()),
            (0, 2),
            "--host {host}: {out}{err}"
        );
    }
}
