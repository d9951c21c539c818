//! TLS-interception benchmark: keep-alive 1 KiB HTTPS requests (HTTP/1.1) at concurrency 1 and
//! 64, new TLS connections per second, and a 100 MiB download, through each proxy terminating
//! TLS, against the same local HTTPS origin reached directly, all in one run. Every request
//! carries a credential placeholder (`Authorization: Bearer openshell:resolve:env:BENCH_API_KEY`)
//! that sluice swaps for the secret bound to the origin (other proxies pass it through). For a
//! proxy whose pid is known, the c=64 row also gives its CPU time (user + system, from
//! `/proc/<pid>/stat`) per request, with the audit log on.
//!
//! `tls_bench make-certs DIR` writes an origin CA and leaf (`origin-ca.pem`, `origin-cert.pem`,
//! `origin-key.pem`), a CA for other intercepting proxies (`proxy-ca.pem`,
//! `proxy-ca-key.pem`) and a leaf it signed for `tls_bench floor DIR ADDR` (`floor.rs`: the
//! least a TLS-terminating relay on this stack does, as a comparison proxy). `tls_bench` then measures direct and sluice (started from `SLUICE_BIN`,
//! default next to this example), plus each `name=ADDR=CA_FILE` in `BENCH_COMPARE`, with the
//! origin certificates from `BENCH_ORIGIN_DIR` (made on the spot when unset). A fourth field,
//! `=PID`, also measures that proxy's memory per idle intercepted connection (`BENCH_IDLE`
//! connections, comma-separated, default 1000, read after they have been idle
//! `BENCH_IDLE_HOLD` seconds, default 15; `BENCH_IDLE_TRACE=1` prints every second's
//! reading). `BENCH_ONLY=idle` skips every
//! throughput row and measures only that idle memory (sluice, plus each comparison proxy with a
//! pid); `BENCH_ONLY=c64` only the keep-alive c=64 row of each proxy with a pid (its requests per
//! second and CPU per request).
//! `scripts/bench-compare` runs it with Squid (ssl-bump) and mitmproxy.
//!
//! HTTP/2 rows (`h2.rs`): kept-alive 1 KiB GETs and gRPC unary calls over h2 at c=64, against an
//! h2 origin, for direct and sluice (Squid does not speak HTTP/2 to its clients; other proxies
//! are not measured over h2).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stdout)]

mod floor;
mod h2;
mod phases;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

const BIG: u64 = 100 << 20;

/// The placeholder every request carries; sluice binds it to the origin.
const PLACEHOLDER: &str = "openshell:resolve:env:BENCH_API_KEY";

/// CPU time (user + system) of `pid` so far, in microseconds (`/proc` counts in 1/100 s).
fn cpu_us(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) * 10_000.0)
}

