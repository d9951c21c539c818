//! End-to-end attacks on the promise that the agent can use a credential without ever
//! holding it: a secret swapped into plaintext HTTP, a bound API that echoes the request back,
//! placeholders where the profile does not place them, in a compressed body or in trailers,
//! and a real secret in a caller's own command line reaching the audit log. Real sluice,
//! real curl, Python and Node clients, local origins; after each, every byte the client, the
//! logs and the files received is swept for the secret, and every audit event is validated
//! against OCSF.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use sluice_e2e::ocsf::class;
use sluice_e2e::origin::{EchoOrigin, HttpOrigin};
use sluice_e2e::proxy::{
    Sluice, TempDir, assert_events_valid, assert_sse_streams, me, python, realpath, run,
};

const SECRET: &str = "s3cr3t-VALUE-7f3a9c";
const PLACEHOLDER: &str = "openshell:resolve:env:TEST_API_KEY";

/// The Detection Finding of `kind`, waited for.
fn finding(sluice: &Sluice, kind: &str) -> Value {
    sluice.wait_event(kind, |e| {
        class(e) == 2004 && e["finding_info"]["types"][0].as_str() == Some(kind)
    })
}

/// No byte of sluice's audit log, its stderr, or any file in `dirs` holds `secret`.
fn assert_nowhere(sluice: &Sluice, secret: &str, dirs: &[&Path]) {
    let audit = std::fs::read_to_string(&sluice.audit_path).unwrap();
    assert!(!audit.contains(secret), "the audit log holds the secret");
    assert!(
        !sluice.stderr().contains(secret),
        "sluice's stderr holds the secret"
    );
    for d in dirs {
        for f in std::fs::read_dir(d).unwrap().flatten() {
            let bytes = std::fs::read(f.path()).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(secret),
                "the secret is in {}",
                f.path().display()
            );
        }
    }
}

fn node() -> String {
    let (_, out, _) = run(Command::new("sh").args(["-c", "command -v node"]));
    realpath(out.trim())
}

// === 1. Never in plaintext ===

/// sluice with `TEST_API_KEY` bound to `origin` (and, opted in to plaintext, to `optin`),
/// plain HTTP origins; the test binary and curl may reach both.
fn plaintext_setup(dir: &TempDir, origin: &HttpOrigin, optin: Option<&HttpOrigin>) -> Sluice {
    let ports: Vec<u16> = std::iter::once(origin.port())
        .chain(optin.map(HttpOrigin::port))
        .collect();
    let endpoints: String = ports
        .iter()
        .map(|p| format!("      - {{host: 127.0.0.1, port: {p}, protocol: rest, enforcement: enforce, access: full}}\n"))
        .collect();
    let p = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n{endpoints}    binaries:\n      - path: /usr/bin/curl\n      - path: {}\n",
        me()
    );
    let mut profile = format!(
        "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\n    auth_style: bearer\nendpoints:\n  - {{host: 127.0.0.1, port: {}}}\n",
        origin.port()
    );
    if let Some(o) = optin {
        profile.push_str(&format!(
            "  - {{host: 127.0.0.1, port: {}, allow_plaintext_credentials: true}}\n",
            o.port()
        ));
    }
    let providers = dir.write("providers.yaml", &profile);
    Sluice::intercepting(dir, &p, &[], Some(&providers), &[("TEST_API_KEY", SECRET)]).0
}

#[test]
fn a_secret_never_travels_in_plaintext() {
    let dir = TempDir::new("plain");
    let origin = HttpOrigin::start();
    let sluice = plaintext_setup(&dir, &origin, None);
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");

    // CONNECT to the bound host and port, then plain HTTP inside the tunnel.
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let port = origin.port();
    s.write_all(
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut head = [0u8; 39];
    s.read_exact(&mut head).unwrap();
    assert!(
        String::from_utf8_lossy(&head).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s.write_all(
        format!("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.contains(" 403 ") && answer.contains("\"error\":\"credential_requires_tls\""),
        "{answer}"
    );
    assert!(!answer.contains(SECRET));

    // The same with curl: absolute form, and a tunnel (`--proxytunnel`) to an http:// URL.
    for tunnel in [false, true] {
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "--max-time", "20", "-x", &sluice.proxy_url()]);
        if tunnel {
            cmd.arg("--proxytunnel");
        }
        cmd.args(["-w", "\n%{http_code}", "-H", &auth])
            .arg(format!("http://127.0.0.1:{port}/v1/models"));
        let (_, out, err) = run(&mut cmd);
        assert!(out.ends_with("403"), "tunnel={tunnel}: {out}{err}");
        assert!(out.contains("credential_requires_tls"), "{out}");
        assert!(!out.contains(SECRET));
    }
    // Nothing reached the plaintext origin.
    assert!(origin.received().is_empty(), "{:?}", origin.received());
    let f = finding(&sluice, "sluice.provider_credential.requires_tls");
    assert_eq!(f["unmapped"]["credential"], "test-api/api-key", "{f}");
    assert_nowhere(&sluice, SECRET, &[sluice.dir.path(), dir.path()]);
    assert_events_valid(&sluice);
}

