//! The proxy hop over TLS (`--tls-listen`): tenants by password over it, by client
//! certificate subject or by SPIFFE ID, a reload that takes the hop's renewed certificate,
//! certificates that name no one or the wrong one, the warning about passwords on a
//! cleartext listener, and the flags the hop needs together (`--client-ca`). The rest of the
//! gateway as a fleet (one CA, the balancer's PROXY header, the drain) is `fleet.rs`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use sluice_e2e::fleet;
use sluice_e2e::gateway::{self, Answer, curl_via, tenant_of};
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{Sluice, TempDir};

/// The `https://` proxy URL of a gateway's TLS listener (its second listener).
fn hop_url(gw: &Sluice) -> String {
    format!("https://{}", gw.addrs[1])
}

const GAMMA_PW: &str = "gamma-hop-pw-51f2";

/// A gateway with a TLS listener and these tenants: gamma by password, svid by SPIFFE ID,
/// agent by subject, both by subject and password; all allowed to `origin`. Returns the
/// directory, the gateway, the client CA and the hop's CA.
struct Hop {
    dir: TempDir,
    gw: Sluice,
    clients: fleet::CaFiles,
    hop_ca: fleet::CaFiles,
}

fn hop_gateway(tag: &str, origin: u16, extra: &[&str]) -> Hop {
    let dir = TempDir::new(tag);
    let hop_ca = fleet::root_ca(dir.path(), "hop-ca", "hop CA");
    let hop = fleet::hop_cert(dir.path(), &hop_ca);
    let clients = fleet::root_ca(dir.path(), "clients-ca", "client CA");
    dir.write("open.yaml", &gateway::allow_ports(&[origin]));
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  \
           - name: gamma\n    proxy_auth: {username: gamma, password_env: GAMMA_PW}\n    policy: [open.yaml]\n  \
           - name: svid\n    client_certs: [{spiffe_id: \"spiffe://example.org/ns/ci/sa/runner\"}]\n    policy: [open.yaml]\n  \
           - name: agent\n    client_certs: [{subject: \"CN=agent-1,O=team-a\"}]\n    policy: [open.yaml]\n  \
           - name: both\n    client_certs: [{subject: both-1}]\n    proxy_auth: {username: both, password_env: BOTH_PW}\n    policy: [open.yaml]\n",
    );
    let (cert, key, ca) = (
        hop.cert.display().to_string(),
        hop.key.display().to_string(),
        clients.cert.display().to_string(),
    );
    let mut flags = vec![
        "--tls-listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--client-ca",
        &ca,
    ];
    flags.extend_from_slice(extra);
    let gw = gateway::start(
        &tenants,
        &flags,
        &[("GAMMA_PW", GAMMA_PW), ("BOTH_PW", "both-pw-9")],
    );
    Hop {
        dir,
        gw,
        clients,
        hop_ca,
    }
}

impl Hop {
    /// curl through the TLS hop with `args` to `url`.
    fn curl(&self, args: &[&str], url: &str) -> Answer {
        let ca = self.hop_ca.cert.display().to_string();
        let mut all = vec!["--proxy-cacert", ca.as_str()];
        all.extend_from_slice(args);
        curl_via(&hop_url(&self.gw), None, &all, url)
    }

    /// A client certificate from the gateway's client CA.
    fn cert(&self, name: &str, subject: &str, spiffe: Option<&str>) -> (String, String) {
        let c = fleet::client_cert(self.dir.path(), name, &self.clients, subject, spiffe);
        (c.cert.display().to_string(), c.key.display().to_string())
    }
}

#[test]
fn tenants_reach_the_gateway_over_tls_by_password_or_by_certificate() {
    let origin = HttpOrigin::start();
    let hop = hop_gateway("hop-tenants", origin.port(), &[]);
    let url = format!("http://127.0.0.1:{}/", origin.port());
    let by_password = hop.curl(&["--proxy-user", &format!("gamma:{GAMMA_PW}")], &url);
    assert_eq!(
        by_password.status,
        200,
        "{by_password:?}\n{}",
        hop.gw.stderr()
    );
    let (svid, svid_key) = hop.cert(
        "svid",
        "/CN=runner",
        Some("spiffe://example.org/ns/ci/sa/runner"),
    );
    let by_spiffe = hop.curl(&["--proxy-cert", &svid, "--proxy-key", &svid_key], &url);
    assert_eq!(by_spiffe.status, 200, "{by_spiffe:?}");
    let (agent, agent_key) = hop.cert("agent", "/O=team-a/CN=agent-1", None);
    let by_subject = hop.curl(&["--proxy-cert", &agent, "--proxy-key", &agent_key], &url);
    assert_eq!(by_subject.status, 200, "{by_subject:?}");
    // A tenant with a certificate and a password needs both.
    let (both, both_key) = hop.cert("both", "/CN=both-1", None);
    let cert_only = hop.curl(&["--proxy-cert", &both, "--proxy-key", &both_key], &url);
    assert_eq!(cert_only.status, 407, "{cert_only:?}");
    let password_only = hop.curl(&["--proxy-user", "both:both-pw-9"], &url);
    assert_eq!(password_only.status, 407, "{password_only:?}");
    let together = hop.curl(
        &[
            "--proxy-cert",
            &both,
            "--proxy-key",
            &both_key,
            "--proxy-user",
            "both:both-pw-9",
        ],
        &url,
    );
    assert_eq!(together.status, 200, "{together:?}");
    // Each audited under its own name.
    for name in ["gamma", "svid", "agent", "both"] {
        hop.gw.wait_event(&format!("{name}'s request"), |e| {
            tenant_of(e) == Some(name) && e["class_uid"] == 4002
        });
    }
    // The password crossed only the TLS hop: never logged.
    gateway::assert_never_logged(&hop.gw, GAMMA_PW, "gamma's password");
    // Python's HTTPS proxy support (requests): a forwarded request and a CONNECT tunnel,
    // both inside the hop's TLS.
    let script = r#"
import sys, requests
proxy, ca, url = sys.argv[1], sys.argv[2], sys.argv[3]
s = requests.Session()
s.trust_env = False
r = s.get(url, proxies={"http": proxy, "https": proxy}, verify=ca, timeout=20)
print(r.status_code, r.text.strip())
"#;
    let proxy = format!("https://gamma:{GAMMA_PW}@{}", hop.gw.addrs[1]);
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            script,
            &proxy,
            &hop.hop_ca.cert.display().to_string(),
            &url,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("200 hello from origin"),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The TLS hop's certificate and key, replaced in place (a renewed certificate, a rotated
/// Secret), are taken by a reload as the operator's CA is: new handshakes present the new
/// certificate; a key that does not serve it is a refused reload, and the hop keeps the last
/// good pair.
#[test]
fn a_reload_takes_the_tls_hops_renewed_certificate() {
    let origin = HttpOrigin::start();
    let dir = TempDir::new("hop-renew");
    let old_ca = fleet::root_ca(dir.path(), "hop-ca-old", "old hop CA");
    let new_ca = fleet::root_ca(dir.path(), "hop-ca-new", "new hop CA");
    let old = fleet::hop_cert(dir.path(), &old_ca);
    let old = (
        std::fs::read(&old.cert).unwrap(),
        std::fs::read(&old.key).unwrap(),
    );
    // `hop_cert` writes `hop.pem`/`hop.key`: the new pair overwrites the old one's files.
    let new = fleet::hop_cert(dir.path(), &new_ca);
    let new = (
        std::fs::read(&new.cert).unwrap(),
        std::fs::read(&new.key).unwrap(),
    );
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let install = |(c, k): &(Vec<u8>, Vec<u8>)| {
        std::fs::write(&cert, c).unwrap();
        std::fs::write(&key, k).unwrap();
        fleet::chmod(&key, 0o600);
    };
    install(&old);
    dir.write("open.yaml", &gateway::allow_ports(&[origin.port()]));
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  - name: gamma\n    proxy_auth: {username: gamma, password_env: GAMMA_PW}\n    policy: [open.yaml]\n",
    );
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let gw = gateway::start(
        &tenants,
        &[
            "--tls-listen",
            "127.0.0.1:0",
            "--tls-cert",
            &c,
            "--tls-key",
            &k,
        ],
        &[("GAMMA_PW", GAMMA_PW)],
    );
    let url = format!("http://127.0.0.1:{}/", origin.port());
    let user = format!("gamma:{GAMMA_PW}");
    let trusting = |ca: &fleet::CaFiles| {
        let ca = ca.cert.display().to_string();
        curl_via(
            &hop_url(&gw),
            None,
            &["--proxy-cacert", &ca, "--proxy-user", &user],
            &url,
        )
    };
    assert_eq!(trusting(&old_ca).status, 200, "{}", gw.stderr());
    assert_ne!(trusting(&new_ca).status, 200);

    install(&new);
    gw.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(15);
    while trusting(&new_ca).status != 200 {
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was not taken: {}",
            gw.stderr()
        );
        thread::sleep(Duration::from_millis(100));
    }
    assert_ne!(
        trusting(&old_ca).status,
        200,
        "the old certificate is still presented"
    );

    // A key that does not serve the certificate: refused, the last good pair stays.
    std::fs::write(&key, &old.1).unwrap();
    fleet::chmod(&key, 0o600);
    gw.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !gw.stderr().contains("does not serve --tls-cert") {
        assert!(Instant::now() < deadline, "{}", gw.stderr());
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(trusting(&new_ca).status, 200, "{}", gw.stderr());
}

#[test]
fn certificates_that_name_no_one_or_the_wrong_one_are_refused() {
    let origin = HttpOrigin::start();
    let hop = hop_gateway("hop-attacks", origin.port(), &[]);
    let url = format!("http://127.0.0.1:{}/", origin.port());
    // A certificate from another CA, claiming svid's SPIFFE ID: the handshake fails.
    let stranger_ca = fleet::root_ca(hop.dir.path(), "stranger-ca", "stranger CA");
    let forged = fleet::client_cert(
        hop.dir.path(),
        "forged",
        &stranger_ca,
        "/CN=runner",
        Some("spiffe://example.org/ns/ci/sa/runner"),
    );
    let (f, fk) = (
        forged.cert.display().to_string(),
        forged.key.display().to_string(),
    );
    let a = hop.curl(&["--proxy-cert", &f, "--proxy-key", &fk], &url);
    assert_eq!(a.status, 0, "{a:?}");
    hop.gw.wait_event("the failed handshake", |e| {
        e.to_string()
            .contains("the proxy hop's TLS handshake failed")
    });
    // A valid certificate whose subject is no tenant's: refused, even with a tenant's
    // password.
    let (n, nk) = hop.cert(
        "nobody",
        "/CN=nobody",
        Some("spiffe://example.org/ns/ci/sa/nobody"),
    );
    for extra in [
        vec![],
        vec!["--proxy-user".to_string(), format!("gamma:{GAMMA_PW}")],
    ] {
        let mut args = vec!["--proxy-cert", n.as_str(), "--proxy-key", nk.as_str()];
        args.extend(extra.iter().map(String::as_str));
        let a = hop.curl(&args, &url);
        assert_eq!(a.status, 403, "{a:?}");
        let json = a.json();
        assert!(
            json["reason"].as_str().unwrap().contains("is no tenant's"),
            "{json}"
        );
    }
    // Password and certificate naming different tenants.
    let (s, sk) = hop.cert(
        "svid2",
        "/CN=runner",
        Some("spiffe://example.org/ns/ci/sa/runner"),
    );
    let a = hop.curl(
        &[
            "--proxy-cert",
            &s,
            "--proxy-key",
            &sk,
            "--proxy-user",
            &format!("gamma:{GAMMA_PW}"),
        ],
        &url,
    );
    assert_eq!(a.status, 403, "{a:?}");
    assert!(
        a.json()["reason"]
            .as_str()
            .unwrap()
            .contains("not those of the tenant the client certificate names"),
        "{a:?}"
    );
    assert!(origin.received().is_empty(), "{:?}", origin.received());
    // Plain HTTP to the TLS listener is no request.
    let mut s = TcpStream::connect(hop.gw.addrs[1]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(gateway::forward(origin.port(), "/", None).as_bytes())
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(!String::from_utf8_lossy(&out).contains("hello from origin"));
    assert!(origin.received().is_empty());
}

#[test]
fn passwords_on_a_cleartext_listener_other_hosts_reach_are_warned_about() {
    let dir = TempDir::new("hop-warning");
    let origin = HttpOrigin::start();
    let tenants = gateway::mixed_tenants(&dir, &[origin.port()]);
    let gw = gateway::start(&tenants, &["--listen", "0.0.0.0:0"], &gateway::passwords());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gw
        .stderr()
        .contains("accepts them in cleartext from other hosts")
    {
        assert!(Instant::now() < deadline, "{}", gw.stderr());
        thread::sleep(Duration::from_millis(50));
    }
    // On loopback only, no warning.
    let quiet = gateway::start(&tenants, &[], &gateway::passwords());
    thread::sleep(Duration::from_millis(300));
    assert!(!quiet.stderr().contains("cleartext"), "{}", quiet.stderr());
}

#[test]
fn the_tls_hop_and_its_client_ca_need_run_and_each_other() {
    // `sluice exec` serves one command on loopback: a TLS listener there is refused.
    let (code, err) = gateway::exit_of(
        &[
            "exec",
            "--tls-listen",
            "127.0.0.1:0",
            "--tls-cert",
            "/c.pem",
            "--tls-key",
            "/k.pem",
            "--",
            "true",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--tls-listen is for `sluice run`"), "{err}");
    // --client-ca without a TLS listener, or a TLS listener without its key: usage errors.
    for args in [
        &["run", "--client-ca", "/ca.pem"][..],
        &["run", "--tls-listen", "127.0.0.1:0", "--tls-cert", "/c.pem"][..],
        &["run", "--ca-cert", "/ca.pem"][..],
    ] {
        let (code, err) = gateway::exit_of(args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {err}");
    }
    // Files that cannot serve the hop stop sluice at start (exit 2), naming the flag.
    let dir = TempDir::new("hop-files");
    dir.write("open.yaml", &gateway::allow_ports(&[1]));
    let tenants = dir.write(
        "tenants.yaml",
        "tenants:\n  - name: a\n    sources: [127.0.0.1]\n    policy: [open.yaml]\n",
    );
    let empty = dir.write("empty.pem", "no certificate here\n");
    let key = dir.write(
        "key.pem",
        "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n",
    );
    fleet::chmod(&key, 0o600);
    let (t, e, k) = (
        tenants.display().to_string(),
        empty.display().to_string(),
        key.display().to_string(),
    );
    let (code, err) = gateway::exit_of(
        &[
            "run",
            "--tenants",
            &t,
            "--listen",
            "127.0.0.1:0",
            "--audit-log",
            "/dev/null",
            "--tls-listen",
            "127.0.0.1:0",
            "--tls-cert",
            &e,
            "--tls-key",
            &k,
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--tls-cert") && err.contains("holds no certificate"),
        "{err}"
    );
}
