//! End to end: an inspected tunnel whose upstream was reached at another address than the one
//! it was admitted with is judged at a reload by the address its bytes go to.
//!
//! A name resolves to two TLS origins in network namespaces (private addresses over veths;
//! needs root). The first client's upstream connection, to the first address, goes back to
//! the pool, so the next CONNECT of the same caller is admitted expecting to reuse it. That
//! origin goes away before the client's TLS handshake, so the tunnel's upstream is dialled at
//! the second address. A reload that narrows `allowed_ips` to the first address only must
//! close that tunnel, and its close event must name the address it really reached.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::time::Duration;

use sluice_e2e::netns::TestHost;
use sluice_e2e::origin::make_cert;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python};
use sluice_e2e::reload::{Driven, reload_to, revoked_close};

/// An HTTPS origin: argv = address, port (0 for any), certificate, key. Prints its port and
/// answers every GET with `hello`.
const TLS_ORIGIN: &str = r#"
import http.server, ssl, sys
ip, port, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert, key)
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        body = b"hello"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
srv = http.server.ThreadingHTTPServer((ip, port), H)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

/// A client: CONNECT `origin.test:PORT`, then waits for `tls` on stdin before its TLS
/// handshake, then `get` sends a keep-alive GET and prints the status, `wait S` prints
/// `CLOSED` when the tunnel closes within S seconds, else `OPEN`.
const CLIENT: &str = r#"
import socket, ssl, sys
proxy_port, port, ca = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
s = socket.create_connection(('127.0.0.1', proxy_port))
s.sendall(b'CONNECT origin.test:%d HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n' % (port, port))
head = b''
while not head.endswith(b'\r\n\r\n'):
    c = s.recv(1)
    if not c:
        print('REFUSED', flush=True); sys.exit(0)
    head += c
print('CONNECTED' if head.startswith(b'HTTP/1.1 200') else 'REFUSED', flush=True)
f = None
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(' ')
    try:
        if cmd == 'tls':
            s = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname='origin.test')
            f = s.makefile('rb')
            print('TLS', flush=True)
        elif cmd == 'get':
            s.sendall(b'GET / HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n' % port)
            status = f.readline()
            length = 0
            while True:
                h = f.readline()
                if h in (b'\r\n', b''):
                    break
                if h.lower().startswith(b'content-length:'):
                    length = int(h.split(b':')[1])
            f.read(length)
            print(status.split()[1].decode() if status else 'CLOSED', flush=True)
        elif cmd == 'wait':
            s.settimeout(float(arg))
            try:
                print('CLOSED' if not s.recv(1) else 'DATA', flush=True)
            except (socket.timeout, TimeoutError):
                print('OPEN', flush=True)
    except (OSError, ssl.SSLError) as e:
        print('CLOSED', type(e).__name__, flush=True)
"#;

/// Starts a [`CLIENT`]: connected through sluice, before its TLS handshake.
fn connect(sluice: &Sluice, port: u16, ca: &std::path::Path) -> Driven {
    let (proxy, port) = (sluice.addr().port().to_string(), port.to_string());
    let args = [proxy.as_str(), &port, &ca.to_string_lossy()];
    Driven::start(CLIENT, &args, "CONNECTED", &sluice.stderr())
}

fn policy(port: u16, nets: &[&str]) -> String {
    let nets: Vec<String> = nets.iter().map(|n| format!("\"{n}\"")).collect();
    format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: origin.test\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        allowed_ips: [{}]\n        rules:\n          - allow: {{method: GET, path: \"/**\"}}\n    binaries:\n      - path: {}\n",
        nets.join(", "),
        python()
    )
}

#[test]
fn a_tunnel_redialled_at_another_address_is_judged_at_that_address_on_reload() {
    let name = "a_tunnel_redialled_at_another_address_is_judged_at_that_address_on_reload";
    if !sluice_e2e::proxy::privileged(name) {
        return;
    }
    let certs = TempDir::new("redial-certs");
    let (origin_ca, cert, key) = make_cert(certs.path());
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let mut first = TestHost::start_serving("rda", TLS_ORIGIN, &["0", &cert, &key]).unwrap();
    let port = first.port.to_string();
    let second = TestHost::start_serving("rdb", TLS_ORIGIN, &[&port, &cert, &key]).unwrap();
    assert_eq!(second.port, first.port);
    let port = first.port;

    let dir = TempDir::new("redial");
    let ca_dir = dir.path().join("ca");
    let resolve = format!("origin.test={},{}", first.ip, second.ip);
    let sluice = Sluice::start(
        &policy(port, &[&first.network, &second.network]),
        &[
            "--ca-dir",
            &ca_dir.display().to_string(),
            "--upstream-ca",
            &origin_ca.display().to_string(),
            "--resolve",
            &resolve,
        ],
    );
    let ca = ca_dir.join("ca.pem");

    // The first client's upstream connection (to the first address) goes back to the pool
    // when it leaves.
    let mut one = connect(&sluice, port, &ca);
    assert_eq!(one.ask("tls"), "TLS");
    assert_eq!(one.ask("get"), "200", "{}", sluice.stderr());
    drop(one);
    std::thread::sleep(Duration::from_millis(300));

    // The next client is admitted expecting that pooled connection; it is gone before the
    // client's handshake, so its upstream is dialled at the second address.
    let mut two = connect(&sluice, port, &ca);
    first.stop_server();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(two.ask("tls"), "TLS");
    assert_eq!(two.ask("get"), "200", "{}", sluice.stderr());

    // Only the first address is allowed now: the tunnel, whose bytes go to the second, closes.
    reload_to(&sluice, &policy(port, &[&first.network]), 2);
    assert_eq!(
        two.ask("wait 5"),
        "CLOSED",
        "the tunnel to an address the new policy refuses is still open\n{}",
        sluice.stderr()
    );
    let reached = format!("{}:{port}", second.ip);
    let close = revoked_close(&sluice, port, &reached);
    assert_eq!(
        close["dst_endpoint"]["ip"],
        second.ip.to_string(),
        "{close:#}"
    );
    assert_events_valid(&sluice);
}
