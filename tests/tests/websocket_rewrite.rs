//! End-to-end: `websocket_credential_rewrite: true` swaps the placeholders of the client's
//! WebSocket text messages for the secret (a real `websockets` client through sluice, a real
//! `websockets` TLS origin that records what it receives and echoes each message back cut in
//! five-character fragments, so the secret comes back split across frames): the origin gets
//! the secret, the client never does (it sees the placeholder back). Attacks, each closed
//! with 1008 before the placeholder reaches the origin whole: a placeholder in a binary
//! message, in a ping, in a close reason, in a message on a path the credential is not bound
//! to; a compressed (RSV1) frame with the placeholder deflated inside is a protocol error
//! (1002), and the client's offer of compression never reaches the origin; over plaintext
//! (`ws://`) a placeholder is refused (1008), never swapped; a value rotated while the socket
//! is open closes it (1012) rather than going up unscrubbable. The secret is in no log line
//! and no audit event.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::process::Command;

use serde_json::Value;
use sluice_e2e::intercepted::{Intercepted, api_key_provider, logging_origin, python_json};
use sluice_e2e::origin::OriginProcess;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python};
use sluice_e2e::reload::replace_secret;

const SECRET: &str = "ws-s3cr3t-VALUE-5e1d7a";
const PLACEHOLDER: &str = "openshell:resolve:env:TEST_API_KEY";

/// A TLS origin (`websockets`): every message and ping it receives is appended to the file
/// named by its third argument (`path kind repr`), the extensions it was offered too; each
/// text message is echoed back as `echo:<message>` in five-character fragments.
const ORIGIN: &str = r#"
import ssl, sys
from websockets.sync.server import serve
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
log = sys.argv[3]
def note(ws, kind, what):
    with open(log, 'a') as f: f.write(f'{ws.request.path} {kind} {what!r}\n')
def echo(ws):
    note(ws, 'extensions', ws.request.headers.get('Sec-WebSocket-Extensions'))
    try:
        for m in ws:
            note(ws, type(m).__name__, m)
            if isinstance(m, str):
                e = 'echo:' + m
                ws.send([e[i:i + 5] for i in range(0, len(e), 5)])
    finally:
        if ws.close_reason: note(ws, 'close', ws.close_reason)
with serve(echo, '127.0.0.1', 0, ssl=ctx, compression=None, ping_interval=None) as server:
    print(server.socket.getsockname()[1], flush=True)
    server.serve_forever()
"#;

/// [`ORIGIN`] without TLS (`ws://`): its one argument is the log.
const PLAIN_ORIGIN: &str = r#"
import sys
from websockets.sync.server import serve
log = sys.argv[1]
def echo(ws):
    for m in ws:
        with open(log, 'a') as f: f.write(f'{ws.request.path} {type(m).__name__} {m!r}\n')
        ws.send('echo:' + str(m))
with serve(echo, '127.0.0.1', 0, compression=None, ping_interval=None) as server:
    print(server.socket.getsockname()[1], flush=True)
    server.serve_forever()
"#;

/// A `websockets` client through sluice (HTTP proxy, CONNECT) trusting sluice's CA, offering
/// compression: opens `path` and, per `mode`, sends `text` (the message), `fragments` (the
/// message in fragments cut inside the placeholder), `binary`, `ping`, `close` (the
/// placeholder as the close reason), or `deflated` (a raw RSV1 frame whose payload is the
/// message deflated); prints the echo, or the close code and reason.
const CLIENT: &str = r#"
import json, os, ssl, sys, time, zlib
from websockets.sync.client import connect
from websockets.exceptions import ConnectionClosed
proxy, port, ca, path, mode, message = sys.argv[1:7]
scheme = sys.argv[7] if len(sys.argv) > 7 else 'wss'
tls = {'ssl': ssl.create_default_context(cafile=ca)} if scheme == 'wss' else {}
out = {'opened': False, 'echo': None, 'code': None, 'reason': None, 'extensions': None}
ws = connect(f'{scheme}://127.0.0.1:{port}{path}', proxy=f'http://{proxy}', **tls,
    open_timeout=10, compression='deflate', ping_interval=None)
out['opened'] = True
out['extensions'] = ws.response.headers.get('Sec-WebSocket-Extensions')
try:
    if mode == 'text':
        ws.send(message)
    elif mode == 'fragments':
        ws.send([message[:10], message[10:25], message[25:]])
    elif mode == 'binary':
        ws.send(message.encode())
    elif mode == 'ping':
        ws.ping(message.encode()[:120])
    elif mode == 'close':
        ws.close(1000, message)
    elif mode == 'rotate':
        ws.send(message)
        out['first'] = ws.recv(timeout=10)
        go = sys.argv[8]
        for _ in range(400):
            if os.path.exists(go): break
            time.sleep(0.05)
        ws.send(message)
    elif mode == 'deflated':
        c = zlib.compressobj(wbits=-15)
        p = c.compress(message.encode()) + c.flush(zlib.Z_SYNC_FLUSH)
        p = p[:-4]
        key = os.urandom(4)
        masked = bytes(b ^ key[i % 4] for i, b in enumerate(p))
        ws.socket.sendall(bytes([0xC1, 0x80 | len(p)]) + key + masked)
    out['echo'] = ws.recv(timeout=10)
    ws.close()
