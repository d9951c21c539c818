//! What idle connections cost sluice in threads: a burst of connections, each identified when
//! accepted, then held idle while their callers are re-checked periodically, leaves sluice
//! with a bounded number of threads (its workers, a few for blocking work, and its own fixed
//! ones), not one per lookup that ever ran at once. Real processes: sluice, a Python client
//! holding the tunnels, a TCP origin.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{Sluice, python};

/// Opens `n` CONNECT tunnels at once (one thread each), prints how many got `200`, then holds
/// them until its stdin closes.
const CLIENT: &str = r#"
import socket, sys, threading
host, port, target, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
held, lock = [], threading.Lock()
def one():
    s = socket.create_connection((host, port))
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b: break
        head += b
    with lock: held.append((s, head.startswith(b"HTTP/1.1 200")))
ts = [threading.Thread(target=one) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print(sum(1 for _, ok in held if ok), flush=True)
sys.stdin.read()
"#;

fn threads_of(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn idle_tunnels_rechecked_periodically_keep_sluice_s_threads_bounded() {
    let origin = HttpOrigin::start();
    let py = python();
    let policy = format!(
        "version: 1\nnetwork_policies:\n  plain:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}}}\n    binaries:\n      - path: {py}\n",
        origin.port()
    );
    let sluice = Sluice::start(
        &policy,
        &[
            "--allow-loopback-upstream",
            "--caller-recheck-interval",
            "300ms",
        ],
    );
    let n = 300;
    let mut client = Command::new(&py)
        .arg("-c")
        .arg(CLIENT)
        .arg(sluice.addr().ip().to_string())
        .arg(sluice.addr().port().to_string())
        .arg(format!("127.0.0.1:{}", origin.port()))
        .arg(n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(client.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), n.to_string(), "not every tunnel was admitted");
    // Idle for longer than an idle blocking thread is kept (10 s), with every tunnel re-checked
    // about three times a second meanwhile.
    std::thread::sleep(Duration::from_secs(12));
    let threads = threads_of(sluice.pid());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The workers (one per core), at most 4 blocking threads, and sluice's own: main, the
    // audit writer, the re-check thread, and room for a few more.
    let bound = cores + 4 + 6;
    assert!(
        threads <= bound,
        "{threads} threads with {n} idle tunnels (at most {bound} expected)"
    );
    client.stdin.take().unwrap().write_all(b"").unwrap();
    let _ = client.kill();
    let _ = client.wait();
}
