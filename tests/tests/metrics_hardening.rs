//! Attacks on the metrics endpoint by a client that can reach it (a sandboxed agent in the same
//! pod): connections held idle or fed a head one byte at a time (slow loris), reopened as soon
//! as sluice closes them, must not starve Prometheus's scrape or the kubelet's `/readyz` and
//! `/healthz` probes; and host and executable names the agent makes up, all denied, must not
//! take the label values that allowed traffic needs.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use sluice_e2e::ocsf::class;
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, realpath, run};
use sluice_e2e::scrape::{metrics_addr, openmetrics, parse, value};

/// The attacker's address: another loopback address than the scraper's (127.0.0.1), as the
/// sandbox's pod address is another than the kubelet's or Prometheus's.
const ATTACKER: [u8; 4] = [127, 0, 0, 2];

/// Connections the attacker keeps open at all times (many more than the listener serves).
const HELD: usize = 150;

/// An answer counts as prompt within this (a scrape on an idle machine takes milliseconds;
/// a probe's default timeout is one second, Prometheus's scrape timeout ten).
const PROMPT: Duration = Duration::from_secs(2);

/// `HELD` connections to `addr` from [`ATTACKER`]: half never send a byte, half send a request head one byte
/// every 200 ms and never finish it. Each one sluice closes is opened again at once, until
/// the returned flag is cleared. Counts the reopenings.
fn hold_connections(addr: SocketAddr) -> (Arc<AtomicBool>, Arc<AtomicUsize>) {
    let running = Arc::new(AtomicBool::new(true));
    let reopened = Arc::new(AtomicUsize::new(0));
    let (flag, count) = (Arc::clone(&running), Arc::clone(&reopened));
    // `None` when the connection could not be made; tried again on the next round.
    let open = move |slow: bool| -> Option<TcpStream> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
        s.bind(&SocketAddr::from((ATTACKER, 0)).into()).ok()?;
        s.connect_timeout(&addr.into(), Duration::from_secs(1))
            .ok()?;
        let mut s: TcpStream = s.into();
        if slow {
            s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").ok()?;
        }
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    let mut held: Vec<(bool, Option<TcpStream>)> = (0..HELD)
        .map(|i| {
            let slow = i % 2 == 1;
            (slow, open(slow))
        })
        .collect();
    thread::spawn(move || {
        while flag.load(Ordering::SeqCst) {
            for (slow, held) in &mut held {
                let closed = match held {
                    None => true,
                    Some(s) => {
                        let mut buf = [0u8; 512];
                        let gone = match s.read(&mut buf) {
                            Ok(_) => true,
                            Err(e) => e.kind() != ErrorKind::WouldBlock,
                        };
                        gone || (*slow && s.write(b"x").is_err())
                    }
                };
                if closed {
                    *held = open(*slow);
                    count.fetch_add(1, Ordering::SeqCst);
                }
            }
            thread::sleep(Duration::from_millis(200));
        }
    });
    (running, reopened)
}

/// `GET path` with curl: status, body and how long it took.
fn timed_get(addr: SocketAddr, path: &str) -> (u16, String, Duration) {
    let started = Instant::now();
    let (_, out, err) = run(Command::new("curl")
        .args([
            "-sS",
            "--noproxy",
            "*",
            "--max-time",
            "5",
            "-w",
            "\n%{http_code}",
        ])
        .arg(format!("http://{addr}{path}")));
    let took = started.elapsed();
    let (body, status) = out
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("no answer from {addr}{path}: {out}{err}"));
    (status.parse().unwrap_or(0), format!("{body}{err}"), took)
}

#[test]
fn idle_and_slow_loris_connections_do_not_starve_scrapes_or_probes() {
    let sluice = Sluice::start(
        "version: 1\nnetwork_policies:\n  web:\n    endpoints:\n      - {host: example.test, port: 443}\n    binaries:\n      - path: /usr/bin/curl\n",
        &["--metrics-listen", "127.0.0.1:0"],
    );
    let addr = metrics_addr(&sluice);
    let (running, reopened) = hold_connections(addr);
    // The attack is in place before the first scrape, and stays through several rounds of
    // head timeouts.
    thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(6) {
        for (path, expect) in [
            ("/metrics", "# TYPE sluice_max_connections gauge\n"),
            ("/readyz", "ready\n"),
            ("/healthz", "ok\n"),
        ] {
            let (status, body, took) = timed_get(addr, path);
            assert_eq!(
                status, 200,
                "{path} while {HELD} connections are held: {body}"
            );
            assert!(body.contains(expect), "{path}: {body}");
            assert!(
                took < PROMPT,
                "{path} took {took:?} while {HELD} connections are held"
            );
        }
        rounds += 1;
        thread::sleep(Duration::from_millis(300));
    }
    running.store(false, Ordering::SeqCst);
    assert!(rounds >= 3, "{rounds} rounds");
    // A head that does not arrive within 2 s is cut off, whether nothing came or part of it.
    for partial in [&b""[..], b"GET /metrics HTTP/1.1\r\nX-Slow: "] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(partial).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 64];
        assert_eq!(
            s.read(&mut buf).unwrap_or(0),
            0,
            "an unfinished head was answered"
        );
        let lived = started.elapsed();
        assert!(
            lived < Duration::from_secs(4),
            "an unfinished head was held {lived:?}"
        );
    }
    // The slow heads were cut off (and reopened by the attacker): none is held for ever.
    assert!(
        reopened.load(Ordering::SeqCst) >= HELD / 2,
        "only {} of the held connections were closed by sluice",
        reopened.load(Ordering::SeqCst)
    );
}

