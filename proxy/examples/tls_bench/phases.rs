//! `BENCH_ONLY=new`: new TLS connections only, timed phase by phase from the client, in
//! alternating rounds (`BENCH_ROUNDS`, default 5) of direct, sluice and, when `SLUICE_BIN_B`
//! names a second build, that build (`sluice-b`), so that two builds are compared under the
//! same load of a shared machine. Each round starts its own sluice (so that only one runs at
//! a time: a second one, another child of this process, would be read by every lookup). Each connection: TCP connect, `CONNECT` until its `200`,
//! the TLS handshake, one GET with the credential placeholder until its response has been
//! read; the row gives each phase's p50 and the connections per second.

use std::net::SocketAddr;
use std::time::Instant;

use tokio::io::BufReader;
use tokio::net::TcpStream;

use rustls::pki_types::ServerName;

use super::{Leg, cpu_us, get, pct, tunnel};

/// Microseconds of each phase of one connection.
#[derive(Default)]
struct Phases {
    tcp: Vec<f64>,
    connect: Vec<f64>,
    tls: Vec<f64>,
    request: Vec<f64>,
    total: Vec<f64>,
}

async fn one(p: &Leg, origin: SocketAddr, ph: &mut Phases) {
    let us = |t: Instant| t.elapsed().as_secs_f64() * 1e6;
    let t0 = Instant::now();
    let mut t = Instant::now();
    let mut tcp = TcpStream::connect(p.proxy.unwrap_or(origin)).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    ph.tcp.push(us(t));
    t = Instant::now();
    if p.proxy.is_some() {
        tunnel(&mut tcp, origin, &p.name).await;
    }
    ph.connect.push(us(t));
    t = Instant::now();
    let name = ServerName::IpAddress(origin.ip().into());
    let tls = p.connector.connect(name, tcp).await.unwrap();
    ph.tls.push(us(t));
    let mut c = BufReader::with_capacity(256 * 1024, tls);
    t = Instant::now();
    get(&mut c, origin, "/1k").await;
    ph.request.push(us(t));
    ph.total.push(us(t0));
}

/// One round of `n` new connections on `p`, printed as one row; returns the rate.
pub async fn round(r: usize, p: &Leg, origin: SocketAddr, n: usize, direct: Option<f64>) -> f64 {
    let mut ph = Phases::default();
    // A few first, unmeasured: the proxy's leaf, pool and caches warm.
    for _ in 0..20 {
        one(p, origin, &mut Phases::default()).await;
    }
    let cpu_before = p.pid.and_then(cpu_us);
    let t = Instant::now();
    for _ in 0..n {
        one(p, origin, &mut ph).await;
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    let cpu = cpu_before.zip(p.pid.and_then(cpu_us)).map_or_else(
        || "-".to_string(),
        |(b, a)| format!("{:.0}", (a - b) / n as f64),
    );
    for v in [
        &mut ph.tcp,
        &mut ph.connect,
        &mut ph.tls,
        &mut ph.request,
        &mut ph.total,
    ] {
        v.sort_by(f64::total_cmp);
    }
    println!(
        "| {r} | {} | {rate:.0} ({:.2}) | {cpu} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
        p.name,
        rate / direct.unwrap_or(rate),
        pct(&ph.tcp, 0.5),
        pct(&ph.connect, 0.5),
        pct(&ph.tls, 0.5),
        pct(&ph.request, 0.5),
        pct(&ph.total, 0.5),
    );
    rate
}

pub fn header(n: usize, rounds: usize) {
    println!(
        "new TLS connections, {n} sequential per round, {rounds} rounds alternating; p50 µs per phase"
    );
    println!(
        "| round | path | conns/s (ratio) | proxy CPU µs/conn | tcp | CONNECT→200 | TLS | GET | total |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
}