#[test]
fn a_binding_that_opts_in_gets_the_secret_over_plaintext() {
    let dir = TempDir::new("optin");
    let origin = HttpOrigin::start();
    let optin = HttpOrigin::start();
    let sluice = plaintext_setup(&dir, &origin, Some(&optin));
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    let curl = |port: u16| {
        run(Command::new("curl")
            .args(["-s", "--max-time", "20", "-x", &sluice.proxy_url()])
            .args(["-w", "\n%{http_code}", "-H", &auth])
            .arg(format!("http://127.0.0.1:{port}/echo")))
    };
    let (_, out, err) = curl(optin.port());
    assert!(out.ends_with("200"), "{out}{err}\n{}", sluice.stderr());
    assert!(!out.contains(SECRET), "{out}");
    assert_eq!(
        optin
            .received()
            .last()
            .and_then(|r| r.header("authorization")),
        Some(format!("Bearer {SECRET}").as_str())
    );
    // The opt-in is per endpoint: the other one still refuses.
    let (_, out, _) = curl(origin.port());
    assert!(out.ends_with("403"), "{out}");
    assert!(origin.received().is_empty());
    assert_nowhere(&sluice, SECRET, &[sluice.dir.path(), dir.path()]);
    assert_events_valid(&sluice);
}

// === 2. Never reflected back ===

/// sluice terminating TLS for an echoing origin whose profile places the key as a bearer
/// token; curl as the client.
fn echo_setup(dir: &TempDir, origin: &EchoOrigin) -> (Sluice, std::path::PathBuf) {
    let p = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: /usr/bin/curl\n      - path: {}\n      - path: {}\n",
        origin.port(),
        python(),
        node()
    );
    let providers = dir.write(
        "providers.yaml",
        &format!(
            "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\n    auth_style: bearer\n  - name: path-key\n    env_vars: [TEST_PATH_KEY]\n    auth_style: path\n    path_template: /v1/keys/{{credential}}\nendpoints:\n  - {{host: 127.0.0.1, port: {}}}\n",
            origin.port()
        ),
    );
    Sluice::intercepting(
        dir,
        &p,
        &[&origin.cert],
        Some(&providers),
        &[("TEST_API_KEY", SECRET), ("TEST_PATH_KEY", PATH_SECRET)],
    )
}

/// The secret of `echo_setup`'s credential placed by `path_template: /v1/keys/{credential}`.
const PATH_SECRET: &str = "path-s3cr3t-55e0c1";
const PATH_PLACEHOLDER: &str = "openshell:resolve:env:TEST_PATH_KEY";

fn curl(sluice: &Sluice, ca: &Path, http: &str, args: &[&str], url: &str) -> String {
    run(Command::new("curl")
        .args(["-s", "-i", "--max-time", "20", http, "--cacert"])
        .arg(ca)
        .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"])
        .args(args)
        .arg(url))
    .1
}