except ConnectionClosed as e:
    if e.rcvd is not None:
        out['code'], out['reason'] = e.rcvd.code, e.rcvd.reason
except TimeoutError:
    out['echo'] = 'TIMEOUT'
print(json.dumps(out))
"#;

fn setup() -> Intercepted {
    let dir = TempDir::new("wsrewrite");
    let (origin, origin_ca, log) = logging_origin(&dir, ORIGIN, "the websockets echo origin");
    let port = origin.port;
    let policy = rewrite_policy(port);
    let providers = api_key_provider(&dir, port, Some("/bound/**"));
    let started = Sluice::intercepting(
        &dir,
        &policy,
        &[origin_ca.as_path()],
        Some(&providers),
        &[("TEST_API_KEY", SECRET)],
    );
    Intercepted::new(dir, origin, log, started)
}

fn send(s: &Intercepted, path: &str, mode: &str, message: &str) -> Value {
    send_to(s, s.origin.port, path, mode, message, "wss")
}

fn send_to(
    s: &Intercepted,
    port: u16,
    path: &str,
    mode: &str,
    message: &str,
    scheme: &str,
) -> Value {
    let out = python_json(
        &s.sluice,
        CLIENT,
        &[
            &s.sluice.addr().to_string(),
            &port.to_string(),
            &s.ca.display().to_string(),
            path,
            mode,
            message,
            scheme,
        ],
    );
    assert!(
        !out.to_string().contains(SECRET),
        "the client got the secret: {out}"
    );
    out
}

/// Neither sluice's log nor its audit holds the secret.
fn assert_secret_nowhere(s: &Intercepted) {
    let events: Vec<String> = s.sluice.events().iter().map(Value::to_string).collect();
    let all = format!("{}\n{}", s.sluice.stderr(), events.join("\n"));
    assert!(
        !all.contains(SECRET),
        "the secret is in sluice's output:\n{all}"
    );
    assert_events_valid(&s.sluice);
}

#[test]
fn a_text_message_gets_the_secret_and_its_echo_comes_back_scrubbed() {
    let s = setup();
    let message = format!("auth {PLACEHOLDER} please");
    for mode in ["text", "fragments"] {
        let out = send(&s, "/bound/chat", mode, &message);
        assert_eq!(
            out["echo"],
            format!("echo:{message}"),
            "{mode}: {out}\n{}",
            s.sluice.stderr()
        );
        assert_eq!(out["extensions"], Value::Null, "{out}");
    }
    let got = s.received();
    assert_eq!(
        got.matches(&format!("/bound/chat str 'auth {SECRET} please'"))
            .count(),
        2,
        "the origin did not get the secret twice: {got}"
    );
    assert!(!got.contains(PLACEHOLDER), "{got}");
    // The client's offer of compression never reached the origin.
    assert!(got.contains("/bound/chat extensions None"), "{got}");
    let swapped = s.sluice.wait_event("the swapped message", |e| {
        e["activity_name"] == "WEBSOCKET_TEXT"
            && e.to_string().contains("credential placeholders swapped")
    });
    assert!(swapped.to_string().contains("api-key"), "{swapped}");
    s.sluice.wait_event("the echoed secret's finding", |e| {
        e["class_uid"] == 2004 && e.to_string().contains("reflected")
    });
    assert_secret_nowhere(&s);
}

#[test]
fn a_placeholder_outside_a_text_message_closes_the_websocket_before_the_origin() {
    let s = setup();
    let message = format!("auth {PLACEHOLDER}");
    for mode in ["binary", "ping", "close"] {
        let out = send(&s, "/bound/chat", mode, &message);
        assert_eq!(out["opened"], true, "{out}");
        assert_eq!(out["code"], 1008, "{mode}: {out}\n{}", s.sluice.stderr());
        assert!(
            out["reason"]
                .as_str()
                .unwrap()
                .contains("only text messages have their placeholders swapped"),
            "{mode}: {out}"
        );
    }
    let got = s.received();
    assert!(!got.contains(SECRET), "{got}");
    assert!(
        !got.contains(PLACEHOLDER),
        "a placeholder reached the origin: {got}"
    );
    s.sluice.wait_event("the uninspectable finding", |e| {
        e["class_uid"] == 2004 && e.to_string().contains("only text messages")
    });
    assert_secret_nowhere(&s);
}

