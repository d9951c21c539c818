//! sluice's metrics endpoint as a test sees it: its address (from sluice's stderr), a scrape,
//! the exposition read by real parsers (the Python `prometheus_client` OpenMetrics parser, and
//! `promtool check metrics`), and a known mix of traffic whose counts the tests assert.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::origin::{EchoOrigin, HttpOrigin};
use crate::proxy::{Sluice, TempDir, me, run};

/// The address sluice serves metrics on, from its `sluice: metrics on ADDR` line.
pub fn metrics_addr(sluice: &Sluice) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(addr) = sluice.stderr().lines().find_map(|l| {
            l.strip_prefix("sluice: metrics on ")
                .and_then(|rest| rest.split(' ').next())
                .and_then(|a| a.parse().ok())
        }) {
            return addr;
        }
        assert!(
            Instant::now() < deadline,
            "no metrics address on stderr:\n{}",
            sluice.stderr()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// `GET path` on the metrics listener as plain `curl` asks (no `Accept`: the Prometheus text
/// format 0.0.4 for `/metrics`): (status, body).
pub fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    get_accepting(addr, path, None)
}

/// `GET /metrics` as Prometheus asks for it (OpenMetrics): (status, body).
pub fn openmetrics(addr: SocketAddr) -> (u16, String) {
    get_accepting(
        addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    )
}

fn get_accepting(addr: SocketAddr, path: &str, accept: Option<&str>) -> (u16, String) {
    let mut curl = Command::new("curl");
    curl.args([
        "-s",
        "--noproxy",
        "*",
        "--max-time",
        "10",
        "-w",
        "\n%{http_code}",
    ]);
    if let Some(accept) = accept {
        curl.arg("-H").arg(format!("Accept: {accept}"));
    }
    let (_, out, err) = run(curl.arg(format!("http://{addr}{path}")));
    let (body, status) = out
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("no answer from {addr}{path}: {out}{err}"));
    (status.parse().unwrap_or(0), body.to_string())
}

/// One sample: its name (with `_total`, `_bucket`... suffixes), labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

const PARSE: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        print(json.dumps({"family": family.name, "type": family.type, "name": s.name, "labels": s.labels, "value": s.value}))
"#;

/// The exposition read by the Python `prometheus_client` OpenMetrics parser (strict: a
/// malformed line, a missing `# EOF` or a counter without `_total` fails).
pub fn parse(exposition: &str) -> Vec<Sample> {
    python_samples(PARSE, exposition)
}

fn python_samples(program: &str, exposition: &str) -> Vec<Sample> {
    let mut child = Command::new("python3")
        .args(["-c", program])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(exposition.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "the Python prometheus_client parser refused the exposition: {}\n{exposition}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("parser line");
            Sample {
                name: v["name"].as_str().unwrap_or_default().to_string(),
                labels: v["labels"]
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                            .collect()
                    })
                    .unwrap_or_default(),
                value: v["value"].as_f64().unwrap_or(f64::NAN),
            }
        })
        .collect()
}

/// The value of the sample `name` whose labels include `labels`; 0 when there is none.
/// Panics when more than one sample matches (the test asked for too little).
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let hits: Vec<&Sample> = samples
        .iter()
        .filter(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert!(hits.len() <= 1, "{name} {labels:?} matches {hits:?}");
    hits.first().map_or(0.0, |s| s.value)
}

/// `promtool`, or `None` (then the caller skips, except under `CI=true`, where a missing
/// promtool fails the test: `.ci/run` installs it).
pub fn promtool() -> Option<String> {
    let found = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some("promtool".to_string());
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "promtool is missing (Debian's `prometheus` package ships it; .ci/run installs it)"
    );
    eprintln!("promtool is missing: skipping its checks outside CI");
    None
}

/// `promtool check metrics` on an exposition (what `curl -s .../metrics | promtool check
/// metrics` gives a user): it must parse and raise no lint at all.
pub fn promtool_check_metrics(promtool: &str, exposition: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(exposition.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.trim().is_empty(),
        "promtool check metrics ({:?}): {text}",
        out.status
    );
}

const PARSE_CLASSIC: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        print(json.dumps({"family": family.name, "type": family.type, "name": s.name, "labels": s.labels, "value": s.value}))
"#;

/// The Prometheus text format 0.0.4 exposition read by the Python `prometheus_client` parser
/// of that format.
pub fn parse_classic(exposition: &str) -> Vec<Sample> {
    python_samples(PARSE_CLASSIC, exposition)
}

pub const SECRET: &str = "m3tr1cs-s3cr3t-9d2e";
pub const PLACEHOLDER: &str = "openshell:resolve:env:TEST_API_KEY";

