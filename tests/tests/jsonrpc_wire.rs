//! End-to-end: a `protocol: json-rpc` endpoint judges each request by the calls in its body,
//! over HTTP/1.1 and HTTP/2 alike (Python `httpx`, through sluice as its HTTPS proxy, to an
//! origin over TLS that speaks both and logs what it receives): an allowed method goes through; a refused method, and a batch
//! with one refused call, never reach the origin and get a 403 naming the refused call and
//! the rule it would need; a body that is not JSON-RPC 2.0 is `400 invalid_jsonrpc_request`;
//! an allowed call whose head names another method (`X-HTTP-Method-Override`) is refused.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use serde_json::{Value, json};
use sluice_e2e::intercepted::{assert_refusal_audited_without, post_bodies};
use sluice_e2e::origin::H2Origin;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python};

#[test]
fn json_rpc_bodies_are_judged_call_by_call_over_http1_and_http2() {
    let dir = TempDir::new("jsonrpc");
    let origin = H2Origin::start(dir.path());
    let port = origin.addr.port();
    let policy = format!(
        "version: 1
network_policies:
  chain:
    endpoints:
      - host: 127.0.0.1
        port: {port}
        protocol: json-rpc
        enforcement: enforce
        rules:
          - allow: {{method: eth_blockNumber}}
    binaries:
      - path: {}
",
        python()
    );
    let (sluice, ca) = Sluice::intercepting(&dir, &policy, &[origin.cert.as_path()], None, &[]);
    let allowed = r#"{"jsonrpc":"2.0","method":"eth_blockNumber","id":1}"#;
    let refused =
        r#"{"jsonrpc":"2.0","method":"eth_sendTransaction","params":["0xsecret-arg"],"id":2}"#;
    let batch = format!("[{allowed},{refused}]");
    for version in ["1", "2"] {
        let got = post_bodies(
            &sluice,
            &ca,
            &format!("https://127.0.0.1:{port}/"),
            version,
            &[
                allowed,
                refused,
                &batch,
                "{not json",
                &format!("OVERRIDE {allowed}"),
            ],
        );
        let want_version = if version == "2" { "HTTP/2" } else { "HTTP/1.1" };
        assert!(
            got.as_array()
                .unwrap()
                .iter()
                .all(|a| a["version"] == want_version),
            "{got}"
        );
        assert_eq!(got[0]["status"], 200, "{got}\n{}", sluice.stderr());
        let proto = if version == "2" {
            "proto=2.0"
        } else {
            "proto=1.1"
        };
        assert!(got[0]["body"].as_str().unwrap().starts_with(proto), "{got}");
        for (i, what) in [(1, "a refused method"), (2, "a batch with a refused call")] {
            assert_eq!(got[i]["status"], 403, "{what}: {got}");
            let body: Value = serde_json::from_str(got[i]["body"].as_str().unwrap()).unwrap();
            assert_eq!(body["error"], "policy_denied", "{body}");
            assert_eq!(body["rpc_method"], "eth_sendTransaction", "{body}");
            assert_eq!(
                body["missing"],
                json!({"method": "eth_sendTransaction"}),
                "{body}"
            );
        }
        assert_eq!(got[3]["status"], 400, "{got}");
        let body: Value = serde_json::from_str(got[3]["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["error"], "invalid_jsonrpc_request", "{body}");
        // An allowed call whose head names another method: the upstream may act as it.
        assert_eq!(got[4]["status"], 403, "a method override: {got}");
    }
    let received: Vec<String> = std::fs::read_to_string(&origin.log)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["body"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        received,
        [allowed, allowed],
        "only the allowed call reached the origin"
    );
    assert_refusal_audited_without(&sluice, "json-rpc: eth_sendTransaction", "0xsecret-arg");
    assert_events_valid(&sluice);
}
