//! Where HTTP/1.1 and HTTP/2 once drifted apart, each checked over both protocols (curl
//! `--http1.1` and `--http2` in an inspected tunnel, the origin naming the protocol it was
//! reached over): the upstream timeout counts from the end of the upload (and still holds
//! after it); the `Host` sent
//! upstream leaves out the scheme's default port, as `:authority` does; an upstream whose
//! TLS fails after the client's `200` is answered `502` with the reason, audited, and the
//! tunnel gets one open event, not two. And on HTTP/1.1's keep-alive loop (HTTP/2 has none),
//! a later malformed head or `CONNECT` is audited like the first; inside an inspected tunnel,
//! over both protocols, a later refused request is audited too (and, over HTTP/1.1, a later
//! malformed head).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use sluice_e2e::ocsf::{class, is_close, is_open};
use sluice_e2e::origin::{H2Origin, HttpOrigin, streaming_origin};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, me, privileged, run};

#[derive(Clone, Copy, Debug)]
enum Http {
    H1,
    H2,
}

impl Http {
    fn flag(self) -> &'static str {
        match self {
            Http::H1 => "--http1.1",
            Http::H2 => "--http2",
        }
    }

    fn origin_version(self) -> &'static str {
        match self {
            Http::H1 => "1.1",
            Http::H2 => "2.0",
        }
    }
}

/// curl through sluice: (status, body).
fn curl(sluice: &Sluice, ca: &Path, http: Http, extra: &[&str], url: &str) -> (u16, String) {
    let (code, out, err) = run(Command::new("curl")
        .args(["-s", "--max-time", "30", http.flag(), "--cacert"])
        .arg(ca)
        .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"])
        .args(extra)
        .arg(url));
    assert_eq!(code, 0, "curl {url}: {out}\n{err}\n{}", sluice.stderr());
    let (body, status) = out.rsplit_once('\n').unwrap();
    (status.parse().unwrap(), body.to_string())
}

/// A policy inspecting every request to `host:port`, for curl.
fn inspected(host: &str, port: u16) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {{host: \"{host}\", port: {port}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: /usr/bin/curl\n"
    )
}

