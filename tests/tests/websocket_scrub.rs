//! End-to-end attack tests of a WebSocket to a credentialed endpoint: an origin that echoes
//! the injected `Authorization` into its frames (a text frame, a text message fragmented
//! with the secret split across fragments and a ping between, a binary frame, a close
//! reason) never hands the secret to the client; an origin answering with an extension
//! nobody offered, or sending a compressed (RSV1) frame, is cut off; a handshake with a body
//! is refused before anything goes upstream. Real binary, a Python
//! TLS origin and a Python client that parses every frame it receives.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use sluice_e2e::intercepted::{api_key_provider, python_json};
use sluice_e2e::ocsf::action;
use sluice_e2e::origin::{OriginProcess, Script, spawn_tls};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python, run};

const SECRET: &str = "s3cr3t-VALUE-7f3a9c";
const PLACEHOLDER: &str = "openshell:resolve:env:TEST_API_KEY";

/// A TLS WebSocket origin (Python, raw sockets): answers each handshake with `101`, then
/// per path: `/echo` sends the extensions it was offered (`ext=...`), then the
/// `Authorization` it received in (a) one text frame, (b) a text message in two fragments
/// split inside the secret with a ping between, (c) a binary frame, (d) a close frame's
/// reason, each in its own write; `/deflate` also names `permessage-deflate` in its `101`
/// (the `Authorization` in a parameter); `/rsv` sends the header in a frame with RSV1 set (compressed, unnegotiated);
/// `/slow` answers its `101` half a second late.
const WS_ORIGIN: &str = r#"
import base64, hashlib, socket, ssl, sys, threading, time
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
GUID = b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
def frame(op, payload, fin=True, rsv=0):
    n = len(payload)
    b0 = (0x80 if fin else 0) | rsv | op
    if n < 126: h = bytes([b0, n])
    elif n < 65536: h = bytes([b0, 126]) + n.to_bytes(2, 'big')
    else: h = bytes([b0, 127]) + n.to_bytes(8, 'big')
    return h + payload
def serve(raw):
    try:
        c = ctx.wrap_socket(raw, server_side=True)
        data = b''
        while b'\r\n\r\n' not in data:
            d = c.recv(4096)
            if not d: return
            data += d
        lines = data.split(b'\r\n\r\n', 1)[0].split(b'\r\n')
        path = lines[0].split(b' ')[1]
        hdr = {}
        for l in lines[1:]:
            k, v = l.split(b':', 1); hdr[k.strip().lower()] = v.strip()
        accept = base64.b64encode(hashlib.sha1(hdr[b'sec-websocket-key'] + GUID).digest())
        if path == b'/slow':
            time.sleep(0.5)
        auth = hdr.get(b'authorization', b'')
        extra = b'Sec-WebSocket-Extensions: permessage-deflate; note=' + auth + b'\r\n' if path == b'/deflate' else b''
        c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + b'\r\n' + extra + b'\r\n')
        def send(b):
            c.sendall(b); time.sleep(0.05)
        if path == b'/rsv':
            send(frame(1, b'compressed ' + auth, rsv=0x40))
        elif path == b'/echo':
            send(frame(1, b'ext=' + hdr.get(b'sec-websocket-extensions', b'none')))
            send(frame(1, b'(a) ' + auth))
            k = len(auth) - 10
            send(frame(1, b'(b) ' + auth[:k], fin=False))
            send(frame(9, b'ping between'))
            send(frame(0, auth[k:] + b' end'))
            send(frame(2, b'\x00(c) ' + auth + b'\xff'))
            send(frame(8, (1000).to_bytes(2, 'big') + b'(d) ' + auth))
        time.sleep(0.3)
        c.close()
    except Exception as e:
        print('ws origin:', e, file=sys.stderr)
while True:
    raw, _ = s.accept()
    threading.Thread(target=serve, args=(raw,), daemon=True).start()
"#;

/// A WebSocket client (Python): CONNECT through sluice, TLS trusting its CA, a handshake
/// with the placeholder and an offer of `permessage-deflate`, then every byte until the
/// connection ends, parsed strictly as server frames (unmasked, no RSV bits, control frames
/// final and at most 125 bytes, continuations only inside a message, text UTF-8). Prints
/// JSON: the answer's head, every byte received (latin-1), the messages and control frames
/// in order (latin-1 payloads), and the first framing violation if any.
const WS_CLIENT: &str = r#"
import base64, json, os, socket, ssl, sys
proxy, port, ca, path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
body = {'': '', 'length': 'Content-Length: 5\r\n\r\nhello',
    'chunked': 'Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n'}[sys.argv[5] if len(sys.argv) > 5 else '']
host, pport = proxy.rsplit(':', 1)
s = socket.create_connection((host, int(pport)), timeout=20)
s.sendall(f'CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n'.encode())
connect = b''
while not connect.endswith(b'\r\n\r\n'):
    b = s.recv(1)
    if not b: break
    connect += b
t = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname='127.0.0.1')
key = base64.b64encode(os.urandom(16)).decode()
t.sendall((f'GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
    f'Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n'
    'Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n'
    'Authorization: Bearer openshell:resolve:env:TEST_API_KEY\r\n' + (body or '\r\n')).encode())
