//! The audit log's file system filled on purpose (a real tmpfs of 1 MiB, mounted for sluice in a
//! mount namespace of its own), and the audit log on a stdout pipe that is closed or that
//! nobody reads: no decision is lost, and nothing is served that could not be audited.
//!
//! - With room in the audit spool, every request is served while the disk is full, and once
//!   it is freed every decision is in the log, in order (CONNECT tunnels allowed and refused,
//!   absolute-form requests allowed and refused, inspected requests allowed and refused by
//!   the L7 rules), with the findings that the log could not be written and is written again.
//! - With the spool full (`--audit-on-failure closed`, the default), new connections and
//!   requests, and a request inside a tunnel opened before, are refused `503
//!   audit_unavailable` (and policy DNS questions REFUSED); the refusals are audited when the
//!   disk is freed, and counted.
//! - A disk that never comes back keeps refusing; stopping sluice prints what it could not
//!   write on stderr.
//! - `--audit-on-failure open` serves on and counts every record it loses.
//!
//! Real binary, real curl, real TLS, real tmpfs; needs root (mount namespaces).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::ocsf::{class, validate_line};
use sluice_e2e::origin::{HttpOrigin, HttpsOrigin};
use sluice_e2e::proxy::{Sluice, TempDir, me, privileged, realpath, run};
use sluice_e2e::reload::Driven;
use sluice_e2e::scrape::{metrics_addr, openmetrics, parse, value};

/// The tmpfs under the audit log.
const TMPFS_SIZE: &str = "1m";
/// The most a filler may write: the tmpfs and some. Past it, what is being filled is not the
/// tmpfs, and the test stops before it fills anything else.
const FILL_CAP: u64 = 4 << 20;

/// The name the policy DNS answers (the `named` entry's).
const DNS_NAME: &str = "audit-dns.test";

/// The finding types the sink reports.
const WRITE_FAILED: &str = "sluice.audit.write_failed";
const FAILING_CLOSED: &str = "sluice.audit.failing_closed";
const RECORDS_LOST: &str = "sluice.audit.records_lost";
const RECOVERED: &str = "sluice.audit.recovered";

// === The disk ===

/// `stat -f` of `dir`: (type, total bytes).
fn statfs(dir: &Path) -> (String, u64) {
    let (code, out, err) = run(Command::new("stat").args(["-f", "-c", "%T %b %S"]).arg(dir));
    assert_eq!(code, 0, "{err}");
    let mut f = out.split_whitespace();
    let kind = f.next().unwrap().to_string();
    let blocks: u64 = f.next().unwrap().parse().unwrap();
    let size: u64 = f.next().unwrap().parse().unwrap();
    (kind, blocks * size)
}

/// Fills the tmpfs at `dir` to its last byte (after checking it is one, and small: this
/// never fills another file system). Returns the filler.
fn fill(dir: &Path) -> PathBuf {
    let (kind, total) = statfs(dir);
    assert_eq!(kind, "tmpfs", "{} is not the test's tmpfs", dir.display());
    assert!(
        total <= 2 << 20,
        "the tmpfs at {} is {total} bytes",
        dir.display()
    );
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = [b'f'; 4096];
    let mut written = 0u64;
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
        assert!(
            written < FILL_CAP,
            "wrote {written} bytes without filling the tmpfs"
        );
    }
    // The last pages: byte by byte.
    while let Ok(1) = f.write(b"f") {
        written += 1;
        assert!(written < FILL_CAP);
    }
    path
}

// === The clients ===

/// One exchange on a fresh connection: the response's status and text.
fn exchange(proxy: SocketAddr, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    (status, text)
}

/// An absolute-form GET.
fn absolute(proxy: SocketAddr, port: u16, path: &str) -> (u16, String) {
    exchange(
        proxy,
        &format!(
            "GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        ),
    )
}

/// `CONNECT host:port`; when it is allowed, one request through the tunnel (which sluice
/// relays, L4) before closing it. The CONNECT's status and text.
fn connect(proxy: SocketAddr, host: &str, port: u16) -> (u16, String) {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no CONNECT answer: {text:?}"));
    if status == 200 {
        write!(
            s,
            "GET /tunnelled HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 200"));
    } else {
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        return (status, format!("{text}{}", String::from_utf8_lossy(&rest)));
    }
    (status, text)
}