fn make_certs(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let ca = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem(), Issuer::new(params, key))
    };
    let (origin_ca, _, issuer) = ca("bench origin CA");
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    params.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("origin-ca.pem"), origin_ca).unwrap();
    std::fs::write(dir.join("origin-cert.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.join("origin-key.pem"), key.serialize_pem()).unwrap();
    let (proxy_ca, proxy_key, proxy_issuer) = ca("bench proxy CA");
    std::fs::write(dir.join("proxy-ca.pem"), proxy_ca).unwrap();
    std::fs::write(dir.join("proxy-ca-key.pem"), proxy_key).unwrap();
    // The floor relay's leaf (`floor.rs`), as an intercepting proxy would mint it.
    let key = KeyPair::generate().unwrap();
    let floor = params.signed_by(&key, &proxy_issuer).unwrap();
    std::fs::write(dir.join("floor-cert.pem"), floor.pem()).unwrap();
    std::fs::write(dir.join("floor-key.pem"), key.serialize_pem()).unwrap();
}

/// The origins' TLS side: the origin certificate made by `make-certs`, offering `alpn` only.
fn origin_acceptor(dir: &Path, alpn: &[u8]) -> TlsAcceptor {
    acceptor(dir, "origin", alpn)
}

/// A TLS server side with `<name>-cert.pem` and `<name>-key.pem` from `dir`, offering `alpn`.
fn acceptor(dir: &Path, name: &str, alpn: &[u8]) -> TlsAcceptor {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(dir.join(format!("{name}-cert.pem")))
            .unwrap()
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{name}-key.pem"))).unwrap();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    TlsAcceptor::from(Arc::new(config))
}

/// The origin: HTTP/1.1 keep-alive over TLS; `/big` is 100 MiB, anything else 1 KiB.
async fn start_origin(dir: &Path) -> SocketAddr {
    let acceptor = origin_acceptor(dir, b"http/1.1");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut s = BufReader::new(tls);
                let small = vec![b'x'; 1024];
                let block = vec![b'y'; 256 * 1024];
                loop {
                    let mut line = String::new();
                    let mut path = String::new();
                    loop {
                        line.clear();
                        if s.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if path.is_empty() {
                            path = line.split(' ').nth(1).unwrap_or("/").to_string();
                        } else if line == "\r\n" {
                            break;
                        }
                    }
                    let len = if path == "/big" { BIG } else { 1024 };
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
                    if s.get_mut().write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    if len == 1024 {
                        let _ = s.get_mut().write_all(&small).await;
                    } else {
                        let mut left = len;
                        while left > 0 {
                            let c = left.min(block.len() as u64) as usize;
                            if s.get_mut().write_all(&block[..c]).await.is_err() {
                                return;
                            }
                            left -= c as u64;
                        }
                    }
                    let _ = s.get_mut().flush().await;
                }
            });
        }
    });
    addr
}

/// One way to reach the origin: directly or through a proxy, with the CA to trust.
#[derive(Clone)]
struct Leg {
    name: String,
    proxy: Option<SocketAddr>,
    connector: TlsConnector,
    /// The same trust, offering only `h2`; `None`: not measured over HTTP/2.
    h2: Option<TlsConnector>,
    /// The proxy's process, for its memory.
    pid: Option<u32>,
}

fn connector(ca: &Path) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsConnector::from(Arc::new(config))
}

type Conn = BufReader<TlsStream<TcpStream>>;

/// Asks the proxy on `tcp` for a tunnel to `origin` and reads its `200` (`name`: the proxy).
async fn tunnel(tcp: &mut TcpStream, origin: SocketAddr, name: &str) {
    tcp.write_all(format!("CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200"),
        "{name}: {}",
        String::from_utf8_lossy(&head)
    );
}

async fn connect(p: &Leg, origin: SocketAddr) -> Conn {
    connect_with(p, origin, 256 * 1024).await
}

async fn connect_with(p: &Leg, origin: SocketAddr, buffer: usize) -> Conn {
    let mut tcp = TcpStream::connect(p.proxy.unwrap_or(origin)).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    if p.proxy.is_some() {
        tunnel(&mut tcp, origin, &p.name).await;
    }
    let name = ServerName::IpAddress(origin.ip().into());
    BufReader::with_capacity(
        buffer,
        p.connector.connect(name, tcp).await.unwrap_or_else(|e| {
            panic!("{}: TLS handshake: {e}", p.name);
        }),
    )
}

/// One GET on a kept-alive connection; returns the body length.
async fn get(c: &mut Conn, origin: SocketAddr, path: &str) -> u64 {
    c.get_mut()
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {origin}\r\nAuthorization: Bearer {PLACEHOLDER}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut len = 0u64;
    let mut chunked = false;
    let mut line = String::new();
    let mut status = true;
    loop {
        line.clear();
        assert!(c.read_line(&mut line).await.unwrap() > 0, "closed mid-head");
        if status {
            assert!(line.starts_with("HTTP/1.1 200"), "{line}");
            status = false;
        } else if line == "\r\n" {
            break;
        } else if let Some((n, v)) = line.split_once(':')
            && n.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap();
        } else if let Some((n, v)) = line.split_once(':')
            && n.eq_ignore_ascii_case("transfer-encoding")
        {
            chunked = v.trim().eq_ignore_ascii_case("chunked");
        }
    }
    let mut buf = vec![0u8; 256 * 1024];
    if !chunked {
        skip(c, &mut buf, len).await;
        return len;
    }
    // A body sluice rewrote on its way (the secret scrubber) comes chunked.
    let mut total = 0u64;
    loop {
        line.clear();
        assert!(c.read_line(&mut line).await.unwrap() > 0, "closed mid-body");
        let size = u64::from_str_radix(line.trim().split(';').next().unwrap(), 16).unwrap();
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                line.clear();
                assert!(c.read_line(&mut line).await.unwrap() > 0, "closed mid-body");
                if line == "\r\n" {
                    return total;
                }
            }
        }
        skip(c, &mut buf, size + 2).await;
        total += size;
    }
}

