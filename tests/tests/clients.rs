//! The client matrix: the libraries agents actually use, configured only the way their users
//! configure them (proxy and CA from the environment), through `sluice run` with TLS
//! termination and credential injection. Python `requests` (HTTP/1.1), `httpx` (HTTP/2),
//! Node's `undici` `EnvHttpProxyAgent`, and gRPC (`grpcio`, HTTP/2 with trailers). The clients
//! live in `tests/clients/`; `.ci/run` installs their packages.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_e2e::origin::{H2Origin, OriginProcess, make_cert};
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python, realpath, run};
use sluice_e2e::workspace_dir;

const SECRET: &str = "client-matrix-SECRET-4d2e";
const PLACEHOLDER: &str = "Authorization: Bearer openshell:resolve:env:MATRIX_KEY";

fn clients_dir() -> PathBuf {
    workspace_dir().join("tests/clients")
}

fn node() -> String {
    let out = Command::new("node")
        .args(["-p", "process.execPath"])
        .output()
        .expect("node");
    realpath(String::from_utf8_lossy(&out.stdout).trim())
}

/// A client command with the proxy in its environment and nothing that would bypass it.
fn client(program: &str, sluice: &Sluice) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(clients_dir())
        .env("HTTPS_PROXY", sluice.proxy_url())
        .env("https_proxy", sluice.proxy_url())
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy");
    cmd
}

/// sluice with `policy`, a provider binding `MATRIX_KEY` to `bound_port`, trusting `origin_ca`;
/// and the CA file its clients trust.
fn start(dir: &TempDir, policy: &str, bound_port: u16, origin_ca: &Path) -> (Sluice, PathBuf) {
    let providers = dir.write(
        "providers.yaml",
        &format!(
            "id: matrix\ncredentials:\n  - name: key\n    env_vars: [MATRIX_KEY]\nendpoints:\n  - host: 127.0.0.1\n    port: {bound_port}\n"
        ),
    );
    Sluice::intercepting(
        dir,
        policy,
        &[origin_ca],
        Some(&providers),
        &[("MATRIX_KEY", SECRET)],
    )
}