#[test]
fn a_bound_api_that_echoes_the_request_never_hands_the_secret_back() {
    let dir = TempDir::new("reflect");
    let origin = EchoOrigin::start(dir.path());
    let (sluice, ca) = echo_setup(&dir, &origin);
    let base = format!("https://127.0.0.1:{}", origin.port());
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    for http in ["--http1.1", "--http2"] {
        // The client asks for gzip: sluice asks the origin for identity instead, so that the
        // echo can be scanned.
        let out = curl(
            &sluice,
            &ca,
            http,
            &["-H", &auth, "-H", "Accept-Encoding: gzip"],
            &format!("{base}/v1/echo?x=1"),
        );
        assert!(out.ends_with("200"), "{http}: {out}\n{}", sluice.stderr());
        assert!(
            !out.contains(SECRET),
            "{http}: the client saw the secret:\n{out}"
        );
        // The echo arrived, with the placeholder where the secret was: in the echoed header
        // and in the body, which came seven bytes at a time.
        let lower = out.to_ascii_lowercase();
        assert!(
            lower.contains(
                &format!("x-echo-authorization: bearer {PLACEHOLDER}").to_ascii_lowercase()
            ),
            "{http}: {out}"
        );
        assert!(
            out.contains(&format!("\"authorization\":\"Bearer {PLACEHOLDER}\"")),
            "{http}: {out}"
        );
        assert!(!lower.contains("content-length:"), "{http}: {out}");
    }
    let got = origin.received();
    assert_eq!(got.len(), 2, "{got:?}");
    for r in &got {
        assert_eq!(
            r["headers"]["authorization"],
            format!("Bearer {SECRET}"),
            "{r}"
        );
        assert_eq!(r["headers"]["accept-encoding"], "identity", "{r}");
    }
    let f = finding(&sluice, "sluice.provider_credential.reflected");
    assert_eq!(f["unmapped"]["credential"], "test-api/api-key", "{f}");

    // An origin that compresses anyway: refused, the encoded echo never reaches the client.
    for http in ["--http1.1", "--http2"] {
        let out = curl(&sluice, &ca, http, &["-H", &auth], &format!("{base}/gzip"));
        assert!(out.ends_with("502"), "{http}: {out}");
        assert!(out.contains("credential_response_encoded"), "{http}: {out}");
    }
    // An origin that compresses without saying so: refused just the same.
    for http in ["--http1.1", "--http2"] {
        let out = curl(
            &sluice,
            &ca,
            http,
            &["-H", &auth],
            &format!("{base}/rawgzip"),
        );
        assert!(out.ends_with("502"), "{http}: {out}");
        assert!(out.contains("credential_response_encoded"), "{http}: {out}");
    }
    // An echo that JSON-escapes what it quotes (`\/`, `\u00xx` in either case): the escaped
    // secret is scrubbed too.
    for (http, path) in [("--http1.1", "/escape/x"), ("--http2", "/escape-upper/x")] {
        let out = curl(&sluice, &ca, http, &["-H", &auth], &format!("{base}{path}"));
        assert!(out.ends_with("200"), "{http}: {out}");
        let body = out.rsplit("\r\n\r\n").next().unwrap_or("");
        assert!(body.contains(PLACEHOLDER), "{http}: {out}");
        // The echo was escaped (`authorization` spelled `\u0061\u0075...`).
        assert!(body.contains(r"\u0061\u0075"), "{http}: {out}");
        for upper in [false, true] {
            let escaped: String = SECRET
                .chars()
                .map(|c| {
                    let h = format!("\\u{:04x}", u32::from(c));
                    if upper {
                        h.to_uppercase().replace("\\U", "\\u")
                    } else {
                        h
                    }
                })
                .collect();
            assert!(!out.contains(&escaped), "{http}: {out}");
        }
        assert!(!out.contains(SECRET), "{http}: {out}");
    }
    // A secret stored upstream by one request, fetched by another without a credential (on
    // another connection): scrubbed just the same.
    for http in ["--http1.1", "--http2"] {
        let out = curl(&sluice, &ca, http, &["-H", &auth], &format!("{base}/store"));
        assert!(out.ends_with("200"), "{http}: {out}");
        let out = curl(&sluice, &ca, http, &[], &format!("{base}/fetch"));
        assert!(out.ends_with("200"), "{http}: {out}");
        assert!(!out.contains(SECRET), "{http}: {out}");
        assert!(
            out.contains(&format!("Bearer {PLACEHOLDER}")),
            "{http}: {out}"
        );
    }

    assert_nowhere(&sluice, SECRET, &[sluice.dir.path(), ca.parent().unwrap()]);
    assert_events_valid(&sluice);
}

/// Stores `Bearer <secret>` at the echo origin `base` (its `/store`), through sluice.
fn store_secret(sluice: &Sluice, ca: &Path, http: &str, base: &str) {
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    let out = curl(sluice, ca, http, &["-H", &auth], &format!("{base}/store"));
    assert!(out.ends_with("200"), "{http}: {out}");
}

/// A secret stored upstream, fetched back in byte ranges too short for the scrub to
/// recognise any one of them: sluice sends no range header (`Range`, Apache's
/// `Request-Range`, Azure's `x-ms-range`, nor `If-Range`) to a credentialed endpoint, so
/// every answer is whole, and scrubbed whole.
#[test]
fn a_stored_secret_cannot_be_fetched_back_in_pieces() {
    let dir = TempDir::new("ranges");
    let origin = EchoOrigin::start(dir.path());
    let (sluice, ca) = echo_setup(&dir, &origin);
    let base = format!("https://127.0.0.1:{}", origin.port());
    for http in ["--http1.1", "--http2"] {
        store_secret(&sluice, &ca, http, &base);
        let stored = format!("Bearer {SECRET}").len();
        let mut pieces = String::new();
        let spellings = ["Range", "Request-Range", "X-Ms-Range"];
        for (i, start) in (0..stored).step_by(4).enumerate() {
            let spelling = spellings[i % spellings.len()];
            let range = format!("{spelling}: bytes={start}-{}", start + 3);
            let if_range = "If-Range: Wed, 21 Oct 2015 07:28:00 GMT";
            let out = curl(
                &sluice,
                &ca,
                http,
                &["-H", &range, "-H", if_range],
                &format!("{base}/fetch"),
            );
            assert!(out.ends_with("200"), "{http} {range}: {out}");
            assert!(!out.contains("206"), "{http} {range}: {out}");
            assert!(
                out.contains(&format!("Bearer {PLACEHOLDER}")),
                "{http}: {out}"
            );
            let body = out.rsplit("\r\n\r\n").next().unwrap_or("");
            pieces.push_str(body.trim_end_matches("\n200"));
        }
        assert!(!pieces.contains(SECRET), "{http}: {pieces}");
    }
    for r in origin.received() {
        for h in ["range", "if-range", "request-range", "x-ms-range"] {
            assert!(r["headers"][h].is_null(), "{h}: {r}");
        }
    }
    assert_nowhere(&sluice, SECRET, &[sluice.dir.path(), ca.parent().unwrap()]);
    assert_events_valid(&sluice);
}