raw = b''
while True:
    try:
        d = t.recv(65536)
    except (ssl.SSLError, OSError):
        break
    if not d: break
    raw += d
head, _, rest = raw.partition(b'\r\n\r\n')
got, error, msg, i = [], None, None, 0
try:
    while i < len(rest):
        if len(rest) - i < 2: raise ValueError('truncated header')
        b0, b1 = rest[i], rest[i + 1]; i += 2
        if b0 & 0x70: raise ValueError('reserved bits')
        if b1 & 0x80: raise ValueError('masked server frame')
        n = b1 & 0x7f
        if n == 126: n = int.from_bytes(rest[i:i + 2], 'big'); i += 2
        elif n == 127: n = int.from_bytes(rest[i:i + 8], 'big'); i += 8
        if len(rest) - i < n: raise ValueError('truncated payload')
        p = rest[i:i + n]; i += n
        op, fin = b0 & 0x0f, bool(b0 & 0x80)
        if op >= 8:
            if not fin or n > 125: raise ValueError('bad control frame')
            if op == 8 and n > 2: p[2:].decode('utf-8')
            got.append({'op': op, 'payload': p.decode('latin-1')}); continue
        if op == 0:
            if msg is None: raise ValueError('continuation outside a message')
            msg[1] += p
        else:
            if msg is not None: raise ValueError('message inside a message')
            msg = [op, p]
        if fin:
            if msg[0] == 1: msg[1].decode('utf-8')
            got.append({'op': msg[0], 'payload': msg[1].decode('latin-1')}); msg = None
    if msg is not None: raise ValueError('message unfinished')
except (ValueError, UnicodeDecodeError) as e:
    error = str(e)
print(json.dumps({'connect': connect.decode('latin-1'), 'head': head.decode('latin-1'),
    'raw': raw.decode('latin-1'), 'got': got, 'error': error}))
"#;

struct Setup {
    sluice: Sluice,
    ca: std::path::PathBuf,
    origin: OriginProcess,
    _dir: TempDir,
}

fn setup(tag: &str) -> Setup {
    let dir = TempDir::new(tag);
    let (origin, origin_ca) = spawn_tls(
        dir.path(),
        Script::Python(WS_ORIGIN),
        &[],
        "the TLS WebSocket origin (python)",
    );
    let port = origin.port;
    let p = format!(
        "version: 1\nnetwork_policies:\n  ws:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: {}\n",
        python()
    );
    let providers = api_key_provider(&dir, port, None);
    let (sluice, ca) = Sluice::intercepting(
        &dir,
        &p,
        &[Path::new(&origin_ca)],
        Some(&providers),
        &[("TEST_API_KEY", SECRET)],
    );
    Setup {
        sluice,
        ca,
        origin,
        _dir: dir,
    }
}

fn client(s: &Setup, path: &str) -> Value {
    client_with_body(s, path, "")
}

/// `body`: `length` or `chunked` sends a 5-byte body after the handshake's head.
fn client_with_body(s: &Setup, path: &str, body: &str) -> Value {
    python_json(
        &s.sluice,
        WS_CLIENT,
        &[
            &s.sluice.addr().to_string(),
            &s.origin.port.to_string(),
            &s.ca.display().to_string(),
            path,
            body,
        ],
    )
}

/// Everything sluice wrote where a reader could find it: its stderr and its audit log.
fn sluice_output(s: &Setup) -> String {
    let events: Vec<String> = s.sluice.events().iter().map(Value::to_string).collect();
    format!("{}\n{}", s.sluice.stderr(), events.join("\n"))
}

