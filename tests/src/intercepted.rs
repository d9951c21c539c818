//! sluice intercepting a scripted origin, as the tests of judged and rewritten messages
//! (WebSocket, GraphQL, JSON-RPC, MCP) set it up and read it back: a Python TLS origin that
//! logs what it receives, the one test credential bound to it, Python clients whose report is
//! one JSON value, and the audit of the calls sluice judged.
//!
//! It does not start sluice (`proxy.rs` does) or make certificates (`origin/scripted.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::origin::{OriginProcess, Script, spawn_tls};
use crate::proxy::{Sluice, TempDir, run};

/// sluice, the CA it signs with (which the client trusts), the origin behind it and the
/// log of what the origin received, held for one test; the directory is removed last.
#[derive(Debug)]
pub struct Intercepted {
    pub sluice: Sluice,
    pub ca: PathBuf,
    pub origin: OriginProcess,
    pub log: PathBuf,
    pub dir: TempDir,
}

impl Intercepted {
    /// Holds `started` (sluice and its CA, as [`Sluice::intercepting`] returns them) with the
    /// origin it intercepts, the origin's log and their directory.
    pub fn new(
        dir: TempDir,
        origin: OriginProcess,
        log: PathBuf,
        started: (Sluice, PathBuf),
    ) -> Self {
        let (sluice, ca) = started;
        Intercepted {
            sluice,
            ca,
            origin,
            log,
            dir,
        }
    }

    /// What the origin received so far.
    pub fn received(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

/// Starts the Python `script` as a TLS origin ([`spawn_tls`]) whose third argument is the
/// log `received.log` in `dir` (made empty first), where it writes what it receives: the
/// process, the CA of its certificate, and the log.
pub fn logging_origin(
    dir: &TempDir,
    script: &str,
    what: &str,
) -> (OriginProcess, PathBuf, PathBuf) {
    let log = dir.path().join("received.log");
    std::fs::write(&log, "").unwrap();
    let (origin, origin_ca) = spawn_tls(dir.path(), Script::Python(script), &[&log], what);
    (origin, origin_ca, log)
}

/// A providers file (`providers.yaml` in `dir`): the credential `api-key` of the provider
/// `test-api`, read from `TEST_API_KEY`, bound to 127.0.0.1:`port`, below `path` when given.
pub fn api_key_provider(dir: &TempDir, port: u16, path: Option<&str>) -> PathBuf {
    let path = path.map_or(String::new(), |p| format!("    path: {p}\n"));
    dir.write(
        "providers.yaml",
        &format!(
            "id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\nendpoints:\n  - host: 127.0.0.1\n    port: {port}\n{path}"
        ),
    )
}

/// Runs the Python client `script` with `args` (`python3 -c script args...`): it must exit
/// 0 (else its stderr and sluice's are shown), and what it prints is one JSON value.
pub fn python_json(sluice: &Sluice, script: &str, args: &[&str]) -> Value {
    let (code, out, err) = run(Command::new("python3").arg("-c").arg(script).args(args));
    assert_eq!(code, 0, "{err}\n{}", sluice.stderr());
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"))
}

/// Runs the Python client `script` with `args`, sluice its HTTPS proxy by the environment
/// (`HTTPS_PROXY`, no `NO_PROXY`) and sluice's CA `ca` trusted by `SSL_CERT_FILE`, as a
/// library's client finds them: it must exit 0, and the last line it prints is one JSON value
/// (the library may print before it).
pub fn python_json_via_env(sluice: &Sluice, ca: &Path, script: &str, args: &[&str]) -> Value {
    let proxy = format!("http://{}", sluice.addr());
    let (code, out, err) = run(Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .env("HTTPS_PROXY", &proxy)
        .env("https_proxy", &proxy)
        .env("SSL_CERT_FILE", ca)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy"));
    assert_eq!(code, 0, "{err}\n{}", sluice.stderr());
    serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {out}\n{err}"))
}

/// Posts each of `bodies` with `httpx` through sluice (`ca` trusted) to `url`, over HTTP/2
/// when `version` is `2` (a body written `OVERRIDE <body>` is sent with
/// `X-HTTP-Method-Override: DELETE`): for each answer, its HTTP version, status and body.
pub fn post_bodies(sluice: &Sluice, ca: &Path, url: &str, version: &str, bodies: &[&str]) -> Value {
    let proxy = format!("http://{}", sluice.addr());
    let ca = ca.display().to_string();
    let mut args = vec![proxy.as_str(), url, ca.as_str(), version];
    args.extend_from_slice(bodies);
    python_json(sluice, POST_CLIENT, &args)
}

/// The client of [`post_bodies`]: argv[1:5] are the proxy, the URL, the CA and the HTTP
/// version, argv[5:] the bodies.
const POST_CLIENT: &str = r#"
import httpx, json, sys
proxy, url, ca, version = sys.argv[1:5]
out = []
with httpx.Client(proxy=proxy, verify=ca, http2=(version == '2')) as c:
    for body in sys.argv[5:]:
        headers = {'Content-Type': 'application/json'}
        if body.startswith('OVERRIDE '):
            body = body[len('OVERRIDE '):]
            headers['X-HTTP-Method-Override'] = 'DELETE'
        r = c.post(url, content=body, headers=headers)
        out.append({'version': r.http_version, 'status': r.status_code, 'body': r.text})
print(json.dumps(out))
"#;

/// The HTTP activity events (class 4002) as text, once one of them refuses `denied` (its
/// `action_id` 2) without `argument` in it, and one allows `allowed` (its `action_id` 1).
pub fn http_events_judging(
    sluice: &Sluice,
    denied: &str,
    argument: &str,
    allowed: &str,
) -> Vec<String> {
    let http: Vec<String> = sluice
        .events()
        .iter()
        .filter(|e| e["class_uid"] == 4002)
        .map(Value::to_string)
        .collect();
    let refusal = http
        .iter()
        .find(|e| e.contains(denied) && e.contains("\"action_id\":2"))
        .unwrap_or_else(|| panic!("no refusal of {denied} audited: {http:#?}"));
    assert!(
        !refusal.contains(argument),
        "arguments are never audited: {refusal}"
    );
    assert!(
        http.iter()
            .any(|e| e.contains(allowed) && e.contains("\"action_id\":1")),
        "{http:#?}"
    );
    http
}

/// The audit holds a refusal of `refused` (an event naming it, its `action_id` 2) and never
/// `argument`, a value from a call's arguments or variables. Each event is read without its
/// actor: the client's command line carries the request bodies in these tests.
pub fn assert_refusal_audited_without(sluice: &Sluice, refused: &str, argument: &str) {
    let events: Vec<String> = sluice
        .events()
        .into_iter()
        .map(|mut e| {
            e["actor"] = Value::Null;
            e.to_string()
        })
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e.contains(refused) && e.contains("\"action_id\":2")),
        "{events:#?}"
    );
    assert!(
        !events.iter().any(|e| e.contains(argument)),
        "arguments are never audited"
    );
}
