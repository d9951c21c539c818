//! End-to-end: the client's WebSocket text messages on a `protocol: websocket` endpoint are
//! judged as `WEBSOCKET_TEXT <upgrade path>` (spec §5.4). A read-only endpoint lets a real
//! client (Python `websockets`, through sluice as its HTTP proxy) open the socket but not
//! send: its message never reaches the origin, it gets close code 1008, and the refusal is
//! audited; a read-write endpoint echoes; an `enforcement: audit` endpoint forwards and
//! audits. The origin is a real `websockets` server over TLS. Messages being assembled share
//! one budget per process (32 at once, 64 waiting): the one past that closes with 1013, and
//! the waiting ones go on when a slot frees.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use serde_json::Value;
use sluice_e2e::intercepted::{Intercepted, logging_origin, python_json};
use sluice_e2e::ocsf::action;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python};

/// A TLS echo server (`websockets`): every text message it receives is appended to the file
/// named by its third argument, then answered with `echo:<message>`.
const ORIGIN: &str = r#"
import ssl, sys
from websockets.sync.server import serve
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
log = sys.argv[3]
def echo(ws):
    for m in ws:
        with open(log, 'a') as f: f.write(ws.request.path + ' ' + str(m) + '\n')
        ws.send('echo:' + str(m))
with serve(echo, '127.0.0.1', 0, ssl=ctx) as server:
    print(server.socket.getsockname()[1], flush=True)
    server.serve_forever()
"#;

/// A `websockets` client through sluice (HTTP proxy, CONNECT), trusting sluice's CA:
/// opens `path`, sends `message` (`BIG`: one byte over 4 MiB), and prints what came back:
/// the echo, or the close code and reason.
const CLIENT: &str = r#"
import json, ssl, sys
from websockets.sync.client import connect
from websockets.exceptions import ConnectionClosed
proxy, port, ca, path, message = sys.argv[1:6]
if message == 'BIG':
    message = 'a' * (4 * 1024 * 1024 + 1)
ctx = ssl.create_default_context(cafile=ca)
out = {'opened': False, 'echo': None, 'code': None, 'reason': None}
ws = connect(f'wss://127.0.0.1:{port}{path}', proxy=f'http://{proxy}', ssl=ctx, open_timeout=10)
out['opened'] = True
try:
    ws.send(message)
    out['echo'] = ws.recv(timeout=10)
    ws.close()
except ConnectionClosed as e:
    if e.rcvd is not None:
        out['code'], out['reason'] = e.rcvd.code, e.rcvd.reason
print(json.dumps(out))
"#;

fn setup() -> Intercepted {
    let dir = TempDir::new("wsmsg");
    let (origin, origin_ca, log) = logging_origin(&dir, ORIGIN, "the websockets echo origin");
    let port = origin.port;
    let policy = format!(
        "version: 1
network_policies:
  ws:
    endpoints:
      - {{host: 127.0.0.1, port: {port}, path: '/ro/**', protocol: websocket, enforcement: enforce, access: read-only}}
      - {{host: 127.0.0.1, port: {port}, path: '/rw/**', protocol: websocket, enforcement: enforce, access: read-write}}
      - {{host: 127.0.0.1, port: {port}, path: '/watch/**', protocol: websocket, access: read-only}}
    binaries:
      - path: {}
",
        python()
    );
    let started = Sluice::intercepting(&dir, &policy, &[origin_ca.as_path()], None, &[]);
    Intercepted::new(dir, origin, log, started)
}

fn send(s: &Intercepted, path: &str, message: &str) -> Value {
    python_json(
        &s.sluice,
        CLIENT,
        &[
            &s.sluice.addr().to_string(),
            &s.origin.port.to_string(),
            &s.ca.display().to_string(),
            path,
            message,
        ],
    )
}

fn text_event<'a>(events: &'a [Value], path: &str) -> Option<&'a Value> {
    events.iter().find(|e| {
        e["class_uid"] == 4002
            && e["activity_name"] == "WEBSOCKET_TEXT"
            && e["http_request"]["url"]["path"] == path
    })
}

#[test]
fn a_read_only_websocket_opens_but_cannot_send() {
    let s = setup();
    let out = send(&s, "/ro/feed", "delete everything");
    assert_eq!(out["opened"], true, "the upgrade is allowed: {out}");
    assert_eq!(out["echo"], Value::Null, "{out}");
    assert_eq!(out["code"], 1008, "{out}\n{}", s.sluice.stderr());
    assert!(
        out["reason"]
            .as_str()
            .unwrap()
            .contains("WEBSOCKET_TEXT /ro/feed not permitted by policy"),
        "{out}"
    );
    let received = s.received();
    assert!(
        !received.contains("delete"),
        "the origin got it: {received}"
    );
    s.sluice.wait_event("the refused message", |e| {
        e["activity_name"] == "WEBSOCKET_TEXT" && action(e) == 2
    });
    let events = s.sluice.events();
    let denied = text_event(&events, "/ro/feed").unwrap();
    assert!(
        denied.to_string().contains("not permitted by policy"),
        "{denied}"
    );
    // The refusal names no rule (none allowed it), and a message's content is never
    // audited (only the client's own command line, which carries it here, is).
    assert_eq!(denied["firewall_rule"]["desc"], Value::Null, "{denied}");
    let mut without_actor = denied.clone();
    without_actor["actor"] = Value::Null;
    assert!(
        !without_actor.to_string().contains("delete everything"),
        "{denied}"
    );
    assert_events_valid(&s.sluice);
}

