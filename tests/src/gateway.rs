//! The gateway (`sluice run --tenants FILE`) as the tenant tests drive it: sluice started
//! with a tenants file, curl from a chosen loopback source address (all of 127/8 is local on
//! Linux) with or without proxy credentials, and the files a tenant names.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::origin::HttpOrigin;
use crate::proxy::{Sluice, TempDir, run};
use crate::reload::read_head;
use crate::sluice_bin;

/// sluice as a gateway for the tenants file `tenants`, loopback upstreams allowed, with
/// `extra` flags and `env` in its environment.
pub fn start(tenants: &Path, extra: &[&str], env: &[(&str, &str)]) -> Sluice {
    let mut args = vec!["--allow-loopback-upstream"];
    args.extend_from_slice(extra);
    Sluice::start_tenants(tenants, &args, env)
}

/// [`start`] terminating TLS: its CA written under `dir` (returned: the file clients
/// trust), the origin's CA `origin_ca` trusted upstream.
pub fn intercepting(
    dir: &TempDir,
    tenants: &Path,
    origin_ca: &Path,
    env: &[(&str, &str)],
) -> (Sluice, PathBuf) {
    let ca_dir = dir.path().join("ca");
    let (ca_dir_s, origin_s) = (
        ca_dir.display().to_string(),
        origin_ca.display().to_string(),
    );
    let extra = [
        "--ca-dir",
        ca_dir_s.as_str(),
        "--upstream-ca",
        origin_s.as_str(),
    ];
    (start(tenants, &extra, env), ca_dir.join("ca.pem"))
}

/// Sends SIGHUP (reload).
pub fn hup(gw: &Sluice) {
    let (code, _, err) = run(Command::new("kill").args(["-HUP", &gw.pid().to_string()]));
    assert_eq!(code, 0, "{err}");
}

/// The audit log as written so far.
pub fn audit_text(gw: &Sluice) -> String {
    std::fs::read_to_string(&gw.audit_path).unwrap_or_default()
}

/// Neither the audit log nor stderr holds `value`.
pub fn assert_never_logged(gw: &Sluice, value: &str, what: &str) {
    assert!(
        !audit_text(gw).contains(value),
        "the audit log holds {what}"
    );
    assert!(!gw.stderr().contains(value), "sluice's stderr holds {what}");
}

/// The tenant an audit event names: `actor.user.name`.
pub fn tenant_of(e: &Value) -> Option<&str> {
    e["actor"]["user"]["name"].as_str()
}