/// Reads and drops `left` bytes.
async fn skip(c: &mut Conn, buf: &mut [u8], mut left: u64) {
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = c.read(&mut buf[..want]).await.unwrap();
        assert!(n > 0, "closed mid-body");
        left -= n as u64;
    }
}

struct KeepAlive {
    rps: f64,
    p50: f64,
    p99: f64,
    /// The proxy's CPU µs per request, when its pid is known.
    cpu: Option<f64>,
}

async fn keep_alive(p: &Leg, origin: SocketAddr, conc: usize, dur: Duration) -> KeepAlive {
    let mut tasks = Vec::new();
    let start = Instant::now() + Duration::from_millis(300);
    for _ in 0..conc {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = connect(&p, origin).await;
            get(&mut c, origin, "/warm").await;
            tokio::time::sleep_until(start.into()).await;
            let mut lat = Vec::new();
            while start.elapsed() < dur {
                let t = Instant::now();
                get(&mut c, origin, "/1k").await;
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            lat
        }));
    }
    tokio::time::sleep_until(start.into()).await;
    let cpu_before = p.pid.and_then(cpu_us);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let cpu_after = p.pid.and_then(cpu_us);
    all.sort_by(f64::total_cmp);
    KeepAlive {
        rps: all.len() as f64 / dur.as_secs_f64(),
        p50: pct(&all, 0.5),
        p99: pct(&all, 0.99),
        cpu: cpu_before
            .zip(cpu_after)
            .map(|(b, a)| (a - b) / all.len() as f64),
    }
}

fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn new_conns(p: &Leg, origin: SocketAddr, n: usize) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        let mut c = connect(p, origin).await;
        get(&mut c, origin, "/1k").await;
    }
    n as f64 / t.elapsed().as_secs_f64()
}

async fn download(p: &Leg, origin: SocketAddr) -> f64 {
    let mut c = connect(p, origin).await;
    let t = Instant::now();
    assert_eq!(get(&mut c, origin, "/big").await, BIG);
    BIG as f64 / t.elapsed().as_secs_f64() / (1024.0 * 1024.0)
}

/// Resident memory of `pid` in KiB, and its thread count.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("Threads:"))
}

/// Memory per idle intercepted connection for every leg whose proxy pid is known.
async fn idle_rows(paths: &[Leg], origin: SocketAddr) {
    let idle: Vec<usize> = std::env::var("BENCH_IDLE")
        .unwrap_or_else(|_| "1000".into())
        .split(',')
        .filter_map(|n| n.parse().ok())
        .collect();
    let hold = Duration::from_secs(
        std::env::var("BENCH_IDLE_HOLD")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(15),
    );
    for p in paths.iter().filter(|p| p.pid.is_some()) {
        for &n in &idle {
            let per = idle_kib_per_conn(p, origin, p.pid.unwrap_or(0), n, hold).await;
            match per {
                Some((k, threads)) => println!(
                    "{}: {n} idle intercepted connections, {k:.1} KiB each (threads {} -> {})",
                    p.name, threads.0, threads.1
                ),
                None => println!(
                    "{}: could not hold {n} idle intercepted connections",
                    p.name
                ),
            }
        }
    }
}

