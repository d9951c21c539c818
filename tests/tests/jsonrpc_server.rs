//! End-to-end: a real JSON-RPC 2.0 server library from PyPI (`jsonrpcserver`, served by
//! Python's `http.server` over TLS, logging every body it receives) behind sluice on a
//! `protocol: json-rpc` endpoint whose rules are the OpenShell documentation's JSON-RPC
//! example (`reports.list`, `reports.search`), with `httpx` as the client through sluice as
//! its HTTPS proxy: an allowed call and an allowed batch are answered by the library; a
//! refused method and a batch with one refused call never reach the server (its log proves
//! it) and get a 403 naming the call; a body that is not JSON-RPC 2.0 is
//! `400 invalid_jsonrpc_request`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use serde_json::{Value, json};
use sluice_e2e::intercepted::{assert_refusal_audited_without, logging_origin, post_bodies};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python};

/// The server: `jsonrpcserver`'s `dispatch` answering `reports.list`, `reports.search` and
/// `reports.delete` at `/rpc`, each request body appended to the log named by argv[3].
const SERVER: &str = r#"
import ssl, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from jsonrpcserver import method, Result, Success, dispatch
log = sys.argv[3]
@method(name='reports.list')
def reports_list() -> Result:
    return Success(['r1', 'r2'])
@method(name='reports.search')
def reports_search(q: str) -> Result:
    return Success('found ' + q)
@method(name='reports.delete')
def reports_delete(name: str) -> Result:
    return Success('deleted ' + name)
class H(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get('content-length', 0)))
        with open(log, 'ab') as f: f.write(body + b'\n')
        out = dispatch(body.decode()).encode()
        self.send_response(200 if out else 204)
        self.send_header('content-type', 'application/json')
        self.send_header('content-length', str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a): pass
srv = ThreadingHTTPServer(('127.0.0.1', 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

#[test]
fn a_real_json_rpc_server_answers_allowed_calls_and_never_sees_refused_ones() {
    let dir = TempDir::new("jsonrpcsrv");
    let (origin, origin_ca, log) = logging_origin(&dir, SERVER, "the JSON-RPC server");
    let port = origin.port;
    let policy = format!(
        "version: 1
network_policies:
  reports:
    endpoints:
      - host: 127.0.0.1
        port: {port}
        path: /rpc
        protocol: json-rpc
        enforcement: enforce
        json_rpc:
          max_body_bytes: 131072
        rules:
          - allow: {{method: reports.list}}
          - allow: {{method: reports.search}}
    binaries:
      - path: {}
",
        python()
    );
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[origin_ca.as_path()], None, &[]);
    let list = r#"{"jsonrpc":"2.0","method":"reports.list","id":1}"#;
    let search = r#"{"jsonrpc":"2.0","method":"reports.search","params":{"q":"q3"},"id":2}"#;
    let delete =
        r#"{"jsonrpc":"2.0","method":"reports.delete","params":{"name":"secret-arg"},"id":3}"#;
    let allowed_batch = format!("[{list},{search}]");
    let refused_batch = format!("[{list},{delete}]");
    let not_two = r#"{"jsonrpc":"1.0","method":"reports.list","id":4}"#;
    let got = post_bodies(
        &sluice,
        &ca,
        &format!("https://127.0.0.1:{port}/rpc"),
        "1",
        &[
            list,
            &allowed_batch,
            delete,
            &refused_batch,
            not_two,
            "{not json",
        ],
    );
    let body = |i: usize| -> Value {
        serde_json::from_str(got[i]["body"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("answer {i}: {e}: {got}"))
    };
    // Answered by the library.
    assert_eq!(got[0]["status"], 200, "{got}\n{}", sluice.stderr());
    assert_eq!(
        body(0),
        json!({"jsonrpc": "2.0", "result": ["r1", "r2"], "id": 1})
    );
    assert_eq!(got[1]["status"], 200, "{got}");
    assert_eq!(
        body(1),
        json!([
            {"jsonrpc": "2.0", "result": ["r1", "r2"], "id": 1},
            {"jsonrpc": "2.0", "result": "found q3", "id": 2}
        ])
    );
    // Refused by sluice, naming the call and the rule it would need.
    for (i, what) in [(2, "a refused method"), (3, "a batch with a refused call")] {
        assert_eq!(got[i]["status"], 403, "{what}: {got}");
        let b = body(i);
        assert_eq!(b["error"], "policy_denied", "{what}: {b}");
        assert_eq!(b["rpc_method"], "reports.delete", "{what}: {b}");
        assert_eq!(b["missing"], json!({"method": "reports.delete"}), "{b}");
    }
    for i in [4, 5] {
        assert_eq!(got[i]["status"], 400, "{got}");
        assert_eq!(body(i)["error"], "invalid_jsonrpc_request", "{got}");
    }
    let received: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        received,
        [list.to_string(), allowed_batch],
        "only the allowed requests reached the server"
    );
    assert_refusal_audited_without(&sluice, "json-rpc: reports.delete", "secret-arg");
    assert_events_valid(&sluice);
}
