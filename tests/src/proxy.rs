//! A running `sluice run` for a test: a policy written to a temporary directory, listeners on
//! ephemeral loopback ports (read back from sluice's stderr), an audit file, and helpers to
//! talk to it with raw sockets and to read its audit events.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::sluice_bin;

/// A temporary directory removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("sluice-e2e-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write temp file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `sluice run` process.
#[derive(Debug)]
pub struct Sluice {
    child: Child,
    /// The listeners, in the order of the `--listen` flags.
    pub addrs: Vec<SocketAddr>,
    pub audit_path: PathBuf,
    stderr: Arc<Mutex<String>>,
    pub dir: TempDir,
}

impl Sluice {
    /// Starts sluice with `policy` (YAML text) and extra flags. Unless the flags contain
    /// `--listen`, it listens on `127.0.0.1:0`.
    pub fn start(policy: &str, extra: &[&str]) -> Sluice {
        let dir = TempDir::new("sluice");
        let policy_path = dir.write("policy.yaml", policy);
        let audit_path = dir.path().join("audit.jsonl");
        let mut cmd = Command::new(sluice_bin());
        cmd.arg("run")
            .arg("--policy")
            .arg(&policy_path)
            .arg("--audit-log")
            .arg(&audit_path);
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.args(extra);
        let expected = extra.iter().filter(|a| **a == "--listen").count().max(1);
        Sluice::spawn(cmd, dir, audit_path, expected)
    }

