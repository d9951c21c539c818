//! One caller cannot take every slot: per-caller limits on concurrent connections and on new
//! connections per second (429 with a JSON body and an audit event, while other programs go
//! on), and tunnels the client never used closed after `--unused-tunnel-timeout`.
//!
//! The greedy caller is this test executable (raw sockets); the other program is curl.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use sluice_e2e::ocsf::{action, is_close, is_open};
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{Sluice, assert_events_valid, json_body, me, run, status_of};

fn policy(port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  local:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}}}\n    binaries:\n      - path: {}\n      - path: /usr/bin/curl\n",
        me()
    )
}

/// Opens a CONNECT tunnel to the origin and returns the socket and the answer's head (or the
/// whole answer when it is a refusal).
fn open_tunnel(sluice: &Sluice, port: u16) -> (TcpStream, String) {
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => answer.push(byte[0]),
            _ => break,
        }
    }
    let mut text = String::from_utf8_lossy(&answer).into_owned();
    if !text.starts_with("HTTP/1.1 200") {
        let mut rest = String::new();
        let _ = s.read_to_string(&mut rest);
        text.push_str(&rest);
    }
    (s, text)
}

/// Reads until `needle` arrives (true) or the stream ends or times out (false).
fn read_until(s: &mut TcpStream, needle: &str) -> bool {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(needle) {
        match s.read(&mut buf) {
            Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
    true
}

fn curl_through(sluice: &Sluice, origin: &HttpOrigin) -> (i32, String) {
    let (code, out, err) = run(Command::new("curl")
        .args(["-sS", "--max-time", "20", "-p", "-x", &sluice.proxy_url()])
        .arg(format!("http://127.0.0.1:{}/", origin.port())));
    (code, format!("{out}{err}"))
}

/// sluice allowing 20 connections, 5 per caller, and this test's 5 idle tunnels through it
/// (its whole share).
fn holding_its_share() -> (HttpOrigin, Sluice, Vec<TcpStream>) {
    let origin = HttpOrigin::start();
    let sluice = Sluice::start(
        &policy(origin.port()),
        &[
            "--allow-loopback-upstream",
            "--max-connections",
            "20",
            "--max-connections-per-caller",
            "5",
        ],
    );
    let idle: Vec<TcpStream> = (0..5)
        .map(|_| {
            let (s, answer) = open_tunnel(&sluice, origin.port());
            assert_eq!(status_of(&answer), 200, "{answer}");
            s
        })
        .collect();
    (origin, sluice, idle)
}

#[test]
fn one_caller_holding_its_share_of_idle_tunnels_gets_429_and_another_program_gets_through() {
    let (origin, sluice, idle) = holding_its_share();
    let (_, answer) = open_tunnel(&sluice, origin.port());
    assert_eq!(status_of(&answer), 429, "{answer}");
    let body = json_body(&answer);
    assert_eq!(body["error"], "caller_connection_limit", "{body}");
    assert_eq!(body["binary"], me());
    // Another program is not held back by this one's tunnels.
    let (code, out) = curl_through(&sluice, &origin);
    assert_eq!((code, out.as_str()), (0, "hello from origin\n"));
    let refused = sluice.wait_event("the 429", |e| is_open(e) && e["status_code"] == "429");
    assert_eq!(action(&refused), 2);
    assert_eq!(refused["actor"]["process"]["path"], me(), "{refused:#}");
    assert!(
        refused["status_detail"]
            .as_str()
            .unwrap()
            .contains("--max-connections-per-caller"),
        "{refused:#}"
    );
    // A slot given back is a slot to use again.
    drop(idle);
    std::thread::sleep(Duration::from_millis(300));
    let (_s, answer) = open_tunnel(&sluice, origin.port());
    assert_eq!(status_of(&answer), 200, "{answer}");
    assert_events_valid(&sluice);
}

#[test]
fn new_connections_per_second_are_limited_per_caller() {
    let origin = HttpOrigin::start();
    let sluice = Sluice::start(
        &policy(origin.port()),
        &[
            "--allow-loopback-upstream",
            "--max-new-connections-per-caller-per-sec",
            "5",
        ],
    );
    let started = Instant::now();
    let statuses: Vec<u16> = (0..12)
        .map(|_| status_of(&open_tunnel(&sluice, origin.port()).1))
        .collect();
    // Twelve in well under a second: the first five pass, the rest (bar one or two refilled
    // tokens) are refused.
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "too slow to test the rate"
    );
    assert!(statuses[..5].iter().all(|s| *s == 200), "{statuses:?}");
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert!(refused >= 5, "{statuses:?}");
    let (_, answer) = open_tunnel(&sluice, origin.port());
    if status_of(&answer) == 429 {
        assert_eq!(json_body(&answer)["error"], "caller_rate_limit");
    }
    let (code, out) = curl_through(&sluice, &origin);
    assert_eq!((code, out.as_str()), (0, "hello from origin\n"));
    // A second later the bucket has refilled.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(status_of(&open_tunnel(&sluice, origin.port()).1), 200);
    assert_events_valid(&sluice);
}

#[test]
fn a_tunnel_never_used_is_closed_after_the_unused_timeout_and_a_used_one_is_not() {
    let origin = HttpOrigin::start();
    let sluice = Sluice::start(
        &policy(origin.port()),
        &[
            "--allow-loopback-upstream",
            "--unused-tunnel-timeout",
            "500ms",
        ],
    );
    let (mut unused, answer) = open_tunnel(&sluice, origin.port());
    assert_eq!(status_of(&answer), 200, "{answer}");
    let (mut used, answer) = open_tunnel(&sluice, origin.port());
    assert_eq!(status_of(&answer), 200, "{answer}");
    let request = format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\r\n",
        origin.port()
    );
    used.write_all(request.as_bytes()).unwrap();
    assert!(read_until(&mut used, "hello from origin"));

    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = unused.read_to_end(&mut rest);
    let waited = started.elapsed();
    assert!(rest.is_empty(), "{rest:?}");
    assert!(waited < Duration::from_secs(3), "closed after {waited:?}");
    let close = sluice.wait_event("the unused tunnel's close", |e| {
        is_close(e) && e["status_detail"] == "unused tunnel timeout"
    });
    assert_eq!(close["actor"]["process"]["path"], me());

    // The used tunnel outlives the unused timeout.
    std::thread::sleep(Duration::from_millis(800));
    used.write_all(request.as_bytes()).unwrap();
    assert!(read_until(&mut used, "hello from origin"));
    assert_events_valid(&sluice);
}