/// An upload that takes longer than the upstream timeout is not the upstream's delay: the
/// clock starts when the body has gone up (it once started with the request over HTTP/2).
fn slow_upload(http: Http) {
    let dir = TempDir::new(&format!("drift-upload-{http:?}").to_ascii_lowercase());
    let origin = H2Origin::start(dir.path());
    let policy = inspected("127.0.0.1", origin.port());
    let (sluice, ca) = Sluice::intercepting_with(
        &dir,
        &policy,
        &[&origin.cert],
        None,
        &[],
        &["--upstream-timeout", "2s"],
    );
    let upload = dir.write("upload.bin", &"u".repeat(12 * 1024));
    // 12 KiB at 3 KiB/s: about 4 s, twice the timeout.
    let (status, body) = curl(
        &sluice,
        &ca,
        http,
        &[
            "--limit-rate",
            "3K",
            "--data-binary",
            &format!("@{}", upload.display()),
        ],
        &format!("https://127.0.0.1:{}/slow-up", origin.port()),
    );
    assert_eq!(status, 200, "{body}\n{}", sluice.stderr());
    assert!(
        body.starts_with(&format!(
            "proto={} method=POST path=/slow-up body=12288",
            http.origin_version()
        )),
        "{body}"
    );
    // The timeout still holds from the end of the body: a request with none, or with one,
    // to an origin that never answers is refused 504 in about the timeout.
    for extra in [&[][..], &["--data-binary", "x"][..]] {
        let started = std::time::Instant::now();
        let (status, body) = curl(
            &sluice,
            &ca,
            http,
            extra,
            &format!("https://127.0.0.1:{}/silent", origin.port()),
        );
        assert_eq!(status, 504, "{body}");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
    assert_events_valid(&sluice);
}

#[test]
fn a_slow_upload_is_not_an_upstream_timeout_over_http1_1() {
    slow_upload(Http::H1);
}

#[test]
fn a_slow_upload_is_not_an_upstream_timeout_over_http2() {
    slow_upload(Http::H2);
}

/// The origin at port 443 (the scheme's default) of its own loopback address is named
/// without the port, over HTTP/1.1 (`Host`) as over HTTP/2 (`:authority`): request signers
/// such as SigV4 sign the name the client used. (Port 443 needs root.)
#[test]
fn the_default_port_is_left_out_of_the_upstream_authority() {
    if !privileged("the_default_port_is_left_out_of_the_upstream_authority") {
        return;
    }
    let dir = TempDir::new("drift-host");
    let ip = IpAddr::from([127, 0, 0, 26]);
    let origin = H2Origin::start_at(dir.path(), SocketAddr::from((ip, 443)));
    let policy = inspected("127.0.0.26", 443);
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[&origin.cert], None, &[]);
    for http in [Http::H1, Http::H2] {
        let path = format!("/host-{http:?}");
        let (status, body) = curl(
            &sluice,
            &ca,
            http,
            &[],
            &format!("https://127.0.0.26{path}"),
        );
        assert_eq!(status, 200, "{http:?}: {body}\n{}", sluice.stderr());
        assert!(body.starts_with(&format!("proto={}", http.origin_version())));
        let got = origin.received();
        let r = got.iter().rfind(|r| r["url"] == path.as_str()).unwrap();
        let name = match http {
            Http::H1 => &r["headers"]["host"],
            Http::H2 => &r["headers"][":authority"],
        };
        assert_eq!(name, "127.0.0.26", "{http:?}: {r}");
    }
    assert_events_valid(&sluice);
}

/// An upstream whose TLS fails (its certificate is not trusted) after the client's `200`:
/// each request is answered `502 upstream_unreachable` with the reason, in the protocol
/// the client spoke, and audited; the tunnel has one open event, and its close names why.
fn upstream_tls_fails(http: Http) {
    let dir = TempDir::new(&format!("drift-tls-{http:?}").to_ascii_lowercase());
    let origin = H2Origin::start(dir.path());
    let port = origin.port();
    let policy = inspected("127.0.0.1", port);
    // The origin's CA is not trusted upstream.
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[], None, &[]);
    let (status, body) = curl(
        &sluice,
        &ca,
        http,
        &[],
        &format!("https://127.0.0.1:{port}/tls-fails"),
    );
    assert_eq!(status, 502, "{body}\n{}", sluice.stderr());
    let refusal: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refusal["error"], "upstream_unreachable", "{refusal}");
    let reason = refusal["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("TLS"), "{refusal}");
    let e = sluice.wait_event("the refused request", |e| {
        class(e) == 4002 && e["http_request"]["url"]["path"] == "/tls-fails"
    });
    assert_eq!(e["http_response"]["code"], 502, "{e}");
    let close = sluice.wait_event("the tunnel's close", |e| {
        is_close(e) && e["dst_endpoint"]["port"] == port
    });
    assert!(
        close["status_detail"]
            .as_str()
            .is_some_and(|d| d.contains("TLS")),
        "{close}"
    );
    let opens: Vec<Value> = sluice
        .events()
        .into_iter()
        .filter(|e| is_open(e) && e["dst_endpoint"]["port"] == port)
        .collect();
    assert_eq!(opens.len(), 1, "{opens:#?}");
    assert!(origin.received().is_empty());
    assert_events_valid(&sluice);
}

#[test]
fn an_upstream_tls_failure_is_answered_502_over_http1_1() {
    upstream_tls_fails(Http::H1);
}

#[test]
fn an_upstream_tls_failure_is_answered_502_over_http2() {
    upstream_tls_fails(Http::H2);
}