/// The same, by a range header of the origin's own that sluice cannot know to remove
/// (`X-Object-Range`): the origin answers `206` with a piece, and sluice refuses to pass a
/// part of a response it scrubs (`502 credential_response_partial`).
#[test]
fn a_partial_answer_sluice_did_not_ask_for_is_refused() {
    let dir = TempDir::new("own-range");
    let origin = EchoOrigin::start(dir.path());
    let (sluice, ca) = echo_setup(&dir, &origin);
    let base = format!("https://127.0.0.1:{}", origin.port());
    for http in ["--http1.1", "--http2"] {
        store_secret(&sluice, &ca, http, &base);
        // Four bytes from inside the secret ("Bearer " is 7).
        let piece = &SECRET[2..6];
        let out = curl(
            &sluice,
            &ca,
            http,
            &["-H", "X-Object-Range: bytes=9-12"],
            &format!("{base}/fetch"),
        );
        assert!(out.ends_with("502"), "{http}: {out}");
        assert!(
            out.contains("\"error\":\"credential_response_partial\""),
            "{http}: {out}"
        );
        let body = out.rsplit("\r\n\r\n").next().unwrap_or("");
        assert!(!body.contains(piece), "{http}: {out}");
    }
    assert_nowhere(&sluice, SECRET, &[sluice.dir.path(), ca.parent().unwrap()]);
    assert_events_valid(&sluice);
}

/// What a client sees of a response through sluice, by `tests/clients/frames_probe.py`: its
/// status, each chunk's (HTTP/1.1) or DATA frame's (HTTP/2) size and arrival (ms), when it
/// ended, and the body.
struct Framed {
    status: u64,
    pieces: Vec<(u64, u64)>,
    end_ms: u64,
    body: String,
}