/// An inspected HTTPS GET with curl: (the CONNECT's status, the request's status).
fn inspected(sluice: &Sluice, ca: &Path, port: u16, path: &str) -> (u16, u16) {
    let (_, out, _) = run(Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "20"])
        .args(["-w", "%{http_connect} %{http_code}"])
        .arg("--proxy")
        .arg(sluice.proxy_url())
        .arg("--cacert")
        .arg(ca)
        .arg(format!("https://127.0.0.1:{port}{path}")));
    let mut f = out.split_whitespace();
    let connect = f.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    let code = f.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    (connect, code)
}

/// A Python `httpx` client holding one inspected connection: each path written to it is
/// fetched on that connection, and its status printed.
const HELD: &str = r#"
import sys, httpx
proxy, ca, base = sys.argv[1:4]
# The one connection is kept however long the test takes between requests.
c = httpx.Client(proxy=proxy, verify=ca, timeout=20, limits=httpx.Limits(keepalive_expiry=600))
print("ready", flush=True)
for line in sys.stdin:
    try:
        r = c.get(base + line.strip())
        print(r.status_code, r.json().get("error", "") if r.status_code >= 400 else "", flush=True)
    except Exception as e:
        print("failed", type(e).__name__, e, flush=True)
"#;

/// The policy DNS listener sluice announced.
fn dns_addr(s: &Sluice) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(a) = s.stderr().lines().find_map(|l| {
            l.strip_prefix("sluice: listening on ")
                .filter(|rest| rest.contains("(policy DNS"))
                .and_then(|rest| rest.split(' ').next())
                .and_then(|a| a.parse().ok())
        }) {
            return a;
        }
        assert!(Instant::now() < deadline, "no policy DNS:\n{}", s.stderr());
        thread::sleep(Duration::from_millis(20));
    }
}

/// One A question for `name` over UDP: the reply's response code (0 NOERROR, 5 REFUSED).
fn dns_rcode(dns: SocketAddr, id: u16, name: &str) -> u8 {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        q.push(u8::try_from(label.len()).unwrap());
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    socket.send_to(&q, dns).unwrap();
    let mut reply = [0u8; 512];
    let n = socket.recv(&mut reply).unwrap();
    assert!(
        n >= 12 && reply[..2] == id.to_be_bytes(),
        "{:?}",
        &reply[..n]
    );
    reply[3] & 0x0f
}

// === The set-up ===

struct Setup {
    _dir: TempDir,
    plain: HttpOrigin,
    tls: HttpsOrigin,
    sluice: Sluice,
    ca: PathBuf,
}

/// sluice with its audit log on a 1 MiB tmpfs: the test binary may reach the plain origin
/// (L4); curl and Python the TLS origin's `/allowed/**` (inspected).
fn setup(extra: &[&str]) -> Setup {
    let dir = TempDir::new("audit-full-disk");
    let plain = HttpOrigin::start();
    let tls = HttpsOrigin::start(dir.path());
    let policy = format!(
        "version: 1\nnetwork_policies:\n  named:\n    endpoints:\n      - {{host: {DNS_NAME}, port: 443}}\n    binaries:\n      - path: /usr/bin/true\n  plain:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}}}\n    binaries:\n      - path: {}\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: \"/allowed/**\"}}\n    binaries:\n      - path: {}\n      - path: {}\n",
        plain.port(),
        me(),
        tls.port(),
        realpath("/usr/bin/curl"),
        sluice_e2e::proxy::python(),
    );
    let ca_dir = dir.path().join("ca");
    let mut args = vec![
        "--allow-loopback-upstream".to_string(),
        "--ca-dir".to_string(),
        ca_dir.display().to_string(),
        "--upstream-ca".to_string(),
        tls.cert.display().to_string(),
        "--metrics-listen".to_string(),
        "127.0.0.1:0".to_string(),
        "--resolve".to_string(),
        format!("{DNS_NAME}=127.0.0.1"),
    ];
    args.extend(extra.iter().map(ToString::to_string));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let sluice = Sluice::start_on_tmpfs(&policy, &refs, TMPFS_SIZE);
    let (kind, _) = statfs(&sluice.tmpfs_dir());
    assert_eq!(kind, "tmpfs");
    Setup {
        _dir: dir,
        plain,
        tls,
        sluice,
        ca: ca_dir.join("ca.pem"),
    }
}

