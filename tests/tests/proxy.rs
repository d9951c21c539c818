//! End-to-end tests of `sluice run` as an explicit proxy: the real binary, real curl and
//! Python, real sockets and /proc, local origins on loopback (and, as root, a test host in a
//! network namespace the test creates). Every test checks that the audit events it caused
//! validate against the OCSF 1.8.0 schema.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::ocsf::{action, class, is_close, is_open};
use sluice_e2e::origin::{HttpOrigin, HttpsOrigin};
use sluice_e2e::proxy::{
    Sluice, TempDir, assert_events_valid, json_body, me, privileged, python, realpath, run,
    status_of,
};

fn curl() -> String {
    realpath("/usr/bin/curl")
}

fn policy(entries: &[(&str, &str, &[&str])]) -> String {
    let mut s = String::from("version: 1\nnetwork_policies:\n");
    for (key, endpoints, binaries) in entries {
        s.push_str(&format!("  {key}:\n    endpoints:\n"));
        for line in endpoints.lines() {
            s.push_str(&format!("      - {line}\n"));
        }
        s.push_str("    binaries:\n");
        for b in *binaries {
            s.push_str(&format!("      - path: {b}\n"));
        }
    }
    s
}

/// Python that sends `request` on a raw socket to the proxy and prints the answer.
fn python_raw(proxy: std::net::SocketAddr, request: &str) -> String {
    format!(
        "import socket; s = socket.create_connection(('{}', {})); s.sendall({request:?}.encode()); \
         d = b''\nwhile True:\n    c = s.recv(65536)\n    if not c: break\n    d += c\nprint(d.decode())",
        proxy.ip(),
        proxy.port()
    )
}

fn connect_request(host: &str, port: u16) -> String {
    format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n")
}

#[test]
fn curl_is_allowed_through_connect_and_python_is_denied_with_a_reason() {
    let dir = TempDir::new("connect");
    let origin = HttpsOrigin::start(dir.path());
    let p = policy(&[(
        "local_tls",
        &format!("{{host: 127.0.0.1, port: {}}}", origin.port()),
        &["/usr/bin/curl"],
    )]);
    let sluice = Sluice::start(&p, &["--allow-loopback-upstream"]);

    let (code, out, err) = run(Command::new("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(&origin.cert)
        .args(["-x", &sluice.proxy_url()])
        .arg(format!("https://127.0.0.1:{}/", origin.port())));
    assert_eq!(
        (code, out.as_str()),
        (0, "hello over tls\n"),
        "curl stderr: {err}\nsluice: {}",
        sluice.stderr()
    );

    let (_, out, _) = run(Command::new(python()).arg("-c").arg(python_raw(
        sluice.addr(),
        &connect_request("127.0.0.1", origin.port()),
    )));
    assert_eq!(status_of(&out), 403, "{out}");
    let body = json_body(&out);
    assert_eq!(body["error"], "policy_denied");
    assert_eq!(
        body["detail"],
        format!(
            "CONNECT 127.0.0.1:{} not permitted by policy",
            origin.port()
        )
    );
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(&format!(
            "binary '{}' not allowed in policy 'local_tls'",
            python()
        )),
        "{reason}"
    );
    assert!(out.contains("Content-Type: application/json"), "{out}");

    let allowed = sluice.wait_event("allowed open", |e| is_open(e) && action(e) == 1);
    assert_eq!(allowed["actor"]["process"]["path"], curl(), "{allowed:#}");
    assert_eq!(allowed["firewall_rule"]["name"], "local_tls");
    let denied = sluice.wait_event("denied open", |e| is_open(e) && action(e) == 2);
    assert_eq!(denied["actor"]["process"]["path"], python(), "{denied:#}");
    assert!(denied["actor"]["process"]["pid"].as_u64().unwrap_or(0) > 1);
    sluice.wait_event("close", is_close);
    assert_events_valid(&sluice);
}