/// Made-up host names the agent CONNECTs to (more than the host cap of 256).
const JUNK_HOSTS: usize = 300;
/// Copies of curl the agent runs from made-up paths (more than the executable cap of 64).
const JUNK_BINARIES: usize = 70;

#[test]
fn denied_junk_names_cannot_take_the_labels_allowed_traffic_needs() {
    let origin = HttpOrigin::start();
    let port = origin.port();
    let sluice = Sluice::start(
        &format!(
            "version: 1\nnetwork_policies:\n  web:\n    endpoints:\n      - {{host: real.test, port: {port}}}\n      - {{host: \"*.wild.test\", port: {port}}}\n    binaries:\n      - path: /usr/bin/curl\n"
        ),
        &[
            "--allow-loopback-upstream",
            "--resolve",
            "real.test=127.0.0.1",
            "--resolve",
            "a.wild.test=127.0.0.1",
            "--max-new-connections-per-caller-per-sec",
            "100000",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let metrics = metrics_addr(&sluice);
    // The agent first: CONNECTs to names nobody allows, from an executable nobody lists...
    for i in 0..JUNK_HOSTS {
        let answer = sluice.raw(
            format!(
                "CONNECT junk-{i}.evil.test:443 HTTP/1.1\r\nHost: junk-{i}.evil.test:443\r\n\r\n"
            )
            .as_bytes(),
        );
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    }
    // ...and requests to an allowed host from copies of curl at paths nobody lists.
    let dir = TempDir::new("junk-bins");
    let url = format!("http://real.test:{port}/");
    for i in 0..JUNK_BINARIES {
        let copy = dir.path().join(format!("curl-{i}"));
        std::fs::copy("/usr/bin/curl", &copy).unwrap();
        let (_, out, err) = run(Command::new(&copy)
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "10",
                "-x",
            ])
            .arg(sluice.proxy_url())
            .arg(&url));
        assert_eq!(out, "403", "{err}");
    }
    // Then the real traffic: an exactly named host and one a wildcard allows, from curl.
    for u in [url.clone(), format!("http://a.wild.test:{port}/")] {
        let (_, out, err) = run(Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "10",
                "-x",
            ])
            .arg(sluice.proxy_url())
            .arg(&u));
        assert_eq!(out, "200", "{u}: {err}\n{}", sluice.stderr());
    }
    let (status, text) = openmetrics(metrics);
    assert_eq!(status, 200);
    let s = parse(&text);
    let by_host = "sluice_decisions_by_host_total";
    let by_binary = "sluice_decisions_by_binary_total";
    let v = |name: &str, labels: &[(&str, &str)]| value(&s, name, labels);
    // The real hosts and curl have their own series.
    for host in ["real.test", "a.wild.test"] {
        assert_eq!(
            v(
                by_host,
                &[("kind", "request"), ("decision", "allowed"), ("host", host)]
            ),
            1.0,
            "{host}:\n{text}"
        );
    }
    let curl = realpath("/usr/bin/curl");
    assert_eq!(
        v(
            by_binary,
            &[
                ("kind", "request"),
                ("decision", "allowed"),
                ("binary", &curl)
            ]
        ),
        2.0,
        "{text}"
    );
    // The junk counts, every attempt, under one value; none has a series of its own.
    assert_eq!(
        v(
            by_host,
            &[
                ("kind", "connection"),
                ("decision", "denied"),
                ("host", "_unlisted")
            ]
        ),
        JUNK_HOSTS as f64,
        "{text}"
    );
    assert_eq!(
        v(
            by_host,
            &[
                ("kind", "request"),
                ("decision", "denied"),
                ("host", "real.test")
            ]
        ),
        JUNK_BINARIES as f64,
        "{text}"
    );
    assert!(
        !text.contains("evil.test") && !text.contains("curl-"),
        "{text}"
    );
    assert!(
        !s.iter().any(|x| x.labels.values().any(|l| l == "_other")),
        "{text}"
    );
    // Every host and binary series together still count each audit event once.
    let events = sluice.events();
    let mut from_log: BTreeMap<(&str, String), f64> = BTreeMap::new();
    for e in &events {
        let kind = match (class(e), e["activity_id"].as_u64()) {
            (4001, Some(1)) => "connection",
            (4002, _) => "request",
            _ => continue,
        };
        let decision = if e["action_id"] == 2 {
            "denied"
        } else {
            "allowed"
        };
        *from_log.entry((kind, decision.to_string())).or_default() += 1.0;
    }
    for family in [by_host, by_binary] {
        let mut from_metrics: BTreeMap<(&str, String), f64> = BTreeMap::new();
        for x in s.iter().filter(|x| x.name == family) {
            let kind = if x.labels["kind"] == "connection" {
                "connection"
            } else {
                "request"
            };
            *from_metrics
                .entry((kind, x.labels["decision"].clone()))
                .or_default() += x.value;
        }
        assert_eq!(
            from_metrics, from_log,
            "{family} and the audit log disagree"
        );
    }
    assert_eq!(
        from_log.get(&("connection", "denied".to_string())).copied(),
        Some(JUNK_HOSTS as f64)
    );
}
