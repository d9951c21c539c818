//! The sidecar on this machine: a pod built from network namespaces. An "app" namespace holds
//! the clients and sluice (as its own non-root uid, like the Kubernetes example), a veth joins
//! it to an "internet" namespace with the origins, and `sluice netfence apply` fences the app
//! namespace. The clients have no proxy variables at all: every connection reaches sluice
//! because the fence redirects it (`--transparent-listen`), and DNS goes to the policy DNS.
//! Needs root.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::netns::{pod_namespaces, sh};
use sluice_e2e::origin::make_cert;
use sluice_e2e::proxy::{TempDir, privileged, python, realpath};
use sluice_e2e::{package_dir, sluice_bin};

const PROXY_UID: &str = "4242";
const SECRET: &str = "sk-pod-7f3a9c1e5b2d8f4a6c0e";
const PLACEHOLDER: &str = "openshell:resolve:env:POD_API_KEY";

fn node() -> String {
    let out = Command::new("sh")
        .args(["-c", "command -v node"])
        .output()
        .unwrap();
    realpath(String::from_utf8_lossy(&out.stdout).trim())
}

/// The pod: namespaces, origins, sluice, the fence. Everything is removed on drop.
struct Pod {
    app: String,
    net: String,
    /// The origins' addresses: `api`/`web`/`echo` names stand for `a`, `other` for `b`,
    /// `api6` for `a6`; `own` is the app namespace's address.
    a: String,
    b: String,
    a6: String,
    own: String,
    dir: TempDir,
    children: Vec<Child>,
    log: PathBuf,
    audit: PathBuf,
    ca: PathBuf,
}