#[test]
fn an_origin_echoing_the_injected_secret_in_its_frames_never_hands_it_to_the_client() {
    let s = setup("wsscrub");
    let out = client(&s, "/echo");
    let raw = out["raw"].as_str().unwrap();
    assert!(
        out["head"].as_str().unwrap().starts_with("HTTP/1.1 101"),
        "{out}\n{}",
        s.sluice.stderr()
    );
    // Every byte the client received: never the secret, the placeholder where it was.
    assert!(
        !raw.contains(SECRET),
        "the client received the secret: {raw}"
    );
    assert!(raw.contains(PLACEHOLDER), "{raw}");
    assert_eq!(out["error"], Value::Null, "frames are valid: {out}");
    let got: Vec<(u64, String)> = out["got"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["op"].as_u64().unwrap(),
                g["payload"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let stars = "*".repeat(SECRET.len());
    let want: Vec<(u64, String)> = vec![
        // The client's offer of compression never reached the origin.
        (1, "ext=none".into()),
        (1, format!("(a) Bearer {PLACEHOLDER}")),
        (9, "ping between".into()),
        (1, format!("(b) Bearer {PLACEHOLDER} end")),
        (2, format!("\u{0}(c) Bearer {stars}\u{ff}")),
        (8, format!("\u{3}\u{e8}(d) Bearer {PLACEHOLDER}")),
    ];
    assert_eq!(got, want, "{out}");
    // The reflection is a finding, as for an HTTP response; nothing logged holds the secret.
    s.sluice.wait_event("the reflected finding", |e| {
        e["finding_info"]["types"][0] == "sluice.provider_credential.reflected"
    });
    assert!(!sluice_output(&s).contains(SECRET));
    assert_events_valid(&s.sluice);
}

#[test]
fn an_extension_nobody_offered_or_a_compressed_frame_ends_the_websocket() {
    let s = setup("wsext");
    // A `101` naming permessage-deflate (sluice offered none): refused, audited.
    let out = client(&s, "/deflate");
    let head = out["head"].as_str().unwrap();
    assert!(head.starts_with("HTTP/1.1 502"), "{out}");
    let raw = out["raw"].as_str().unwrap();
    // The origin put the secret in the extension's parameters: the refusal never carries it.
    assert!(
        !raw.contains(SECRET),
        "the client received the secret: {raw}"
    );
    assert!(raw.contains("credential_response_encoded"), "{raw}");
    assert!(
        raw.contains("`permessage-deflate`"),
        "the refusal names it: {raw}"
    );
    let denied = s.sluice.wait_event("the refused handshake", |e| {
        e.to_string().contains("/deflate") && e.to_string().contains("permessage-deflate")
    });
    assert_eq!(action(&denied), 2, "denied: {denied}");
    // A frame with RSV1 set (compressed, never negotiated): the connection is closed before
    // any of it reaches the client.
    let out = client(&s, "/rsv");
    assert!(
        out["head"].as_str().unwrap().starts_with("HTTP/1.1 101"),
        "{out}"
    );
    assert_eq!(out["got"], serde_json::json!([]), "{out}");
    let raw = out["raw"].as_str().unwrap();
    assert!(
        !raw.contains(SECRET) && !raw.contains("compressed"),
        "{raw}"
    );
    let finding = s.sluice.wait_event("the uninspectable finding", |e| {
        e["finding_info"]["types"][0] == "openshell.credentials.traffic_uninspectable"
    });
    assert!(
        finding.to_string().contains("reserved bits"),
        "the finding says why: {finding}"
    );
    assert!(!sluice_output(&s).contains(SECRET));
    assert_events_valid(&s.sluice);
}

#[test]
fn a_handshake_with_a_body_is_refused_before_anything_goes_upstream() {
    let s = setup("wsbody");
    for body in ["length", "chunked"] {
        let started = std::time::Instant::now();
        let out = client_with_body(&s, "/echo", body);
        let head = out["head"].as_str().unwrap();
        // Before: the handshake went up with a body that never ended, and the client waited
        // for the upstream timeout.
        assert!(
            head.starts_with("HTTP/1.1 400"),
            "{body}: {out}\n{}",
            s.sluice.stderr()
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "{body}: answered at once"
        );
        let raw = out["raw"].as_str().unwrap();
        assert!(raw.contains("carries no body"), "{raw}");
        assert!(!raw.contains(SECRET), "{raw}");
        assert_eq!(out["got"], serde_json::json!([]), "{out}");
    }
    let refused = s.sluice.wait_event("the refused handshake", |e| {
        e["class_uid"] == 4002 && e.to_string().contains("carries no body")
    });
    assert_eq!(action(&refused), 2, "denied: {refused}");
    assert!(!sluice_output(&s).contains(SECRET));
    assert_events_valid(&s.sluice);
}

/// A client that sends a handshake through the tunnel and resets the connection at once.
const WS_RESET: &str = r#"
import base64, os, socket, ssl, struct, sys, time
proxy, port, ca = sys.argv[1], sys.argv[2], sys.argv[3]
host, pport = proxy.rsplit(':', 1)
s = socket.create_connection((host, int(pport)), timeout=20)
s.sendall(f'CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n'.encode())
connect = b''
while not connect.endswith(b'\r\n\r\n'):
    connect += s.recv(1)
t = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname='127.0.0.1')
key = base64.b64encode(os.urandom(16)).decode()
t.sendall((f'GET /slow HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
    f'Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n'
    'Authorization: Bearer openshell:resolve:env:TEST_API_KEY\r\n\r\n').encode())
time.sleep(0.1)
t.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
t.close()
"#;

#[test]
fn a_handshake_whose_client_is_gone_before_the_101_is_still_audited() {
    let s = setup("wsgone");
    let (code, _, err) = run(Command::new("python3").args([
        "-c",
        WS_RESET,
        &s.sluice.addr().to_string(),
        &s.origin.port.to_string(),
        &s.ca.display().to_string(),
    ]));
    assert_eq!(code, 0, "{err}");
    // The handshake went upstream with the secret: its record says so, with the 101.
    let record = s.sluice.wait_event("the handshake's record", |e| {
        e["class_uid"] == 4002 && e.to_string().contains("/slow")
    });
    assert_eq!(record["http_response"]["code"], 101, "{record}");
    assert!(
        record.to_string().contains("test-api/api-key"),
        "the credential it carried is named: {record}"
    );
    assert!(!sluice_output(&s).contains(SECRET));
    assert_events_valid(&s.sluice);
}