/// Memory per idle intercepted connection: `n` connections opened (CONNECT, TLS, one request,
/// so both legs are up), left idle for `hold`, and the proxy's RSS growth divided by `n`.
/// `None` when the proxy could not hold them all.
///
/// Measured the same way for every proxy. One connection is made and closed first, so that
/// what the first connection of a run pays once (code paged in, the origin's leaf certificate,
/// TLS configuration) is not divided among the idle ones. RSS is read after the connections
/// have been idle for `hold` (default 15 s), not as soon as the last one is up: connections
/// are opened 50 at a time for several seconds, and a proxy's state right after such a burst
/// (threads started for it, upstream connections still pooled) is the burst's, not what an
/// idle connection holds. The growth is sampled every second and the last sample counts.
async fn idle_kib_per_conn(
    p: &Leg,
    origin: SocketAddr,
    pid: u32,
    n: usize,
    hold: Duration,
) -> Option<(f64, (u64, u64))> {
    {
        let mut c = connect_with(p, origin, 4096).await;
        get(&mut c, origin, "/1k").await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (before, threads_before) = rss_kib(pid);
    let mut held = Vec::with_capacity(n);
    for batch in 0..n.div_ceil(50) {
        let mut tasks = Vec::new();
        for _ in batch * 50..((batch + 1) * 50).min(n) {
            let p = p.clone();
            tasks.push(tokio::spawn(async move {
                let mut c = connect_with(&p, origin, 4096).await;
                get(&mut c, origin, "/1k").await;
                c
            }));
        }
        for t in tasks {
            held.push(t.await.ok()?);
        }
    }
    let trace = std::env::var("BENCH_IDLE_TRACE").is_ok();
    let started = Instant::now();
    let mut after = rss_kib(pid);
    while started.elapsed() < hold {
        tokio::time::sleep(Duration::from_secs(1)).await;
        after = rss_kib(pid);
        if trace {
            println!(
                "{}: idle {:.0} s: {:.1} KiB each, {} threads, CPU {:.0} ms so far",
                p.name,
                started.elapsed().as_secs_f64(),
                after.0.saturating_sub(before) as f64 / n as f64,
                after.1,
                cpu_us(pid).unwrap_or(0.0) / 1000.0
            );
        }
    }
    drop(held);
    tokio::time::sleep(Duration::from_millis(500)).await;
    Some((
        after.0.saturating_sub(before) as f64 / n as f64,
        (threads_before, after.1),
    ))
}

fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let l = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: l.maximum,
            maximum: l.maximum,
        },
    );
}

