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

use sluice_e2e::proxy::{Sluice, run};
use sluice_e2e::scrape::metrics_addr;

/// Connections the attacker keeps open at all times (many more than the listener serves).
const HELD: usize = 150;

/// An answer counts as prompt within this (a scrape on an idle machine takes milliseconds;
/// a probe's default timeout is one second, Prometheus's scrape timeout ten).
const PROMPT: Duration = Duration::from_secs(2);

/// `HELD` connections to `addr`: half never send a byte, half send a request head one byte
/// every 200 ms and never finish it. Each one sluice closes is opened again at once, until
/// the returned flag is cleared. Counts the reopenings.
fn hold_connections(addr: SocketAddr) -> (Arc<AtomicBool>, Arc<AtomicUsize>) {
    let running = Arc::new(AtomicBool::new(true));
    let reopened = Arc::new(AtomicUsize::new(0));
    let (flag, count) = (Arc::clone(&running), Arc::clone(&reopened));
    // `None` when the connection could not be made; tried again on the next round.
    let open = move |slow: bool| -> Option<TcpStream> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
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
            "-s",
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
    (status.parse().unwrap_or(0), body.to_string(), took)
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
            ("/metrics", "# EOF\n"),
            ("/readyz", "ready\n"),
            ("/healthz", "ok\n"),
        ] {
            let (status, body, took) = timed_get(addr, path);
            assert_eq!(
                status, 200,
                "{path} while {HELD} connections are held: {body}"
            );
            assert!(body.ends_with(expect), "{path}: {body}");
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
    // The slow heads were cut off (and reopened by the attacker): none is held for ever.
    assert!(
        reopened.load(Ordering::SeqCst) >= HELD / 2,
        "only {} of the held connections were closed by sluice",
        reopened.load(Ordering::SeqCst)
    );
}