impl Pod {
    fn new() -> Pod {
        let id = std::process::id();
        let octet = id % 200 + 1;
        let app = format!("sl-ta-{id}");
        let net = format!("sl-tn-{id}");
        pod_namespaces(&app, &net);
        let (a, b) = (format!("10.216.{octet}.2"), format!("10.216.{octet}.3"));
        let own = format!("10.216.{octet}.1");
        sh(&[
            "ip",
            "-n",
            &app,
            "addr",
            "add",
            &format!("{own}/24"),
            "dev",
            "a0",
        ]);
        let a6 = format!("fd00:216:{octet:x}::2");
        let own6 = format!("fd00:216:{octet:x}::1/64");
        sh(&[
            "ip", "-n", &app, "-6", "addr", "add", &own6, "dev", "a0", "nodad",
        ]);
        let net6 = format!("{a6}/64");
        sh(&[
            "ip", "-n", &net, "-6", "addr", "add", &net6, "dev", "n0", "nodad",
        ]);
        for ip in [&a, &b] {
            sh(&[
                "ip",
                "-n",
                &net,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                "n0",
            ]);
        }
        sh(&["ip", "-n", &app, "link", "set", "a0", "up"]);
        sh(&["ip", "-n", &net, "link", "set", "n0", "up"]);
        // The app namespace's resolver: any address (the fence sends DNS to the policy DNS).
        let etc = PathBuf::from(format!("/etc/netns/{app}"));
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("resolv.conf"), format!("nameserver {a}\n")).unwrap();
        let dir = TempDir::new("pod");
        let log = dir.path().join("origin.jsonl");
        let audit = dir.path().join("audit.jsonl");
        let ca = dir.path().join("ca").join("ca.pem");
        Pod {
            app,
            net,
            a,
            b,
            a6,
            own,
            dir,
            children: Vec::new(),
            log,
            audit,
            ca,
        }
    }

    fn start_origins(&mut self) -> PathBuf {
        let (origin_ca, cert, key) = make_cert(self.dir.path());
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.net, &python()])
            .arg(package_dir().join("clients/pod_origins.py"))
            .args([&cert, &key, &self.log])
            .args([&self.a, &self.b, &self.a6])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "ready", "the origins did not start");
        self.children.push(child);
        origin_ca
    }

    /// sluice in the app namespace as PROXY_UID (reading other processes' sockets needs
    /// CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, as in the Kubernetes example), then the fence.
    fn start_sluice(&mut self, origin_ca: &Path) {
        let (a, b, a6) = (&self.a, &self.b, &self.a6);
        let nets = format!("[\"{a}/32\", \"{b}/32\", \"{a6}/128\"]");
        let policy = format!(
            r#"version: 1
network_policies:
  pod:
    name: pod
    endpoints:
      - {{ host: api.local.test, port: 443, protocol: rest, enforcement: enforce, access: full, allowed_ips: {nets} }}
      - {{ host: api6.local.test, port: 443, protocol: rest, enforcement: enforce, access: full, allowed_ips: {nets} }}
      - {{ host: other.local.test, port: 80, protocol: rest, enforcement: enforce, access: full, allowed_ips: {nets} }}
      - {{ host: other.local.test, port: 443, protocol: rest, enforcement: enforce, access: full, allowed_ips: {nets} }}
      - {{ host: web.local.test, port: 80, protocol: rest, enforcement: enforce, access: full, allowed_ips: {nets} }}
      - {{ host: echo.local.test, port: 7000, protocol: tcp, allowed_ips: {nets} }}
    binaries:
      - path: /usr/bin/curl
      - path: {node}
      - path: {python}
"#,
            node = node(),
            python = python(),
        );
        let providers = format!(
            "id: pod-api\ncredentials:\n  - name: api-key\n    env_vars: [POD_API_KEY]\n    auth_style: bearer\nendpoints:\n  - {{host: api.local.test, port: 443, protocol: rest, enforcement: enforce, access: full, allowed_ips: {nets}}}\n"
        );
        let policy = self.dir.write("policy.yaml", &policy);
        let providers = self.dir.write("providers.yaml", &providers);
        sh(&[
            "chown",
            "-R",
            PROXY_UID,
            &self.dir.path().display().to_string(),
        ]);
        let stderr = std::fs::File::create(self.dir.path().join("sluice.err")).unwrap();
        let caps = "+sys_ptrace,+dac_read_search";
        let child = Command::new("ip")
            .args(["netns", "exec", &self.app, "setpriv"])
            .args([
                &format!("--reuid={PROXY_UID}"),
                &format!("--regid={PROXY_UID}"),
                "--clear-groups",
                &format!("--inh-caps={caps}"),
                &format!("--ambient-caps={caps}"),
            ])
            .arg(sluice_bin())
            .arg("run")
            .arg("--policy")
            .arg(&policy)
            .arg("--providers")
            .arg(&providers)
            .arg("--upstream-ca")
            .arg(origin_ca)
            .arg("--ca-dir")
            .arg(self.dir.path().join("ca"))
            .arg("--audit-log")
            .arg(&self.audit)
            .args(["--listen", "127.0.0.1:3128"])
            .args(["--transparent-listen", "127.0.0.1:15001"])
            .args(["--transparent-listen", "[::1]:15001"])
            .args(["--dns-listen", "127.0.0.1:15053"])
            .args(["--dns-listen", "[::1]:15053"])
            .args(["--head-timeout", "2s"])
            .args(["--resolve", &format!("api.local.test={a}")])
            .args(["--resolve", &format!("web.local.test={a}")])
            .args(["--resolve", &format!("echo.local.test={a}")])
            .args(["--resolve", &format!("other.local.test={b}")])
            .args(["--resolve", &format!("api6.local.test={a6}")])
            .env("POD_API_KEY", SECRET)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        self.children.push(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.sluice_err().contains("(policy DNS") || !self.ca.exists() {
            assert!(
                Instant::now() < deadline,
                "sluice did not start: {}",
                self.sluice_err()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = Command::new("ip")
            .args(["netns", "exec", &self.app])
            .arg(sluice_bin())
            .args([
                "netfence",
                "apply",
                "--transparent-port",
                "15001",
                "--dns-port",
                "15053",
                "--proxy-uid",
                PROXY_UID,
                // The explicit listener (used beside the transparent one below) and the
                // transparent port itself (the loop test connects to it directly); the rest of
                // loopback is refused.
                "--allow-loopback-port",
                "3128",
                "--allow-loopback-port",
                "15001",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "netfence apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn sluice_err(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sluice.err")).unwrap_or_default()
    }

    /// A client in the app namespace, as root, with no proxy variable and nothing else but
    /// PATH, HOME and `env`.
    fn client(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.app])
            .args(args)
            .env_clear();
        cmd.env("PATH", std::env::var("PATH").unwrap_or_default());
        cmd.env("HOME", self.dir.path());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null()).output().unwrap()
    }

    fn curl(&self, args: &[&str]) -> Output {
        let ca = self.ca.display().to_string();
        let mut all = vec!["curl", "-sS", "--max-time", "10", "--cacert", &ca];
        all.extend(args);
        self.client(&all, &[])
    }

    fn origin_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits for an audit event whose JSON text contains every one of `needles`.
    fn wait_event(&self, needles: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(e) = self.events().into_iter().find(|e| {
                let text = e.to_string();
                needles.iter().all(|n| text.contains(n))
            }) {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "no audit event with {needles:?}; messages:\n{}",
                self.events()
                    .iter()
                    .map(|e| e["message"].to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn python_client(&self, script: &str, args: &[&str]) -> String {
        let py = python();
        let mut all = vec![py.as_str(), "-c", script];
        all.extend(args);
        let out = self.client(&all, &[]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.app, &self.net] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.app));
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A raw exchange from the app namespace: connect to HOST:PORT, send each message in turn and
/// print what came back for each (or "closed").
const EXCHANGE: &str = r#"
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((host, port), timeout=5)
out = []
for msg in sys.argv[3:]:
    try:
        s.sendall(msg.encode().decode('unicode_escape').encode('latin1'))
        data = s.recv(65536)
        # The rest of this answer (a body sent apart from its head), if any.
        s.settimeout(0.5)
        try:
            while data:
                more = s.recv(65536)
                if not more:
                    break
                data += more
        except socket.timeout:
            pass
        s.settimeout(5)
        out.append(data.decode('latin1').split('\r\n')[0] if data else 'closed')
    except (ConnectionResetError, BrokenPipeError):
        out.append('closed')
    except socket.timeout:
        out.append('timeout')
print('|'.join(out))
"#;

/// TLS without SNI to HOST:443 (the address as given, no server_hostname).
const NO_SNI: &str = r#"
import socket, ssl, sys
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    s = ctx.wrap_socket(socket.create_connection((sys.argv[1], 443), timeout=5))
    print('handshake')
except (OSError, ssl.SSLError) as e:
    print('refused')
"#;

/// One DNS question (A, over UDP) to SERVER:53, printing the reply's rcode. Built by hand
/// so that the test needs nothing but Python; the fence sends it to the policy DNS.
const DNS_RCODE: &str = r#"
import socket, struct, sys
server, name = sys.argv[1], sys.argv[2]
q = struct.pack(">HHHHHH", 0x5c1e, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
q += struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(q, (server, 53))
reply = s.recv(4096)
assert reply[:2] == q[:2]
print(reply[3] & 0x0F)
"#;

const NODE_FETCH: &str = r#"
fetch(process.argv[1], { headers: { authorization: 'Bearer ' + process.argv[2] } })
  .then(async (r) => { console.log(r.status); console.log(await r.text()); })
  .catch((e) => { console.log('error ' + (e.cause || e)); process.exit(3); });
"#;

#[test]
fn a_pod_without_proxy_variables_goes_through_sluice_and_nowhere_else() {
    if !privileged("a_pod_without_proxy_variables_goes_through_sluice_and_nowhere_else") {
        return;
    }
    let mut pod = Pod::new();
    let origin_ca = pod.start_origins();
    pod.start_sluice(&origin_ca);
    let (a, b) = (pod.a.clone(), pod.b.clone());
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");

    // curl over HTTPS, no proxy: the credential is injected upstream, never seen by curl.
    let out = pod.curl(&["-H", &auth, "https://api.local.test/curl"]);
    assert!(out.status.success(), "{}", text(&out));
    let body = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(body.contains("/curl"), "{body}");
    assert!(!body.contains(SECRET), "the client saw the secret: {body}");
    assert!(body.contains(PLACEHOLDER), "{body}");
    let log = pod.origin_log();
    assert!(log.contains(&format!("Bearer {SECRET}")), "{log}");
    // sluice's own upstream connection was not redirected into itself: it reached the origin
    // from the app namespace's address.
    let own = &pod.own;
    assert!(
        log.contains(&format!("\"peer\": \"{own}\", \"ip\": \"{a}\"")),
        "{log}"
    );
    pod.wait_event(&["TRANSPARENT", "/usr/bin/curl", "api.local.test", "llowed"]);

    // The same over IPv6 (the fence redirects it to [::1]; the policy DNS answers AAAA).
    let out = pod.curl(&["-6", "https://api6.local.test/curl6"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("/curl6"));
    pod.wait_event(&["TRANSPARENT", "/usr/bin/curl", "api6.local.test", &pod.a6]);

    // Node's built-in fetch ignores proxy variables anyway; here there are none.
    let out = pod.client(
        &[
            &node(),
            "-e",
            NODE_FETCH,
            "https://api.local.test/node",
            PLACEHOLDER,
        ],
        &[("NODE_EXTRA_CA_CERTS", &pod.ca.display().to_string())],
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(said.starts_with("200"), "{}", text(&out));
    assert!(said.contains("/node") && !said.contains(SECRET), "{said}");
    assert!(
        pod.origin_log()
            .lines()
            .any(|l| l.contains("/node") && l.contains(SECRET)),
        "{}",
        pod.origin_log()
    );
    pod.wait_event(&["TRANSPARENT", &node(), "api.local.test", "llowed"]);

    // A forged SNI: an allowed name carried to another allowed host's address.
    let before = pod.origin_log().lines().count();
    let out = pod.curl(&[
        "--resolve",
        &format!("other.local.test:443:{a}"),
        "https://other.local.test/forged",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    pod.wait_event(&["host_name_mismatch", "other.local.test", &a]);
    let out = pod.curl(&[
        "--connect-to",
        &format!("api.local.test:443:{b}:443"),
        "-H",
        &auth,
        "https://api.local.test/forged2",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    pod.wait_event(&["host_name_mismatch", "api.local.test", &b]);
    assert_eq!(
        pod.origin_log().lines().count(),
        before,
        "{}",
        pod.origin_log()
    );

    // A name no policy allows is refused before sluice looks it up: the client cannot make
    // sluice resolve names of its choosing (sluice's resolver would ask the origin side's
    // port 53, which logs every query).
    let out = pod.curl(&[
        "--resolve",
        &format!("leak-7f3a.unlisted.test:443:{a}"),
        "https://leak-7f3a.unlisted.test/",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    pod.wait_event(&["policy_denied", "leak-7f3a.unlisted.test", "not looked up"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !pod.origin_log().contains("leak-7f3a"),
        "{}",
        pod.origin_log()
    );

    // A program the policy does not list, to an allowed name at its own address: refused by
    // the L4 decision inside the tunnel phases, closed without an HTTP answer (the client
    // believes it talks to the origin), and audited with the binary and the reason.
    let out = pod.client(
        &[
            "openssl",
            "s_client",
            "-connect",
            &format!("{b}:443"),
            "-servername",
            "other.local.test",
        ],
        &[],
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !said.contains("HTTP/1.1") && !said.contains("BEGIN CERTIFICATE"),
        "{said}"
    );
    pod.wait_event(&[
        "TRANSPARENT denied other.local.test:443",
        "binary '/usr/bin/openssl' not allowed",
    ]);

    // TLS without SNI where a name is needed.
    assert_eq!(pod.python_client(NO_SNI, &[&a]), "refused");
    pod.wait_event(&["tls_sni_required", &a]);

    // Plain HTTP: the Host names the destination, and must stand for the address.
    let out = pod.curl(&["http://web.local.test/plain"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("/plain"));
    let out = pod.curl(&[
        "-H",
        "Host: other.local.test",
        &format!("http://{a}/wronghost"),
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    pod.wait_event(&["host_name_mismatch", "HTTP Host"]);
    // ... and inside a kept connection, each request's Host is checked against it.
    let got = pod.python_client(
        EXCHANGE,
        &[
            "web.local.test",
            "80",
            "GET /one HTTP/1.1\\r\\nHost: web.local.test\\r\\n\\r\\n",
            "GET /two HTTP/1.1\\r\\nHost: other.local.test\\r\\n\\r\\n",
        ],
    );
    let parts: Vec<&str> = got.split('|').collect();
    assert_eq!(parts.first().copied(), Some("HTTP/1.1 200 OK"), "{got}");
    assert!(
        parts.get(1).is_some_and(|p| p.starts_with("HTTP/1.1 4")),
        "{got}"
    );
    assert!(!pod.origin_log().contains("/two"), "{}", pod.origin_log());

    // protocol: tcp: refused to an address the policy DNS never handed out for the name...
    let echo = |host: &str| pod.python_client(EXCHANGE, &[host, "7000", "ping-7000"]);
    // (`b` was never handed out: `other.local.test` was only ever given to curl by --resolve.)
    assert_ne!(echo(&b), "ping-7000");
    pod.wait_event(&["host_name_required", &b]);
    // ... and relayed once the client looked the name up through the policy DNS.
    assert_eq!(echo("echo.local.test"), "ping-7000");
    pod.wait_event(&["TRANSPARENT", "echo.local.test", "7000", "llowed"]);

    // A name no policy allows: REFUSED by the policy DNS.
    let said = pod.python_client(DNS_RCODE, &[&a, "nowhere.example.org"]);
    assert_eq!(said, "5", "rcode REFUSED");
    pod.wait_event(&["nowhere.example.org", "REFUSED"]);
    // ... while an allowed one is answered.
    assert_eq!(pod.python_client(DNS_RCODE, &[&a, "api.local.test"]), "0");

    // UDP to any other port, and QUIC (UDP 443), go nowhere.
    let probe = package_dir().join("clients/fence_probe.py");
    for port in ["9999", "443"] {
        let out = pod.client(
            &[&python(), &probe.display().to_string(), "udp", &a, port],
            &[],
        );
        let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(got == "blocked" || got == "refused", "UDP {port}: {got}");
    }

    // The explicit listener works beside the transparent one.
    let out = pod.curl(&[
        "-x",
        "http://127.0.0.1:3128",
        "-H",
        &auth,
        "https://api.local.test/explicit",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains(SECRET));
    pod.wait_event(&["CONNECT", "api.local.test", "llowed"]);

    // A connection straight to the transparent listener (its original destination is sluice
    // itself) is refused, not relayed to itself.
    let got = pod.python_client(
        EXCHANGE,
        &[
            "127.0.0.1",
            "15001",
            "GET / HTTP/1.1\\r\\nHost: api.local.test\\r\\n\\r\\n",
        ],
    );
    assert_eq!(got, "closed");
    let e = pod.wait_event(&["TRANSPARENT", "127.0.0.1", "enied"]);
    let reason = e.to_string();
    assert!(reason.contains("transparent_loop"), "{reason}");

    // No connection of sluice's own came back to it (it would be audited with sluice as the
    // caller).
    let me = realpath(&sluice_bin().display().to_string());
    assert!(
        !pod.events().iter().any(|e| e.to_string().contains(&me)),
        "sluice's own connection was redirected into itself"
    );

    // Every secret byte stayed away from the client side and the audit log.
    let audit = std::fs::read_to_string(&pod.audit).unwrap();
    assert!(!audit.contains(SECRET));
    assert!(!pod.sluice_err().contains(SECRET));
    let _ = std::io::stderr().write_all(b"");
}