#[test]
fn close_event_counts_the_bytes_the_client_received() {
    let origin = HttpOrigin::start();
    let p = policy(&[(
        "raw",
        &format!("{{host: 127.0.0.1, port: {}}}", origin.port()),
        &[&me()],
    )]);
    let sluice = Sluice::start(&p, &["--allow-loopback-upstream"]);
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(connect_request("127.0.0.1", origin.port()).as_bytes())
        .unwrap();
    let mut established = [0u8; 39];
    s.read_exact(&mut established).unwrap();
    assert_eq!(&established, b"HTTP/1.1 200 Connection Established\r\n\r\n");
    let request = b"GET /bytes/123456 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert!(got.ends_with(&[b'x'; 1000]));
    drop(s);
    let close = sluice.wait_event("close", is_close);
    // OCSF counts from the source's side: bytes_in reached the client, bytes_out left it.
    assert_eq!(
        close["traffic"]["bytes_in"].as_u64(),
        Some(got.len() as u64),
        "{close:#}"
    );
    assert_eq!(
        close["traffic"]["bytes_out"].as_u64(),
        Some(request.len() as u64),
        "{close:#}"
    );
    let opens: Vec<Value> = sluice.events().into_iter().filter(is_open).collect();
    assert_eq!(opens.len(), 1, "one open event per connection: {opens:#?}");
    assert_events_valid(&sluice);
}

#[test]
fn a_shell_ancestor_grants_python_and_a_double_fork_loses_it() {
    let origin = HttpOrigin::start();
    let p = policy(&[(
        "via_shell",
        &format!("{{host: 127.0.0.1, port: {}}}", origin.port()),
        &["/bin/sh"],
    )]);
    let sluice = Sluice::start(&p, &["--allow-loopback-upstream"]);
    let script = python_raw(
        sluice.addr(),
        &format!(
            "GET http://127.0.0.1:{}/ HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            origin.port(),
            origin.port()
        ),
    );
    // `; true` keeps sh alive as python's parent (no exec of the last command).
    let (_, out, err) = run(Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{} -c \"$S\"; true", python()))
        .env("S", &script));
    assert_eq!(status_of(&out), 200, "{out}{err}\n{}", sluice.stderr());

    // The same program after a double fork: reparented away from sh, it loses the grant.
    let double_fork = "import os, sys, time\nif os.fork() == 0:\n    if os.fork() == 0:\n        time.sleep(0.3)\n        exec(compile(sys.argv[1], 'c', 'exec'))\n        sys.exit(0)\n    os._exit(0)\nos.wait()\ntime.sleep(2)\n";
    let (_, out, err) = run(Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{} -c \"$D\" \"$S\"; true", python()))
        .env("D", double_fork)
        .env("S", &script));
    assert_eq!(status_of(&out), 403, "{out}{err}");
    assert!(
        json_body(&out)["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("not allowed in policy 'via_shell'"),
        "{out}"
    );
    assert_events_valid(&sluice);
}

#[test]
fn wildcard_hosts_and_port_lists() {
    let a = HttpOrigin::start();
    let b = HttpOrigin::start();
    let other = HttpOrigin::start();
    let p = policy(&[(
        "wild",
        &format!(
            "{{host: \"*.local.test\", ports: [{}, {}]}}",
            a.port(),
            b.port()
        ),
        &["/usr/bin/curl"],
    )]);
    let sluice = Sluice::start(
        &p,
        &[
            "--allow-loopback-upstream",
            "--resolve",
            "a.local.test=127.0.0.1",
            "--resolve",
            "x.y.local.test=127.0.0.1",
        ],
    );
    let get = |url: String| {
        run(Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "20",
                "-x",
                &sluice.proxy_url(),
            ])
            .arg(url))
        .1
    };
    assert_eq!(get(format!("http://a.local.test:{}/", a.port())), "200");
    assert_eq!(get(format!("http://a.local.test:{}/", b.port())), "200");
    assert_eq!(get(format!("http://a.local.test:{}/", other.port())), "403");
    assert_eq!(get(format!("http://x.y.local.test:{}/", a.port())), "403");
    assert_eq!(get(format!("http://local.test:{}/", a.port())), "403");
    assert_events_valid(&sluice);
}