fn probe(
    sluice: &Sluice,
    ca: &Path,
    origin: &EchoOrigin,
    path: &str,
    body: &str,
    version: &str,
) -> Framed {
    let (code, out, err) = run(Command::new("python3")
        .current_dir(sluice_e2e::workspace_dir().join("tests/clients"))
        .arg("frames_probe.py")
        .arg(sluice.addrs[0].to_string())
        .arg(ca)
        .arg(format!("127.0.0.1:{}", origin.port()))
        .arg(path)
        .arg(body)
        .arg(version));
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    Framed {
        status: v["status"].as_u64().unwrap_or_default(),
        pieces: v["pieces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap(), p[1].as_u64().unwrap()))
            .collect(),
        end_ms: v["end_ms"].as_u64().unwrap_or_default(),
        body: v["body"].as_str().unwrap_or_default().to_string(),
    }
}

/// An echo of the client's own bytes from a credentialed endpoint: where sluice cuts the
/// answer, and when each piece comes, must not say whether the echo's tail begins the secret
/// (else the secret could be guessed a byte at a time, each guess confirmed by the cut).
/// Over HTTP/1.1 (chunks) and HTTP/2 (DATA frames), for an answer sent whole and for one whose
/// end comes 1.5 s after its bytes.
#[test]
fn where_and_when_an_answer_is_cut_says_nothing_of_the_secret() {
    let dir = TempDir::new("cut-oracle");
    let origin = EchoOrigin::start(dir.path());
    let (sluice, ca) = echo_setup(&dir, &origin);
    for version in ["1.1", "2"] {
        for n in [1, 3, 7, SECRET.len() - 1] {
            let guessed = format!("hello {}", &SECRET[..n]);
            let wrong = format!("hello {}", "q".repeat(n));
            let right = probe(&sluice, &ca, &origin, "/reflect", &guessed, version);
            let other = probe(&sluice, &ca, &origin, "/reflect", &wrong, version);
            assert_eq!(
                (right.status, &right.body),
                (200, &guessed),
                "HTTP/{version}"
            );
            assert_eq!((other.status, &other.body), (200, &wrong), "HTTP/{version}");
            let sizes = |f: &Framed| f.pieces.iter().map(|p| p.0).collect::<Vec<_>>();
            assert_eq!(
                sizes(&right),
                sizes(&other),
                "HTTP/{version}, {n} bytes of the secret"
            );
            if n != 3 {
                continue;
            }
            // The slow answer: its bytes come long before its end, guess or not (sluice lets
            // a held tail go after a short pause, whatever it is).
            for (body, f) in [
                (
                    &guessed,
                    probe(&sluice, &ca, &origin, "/reflect-slow", &guessed, version),
                ),
                (
                    &wrong,
                    probe(&sluice, &ca, &origin, "/reflect-slow", &wrong, version),
                ),
            ] {
                assert_eq!((f.status, &f.body), (200, body), "HTTP/{version}");
                let last = f.pieces.last().map_or(u64::MAX, |p| p.1);
                assert!(
                    last + 700 < f.end_ms,
                    "HTTP/{version} {body:?}: the last bytes came at {last} ms, the end at {} ms",
                    f.end_ms
                );
            }
        }
    }
    assert_nowhere(&sluice, SECRET, &[sluice.dir.path(), ca.parent().unwrap()]);
    assert_events_valid(&sluice);
}

/// A stored secret the upstream sends in two parts with a pause between: what came before
/// the pause has gone out, but the rest never does (it becomes the placeholder, and a
/// Detection Finding says the secret came back).
#[test]
fn a_secret_cut_by_an_upstream_pause_is_not_completed() {
    let dir = TempDir::new("pause-cut");
    let origin = EchoOrigin::start(dir.path());
    let (sluice, ca) = echo_setup(&dir, &origin);
    for http in ["--http1.1", "--http2"] {
        store_secret(&sluice, &ca, http, &origin_base(&origin));
        // "Bearer " and 5 bytes of the secret before the pause.
        let out = curl(
            &sluice,
            &ca,
            http,
            &[],
            &format!("{}/fetch-split?at=12", origin_base(&origin)),
        );
        assert!(out.ends_with("200"), "{http}: {out}");
        assert!(!out.contains(SECRET), "{http}: {out}");
        assert!(!out.contains(&SECRET[5..]), "{http}: {out}");
        assert!(out.contains(PLACEHOLDER), "{http}: {out}");
        assert!(out.contains(" (end)"), "{http}: {out}");
    }
    finding(&sluice, "sluice.provider_credential.reflected");
    assert_nowhere(&sluice, SECRET, &[sluice.dir.path(), ca.parent().unwrap()]);
    assert_events_valid(&sluice);
}

/// An echo in another shape than JSON: an HTML page that escapes the secret's `& < > " '`
/// as entities, and response header names made of request values (which arrive
/// lower-cased). Neither hands the secret back.
#[test]
fn an_echo_as_html_or_as_header_names_never_hands_the_secret_back() {
    const SPECIAL: &str = "sk+Ab/Cd=Ef&G<h>\"i'Jk";
    let dir = TempDir::new("echo-shapes");
    let origin = EchoOrigin::start(dir.path());
    let special = "  - name: special-key\n    env_vars: [TEST_SPECIAL_KEY]\n    auth_style: header\n    header_name: x-special\n";
    let (sluice, ca) = curl_bound(
        &dir,
        (origin.port(), &origin.cert),
        special,
        &[("TEST_API_KEY", SECRET), ("TEST_SPECIAL_KEY", SPECIAL)],
    );
    let base = origin_base(&origin);
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    let special = "X-Special: openshell:resolve:env:TEST_SPECIAL_KEY";
    let escaped = SPECIAL
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;");
    for http in ["--http1.1", "--http2"] {
        let out = curl(
            &sluice,
            &ca,
            http,
            &["-H", &auth, "-H", special],
            &format!("{base}/html"),
        );
        assert!(out.ends_with("200"), "{http}: {out}");
        assert!(
            out.contains("openshell:resolve:env:TEST_SPECIAL_KEY"),
            "{http}: {out}"
        );
        assert!(!out.contains(&escaped), "{http}: {out}");
        assert!(!out.contains("Ef&amp;G&lt;h"), "{http}: {out}");
        let out = curl(&sluice, &ca, http, &["-H", &auth], &format!("{base}/named"));
        assert!(out.ends_with("200"), "{http}: {out}");
        assert!(
            !out.to_lowercase().contains(&SECRET.to_lowercase()),
            "{http}: {out}"
        );
    }
    // The origin did name a header after the secret, and wrote the escaped secret.
    assert!(origin.received().iter().any(|r| r["url"] == "/named"));
    finding(&sluice, "sluice.provider_credential.reflected");
    assert_nowhere(&sluice, SECRET, &[sluice.dir.path(), ca.parent().unwrap()]);
    assert_nowhere(&sluice, SPECIAL, &[sluice.dir.path(), ca.parent().unwrap()]);
    assert_events_valid(&sluice);
}

/// sluice for curl to an L7 origin on `port` (its certificate signed by `cert`), the
/// `test-api` profile's bearer `api-key` (`TEST_API_KEY`) and `more` credentials (YAML list
/// items) bound to it, with `env` as sluice's environment.
fn curl_bound(
    dir: &TempDir,
    (port, cert): (u16, &Path),
    more: &str,
    env: &[(&str, &str)],
) -> (Sluice, std::path::PathBuf) {
    let p = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: /usr/bin/curl\n"
    );
    let providers = dir.write(
        "providers.yaml",
        &format!(
            "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\n    auth_style: bearer\n{more}endpoints:\n  - {{host: 127.0.0.1, port: {port}}}\n"
        ),
    );
    Sluice::intercepting(dir, &p, &[cert], Some(&providers), env)
}