/// Sends `first`, reads its answer (a Content-Length body), then sends `later` on the same
/// connection and returns what comes back until sluice closes.
fn keep_alive(sluice: &Sluice, first: &str, later: &[u8]) -> (String, String) {
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(first.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let answered = loop {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap();
            if body.len() >= len {
                break text;
            }
        }
    };
    s.write_all(later).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    (answered, String::from_utf8_lossy(&rest).into_owned())
}

/// After a forwarded request, a malformed head and a `CONNECT` on the same connection are
/// refused and audited, as they are when they come first.
#[test]
fn a_later_refused_head_on_a_kept_alive_connection_is_audited() {
    let origin = HttpOrigin::start();
    let port = origin.port();
    let policy = format!(
        "version: 1\nnetwork_policies:\n  fwd:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}}}\n    binaries:\n      - path: {}\n",
        me()
    );
    let sluice = Sluice::start(&policy, &["--allow-loopback-upstream"]);
    let first = |path: &str| {
        format!("GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n")
    };
    let (answer, later) = keep_alive(
        &sluice,
        &first("/bytes/3"),
        b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(later.starts_with("HTTP/1.1 400"), "{later}");
    let e = sluice.wait_event("the later CONNECT", |e| {
        class(e) == 4002 && e["http_response"]["code"] == 400
    });
    assert_eq!(e["dst_endpoint"]["port"], 9, "{e}");
    let malformed = format!(
        "POST http://127.0.0.1:{port}/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"
    );
    let (answer, later) = keep_alive(&sluice, &first("/bytes/4"), malformed.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(later.starts_with("HTTP/1.1 400"), "{later}");
    let e = sluice.wait_event("the later malformed head", |e| {
        class(e) == 4002 && e["http_response"]["code"] == 400 && e["dst_endpoint"]["port"] != 9
    });
    assert_eq!(e["http_request"]["http_method"], "POST", "{e}");
    assert_events_valid(&sluice);
}

/// Inside an inspected tunnel, over both protocols: after a request answered on the
/// connection, a later one refused on the same connection (its authority not the tunnel's)
/// is refused and audited like the first.
fn later_refusal_in_a_tunnel(http: Http) {
    let dir = TempDir::new(&format!("drift-later-{http:?}").to_ascii_lowercase());
    let origin = H2Origin::start(dir.path());
    let port = origin.port();
    let policy = inspected("127.0.0.1", port);
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[&origin.cert], None, &[]);
    let proxy = sluice.proxy_url();
    let url = |path: &str| format!("https://127.0.0.1:{port}{path}");
    let ca = ca.to_string_lossy().into_owned();
    let each = [
        http.flag(),
        "--cacert",
        &ca,
        "-x",
        &proxy,
        "-o",
        "/dev/null",
    ];
    let said = "%{http_code} %{num_connects}\n";
    let (code, out, err) = run(Command::new("curl")
        .args(["-s", "--max-time", "30"])
        .args(each)
        .args(["-w", said])
        .arg(url("/first"))
        .args(["--next", "--max-time", "30"])
        .args(each)
        .args(["-w", said, "-H", "Host: elsewhere.test"])
        .arg(url("/later")));
    assert_eq!(code, 0, "{out}\n{err}\n{}", sluice.stderr());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"200 1"), "{http:?}: {out}");
    // The same connection (no new one), refused.
    let later = lines.get(1).copied().unwrap_or_default();
    assert!(
        later.ends_with(" 0") && !later.starts_with("200"),
        "{http:?}: {out}"
    );
    let status: u16 = later.split(' ').next().unwrap().parse().unwrap();
    let e = sluice.wait_event("the later refusal", |e| {
        class(e) == 4002 && e["http_request"]["url"]["path"] == "/later"
    });
    assert_eq!(e["http_response"]["code"], status, "{e}");
    assert_eq!(e["dst_endpoint"]["port"], port, "{e}");
    assert_eq!(origin.received().len(), 1);
    assert_events_valid(&sluice);
}

