//! End-to-end tests of what a reload does to connections already established, with the real
//! binary: a raw CONNECT tunnel, an inspected HTTP/1.1 keep-alive tunnel, an HTTP/2
//! connection with a response still streaming, and a WebSocket after its upgrade are closed
//! (promptly, with a close event naming the revocation) when the reloaded policy no longer
//! allows them; a tunnel another entry still allows, and one whose only change is in its L7
//! rules, are not touched; a change of an entry's binaries closes only that caller's tunnels;
//! a raw tunnel to an endpoint the new policy inspects is closed, and so is one to a host
//! that a reloaded providers file binds a credential to; a tunnel dialled to an
//! address that a narrowed `allowed_ips` no longer covers is closed (origins in network
//! namespaces, as loopback addresses are never allowed by `allowed_ips`; needs root). Every
//! audit event is validated against OCSF.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::ocsf::class;
use sluice_e2e::origin::EchoOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, me, python};
use sluice_e2e::reload::{
    Driven, PROMPTLY, closed_within, inspected_entry, l4_entry, policy, read_head, reload_to,
    replace, revoked_close,
};
use sluice_e2e::scrape;

/// A TCP echo server: every line sent comes back; counts the connections that ended.
struct TcpEcho {
    port: u16,
    ended: Arc<AtomicUsize>,
}

impl TcpEcho {
    fn start() -> TcpEcho {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let ended = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&ended);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let count = Arc::clone(&count);
                thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || stream.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        TcpEcho { port, ended }
    }
}

/// A raw CONNECT tunnel from this test process (the caller is the test executable).
struct Tunnel(TcpStream);