fn origin_base(origin: &EchoOrigin) -> String {
    format!("https://127.0.0.1:{}", origin.port())
}

#[test]
fn a_placeholder_goes_only_where_the_profile_places_it() {
    let dir = TempDir::new("placement");
    let origin = EchoOrigin::start(dir.path());
    let (sluice, ca) = echo_setup(&dir, &origin);
    let base = format!("https://127.0.0.1:{}", origin.port());
    for http in ["--http1.1", "--http2"] {
        for (args, path) in [
            (
                vec!["-H".to_string(), format!("User-Agent: {PLACEHOLDER}")],
                "/v1/a".to_string(),
            ),
            (
                vec!["-H".to_string(), format!("X-Api-Key: {PLACEHOLDER}")],
                "/v1/b".to_string(),
            ),
            (Vec::new(), format!("/v1/{PLACEHOLDER}/c")),
            (Vec::new(), format!("/v1/d?key={PLACEHOLDER}")),
            // The template's placement, elsewhere in the path or with more after it.
            (Vec::new(), format!("/v1/other/{PATH_PLACEHOLDER}")),
            (Vec::new(), format!("/v1/other/{PATH_PLACEHOLDER}%2Etail")),
            (Vec::new(), format!("/v1/keys/{PATH_PLACEHOLDER}%2Etail")),
            (Vec::new(), format!("/v1/keys/{PATH_PLACEHOLDER}/more")),
            (Vec::new(), format!("/v1/keys/x{PATH_PLACEHOLDER}")),
            (Vec::new(), format!("/v2/v1/keys/{PATH_PLACEHOLDER}")),
        ] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = curl(&sluice, &ca, http, &args, &format!("{base}{path}"));
            assert!(out.ends_with("403"), "{http} {args:?} {path}: {out}");
            assert!(
                out.contains("\"error\":\"credential_placement_mismatch\""),
                "{http} {args:?} {path}: {out}"
            );
        }
    }
    assert!(origin.received().is_empty(), "{:?}", origin.received());
    finding(&sluice, "sluice.provider_credential.placement_mismatch");
    assert_nowhere(&sluice, SECRET, &[sluice.dir.path(), dir.path()]);
    assert_nowhere(&sluice, PATH_SECRET, &[sluice.dir.path(), dir.path()]);
    // Exactly where the template puts it: swapped in.
    for http in ["--http1.1", "--http2"] {
        let out = curl(
            &sluice,
            &ca,
            http,
            &[],
            &format!("{base}/v1/keys/{PATH_PLACEHOLDER}"),
        );
        assert!(out.ends_with("200"), "{http}: {out}");
        assert!(!out.contains(PATH_SECRET), "{http}: {out}");
    }
    let got = origin.received();
    assert_eq!(got.len(), 2, "{got:?}");
    for r in &got {
        assert_eq!(r["url"], format!("/v1/keys/{PATH_SECRET}"), "{r}");
    }
    assert_nowhere(&sluice, PATH_SECRET, &[sluice.dir.path()]);
    assert_events_valid(&sluice);
}

// === 8. Compressed bodies and trailers ===

