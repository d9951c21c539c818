//! End-to-end tests of sluice's inspection of tunnels: TLS termination with L7 rules,
//! HTTP/2 on both legs, credential placeholders swapped only where bound, the demo,
//! WebSocket upgrades, gigabyte streams in constant memory, and opt-in body rewriting. Real
//! binary, real curl and Python, local origins; every audit event validated against OCSF.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::ocsf::{action, class, is_close, is_open};
use sluice_e2e::origin::HttpsOrigin;
use sluice_e2e::proxy::{
    Sluice, TempDir, assert_events_valid, assert_sse_streams, me, python, run, status_of,
};

const SECRET: &str = "s3cr3t-VALUE-7f3a9c";

/// sluice terminating TLS for local origins, with `TEST_API_KEY` = [`SECRET`] in its
/// environment; see [`Sluice::intercepting`].
fn intercepting(
    dir: &TempDir,
    policy: &str,
    origin_cas: &[&Path],
    providers: Option<&Path>,
) -> (Sluice, PathBuf) {
    Sluice::intercepting(
        dir,
        policy,
        origin_cas,
        providers,
        &[("TEST_API_KEY", SECRET)],
    )
}

#[test]
fn tls_is_terminated_and_l7_rules_judge_each_request() {
    let dir = TempDir::new("l7tls");
    let origin = HttpsOrigin::start(dir.path());
    let p = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /}}\n          - allow: {{method: GET, path: /bytes/*}}\n    binaries:\n      - path: /usr/bin/curl\n",
        origin.port()
    );
    let (sluice, ca) = intercepting(&dir, &p, &[&origin.cert], None);
    assert!(
        std::fs::read_to_string(&ca)
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    let bundle = std::fs::read_to_string(ca.with_file_name("ca-bundle.pem")).unwrap();
    assert!(
        !bundle.contains("PRIVATE KEY")
            && !std::fs::read_to_string(&ca).unwrap().contains("PRIVATE")
    );
    let get = |path: &str| {
        run(Command::new("curl")
            .args(["-s", "--max-time", "20", "--cacert"])
            .arg(&ca)
            .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"])
            .arg(format!("https://127.0.0.1:{}{path}", origin.port())))
    };
    let (code, out, err) = get("/");
    assert_eq!(
        (code, out.as_str()),
        (0, "hello over tls\n\n200"),
        "{err}\n{}",
        sluice.stderr()
    );
    let (_, out, _) = get("/bytes/5");
    assert!(out.ends_with("yyyyy\n200"), "{out}");
    let (_, out, _) = get("/secret?token=abc");
    let (body, status) = out.rsplit_once('\n').unwrap();
    assert_eq!(status, "403", "{out}");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["error"], "policy_denied");
    assert_eq!(body["stage"], "l7");
    assert!(
        body["detail"].as_str().unwrap().contains("GET 127.0.0.1:"),
        "{body}"
    );
    let denied = sluice.wait_event("denied request", |e| class(e) == 4002 && action(e) == 2);
    assert_eq!(denied["http_request"]["url"]["path"], "/secret");
    assert!(
        !denied.to_string().contains("token=abc"),
        "query leaked: {denied}"
    );
    // Every inspected tunnel that was admitted also closes in the audit, with the bytes the
    // client sent and received (TLS records included).
    let admitted = |evs: &[Value]| evs.iter().filter(|e| is_open(e) && action(e) == 1).count();
    let deadline = Instant::now() + Duration::from_secs(5);
    let closes = loop {
        let evs = sluice.events();
        let closes: Vec<Value> = evs.iter().filter(|e| is_close(e)).cloned().collect();
        if closes.len() >= admitted(&evs) || Instant::now() > deadline {
            assert_eq!(closes.len(), admitted(&evs), "{evs:?}");
            break closes;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!closes.is_empty());
    for c in &closes {
        assert_eq!(c["firewall_rule"]["type"], "l7", "{c}");
        assert!(c["traffic"]["bytes_in"].as_u64().unwrap_or(0) > 100, "{c}");
        assert!(c["traffic"]["bytes_out"].as_u64().unwrap_or(0) > 100, "{c}");
    }
    assert_events_valid(&sluice);
}

#[test]
fn http2_is_inspected_end_to_end_and_http1_clients_stay_on_http1() {
    let dir = TempDir::new("h2");
    let origin = sluice_e2e::origin::H2Origin::start(dir.path());
    let p = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /ok/**}}\n          - allow: {{method: POST, path: /upload}}\n    binaries:\n      - path: /usr/bin/curl\n",
        origin.port()
    );
    let (sluice, ca) = intercepting(&dir, &p, &[&origin.cert], None);
    let curl = |extra: &[&str], path: &str| {
        run(Command::new("curl")
            .args(["-s", "--max-time", "20", "--cacert"])
            .arg(&ca)
            .args([
                "-x",
                &sluice.proxy_url(),
                "-w",
                "%{http_code} h%{http_version}",
            ])
            .args(extra)
            .arg(format!("https://127.0.0.1:{}{path}", origin.port())))
    };
    // HTTP/2 on both legs: the origin saw HTTP/2, curl negotiated HTTP/2 with sluice.
    let (code, out, err) = curl(&["--http2"], "/ok/a?x=1");
    assert_eq!(code, 0, "{err}\n{}", sluice.stderr());
    assert!(
        out.starts_with("proto=2.0 method=GET path=/ok/a?x=1"),
        "{out}"
    );
    assert!(out.ends_with("200 h2"), "{out}");
    // A streamed upload over HTTP/2.
    let (_, out, _) = curl(&["--http2", "--data-binary", "@-"], "/upload");
    assert!(out.contains("method=POST path=/upload"), "{out}");
    // Refused on its own stream.
    let (_, out, _) = curl(&["--http2"], "/admin");
    assert!(out.ends_with("403 h2"), "{out}");
    assert!(out.contains("\"error\":\"policy_denied\""), "{out}");
    // An HTTP/1.1-only client gets HTTP/1.1 on both legs.
    let (_, out, _) = curl(&["--http1.1"], "/ok/b");
    assert!(out.starts_with("proto=1.1 method=GET path=/ok/b"), "{out}");
    assert!(out.ends_with("200 h1.1"), "{out}");
    assert_events_valid(&sluice);
}

#[test]
fn placeholders_become_secrets_only_where_bound() {
    let dir = TempDir::new("creds");
    let (d1, d2) = (dir.path().join("one"), dir.path().join("two"));
    std::fs::create_dir_all(&d1).unwrap();
    std::fs::create_dir_all(&d2).unwrap();
    let origin = sluice_e2e::origin::H2Origin::start(&d1);
    let other = sluice_e2e::origin::H2Origin::start(&d2);
    let p = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: /usr/bin/curl\n      - path: {}\n",
        origin.port(),
        other.port(),
        python()
    );
    let providers = dir.write(
        "providers.yaml",
        &format!(
            "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\nendpoints:\n  - host: 127.0.0.1\n    port: {}\n",
            origin.port()
        ),
    );
    let (sluice, ca) = intercepting(&dir, &p, &[&origin.cert, &other.cert], Some(&providers));
    let curl = |port: u16, header: &str, path: &str, http: &str| {
        run(Command::new("curl")
            .args(["-s", "--max-time", "20", http, "--cacert"])
            .arg(&ca)
            .args([
                "-x",
                &sluice.proxy_url(),
                "-w",
                "\n%{http_code}",
                "-H",
                header,
            ])
            .arg(format!("https://127.0.0.1:{port}{path}")))
        .1
    };
    // Bound: the origin receives the secret, the client never sees it.
    for http in ["--http1.1", "--http2"] {
        let out = curl(
            origin.port(),
            "Authorization: Bearer openshell:resolve:env:TEST_API_KEY",
            "/v1/x",
            http,
        );
        assert!(out.ends_with("200"), "{http}: {out}\n{}", sluice.stderr());
        assert!(!out.contains(SECRET), "the client saw the secret: {out}");
    }
    let got = origin.received();
    assert_eq!(got.len(), 2, "{got:?}");
    for r in &got {
        assert_eq!(
            r["headers"]["authorization"],
            format!("Bearer {SECRET}"),
            "{r}"
        );
    }
    // The same placeholder on another endpoint: refused, and a finding recorded.
    let out = curl(
        other.port(),
        "Authorization: Bearer openshell:resolve:env:TEST_API_KEY",
        "/v1/x",
        "--http1.1",
    );
    assert!(out.ends_with("403"), "{out}");
    assert!(
        out.contains("\"error\":\"credential_endpoint_mismatch\""),
        "{out}"
    );
    assert!(
        other.received().is_empty(),
        "the other origin got the request: {:?}",
        other.received()
    );
    sluice.wait_event("finding", |e| class(e) == 2004);
    // An unknown placeholder: 500, nothing sent.
    let out = curl(
        origin.port(),
        "X-Key: openshell:resolve:env:NO_SUCH_KEY",
        "/v1/y",
        "--http1.1",
    );
    assert!(out.ends_with("500"), "{out}");
    assert!(
        out.contains("\"error\":\"credential_unavailable\""),
        "{out}"
    );
    assert_eq!(origin.received().len(), 2);
    // A placeholder in a body to a credentialed endpoint without body rewriting never
    // reaches the upstream, whole or split across chunks, over HTTP/1.1 and HTTP/2.
    for http in ["--http1.1", "--http2"] {
        let out = run(Command::new("curl")
            .args(["-s", "--max-time", "20", http, "--cacert"])
            .arg(&ca)
            .args([
                "-x",
                &sluice.proxy_url(),
                "-w",
                "\n%{http_code}",
                "--data-binary",
                "token=openshell:resolve:env:TEST_API_KEY",
            ])
            .arg(format!("https://127.0.0.1:{}/v1/upload", origin.port())))
        .1;
        assert!(out.ends_with("403"), "{http}: {out}");
        assert!(out.contains("credential_in_body"), "{http}: {out}");
    }
    let split = format!(
        "import http.client, ssl, time\nctx = ssl.create_default_context(cafile={ca:?})\nc = http.client.HTTPSConnection('127.0.0.1', {sport}, context=ctx, timeout=20)\nc.set_tunnel('127.0.0.1', {port})\nc.putrequest('POST', '/v1/split')\nc.putheader('Transfer-Encoding', 'chunked')\nc.endheaders()\ntry:\n    for part in [b'{{\"x\": \"openshell:res', b'olve:env:TEST_API_KEY\"}}']:\n        c.send(b'%x\\r\\n%s\\r\\n' % (len(part), part))\n        time.sleep(0.3)\n    c.send(b'0\\r\\n\\r\\n')\n    print(c.getresponse().status)\nexcept Exception as e:\n    print('reset', type(e).__name__)\n",
        ca = ca.display().to_string(),
        port = origin.port(),
        sport = sluice.addr().port(),
    );
    let (_, out, err) = run(Command::new(python()).arg("-c").arg(&split));
    assert!(
        out.starts_with("403") || out.starts_with("reset"),
        "{out}{err}"
    );
    assert!(
        origin
            .received()
            .iter()
            .all(|r| !r["body"].as_str().unwrap_or_default().contains("openshell")),
        "{:?}",
        origin.received()
    );
    // No secret in the audit log, sluice's own output, or any file sluice wrote (its audit
    // directory, the CA directory).
    let audit = std::fs::read_to_string(&sluice.audit_path).unwrap();
    assert!(!audit.contains(SECRET) && !sluice.stderr().contains(SECRET));
    for d in [sluice.audit_path.parent().unwrap(), ca.parent().unwrap()] {
        for f in std::fs::read_dir(d).unwrap().flatten() {
            let bytes = std::fs::read(f.path()).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(SECRET),
                "the secret is in {}",
                f.path().display()
            );
        }
    }
    assert!(
        audit.contains("test-api/api-key"),
        "credential names are audited"
    );
    assert_events_valid(&sluice);
}

#[test]
fn the_demo_shows_a_swap_and_two_refusals() {
    let (code, out, err) = run(Command::new(sluice_e2e::sluice_bin()).arg("demo"));
    assert_eq!(code, 0, "{out}\n{err}");
    let step = |n: &str| {
        let start = out
            .find(n)
            .unwrap_or_else(|| panic!("no step {n} in:\n{out}"));
        out[start..]
            .split("\n\n")
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let one = step("1. ");
    assert!(one.contains("client got 200"), "{one}");
    assert!(
        one.contains("origin got GET /v1/hello Authorization: Bearer demo-"),
        "{one}"
    );
    assert!(
        one.contains("credentials_injected:demo-api/api-key"),
        "{one}"
    );
    let two = step("2. ");
    assert!(
        two.contains("client got 403") && two.contains("origin got nothing"),
        "{two}"
    );
    assert!(two.contains("HTTP:DELETE [MED] DENIED"), "{two}");
    let three = step("3. ");
    assert!(
        three.contains("403 Forbidden") && three.contains("origin got nothing"),
        "{three}"
    );
    assert!(three.contains("NET:OPEN [MED] DENIED"), "{three}");
}

/// A one-shot WebSocket echo server (Python, raw sockets): handshake, then echo one text
/// frame back, then close.
const WS_SERVER: &str = r#"
import base64, hashlib, socket, sys
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(5)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    data = b''
    while b'\r\n\r\n' not in data:
        data += c.recv(4096)
    head, rest = data.split(b'\r\n\r\n', 1)
    key = [l.split(b':', 1)[1].strip() for l in head.split(b'\r\n') if l.lower().startswith(b'sec-websocket-key')][0]
    accept = base64.b64encode(hashlib.sha1(key + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())
    c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + b'\r\n\r\n')
    buf = rest
    while len(buf) < 2: buf += c.recv(4096)
    n = buf[1] & 0x7f
    while len(buf) < 6 + n: buf += c.recv(4096)
    mask, payload = buf[2:6], buf[6:6+n]
    text = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    c.sendall(bytes([0x81, len(text)]) + text)
    c.close()
"#;

#[test]
fn websocket_upgrades_are_judged_as_get_and_relayed_after_a_valid_101() {
    let mut server = Command::new("python3")
        .args(["-c", WS_SERVER])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let port: u16 = line.trim().parse().unwrap();
    let p = format!(
        "version: 1\nnetwork_policies:\n  ws:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}, protocol: rest, enforcement: enforce, rules: [{{allow: {{method: GET, path: /ws}}}}]}}\n    binaries:\n      - path: {}\n",
        me()
    );
    let sluice = Sluice::start(&p, &["--allow-loopback-upstream"]);
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET http://127.0.0.1:{port}/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).unwrap(),
            1,
            "{}",
            String::from_utf8_lossy(&head)
        );
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{head}");
    // A masked text frame out, the echo back, raw through sluice.
    let text = b"hi over ws";
    let mask = [1u8, 2, 3, 4];
    let mut frame = vec![0x81, 0x80 | u8::try_from(text.len()).unwrap()];
    frame.extend_from_slice(&mask);
    frame.extend(text.iter().enumerate().map(|(i, c)| c ^ mask[i % 4]));
    s.write_all(&frame).unwrap();
    let mut echo = [0u8; 12];
    s.read_exact(&mut echo).unwrap();
    assert_eq!(&echo[2..], text);
    // A POST with the same headers is not a handshake: the rules refuse it.
    let out = sluice.raw(format!("POST http://127.0.0.1:{port}/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\r\n").as_bytes());
    assert_eq!(status_of(&out), 403, "{out}");
    let _ = server.kill();
    let _ = server.wait();
    assert_events_valid(&sluice);
}

#[test]
fn a_gigabyte_streams_both_ways_in_constant_memory_and_sse_events_arrive_as_sent() {
    let dir = TempDir::new("stream");
    let origin = sluice_e2e::origin::H2Origin::start(dir.path());
    let p = format!(
        "version: 1\nnetwork_policies:\n  big:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: /usr/bin/curl\n",
        origin.port()
    );
    let (sluice, ca) = intercepting(&dir, &p, &[&origin.cert], None);
    const GIB: u64 = 1 << 30;
    let base = format!("https://127.0.0.1:{}", origin.port());
    let proxy = sluice.proxy_url();
    // Download: 1 GiB through TLS termination on both legs.
    let (code, out, err) = run(Command::new("curl")
        .args(["-sS", "--http1.1", "--max-time", "300", "--cacert"])
        .arg(&ca)
        .args(["-x", &proxy, "-o", "/dev/null", "-w", "%{size_download}"])
        .arg(format!("{base}/bytes/{GIB}")));
    assert_eq!((code, out.trim()), (0, GIB.to_string().as_str()), "{err}");
    // Upload: 1 GiB streamed from stdin (chunked), counted by the origin.
    let upload = format!(
        "head -c {GIB} /dev/zero | curl -sS --http1.1 --max-time 300 --cacert {} -x {proxy} -T - {base}/count",
        ca.display()
    );
    let (code, out, err) = run(Command::new("sh").args(["-c", &upload]));
    assert_eq!(
        (code, out.trim()),
        (0, format!("count={GIB}").as_str()),
        "{err}"
    );
    let peak = sluice.peak_rss_kib();
    assert!(
        peak > 0 && peak < 64 * 1024,
        "sluice's peak RSS was {peak} KiB"
    );
    // Server-sent events: each arrives when sent (1 s apart), not all at the end.
    assert_sse_streams(&proxy, &ca, &format!("{base}/sse"), "--http1.1");
}

#[test]
fn opted_in_bodies_get_the_secret_and_a_fixed_length() {
    let dir = TempDir::new("bodyrw");
    let origin = sluice_e2e::origin::H2Origin::start(dir.path());
    let p = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full, request_body_credential_rewrite: true}}\n    binaries:\n      - path: /usr/bin/curl\n",
        origin.port()
    );
    let providers = dir.write(
        "providers.yaml",
        &format!("id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\nendpoints:\n  - host: 127.0.0.1\n    port: {}\n", origin.port()),
    );
    let (sluice, ca) = intercepting(&dir, &p, &[&origin.cert], Some(&providers));
    let body = r#"{"token":"openshell:resolve:env:TEST_API_KEY","n":1}"#;
    let (code, out, err) = run(Command::new("curl")
        .args(["-sS", "--http1.1", "--max-time", "20", "--cacert"])
        .arg(&ca)
        .args([
            "-x",
            &sluice.proxy_url(),
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ])
        .arg(format!("https://127.0.0.1:{}/v1/json", origin.port())));
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains(SECRET), "{out}");
    let got = origin.received();
    let r = got.last().unwrap();
    let expected = format!(r#"{{"token":"{SECRET}","n":1}}"#);
    assert_eq!(r["body"], expected, "{r}");
    assert_eq!(
        r["headers"]["content-length"],
        expected.len().to_string(),
        "{r}"
    );
    assert!(
        !std::fs::read_to_string(&sluice.audit_path)
            .unwrap()
            .contains(SECRET)
    );
    assert_events_valid(&sluice);
}

/// The 403 of an L7 denial tells the agent what was refused and by what, in the fields the
/// reference's body carries, the same over HTTP/1.1 and HTTP/2.
#[test]
fn an_l7_refusal_names_the_rule_missing_and_the_next_steps_over_http1_and_http2() {
    let dir = TempDir::new("l7body");
    let origin = sluice_e2e::origin::H2Origin::start(dir.path());
    let port = origin.port();
    let p = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /ok/**}}\n        deny_rules:\n          - {{method: GET, path: /ok/private/**}}\n    binaries:\n      - path: /usr/bin/curl\n"
    );
    let (sluice, ca) = intercepting(&dir, &p, &[&origin.cert], None);
    let curl = curl_via(&sluice, &ca);
    let exe = std::fs::canonicalize("/usr/bin/curl").unwrap();
    let exe = exe.to_str().unwrap();
    for (http, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let (_, out, err) = curl(
            &[http, "-X", "POST"],
            &format!("https://127.0.0.1:{port}/ok/a?token=abc"),
        );
        let (body, status) = out.rsplit_once('\n').unwrap();
        assert_eq!(status, format!("403 {version}"), "{out}\n{err}");
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"], "policy_denied", "{body}");
        assert_eq!(body["layer"], "l7");
        assert_eq!(body["policy"], "api");
        assert_eq!(body["method"], "POST");
        assert_eq!(body["path"], "/ok/a");
        assert_eq!(body["host"], "127.0.0.1");
        assert_eq!(body["port"], port);
        assert_eq!(body["binary"], exe);
        assert!(body["detail"].as_str().unwrap().contains("POST 127.0.0.1:"));
        assert_eq!(body["rule_missing"]["type"], "rest_allow");
        assert_eq!(body["rule_missing"]["method"], "POST");
        assert_eq!(body["rule_missing"]["path"], "/ok/a");
        assert_eq!(body["rule_missing"]["host"], "127.0.0.1");
        assert_eq!(body["rule_missing"]["port"], port);
        let steps = body["next_steps"].as_array().unwrap();
        assert!(
            steps
                .iter()
                .any(|s| s.as_str().unwrap().contains("{method: POST, path: /ok/a}")),
            "{body}"
        );
        assert!(
            !body.to_string().contains("token=abc"),
            "query echoed: {body}"
        );
        // The entry is named in a header too, as the reference does.
        let (_, head, _) = curl(
            &[http, "-X", "POST", "-o", "/dev/null", "-D", "-"],
            &format!("https://127.0.0.1:{port}/ok/a"),
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("x-openshell-policy: api\r\n"),
            "{head}"
        );
        // A deny rule is named as what blocks it.
        let (_, out, _) = curl(&[http], &format!("https://127.0.0.1:{port}/ok/private/x"));
        let (body, status) = out.rsplit_once('\n').unwrap();
        assert_eq!(status, format!("403 {version}"), "{out}");
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["rule"], "GET /ok/private/**", "{body}");
        assert!(
            body["next_steps"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s.as_str().unwrap().contains("deny rule")),
            "{body}"
        );
    }
    assert_events_valid(&sluice);
}

/// curl through `sluice` trusting `ca`: returns (exit code, body + "\n<status> <version>", stderr).
fn curl_via<'a>(
    sluice: &'a Sluice,
    ca: &'a Path,
) -> impl Fn(&[&str], &str) -> (i32, String, String) + 'a {
    move |extra, url| {
        run(Command::new("curl")
            .args(["-s", "--max-time", "20", "--cacert"])
            .arg(ca)
            .args([
                "-x",
                &sluice.proxy_url(),
                "-w",
                "\n%{http_code} %{http_version}",
            ])
            .args(extra)
            .arg(url))
    }
}