impl Tunnel {
    fn open(sluice: &Sluice, port: u16) -> Tunnel {
        let mut s = TcpStream::connect(sluice.addr()).unwrap();
        s.set_read_timeout(Some(PROMPTLY)).unwrap();
        write!(
            s,
            "CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        )
        .unwrap();
        let head = read_head(&mut s);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        Tunnel(s)
    }

    /// Sends `line` through the tunnel and returns what the echo origin sent back.
    fn echo(&mut self, line: &str) -> String {
        self.0.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut back = vec![0u8; line.len() + 1];
        self.0.read_exact(&mut back).unwrap();
        String::from_utf8(back).unwrap().trim_end().to_string()
    }

    /// Whether sluice closes the tunnel within `PROMPTLY`, and how long that took.
    fn closed_within(&mut self) -> Option<Duration> {
        closed_within(&mut self.0)
    }
}

/// A client connection held by a Python process: a CONNECT tunnel (raw, or TLS to the
/// origin through sluice's CA) driven line by line from stdin. `echo X` sends a line on a raw
/// tunnel and prints what came back; `get PATH` sends a keep-alive HTTP/1.1 request on the
/// TLS tunnel and prints its status; `wait S` prints `CLOSED` when the tunnel closes within S
/// seconds, else `OPEN`.
const HOLDER: &str = r#"
import socket, ssl, sys
proxy_port, port, mode, ca = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.create_connection(('127.0.0.1', proxy_port))
s.sendall(b'CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n' % (port, port))
head = b''
while not head.endswith(b'\r\n\r\n'):
    c = s.recv(1)
    if not c:
        print('REFUSED', flush=True); sys.exit(0)
    head += c
if not head.startswith(b'HTTP/1.1 200'):
    print('REFUSED', head.split(b'\r\n')[0].decode(), flush=True); sys.exit(0)
if mode == 'tls':
    ctx = ssl.create_default_context(cafile=ca)
    s = ctx.wrap_socket(s, server_hostname='127.0.0.1')
print('READY', flush=True)
f = s.makefile('rb')
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(' ')
    try:
        if cmd == 'echo':
            s.sendall(arg.encode() + b'\n')
            print(f.readline().decode().strip() or 'CLOSED', flush=True)
        elif cmd == 'get':
            s.sendall(b'GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n' % (arg.encode(), port))
            status = f.readline()
            if not status:
                print('CLOSED', flush=True); continue
            length = 0
            while True:
                h = f.readline()
                if h in (b'\r\n', b''):
                    break
                if h.lower().startswith(b'content-length:'):
                    length = int(h.split(b':')[1])
            f.read(length)
            print(status.split()[1].decode(), flush=True)
        elif cmd == 'wait':
            s.settimeout(float(arg))
            try:
                data = s.recv(1)
                print('CLOSED' if not data else 'DATA', flush=True)
            except (socket.timeout, TimeoutError):
                print('OPEN', flush=True)
            s.settimeout(None)
    except (OSError, ssl.SSLError) as e:
        print('CLOSED', type(e).__name__, flush=True)
"#;

/// Starts a [`HOLDER`] for a tunnel to 127.0.0.1:`port` (`mode` raw or tls).
fn hold(sluice: &Sluice, port: u16, mode: &str, ca: &Path) -> Driven {
    let (proxy, port) = (sluice.addr().port().to_string(), port.to_string());
    let args = [proxy.as_str(), &port, mode, &ca.to_string_lossy()];
    Driven::start(HOLDER, &args, "READY", &sluice.stderr())
}

/// The close events of connections to `port`.
fn closes_to(sluice: &Sluice, port: u16) -> Vec<Value> {
    sluice
        .events()
        .into_iter()
        .filter(|e| class(e) == 4001 && e["activity_id"] == 2)
        .filter(|e| e["dst_endpoint"]["port"].as_u64() == Some(u64::from(port)))
        .collect()
}

/// `sluice_connections_revoked_total`, scraped.
fn revoked_total(sluice: &Sluice) -> f64 {
    let (status, body) = scrape::get(scrape::metrics_addr(sluice), "/metrics");
    assert_eq!(status, 200);
    body.lines()
        .find_map(|l| l.strip_prefix("sluice_connections_revoked_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sluice_connections_revoked_total in:\n{body}"))
}

#[test]
fn a_reload_closes_a_raw_tunnel_it_revokes_and_leaves_one_another_entry_allows() {
    let gone_origin = TcpEcho::start();
    let kept_origin = TcpEcho::start();
    let me = me();
    let before = policy(&[
        l4_entry("gone", gone_origin.port, &[&me]),
        l4_entry("kept", kept_origin.port, &[&me]),
    ]);
    let sluice = Sluice::start(
        &before,
        &[
            "--allow-loopback-upstream",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let mut gone = Tunnel::open(&sluice, gone_origin.port);
    let mut kept = Tunnel::open(&sluice, kept_origin.port);
    assert_eq!(gone.echo("one"), "one");
    assert_eq!(kept.echo("one"), "one");
    assert_eq!(revoked_total(&sluice), 0.0);

    reload_to(
        &sluice,
        &policy(&[l4_entry("kept", kept_origin.port, &[&me])]),
        2,
    );
    let took = gone.closed_within();
    assert!(
        took.is_some(),
        "the revoked tunnel is still open after {PROMPTLY:?}"
    );
    eprintln!("the revoked tunnel closed {took:?} after the reload's audit event was read");
    let close = revoked_close(
        &sluice,
        gone_origin.port,
        &format!(
            "entry gone no longer allows CONNECT 127.0.0.1:{}",
            gone_origin.port
        ),
    );
    assert_eq!(close["firewall_rule"]["name"], "gone", "{close:#}");
    // The bytes it carried are counted up to the revocation.
    assert_eq!(close["traffic"]["bytes_out"], 4, "{close:#}");
    // The upstream side was closed too.
    let deadline = Instant::now() + PROMPTLY;
    while gone_origin.ended.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(gone_origin.ended.load(Ordering::SeqCst), 1);

    // The tunnel the new policy still allows: the same connection goes on.
    assert_eq!(kept.echo("two"), "two");
    assert_eq!(kept.echo("three"), "three");
    assert!(closes_to(&sluice, kept_origin.port).is_empty());
    assert_eq!(kept_origin.ended.load(Ordering::SeqCst), 0);
    assert_eq!(revoked_total(&sluice), 1.0);
    assert!(
        sluice
            .stderr()
            .contains("1 live connection(s) it no longer allows closed"),
        "{}",
        sluice.stderr()
    );
    // A new tunnel to the removed entry is refused.
    let refused = sluice.raw(
        format!(
            "CONNECT 127.0.0.1:{0} HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\n\r\n",
            gone_origin.port
        )
        .as_bytes(),
    );
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    drop(kept);
    assert_events_valid(&sluice);
}

#[test]
fn a_binary_scoped_change_closes_only_that_callers_tunnels() {
    let origin = TcpEcho::start();
    let (me, py) = (me(), python());
    let sluice = Sluice::start(
        &policy(&[l4_entry("echo", origin.port, &[&me, &py])]),
        &["--allow-loopback-upstream"],
    );
    let dir = TempDir::new("revoke-binary");
    let ca = dir.path().join("unused-ca.pem");
    let mut mine = Tunnel::open(&sluice, origin.port);
    let mut theirs = hold(&sluice, origin.port, "raw", &ca);
    assert_eq!(mine.echo("a"), "a");
    assert_eq!(theirs.ask("echo a"), "a");

    // The entry now names only Python.
    reload_to(
        &sluice,
        &policy(&[l4_entry("echo", origin.port, &[&py])]),
        2,
    );
    assert!(
        mine.closed_within().is_some(),
        "the test's tunnel is still open"
    );
    let close = revoked_close(
        &sluice,
        origin.port,
        &format!(
            "entry echo no longer allows CONNECT 127.0.0.1:{} by {me}",
            origin.port
        ),
    );
    assert_eq!(close["actor"]["process"]["path"], me, "{close:#}");
    // Python's tunnel, the same connection, still carries bytes.
    assert_eq!(theirs.ask("echo b"), "b");
    assert_eq!(theirs.ask("wait 1"), "OPEN");
    assert_eq!(theirs.ask("echo c"), "c");
    assert_eq!(closes_to(&sluice, origin.port).len(), 1);
    assert_events_valid(&sluice);
}

#[test]
fn a_raw_tunnel_to_an_endpoint_the_new_policy_inspects_is_closed() {
    let origin = TcpEcho::start();
    let me = me();
    let sluice = Sluice::start(
        &policy(&[l4_entry("api", origin.port, &[&me])]),
        &["--allow-loopback-upstream"],
    );
    let mut tunnel = Tunnel::open(&sluice, origin.port);
    assert_eq!(tunnel.echo("x"), "x");
    // Same entry, same binary: its requests are now judged one by one.
    reload_to(
        &sluice,
        &policy(&[inspected_entry(origin.port, &["/**"], &me)]),
        2,
    );
    assert!(tunnel.closed_within().is_some(), "the raw tunnel is open");
    revoked_close(
        &sluice,
        origin.port,
        &format!(
            "entry api now inspects CONNECT 127.0.0.1:{}; the uninspected tunnel is closed",
            origin.port
        ),
    );
    assert_events_valid(&sluice);
}

#[test]
fn a_raw_tunnel_to_a_host_that_gains_a_credential_binding_is_closed() {
    let bound = TcpEcho::start();
    let unbound = TcpEcho::start();
    let opted_in = TcpEcho::start();
    let me = me();
    let dir = TempDir::new("revoke-creds");
    let providers = |port: u16| {
        format!(
            "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\nendpoints:\n  - host: 127.0.0.1\n    port: {port}\n  - host: 127.0.0.1\n    port: {}\n",
            opted_in.port
        )
    };
    // At first the credential is bound elsewhere (to the opted-in endpoint only).
    let file = dir.write("providers.yaml", &providers(opted_in.port));
    let opted = format!(
        "  open:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, allow_uninspected_credentials: true}}\n    binaries:\n      - path: {me}\n",
        opted_in.port
    );
    let text = policy(&[
        l4_entry("api", bound.port, &[&me]),
        l4_entry("other", unbound.port, &[&me]),
        opted,
    ]);
    let sluice = Sluice::start_with_env(
        &text,
        &[
            "--allow-loopback-upstream",
            "--providers",
            file.to_str().unwrap(),
        ],
        &[("TEST_API_KEY", "s3cr3t-never-seen")],
    );
    let mut tunnel = Tunnel::open(&sluice, bound.port);
    let mut other = Tunnel::open(&sluice, unbound.port);
    let mut open = Tunnel::open(&sluice, opted_in.port);
    assert_eq!(tunnel.echo("x"), "x");
    // The policy is unchanged; the destination now has a credential bound to it, which an
    // uninspected tunnel would carry unchecked.
    replace(&file, &providers(bound.port));
    sluice.wait_event("the reload", |_| {
        sluice.events().iter().filter(|e| class(e) == 5019).count() >= 2
    });
    assert!(tunnel.closed_within().is_some(), "the raw tunnel is open");
    revoked_close(
        &sluice,
        bound.port,
        &format!(
            "a credential is bound to 127.0.0.1:{} and no endpoint allows it uninspected; the uninspected tunnel is closed",
            bound.port
        ),
    );
    // A tunnel to a host without a binding, and one whose endpoint opts in to uninspected
    // credentials, go on.
    assert_eq!(other.echo("y"), "y");
    assert_eq!(open.echo("z"), "z");
    assert_eq!(closes_to(&sluice, unbound.port).len(), 0);
    assert_eq!(closes_to(&sluice, opted_in.port).len(), 0);
    // A new tunnel there is refused as at any CONNECT.
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    write!(
        s,
        "CONNECT 127.0.0.1:{0} HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\n\r\n",
        bound.port
    )
    .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.contains("uninspected_credentials"), "{answer}");
    // A policy that withdraws the opt-in closes that tunnel too.
    let withdrawn = policy(&[
        l4_entry("api", bound.port, &[&me]),
        l4_entry("other", unbound.port, &[&me]),
        l4_entry("open", opted_in.port, &[&me]),
    ]);
    reload_to(&sluice, &withdrawn, 3);
    assert!(
        open.closed_within().is_some(),
        "the opted-out tunnel is open"
    );
    revoked_close(
        &sluice,
        opted_in.port,
        &format!(
            "a credential is bound to 127.0.0.1:{} and no endpoint allows it uninspected",
            opted_in.port
        ),
    );
    assert_eq!(other.echo("w"), "w");
    assert!(!sluice.stderr().contains("s3cr3t-never-seen"));
    assert_events_valid(&sluice);
}

fn start_inspecting(
    dir: &TempDir,
    text: &str,
    origin: &EchoOrigin,
) -> (Sluice, std::path::PathBuf) {
    let ca_dir = dir.path().join("ca");
    let sluice = Sluice::start(
        text,
        &[
            "--allow-loopback-upstream",
            "--ca-dir",
            ca_dir.to_str().unwrap(),
            "--upstream-ca",
            origin.cert.to_str().unwrap(),
        ],
    );
    (sluice, ca_dir.join("ca.pem"))
}

#[test]
fn an_inspected_keep_alive_tunnel_is_closed_when_revoked_and_kept_when_only_rules_change() {
    let dir = TempDir::new("revoke-h1");
    let origin = EchoOrigin::start(dir.path());
    let port = origin.port();
    let py = python();
    let (sluice, ca) = start_inspecting(
        &dir,
        &policy(&[inspected_entry(port, &["/a/**", "/b/**"], &py)]),
        &origin,
    );
    let mut held = hold(&sluice, port, "tls", &ca);
    assert_eq!(held.ask("get /a/1"), "200");
    assert_eq!(held.ask("get /b/1"), "200");

    // Only the L7 rules change: the tunnel is not closed, and its next requests are judged
    // by the new rules.
    reload_to(
        &sluice,
        &policy(&[inspected_entry(port, &["/a/**"], &py)]),
        2,
    );
    assert_eq!(held.ask("wait 1"), "OPEN");
    assert_eq!(held.ask("get /a/2"), "200");
    assert!(closes_to(&sluice, port).is_empty());
    assert_eq!(held.ask("get /b/2"), "403");

    // A fresh tunnel, then a policy without the endpoint: it is closed.
    let mut held = hold(&sluice, port, "tls", &ca);
    assert_eq!(held.ask("get /a/3"), "200");
    let without = policy(&[l4_entry("other", 9, &[&py])]);
    reload_to(&sluice, &without, 3);
    let started = Instant::now();
    assert_eq!(held.ask("wait 10"), "CLOSED");
    assert!(started.elapsed() < PROMPTLY);
    let close = revoked_close(
        &sluice,
        port,
        &format!("entry api no longer allows CONNECT 127.0.0.1:{port}"),
    );
    assert_eq!(close["firewall_rule"]["name"], "api", "{close:#}");
    let urls: Vec<String> = origin
        .received()
        .iter()
        .map(|r| r["url"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(urls, ["/a/1", "/b/1", "/a/2", "/a/3"]);
    assert_events_valid(&sluice);
}

/// An HTTP/2 (and HTTP/1.1) origin whose `/stream` answers one line every 200 ms, forever;
/// when a stream is closed under it, it appends `closed` to the file named by its third
/// argument.
/// A raw CONNECT tunnel to `authority` (a name), from this test process.
fn tunnel_to(sluice: &Sluice, authority: &str) -> TcpStream {
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    write!(
        s,
        "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"
    )
    .unwrap();
    let head = read_head(&mut s);
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "{authority}: {head}\n{}",
        sluice.stderr()
    );
    s
}

/// `GET /` through a tunnel to the namespace's test host (kept alive): the body.
fn get_through(s: &mut TcpStream, host: &str) -> String {
    write!(s, "GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let head = read_head(s);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

/// Two origins in network namespaces, reached over veths at private addresses (loopback
/// addresses are never allowed by `allowed_ips`): a reload that narrows one entry's
/// `allowed_ips` so that its origin's address is outside them closes the live tunnel that
/// was dialled to that address, although the entry still allows the name and port; the
/// tunnel to the other origin, still allowed, goes on.
#[test]
fn a_reload_that_narrows_allowed_ips_closes_a_tunnel_dialled_outside_them() {
    if !sluice_e2e::proxy::privileged(
        "a_reload_that_narrows_allowed_ips_closes_a_tunnel_dialled_outside_them",
    ) {
        return;
    }
    let a = sluice_e2e::netns::TestHost::start("rva").expect("test host a");
    let b = sluice_e2e::netns::TestHost::start("rvb").expect("test host b");
    assert_ne!(a.port, b.port, "the two hosts' ports collide; run again");
    let me = me();
    let entry = |name: &str, port: u16, net: &str| {
        format!(
            "  {name}:\n    endpoints:\n      - {{host: {name}.test, port: {port}, allowed_ips: [\"{net}\"]}}\n    binaries:\n      - path: {me}\n"
        )
    };
    let before = policy(&[
        entry("a", a.port, &a.network),
        entry("b", b.port, &b.network),
    ]);
    let sluice = Sluice::start(
        &before,
        &[
            "--resolve",
            &format!("a.test={}", a.ip),
            "--resolve",
            &format!("b.test={}", b.ip),
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let a_auth = format!("a.test:{}", a.port);
    let b_auth = format!("b.test:{}", b.port);
    let mut gone = tunnel_to(&sluice, &a_auth);
    let mut kept = tunnel_to(&sluice, &b_auth);
    assert_eq!(
        get_through(&mut gone, &a_auth),
        "hello from the test host\n"
    );
    assert_eq!(
        get_through(&mut kept, &b_auth),
        "hello from the test host\n"
    );
    assert_eq!(revoked_total(&sluice), 0.0);

    // Entry `a` still allows a.test on its port, but only at b's network now.
    reload_to(
        &sluice,
        &policy(&[
            entry("a", a.port, &b.network),
            entry("b", b.port, &b.network),
        ]),
        2,
    );
    let took = closed_within(&mut gone);
    assert!(
        took.is_some(),
        "the tunnel dialled outside the new allowed_ips is still open after {PROMPTLY:?}\n{}",
        sluice.stderr()
    );
    let close = revoked_close(
        &sluice,
        a.port,
        &format!(
            "entry a no longer allows the address {}:{} of CONNECT {a_auth}",
            a.ip, a.port
        ),
    );
    assert_eq!(close["firewall_rule"]["name"], "a", "{close:#}");

    // The tunnel to b, still allowed at the address it was dialled, goes on.
    assert_eq!(
        get_through(&mut kept, &b_auth),
        "hello from the test host\n"
    );
    assert!(closes_to(&sluice, b.port).is_empty());
    assert_eq!(revoked_total(&sluice), 1.0);
    // A new tunnel to a is refused at its address.
    let refused =
        sluice.raw(format!("CONNECT {a_auth} HTTP/1.1\r\nHost: {a_auth}\r\n\r\n").as_bytes());
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    drop(kept);
    assert_events_valid(&sluice);
}

/// A kept-alive absolute-form connection keeps its upstream connection between requests: a
/// reload that narrows `allowed_ips` so that the upstream's address is outside them refuses
/// the next request, which does not go out over the kept upstream connection.
#[test]
fn a_reload_that_narrows_allowed_ips_refuses_the_next_forward_request_on_a_kept_upstream() {
    if !sluice_e2e::proxy::privileged(
        "a_reload_that_narrows_allowed_ips_refuses_the_next_forward_request_on_a_kept_upstream",
    ) {
        return;
    }
    let a = sluice_e2e::netns::TestHost::start("rfa").expect("test host a");
    let b = sluice_e2e::netns::TestHost::start("rfb").expect("test host b");
    let me = me();
    let entry = |net: &str| {
        policy(&[format!(
            "  a:\n    endpoints:\n      - {{host: a.test, port: {}, allowed_ips: [\"{net}\"]}}\n    binaries:\n      - path: {me}\n",
            a.port
        )])
    };
    let sluice = Sluice::start(
        &entry(&a.network),
        &["--resolve", &format!("a.test={}", a.ip)],
    );
    let auth = format!("a.test:{}", a.port);
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let mut get = || {
        write!(s, "GET http://{auth}/ HTTP/1.1\r\nHost: {auth}\r\n\r\n").unwrap();
        sluice_e2e::gateway::read_response(&mut s)
    };
    let (head, body) = get();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, "hello from the test host\n");
    // Entry `a` still allows a.test on its port, but only at b's network now.
    reload_to(&sluice, &entry(&b.network), 2);
    let (head, body) = get();
    assert!(
        head.starts_with("HTTP/1.1 403"),
        "the kept upstream connection carried it: {head}{body}\n{}",
        sluice.stderr()
    );
    assert!(body.contains("ssrf_denied"), "{body}");
    assert_events_valid(&sluice);
}