#[test]
fn ipv6_loopback_clients_are_identified() {
    let origin = HttpOrigin::start();
    let p = policy(&[(
        "v6",
        &format!("{{host: 127.0.0.1, port: {}}}", origin.port()),
        &["/usr/bin/curl"],
    )]);
    let sluice = Sluice::start(&p, &["--allow-loopback-upstream", "--listen", "[::1]:0"]);
    assert!(sluice.addr().is_ipv6());
    let (code, out, err) = run(Command::new("curl")
        .args(["-sS", "--max-time", "20", "-x", &sluice.proxy_url()])
        .arg(format!("http://127.0.0.1:{}/", origin.port())));
    assert_eq!(
        (code, out.as_str()),
        (0, "hello from origin\n"),
        "{err}\n{}",
        sluice.stderr()
    );
    let event = sluice.wait_event("http request", |e| class(e) == 4002);
    assert_eq!(event["actor"]["process"]["path"], curl());
    assert_events_valid(&sluice);
}

#[test]
fn metadata_addresses_and_names_are_always_refused() {
    let p = policy(&[(
        "inside",
        "{host: 169.254.169.254, port: 80}\n{host: metadata.google.internal, port: 80}",
        &[&me()],
    )]);
    // Even the test switch for loopback does not open link-local or metadata.
    let sluice = Sluice::start(&p, &["--allow-loopback-upstream"]);
    for (target, kind) in [
        ("169.254.169.254:80", "internal address"),
        ("metadata.google.internal:80", "metadata"),
    ] {
        let (host, port) = target.split_once(':').unwrap();
        let out = sluice.raw(connect_request(host, port.parse().unwrap()).as_bytes());
        assert_eq!(status_of(&out), 403, "{target}: {out}");
        let body = json_body(&out);
        assert_eq!(body["error"], "ssrf_denied", "{target}: {out}");
        assert!(
            body["detail"].as_str().unwrap_or_default().contains(kind),
            "{target}: {out}"
        );
    }
    let ssrf = sluice.wait_event("ssrf denial", |e| {
        is_open(e) && e["firewall_rule"]["type"] == "ssrf"
    });
    assert_eq!(action(&ssrf), 2);
    assert_events_valid(&sluice);
}

