//! sluice's upstream TLS: one shared client configuration per verifier setup, so a client's
//! new connection to a destination sluice has reached before resumes the upstream TLS session
//! instead of a full handshake, while verification stays on (the origin's certificate is
//! checked on the first, full handshake; a resumed session is bound to it). Seen from the
//! origin's side: a Python `ssl` origin answers with `SSLSocket.session_reused`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::process::Command;

use sluice_e2e::origin::{Script, spawn_tls};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, realpath};

/// Answers every GET with `reused=True` or `reused=False`: whether this connection's TLS
/// session was resumed.
const RESUMPTION_ORIGIN: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        body = ("reused=%s" % self.connection.session_reused).encode()
        # Connection: close, so that sluice cannot keep the connection for the next client
        # connection (its pool): each one is a new upstream handshake, resumed or not.
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close"); self.end_headers()
        self.wfile.write(body)
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

/// One curl through sluice, a new client connection each time.
fn fetch(sluice: &Sluice, ca: &std::path::Path, port: u16, path: &str) -> String {
    let out = Command::new("curl")
        .args([
            "-s",
            "--fail",
            "--http1.1",
            "-x",
            &sluice.proxy_url(),
            "--cacert",
        ])
        .arg(ca)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "curl: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        sluice.stderr()
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_second_client_connection_resumes_the_upstream_tls_session() {
    let dir = TempDir::new("resume");
    let (origin, origin_ca) = spawn_tls(
        dir.path(),
        Script::Python(RESUMPTION_ORIGIN),
        &[],
        "the resumption origin",
    );
    let policy = format!(
        "version: 1\nnetwork_policies:\n  local:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: {}\n",
        origin.port,
        realpath("/usr/bin/curl")
    );
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[&origin_ca], None, &[]);
    // The first connection is a full handshake, verified against --upstream-ca.
    assert_eq!(fetch(&sluice, &ca, origin.port, "/one"), "reused=False");
    // Later client connections (each its own CONNECT, its own client TLS, its own upstream
    // connection) resume the session the first one was given.
    let later: Vec<String> = (0..3)
        .map(|i| fetch(&sluice, &ca, origin.port, &format!("/again/{i}")))
        .collect();
    assert!(
        later.iter().all(|b| b == "reused=True"),
        "{later:?}\n{}",
        sluice.stderr()
    );
    assert_events_valid(&sluice);
}