/// Opens `sys.argv[2]` connections to port `sys.argv[1]` whose sockets a `sleep` child holds
/// too from before they connect (so sluice cannot tell which program calls: two holders with
/// different identities), sends nothing, prints after 2 s what each received first
/// (`|`-separated, `-` for nothing), and holds them until stdin closes.
const UNIDENTIFIABLE: &str = "import socket, subprocess, sys, time\n\
    socks = [socket.socket() for _ in range(int(sys.argv[2]))]\n\
    for s in socks: s.set_inheritable(True)\n\
    p = subprocess.Popen(['/usr/bin/sleep', '600'], pass_fds=[s.fileno() for s in socks], stdin=subprocess.DEVNULL)\n\
    time.sleep(0.3)\n\
    for s in socks: s.connect(('127.0.0.1', int(sys.argv[1])))\n\
    time.sleep(2)\n\
    got = []\n\
    for s in socks:\n\
    \x20   s.setblocking(False)\n\
    \x20   try: got.append(s.recv(4096)[:12].decode(errors='replace') or '-')\n\
    \x20   except BlockingIOError: got.append('-')\n\
    print('|'.join(got), flush=True)\n\
    sys.stdin.read()\n\
    p.kill()\n";

#[test]
fn connections_of_unidentifiable_callers_share_one_callers_share_of_slots() {
    use std::io::BufRead;
    let origin = HttpOrigin::start();
    let sluice = Sluice::start(
        &policy(origin.port()),
        &[
            "--allow-loopback-upstream",
            "--max-connections",
            "8",
            "--max-connections-per-caller",
            "3",
        ],
    );
    let mut flood = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(UNIDENTIFIABLE)
        .arg(sluice.addr().port().to_string())
        .arg("10")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(flood.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let got: Vec<&str> = line.trim().split('|').collect();
    assert_eq!(got.len(), 10, "{line}");
    // Three held (the per-caller share); the rest refused at once with 429 (a refused
    // connection lingers up to a second to be read, so the last may meet the global 503).
    let refused = got.iter().filter(|g| g.starts_with("HTTP/1.1 429")).count();
    let busy = got.iter().filter(|g| g.starts_with("HTTP/1.1 503")).count();
    let held = got.iter().filter(|g| **g == "-").count();
    assert_eq!(held, 3, "{line}\n{}", sluice.stderr());
    assert!(refused >= 5 && refused + busy == 7, "{line}");
    // The proxy still has room for a program it can identify.
    let (code, out) = curl_through(&sluice, &origin);
    assert_eq!(code, 0, "{out}\n{}", sluice.stderr());
    assert!(out.contains("hello from origin"), "{out}");
    drop(flood.stdin.take());
    let _ = flood.wait();
    let denials = sluice
        .events()
        .into_iter()
        .filter(|e| is_open(e) && action(e) == 2 && e["status_code"] == "429")
        .count();
    assert!(denials >= refused, "{:#?}", sluice.events());
    assert_events_valid(&sluice);
}

/// A caller past its share cannot take the others' slots either: connections it keeps open
/// after their 429 (silent, never closed) are not held for long in slots of the whole proxy,
/// and another program still gets through while they stay open.
#[test]
fn refused_connections_kept_open_do_not_take_the_other_programs_slots() {
    let (origin, sluice, idle) = holding_its_share();
    // Fifteen more, each answered 429 and then kept open without a byte more.
    let refused: Vec<TcpStream> = (0..15)
        .map(|_| {
            let mut s = TcpStream::connect(sluice.addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let port = origin.port();
            s.write_all(
                format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n")
                    .as_bytes(),
            )
            .unwrap();
            assert!(read_until(&mut s, "caller_connection_limit"));
            s
        })
        .collect();
    let (code, out) = curl_through(&sluice, &origin);
    assert_eq!(
        (code, out.as_str()),
        (0, "hello from origin\n"),
        "another program was refused while one caller's refused connections stayed open"
    );
    drop((idle, refused));
}
