//! Configuration paths swapped for what is not a regular file: a FIFO (opening it waits for a
//! writer), a link to `/dev/zero` (reading it never ends), a directory, a socket, and a
//! sparse file of gigabytes, at every path `sluice run` watches (policy, provider profiles,
//! secrets file, tenants file and a tenant's own policy) and at every path it reads at
//! start or in a one-shot command (`--upstream-ca`, `policy check`, `policy explain`).
//!
//! While one sits at a watched path, requests through the proxy and `/metrics` keep being
//! answered within seconds (a client thread checks each), the reload fails with an audited
//! Device Config State Change naming the path and what it is, the configuration in force
//! does not change, and the real file coming back is loaded. At start, each is an exit with
//! an error naming the path and what is wrong with it. Real binary, real sockets.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::gateway::{self, exit_of};
use sluice_e2e::ocsf::class;
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, me};
use sluice_e2e::scrape::metrics_addr;

/// How long one request through the proxy, or one scrape, may take while a hostile file sits
/// at a watched path. Idle, each takes milliseconds; before the fix, a FIFO stopped both for
/// good. Generous for a loaded machine, and still far from "stuck".
const ANSWERED_WITHIN: Duration = Duration::from_secs(5);

/// What is put at a configuration path instead of a regular file.
#[derive(Clone, Copy, Debug)]
enum Hostile {
    Fifo,
    DevZero,
    Directory,
    Socket,
    Huge,
}

const ALL: [Hostile; 5] = [
    Hostile::Fifo,
    Hostile::DevZero,
    Hostile::Directory,
    Hostile::Socket,
    Hostile::Huge,
];

impl Hostile {
    /// What sluice's error must say about it.
    fn says(self) -> &'static str {
        match self {
            Hostile::Fifo => "is a FIFO (named pipe), not a regular file",
            Hostile::DevZero => {
                "leads to /dev/zero (through a link), which is a character device, not a regular file"
            }
            Hostile::Directory => "is a directory, not a regular file",
            Hostile::Socket => "is a socket, not a regular file",
            Hostile::Huge => "is larger than",
        }
    }

    /// Puts it at `path` (renamed over what is there, but for a directory, which cannot
    /// be); a socket's listener is returned, to be kept while it sits there.
    fn plant(self, path: &Path) -> Option<UnixListener> {
        let tmp = path.with_extension("hostile");
        remove_any(&tmp);
        let mut listener = None;
        match self {
            Hostile::Fifo => {
                let ok = std::process::Command::new("mkfifo")
                    .arg(&tmp)
                    .status()
                    .unwrap();
                assert!(ok.success());
            }
            Hostile::DevZero => std::os::unix::fs::symlink("/dev/zero", &tmp).unwrap(),
            Hostile::Directory => std::fs::create_dir(&tmp).unwrap(),
            Hostile::Socket => listener = Some(UnixListener::bind(&tmp).unwrap()),
            // Sparse: 3 GiB claimed, nothing written.
            Hostile::Huge => std::fs::File::create(&tmp)
                .unwrap()
                .set_len(3 << 30)
                .unwrap(),
        }
        if matches!(self, Hostile::Directory) {
            remove_any(path);
        }
        std::fs::rename(&tmp, path).unwrap();
        listener
    }
}

fn remove_any(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).unwrap(),
        Ok(_) => std::fs::remove_file(path).unwrap(),
        Err(_) => {}
    }
}

/// Puts a regular file with `text` (mode 0600) back at `path`.
fn restore(path: &Path, text: &str) {
    let tmp = path.with_extension("restored");
    remove_any(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
    drop(f);
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        remove_any(path);
    }
    std::fs::rename(&tmp, path).unwrap();
}

/// One request and its answer's status line, within `ANSWERED_WITHIN`.
fn exchange(addr: SocketAddr, request: &str) -> Result<String, String> {
    let started = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, ANSWERED_WITHIN)
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    s.set_read_timeout(Some(ANSWERED_WITHIN)).unwrap();
    s.set_write_timeout(Some(ANSWERED_WITHIN)).unwrap();
    s.write_all(request.as_bytes())
        .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut out = Vec::new();
    let read = s.read_to_end(&mut out);
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&out).into_owned();
    match read {
        Err(e) => Err(format!("{addr}: no answer after {took:?}: {e}")),
        Ok(_) if took > ANSWERED_WITHIN => Err(format!("{addr}: answered after {took:?}")),
        Ok(_) => Ok(text.lines().next().unwrap_or_default().to_string()),
    }
}

/// A client that, until stopped, asks for the origin through the proxy and scrapes
/// `/metrics`, each answer within `ANSWERED_WITHIN`; what went wrong is returned.
struct Traffic {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
    thread: JoinHandle<Vec<String>>,
}