/// `sluice <args>` that must exit (within 20 s): (exit code, stderr).
pub fn exit_of(args: &[&str], env_remove: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(sluice_bin());
    cmd.args(args).env("RUST_BACKTRACE", "0");
    for k in env_remove {
        cmd.env_remove(k);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let mut pipe = child.stderr.take().unwrap();
    let reader = thread::spawn(move || {
        let mut err = String::new();
        let _ = pipe.read_to_string(&mut err);
        err
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return (status.code(), reader.join().unwrap());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "sluice {args:?} did not exit within 20 s; stderr:\n{}",
                reader.join().unwrap()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
}

// === Files ===

/// A policy with one L4 entry per `(name, port, binary)`, to 127.0.0.1:`port`.
pub fn l4_policy(entries: &[(&str, u16, &str)]) -> String {
    let mut s = String::from("version: 1\nnetwork_policies:\n");
    for (name, port, binary) in entries {
        s.push_str(&format!(
            "  {name}:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}}}\n    binaries:\n      - path: \"{binary}\"\n"
        ));
    }
    s
}

/// A policy with one inspected `protocol: rest` entry per `(name, port)`, to
/// 127.0.0.1:`port`, for every program (`/**`: the only entries a tenant gets).
pub fn rest_policy(entries: &[(&str, u16)]) -> String {
    let mut s = String::from("version: 1\nnetwork_policies:\n");
    for (name, port) in entries {
        s.push_str(&format!(
            "  {name}:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: \"/**\"\n"
        ));
    }
    s
}

/// A provider profile (`test-api`) binding the bearer credential `token` (from `TOKEN`) to
/// 127.0.0.1:`port`.
pub fn token_provider(port: u16) -> String {
    format!(
        "id: test-api\ncredentials:\n  - name: token\n    env_vars: [TOKEN]\n    auth_style: bearer\nendpoints:\n  - {{host: 127.0.0.1, port: {port}}}\n"
    )
}

/// An L4 policy allowing every binary to 127.0.0.1 on each of `ports`.
pub fn allow_ports(ports: &[u16]) -> String {
    let entries: Vec<(String, u16)> = ports.iter().map(|p| (format!("local_{p}"), *p)).collect();
    let refs: Vec<(&str, u16, &str)> = entries
        .iter()
        .map(|(n, p)| (n.as_str(), *p, "/**"))
        .collect();
    l4_policy(&refs)
}

/// A `KEY=VALUE` secrets file, mode 0600 (sluice refuses one others can read).
pub fn write_secrets(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
    path
}

/// The 1-based line of the first line of `text` containing `needle`.
pub fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{needle:?} not in {text}"))
}

/// The 1-based column where `needle` starts on its first line.
pub fn col_of(text: &str, needle: &str) -> usize {
    text.lines()
        .find_map(|l| l.find(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{needle:?} not in {text}"))
}

/// Standard base64, padded (for `Proxy-Authorization: Basic`).
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `Basic <base64(user:password)>`.
pub fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64(format!("{user}:{password}").as_bytes()))
}

// === Clients ===

/// What curl got: the status, the response head(s) and the body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {self:?}"))
    }
}

/// curl through the gateway from the source address `source` (its `--interface`) with
/// `args`, to `url` (HTTP/1.1, headers included in the output).
pub fn curl(gw: &Sluice, source: Option<&str>, args: &[&str], url: &str) -> Answer {
    curl_via(&gw.proxy_url(), source, args, url)
}

/// [`curl`] through the proxy at `proxy` (`http://...`, or `https://...` for a TLS hop).
pub fn curl_via(proxy: &str, source: Option<&str>, args: &[&str], url: &str) -> Answer {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-i", "--http1.1", "--max-time", "20", "-x", proxy])
        .args(["-w", "\n%{http_code}"])
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    if let Some(src) = source {
        cmd.args(["--interface", src]);
    }
    let (_, out, err) = run(cmd.args(args).arg(url));
    let (text, status) = out
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("curl wrote no status: {out:?} {err}"));
    let status = status
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("curl status {status:?}: {err}"));
    let (head, body) = match text.rfind("\r\n\r\n") {
        Some(i) => (text[..i + 4].to_string(), text[i + 4..].to_string()),
        None => (text.to_string(), String::new()),
    };
    Answer { status, head, body }
}

/// A plain-HTTP forward (absolute form) to the origin on `port`, path `/`.
pub fn get(gw: &Sluice, source: Option<&str>, args: &[&str], port: u16) -> Answer {
    curl(gw, source, args, &format!("http://127.0.0.1:{port}/"))
}