#[test]
fn placeholders_in_compressed_bodies_or_trailers_never_reach_the_upstream() {
    let dir = TempDir::new("encbody");
    let origin = EchoOrigin::start(dir.path());
    let (sluice, ca) = echo_setup(&dir, &origin);
    let base = format!("https://127.0.0.1:{}", origin.port());
    // A gzipped body hides the placeholder from a byte scan: refused, over both protocols.
    let gz = dir.path().join("body.gz");
    let (code, _, err) = run(Command::new(python()).arg("-c").arg(format!(
        "import gzip; open({:?}, 'wb').write(gzip.compress(b'{{\"k\": \"{PLACEHOLDER}\"}}'))",
        gz.display().to_string()
    )));
    assert_eq!(code, 0, "{err}");
    for http in ["--http1.1", "--http2"] {
        let out = curl(
            &sluice,
            &ca,
            http,
            &[
                "-H",
                "Content-Encoding: gzip",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &format!("@{}", gz.display()),
            ],
            &format!("{base}/v1/gz"),
        );
        assert!(out.ends_with("415"), "{http}: {out}");
        assert!(
            out.contains("credential_scan_encoded_body"),
            "{http}: {out}"
        );
    }
    // HTTP/1.1 chunked trailers with a placeholder (Python, raw chunked framing).
    let script = format!(
        "import http.client, ssl\nctx = ssl.create_default_context(cafile={ca:?})\nc = http.client.HTTPSConnection('127.0.0.1', {sport}, context=ctx, timeout=20)\nc.set_tunnel('127.0.0.1', {port})\nc.putrequest('POST', '/v1/trailers1')\nc.putheader('Transfer-Encoding', 'chunked')\nc.putheader('Trailer', 'X-Sig')\nc.endheaders()\ntry:\n    c.send(b'5\\r\\nhello\\r\\n0\\r\\nX-Sig: {PLACEHOLDER}\\r\\n\\r\\n')\n    r = c.getresponse()\n    print(r.status, r.read().decode())\nexcept Exception as e:\n    print('reset', type(e).__name__)\n",
        ca = ca.display().to_string(),
        port = origin.port(),
        sport = sluice.addr().port(),
    );
    let (_, out, err) = run(Command::new(python()).arg("-c").arg(&script));
    assert!(
        out.starts_with("403") && out.contains("credential_in_trailers"),
        "{out}{err}"
    );
    // HTTP/2 trailers (Node's http2 client through a CONNECT tunnel).
    let node_client = format!(
        "const http = require('http'), tls = require('tls'), http2 = require('http2'), fs = require('fs');\nconst req = http.request({{ host: '127.0.0.1', port: {sport}, method: 'CONNECT', path: '127.0.0.1:{port}' }});\nreq.on('connect', (res, socket) => {{\n  const client = http2.connect('https://127.0.0.1:{port}', {{ createConnection: () => tls.connect({{ socket, host: '127.0.0.1', ca: fs.readFileSync({ca:?}), ALPNProtocols: ['h2'] }}) }});\n  const s = client.request({{ ':method': 'POST', ':path': '/v1/trailers2' }}, {{ waitForTrailers: true }});\n  s.on('wantTrailers', () => s.sendTrailers({{ 'x-sig': '{PLACEHOLDER}' }}));\n  let status = 0, body = '';\n  s.on('response', (h) => {{ status = h[':status']; }});\n  s.on('data', (d) => {{ body += d; }});\n  s.on('end', () => {{ console.log(status + ' ' + body); client.close(); }});\n  s.on('error', (e) => {{ console.log('reset ' + e.code); client.close(); }});\n  s.end('hello');\n}});\nreq.end();\n",
        ca = ca.display().to_string(),
        port = origin.port(),
        sport = sluice.addr().port(),
    );
    let (_, out, err) = run(Command::new("node").arg("-e").arg(&node_client));
    assert!(
        out.starts_with("403") && out.contains("credential_in_trailers"),
        "{out}{err}\n{}",
        sluice.stderr()
    );
    // The origin never saw a placeholder or a secret, in a body, a header or a trailer.
    let log = origin.log_text();
    assert!(!log.contains("openshell") && !log.contains(SECRET), "{log}");
    assert!(!log.contains("/v1/gz"), "a gzipped body arrived: {log}");
    assert_nowhere(&sluice, SECRET, &[sluice.dir.path()]);
    assert_events_valid(&sluice);
}

// === 9. Secrets in a caller's own command line ===

