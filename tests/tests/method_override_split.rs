//! End-to-end attacks on the streaming `_method` check of form bodies: a raw HTTP/1.1 client
//! that cuts a form's `_method` field across TCP writes (and chunks) where a parser could
//! lose track of it, stalls inside it, sends it twice or behind a huge part head, and an
//! HTTP/2 client that cuts it across DATA frames; the origins record every byte they
//! receive, and must never receive the denied field.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::Value;
use sluice_e2e::h2client::{self, H2Request};
use sluice_e2e::origin::RecordingOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, me};

/// GET anywhere, POST only under /items for the test itself: DELETE is refused.
fn policy(port: u16) -> String {
    policy_for(port, &me())
}

/// The same policy for the client `binary`.
fn policy_for(port: u16, binary: &str) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /**}}\n          - allow: {{method: POST, path: /items/**}}\n    binaries:\n      - path: {binary}\n"
    )
}

/// One connection as the raw origin saw it: every byte, and whether a whole request came.
#[derive(Clone, Debug, Default)]
struct Seen {
    bytes: Vec<u8>,
    complete: bool,
}

/// An HTTP/1.1 origin that records every byte of every connection (a request cut off
/// included) and answers `200` to a request whose body (by `Content-Length`, or chunked up
/// to its last chunk) came whole.
struct RawOrigin {
    port: u16,
    seen: Arc<Mutex<Vec<Arc<Mutex<Seen>>>>>,
}

impl RawOrigin {
    fn start() -> RawOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<Arc<Mutex<Seen>>>>> = Arc::default();
        let all = Arc::clone(&seen);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let conn = Arc::new(Mutex::new(Seen::default()));
                all.lock().unwrap().push(Arc::clone(&conn));
                thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
                    let mut buf = [0u8; 65_536];
                    loop {
                        let n = match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let mut c = conn.lock().unwrap();
                        c.bytes.extend_from_slice(&buf[..n]);
                        if !c.complete && whole_request(&c.bytes) {
                            c.complete = true;
                            let _ = stream
                                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
                        }
                    }
                });
            }
        });
        RawOrigin { port, seen }
    }

    /// Every connection so far, after giving cut-off ones a moment to be closed.
    fn seen(&self) -> Vec<Seen> {
        thread::sleep(Duration::from_millis(300));
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.lock().unwrap().clone())
            .collect()
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Whether `bytes` hold a whole request: its head, and its body by its framing.
fn whole_request(bytes: &[u8]) -> bool {
    let Some(end) = find(bytes, b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let body = &bytes[end + 4..];
    if let Some(len) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return body.len() >= len;
    }
    head.contains("transfer-encoding: chunked") && body.ends_with(b"0\r\n\r\n")
}

const BOUNDARY: &str = "split-boundary";

/// A multipart body: a file part of `file` bytes, then `tail`, then the closing delimiter.
fn form(file: usize, tail: &str) -> Vec<u8> {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\n\r\n"
    )
    .into_bytes();
    body.extend((0..file).map(|i| b"ab\r\n-c"[i % 6]));
    body.extend_from_slice(tail.as_bytes());
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    body
}

fn method_part(name: &str, value: &str) -> String {
    format!("\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}")
}

/// How the body goes on the wire.
#[derive(Clone, Copy, Debug)]
enum Framing {
    Length,
    /// Chunked, a chunk ending at each cut.
    Chunked,
}

/// Sends `POST /items/...` with `body` through sluice as an absolute-form request, the body
/// cut into separate TCP writes (50 ms apart) at `cuts`; `stall` stops after the last cut
/// and waits for the answer. Returns the status and the answer's JSON (if any).
fn send(
    sluice: &Sluice,
    port: u16,
    path: &str,
    body: &[u8],
    cuts: &[usize],
    framing: Framing,
    stall: bool,
) -> (u16, Value) {
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let framing_header = match framing {
        Framing::Length => format!("Content-Length: {}", body.len()),
        Framing::Chunked => "Transfer-Encoding: chunked".to_string(),
    };
    let head = format!(
        "POST http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: multipart/form-data; boundary={BOUNDARY}\r\n{framing_header}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut from = 0;
    let ends: Vec<usize> = cuts.iter().copied().chain([body.len()]).collect();
    for (i, &to) in ends.iter().enumerate() {
        let last = i + 1 == ends.len();
        if stall && last {
            break;
        }
        let piece = &body[from..to];
        let wire = match framing {
            Framing::Length => piece.to_vec(),
            Framing::Chunked => {
                let mut w = format!("{:x}\r\n", piece.len()).into_bytes();
                w.extend_from_slice(piece);
                w.extend_from_slice(b"\r\n");
                if last {
                    w.extend_from_slice(b"0\r\n\r\n");
                }
                w
            }
        };
        if s.write_all(&wire).is_err() {
            break;
        }
        from = to;
        thread::sleep(Duration::from_millis(50));
    }
    answer_of(&mut s)
}

/// A chunked body's payload.
fn dechunk(mut wire: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = find(wire, b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&wire[..eol]).unwrap(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&wire[eol + 2..eol + 2 + size]);
        wire = &wire[eol + 2 + size + 2..];
    }
}

/// Where in `body` each byte of `needle` is: cuts inside it.
fn cuts_in(body: &[u8], needle: &str) -> Vec<usize> {
    let at = find(body, needle.as_bytes()).unwrap();
    (at..=at + needle.len()).collect()
}

#[test]
fn a_method_field_cut_across_writes_never_reaches_the_origin() {
    let origin = RawOrigin::start();
    let sluice = Sluice::start(&policy(origin.port), &["--allow-loopback-upstream"]);
    let denied = form(200_000, &method_part("_method", "DELETE"));
    // Cut at every byte of the delimiter, the name and the value, one cut per request;
    // every other request also chunked at the same places.
    let delimiter = format!("\r\n--{BOUNDARY}\r\nContent-Disposition");
    let mut places: Vec<usize> = cuts_in(&denied, &delimiter);
    places.extend(cuts_in(&denied, "name=\"_method\""));
    places.extend(cuts_in(&denied, "DELETE\r\n"));
    for (i, &at) in places.iter().enumerate() {
        let framing = if i % 2 == 0 {
            Framing::Length
        } else {
            Framing::Chunked
        };
        let (status, json) = send(
            &sluice,
            origin.port,
            &format!("/items/cut{i}"),
            &denied,
            &[at - 1, at],
            framing,
            false,
        );
        assert_eq!(
            status,
            403,
            "cut at {at} ({framing:?}): {json}\n{}",
            sluice.stderr()
        );
        assert_eq!(json["error"], "policy_denied", "{json}");
        assert_eq!(json["method_override"], "multipart field _method", "{json}");
    }
    // Allowed the same way: every byte arrives, in order.
    let allowed = form(200_000, &method_part("_method", "GET"));
    let (status, json) = send(
        &sluice,
        origin.port,
        "/items/allowed",
        &allowed,
        &cuts_in(&allowed, "name=\"_method\""),
        Framing::Chunked,
        false,
    );
    assert_eq!(status, 200, "{json}");
    let seen = origin.seen();
    let passed: Vec<&Seen> = seen.iter().filter(|c| c.complete).collect();
    assert_eq!(passed.len(), 1, "only the allowed request came whole");
    let body_at = find(&passed[0].bytes, b"\r\n\r\n").unwrap() + 4;
    // Chunked upstream too: the payload is the same bytes.
    let got = dechunk(&passed[0].bytes[body_at..]);
    assert!(
        got == allowed,
        "the origin got other bytes ({} of {})",
        got.len(),
        allowed.len()
    );
    for c in seen.iter().filter(|c| !c.complete) {
        assert!(
            find(&c.bytes, b"_method").is_none(),
            "the origin saw _method"
        );
        assert!(find(&c.bytes, b"DELETE").is_none(), "the origin saw DELETE");
    }
}

#[test]
fn held_fields_are_bounded_and_a_second_or_stalled_one_is_judged() {
    let origin = RawOrigin::start();
    let sluice = Sluice::start(
        &policy(origin.port),
        &["--allow-loopback-upstream", "--body-timeout", "2s"],
    );
    // Two `_method` parts: the allowed one may go, the denied one never does.
    let tail = format!(
        "{}{}",
        method_part("_method", "GET"),
        method_part("_METHOD", "DELETE")
    );
    let two = form(100_000, &tail);
    let (status, json) = send(
        &sluice,
        origin.port,
        "/items/two",
        &two,
        &[],
        Framing::Length,
        false,
    );
    assert_eq!(
        (status, &json["error"]),
        (403, &Value::from("policy_denied")),
        "{json}"
    );
    // A `_method` part behind 5 MiB of file data.
    let late = form(5 << 20, &method_part("_method", "DELETE"));
    let (status, json) = send(
        &sluice,
        origin.port,
        "/items/late",
        &late,
        &[],
        Framing::Chunked,
        false,
    );
    assert_eq!(status, 403, "{json}");
    // A client that stalls inside the `_method` part: cut off as too slow; the part never
    // went.
    let stalled = form(10_000, &method_part("_method", "DELETE"));
    let stop = find(&stalled, b"DEL").unwrap();
    let (status, json) = send(
        &sluice,
        origin.port,
        "/items/stall",
        &stalled,
        &[stop],
        Framing::Length,
        true,
    );
    assert_eq!(status, 408, "{json}");
    // A part head larger than sluice holds, a `_method` value longer than a method list.
    let huge_head = form(
        1000,
        &format!(
            "\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"x\"\r\nX-Pad: {}\r\n\r\nv",
            "p".repeat(9000)
        ),
    );
    let long_value = form(
        1000,
        &method_part("_method", &format!("DELETE{}", " ".repeat(2000))),
    );
    for (path, body) in [("/items/head", &huge_head), ("/items/value", &long_value)] {
        let (status, json) = send(
            &sluice,
            origin.port,
            path,
            body,
            &[],
            Framing::Length,
            false,
        );
        assert_eq!(status, 400, "{path}: {json}");
        assert_eq!(json["error"], "invalid_method_override", "{json}");
    }
    for c in origin.seen() {
        assert!(!c.complete, "a refused form came whole");
        assert!(find(&c.bytes, b"DELETE").is_none(), "the origin saw DELETE");
        assert!(
            find(&c.bytes, b"X-Pad").is_none(),
            "the origin saw the huge head"
        );
    }
}

#[test]
fn a_method_field_cut_across_http2_data_frames_never_reaches_the_origin() {
    let dir = TempDir::new("override-h2-split");
    let origin = RecordingOrigin::start(dir.path());
    let policy = policy_for(origin.port(), &h2client::node_path());
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[&origin.cert], None, &[]);
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let denied = form(20_000, &method_part("_method", "DELETE"));
    let delimiter = format!("\r\n--{BOUNDARY}\r\nContent-Disposition");
    let mut places: Vec<usize> = cuts_in(&denied, &delimiter);
    places.extend(cuts_in(&denied, "name=\"_method\""));
    places.extend(cuts_in(&denied, "DELETE\r\n"));
    let mut requests: Vec<H2Request> = places
        .iter()
        .enumerate()
        .map(|(i, &at)| H2Request {
            path: format!("/items/h2cut{i}"),
            content_type: content_type.clone(),
            body: denied.clone(),
            cuts: vec![at - 1, at],
            pause_ms: 5,
        })
        .collect();
    // Allowed, a byte a frame through the whole `_method` part.
    let allowed = form(20_000, &method_part("_method", "GET"));
    let start = find(
        &allowed,
        b"\r\n--split-boundary\r\nContent-Disposition: form-data; name=\"_method\"",
    )
    .unwrap();
    requests.push(H2Request {
        path: "/items/h2allowed".to_string(),
        content_type,
        body: allowed.clone(),
        cuts: (start..allowed.len()).collect(),
        pause_ms: 1,
    });
    let answers = h2client::send(sluice.addr(), origin.port(), &ca, dir.path(), &requests);
    let (last, refused) = answers.split_last().unwrap();
    for (a, r) in refused.iter().zip(&requests) {
        assert_eq!(a.status, 403, "{}: {a:?}\n{}", r.path, sluice.stderr());
        let json: Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(json["error"], "policy_denied", "{json}");
        assert_eq!(json["method_override"], "multipart field _method", "{json}");
    }
    assert_eq!(last.status, 200, "{last:?}\n{}", sluice.stderr());
    thread::sleep(Duration::from_millis(500));
    let got = origin.all();
    let whole: Vec<&str> = got
        .iter()
        .filter(|r| r.complete)
        .map(|r| r.url.as_str())
        .collect();
    assert_eq!(
        whole,
        ["/items/h2allowed"],
        "only the allowed request came whole"
    );
    for r in &got {
        if r.complete {
            assert!(r.body == allowed, "the origin got other bytes");
        } else {
            assert!(
                find(&r.body, b"_method").is_none(),
                "{}: the origin saw _method",
                r.url
            );
        }
    }
}

/// Sends `POST /items/...` with `content_type` (`None`: no such header) and `body` in one
/// write through sluice. Returns the status and the answer's JSON (if any).
fn send_typed(
    sluice: &Sluice,
    port: u16,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, Value) {
    let mut s = TcpStream::connect(sluice.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut wire = format!(
        "POST http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    wire.extend_from_slice(body);
    s.write_all(&wire).unwrap();
    answer_of(&mut s)
}

/// Forms that PHP (Laravel), Rack (Rails) or body-parser (Express) read as naming DELETE,
/// each in a spelling found to differ from sluice's first reading: every one is refused and
/// no origin receives it whole.
#[test]
fn forms_as_php_rack_and_body_parser_read_them_never_reach_the_origin_whole() {
    let origin = RawOrigin::start();
    let sluice = Sluice::start(&policy(origin.port), &["--allow-loopback-upstream"]);
    let part = |boundary: &str, head: &str| {
        format!("--{boundary}\r\n{head}\r\n\r\nDELETE\r\n--{boundary}--\r\n").into_bytes()
    };
    let named = "Content-Disposition: form-data; name=\"_method\"";
    let cases: Vec<(&str, String, Vec<u8>)> = vec![
        // Rack: a POST with an empty Content-Type is a form.
        ("rack empty type", String::new(), b"_method=DELETE".to_vec()),
        // PHP: the first `boundary`, then the first `=` after it.
        (
            "php boundaryx",
            "multipart/form-data; boundaryx=evil; boundary=good".into(),
            part("evil", named),
        ),
        (
            "php boundary word",
            "multipart/form-data; a=boundary; b=evil".into(),
            part("evil", named),
        ),
        // PHP, Rack, busboy: white space is part of the boundary; an empty one is accepted.
        (
            "leading space",
            "multipart/form-data; boundary=\" abc\"".into(),
            part(" abc", named),
        ),
        (
            "empty boundary",
            "multipart/form-data; boundary=\"\"".into(),
            part("", named),
        ),
        // Rack 2: brackets around the name; body-parser: a byte order mark before it.
        (
            "rack2 brackets",
            "application/x-www-form-urlencoded".into(),
            b"[_method]=DELETE".to_vec(),
        ),
        (
            "bom",
            "application/x-www-form-urlencoded".into(),
            b"\xef\xbb\xbf_method=DELETE".to_vec(),
        ),
        // Rack 2: a delimiter line led by white space (each line is compared stripped).
        (
            "rack2 led delimiter",
            format!("multipart/form-data; boundary={BOUNDARY}"),
            [b" \t".as_slice(), &part(BOUNDARY, named)].concat(),
        ),
        // PHP: single quotes; a header line without a colon joined to the one before.
        (
            "php quotes",
            format!("multipart/form-data; boundary={BOUNDARY}"),
            part(BOUNDARY, "Content-Disposition: form-data; name='_method'"),
        ),
        (
            "php joined",
            format!("multipart/form-data; boundary={BOUNDARY}"),
            part(
                BOUNDARY,
                "Content-Disposition: form-data; na\r\nme=\"_method\"",
            ),
        ),
    ];
    for (i, (what, content_type, body)) in cases.iter().enumerate() {
        let (status, json) = send_typed(
            &sluice,
            origin.port,
            &format!("/items/d{i}"),
            content_type,
            body,
        );
        assert!(
            status == 403 || status == 400,
            "{what}: {status} {json}\n{}",
            sluice.stderr()
        );
        assert_eq!(
            json["error"],
            if status == 403 {
                "policy_denied"
            } else {
                "invalid_method_override"
            },
            "{what}: {json}"
        );
    }
    for c in origin.seen() {
        assert!(!c.complete, "a refused form reached the origin whole");
        assert!(find(&c.bytes, b"DELETE").is_none(), "the origin saw DELETE");
    }
}

/// The status and JSON body of what `s` answers until it closes (0 and null when there is
/// none).
fn answer_of(s: &mut TcpStream) -> (u16, Value) {
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}