/// A metric's value now.
fn metric(s: &Sluice, name: &str) -> f64 {
    let (status, body) = openmetrics(metrics_addr(s));
    assert_eq!(status, 200);
    value(&parse(&body), name, &[])
}

/// Every audit line written so far, parsed and checked against OCSF.
fn log(s: &Sluice) -> Vec<Value> {
    let text = std::fs::read_to_string(&s.audit_path).unwrap_or_default();
    lines(&text)
}

fn lines(text: &str) -> Vec<Value> {
    let whole = text.rfind('\n').map_or("", |end| &text[..=end]);
    whole
        .lines()
        .map(|l| validate_line(l).unwrap_or_else(|e| panic!("{l}\nis not valid OCSF: {e:#?}")))
        .collect()
}

fn finding_type(e: &Value) -> Option<&str> {
    (class(e) == 2004)
        .then(|| e["finding_info"]["types"][0].as_str())
        .flatten()
}

/// Waits (30 s at most) until the log holds the recovery finding.
fn wait_recovered(s: &Sluice) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = log(s);
        if events.iter().any(|e| finding_type(e) == Some(RECOVERED)) {
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "no recovery finding; stderr:\n{}",
            s.stderr()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

// === What the log must hold ===

/// One decision the log must hold.
#[derive(Clone, Debug)]
enum Decision {
    /// A 4002 for this path, allowed or not.
    Request { path: String, allowed: bool },
    /// A 4001 Open to this host, allowed or not.
    Open { host: String, allowed: bool },
    /// A refusal for want of an audit log (a 4001 Open or a 4002, status 503).
    Unavailable,
}

impl Decision {
    fn matches(&self, e: &Value) -> bool {
        let allowed = |e: &Value| e["action_id"].as_u64() == Some(1);
        match self {
            Decision::Request { path, allowed: a } => {
                class(e) == 4002
                    && e["http_request"]["url"]["path"].as_str() == Some(path)
                    && allowed(e) == *a
            }
            Decision::Open { host, allowed: a } => {
                class(e) == 4001
                    && e["activity_id"] == 1
                    && (e["dst_endpoint"]["hostname"].as_str() == Some(host)
                        || e["dst_endpoint"]["ip"].as_str() == Some(host))
                    && allowed(e) == *a
            }
            Decision::Unavailable => {
                (class(e) == 4001 || class(e) == 4002)
                    && e["status_detail"]
                        .as_str()
                        .is_some_and(|d| d.contains("cannot write its audit log"))
            }
        }
    }
}

/// `decisions` are in `events` in this order (other events may come between them).
fn in_order(events: &[Value], decisions: &[Decision]) {
    let mut at = 0;
    for d in decisions {
        match events[at..].iter().position(|e| d.matches(e)) {
            Some(i) => at += i + 1,
            None => panic!(
                "{d:?} is not in the log after event #{at}; the log from there:\n{:#?}",
                &events[at..]
            ),
        }
    }
}

/// The mix of requests, one of each kind per round: what each got, and the decision it is.
fn one_round(x: &Setup, i: usize) -> Vec<(u16, Decision)> {
    let proxy = x.sluice.addr();
    let mut out = Vec::new();
    let path = format!("/abs/{i}");
    out.push((
        absolute(proxy, x.plain.port(), &path).0,
        Decision::Request {
            path,
            allowed: true,
        },
    ));
    // The test binary is not the inspected entry's.
    let path = format!("/abs-denied/{i}");
    out.push((
        absolute(proxy, x.tls.port(), &path).0,
        Decision::Request {
            path,
            allowed: false,
        },
    ));
    out.push((
        connect(proxy, "127.0.0.1", x.plain.port()).0,
        Decision::Open {
            host: "127.0.0.1".to_string(),
            allowed: true,
        },
    ));
    let host = format!("denied-{i}.example");
    out.push((
        connect(proxy, &host, 443).0,
        Decision::Open {
            host,
            allowed: false,
        },
    ));
    for (path, allowed) in [
        (format!("/allowed/{i}"), true),
        (format!("/denied/{i}"), false),
    ] {
        let (connect, code) = inspected(&x.sluice, &x.ca, x.tls.port(), &path);
        let status = if connect == 200 { code } else { connect };
        out.push((status, Decision::Request { path, allowed }));
    }
    out
}

/// The status each decision must get when served.
fn served_status(d: &Decision) -> u16 {
    match d {
        Decision::Request { allowed: true, .. } | Decision::Open { allowed: true, .. } => 200,
        _ => 403,
    }
}

// === The tests ===

/// With room in the spool, every request is served while the disk is full, and every
/// decision is in the log, in order, once it is freed.
#[test]
fn a_full_audit_disk_loses_no_decision() {
    if !privileged("a_full_audit_disk_loses_no_decision") {
        return;
    }
    let x = setup(&[]);
    let mut decisions = Vec::new();
    for (status, d) in one_round(&x, 0) {
        assert_eq!(status, served_status(&d), "{d:?}");
        decisions.push(d);
    }
    let filler = fill(&x.sluice.tmpfs_dir());
    for i in 1..=16 {
        for (status, d) in one_round(&x, i) {
            assert_eq!(status, served_status(&d), "{d:?} with the disk full");
            decisions.push(d);
        }
    }
    assert_eq!(metric(&x.sluice, "sluice_audit_sink_failing"), 1.0);
    assert_eq!(metric(&x.sluice, "sluice_audit_failing_closed"), 0.0);
    assert!(metric(&x.sluice, "sluice_audit_spooled_total") >= 96.0);
    assert!(metric(&x.sluice, "sluice_audit_spool_records") >= 96.0);
    let stderr = x.sluice.stderr();
    assert!(
        stderr.contains("sluice: cannot write the audit log ")
            && stderr.contains("No space left on device"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("[type:{WRITE_FAILED}]")),
        "{stderr}"
    );

    std::fs::remove_file(&filler).unwrap();
    let events = wait_recovered(&x.sluice);
    in_order(&events, &decisions);
    // Each request once, the findings where they belong.
    for d in &decisions {
        if let Decision::Request { .. } = d {
            assert_eq!(events.iter().filter(|e| d.matches(e)).count(), 1, "{d:?}");
        }
    }
    let failed = events
        .iter()
        .position(|e| finding_type(e) == Some(WRITE_FAILED))
        .unwrap();
    let recovered = events
        .iter()
        .position(|e| finding_type(e) == Some(RECOVERED))
        .unwrap();
    assert!(failed < recovered);
    let title = events[recovered]["finding_info"]["title"].as_str().unwrap();
    assert!(
        title.contains(" 0 lost, 0 connection(s) or request(s) refused"),
        "{title}"
    );
    assert_eq!(metric(&x.sluice, "sluice_audit_lost_total"), 0.0);
    assert_eq!(metric(&x.sluice, "sluice_audit_sink_failing"), 0.0);
    // And it goes on.
    assert_eq!(absolute(x.sluice.addr(), x.plain.port(), "/after").0, 200);
}

/// A request's answer while failing closed: `503 audit_unavailable`.
fn assert_unavailable(text: &str) {
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(json["error"], "audit_unavailable", "{text}");
}

/// Rounds of requests with the disk full until sluice fails closed: the decisions served
/// before, in order, and how many of the round's requests were refused (every one after the
/// first refusal is).
fn until_refused(x: &Setup) -> (Vec<Decision>, u32) {
    let mut served = Vec::new();
    for i in 0..100 {
        let mut refused = 0;
        for (status, d) in one_round(x, i) {
            if status == 503 || refused > 0 {
                assert_eq!(status, 503, "{d:?} served after a refusal");
                refused += 1;
                continue;
            }
            assert_eq!(status, served_status(&d), "{d:?}");
            served.push(d);
        }
        if refused > 0 {
            return (served, refused);
        }
    }
    panic!("never refused; stderr:\n{}", x.sluice.stderr());
}

/// With the spool full, every new connection and request is refused `503 audit_unavailable`
/// (and a request in a tunnel opened before; a policy DNS question is REFUSED); once the disk is
/// freed, what was served and the refusals are in the log, in order, and sluice serves again.
#[test]
fn a_full_spool_fails_closed_and_every_refusal_is_audited_when_the_disk_is_back() {
    if !privileged("a_full_spool_fails_closed_and_every_refusal_is_audited_when_the_disk_is_back") {
        return;
    }
    let x = setup(&[
        "--audit-spool-max-records",
        "64",
        "--dns-listen",
        "127.0.0.1:0",
    ]);
    let dns = dns_addr(&x.sluice);
    assert_eq!(dns_rcode(dns, 1, DNS_NAME), 0);
    // A Python client holding an inspected connection opened before.
    let mut held = Driven::start(
        HELD,
        &[
            &x.sluice.proxy_url(),
            &x.ca.display().to_string(),
            &format!("https://127.0.0.1:{}", x.tls.port()),
        ],
        "ready",
        "the held client",
    );
    assert_eq!(held.ask("/allowed/held-before"), "200 ");
    let filler = fill(&x.sluice.tmpfs_dir());
    let (served, mut refused) = until_refused(&x);
    assert!(served.len() >= 8, "{served:?}");
    // Every kind of new connection and request, and a request on the held connection.
    let proxy = x.sluice.addr();
    for i in 0..3 {
        let (status, text) = absolute(proxy, x.plain.port(), &format!("/refused/{i}"));
        assert_eq!(status, 503, "{text}");
        assert_unavailable(&text);
        let (status, text) = connect(proxy, "127.0.0.1", x.plain.port());
        assert_eq!(status, 503, "{text}");
        assert_unavailable(&text);
        let (connect, _) = inspected(&x.sluice, &x.ca, x.tls.port(), "/allowed/refused");
        assert_eq!(connect, 503);
        refused += 3;
    }
    // The request on the connection opened before: refused too (and, as after any refusal,
    // that connection closes: the client's next request opens a new one, also refused).
    assert_eq!(held.ask("/allowed/held-during"), "503 audit_unavailable");
    // Python's proxy error shows the status line, whose reason phrase names the refusal.
    let again = held.ask("/allowed/held-again");
    assert!(
        again.starts_with("failed ProxyError 503 Service Unavailable (sluice: audit_unavailable:"),
        "{again}"
    );
    refused += 2;
    // The policy DNS hands out no address either.
    assert_eq!(dns_rcode(dns, 2, DNS_NAME), 5);
    refused += 1;
    assert_eq!(metric(&x.sluice, "sluice_audit_failing_closed"), 1.0);
    assert_eq!(
        metric(&x.sluice, "sluice_audit_refused_total"),
        f64::from(refused),
        "{}",
        x.sluice
            .stderr()
            .lines()
            .filter(|l| l.contains("cannot write its audit log"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        x.sluice
            .stderr()
            .contains(&format!("[type:{FAILING_CLOSED}]")),
        "{}",
        x.sluice.stderr()
    );

    std::fs::remove_file(&filler).unwrap();
    let events = wait_recovered(&x.sluice);
    in_order(&events, &served);
    let closed_at = events
        .iter()
        .position(|e| finding_type(e) == Some(FAILING_CLOSED))
        .expect("the failing-closed finding is in the log");
    // The refusals are audited after it, each as a 503 for want of an audit log.
    let audited = events[closed_at..]
        .iter()
        .filter(|e| Decision::Unavailable.matches(e))
        .count();
    let lost = metric(&x.sluice, "sluice_audit_lost_total");
    assert!(audited > 0);
    // Each refusal is a record, kept in the reserve or counted lost (with the closes of the
    // refused connections, also records).
    assert!(
        audited as f64 + lost >= f64::from(refused),
        "{audited} audited + {lost} lost < {refused} refused"
    );
    let title = events
        .iter()
        .find(|e| finding_type(e) == Some(RECOVERED))
        .unwrap()["finding_info"]["title"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        title.contains(&format!("{refused} connection(s) or request(s) refused")),
        "{title}"
    );
    // Served again, on a new connection and on the held one.
    assert_eq!(metric(&x.sluice, "sluice_audit_failing_closed"), 0.0);
    assert_eq!(absolute(proxy, x.plain.port(), "/after").0, 200);
    assert_eq!(held.ask("/allowed/held-after"), "200 ");
    assert_eq!(dns_rcode(dns, 3, DNS_NAME), 0);
}

/// A disk that never comes back: sluice keeps refusing (and answering `/metrics`); stopped,
/// it prints on stderr the records it could not write.
#[test]
fn a_disk_that_never_comes_back_keeps_refusing() {
    if !privileged("a_disk_that_never_comes_back_keeps_refusing") {
        return;
    }
    let mut x = setup(&["--audit-spool-max-records", "16"]);
    fill(&x.sluice.tmpfs_dir());
    until_refused(&x);
    let proxy = x.sluice.addr();
    let until = Instant::now() + Duration::from_secs(4);
    let mut asked = 0;
    while Instant::now() < until {
        let (status, text) = absolute(proxy, x.plain.port(), &format!("/still/{asked}"));
        assert_eq!(status, 503, "{text}");
        assert_unavailable(&text);
        let (status, _) = connect(proxy, &format!("denied-{asked}.example"), 443);
        assert_eq!(status, 503);
        asked += 1;
        assert_eq!(metric(&x.sluice, "sluice_audit_failing_closed"), 1.0);
        thread::sleep(Duration::from_millis(100));
    }
    assert!(asked >= 3);
    let started = Instant::now();
    x.sluice.stop();
    assert!(!x.sluice.is_running());
    assert!(started.elapsed() < Duration::from_secs(20));
    let stderr = x.sluice.stderr();
    assert!(
        stderr.contains("audit record(s) could not be written to ")
            && stderr.contains(" before exit; here they are:"),
        "{stderr}"
    );
    // What is printed is the records themselves, the stop event last.
    let printed: Vec<&str> = stderr
        .lines()
        .skip_while(|l| !l.contains("here they are:"))
        .skip(1)
        .filter(|l| l.starts_with('{'))
        .collect();
    assert!(printed.len() >= 16, "{printed:?}");
    for l in &printed {
        validate_line(l).unwrap_or_else(|e| panic!("{l}: {e:#?}"));
    }
}

/// `--audit-on-failure open`: served throughout; every record that could not be kept is
/// counted, the loss is a finding, and the log has the rest in order.
#[test]
fn open_serves_on_and_counts_every_lost_record() {
    if !privileged("open_serves_on_and_counts_every_lost_record") {
        return;
    }
    let x = setup(&[
        "--audit-on-failure",
        "open",
        "--audit-spool-max-records",
        "16",
    ]);
    let filler = fill(&x.sluice.tmpfs_dir());
    let proxy = x.sluice.addr();
    let total = 60;
    for i in 0..total {
        assert_eq!(
            absolute(proxy, x.plain.port(), &format!("/open/{i}")).0,
            200
        );
    }
    let lost = metric(&x.sluice, "sluice_audit_lost_total");
    assert!(lost >= 40.0, "{lost} lost");
    assert_eq!(metric(&x.sluice, "sluice_audit_failing_closed"), 0.0);
    assert!(
        x.sluice
            .stderr()
            .contains(&format!("[type:{RECORDS_LOST}]")),
        "{}",
        x.sluice.stderr()
    );
    std::fs::remove_file(&filler).unwrap();
    let events = wait_recovered(&x.sluice);
    let kept: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["http_request"]["url"]["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/open/"))
        })
        .collect();
    // Each request is in the log or counted lost, and what is there is in order.
    assert_eq!(kept.len() as f64 + lost, f64::from(total));
    let numbers: Vec<u32> = kept
        .iter()
        .map(|e| {
            e["http_request"]["url"]["path"].as_str().unwrap()[6..]
                .parse()
                .unwrap()
        })
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    let title = events
        .iter()
        .find(|e| finding_type(e) == Some(RECOVERED))
        .unwrap()["finding_info"]["title"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(title.contains(&format!(", {lost} lost,")), "{title}");
}

// === stdout ===

/// The plain origin's policy for the test binary (stdout tests need no TLS).
fn plain_policy(port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  plain:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}}}\n    binaries:\n      - path: {}\n",
        me()
    )
}

