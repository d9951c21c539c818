//! Benchmark of sluice's explicit proxy against a direct connection, in one run on this
//! machine: CONNECT relay throughput and new-connection rate (each proxied connection pays
//! for caller identification, the policy decision, the destination check and the dial).
//!
//! `cargo build --release -p sluice && cargo run --release -p sluice-e2e --example proxy_bench`
//! (`SLUICE_BIN` overrides the binary; `BENCH_MIB` and `BENCH_CONNS` the sizes).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A sink: `D<n>\n` streams n bytes back; `P` answers `p` (a ping), then closes.
fn start_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for s in listener.incoming().flatten() {
            thread::spawn(move || {
                let _ = s.set_nodelay(true);
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return;
                }
                if let Some(n) = line
                    .trim()
                    .strip_prefix('D')
                    .and_then(|n| n.parse::<u64>().ok())
                {
                    let block = vec![7u8; 256 * 1024];
                    let mut left = n;
                    while left > 0 {
                        let c = left.min(block.len() as u64) as usize;
                        if w.write_all(&block[..c]).is_err() {
                            return;
                        }
                        left -= c as u64;
                    }
                } else {
                    let _ = w.write_all(b"p");
                }
            });
        }
    });
    addr
}

fn tunnel(proxy: Option<SocketAddr>, origin: SocketAddr) -> TcpStream {
    match proxy {
        None => {
            let s = TcpStream::connect(origin).unwrap();
            s.set_nodelay(true).unwrap();
            s
        }
        Some(p) => {
            let mut s = TcpStream::connect(p).unwrap();
            s.set_nodelay(true).unwrap();
            write!(s, "CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n").unwrap();
            // Read the answer's head byte by byte: proxies differ in its headers, and any
            // byte past it belongs to the tunnel.
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                s.read_exact(&mut b).unwrap();
                head.push(b[0]);
            }
            assert!(
                head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"),
                "{}",
                String::from_utf8_lossy(&head)
            );
            s
        }
    }
}

fn throughput(proxy: Option<SocketAddr>, origin: SocketAddr, bytes: u64) -> f64 {
    let mut s = tunnel(proxy, origin);
    let started = Instant::now();
    writeln!(s, "D{bytes}").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    while got < bytes {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "stream ended early");
        got += n as u64;
    }
    bytes as f64 / started.elapsed().as_secs_f64() / (1024.0 * 1024.0)
}

/// Latencies (µs) of `n` connections: connect, (CONNECT), one ping, close.
fn connections(proxy: Option<SocketAddr>, origin: SocketAddr, n: usize) -> (f64, Vec<f64>) {
    let started = Instant::now();
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut s = tunnel(proxy, origin);
        s.write_all(b"P\n").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    (rate, lat)
}

fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mib: u64 = std::env::var("BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let conns: usize = std::env::var("BENCH_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let bin = std::env::var("SLUICE_BIN").unwrap_or_else(|_| {
        let exe = std::env::current_exe().unwrap();
        // target/release/examples/proxy_bench → target/release/sluice
        exe.parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("sluice")
            .to_string_lossy()
            .into_owned()
    });
    let origin = start_origin();
    let me = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
    let dir = std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "version: 1\nnetwork_policies:\n  bench:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}}}\n    binaries:\n      - path: {}\n",
            origin.port(),
            me.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(&bin)
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--allow-loopback-upstream",
            "--log-format",
            "json",
            // One client measures the whole proxy: no per-caller rate.
            "--max-new-connections-per-caller-per-sec",
            "1000000",
        ])
        .arg("--policy")
        .arg(&policy)
        .arg("--audit-log")
        .arg(dir.join("audit.jsonl"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let proxy: SocketAddr = loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "sluice exited");
        if let Some(rest) = line.strip_prefix("sluice: listening on ") {
            break rest.split(' ').next().unwrap().parse().unwrap();
        }
    };
    // Drain stderr so sluice never blocks on it.
    thread::spawn(move || for _ in err.lines() {});
    thread::sleep(Duration::from_millis(200));

    // The proxies measured: sluice, and any named in BENCH_COMPARE (`name=addr,...`), all
    // against the direct path measured in the same run.
    let mut proxies: Vec<(String, SocketAddr)> = vec![("sluice".to_string(), proxy)];
    for item in std::env::var("BENCH_COMPARE")
        .unwrap_or_default()
        .split(',')
    {
        if let Some((name, addr)) = item.split_once('=') {
            let addr = addr
                .parse()
                .unwrap_or_else(|e| panic!("BENCH_COMPARE {item}: {e}"));
            proxies.push((name.to_string(), addr));
        }
    }
    let bytes = mib << 20;
    let measure = |proxy: Option<SocketAddr>| {
        throughput(proxy, origin, 64 << 20); // warm up
        let tput = median((0..3).map(|_| throughput(proxy, origin, bytes)).collect());
        let (rate, lat) = connections(proxy, origin, conns);
        (tput, rate, pct(&lat, 0.5), pct(&lat, 0.99))
    };
    let direct = measure(None);
    let rows: Vec<(String, (f64, f64, f64, f64))> = proxies
        .iter()
        .map(|(name, addr)| (name.clone(), measure(Some(*addr))))
        .collect();

    println!(
        "explicit proxy benchmark ({mib} MiB transfers, median of 3; {conns} sequential connections)"
    );
    println!(
        "| path | relay MiB/s | ratio | new conns/s | ratio | setup + first byte p50 / p99 (µs) |"
    );
    println!("|---|---|---|---|---|---|");
    for (name, m) in std::iter::once(("direct".to_string(), direct)).chain(rows) {
        println!(
            "| {name} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} / {:.0} |",
            m.0,
            m.0 / direct.0,
            m.1,
            m.1 / direct.1,
            m.2,
            m.3
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
