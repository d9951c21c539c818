//! What a client shows of a refusal, with the real clients as their users run them: curl
//! (`-v` prints the `CONNECT` refusal's status line and headers, never its body), Python's
//! `urllib` and `requests` and pip (they print a failed tunnel's status line, and an HTTP
//! error's reason phrase), and Node's `undici` (the body of a refused request). Each must
//! show sluice's refusal code and why, where it can show anything (docs/refusals.md).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::PathBuf;
use std::process::Command;

use sluice_e2e::origin::{H2Origin, HttpsOrigin};
use sluice_e2e::proxy::{Sluice, TempDir, python, realpath, run};
use sluice_e2e::workspace_dir;

/// A host no policy entry names (refused before it is resolved: nothing leaves).
const REFUSED: &str = "https://refused.test/simple/";

fn node() -> String {
    let out = Command::new("node")
        .args(["-p", "process.execPath"])
        .output()
        .expect("node");
    realpath(String::from_utf8_lossy(&out.stdout).trim())
}

fn clients_dir() -> PathBuf {
    workspace_dir().join("tests/clients")
}

/// `program` with sluice as its proxy, from the environment as users set it.
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

fn output(cmd: &mut Command) -> String {
    let (_, out, err) = run(cmd);
    format!("{out}{err}")
}

#[test]
fn a_connect_refusal_says_why_in_what_curl_python_and_pip_print() {
    let sluice = Sluice::start("version: 1\nnetwork_policies: {}\n", &[]);
    let why = "CONNECT refused.test:443 not permitted by policy: network connections not allowed by policy";

    // curl -v: the status line and the headers (curl never prints a failed tunnel's body).
    let curl = output(
        Command::new("curl")
            .args(["-sv", "--max-time", "15", "--proxy"])
            .arg(sluice.proxy_url())
            .arg(REFUSED),
    );
    for line in [
        format!("< HTTP/1.1 403 Forbidden (sluice: policy_denied: {why})"),
        "< X-Sluice-Error: policy_denied".to_string(),
        format!("< X-Sluice-Reason: {why}"),
        "* CONNECT tunnel failed, response 403".to_string(),
    ] {
        assert!(
            curl.lines().any(|l| l.trim_end() == line),
            "curl -v does not print `{line}`:\n{curl}"
        );
    }

    // Python's http.client (urllib, requests, pip): the status line's reason phrase.
    let tunnel = format!("Tunnel connection failed: 403 Forbidden (sluice: policy_denied: {why})");
    let urllib = output(client(&python(), &sluice).args([
        "-c",
        "import sys, urllib.request\ntry:\n    urllib.request.urlopen(sys.argv[1], timeout=15)\nexcept Exception as e:\n    print(e)",
        REFUSED,
    ]));
    assert!(urllib.contains(&tunnel), "urllib: {urllib}");
    let requests = output(client("python3", &sluice).args([
        "-c",
        "import sys, requests\ntry:\n    requests.get(sys.argv[1], timeout=15)\nexcept Exception as e:\n    print(e)",
        REFUSED,
    ]));
    assert!(requests.contains(&tunnel), "requests: {requests}");
    // pip says it in the warning of its first retry.
    let dir = TempDir::new("refusal-pip");
    let pip = output(
        client("python3", &sluice)
            .args(["-m", "pip", "download", "--isolated", "--no-deps"])
            .args([
                "--disable-pip-version-check",
                "--retries",
                "1",
                "--index-url",
            ])
            .arg(REFUSED)
            .arg("-d")
            .arg(dir.path())
            .arg("demo"),
    );
    assert!(pip.contains(&tunnel), "pip: {pip}");
    assert!(
        pip.contains("No matching distribution found for demo"),
        "{pip}"
    );
}

/// sluice terminating TLS for an HTTP/1.1 origin and an HTTP/2 one, whose policy allows
/// `GET /allowed` only, to curl, Python and Node.
fn l7(dir: &TempDir) -> (Sluice, PathBuf, HttpsOrigin, H2Origin) {
    let origin = HttpsOrigin::start(dir.path());
    let h2_dir = dir.path().join("h2");
    std::fs::create_dir_all(&h2_dir).unwrap();
    let h2 = H2Origin::start(&h2_dir);
    let endpoint = |port: u16| {
        format!(
            "      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /allowed}}\n"
        )
    };
    let policy = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n{}{}    binaries:\n      - path: /usr/bin/curl\n      - path: {}\n      - path: {}\n",
        endpoint(origin.port()),
        endpoint(h2.port()),
        python(),
        node()
    );
    let (sluice, ca) = Sluice::intercepting(dir, &policy, &[&origin.cert, &h2.cert], None, &[]);
    (sluice, ca, origin, h2)
}

