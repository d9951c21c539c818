//! A test host in a network namespace the test creates itself: a veth pair with a private
//! /30, and an HTTP server inside the namespace. It gives the tests a real "remote" host on a
//! private address without sending traffic anywhere but this machine. Needs root; removed on
//! drop.

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A host at `ip:port` (inside its own network namespace) reachable from the test's namespace.
#[derive(Debug)]
pub struct TestHost {
    pub ns: String,
    pub ip: Ipv4Addr,
    /// The /30 both ends share, as CIDR text.
    pub network: String,
    pub port: u16,
    veth: String,
    server: Option<Child>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

const SERVER: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        body = b"hello from the test host\n"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
srv = http.server.ThreadingHTTPServer((sys.argv[1], 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

impl TestHost {
    /// A host serving `hello from the test host` over plain HTTP on a port of its own.
    pub fn start(tag: &str) -> Result<TestHost, String> {
        TestHost::start_serving(tag, SERVER, &[])
    }

    /// A host running the Python `server` inside the namespace: it gets the host's address as
    /// its first argument and `args` after it, and prints the port it listens on.
    pub fn start_serving(tag: &str, server: &str, args: &[&str]) -> Result<TestHost, String> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let id = (std::process::id() % 200) + n * 7;
        let octet = u8::try_from(id % 250 + 1).unwrap_or(1);
        let short: String = tag
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(4)
            .collect();
        let ns = format!("sl-{short}-{}-{n}", std::process::id());
        let veth = format!("sh{octet}x{n}");
        let peer = format!("sn{octet}x{n}");
        let host_ip = Ipv4Addr::new(10, 213, octet, 1);
        let guest_ip = Ipv4Addr::new(10, 213, octet, 2);
        let _ = ip(&["netns", "del", &ns]);
        let _ = ip(&["link", "del", &veth]);
        ip(&["netns", "add", &ns])?;
        let mut host = TestHost {
            ns: ns.clone(),
            ip: guest_ip,
            network: format!("10.213.{octet}.0/30"),
            port: 0,
            veth: veth.clone(),
            server: None,
        };
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer])?;
        ip(&["link", "set", &peer, "netns", &ns])?;
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &veth])?;
        ip(&["link", "set", &veth, "up"])?;
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{guest_ip}/30"),
            "dev",
            &peer,
        ])?;
        ip(&["-n", &ns, "link", "set", &peer, "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "python3",
                "-c",
                server,
                &guest_ip.to_string(),
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("start server: {e}"))?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        host.server = Some(child);
        host.port = line
            .trim()
            .parse()
            .map_err(|_| format!("server did not print a port: {line:?}"))?;
        Ok(host)
    }
}

impl TestHost {
    /// Stops the host's server (its sockets close, connections to it are reset).
    pub fn stop_server(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        self.stop_server();
        let _ = ip(&["link", "del", &self.veth]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// Runs a command that must succeed (it says what failed, with its output) and returns its
/// standard output.
pub fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The two namespaces of a pod-shaped test: `app` (the pod) and `net` (its "internet"),
/// each made afresh with loopback up, joined by a veth pair `a0` (in `app`) / `n0` (in `net`).
pub fn pod_namespaces(app: &str, net: &str) {
    for ns in [app, net] {
        let _ = Command::new("ip").args(["netns", "del", ns]).output();
        sh(&["ip", "netns", "add", ns]);
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    }
    sh(&[
        "ip", "-n", app, "link", "add", "a0", "type", "veth", "peer", "name", "n0", "netns", net,
    ]);
}