/// sluice with metrics on, after known traffic:
/// - `web` (plain HTTP, read-only rules): one GET allowed, one POST denied by L7 rules;
/// - nothing for 127.0.0.1:9 (`http://` request denied at L4) and a CONNECT to it (denied
///   at L4);
/// - `api` (TLS terminated, a bearer credential bound, an origin that echoes the request):
///   two GETs through two tunnels, the credential injected into each and scrubbed from each
///   echo.
#[derive(Debug)]
pub struct Traffic {
    pub sluice: Sluice,
    pub metrics: SocketAddr,
    pub dir: TempDir,
    _web: HttpOrigin,
    _api: EchoOrigin,
}

pub fn known_traffic(tag: &str) -> Traffic {
    known_traffic_with(tag, &[])
}

/// [`known_traffic`] with more flags for sluice.
pub fn known_traffic_with(tag: &str, extra: &[&str]) -> Traffic {
    let dir = TempDir::new(tag);
    let web = HttpOrigin::start();
    let api = EchoOrigin::start(dir.path());
    let policy = format!(
        "version: 1\nnetwork_policies:\n  web:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: read-only}}\n    binaries:\n      - path: /usr/bin/curl\n  api:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: /usr/bin/curl\n      - path: {}\n",
        web.port(),
        api.port(),
        me()
    );
    let providers = dir.write(
        "providers.yaml",
        &format!(
            "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\n    auth_style: bearer\nendpoints:\n  - {{host: 127.0.0.1, port: {}}}\n",
            api.port()
        ),
    );
    let ca_dir = dir.path().join("ca");
    let ca_dir_s = ca_dir.display().to_string();
    let api_cert = api.cert.display().to_string();
    let providers_s = providers.display().to_string();
    let mut args = vec![
        "--allow-loopback-upstream",
        "--metrics-listen",
        "127.0.0.1:0",
        "--ca-dir",
        &ca_dir_s,
        "--upstream-ca",
        &api_cert,
        "--providers",
        &providers_s,
    ];
    args.extend_from_slice(extra);
    let sluice = Sluice::start_with_env(&policy, &args, &[("TEST_API_KEY", SECRET)]);
    let metrics = metrics_addr(&sluice);
    let proxy = sluice.proxy_url();
    let curl = |args: &[&str]| -> String {
        let (_, out, err) = run(Command::new("curl")
            .args([
                "-s",
                "--max-time",
                "20",
                "-x",
                &proxy,
                "-w",
                "\n%{http_code}",
            ])
            .args(args));
        format!("{out}{err}")
    };
    let base = format!("http://127.0.0.1:{}", web.port());
    let out = curl(&[&format!("{base}/ok")]);
    assert!(out.ends_with("200"), "allowed GET: {out}");
    let out = curl(&["-X", "POST", "-d", "x", &format!("{base}/write")]);
    assert!(out.ends_with("403"), "L7-denied POST: {out}");
    let out = curl(&["http://127.0.0.1:9/nope"]);
    assert!(out.ends_with("403"), "L4-denied request: {out}");
    let out = curl(&["-p", "-w", "%{http_connect}", "http://127.0.0.1:9/nope"]);
    assert!(out.ends_with("403"), "L4-denied CONNECT: {out}");
    let ca = ca_dir.join("ca.pem");
    let auth = format!("Authorization: Bearer {PLACEHOLDER}");
    for _ in 0..2 {
        let out = curl(&[
            "--http1.1",
            "--cacert",
            &ca.display().to_string(),
            "-H",
            &auth,
            &format!("https://127.0.0.1:{}/v1/echo", api.port()),
        ]);
        assert!(
            out.ends_with("200"),
            "injected GET: {out}\n{}",
            sluice.stderr()
        );
        assert!(!out.contains(SECRET), "the client saw the secret: {out}");
    }
    // Both tunnels' close events are written before the metrics are read, and every client
    // connection has been let go: a connection leaves the gauge when its task ends, a moment
    // after its close event (and the plain requests' connections write none).
    wait_for_closes(&sluice, 2);
    wait_for_no_connections(metrics);
    Traffic {
        sluice,
        metrics,
        dir,
        _web: web,
        _api: api,
    }
}

/// Waits (10 s at most, then returns: the caller's assertions say what is wrong) until
/// `sluice_active_connections` reads 0.
fn wait_for_no_connections(metrics: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let (status, text) = openmetrics(metrics);
        if status == 200 && value(&parse(&text), "sluice_active_connections", &[]) == 0.0 {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn wait_for_closes(sluice: &Sluice, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while sluice
        .events()
        .iter()
        .filter(|e| crate::ocsf::is_close(e))
        .count()
        < n
    {
        assert!(Instant::now() < deadline, "fewer than {n} close events");
        thread::sleep(Duration::from_millis(50));
    }
}

/// Every `sluice_*` metric name in `text` (expressions of a dashboard or of alert rules).
pub fn metric_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("sluice_") {
        let start = i + at;
        let before_ok =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if before_ok {
            names.push(text[start..end].to_string());
        }
        i = end;
    }
    names.sort();
    names.dedup();
    names
}

/// The repository's `dashboards/` folder.
pub fn dashboards_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards")
}
