//! Real clients under the shim: curl reaches the proxy through the injected proxy variables,
//! and cannot bypass it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use crate::harness::{Fixture, Shim, listener};
use crate::require_root;

/// Answers one request with `ok` and returns its request line.
fn fake_proxy(listener: TcpListener) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut first = String::new();
        reader.read_line(&mut first).unwrap();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
        }
        let mut stream = stream;
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .unwrap();
        first.trim_end().to_owned()
    })
}

fn curl_shim(fx: &Fixture, port: u16) -> Shim {
    Shim::new(fx, port)
        .arg("--exec")
        .arg("/usr/bin")
        .arg("--workdir")
        .arg(&fx.rw)
}

#[test]
fn curl_reaches_the_proxy_but_not_another_port() {
    require_root!();
    if !Path::new("/usr/bin/curl").exists() {
        assert!(
            std::env::var("SLUICE_REQUIRE_PRIVILEGED").as_deref() != Ok("1"),
            "curl is required in CI"
        );
        crate::harness::loud("SKIPPED: /usr/bin/curl not installed");
        return;
    }
    let fx = Fixture::new();
    let (proxy, port) = listener();
    let seen = fake_proxy(proxy);
    let out = curl_shim(&fx, port).run(&["curl", "-sS", "--max-time", "10", "http://example.com/"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "ok");
    assert_eq!(seen.join().unwrap(), "GET http://example.com/ HTTP/1.1");

    let (other, other_port) = listener();
    other.set_nonblocking(true).unwrap();
    let out = curl_shim(&fx, port).run(&[
        "curl",
        "-sS",
        "--max-time",
        "10",
        "--noproxy",
        "*",
        &format!("http://127.0.0.1:{other_port}/"),
    ]);
    // 7: failed to connect (Landlock: EACCES on connect).
    assert_eq!(out.code, Some(7), "{}", out.stderr);
    assert!(
        other.accept().is_err(),
        "the direct connection must not arrive"
    );
}