#[test]
fn cloud_metadata_addresses_are_refused_whatever_allowed_ips_and_the_loopback_switch_say() {
    // Each provider's metadata address, reached three ways: through a name the policy
    // declares (--resolve supplies the answer), as an IP literal the policy declares, and in
    // its IPv4-mapped IPv6 form. (An `allowed_ips` network that holds one, as the internal
    // range around each does, is an error when the policy loads: the policy loading tests.) sluice refuses before dialling, so no
    // packet leaves loopback even when the test fails on a refusal that did not happen.
    let addresses = [
        "168.63.129.16",
        "100.100.100.200",
        "192.0.0.192",
        "fd00:ec2::254",
        "fd00:ec2::253",
        "fd20:ce::254",
    ];
    let mut endpoints = String::new();
    let mut args = vec!["--allow-loopback-upstream".to_owned()];
    for (i, ip) in addresses.iter().enumerate() {
        endpoints.push_str(&format!("{{host: meta{i}.test, port: 80}}\n"));
        endpoints.push_str(&format!("{{host: \"{ip}\", port: 80}}\n"));
        args.push("--resolve".to_owned());
        args.push(format!("meta{i}.test={ip}"));
    }
    endpoints.push_str("{host: \"::ffff:169.254.169.254\", port: 80}\n");
    endpoints.push_str("{host: \"::ffff:168.63.129.16\", port: 80}");
    let p = policy(&[("inside", &endpoints, &[&me()])]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sluice = Sluice::start(&p, &args);
    let mut targets: Vec<String> = (0..addresses.len())
        .map(|i| format!("meta{i}.test"))
        .collect();
    targets.extend(addresses.iter().map(|ip| ip.to_string()));
    targets.push("::ffff:169.254.169.254".to_owned());
    targets.push("::ffff:168.63.129.16".to_owned());
    for target in &targets {
        let host = if target.contains(':') {
            format!("[{target}]")
        } else {
            target.clone()
        };
        let out = sluice.raw(connect_request(&host, 80).as_bytes());
        assert_eq!(status_of(&out), 403, "{target}: {out}");
        let body = json_body(&out);
        assert_eq!(body["error"], "ssrf_denied", "{target}: {out}");
        assert!(
            body["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("always blocked"),
            "{target}: {out}"
        );
    }
    assert_events_valid(&sluice);
}

#[test]
fn upstream_down_is_502_and_a_silent_upstream_is_504_in_time() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = closed.local_addr().unwrap().port();
    drop(closed);
    let origin = HttpOrigin::start();
    let p = policy(&[(
        "local",
        &format!(
            "{{host: 127.0.0.1, ports: [{dead_port}, {}]}}",
            origin.port()
        ),
        &["/usr/bin/curl", &me()],
    )]);
    let sluice = Sluice::start(
        &p,
        &["--allow-loopback-upstream", "--upstream-timeout", "1s"],
    );
    let (_, out, _) = run(Command::new("curl")
        .args(["-s", "-i", "--max-time", "20", "-x", &sluice.proxy_url()])
        .arg(format!("http://127.0.0.1:{dead_port}/")));
    assert_eq!(status_of(&out), 502, "{out}");
    assert_eq!(json_body(&out)["error"], "upstream_unreachable");
    // CONNECT too: a status, not a dropped socket.
    let out = sluice.raw(connect_request("127.0.0.1", dead_port).as_bytes());
    assert_eq!(status_of(&out), 502, "{out}");

    let started = Instant::now();
    let (_, out, _) = run(Command::new("curl")
        .args(["-s", "-i", "--max-time", "20", "-x", &sluice.proxy_url()])
        .arg(format!("http://127.0.0.1:{}/silent", origin.port())));
    let took = started.elapsed();
    assert_eq!(status_of(&out), 504, "{out}");
    assert_eq!(json_body(&out)["error"], "upstream_timeout");
    assert!(took < Duration::from_secs(8), "504 took {took:?}");
    assert_events_valid(&sluice);
}

#[test]
fn malformed_and_oversized_requests_are_refused_and_others_still_served() {
    let origin = HttpOrigin::start();
    let p = policy(&[(
        "local",
        &format!("{{host: 127.0.0.1, port: {}}}", origin.port()),
        &["/usr/bin/curl", &me()],
    )]);
    let mut sluice = Sluice::start(&p, &["--allow-loopback-upstream"]);
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GARBAGE\r\n\r\n".to_vec(), 400),
        (b"GET http://127.0.0.1/ HTTP/1.1\nHost: x\n\n".to_vec(), 400),
        (format!("GET http://127.0.0.1:{}/ HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", origin.port()).into_bytes(), 400),
        (format!("GET http://127.0.0.1/ HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000)).into_bytes(), 431),
        (b"CONNECT no-port HTTP/1.1\r\n\r\n".to_vec(), 400),
        (b"GET https://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_vec(), 400),
        (b"GET /not-a-proxy-request HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), 400),
    ];
    for (bytes, want) in &cases {
        let out = sluice.raw(bytes);
        assert_eq!(
            status_of(&out),
            *want,
            "{:?} → {out}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
        );
    }
    assert!(sluice.is_running());
    let (code, out, _) = run(Command::new("curl")
        .args(["-sS", "--max-time", "20", "-x", &sluice.proxy_url()])
        .arg(format!("http://127.0.0.1:{}/", origin.port())));
    assert_eq!((code, out.as_str()), (0, "hello from origin\n"));
    assert_events_valid(&sluice);
    sluice.stop();
}

/// A plaintext HTTP origin behind an L7 (`protocol: rest`) endpoint, and sluice serving it
/// to curl and this test.
fn l7_http_origin() -> (HttpOrigin, Sluice) {
    let origin = HttpOrigin::start();
    let port = origin.port();
    let p = policy(&[(
        "local",
        &format!("{{host: 127.0.0.1, port: {port}, protocol: rest, access: full}}"),
        &["/usr/bin/curl", &me()],
    )]);
    (origin, Sluice::start(&p, &["--allow-loopback-upstream"]))
}

/// Framing two parsers could read differently (CL+TE, two Content-Lengths even if equal,
/// obs-fold, a bare LF) is refused with 400 wherever the request comes: as the first on a
/// proxy connection, as a later one on a kept-alive connection, and inside a CONNECT tunnel;
/// and each is reported as a request smuggling attempt (a Detection Finding naming the
/// tunnel's destination), which a merely malformed request is not.
#[test]
fn ambiguous_framing_is_refused_and_reported_as_smuggling() {
    let (origin, sluice) = l7_http_origin();
    let port = origin.port();
    let url = format!("http://127.0.0.1:{port}/");
    let smuggles = [
        format!(
            "POST {url} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        ),
        format!(
            "POST {url} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"
        ),
        format!("GET {url} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-A: 1\r\n folded\r\n\r\n"),
        format!("GET {url} HTTP/1.1\nHost: 127.0.0.1:{port}\n\n"),
    ];
    let good = format!("GET {url} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let findings = || {
        sluice
            .events()
            .into_iter()
            .filter(|e| {
                class(e) == 2004 && e["finding_info"]["types"][0] == "sluice.http.request_smuggling"
            })
            .collect::<Vec<_>>()
    };
    let mut want = 0;
    for smuggle in &smuggles {
        // The first request of a connection.
        let out = sluice.raw(smuggle.as_bytes());
        assert_eq!(status_of(&out), 400, "{smuggle:?} → {out}");
        // A later one on a kept-alive connection.
        let mut both = good.clone().into_bytes();
        both.extend_from_slice(smuggle.as_bytes());
        let out = sluice.raw(&both);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert_eq!(
            out.matches("HTTP/1.1 400").count(),
            1,
            "{smuggle:?} → {out}"
        );
        // Inside a tunnel (plaintext HTTP to an L7 endpoint, inspected).
        let mut tunnelled = connect_request("127.0.0.1", port).into_bytes();
        tunnelled.extend_from_slice(good.replace(&url, "/").as_bytes());
        tunnelled.extend_from_slice(smuggle.replace(&url, "/").as_bytes());
        let out = sluice.raw(&tunnelled);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert_eq!(
            out.matches("HTTP/1.1 400").count(),
            1,
            "{smuggle:?} → {out}"
        );
        want += 3;
        let deadline = Instant::now() + Duration::from_secs(10);
        while findings().len() < want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(findings().len(), want, "{smuggle:?}");
    }
    let named = format!("127.0.0.1:{port}");
    let tunnel = findings()
        .into_iter()
        .find(|f| f["unmapped"]["destination"] == named.as_str())
        .expect("a finding names the tunnel's destination");
    assert_eq!(tunnel["firewall_rule"]["type"], "http", "{tunnel:#}");
    assert!(
        tunnel["message"]
            .as_str()
            .is_some_and(|m| m.contains("ambiguous framing")),
        "{tunnel:#}"
    );
    // Malformed without ambiguity: refused, not reported as smuggling.
    let out = sluice.raw(b"GARBAGE\r\n\r\n");
    assert_eq!(status_of(&out), 400, "{out}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(findings().len(), want);
    assert_events_valid(&sluice);
}

/// A tunnel to an L7 endpoint that carries neither TLS nor HTTP/1 (HTTP/2 with prior
/// knowledge, or another protocol) is answered `403 unsupported_l7_protocol`, saying which,
/// not closed without a word.
#[test]
fn a_tunnel_that_is_not_http_1_to_an_l7_endpoint_is_told_why() {
    let (origin, sluice) = l7_http_origin();
    let port = origin.port();
    for (sent, detail) in [
        (
            &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
            "HTTP/2 prior-knowledge (h2c) is not supported",
        ),
        (
            &b"SSH-2.0-OpenSSH_9.2\r\n"[..],
            "Unsupported tunnel protocol",
        ),
    ] {
        let mut bytes = connect_request("127.0.0.1", port).into_bytes();
        bytes.extend_from_slice(sent);
        let out = sluice.raw(&bytes);
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        let answer = &out[out.find("\r\n\r\n").unwrap() + 4..];
        assert_eq!(status_of(answer), 403, "{out}");
        assert!(
            answer.contains("\"error\":\"unsupported_l7_protocol\""),
            "{out}"
        );
        assert!(answer.contains(detail), "{out}");
    }
    assert_events_valid(&sluice);
}

#[test]
fn forward_proxy_strips_hop_by_hop_headers_and_keeps_connections_alive() {
    let origin = HttpOrigin::start();
    let p = policy(&[(
        "local",
        &format!("{{host: 127.0.0.1, port: {}}}", origin.port()),
        &[&me()],
    )]);
    let sluice = Sluice::start(&p, &["--allow-loopback-upstream"]);
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for i in 0..3 {
        let req = format!(
            "GET http://127.0.0.1:{}/echo/{i}?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-End: 2\r\n\r\n",
            origin.port(),
            origin.port()
        );
        s.write_all(req.as_bytes()).unwrap();
        let want = format!("GET /echo/{i}?q=1 HTTP/1.1\n");
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !String::from_utf8_lossy(&got).ends_with(&want) {
            assert_eq!(
                s.read(&mut byte).unwrap(),
                1,
                "connection closed early: {}",
                String::from_utf8_lossy(&got)
            );
            got.push(byte[0]);
        }
    }
    let received = origin.received();
    assert_eq!(received.len(), 3);
    for r in &received {
        assert_eq!(r.header("x-end"), Some("2"));
        assert_eq!(r.header("proxy-authorization"), None);
        assert_eq!(r.header("proxy-connection"), None);
        assert_eq!(r.header("x-hop"), None);
        assert_eq!(
            r.header("host"),
            Some(format!("127.0.0.1:{}", origin.port()).as_str())
        );
    }
    assert_events_valid(&sluice);
}

#[test]
fn a_private_address_passes_only_with_allowed_ips() {
    if !privileged("a_private_address_passes_only_with_allowed_ips") {
        return;
    }
    let host = sluice_e2e::netns::TestHost::start("ips").expect("test host");
    let p = format!(
        "version: 1\nnetwork_policies:\n  open:\n    endpoints:\n      - {{host: private.test, port: {port}, allowed_ips: [\"{net}\"]}}\n    binaries:\n      - path: /usr/bin/curl\n  closed:\n    endpoints:\n      - {{host: other.test, port: {port}}}\n      - {{host: \"*.wild.test\", port: {port}}}\n    binaries:\n      - path: /usr/bin/curl\n",
        port = host.port,
        net = host.network
    );
    let ip = host.ip.to_string();
    let sluice = Sluice::start(
        &p,
        &[
            "--resolve",
            &format!("private.test={ip}"),
            "--resolve",
            &format!("other.test={ip}"),
            "--resolve",
            &format!("a.wild.test={ip}"),
        ],
    );
    let get = |name: &str| {
        run(Command::new("curl")
            .args(["-s", "-i", "--max-time", "20", "-x", &sluice.proxy_url()])
            .arg(format!("http://{name}:{}/", host.port)))
        .1
    };
    let out = get("private.test");
    assert_eq!(status_of(&out), 200, "{out}\n{}", sluice.stderr());
    assert!(out.contains("hello from the test host"), "{out}");
    // A name resolving to a private address is refused without allowed_ips, whether the
    // policy names it exactly or by a wildcard.
    for name in ["other.test", "a.wild.test"] {
        let out = get(name);
        assert_eq!(status_of(&out), 403, "{name}: {out}");
        let body = json_body(&out);
        assert_eq!(body["error"], "ssrf_denied");
        assert!(
            body["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("internal address"),
            "{out}"
        );
    }
    assert_events_valid(&sluice);
}

#[test]
fn connection_limit_refuses_clearly_and_slow_heads_time_out() {
    let origin = HttpOrigin::start();
    let p = policy(&[(
        "local",
        &format!("{{host: 127.0.0.1, port: {}}}", origin.port()),
        &["/usr/bin/curl"],
    )]);
    let sluice = Sluice::start(
        &p,
        &[
            "--allow-loopback-upstream",
            "--max-connections",
            "2",
            "--head-timeout",
            "1s",
        ],
    );
    // Two clients that never finish their head hold both slots.
    let mut idle: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(sluice.addr()).unwrap())
        .collect();
    for s in &mut idle {
        s.write_all(b"GET http://127.0.0.1/ HTTP/1.1\r\n").unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let out = sluice.raw(b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    assert_eq!(status_of(&out), 503, "{out}");
    assert_eq!(json_body(&out)["error"], "too_many_connections");
    // The slow ones get 408 once the head timeout passes, and their slots free up.
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        assert_eq!(status_of(&text), 408, "{text}");
    }
    let (code, out, _) = run(Command::new("curl")
        .args(["-sS", "--max-time", "20", "-x", &sluice.proxy_url()])
        .arg(format!("http://127.0.0.1:{}/", origin.port())));
    assert_eq!((code, out.as_str()), (0, "hello from origin\n"));
    assert_events_valid(&sluice);
}

#[test]
fn the_accept_loop_survives_running_out_of_file_descriptors() {
    let origin = HttpOrigin::start();
    let p = policy(&[(
        "local",
        &format!("{{host: 127.0.0.1, port: {}}}", origin.port()),
        &["/usr/bin/curl"],
    )]);
    let sluice = Sluice::start_with_fd_limit(&p, &["--allow-loopback-upstream"], 64);
    // Far more connections than descriptors: some wait in the kernel's queue.
    let held: Vec<TcpStream> = (0..120)
        .filter_map(|_| TcpStream::connect(sluice.addr()).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    drop(held);
    std::thread::sleep(Duration::from_millis(500));
    let (code, out, err) = run(Command::new("curl")
        .args(["-sS", "--max-time", "20", "-x", &sluice.proxy_url()])
        .arg(format!("http://127.0.0.1:{}/", origin.port())));
    assert_eq!(
        (code, out.as_str()),
        (0, "hello from origin\n"),
        "{err}\n{}",
        sluice.stderr()
    );
    assert!(
        sluice.stderr().contains("accept failed"),
        "expected sluice to have hit the fd limit:\n{}",
        sluice.stderr()
    );
}

#[test]
fn one_trailing_dot_names_the_same_host_and_other_empty_labels_are_refused() {
    let origin = HttpOrigin::start();
    // The policy writes one host with a trailing dot and one without.
    let p = policy(&[(
        "dotted",
        &format!(
            "{{host: api.local.test, port: {0}}}\n{{host: \"dl.local.test.\", port: {0}}}",
            origin.port()
        ),
        &["/usr/bin/curl"],
    )]);
    let sluice = Sluice::start(
        &p,
        &[
            "--allow-loopback-upstream",
            "--resolve",
            "api.local.test=127.0.0.1",
            "--resolve",
            "dl.local.test=127.0.0.1",
        ],
    );
    let get = |url: String| {
        run(Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "20",
                "-x",
                &sluice.proxy_url(),
            ])
            .arg(url))
        .1
    };
    let port = origin.port();
    // Forward proxy: the trailing dot is dropped before policy and before --resolve (DNS).
    assert_eq!(get(format!("http://api.local.test.:{port}/")), "200");
    assert_eq!(get(format!("http://dl.local.test:{port}/")), "200");
    assert_eq!(get(format!("http://api.local.test:{port}/")), "200");
    // Two dots, or an empty label elsewhere: refused before policy.
    assert_eq!(get(format!("http://api.local.test..:{port}/")), "400");
    assert_eq!(get(format!("http://api..local.test:{port}/")), "400");
    // CONNECT to the dotted name (curl -p tunnels through CONNECT) is admitted too.
    let (_, code, _) = run(Command::new("curl")
        .args([
            "-s",
            "-p",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "20",
            "-x",
            &sluice.proxy_url(),
        ])
        .arg(format!("http://api.local.test.:{port}/")));
    assert_eq!(code, "200");
    assert_events_valid(&sluice);
}

#[test]
fn listen_accepts_localhost_and_inspected_endpoints_without_ca_dir_say_where_the_ca_is() {
    // A free port, then `--listen localhost:PORT`.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("localhost:{port}");
    let p = policy(&[(
        "inspected",
        "{host: api.local.test, port: 443, protocol: rest, enforcement: enforce, access: read-only}",
        &["/usr/bin/curl"],
    )]);
    let sluice = Sluice::start(&p, &["--listen", &listen]);
    assert_eq!(
        sluice.addr(),
        std::net::SocketAddr::from(([127, 0, 0, 1], port))
    );
    let err = sluice.stderr();
    assert!(
        err.contains("1 endpoint(s) are inspected") && err.contains("pass --ca-dir DIR"),
        "{err}"
    );
    // With --ca-dir, no note: the files are written and named.
    let dir = TempDir::new("ca");
    let ca = dir.path().display().to_string();
    let with_ca = Sluice::start(&p, &["--ca-dir", &ca]);
    let err = with_ca.stderr();
    assert!(!err.contains("pass --ca-dir"), "{err}");
    assert!(err.contains("CA certificate in"), "{err}");
}