/// `--audit-log -` and a stdout nobody reads (a full pipe): no request waits for it; once
/// the spool is full, sluice refuses; once the pipe is read, everything comes, in order.
#[test]
fn a_stdout_pipe_nobody_reads_fails_closed_then_everything_comes_in_order() {
    let origin = HttpOrigin::start();
    let (sluice, mut out) = Sluice::start_with_stdout(
        &plain_policy(origin.port()),
        &[
            "--allow-loopback-upstream",
            "--audit-spool-max-records",
            "64",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let proxy = sluice.addr();
    let mut served = 0;
    let mut refused = 0;
    // A 64 KiB pipe, then 64 records: a few hundred requests at most.
    for i in 0..2000 {
        let started = Instant::now();
        let (status, text) = absolute(proxy, origin.port(), &format!("/piped/{i}"));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "request {i} waited"
        );
        match status {
            200 => served += 1,
            503 => {
                assert_unavailable(&text);
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            other => panic!("{other}: {text}"),
        }
    }
    assert_eq!(refused, 3, "never refused");
    // The write under way for more than a second counts as failing.
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&sluice, "sluice_audit_sink_failing") != 1.0 {
        assert!(
            Instant::now() < deadline,
            "the blocked write is not seen as failing"
        );
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metric(&sluice, "sluice_audit_failing_closed"), 1.0);
    // The reader comes: everything arrives, then the recovery.
    let reader = thread::spawn(move || {
        let mut text = Vec::new();
        let mut buf = [0u8; 65536];
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => text.extend_from_slice(&buf[..n]),
            }
            if String::from_utf8_lossy(&text).contains(RECOVERED) {
                break;
            }
        }
        String::from_utf8(text).unwrap()
    });
    let text = reader.join().unwrap();
    let events = lines(&text);
    let numbers: Vec<u32> = events
        .iter()
        .filter_map(|e| e["http_request"]["url"]["path"].as_str())
        .filter_map(|p| p.strip_prefix("/piped/"))
        .map(|n| n.parse().unwrap())
        .collect();
    // Every served request, in order, and the refusals after the finding.
    let served_numbers: Vec<u32> = numbers[..served].to_vec();
    assert_eq!(served_numbers, (0..served as u32).collect::<Vec<_>>());
    assert!(
        events
            .iter()
            .any(|e| finding_type(e) == Some(FAILING_CLOSED))
    );
    assert!(events.iter().any(|e| finding_type(e) == Some(RECOVERED)));
    assert_eq!(metric(&sluice, "sluice_audit_failing_closed"), 0.0);
    assert_eq!(metric(&sluice, "sluice_audit_lost_total"), 0.0);
}

/// `--audit-log -` and a stdout whose reader is gone (EPIPE): it never recovers, so once
/// the spool is full sluice refuses, and says why.
#[test]
fn a_closed_stdout_pipe_fails_closed() {
    let origin = HttpOrigin::start();
    let (sluice, out) = Sluice::start_with_stdout(
        &plain_policy(origin.port()),
        &[
            "--allow-loopback-upstream",
            "--audit-spool-max-records",
            "16",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    drop(out);
    let proxy = sluice.addr();
    let mut refused = false;
    for i in 0..200 {
        let (status, text) = absolute(proxy, origin.port(), &format!("/closed/{i}"));
        if status == 503 {
            assert_unavailable(&text);
            refused = true;
            break;
        }
        assert_eq!(status, 200, "{text}");
    }
    assert!(refused, "{}", sluice.stderr());
    assert!(
        sluice
            .stderr()
            .contains("sluice: cannot write the audit log -: Broken pipe"),
        "{}",
        sluice.stderr()
    );
    assert_eq!(metric(&sluice, "sluice_audit_sink_failing"), 1.0);
    assert_eq!(metric(&sluice, "sluice_audit_failing_closed"), 1.0);
}