#[test]
fn a_later_refusal_in_a_tunnel_is_audited_over_http1_1() {
    later_refusal_in_a_tunnel(Http::H1);
}

#[test]
fn a_later_refusal_in_a_tunnel_is_audited_over_http2() {
    later_refusal_in_a_tunnel(Http::H2);
}

/// In an inspected tunnel (HTTP/1.1, `openssl s_client` sending both heads at once), a
/// malformed head after an answered request is refused `400` and audited with the tunnel's
/// destination, as it is on the forward loop.
#[test]
fn a_later_malformed_head_in_a_tunnel_is_audited() {
    use std::process::Stdio;
    let dir = TempDir::new("drift-later-head");
    let origin = H2Origin::start(dir.path());
    let port = origin.port();
    let policy = format!(
        "{}      - path: /usr/bin/openssl\n",
        inspected("127.0.0.1", port)
    );
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[&origin.cert], None, &[]);
    let mut child = Command::new("openssl")
        .args(["s_client", "-quiet", "-proxy", &sluice.addr().to_string()])
        .args(["-connect", &format!("127.0.0.1:{port}"), "-CAfile"])
        .arg(&ca)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let heads = format!(
        "GET /first HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\nPOST /later HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(heads.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let answers: Vec<&str> = said.matches("HTTP/1.1 ").collect();
    assert_eq!(
        answers.len(),
        2,
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    assert!(said.contains("HTTP/1.1 400"), "{said}");
    let e = sluice.wait_event("the later malformed head", |e| {
        class(e) == 4002 && e["http_response"]["code"] == 400
    });
    assert_eq!(e["http_request"]["http_method"], "POST", "{e}");
    assert_eq!(e["dst_endpoint"]["port"], port, "{e}");
    assert_eq!(origin.received().len(), 1);
    assert_events_valid(&sluice);
}

/// The audit record goes out when the response body ends, over both protocols, also when
/// the client stops it: a stream the client leaves after about a second and a half is
/// audited then, with the bytes that reached it and its duration, once.
fn a_response_left_midway(http: Http) {
    let dir = TempDir::new(&format!("drift-midway-{http:?}").to_ascii_lowercase());
    let (origin, origin_ca) = streaming_origin(dir.path());
    let port = origin.port;
    let policy = inspected("127.0.0.1", port);
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[&origin_ca], None, &[]);
    let (code, out, err) = run(Command::new("curl")
        .args(["-s", "-N", "--max-time", "1.5", http.flag(), "--cacert"])
        .arg(&ca)
        .args(["-x", &sluice.proxy_url()])
        .arg(format!("https://127.0.0.1:{port}/stream")));
    // 28: curl's own time limit, the client leaving.
    assert_eq!(code, 28, "{out}\n{err}\n{}", sluice.stderr());
    assert!(out.contains("line 2"), "{out}");
    let e = sluice.wait_event("the stream's record", |e| {
        class(e) == 4002 && e["http_request"]["url"]["path"] == "/stream"
    });
    assert_eq!(e["http_response"]["code"], 200, "{e}");
    let bytes = e["traffic"]["bytes_in"].as_u64().unwrap_or_default();
    assert!(bytes >= out.len() as u64 && bytes > 0, "{e}\n{out}");
    assert!(e["duration"].as_u64().unwrap_or_default() >= 1000, "{e}");
    let records = sluice
        .events()
        .into_iter()
        .filter(|e| class(e) == 4002 && e["http_request"]["url"]["path"] == "/stream")
        .count();
    assert_eq!(records, 1);
    assert_events_valid(&sluice);
}

#[test]
fn a_response_left_midway_is_audited_over_http1_1() {
    a_response_left_midway(Http::H1);
}

#[test]
fn a_response_left_midway_is_audited_over_http2() {
    a_response_left_midway(Http::H2);
}