fn start_sluice(
    dir: &Path,
    origins: &[SocketAddr],
    bin_var: &str,
) -> (std::process::Child, SocketAddr, PathBuf) {
    let bin = std::env::var(bin_var).unwrap_or_else(|_| {
        let exe = std::env::current_exe().unwrap();
        exe.parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("sluice")
            .to_string_lossy()
            .into_owned()
    });
    let me = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
    // A second build (`SLUICE_BIN_B`) keeps its files apart.
    let dir = &dir.join(bin_var);
    std::fs::create_dir_all(dir).unwrap();
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        format!(
            "version: 1\nnetwork_policies:\n  bench:\n    endpoints:\n{}    binaries:\n      - path: {}\n",
            origins.iter().map(|o| format!("      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}\n", o.port())).collect::<String>(),
            me.display()
        ),
    )
    .unwrap();
    let providers = dir.join("providers.yaml");
    std::fs::write(
        &providers,
        format!(
            "id: bench-api\ncredentials:\n  - name: api-key\n    env_vars: [BENCH_API_KEY]\n    auth_style: bearer\nendpoints:\n{}",
            origins.iter().map(|o| format!("  - {{host: 127.0.0.1, port: {}}}\n", o.port())).collect::<String>()
        ),
    )
    .unwrap();
    let ca_dir = dir.join("sluice-ca");
    let mut child = Command::new(&bin)
        .env("BENCH_API_KEY", "bench-secret-0123456789abcdef")
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--allow-loopback-upstream",
            "--max-connections",
            "20000",
            // One client measures the whole proxy: no per-caller share.
            "--max-connections-per-caller",
            "20000",
            "--max-new-connections-per-caller-per-sec",
            "1000000",
        ])
        .arg("--policy")
        .arg(&policy)
        .arg("--providers")
        .arg(&providers)
        .arg("--ca-dir")
        .arg(&ca_dir)
        .arg("--upstream-ca")
        .arg(dir.join("../origin-ca.pem"))
        .arg("--audit-log")
        .arg(dir.join("audit.jsonl"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let addr: SocketAddr = loop {
        let mut line = String::new();
        assert!(
            std::io::BufRead::read_line(&mut err, &mut line).unwrap() > 0,
            "sluice exited"
        );
        if let Some(rest) = line.strip_prefix("sluice: listening on ") {
            break rest.split(' ').next().unwrap().parse().unwrap();
        }
    };
    // Keep sluice's stderr (human audit lines, warnings) next to its audit log.
    let mut log = std::fs::File::create(dir.join("sluice.stderr")).unwrap();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut err, &mut log);
    });
    (child, addr, ca_dir.join("ca.pem"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("make-certs") {
        make_certs(Path::new(args.get(2).expect("make-certs DIR")));
        return;
    }
    if args.get(1).map(String::as_str) == Some("floor") {
        floor::run(
            Path::new(args.get(2).expect("floor DIR ADDR")),
            args.get(3).expect("floor DIR ADDR"),
        );
        return;
    }
    // Certificates, and each sluice's policy, CA and audit log (hundreds of MB per run), go
    // under `dir`; one made here is removed at the end.
    let made = std::env::var_os("BENCH_ORIGIN_DIR").is_none();
    let dir = std::env::var("BENCH_ORIGIN_DIR").map_or_else(
        |_| {
            let d = std::env::temp_dir().join(format!("sluice-tls-bench-{}", std::process::id()));
            make_certs(&d);
            d
        },
        PathBuf::from,
    );
    let secs: u64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let conns: usize = std::env::var("BENCH_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    raise_fd_limit();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let origin = start_origin(&dir).await;
        let h2_origin = h2::start_origin(&dir).await;
        let (mut child, sluice, sluice_ca) = start_sluice(&dir, &[origin, h2_origin], "SLUICE_BIN");
        let mut paths = vec![
            Leg {
                name: "direct".into(),
                proxy: None,
                connector: connector(&dir.join("origin-ca.pem")),
                h2: Some(h2::connector(&dir.join("origin-ca.pem"))),
                pid: None,
            },
            Leg {
                name: "sluice".into(),
                proxy: Some(sluice),
                connector: connector(&sluice_ca),
                h2: Some(h2::connector(&sluice_ca)),
                pid: Some(child.id()),
            },
        ];
        for item in std::env::var("BENCH_COMPARE").unwrap_or_default().split(',') {
            let parts: Vec<&str> = item.split('=').collect();
            if let [name, addr, ca, ref rest @ ..] = parts[..] {
                paths.push(Leg {
                    name: name.into(),
                    proxy: Some(addr.parse().unwrap()),
                    connector: connector(Path::new(ca)),
                    h2: None,
                    pid: rest.first().and_then(|p| p.parse().ok()),
                });
            }
        }
        if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "new") {
            let _ = child.kill();
            let _ = child.wait();
            let rounds: usize = std::env::var("BENCH_ROUNDS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(5);
            let mut bins = vec![("sluice", "SLUICE_BIN")];
            if std::env::var_os("SLUICE_BIN_B").is_some() {
                bins.push(("sluice-b", "SLUICE_BIN_B"));
            }
            phases::header(conns, rounds);
            for r in 0..rounds {
                let direct = phases::round(r, &paths[0], origin, conns, None).await;
                for (name, var) in &bins {
                    let (mut c, addr, ca) = start_sluice(&dir, &[origin, h2_origin], var);
                    let leg = Leg {
                        name: (*name).into(),
                        proxy: Some(addr),
                        connector: connector(&ca),
                        h2: None,
                        pid: Some(c.id()),
                    };
                    phases::round(r, &leg, origin, conns, Some(direct)).await;
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
            return;
        }
        let dur = Duration::from_secs(secs);
        let idle_only = std::env::var("BENCH_ONLY").is_ok_and(|v| v == "idle");
        if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "c64") {
            // The proxies' keep-alive c=64 row only (per-request CPU work).
            for p in paths.iter().filter(|p| p.pid.is_some()) {
                println!("{} pid {} c=64 start", p.name, p.pid.unwrap_or(0));
                let many = keep_alive(p, origin, 64, dur).await;
                let cpu = many.cpu.map_or_else(|| "-".to_string(), |c| format!("{c:.1}"));
                println!(
                    "{} c=64 req/s {:.0} p50 {:.0} µs p99 {:.0} µs proxy CPU µs/req {cpu}",
                    p.name, many.rps, many.p50, many.p99
                );
            }
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        let mut rows = Vec::new();
        for p in paths.iter().filter(|_| !idle_only) {
            let one = keep_alive(p, origin, 1, dur).await;
            let many = keep_alive(p, origin, 64, dur).await;
            let nc = new_conns(p, origin, conns).await;
            let dl = download(p, origin).await;
            rows.push((p.name.clone(), one, many, nc, dl));
        }
        if idle_only {
            idle_rows(&paths, origin).await;
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        let base = (rows[0].1.rps, rows[0].2.rps, rows[0].3, rows[0].4, rows[0].1.p50);
        println!(
            "TLS interception benchmark (HTTP/1.1 keep-alive 1 KiB GETs for {secs} s each; {conns} sequential new connections; one 100 MiB download)"
        );
        println!(
            "| path | c=1 req/s (ratio) | c=1 p50 / p99 µs | c=64 req/s (ratio) | c=64 p50 / p99 µs | proxy CPU µs/req at c=64 | new TLS conns/s (ratio) | 100 MiB MiB/s (ratio) |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for (name, one, many, nc, dl) in &rows {
            println!(
                "| {name} | {:.0} ({:.2}) | {:.0} / {:.0} | {:.0} ({:.2}) | {:.0} / {:.0} | {} | {:.0} ({:.2}) | {:.0} ({:.2}) |",
                one.rps,
                one.rps / base.0,
                one.p50,
                one.p99,
                many.rps,
                many.rps / base.1,
                many.p50,
                many.p99,
                many.cpu.map_or_else(|| "-".to_string(), |c| format!("{c:.0}")),
                nc,
                nc / base.2,
                dl,
                dl / base.3
            );
        }
        for (name, one, ..) in rows.iter().skip(1) {
            println!("added p50 at c=1, {name}: {:.0} µs", one.p50 - base.4);
        }
        idle_rows(&paths, origin).await;
        println!();
        println!(
            "HTTP/2 (kept-alive h2 connections, one request at a time on each, c=64, {secs} s each; the gRPC call is a unary POST of one 5-byte-prefixed 100-byte message, echoed, trailers grpc-status: 0)"
        );
        println!("| path | h2 GET req/s (ratio) | h2 p50 / p99 µs | proxy CPU µs/req | gRPC unary calls/s (ratio) | gRPC p50 / p99 µs | proxy CPU µs/call |");
        println!("|---|---|---|---|---|---|---|");
        let mut base: Option<(f64, f64)> = None;
        for p in &paths {
            let Some(c) = &p.h2 else {
                println!("| {} | not measured: no HTTP/2 to clients | | | | | |", p.name);
                continue;
            };
            let get = h2::keep_alive(p.proxy, c, p.pid, h2_origin, 64, dur, false).await;
            let grpc = h2::keep_alive(p.proxy, c, p.pid, h2_origin, 64, dur, true).await;
            let (bg, bc) = *base.get_or_insert((get.rps, grpc.rps));
            let cpu = |k: &KeepAlive| k.cpu.map_or_else(|| "-".to_string(), |c| format!("{c:.0}"));
            println!(
                "| {} | {:.0} ({:.2}) | {:.0} / {:.0} | {} | {:.0} ({:.2}) | {:.0} / {:.0} | {} |",
                p.name,
                get.rps,
                get.rps / bg,
                get.p50,
                get.p99,
                cpu(&get),
                grpc.rps,
                grpc.rps / bc,
                grpc.p50,
                grpc.p99,
                cpu(&grpc)
            );
        }
        let _ = child.kill();
        let _ = child.wait();
    });
    if made {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
