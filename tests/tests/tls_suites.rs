//! The cipher suite of the client-facing TLS: sluice chooses AES-128-GCM (SHA-256 key
//! schedule) over the client's own preference. Python's `ssl` (OpenSSL) lists
//! TLS_AES_256_GCM_SHA384 first, as curl does; the client reports what it got.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::process::Command;

use sluice_e2e::origin::HttpsOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, python, realpath, run};

/// CONNECTs through sluice to `sys.argv[2]`, handshakes trusting `sys.argv[3]`, and prints
/// the client's own first TLS 1.3 suite, then the negotiated one and the answer's status line.
const CLIENT: &str = "import socket, ssl, sys\n\
    ctx = ssl.create_default_context(cafile=sys.argv[3])\n\
    s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    s.sendall(('CONNECT 127.0.0.1:%s HTTP/1.1\\r\\nHost: 127.0.0.1:%s\\r\\n\\r\\n' % (sys.argv[2], sys.argv[2])).encode())\n\
    head = b''\n\
    while b'\\r\\n\\r\\n' not in head: head += s.recv(1)\n\
    assert head.startswith(b'HTTP/1.1 200'), head\n\
    t = ctx.wrap_socket(s, server_hostname='127.0.0.1')\n\
    t.sendall(('GET / HTTP/1.1\\r\\nHost: 127.0.0.1:%s\\r\\nConnection: close\\r\\n\\r\\n' % sys.argv[2]).encode())\n\
    answer = b''\n\
    while True:\n\
    \x20   piece = t.recv(65536)\n\
    \x20   if not piece: break\n\
    \x20   answer += piece\n\
    print(ctx.get_ciphers()[0]['name'])\n\
    print(t.cipher()[0])\n\
    print(answer.split(b'\\r\\n')[0].decode())\n";

#[test]
fn sluice_chooses_aes_128_gcm_over_the_clients_order() {
    // Only where the CPU has AES instructions (elsewhere sluice follows the client's order).
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if !cpu.split_whitespace().any(|flag| flag == "aes") {
        return;
    }
    let dir = TempDir::new("suites");
    let origin = HttpsOrigin::start(dir.path());
    let policy = format!(
        "version: 1\nnetwork_policies:\n  tls:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: {}\n",
        origin.port(),
        realpath(&python())
    );
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[&origin.cert], None, &[]);
    let (code, out, err) = run(Command::new(python())
        .arg("-c")
        .arg(CLIENT)
        .arg(sluice.addr().port().to_string())
        .arg(origin.port().to_string())
        .arg(&ca));
    assert_eq!(code, 0, "{err}\n{out}\nsluice: {}", sluice.stderr());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "TLS_AES_256_GCM_SHA384",
            "TLS_AES_128_GCM_SHA256",
            "HTTP/1.1 200 OK"
        ],
        "{out}"
    );
}