fn rest_policy(port: u16, binaries: &[String]) -> String {
    let mut p = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /v1/**}}\n    binaries:\n"
    );
    for b in binaries {
        p.push_str(&format!("      - path: {b}\n"));
    }
    p
}

#[test]
fn python_requests_httpx_and_node_undici_get_the_secret_and_readable_refusals() {
    let dir = TempDir::new("matrix");
    let origin = H2Origin::start(dir.path());
    let policy = rest_policy(origin.port(), &[python(), node()]);
    let (sluice, ca) = start(&dir, &policy, origin.port(), &origin.cert);
    let url = |path: &str| format!("https://127.0.0.1:{}{path}", origin.port());
    let py = |kind: &str, path: &str| {
        run(client("python3", &sluice)
            .arg("py_client.py")
            .arg(kind)
            .arg(url(path))
            .arg(&ca)
            .arg(PLACEHOLDER))
    };
    let undici = |path: &str| {
        run(client("node", &sluice)
            .env("NODE_EXTRA_CA_CERTS", &ca)
            .arg("undici_client.mjs")
            .arg(url(path))
            .arg(PLACEHOLDER))
    };

    // requests speaks HTTP/1.1 on both legs; httpx negotiates HTTP/2 with sluice, and sluice
    // with the origin; undici speaks HTTP/1.1.
    let (code, out, err) = py("requests", "/v1/requests");
    assert_eq!(code, 0, "{err}\n{}", sluice.stderr());
    assert!(
        out.starts_with("200 HTTP/1.1 proto=1.1 method=GET path=/v1/requests"),
        "{out}"
    );
    let (code, out, err) = py("httpx", "/v1/httpx");
    assert_eq!(code, 0, "{err}\n{}", sluice.stderr());
    assert!(
        out.starts_with("200 HTTP/2 proto=2.0 method=GET path=/v1/httpx"),
        "{out}"
    );
    let (code, out, err) = undici("/v1/undici");
    assert_eq!(code, 0, "{err}\n{}", sluice.stderr());
    assert!(
        out.starts_with("200 proto=1.1 method=GET path=/v1/undici"),
        "{out}"
    );
    // Each request reached the origin with the secret in place of the placeholder.
    let got = origin.received();
    assert_eq!(got.len(), 3, "{got:?}");
    for r in &got {
        assert_eq!(
            r["headers"]["authorization"],
            format!("Bearer {SECRET}"),
            "{r}"
        );
    }

    // A refusal is a 403 whose JSON body each client can read, naming the reason.
    for (name, (_, out, _)) in [
        ("requests", py("requests", "/admin")),
        ("httpx", py("httpx", "/admin")),
        ("undici", undici("/admin")),
    ] {
        assert!(out.starts_with("403 "), "{name}: {out}");
        assert!(out.contains("\"error\":\"policy_denied\""), "{name}: {out}");
    }
    assert_eq!(origin.received().len(), 3, "a refused request was sent");
    let audit = std::fs::read_to_string(&sluice.audit_path).unwrap();
    assert!(!audit.contains(SECRET) && !sluice.stderr().contains(SECRET));
    assert_events_valid(&sluice);
}

/// A gRPC echo server (grpcio over TLS) on 127.0.0.1, and the CA of its certificate.
fn grpc_origin(dir: &Path) -> (OriginProcess, PathBuf) {
    let (ca, cert, key) = make_cert(dir);
    let process = OriginProcess::spawn(
        Command::new("python3")
            .current_dir(clients_dir())
            .args(["grpc_echo.py", "serve"])
            .arg(&cert)
            .arg(&key),
        "the gRPC origin",
    );
    (process, ca)
}

#[test]
fn grpc_calls_are_judged_per_method_and_get_the_secret_in_metadata() {
    let dir = TempDir::new("grpc");
    let (origin, origin_ca) = grpc_origin(dir.path());
    let policy = format!(
        "version: 1\nnetwork_policies:\n  grpc:\n    endpoints:\n      - host: 127.0.0.1\n        port: {}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: POST, path: /echo.Echo/Say}}\n    binaries:\n      - path: {}\n",
        origin.port,
        python()
    );
    let (sluice, ca) = start(&dir, &policy, origin.port, &origin_ca);
    let call = |method: &str| {
        run(client("python3", &sluice)
            .args(["grpc_echo.py", "call"])
            .arg(format!("127.0.0.1:{}", origin.port))
            .arg(&ca)
            .arg(method)
            .arg("Bearer openshell:resolve:env:MATRIX_KEY"))
    };
    // Allowed: the reply (a gRPC status carried in HTTP/2 trailers) comes back, and the
    // server saw the secret, which it echoes: sluice masks the echo with as many `*` (a
    // replacement of another length would break the gRPC message framing).
    let (code, out, err) = call("/echo.Echo/Say");
    assert_eq!(code, 0, "{err}\n{}", sluice.stderr());
    assert_eq!(
        out.trim(),
        format!("OK auth=Bearer {} msg=hello", "*".repeat(SECRET.len())),
        "{err}\n{}",
        sluice.stderr()
    );
    // Another method of the same service: refused, which gRPC reports as PERMISSION_DENIED.
    let (_, out, err) = call("/echo.Echo/Admin");
    assert!(
        out.starts_with("ERR PERMISSION_DENIED"),
        "{out}{err}\n{}",
        sluice.stderr()
    );
    let audit = std::fs::read_to_string(&sluice.audit_path).unwrap();
    assert!(audit.contains("/echo.Echo/Admin"), "the refusal is audited");
    assert!(!audit.contains(SECRET) && !sluice.stderr().contains(SECRET));
    assert_events_valid(&sluice);
}