#[test]
fn a_compressed_frame_or_an_unbound_path_never_carries_the_secret() {
    let s = setup();
    let message = format!("auth {PLACEHOLDER}");
    let out = send(&s, "/bound/chat", "deflated", &message);
    assert_eq!(out["code"], 1002, "{out}\n{}", s.sluice.stderr());
    // Where the credential is not bound: refused as a request would be.
    let out = send(&s, "/elsewhere", "text", &message);
    assert_eq!(out["code"], 1008, "{out}\n{}", s.sluice.stderr());
    assert!(
        out["reason"].as_str().unwrap().contains("not authorized"),
        "{out}"
    );
    let got = s.received();
    assert!(!got.contains(SECRET), "{got}");
    assert!(!got.contains("str"), "a message reached the origin: {got}");
    s.sluice.wait_event("the mismatch finding", |e| {
        e["class_uid"] == 2004 && e.to_string().contains("endpoint_mismatch")
    });
    assert_secret_nowhere(&s);
}

#[test]
fn over_plaintext_the_placeholder_is_refused_not_swapped() {
    let dir = TempDir::new("wsrewrite-plain");
    let log = dir.path().join("received.log");
    std::fs::write(&log, "").unwrap();
    let origin = OriginProcess::spawn(
        Command::new("python3").args(["-c", PLAIN_ORIGIN]).arg(&log),
        "the plain websockets origin",
    );
    let port = origin.port;
    let policy = rewrite_policy(port);
    let providers = api_key_provider(&dir, port, None);
    let started = Sluice::intercepting(
        &dir,
        &policy,
        &[],
        Some(&providers),
        &[("TEST_API_KEY", SECRET)],
    );
    let s = Intercepted::new(dir, origin, log, started);
    let out = send_to(&s, port, "/chat", "text", "no placeholder", "ws");
    assert_eq!(
        out["echo"],
        "echo:no placeholder",
        "{out}\n{}",
        s.sluice.stderr()
    );
    let out = send_to(
        &s,
        port,
        "/chat",
        "text",
        &format!("auth {PLACEHOLDER}"),
        "ws",
    );
    assert_eq!(out["code"], 1008, "{out}\n{}", s.sluice.stderr());
    assert!(
        out["reason"]
            .as_str()
            .unwrap()
            .contains("only be sent over TLS"),
        "{out}"
    );
    let got = s.received();
    assert!(!got.contains(SECRET), "{got}");
    assert!(!got.contains(PLACEHOLDER), "{got}");
    assert_secret_nowhere(&s);
}

/// The credential's value changes (a reload of `--secrets-file`) while a WebSocket is open:
/// its upstream frames are scrubbed of the values bound at the upgrade, so the next message
/// with the placeholder closes with 1012 (the client reconnects) rather than sending a value
/// whose echo would not be scrubbed.
#[test]
fn a_value_rotated_while_the_websocket_is_open_closes_it_with_1012() {
    const NEW: &str = "ws-n3w-VALUE-8d2c41";
    let dir = TempDir::new("wsrewrite-rotate");
    let (origin, origin_ca, log) = logging_origin(&dir, ORIGIN, "the websockets echo origin");
    let port = origin.port;
    let secrets = dir.path().join("secrets.env");
    replace_secret(&secrets, SECRET);
    let policy = rewrite_policy(port);
    let providers = api_key_provider(&dir, port, None);
    let (sluice, ca) = Sluice::intercepting_with(
        &dir,
        &policy,
        &[origin_ca.as_path()],
        Some(&providers),
        &[],
        &["--secrets-file", secrets.to_str().unwrap()],
    );
    let go = dir.path().join("go");
    let message = format!("auth {PLACEHOLDER}");
    let client = Command::new("python3")
        .args([
            "-c",
            CLIENT,
            &sluice.addr().to_string(),
            &port.to_string(),
            &ca.display().to_string(),
            "/chat",
            "rotate",
            &message,
            "wss",
            go.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(&log).unwrap().contains(SECRET) {
        assert!(start.elapsed().as_secs() < 20, "no first message");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    replace_secret(&secrets, NEW);
    sluice.wait_event("the reload", |e| {
        e["class_uid"] == 5019
            && sluice
                .events()
                .iter()
                .filter(|e| e["class_uid"] == 5019)
                .count()
                >= 2
    });
    std::fs::write(&go, "").unwrap();
    let out = client.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    let out: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(out["first"], format!("echo:{message}"), "{out}");
    assert_eq!(out["code"], 1012, "{out}\n{}", sluice.stderr());
    let got = std::fs::read_to_string(&log).unwrap();
    assert!(!got.contains(NEW), "the new value went up: {got}");
    let all = format!(
        "{}\n{}",
        sluice.stderr(),
        serde_json::to_string(&sluice.events()).unwrap()
    );
    for secret in [SECRET, NEW] {
        assert!(!all.contains(secret), "sluice's output holds a secret");
    }
}

/// The policy of these tests: the origin at `port`, every request allowed to Python, and the
/// client's WebSocket text messages rewritten.
fn rewrite_policy(port: u16) -> String {
    format!(
        "version: 1
network_policies:
  ws:
    endpoints:
      - {{host: 127.0.0.1, port: {port}, protocol: rest, enforcement: enforce, access: full, websocket_credential_rewrite: true}}
    binaries:
      - path: {}
",
        python()
    )
}