#[test]
fn a_request_refusal_says_why_in_its_headers_status_and_body() {
    let dir = TempDir::new("refusal-l7");
    let (sluice, ca, origin, h2_origin) = l7(&dir);
    let url = format!("https://127.0.0.1:{}/forbidden", origin.port());
    let why = format!(
        "GET 127.0.0.1:{}/forbidden denied by L7 policy: GET /forbidden not permitted by policy",
        origin.port()
    );

    let curl = output(
        Command::new("curl")
            .args(["-sv", "--max-time", "15", "--http1.1", "--proxy"])
            .arg(sluice.proxy_url())
            .arg("--cacert")
            .arg(&ca)
            .arg(&url),
    );
    for line in [
        format!("< HTTP/1.1 403 Forbidden (sluice: policy_denied: {why})"),
        "< X-Sluice-Error: policy_denied".to_string(),
        format!("< X-Sluice-Reason: {why}"),
        "< X-OpenShell-Policy: api".to_string(),
    ] {
        assert!(
            curl.lines().any(|l| l.trim_end() == line),
            "curl -v does not print `{line}`:\n{curl}"
        );
    }
    // The body, which curl prints, is the JSON refusal.
    assert!(
        curl.contains("{\"error\":\"policy_denied\",\"detail\":\"GET 127.0.0.1:"),
        "{curl}"
    );
    // HTTP/2 has no reason phrase; the headers and the body are the same.
    let h2_url = format!("https://127.0.0.1:{}/forbidden", h2_origin.port());
    let h2 = output(
        Command::new("curl")
            .args(["-sv", "--max-time", "15", "--http2", "--proxy"])
            .arg(sluice.proxy_url())
            .arg("--cacert")
            .arg(&ca)
            .arg(&h2_url),
    );
    let h2_why = why.replace(&origin.port().to_string(), &h2_origin.port().to_string());
    for line in [
        "< HTTP/2 403".to_string(),
        "< x-sluice-error: policy_denied".to_string(),
        format!("< x-sluice-reason: {h2_why}"),
    ] {
        assert!(
            h2.lines().any(|l| l.trim_end() == line),
            "curl -v does not print `{line}`:\n{h2}"
        );
    }
    assert!(h2.contains("{\"error\":\"policy_denied\""), "{h2}");

    // requests' raise_for_status and urllib's HTTPError print the reason phrase.
    let requests = output(
        client("python3", &sluice)
            .env("REQUESTS_CA_BUNDLE", &ca)
            .args([
                "-c",
                "import sys, requests\nr = requests.get(sys.argv[1], timeout=15)\nprint(r.json()['error'], r.headers['X-Sluice-Error'])\ntry:\n    r.raise_for_status()\nexcept Exception as e:\n    print(e)",
                &url,
            ]),
    );
    assert!(
        requests.contains("policy_denied policy_denied"),
        "requests: {requests}"
    );
    assert!(
        requests.contains(&format!(
            "403 Client Error: Forbidden (sluice: policy_denied: {why}) for url: {url}"
        )),
        "requests: {requests}"
    );
    let urllib = output(client(&python(), &sluice).env("SSL_CERT_FILE", &ca).args([
        "-c",
        "import sys, urllib.request\ntry:\n    urllib.request.urlopen(sys.argv[1], timeout=15)\nexcept Exception as e:\n    print(e)",
        &url,
    ]));
    assert!(
        urllib.contains(&format!(
            "HTTP Error 403: Forbidden (sluice: policy_denied: {why})"
        )),
        "urllib: {urllib}"
    );

    // Node's undici: the status and the JSON body.
    let undici = output(
        client("node", &sluice)
            .env("NODE_EXTRA_CA_CERTS", &ca)
            .args(["undici_client.mjs", &url]),
    );
    assert!(
        undici.starts_with("403 {\"error\":\"policy_denied\""),
        "undici: {undici}"
    );
    assert!(undici.contains(&why), "undici: {undici}");
}

#[test]
fn node_undici_shows_only_the_status_of_a_connect_refusal() {
    // What docs/refusals.md says Node prints: undici reports the status of a refused
    // tunnel and drops the rest of the response (the reason is in sluice's audit log).
    let sluice = Sluice::start("version: 1\nnetwork_policies: {}\n", &[]);
    let undici = output(client("node", &sluice).args(["undici_client.mjs", REFUSED]));
    assert!(
        undici.contains("Proxy response (403) !== 200 when HTTP Tunneling"),
        "undici: {undici}"
    );
}
