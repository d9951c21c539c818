//! A pool of three sluice gateway replicas behind HAProxy (Debian's `haproxy`), the way a
//! fleet runs: HAProxy balances TCP connections round-robin and tells each replica the
//! client's address with a PROXY protocol v2 header; it health-checks each replica's
//! `/readyz`. The replicas share one tenants file, one operator CA and one TLS hop
//! certificate. Proven here: tenants by address (through the header), by password over the
//! TLS hop (curl and Python) and by client certificate each reach only their policy and get
//! only their secrets, audited under their name on whichever replica served them; clients
//! trust one CA for every replica; a reload reaches every replica; one replica is sent
//! SIGTERM mid-traffic and no request in flight fails.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::fleet::{self, FleetCa};
use sluice_e2e::gateway::{self, Answer, curl_via, tenant_of};
use sluice_e2e::origin::{EchoOrigin, HttpOrigin};
use sluice_e2e::proxy::{Sluice, TempDir};

/// HAProxy in the foreground, stopped on drop.
struct Haproxy {
    child: Child,
    plain: u16,
    tls: u16,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn haproxy_bin() -> String {
    for p in ["/usr/sbin/haproxy", "/usr/bin/haproxy"] {
        if Path::new(p).exists() {
            return p.to_string();
        }
    }
    panic!("haproxy is not installed (apt-get install haproxy; .ci/run installs it)");
}

/// HAProxy in front of `replicas`: a plain frontend to their `--listen` listeners and a TLS
/// one (passed through, TCP) to their `--tls-listen` ones, PROXY v2 to each, connecting
/// from 127.0.0.9 (what `--proxy-protocol-from` trusts), health-checked on `/readyz`.
fn start_haproxy(dir: &Path, replicas: &[(SocketAddr, SocketAddr, SocketAddr)]) -> Haproxy {
    let (plain, tls) = (free_port(), free_port());
    let servers = |pick: fn(&(SocketAddr, SocketAddr, SocketAddr)) -> SocketAddr| {
        replicas
            .iter()
            .enumerate()
            .map(|(i, r)| format!("    server r{i} {} check port {}\n", pick(r), r.2.port()))
            .collect::<String>()
    };
    let backend = "    balance roundrobin\n    option httpchk GET /readyz\n    http-check expect status 200\n    default-server inter 200ms fall 1 rise 2 send-proxy-v2 source 127.0.0.9\n";
    let config = format!(
        "global\n    maxconn 512\n\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n    retries 3\n    option redispatch 1\n\nfrontend plain\n    bind 127.0.0.1:{plain}\n    default_backend plain\n\nfrontend tls\n    bind 127.0.0.1:{tls}\n    default_backend tls\n\nbackend plain\n{backend}{}\nbackend tls\n{backend}{}",
        servers(|r| r.0),
        servers(|r| r.1),
    );
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(&cfg, config).unwrap();
    let check = Command::new(haproxy_bin())
        .args(["-c", "-f"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let child = Command::new(haproxy_bin())
        .args(["-db", "-f"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", plain)).is_err() {
        assert!(Instant::now() < deadline, "haproxy did not start");
        thread::sleep(Duration::from_millis(50));
    }
    Haproxy { child, plain, tls }
}

const GAMMA_PW: &str = "gamma-pool-pw-7d3e";
const TOKENS: [(&str, &str); 3] = [
    ("alpha", "alpha-secret-token-11aa"),
    ("gamma", "gamma-secret-token-22bb"),
    ("svid", "svid-secret-token-33cc"),
];

/// The tenants: alpha by address (127.0.0.2, through the header), gamma by password, svid
/// by SPIFFE ID; each inspected to the echo origin with its own `TOKEN`, and alpha alone
/// to the plain origin.
fn write_tenants(dir: &TempDir, echo: u16, plain: u16, alpha_plain: bool) -> std::path::PathBuf {
    dir.write("provider.yaml", &gateway::token_provider(echo));
    for (name, token) in TOKENS {
        gateway::write_secrets(dir, &format!("{name}.env"), &format!("TOKEN={token}\n"));
        let mut entries = vec![(format!("{name}_echo"), echo)];
        if name == "alpha" && alpha_plain {
            entries.push(("alpha_plain".to_string(), plain));
        }
        let refs: Vec<(&str, u16)> = entries.iter().map(|(n, p)| (n.as_str(), *p)).collect();
        let mut policy = gateway::rest_policy(&refs[..1]);
        if refs.len() > 1 {
            policy.push_str(&format!(
                "  alpha_plain:\n    endpoints:\n      - {{host: 127.0.0.1, port: {plain}}}\n    binaries:\n      - path: \"/**\"\n"
            ));
        }
        dir.write(&format!("{name}.yaml"), &policy);
    }
    dir.write(
        "tenants.yaml",
        "tenants:\n  \
           - name: alpha\n    sources: [127.0.0.2]\n    policy: [alpha.yaml]\n    providers: [provider.yaml]\n    secrets_file: alpha.env\n  \
           - name: gamma\n    proxy_auth: {username: gamma, password_env: GAMMA_PW}\n    policy: [gamma.yaml]\n    providers: [provider.yaml]\n    secrets_file: gamma.env\n  \
           - name: svid\n    client_certs: [{spiffe_id: \"spiffe://example.org/ns/ci/sa/runner\"}]\n    policy: [svid.yaml]\n    providers: [provider.yaml]\n    secrets_file: svid.env\n",
    )
}

#[test]
fn three_replicas_behind_haproxy_serve_each_tenant_as_itself_and_drain_without_a_failure() {
    let dir = TempDir::new("gateway-pool");
    let ca = FleetCa::new(dir.path(), "pool");
    let hop_ca = fleet::root_ca(dir.path(), "hop-ca", "pool hop CA");
    let hop = fleet::hop_cert(dir.path(), &hop_ca);
    let clients = fleet::root_ca(dir.path(), "clients-ca", "pool client CA");
    let svid = fleet::client_cert(
        dir.path(),
        "svid",
        &clients,
        "/CN=runner",
        Some("spiffe://example.org/ns/ci/sa/runner"),
    );
    let echo = EchoOrigin::start(dir.path());
    let plain = HttpOrigin::start();
    let tenants = write_tenants(&dir, echo.port(), plain.port(), true);
    let s = |p: &Path| p.display().to_string();
    let mut flags: Vec<String> = ca.flags();
    flags.extend(
        [
            "--proxy-protocol-from",
            "127.0.0.9/32",
            "--tls-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--watch-interval",
            "300ms",
        ]
        .map(String::from),
    );
    flags.extend([
        "--tls-cert".to_string(),
        s(&hop.cert),
        "--tls-key".to_string(),
        s(&hop.key),
        "--client-ca".to_string(),
        s(&clients.cert),
        "--upstream-ca".to_string(),
        s(&echo.cert),
    ]);
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut replicas: Vec<Sluice> = (0..3)
        .map(|_| gateway::start(&tenants, &refs, &[("GAMMA_PW", GAMMA_PW)]))
        .collect();
    let addrs: Vec<(SocketAddr, SocketAddr, SocketAddr)> = replicas
        .iter()
        .map(|r| (r.addrs[0], r.addrs[1], sluice_e2e::scrape::metrics_addr(r)))
        .collect();
    let lb = start_haproxy(dir.path(), &addrs);
    let plain_proxy = format!("http://127.0.0.1:{}", lb.plain);
    let tls_proxy = format!("https://127.0.0.1:{}", lb.tls);
    let root = s(&ca.root.cert);
    let hop_root = s(&hop_ca.cert);
    let (svid_cert, svid_key) = (s(&svid.cert), s(&svid.key));
    let placeholder = "Authorization: Bearer openshell:resolve:env:TOKEN";
    let echo_url =
        |who: &str, i: usize| format!("https://127.0.0.1:{}/echo/{who}/{i}", echo.port());
    // Each tenant the way its clients reach the pool, trusting the one CA (the root) alone.
    // The placeholder only to the origin its provider binds (elsewhere it is refused).
    let as_tenant = |who: &str, url: &str| -> Answer {
        let gamma_user = format!("gamma:{GAMMA_PW}");
        let mut args: Vec<&str> = match who {
            "alpha" => vec![],
            "gamma" => vec!["--proxy-cacert", &hop_root, "--proxy-user", &gamma_user],
            _ => vec![
                "--proxy-cacert",
                &hop_root,
                "--proxy-cert",
                &svid_cert,
                "--proxy-key",
                &svid_key,
            ],
        };
        args.extend(["--cacert", root.as_str()]);
        if url.starts_with("https://") {
            args.extend(["-H", placeholder]);
        }
        match who {
            "alpha" => curl_via(&plain_proxy, Some("127.0.0.2"), &args, url),
            _ => curl_via(&tls_proxy, None, &args, url),
        }
    };
    // 1. Every tenant, six requests each (round-robin spreads them over the replicas).
    for (who, token) in TOKENS {
        for i in 0..6 {
            let a = as_tenant(who, &echo_url(who, i));
            assert_eq!(a.status, 200, "{who} {i}: {a:?}");
            // The echo carries the header back: scrubbed to the placeholder.
            assert!(!a.body.contains(token), "{who} read its secret back: {a:?}");
        }
    }
    // Each tenant's requests reached the origin with its own secret, and no other's.
    let received = echo.received();
    for (who, token) in TOKENS {
        let mine: Vec<&Value> = received
            .iter()
            .filter(|r| {
                r["url"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with(&format!("/echo/{who}/"))
            })
            .collect();
        assert_eq!(mine.len(), 6, "{who}: {received:?}");
        for r in mine {
            let auth = r["headers"]["authorization"].as_str().unwrap_or("");
            assert_eq!(auth, format!("Bearer {token}"), "{who}: {r}");
        }
    }
    // Python's HTTPS proxy support reaches the pool over the TLS hop as gamma.
    let script = r#"
import sys, requests
proxy, hop_ca, root, url = sys.argv[1:5]
s = requests.Session(); s.trust_env = False
bundle = open(hop_ca).read() + open(root).read()
open(url.split("/")[-1] + ".pem", "w").write(bundle)
r = s.get(url, proxies={"https": proxy}, verify=url.split("/")[-1] + ".pem", timeout=20,
          headers={"Authorization": "Bearer openshell:resolve:env:TOKEN"})
print(r.status_code)
"#;
    let proxy_url = format!("https://gamma:{GAMMA_PW}@127.0.0.1:{}", lb.tls);
    let out = Command::new("python3")
        .current_dir(dir.path())
        .args([
            "-c",
            script,
            &proxy_url,
            &hop_root,
            &root,
            &echo_url("gamma", 99),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "200",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Only its policy: the plain origin is alpha's alone.
    let plain_url = format!("http://127.0.0.1:{}/", plain.port());
    assert_eq!(as_tenant("alpha", &plain_url).status, 200);
    for who in ["gamma", "svid"] {
        assert_eq!(as_tenant(who, &plain_url).status, 403, "{who}");
    }
    // Audited under its name, from its own address, on whichever replica served it; every
    // replica served some of each.
    for (who, _) in TOKENS {
        let served: Vec<usize> = replicas
            .iter()
            .map(|r| {
                r.events()
                    .iter()
                    .filter(|e| tenant_of(e) == Some(who) && e["class_uid"] == 4002)
                    .count()
            })
            .collect();
        assert!(served.iter().all(|n| *n > 0), "{who}: {served:?}");
    }
    for r in &replicas {
        for e in r.events() {
            if tenant_of(&e) == Some("alpha") {
                assert_eq!(e["src_endpoint"]["ip"], "127.0.0.2", "{e}");
            }
        }
        for (_, token) in TOKENS {
            gateway::assert_never_logged(r, token, "a tenant's secret");
        }
        gateway::assert_never_logged(r, GAMMA_PW, "gamma's password");
    }
    // 2. A reload reaches every replica: alpha loses the plain origin.
    write_tenants(&dir, echo.port(), plain.port(), false);
    for r in &replicas {
        gateway::hup(r);
    }
    for r in &replicas {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !r.stderr().contains("configuration reloaded") {
            assert!(Instant::now() < deadline, "{}", r.stderr());
            thread::sleep(Duration::from_millis(50));
        }
    }
    for i in 0..6 {
        let a = as_tenant("alpha", &plain_url);
        assert_eq!(a.status, 403, "{i}: {a:?}");
    }
    // 3. One replica drains mid-traffic: no request in flight fails.
    // Each takes 1.5 s at the origin: some are in flight on the draining replica.
    let slow = format!("https://127.0.0.1:{}/reflect-slow/alpha", echo.port());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let stop = Arc::clone(&stop);
            let (proxy, root, slow) = (plain_proxy.clone(), root.clone(), slow.clone());
            thread::spawn(move || {
                let mut results = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 60 {
                    let a = curl_via(
                        &proxy,
                        Some("127.0.0.2"),
                        &["--cacert", &root],
                        &format!("{slow}/{w}/{n}"),
                    );
                    results.push(a.status);
                    n += 1;
                }
                results
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(800));
    let draining = &mut replicas[0];
    draining.signal("TERM");
    assert_eq!(
        draining.wait_exit(Duration::from_secs(40)),
        Some(0),
        "{}",
        draining.stderr()
    );
    thread::sleep(Duration::from_millis(800));
    stop.store(true, Ordering::Relaxed);
    let statuses: Vec<u16> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(statuses.len() >= 6, "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let drained = &replicas[0];
    assert!(drained.stderr().contains("drained"), "{}", drained.stderr());
    // It was serving this traffic when it was told to stop.
    assert!(gateway::audit_text(drained).contains("reflect-slow"));
    // The others served on, and audited it.
    assert!(
        replicas[1..]
            .iter()
            .any(|r| gateway::audit_text(r).contains("reflect-slow"))
    );
    drop(lb);
}
