//! Raw TCP through the transparent listener with real servers and clients from Debian's
//! packages: PostgreSQL with `psql`, Redis with `redis-cli`, and OpenSMTPD (a
//! server-speaks-first protocol) with `curl smtp://`, each client under a 5 s timeout. A pod
//! like `transparent.rs`'s: an "app" namespace with the clients and sluice (as its own uid,
//! behind `sluice netfence apply`) and a veth to a "net" namespace with the servers. The
//! clients resolve the servers' names through the policy DNS, whose names have only
//! `protocol: tcp` endpoints, so sluice relays at once; `psql` and `redis-cli` also dial the
//! bare address, where sluice reads their first bytes and recognises them as raw at once.
//!
//! Time to first byte is measured through sluice and directly (as sluice's own uid, which the
//! fence does not redirect) in the same run, and printed: `docs/benchmarks.md` ("raw TCP")
//! quotes it. Before the fix, every one of these clients waited sluice's 10 s head timeout.
//! Needs root.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sluice_e2e::netns::{pod_namespaces, sh};
use sluice_e2e::proxy::{TempDir, privileged, python, realpath};
use sluice_e2e::sluice_bin;

const PROXY_UID: &str = "4243";
const PSQL: &str = "/usr/lib/postgresql/15/bin/psql";
const POSTGRES_BIN: &str = "/usr/lib/postgresql/15/bin";
const CLIENT_TIMEOUT: &str = "5";

/// Time to first byte: connects N times to HOST:PORT, sends the protocol's first message
/// (none for SMTP, whose server speaks first) and times until the first byte of the answer.
/// Prints the median and the worst in milliseconds. A name is looked up once, before the
/// timed loop (through the policy DNS when redirected).
const TTFB: &str = r#"
import socket, statistics, sys, time
host, port, proto, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
ip = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
first = {"pg": b"\x00\x00\x00\x08\x04\xd2\x16\x2f", "redis": b"PING\r\n", "smtp": b""}[proto]
times = []
for _ in range(n):
    t = time.perf_counter()
    s = socket.create_connection((ip, port), timeout=15)
    if first:
        s.sendall(first)
    got = s.recv(64)
    times.append((time.perf_counter() - t) * 1000)
    s.close()
    assert got, "closed without an answer"
print("%.2f %.2f" % (statistics.median(times), max(times)))
"#;

/// The pod, its servers and sluice; everything is stopped and removed on drop.
struct Pod {
    app: String,
    net: String,
    /// The servers' address in the net namespace.
    server: String,
    dir: TempDir,
    /// Process groups started (servers, sluice), killed whole on drop.
    groups: Vec<Child>,
    audit: PathBuf,
}