    /// Like `start`, under a small open-file limit (`ulimit -n`), to exhaust descriptors.
    pub fn start_with_fd_limit(policy: &str, extra: &[&str], nofile: u32) -> Sluice {
        let dir = TempDir::new("sluice");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$@\""))
            .arg("sh");
        Sluice::start_under(cmd, dir, policy, extra)
    }

    /// `sluice run` with `policy`, its audit log in `dir`, listening on `127.0.0.1:0`, and
    /// `extra` flags, as the arguments of `wrapper` (a command that ends by running them).
    fn start_under(mut wrapper: Command, dir: TempDir, policy: &str, extra: &[&str]) -> Sluice {
        let policy_path = dir.write("policy.yaml", policy);
        let audit_path = dir.path().join("audit.jsonl");
        wrapper
            .arg(sluice_bin())
            .arg("run")
            .arg("--policy")
            .arg(&policy_path)
            .arg("--audit-log")
            .arg(&audit_path)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra);
        Sluice::spawn(wrapper, dir, audit_path, 1)
    }

    /// sluice terminating TLS for local origins: its CA written to `dir/ca`, the origins' CAs
    /// trusted upstream, `providers` loaded, `env` (secrets) in its environment. Returns
    /// sluice and the CA file its clients trust.
    pub fn intercepting(
        dir: &TempDir,
        policy: &str,
        origin_cas: &[&Path],
        providers: Option<&Path>,
        env: &[(&str, &str)],
    ) -> (Sluice, PathBuf) {
        Sluice::intercepting_with(dir, policy, origin_cas, providers, env, &[])
    }

    /// Like [`Sluice::intercepting`], with `extra` arguments.
    pub fn intercepting_with(
        dir: &TempDir,
        policy: &str,
        origin_cas: &[&Path],
        providers: Option<&Path>,
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> (Sluice, PathBuf) {
        let ca_dir = dir.path().join("ca");
        let mut args = vec![
            "--allow-loopback-upstream".to_string(),
            "--ca-dir".to_string(),
            ca_dir.display().to_string(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_string()));
        for ca in origin_cas {
            args.extend(["--upstream-ca".to_string(), ca.display().to_string()]);
        }
        if let Some(p) = providers {
            args.extend(["--providers".to_string(), p.display().to_string()]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        (
            Sluice::start_with_env(policy, &refs, env),
            ca_dir.join("ca.pem"),
        )
    }

    /// Like `start`, with extra variables in sluice's own environment (secrets).
    pub fn start_with_env(policy: &str, extra: &[&str], env: &[(&str, &str)]) -> Sluice {
        let dir = TempDir::new("sluice");
        let policy_path = dir.write("policy.yaml", policy);
        let audit_path = dir.path().join("audit.jsonl");
        let mut cmd = Command::new(sluice_bin());
        cmd.arg("run")
            .arg("--policy")
            .arg(&policy_path)
            .arg("--audit-log")
            .arg(&audit_path);
        cmd.args(["--listen", "127.0.0.1:0"]).args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Sluice::spawn(cmd, dir, audit_path, 1)
    }

    /// Like `start`, in a mount namespace of its own where `/etc/resolv.conf` reads
    /// `resolv_conf`: names without a `--resolve` override are looked up with the name servers
    /// it lists. Needs root (see [`privileged`]).
    pub fn start_with_resolv_conf(policy: &str, extra: &[&str], resolv_conf: &str) -> Sluice {
        let dir = TempDir::new("sluice");
        let conf_path = dir.write("resolv.conf", resolv_conf);
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg("mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"")
            .arg(&conf_path);
        Sluice::start_under(cmd, dir, policy, extra)
    }

    /// sluice as a gateway: `sluice run --tenants FILE` (no `--policy`: each tenant names its
    /// own), listening on `127.0.0.1:0`, with `extra` flags and `env` in its environment.
    pub fn start_tenants(tenants: &Path, extra: &[&str], env: &[(&str, &str)]) -> Sluice {
        let dir = TempDir::new("sluice");
        let audit_path = dir.path().join("audit.jsonl");
        let mut cmd = Command::new(sluice_bin());
        cmd.arg("run")
            .arg("--tenants")
            .arg(tenants)
            .arg("--audit-log")
            .arg(&audit_path)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        // One `--listen` here; `extra` may add more, and TLS listeners (`--tls-listen`),
        // announced after them.
        let listeners = 1 + extra
            .iter()
            .filter(|a| **a == "--listen" || **a == "--tls-listen")
            .count();
        Sluice::spawn(cmd, dir, audit_path, listeners)
    }

    /// Like `start`, with the audit log at `audit_path` (a FIFO, a path elsewhere).
    pub fn start_with_audit_log(policy: &str, extra: &[&str], audit_path: &Path) -> Sluice {
        let dir = TempDir::new("sluice");
        let policy_path = dir.write("policy.yaml", policy);
        let mut cmd = Command::new(sluice_bin());
        cmd.arg("run")
            .arg("--policy")
            .arg(&policy_path)
            .arg("--audit-log")
            .arg(audit_path);
        cmd.args(["--listen", "127.0.0.1:0"]).args(extra);
        Sluice::spawn(cmd, dir, audit_path.to_path_buf(), 1)
    }

    /// Like `start`, with its audit log at `audit.jsonl` on a tmpfs of `size` (`mount -o
    /// size=`, e.g. `1m`) of its own: sluice runs in a mount namespace of its own
    /// (`unshare --mount`) where the tmpfs is mounted at `tmpfs_dir()`; the test reaches it
    /// through `/proc/PID/root`, and it goes when sluice does. Needs root (see
    /// [`privileged`]).
    pub fn start_on_tmpfs(policy: &str, extra: &[&str], size: &str) -> Sluice {
        let dir = TempDir::new("sluice");
        let mount = dir.path().join("tmpfs");
        std::fs::create_dir(&mount).expect("mount point");
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg("mount -t tmpfs -o \"size=$1\" tmpfs \"$0\" && shift && exec \"$@\"")
            .arg(&mount)
            .arg(size);
        let policy_path = dir.write("policy.yaml", policy);
        let audit_path = mount.join("audit.jsonl");
        cmd.arg(sluice_bin())
            .arg("run")
            .arg("--policy")
            .arg(&policy_path)
            .arg("--audit-log")
            .arg(&audit_path)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra);
        let mut sluice = Sluice::spawn(cmd, dir, audit_path, 1);
        // What sluice writes is in its own mount namespace.
        sluice.audit_path = sluice.tmpfs_dir().join("audit.jsonl");
        sluice
    }

    /// The tmpfs of [`Sluice::start_on_tmpfs`], as this process reaches it.
    pub fn tmpfs_dir(&self) -> PathBuf {
        let inside = self.dir.path().join("tmpfs");
        let rel = inside.strip_prefix("/").unwrap_or(&inside);
        PathBuf::from(format!("/proc/{}/root", self.child.id())).join(rel)
    }

    /// Like `start`, with the audit log on sluice's stdout (`--audit-log -`), which is a pipe
    /// returned to the test to read, block or close.
    pub fn start_with_stdout(policy: &str, extra: &[&str]) -> (Sluice, std::process::ChildStdout) {
        let dir = TempDir::new("sluice");
        let policy_path = dir.write("policy.yaml", policy);
        let mut cmd = Command::new(sluice_bin());
        cmd.arg("run")
            .arg("--policy")
            .arg(&policy_path)
            .args(["--audit-log", "-", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped());
        let mut sluice = Sluice::spawn_with(cmd, dir, PathBuf::from("-"), 1, false);
        let out = sluice.child.stdout.take().expect("stdout");
        (sluice, out)
    }

    fn spawn(cmd: Command, dir: TempDir, audit_path: PathBuf, listeners: usize) -> Sluice {
        Sluice::spawn_with(cmd, dir, audit_path, listeners, true)
    }

    fn spawn_with(
        mut cmd: Command,
        dir: TempDir,
        audit_path: PathBuf,
        listeners: usize,
        null_stdout: bool,
    ) -> Sluice {
        if null_stdout {
            cmd.stdout(Stdio::null());
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sluice");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
        let pipe = child.stderr.take().expect("stderr");
        let log = Arc::clone(&stderr);
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("sluice: listening on ")
                    && let Some(addr) = rest.split(' ').next().and_then(|a| a.parse().ok())
                {
                    let _ = tx.send(addr);
                }
                if let Ok(mut l) = log.lock() {
                    l.push_str(&line);
                    l.push('\n');
                }
            }
        });
        let mut addrs = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while addrs.len() < listeners {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(a) => addrs.push(a),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    thread::sleep(Duration::from_millis(100));
                    let text = stderr.lock().map(|s| s.clone()).unwrap_or_default();
                    panic!("sluice did not start listening; stderr:\n{text}");
                }
            }
        }
        Sluice {
            child,
            addrs,
            audit_path,
            stderr,
            dir,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// `http://127.0.0.1:PORT` for `-x` / `HTTPS_PROXY`.
    pub fn proxy_url(&self) -> String {
        match self.addr() {
            SocketAddr::V4(a) => format!("http://{a}"),
            SocketAddr::V6(a) => format!("http://[{}]:{}", a.ip(), a.port()),
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Every audit event written so far (a last line still being written, with no newline
    /// yet, is left for the next read).
    pub fn events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.audit_path).unwrap_or_default();
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {l}"))
            })
            .collect()
    }

    /// Waits until some event satisfies `pred` (events are written as they happen).
    pub fn wait_event(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(e) = self.events().into_iter().find(|e| pred(e)) {
                return e;
            }
            if Instant::now() > deadline {
                panic!(
                    "no audit event {what}; events:\n{:#?}\nstderr:\n{}",
                    self.events(),
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends raw bytes and returns everything the proxy answers until it closes (or 10 s).
    pub fn raw(&self, bytes: &[u8]) -> String {
        raw_exchange(self.addr(), bytes)
    }

    /// Stops sluice with SIGTERM and waits for it.
    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`TERM`, `HUP`, `INT`) to sluice.
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status();
    }

    /// Waits up to `within` for sluice to exit: its exit code (`None`: still running, or
    /// ended by a signal).
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// sluice's peak resident memory (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends raw bytes to `addr` and reads the answer until close or 10 s.
pub fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to sluice");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(bytes).expect("send");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of an HTTP response text.
pub fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}

/// The JSON body of an HTTP response text.
pub fn json_body(response: &str) -> Value {
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {response:?}"))
}

/// Runs a command and returns (exit code, stdout, stderr).
pub fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("run command");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether this test process is root (needed for network namespaces).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// For tests that need root: true to run; false to skip (loudly), or a panic when
/// `SLUICE_REQUIRE_PRIVILEGED=1` (CI), where skipping would hide a failure.
pub fn privileged(test: &str) -> bool {
    if is_root() {
        return true;
    }
    if std::env::var("SLUICE_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        panic!("{test} needs root and SLUICE_REQUIRE_PRIVILEGED=1");
    }
    eprintln!("SKIPPED {test}: needs root (network namespaces)");
    false
}

/// The real path of `p` (what the kernel reports as a process's exe), or `p` itself.
pub fn realpath(p: &str) -> String {
    std::fs::canonicalize(p).map_or_else(|_| p.to_string(), |p| p.to_string_lossy().into_owned())
}

/// The real path of the Python interpreter (behind pyenv shims and symlinks), which is what
/// the kernel reports as its exe.
pub fn python() -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os, sys; print(os.path.realpath(sys.executable))",
        ])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Every audit event sluice wrote validates against the OCSF schema.