#[test]
fn a_secret_in_a_callers_command_line_never_reaches_a_log() {
    const FILE_SECRET: &str = "file-s3cr3t-b41d2e";
    let dir = TempDir::new("cmdline");
    let origin = HttpOrigin::start();
    // Allowed: the origin. Denied: any other port. Both are audited with the command line.
    let p = format!(
        "version: 1\nnetwork_policies:\n  web:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}}}\n    binaries:\n      - path: /usr/bin/curl\n",
        origin.port()
    );
    let providers = dir.write(
        "providers.yaml",
        "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\n  - name: other\n    env_vars: [OTHER_KEY]\nendpoints:\n  - {host: api.example.test, port: 443}\n",
    );
    let secrets = dir.write("secrets.env", &format!("OTHER_KEY={FILE_SECRET}\n"));
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut sluice = Sluice::start_with_env(
        &p,
        &[
            "--allow-loopback-upstream",
            "--providers",
            &providers.display().to_string(),
            "--secrets-file",
            &secrets.display().to_string(),
            "--log-format",
            "json",
        ],
        &[("TEST_API_KEY", SECRET)],
    );
    // Encoded spellings too: percent-encoded in the path (lower- and upper-case hex, every
    // byte or only some), and inside a `Basic` token of `user:secret`.
    let pct_all: String = SECRET.bytes().map(|b| format!("%{b:02x}")).collect();
    let pct_some: String = FILE_SECRET
        .bytes()
        .enumerate()
        .map(|(i, b)| {
            if i % 2 == 0 {
                format!("%{b:02X}")
            } else {
                char::from(b).to_string()
            }
        })
        .collect();
    let (_, token, _) = run(Command::new("sh")
        .arg("-c")
        .arg(format!("printf %s 'user:{SECRET}' | base64 -w0")));
    assert_eq!(token.len(), 32, "{token}");
    // The characters that encode only the secret's bytes, less two at either end.
    let token_inner = &token[9..30];
    for port in [origin.port(), 9] {
        let (_, out, err) = run(Command::new("curl")
            .args(["-s", "--max-time", "20", "-x", &sluice.proxy_url()])
            .args(["-w", "\n%{http_code}", "-H", &format!("X-Debug: {SECRET}")])
            .args(["-H", &format!("X-Other: {FILE_SECRET}")])
            .args(["-H", &format!("X-Basic: Basic {token}")])
            .arg(format!(
                "http://127.0.0.1:{port}/hello/{pct_all}/{pct_some}?k={pct_all}"
            )));
        let want = if port == 9 { "403" } else { "200" };
        assert!(out.ends_with(want), "{port}: {out}{err}");
    }
    let e = sluice.wait_event("a denial of the curl with the secrets", |e| {
        e["action_id"] == 2
            && e["actor"]["process"]["cmd_line"]
                .as_str()
                .is_some_and(|c| c.contains("X-Debug"))
    });
    let cmd_line = e["actor"]["process"]["cmd_line"]
        .as_str()
        .unwrap_or_default();
    assert!(
        cmd_line.contains("[redacted:test-api/api-key]")
            && cmd_line.contains("[redacted:test-api/other]"),
        "{e}"
    );
    // The path was logged, each encoded spelling redacted.
    let logged = e.to_string();
    assert!(
        logged.contains("/hello/[redacted:test-api/api-key]/[redacted:test-api/other]"),
        "{e}"
    );
    sluice.stop();
    for s in [SECRET, FILE_SECRET, &pct_all, &pct_some, token_inner] {
        assert_nowhere(&sluice, s, &[sluice.dir.path()]);
    }
    assert!(sluice.stderr().contains("[redacted:test-api/api-key]"));
    assert_events_valid(&sluice);
}

// === The scrub keeps streams streaming ===

#[test]
fn responses_to_requests_with_a_secret_still_stream() {
    let dir = TempDir::new("scrubstream");
    let origin = sluice_e2e::origin::H2Origin::start(dir.path());
    let (sluice, ca) = curl_bound(
        &dir,
        (origin.port(), &origin.cert),
        "",
        &[("TEST_API_KEY", SECRET)],
    );
    let base = format!("https://127.0.0.1:{}", origin.port());
    let proxy = sluice.proxy_url();
    // Server-sent events: each arrives when sent (1 s apart), not held for the scrub until the
    // next one (the bound leaves room for a loaded machine).
    for http in ["--http1.1", "--http2"] {
        let extra = format!("{http} -H 'Authorization: Bearer {PLACEHOLDER}'");
        assert_sse_streams(&proxy, &ca, &format!("{base}/sse"), &extra);
    }
    // 256 MiB through the scrub, in constant memory, every byte delivered.
    const SIZE: u64 = 256 << 20;
    let (code, out, err) = run(Command::new("curl")
        .args(["-sS", "--http1.1", "--max-time", "300", "--cacert"])
        .arg(&ca)
        .args(["-x", &proxy, "-o", "/dev/null", "-w", "%{size_download}"])
        .args(["-H", &format!("Authorization: Bearer {PLACEHOLDER}")])
        .arg(format!("{base}/bytes/{SIZE}")));
    assert_eq!((code, out.trim()), (0, SIZE.to_string().as_str()), "{err}");
    let peak = sluice.peak_rss_kib();
    assert!(
        peak > 0 && peak < 64 * 1024,
        "sluice's peak RSS was {peak} KiB"
    );
    // The secret went into each of the three requests (a request's event is written when its
    // exchange ends, which may be just after the client has read the last byte).
    let injected = || {
        sluice
            .events()
            .iter()
            .filter(|e| {
                class(e) == 4002 && e["unmapped"]["credentials_injected"][0] == "test-api/api-key"
            })
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while injected() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(injected(), 3);
    assert_nowhere(&sluice, SECRET, &[sluice.dir.path()]);
    assert_events_valid(&sluice);
}