impl Pod {
    fn new() -> Pod {
        let id = std::process::id();
        let octet = id % 200 + 1;
        let app = format!("sl-ra-{id}");
        let net = format!("sl-rn-{id}");
        pod_namespaces(&app, &net);
        let own = format!("10.217.{octet}.1/24");
        let server = format!("10.217.{octet}.2");
        sh(&["ip", "-n", &app, "addr", "add", &own, "dev", "a0"]);
        let server_cidr = format!("{server}/24");
        sh(&["ip", "-n", &net, "addr", "add", &server_cidr, "dev", "n0"]);
        sh(&["ip", "-n", &app, "link", "set", "a0", "up"]);
        sh(&["ip", "-n", &net, "link", "set", "n0", "up"]);
        let etc = PathBuf::from(format!("/etc/netns/{app}"));
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("resolv.conf"), format!("nameserver {server}\n")).unwrap();
        let dir = TempDir::new("rawtcp");
        // Every user (postgres, the proxy uid) must reach its files inside.
        sh(&["chmod", "755", &dir.path().display().to_string()]);
        let audit = dir.path().join("audit.jsonl");
        Pod {
            app,
            net,
            server,
            dir,
            groups: Vec::new(),
            audit,
        }
    }

    /// Starts `args` in namespace `ns`, in a process group of its own, output to `log`.
    fn spawn_in(&mut self, ns: &str, args: &[&str], log: &str) {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(self.dir.path().join(log)).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .process_group(0)
            .spawn()
            .unwrap();
        self.groups.push(child);
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// Waits until `port` on the server address accepts connections (from the net namespace).
    fn wait_port(&self, port: u16, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let probe = format!(
            "import socket; socket.create_connection(('{}', {port}), timeout=1)",
            self.server
        );
        loop {
            let ok = Command::new("ip")
                .args(["netns", "exec", &self.net, &python(), "-c", &probe])
                .stderr(Stdio::null())
                .status()
                .unwrap()
                .success();
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what} did not start: {}",
                self.log(&format!("{what}.log"))
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn start_servers(&mut self) {
        let server = self.server.clone();
        // PostgreSQL: a fresh cluster owned by the postgres user, trusting every connection.
        let data = self.dir.path().join("pgdata");
        std::fs::create_dir(&data).unwrap();
        let data_s = data.display().to_string();
        sh(&["chown", "postgres:postgres", &data_s]);
        sh(&[
            "runuser",
            "-u",
            "postgres",
            "--",
            &format!("{POSTGRES_BIN}/initdb"),
            "-D",
            &data_s,
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ]);
        // Trust the pod's clients too (initdb trusts only the local socket and loopback).
        let hba = data.join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).unwrap();
        rules.push_str("host all all 0.0.0.0/0 trust\n");
        std::fs::write(&hba, rules).unwrap();
        let listen = format!("listen_addresses={server}");
        self.spawn_in(
            &self.net.clone(),
            &[
                "runuser",
                "-u",
                "postgres",
                "--",
                &format!("{POSTGRES_BIN}/postgres"),
                "-D",
                &data_s,
                "-p",
                "5432",
                "-k",
                &data_s,
                "-c",
                &listen,
                "-c",
                "fsync=off",
            ],
            "postgres.log",
        );
        // Redis, nothing persisted.
        let redis_dir = self.dir.path().display().to_string();
        self.spawn_in(
            &self.net.clone(),
            &[
                "redis-server",
                "--bind",
                &server,
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--dir",
                &redis_dir,
            ],
            "redis.log",
        );
        // OpenSMTPD in the foreground: it greets first, and delivers nothing here (the
        // client only asks for HELP).
        let conf = self.dir.write(
            "smtpd.conf",
            &format!(
                "listen on {server} port 2525\naction \"local\" mbox\nmatch from any for local action \"local\"\n"
            ),
        );
        self.spawn_in(
            &self.net.clone(),
            &["smtpd", "-d", "-f", &conf.display().to_string()],
            "smtpd.log",
        );
        self.wait_port(5432, "postgres");
        self.wait_port(6379, "redis");
        self.wait_port(2525, "smtpd");
    }

    /// sluice in the app namespace as PROXY_UID, with the default head timeout (10 s), then
    /// the fence.
    fn start_sluice(&mut self) {
        let s = self.server.clone();
        let allowed = format!("[\"{s}/32\"]");
        let policy = format!(
            r#"version: 1
network_policies:
  raw:
    name: raw
    endpoints:
      - {{ host: pg.raw.test, port: 5432, protocol: tcp, allowed_ips: {allowed} }}
      - {{ host: redis.raw.test, port: 6379, protocol: tcp, allowed_ips: {allowed} }}
      - {{ host: smtp.raw.test, port: 2525, protocol: tcp, allowed_ips: {allowed} }}
      - {{ host: "{s}", port: 5432 }}
      - {{ host: "{s}", port: 6379 }}
    binaries:
      - path: {PSQL}
      - path: {redis}
      - path: {curl}
      - path: {python}
"#,
            redis = realpath("/usr/bin/redis-cli"),
            curl = realpath("/usr/bin/curl"),
            python = python(),
        );
        let policy = self.dir.write("policy.yaml", &policy);
        sh(&["chown", PROXY_UID, &policy.display().to_string()]);
        std::fs::File::create(&self.audit).unwrap();
        sh(&["chown", PROXY_UID, &self.audit.display().to_string()]);
        // CAP_NET_ADMIN: the process connector, and the connection tracking table that names a
        // renumbered client port (`identity` crate, `conntrack`).
        let caps = "+sys_ptrace,+dac_read_search,+net_admin";
        let policy_s = policy.display().to_string();
        let audit_s = self.audit.display().to_string();
        let bin = sluice_bin().display().to_string();
        let uid = format!("--reuid={PROXY_UID}");
        let gid = format!("--regid={PROXY_UID}");
        let inh = format!("--inh-caps={caps}");
        let amb = format!("--ambient-caps={caps}");
        let mut args: Vec<String> = [
            "setpriv",
            &uid,
            &gid,
            "--clear-groups",
            &inh,
            &amb,
            &bin,
            "run",
            "--policy",
            &policy_s,
            "--audit-log",
            &audit_s,
            "--transparent-listen",
            "127.0.0.1:15001",
            "--dns-listen",
            "127.0.0.1:15053",
        ]
        .map(String::from)
        .to_vec();
        for name in ["pg", "redis", "smtp"] {
            args.push("--resolve".into());
            args.push(format!("{name}.raw.test={s}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn_in(&self.app.clone(), &args, "sluice.log");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.log("sluice.log").contains("(policy DNS") {
            assert!(
                Instant::now() < deadline,
                "sluice did not start: {}",
                self.log("sluice.log")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = Command::new("ip")
            .args(["netns", "exec", &self.app, &bin])
            .args([
                "netfence",
                "apply",
                "--transparent-port",
                "15001",
                "--dns-port",
                "15053",
                "--proxy-uid",
                PROXY_UID,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "netfence apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A command in the app namespace: as root (redirected through sluice), or as the proxy
    /// uid (`direct`: the fence lets it out as it is), with its wall time.
    fn client(&self, direct: bool, args: &[&str]) -> (Output, Duration) {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.app]);
        if direct {
            cmd.args([
                "setpriv",
                &format!("--reuid={PROXY_UID}"),
                &format!("--regid={PROXY_UID}"),
                "--clear-groups",
            ]);
        }
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .stdin(Stdio::null());
        let started = Instant::now();
        let out = cmd.output().unwrap();
        (out, started.elapsed())
    }

    fn audit(&self) -> String {
        std::fs::read_to_string(&self.audit).unwrap_or_default()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        for c in &mut self.groups {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", c.id())])
                .status();
            let _ = c.wait();
        }
        for ns in [&self.app, &self.net] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.app));
    }
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a real client through sluice and directly; asserts both succeed within the client's
/// timeout with `expect` in their output, and returns the two wall times.
fn both_ways(pod: &Pod, via: &[&str], direct: &[&str], expect: &str) -> (Duration, Duration) {
    let (out, through) = pod.client(false, via);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(expect),
        "{via:?} through sluice, in {through:?}: {}\nsluice: {}",
        text(&out),
        pod.log("sluice.log")
    );
    let (out, straight) = pod.client(true, direct);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(expect),
        "{direct:?} direct: {}",
        text(&out)
    );
    (through, straight)
}

/// Median and worst time to first byte, in ms.
fn ttfb(pod: &Pod, direct: bool, host: &str, port: &str, proto: &str) -> (f64, f64) {
    let py = python();
    let (out, _) = pod.client(direct, &[&py, "-c", TTFB, host, port, proto, "20"]);
    assert!(
        out.status.success(),
        "ttfb {host}:{port} (direct: {direct}): {}\nsluice: {}\naudit: {}\nsmtpd: {}",
        text(&out),
        pod.log("sluice.log"),
        pod.audit(),
        pod.log("smtpd.log")
    );
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut it = said.split_whitespace().map(|v| v.parse::<f64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

#[test]
fn postgres_redis_and_smtp_clients_get_their_answer_at_once_through_the_transparent_listener() {
    if !privileged(
        "postgres_redis_and_smtp_clients_get_their_answer_at_once_through_the_transparent_listener",
    ) {
        return;
    }
    for tool in [
        PSQL,
        "/usr/bin/redis-cli",
        "/usr/sbin/smtpd",
        "/usr/bin/redis-server",
    ] {
        assert!(
            Path::new(tool).exists(),
            "{tool} is missing: .ci/run installs postgresql, redis-server and opensmtpd"
        );
    }
    let mut pod = Pod::new();
    pod.start_servers();
    pod.start_sluice();
    let s = pod.server.clone();
    let t = CLIENT_TIMEOUT;
    let pg = |host: &str| {
        format!("host={host} port=5432 user=postgres dbname=postgres connect_timeout={t}")
    };
    let (pg_name, pg_host) = (pg("pg.raw.test"), pg(&s));
    let psql = |conn: &str| -> Vec<String> {
        ["timeout", t, PSQL, conn, "-Atc", "select 41 + 1"]
            .map(String::from)
            .to_vec()
    };
    let redis = |host: &str| -> Vec<String> {
        ["timeout", t, "redis-cli", "-h", host, "-p", "6379", "PING"]
            .map(String::from)
            .to_vec()
    };
    let smtp = |host: &str| -> Vec<String> {
        [
            "curl",
            "-sS",
            "--max-time",
            t,
            &format!("smtp://{host}:2525/"),
        ]
        .map(String::from)
        .to_vec()
    };

    let mut rows = Vec::new();
    // The policy DNS handed the name out for raw TCP only: relayed without reading anything.
    for (what, via, direct, expect) in [
        ("psql, by name", psql(&pg_name), psql(&pg_host), "42"),
        (
            "redis-cli, by name",
            redis("redis.raw.test"),
            redis(&s),
            "PONG",
        ),
        (
            "curl smtp://, by name",
            smtp("smtp.raw.test"),
            smtp(&s),
            "214",
        ),
        // The bare address: the first bytes are read and recognised as raw at once.
        ("psql, by address", psql(&pg_host), psql(&pg_host), "42"),
        ("redis-cli, by address", redis(&s), redis(&s), "PONG"),
    ] {
        let (through, straight) = both_ways(&pod, &refs(&via), &refs(&direct), expect);
        assert!(
            through < Duration::from_secs(5),
            "{what} took {through:?} through sluice"
        );
        rows.push(format!(
            "| {what} (real client, wall time) | {:.0} ms | {:.0} ms |",
            through.as_secs_f64() * 1000.0,
            straight.as_secs_f64() * 1000.0
        ));
    }
    for (what, host, port, proto) in [
        (
            "PostgreSQL SSLRequest → `N`, by name",
            "pg.raw.test",
            "5432",
            "pg",
        ),
        (
            "PostgreSQL SSLRequest → `N`, by address",
            s.as_str(),
            "5432",
            "pg",
        ),
        (
            "Redis `PING` → `+PONG`, by name",
            "redis.raw.test",
            "6379",
            "redis",
        ),
        (
            "Redis `PING` → `+PONG`, by address",
            s.as_str(),
            "6379",
            "redis",
        ),
        (
            "SMTP greeting (server speaks first), by name",
            "smtp.raw.test",
            "2525",
            "smtp",
        ),
    ] {
        let (via_median, via_worst) = ttfb(&pod, false, host, port, proto);
        let (direct_median, direct_worst) = ttfb(&pod, true, &s, port, proto);
        // Liveness, not performance: before the fix each of these took the 10 s head timeout.
        assert!(
            via_worst < 3000.0,
            "{what}: worst {via_worst} ms through sluice"
        );
        rows.push(format!(
            "| {what}: time to first byte, median (worst) of 20 | {via_median:.2} ms ({via_worst:.2}) | {direct_median:.2} ms ({direct_worst:.2}) |"
        ));
    }
    // A second connection from the same source port, which the NAT renumbered (`SAME_PORT`),
    // is identified all the same. (In this test: a second pod's servers would share
    // OpenSMTPD's and PostgreSQL's system paths with this one's.)
    let py = python();
    let (out, _) = pod.client(false, &[&py, "-c", SAME_PORT]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "the same port twice: {}\nsluice: {}",
        text(&out),
        pod.log("sluice.log")
    );
    // Every one was relayed as the raw TCP it is, under the names the clients resolved.
    let audit = pod.audit();
    for name in ["pg.raw.test", "redis.raw.test", "smtp.raw.test"] {
        assert!(
            audit
                .lines()
                .any(|l| l.contains(name) && l.contains("\"Allowed\"")),
            "no allowed event for {name}:\n{audit}"
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "raw TCP through the transparent listener (load {})",
        load.trim()
    );
    println!("| what | through sluice | direct |\n|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}

/// Two connections from one source port to two destinations, both redirected to the one
/// transparent listener: their reply tuples would be the same (listener ↔ client:port), so the
/// kernel's NAT gives the second another source port, and the exact socket lookup by the port
/// sluice sees finds nothing. Linux hands out the same ephemeral port for different
/// destinations, and a closed connection's tracking entry lives on for minutes, so a client
/// meets this by chance (the SMTP timing loop above was refused "No ESTABLISHED TCP
/// connection found" about once in five runs); here it is made on purpose.
const SAME_PORT: &str = r#"
import socket
def resolve(name, port):
    return socket.getaddrinfo(name, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
def bound():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.settimeout(10)
    s.bind(("0.0.0.0", 40123))
    return s
pg = bound()
pg.connect(resolve("pg.raw.test", 5432))
pg.sendall(b"\x00\x00\x00\x08\x04\xd2\x16\x2f")
assert pg.recv(1) == b"N", "no SSLRequest answer from PostgreSQL"
smtp = bound()
smtp.connect(resolve("smtp.raw.test", 2525))
assert smtp.getsockname()[1] == pg.getsockname()[1] == 40123, "the ports differ"
banner = smtp.recv(64)
assert banner.startswith(b"220"), "closed without the SMTP greeting: %r" % banner
print("ok")
"#;
