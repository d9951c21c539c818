//! Reloading a running sluice's policy from a test, and reading what the reload did: the file
//! replaced as editors do, the reload's own audit event, and the close event of a connection
//! it revoked; the small policies and client helpers the revocation tests share.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::ocsf::class;
use crate::proxy::Sluice;

/// Replaces `path` atomically (write, then rename), as editors and config tools do.
pub fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Replaces the secrets file `secrets` with `TEST_API_KEY=value` as [`replace`] does, mode
/// 0600 (sluice refuses a secrets file others can read).
pub fn replace_secret(secrets: &Path, value: &str) {
    let tmp = secrets.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .unwrap();
    writeln!(f, "TEST_API_KEY={value}").unwrap();
    drop(f);
    std::fs::rename(&tmp, secrets).unwrap();
}

/// Writes the new policy and waits until the reload succeeded (the `n`th config event,
/// counting the load at start).
pub fn reload_to(sluice: &Sluice, text: &str, n: usize) {
    replace(&sluice.dir.path().join("policy.yaml"), text);
    sluice.wait_event(&format!("config change #{n}"), |_| {
        sluice.events().iter().filter(|e| class(e) == 5019).count() >= n
    });
    let change = sluice
        .events()
        .into_iter()
        .filter(|e| class(e) == 5019)
        .nth(n - 1)
        .unwrap();
    assert_eq!(change["status_id"], 1, "the reload failed: {change:#}");
}

/// Waits for the close event of the connection to `port` that a reload revoked, and checks
/// it says why (the entry, and what it no longer allows).
pub fn revoked_close(sluice: &Sluice, port: u16, why: &str) -> Value {
    let close = sluice.wait_event(&format!("the revoked close to {port}"), |e| {
        class(e) == 4001
            && e["activity_id"] == 2
            && e["status_detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("policy revoked by reload ("))
            && e["dst_endpoint"]["port"].as_u64() == Some(u64::from(port))
    });
    let detail = close["status_detail"].as_str().unwrap();
    assert!(detail.contains(why), "{detail} does not say {why:?}");
    close
}

/// "Closed promptly": a generous bound for a loaded machine (a revoked connection is closed
/// as the reload's sweep runs, well within a second when the machine is idle).
pub const PROMPTLY: Duration = Duration::from_secs(10);

/// Reads until the peer closes (end of stream or reset) or `PROMPTLY` passes with the
/// connection still open (`None`).
pub fn closed_within(s: &mut TcpStream) -> Option<Duration> {
    let started = Instant::now();
    s.set_read_timeout(Some(PROMPTLY)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None;
            }
            Err(_) => return Some(started.elapsed()),
        }
        if started.elapsed() > PROMPTLY {
            return None;
        }
    }
}

/// A child's stdout, line by line, through a channel (so that reads can be bounded).
pub fn lines_of(out: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// An L4-only entry named `name` for `binaries`, to 127.0.0.1:`port`.
pub fn l4_entry(name: &str, port: u16, binaries: &[&str]) -> String {
    let bins: String = binaries
        .iter()
        .map(|b| format!("      - path: {b}\n"))
        .collect();
    format!(
        "  {name}:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}}}\n    binaries:\n{bins}"
    )
}

/// An inspected entry `api` for Python to 127.0.0.1:`port`, allowing GET on each of `paths`.
pub fn inspected_entry(port: u16, paths: &[&str], binary: &str) -> String {
    let rules: String = paths
        .iter()
        .map(|p| format!("          - allow: {{method: GET, path: \"{p}\"}}\n"))
        .collect();
    format!(
        "  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n{rules}    binaries:\n      - path: {binary}\n"
    )
}

pub fn policy(entries: &[String]) -> String {
    format!("version: 1\nnetwork_policies:\n{}", entries.concat())
}

/// Reads a response head byte by byte (nothing past it), up to its blank line.
pub fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "{head:?}");
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A Python client script driven line by line: commands on its stdin, one answer line each
/// on its stdout; killed when dropped.
#[derive(Debug)]
pub struct Driven {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Driven {
    /// Starts `script` with `args` and checks its first line is `ready` (else shows `why`).
    pub fn start(script: &str, args: &[&str], ready: &str, why: &str) -> Driven {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let stdin = child.stdin.take().unwrap();
        let lines = lines_of(child.stdout.take().unwrap());
        let mut driven = Driven {
            child,
            stdin,
            lines,
        };
        assert_eq!(driven.line(), ready, "{why}");
        driven
    }

    /// The next line the script printed (within 30 s).
    pub fn line(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the client answered nothing")
    }

    /// Sends one command and returns the script's answer.
    pub fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        self.line()
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