#[test]
fn read_write_sends_and_audit_mode_forwards_and_records() {
    let s = setup();
    let out = send(&s, "/rw/chat", "hello");
    assert_eq!(out["echo"], "echo:hello", "{out}\n{}", s.sluice.stderr());
    let out = send(&s, "/watch/x?since=1", "would be refused");
    assert_eq!(out["echo"], "echo:would be refused", "{out}");
    let received = s.received();
    assert_eq!(
        received,
        "/rw/chat hello\n/watch/x?since=1 would be refused\n"
    );
    let allowed = s.sluice.wait_event("the allowed message", |e| {
        e["activity_name"] == "WEBSOCKET_TEXT" && e["http_request"]["url"]["path"] == "/rw/chat"
    });
    assert_eq!(action(&allowed), 1, "{allowed}");
    let audited = s.sluice.wait_event("the audited message", |e| {
        e["activity_name"] == "WEBSOCKET_TEXT" && e["http_request"]["url"]["path"] == "/watch/x"
    });
    assert!(
        audited.to_string().contains("not permitted by policy"),
        "{audited}"
    );
    assert_events_valid(&s.sluice);
}

#[test]
fn a_text_message_over_four_mebibytes_closes_with_1009_before_the_origin() {
    let s = setup();
    let out = send(&s, "/rw/chat", "BIG");
    assert_eq!(out["opened"], true, "{out}");
    assert_eq!(out["code"], 1009, "{out}\n{}", s.sluice.stderr());
    assert_eq!(s.received(), "", "the origin got it");
}

/// 97 `websockets` clients through sluice, each starting a fragmented text message (its first
/// fragment sent, the rest held back); after a pause every client finishes its message. Prints
/// how many were closed with 1013 before the pause ended, how many got their echo, and the
/// other outcomes.
const ASSEMBLERS: &str = r#"
import json, ssl, sys, threading, time
from websockets.sync.client import connect
from websockets.exceptions import ConnectionClosed
proxy, port, ca, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ctx = ssl.create_default_context(cafile=ca)
go = threading.Event()
started = threading.Semaphore(0)
results = [None] * n
def client(i):
    try:
        ws = connect(f'wss://127.0.0.1:{port}/rw/asm', proxy=f'http://{proxy}', ssl=ctx, open_timeout=60)
    except Exception as e:
        results[i] = 'open failed: ' + repr(e); started.release(); return
    def fragments():
        yield f'm{i}-'
        started.release()
        go.wait()
        yield 'end'
    sender = threading.Thread(target=lambda: _send(ws, fragments), daemon=True)
    sender.start()
    try:
        m = ws.recv(timeout=90)
        results[i] = ('early ' if not go.is_set() else '') + 'echo ' + str(m)
    except ConnectionClosed as e:
        code = e.rcvd.code if e.rcvd is not None else None
        results[i] = ('early ' if not go.is_set() else '') + f'closed {code}'
    except Exception as e:
        results[i] = 'recv failed: ' + repr(e)
def _send(ws, fragments):
    try:
        ws.send(fragments())
    except Exception:
        pass
threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
for _ in range(n):
    started.acquire(timeout=120)
time.sleep(3)
early = [r for r in results if r is not None and r.startswith('early')]
go.set()
for t in threads:
    t.join(timeout=120)
print(json.dumps({'early': early, 'results': results}))
"#;

#[test]
fn messages_assembled_at_once_share_one_budget_and_the_one_past_it_gets_1013() {
    let s = setup();
    let n = 32 + 64 + 1;
    let out = python_json(
        &s.sluice,
        ASSEMBLERS,
        &[
            &s.sluice.addr().to_string(),
            &s.origin.port.to_string(),
            &s.ca.display().to_string(),
            &n.to_string(),
        ],
    );
    // While 96 messages are in progress (32 assembling, 64 waiting), the 97th is refused.
    assert_eq!(
        out["early"],
        serde_json::json!(["early closed 1013"]),
        "{out}\n{}",
        s.sluice.stderr()
    );
    // The rest finish their messages, the waiting ones as slots free, and get their echoes.
    let results = out["results"].as_array().unwrap();
    let echoed = results
        .iter()
        .filter(|r| {
            r.as_str()
                .is_some_and(|r| r.starts_with("echo echo:m") && r.ends_with("-end"))
        })
        .count();
    assert_eq!(echoed, n - 1, "{out}");
}