pub fn assert_events_valid(sluice: &Sluice) {
    let events = sluice.events();
    assert!(!events.is_empty(), "no audit events at all");
    let mut problems = Vec::new();
    for e in &events {
        if let Err(errs) = crate::ocsf::validate(e) {
            problems.push(format!("{}\n  {}", e, errs.join("\n  ")));
        }
    }
    assert!(
        problems.is_empty(),
        "invalid OCSF events:\n{}",
        problems.join("\n")
    );
}

/// The running test executable (its real path): the client of raw-socket tests.
pub fn me() -> String {
    realpath(
        &std::env::current_exe()
            .expect("current exe")
            .to_string_lossy(),
    )
}

/// Fetches the origin's `/sse` stream (three events sent 1 s apart, each carrying its send
/// time) with curl through `proxy`, and asserts each event arrived when it was sent (well
/// before the next one), not held back until later. `extra` are curl arguments (HTTP
/// version, headers).
pub fn assert_sse_streams(proxy: &str, ca: &Path, url: &str, extra: &str) {
    let sse = format!(
        "curl -sSN {extra} --max-time 30 --cacert {} -x {proxy} {url} | while read -r line; do [ -n \"$line\" ] && echo \"$line $(date +%s%3N)\"; done",
        ca.display()
    );
    let (_, out, err) = run(Command::new("sh").args(["-c", &sse]));
    let lines: Vec<Vec<i64>> = out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .skip(2)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .collect();
    assert_eq!(lines.len(), 3, "{extra}: {out}\n{err}");
    for l in &lines {
        // Sent time, received time: received well before the next is sent (room for a
        // loaded machine).
        assert!(l[1] - l[0] < 600, "{extra}: event delayed: {out}");
    }
}

/// `curl -X POST` through `sluice` (trusting `ca` when given) with `extra` arguments, to
/// `url`; returns (status, body). curl itself must succeed.
pub fn curl_post(sluice: &Sluice, ca: Option<&Path>, extra: &[&str], url: &str) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-s",
        "--max-time",
        "20",
        "-X",
        "POST",
        "-x",
        &sluice.proxy_url(),
    ]);
    if let Some(ca) = ca {
        cmd.arg("--cacert").arg(ca);
    }
    let (code, out, err) = run(cmd.args(["-w", "\n%{http_code}"]).args(extra).arg(url));
    assert_eq!(code, 0, "{err}\n{}", sluice.stderr());
    let (body, status) = out.rsplit_once('\n').expect("curl wrote the status last");
    (status.parse().expect("an HTTP status"), body.to_owned())
}