impl Traffic {
    fn start(proxy: SocketAddr, metrics: SocketAddr, origin: u16) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let (s, a) = (Arc::clone(&stop), Arc::clone(&answered));
        let thread = thread::spawn(move || {
            let mut failures = Vec::new();
            let get = format!(
                "GET http://127.0.0.1:{origin}/still-served HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\nConnection: close\r\n\r\n"
            );
            let scrape = "GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n";
            while !s.load(Ordering::Relaxed) {
                for (addr, req) in [(proxy, get.as_str()), (metrics, scrape)] {
                    match exchange(addr, req) {
                        Ok(status) if status.starts_with("HTTP/1.1 200") => {
                            a.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(status) => failures.push(format!("{addr}: {status}")),
                        Err(e) => failures.push(e),
                    }
                }
                thread::sleep(Duration::from_millis(50));
            }
            failures
        });
        Traffic {
            stop,
            answered,
            thread,
        }
    }

    /// Waits until `n` more answers have come (the client is not stuck either).
    fn answers_more(&self, n: usize) {
        let from = self.answered.load(Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.answered.load(Ordering::Relaxed) < from + n {
            assert!(
                Instant::now() < deadline,
                "the client got no answers for 30 s"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// The Device Config State Change events so far.
fn config_events(sluice: &Sluice) -> Vec<Value> {
    sluice
        .events()
        .into_iter()
        .filter(|e| class(e) == 5019)
        .collect()
}

/// Waits for a config event after the first `seen` that `pred` accepts, and returns it with
/// the number of config events up to and including it.
fn config_event_after(
    sluice: &Sluice,
    seen: usize,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> (Value, usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = config_events(sluice);
        if let Some((i, e)) = events.iter().enumerate().skip(seen).find(|(_, e)| pred(e)) {
            return (e.clone(), i + 1);
        }
        assert!(
            Instant::now() < deadline,
            "no config event {what} after #{seen}; config events: {events:#?}\nstderr:\n{}",
            sluice.stderr()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

fn succeeded(e: &Value) -> bool {
    e["status_id"].as_u64() == Some(1)
}

/// For each hostile kind in turn at `path`: the reload fails, audited with the path and
/// what it is, while `traffic` is answered; then `good` (a function of the round) comes
/// back and is loaded. Returns the config events seen.
fn each_hostile_at(
    sluice: &Sluice,
    traffic: &Traffic,
    path: &Path,
    good: &dyn Fn(usize) -> String,
    mut seen: usize,
) -> usize {
    let shown = path.display().to_string();
    for (round, hostile) in ALL.into_iter().enumerate() {
        let _socket = hostile.plant(path);
        // A tenant's file's error is nested in the tenant's (the event's later lines).
        let (failed, n) = config_event_after(sluice, seen, &format!("{hostile:?}"), |e| {
            let errors = e["unmapped"]["policy_errors"].to_string();
            errors.contains(&shown) && errors.contains(hostile.says())
        });
        assert!(!succeeded(&failed), "{failed:#}");
        seen = n;
        // It sits there a while (the watcher sees it again and again); the proxy answers.
        traffic.answers_more(10);
        restore(path, &good(round));
        let (_, n) = config_event_after(sluice, seen, "reloaded", succeeded);
        seen = n;
        assert!(
            sluice
                .stderr()
                .contains(&format!("{shown}:1:1: it {}", hostile.says()))
                || sluice
                    .stderr()
                    .contains(&format!("secrets file {shown}: it {}", hostile.says())),
            "the reload error is not on stderr for {hostile:?} at {shown}:\n{}",
            sluice.stderr()
        );
    }
    seen
}

/// Writes the secrets file (mode 0600).
fn secrets_text(round: usize) -> String {
    format!("# round {round}\nTEST_API_KEY=hostile-files-s3cr3t-77\n")
}

#[test]
fn hostile_files_at_watched_paths_fail_the_reload_and_the_proxy_serves_on() {
    let dir = TempDir::new("hostile-watched");
    let origin = HttpOrigin::start();
    let later = HttpOrigin::start();
    let entry = |name: &str, port: u16| {
        format!(
            "  {name}:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}}}\n    binaries:\n      - path: {}\n",
            me()
        )
    };
    let policy = |round: usize| {
        format!(
            "# round {round}\nversion: 1\nnetwork_policies:\n{}",
            entry("local", origin.port())
        )
    };
    // The profile binds its credential to another port: nothing of it is on the client's way.
    let profiles = |round: usize| {
        format!(
            "# round {round}\nid: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\n    auth_style: bearer\nendpoints:\n  - {{host: 127.0.0.1, port: 9}}\n"
        )
    };
    let providers_path = dir.path().join("providers.yaml");
    let secrets_path = dir.path().join("secrets.env");
    restore(&providers_path, &profiles(0));
    restore(&secrets_path, &secrets_text(0));
    let (p, s) = (
        providers_path.display().to_string(),
        secrets_path.display().to_string(),
    );
    let sluice = Sluice::start(
        &policy(0),
        &[
            "--allow-loopback-upstream",
            "--providers",
            &p,
            "--secrets-file",
            &s,
            "--watch-interval",
            "100ms",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let metrics = metrics_addr(&sluice);
    let traffic = Traffic::start(sluice.addr(), metrics, origin.port());
    traffic.answers_more(4);
    let policy_path = sluice.dir.path().join("policy.yaml");

    let mut seen = config_events(&sluice).len();
    seen = each_hostile_at(&sluice, &traffic, &policy_path, &policy, seen);
    seen = each_hostile_at(&sluice, &traffic, &providers_path, &profiles, seen);
    seen = each_hostile_at(&sluice, &traffic, &secrets_path, &secrets_text, seen);

    // The real file, changed, is still picked up: the later origin becomes reachable.
    let ask_later = format!(
        "GET http://127.0.0.1:{0}/x HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\nConnection: close\r\n\r\n",
        later.port()
    );
    assert!(
        exchange(sluice.addr(), &ask_later)
            .unwrap()
            .starts_with("HTTP/1.1 403")
    );
    restore(
        &policy_path,
        &format!("{}{}", policy(99), entry("later", later.port())),
    );
    config_event_after(&sluice, seen, "with the later origin", succeeded);
    assert!(
        exchange(sluice.addr(), &ask_later)
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );

    let failures = traffic.finish();
    assert!(
        failures.is_empty(),
        "requests or scrapes not answered in time while hostile files sat at watched paths:\n{failures:#?}"
    );
    assert!(!sluice.stderr().contains("hostile-files-s3cr3t-77"));
    assert_events_valid(&sluice);
}

#[test]
fn hostile_files_at_a_gateways_tenants_file_and_a_tenants_policy() {
    let dir = TempDir::new("hostile-tenants");
    let origin = HttpOrigin::start();
    let tenant_policy = |round: usize| {
        format!(
            "# round {round}\n{}",
            gateway::allow_ports(&[origin.port()])
        )
    };
    let tenants = |round: usize| {
        format!(
            "# round {round}\ntenants:\n  - name: local\n    sources: [\"127.0.0.1\"]\n    policy: [alpha.yaml]\n"
        )
    };
    let alpha = dir.path().join("alpha.yaml");
    let tenants_path = dir.path().join("tenants.yaml");
    restore(&alpha, &tenant_policy(0));
    restore(&tenants_path, &tenants(0));
    let gw = gateway::start(
        &tenants_path,
        &[
            "--watch-interval",
            "100ms",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    let metrics = metrics_addr(&gw);
    let traffic = Traffic::start(gw.addr(), metrics, origin.port());
    traffic.answers_more(4);
    let mut seen = config_events(&gw).len();
    seen = each_hostile_at(&gw, &traffic, &alpha, &tenant_policy, seen);
    each_hostile_at(&gw, &traffic, &tenants_path, &tenants, seen);
    let failures = traffic.finish();
    assert!(
        failures.is_empty(),
        "requests or scrapes not answered in time while hostile files sat at watched paths:\n{failures:#?}"
    );
    assert_events_valid(&gw);
}

/// Each flag that names a file, given each hostile kind: sluice exits at once with an error
/// naming the path and what is wrong with it.
#[test]
fn hostile_files_at_start_are_errors_naming_the_path() {
    let dir = TempDir::new("hostile-start");
    let good_policy = dir.write("policy.yaml", "version: 1\nnetwork_policies: {}\n");
    let good = good_policy.display().to_string();
    for hostile in ALL {
        let path = dir.path().join(format!("{hostile:?}.conf"));
        let _socket = hostile.plant(&path);
        let bad = path.display().to_string();
        let cases: [(&str, Vec<&str>); 5] = [
            ("--policy", vec!["run", "--policy", &bad]),
            (
                "--providers",
                vec!["run", "--policy", &good, "--providers", &bad],
            ),
            (
                "--secrets-file",
                vec!["run", "--policy", &good, "--secrets-file", &bad],
            ),
            ("--tenants", vec!["run", "--tenants", &bad]),
            (
                "--upstream-ca",
                vec!["run", "--policy", &good, "--upstream-ca", &bad],
            ),
        ];
        for (flag, mut args) in cases {
            args.extend(["--listen", "127.0.0.1:0", "--audit-log", "/dev/null"]);
            let started = Instant::now();
            let (code, err) = exit_of(&args, &[]);
            assert!(
                matches!(code, Some(1 | 2)),
                "{flag} {hostile:?}: exit {code:?}\n{err}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{flag} {hostile:?} took {:?}",
                started.elapsed()
            );
            assert!(
                err.contains(&bad) && err.contains(hostile.says()),
                "{flag} {hostile:?}: the error does not name the path and what it is:\n{err}"
            );
            assert!(!err.contains("panicked"), "{err}");
        }
        // The one-shot commands read the same way.
        for args in [
            vec!["policy", "check", &bad],
            vec!["policy", "check", "--providers", &bad, &good],
            vec![
                "policy",
                "explain",
                "--policy",
                &bad,
                "--binary",
                "/usr/bin/curl",
                "http://example.com/",
            ],
        ] {
            let (code, err) = exit_of(&args, &[]);
            assert_eq!(code, Some(1), "{args:?}: {err}");
            assert!(
                err.contains(&bad) && err.contains(hostile.says()),
                "{args:?}: the error does not name the path and what it is:\n{err}"
            );
        }
        remove_any(&path);
    }
}