/// Retries `get` until its status is `want` (10 s): a reload takes effect a moment after the
/// signal.
pub fn eventually(gw: &Sluice, source: &str, port: u16, want: u16, what: &str) -> Answer {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = get(gw, Some(source), &[], port);
        if a.status == want {
            return a;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {} instead of {want}: {a:?}\nsluice stderr:\n{}",
            a.status,
            gw.stderr()
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// Reads one response with a `Content-Length` body: (head, body).
pub fn read_response(s: &mut TcpStream) -> (String, String) {
    let head = read_head(s);
    let body = read_body(s, &head);
    (head, body)
}

/// Reads the `Content-Length` body of the response whose head is `head`.
pub fn read_body(s: &mut TcpStream, head: &str) -> String {
    let len = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    String::from_utf8_lossy(&body).into_owned()
}

pub fn status_line(head: &str) -> u16 {
    head.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a response: {head:?}"))
}

pub const ALPHA: &str = "127.0.0.2";
pub const BETA: &str = "127.0.0.3";

/// Two source tenants: alpha (127.0.0.2) allowed to `alpha_ports`, beta (127.0.0.3) allowed
/// to `beta_ports`. Returns the tenants file.
pub fn two_source_tenants(dir: &TempDir, alpha_ports: &[u16], beta_ports: &[u16]) -> PathBuf {
    dir.write("alpha.yaml", &allow_ports(alpha_ports));
    dir.write("beta.yaml", &allow_ports(beta_ports));
    dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [alpha.yaml]\n  - name: beta\n    sources: [\"{BETA}/32\"]\n    policy: [beta.yaml]\n"
        ),
    )
}

/// A TCP connection to the gateway from the loopback address `source`.
pub fn connect_from(gw: &Sluice, source: [u8; 4]) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((source, 0)).into()).unwrap();
    s.connect_timeout(&gw.addr().into(), Duration::from_secs(5))
        .unwrap();
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Opens a CONNECT tunnel from `source` to 127.0.0.1:`port`: the socket and the answer (its
/// head, or the whole answer when it is a refusal).
pub fn tunnel_from(gw: &Sluice, source: [u8; 4], port: u16) -> (TcpStream, String) {
    let mut s = connect_from(gw, source);
    s.write_all(
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let head = read_head(&mut s);
    if status_line(&head) == 200 {
        return (s, head);
    }
    let body = read_body(&mut s, &head);
    (s, format!("{head}{body}"))
}

// === The adversarial tests' tenants ===

/// Proxy passwords of the adversarial tests' credential tenants.
pub const GAMMA_PASSWORD: &str = "gamma-pw-8c1f0e77";
pub const DELTA_PASSWORD: &str = "delta-pw-3b9d2a64";

/// A gateway for [`mixed_tenants`] allowed to one plain-HTTP origin, with `extra` flags and
/// the passwords in its environment: its directory, the origin and sluice.
pub fn mixed_gateway(tag: &str, extra: &[&str]) -> (TempDir, HttpOrigin, Sluice) {
    let dir = TempDir::new(tag);
    let origin = HttpOrigin::start();
    let tenants = mixed_tenants(&dir, &[origin.port()]);
    let gw = start(&tenants, extra, &passwords());
    (dir, origin, gw)
}

/// alpha by address (127.0.0.2), gamma and delta by proxy credentials; all allowed to each
/// of `ports` at L4.
pub fn mixed_tenants(dir: &TempDir, ports: &[u16]) -> PathBuf {
    dir.write("open.yaml", &allow_ports(ports));
    dir.write(
        "tenants.yaml",
        &format!(
            "tenants:\n  \
               - name: alpha\n    sources: [\"{ALPHA}\"]\n    policy: [open.yaml]\n  \
               - name: gamma\n    proxy_auth:\n      username: gamma\n      password_env: GAMMA_PW\n    policy: [open.yaml]\n  \
               - name: delta\n    proxy_auth:\n      username: delta\n      password_env: DELTA_PW\n    policy: [open.yaml]\n"
        ),
    )
}

/// The environment that holds gamma's and delta's passwords for [`mixed_tenants`].
pub fn passwords() -> [(&'static str, &'static str); 2] {
    [("GAMMA_PW", GAMMA_PASSWORD), ("DELTA_PW", DELTA_PASSWORD)]
}

/// An absolute-form GET to 127.0.0.1:`port``path`, with `Proxy-Authorization: auth` when given.
pub fn forward(port: u16, path: &str, auth: Option<&str>) -> String {
    let auth = auth.map_or(String::new(), |a| format!("Proxy-Authorization: {a}\r\n"));
    format!("GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n")
}

/// Sends `bytes` on a new connection from 127.0.0.1 and reads one response.
pub fn exchange(gw: &Sluice, bytes: &[u8]) -> (String, String) {
    let mut s = connect_from(gw, [127, 0, 0, 1]);
    s.write_all(bytes).unwrap();
    read_response(&mut s)
}
