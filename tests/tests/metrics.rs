//! The metrics endpoint of the real binary (`--metrics-listen`): after known traffic (an
//! allowed request, one denied by L7 rules, a request and a CONNECT denied at L4, two
//! requests with a credential injected and scrubbed from the echo), the scrape holds exact
//! counts, agrees with the audit log line for line, and is read by real parsers (the Python
//! OpenMetrics parser and `promtool check metrics`); `/healthz` and `/readyz` answer.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::BTreeMap;

use sluice_e2e::ocsf::class;
use sluice_e2e::proxy::assert_events_valid;
use sluice_e2e::scrape::{
    Sample, get, known_traffic, openmetrics, parse, parse_classic, promtool,
    promtool_check_metrics, value,
};

fn decision(e: &serde_json::Value) -> &'static str {
    match e["disposition_id"].as_u64() {
        Some(1) => "allowed",
        _ if e["action_id"] == 2 => "denied",
        _ => "audited",
    }
}

#[test]
fn known_traffic_moves_the_metrics_by_exact_counts() {
    let t = known_traffic("metrics");
    let (status, text) = openmetrics(t.metrics);
    assert_eq!(status, 200, "{text}");
    let s = parse(&text);
    let v = |name: &str, labels: &[(&str, &str)]| value(&s, name, labels);

    // Requests, by decision, policy entry and engine.
    let req = "sluice_requests_total";
    assert_eq!(
        v(
            req,
            &[("decision", "allowed"), ("policy", "web"), ("engine", "l7")]
        ),
        1.0
    );
    assert_eq!(
        v(
            req,
            &[("decision", "denied"), ("policy", "web"), ("engine", "l7")]
        ),
        1.0
    );
    assert_eq!(
        v(
            req,
            &[("decision", "denied"), ("policy", "-"), ("engine", "l4")]
        ),
        1.0
    );
    assert_eq!(
        v(
            req,
            &[("decision", "allowed"), ("policy", "api"), ("engine", "l7")]
        ),
        2.0
    );
    // Connections: the two tunnels to `api` (inspected) and the CONNECT refused at L4.
    let conn = "sluice_connections_total";
    assert_eq!(
        v(
            conn,
            &[("decision", "allowed"), ("policy", "api"), ("engine", "l7")]
        ),
        2.0
    );
    assert_eq!(
        v(
            conn,
            &[("decision", "denied"), ("policy", "-"), ("engine", "l4")]
        ),
        1.0
    );
    // By binary and by host.
    let curl = sluice_e2e::proxy::realpath("/usr/bin/curl");
    assert_eq!(
        v(
            "sluice_decisions_by_binary_total",
            &[
                ("kind", "request"),
                ("decision", "allowed"),
                ("binary", &curl)
            ]
        ),
        3.0
    );
    assert_eq!(
        v(
            "sluice_decisions_by_host_total",
            &[
                ("kind", "request"),
                ("decision", "denied"),
                ("host", "127.0.0.1")
            ]
        ),
        2.0
    );
    // Injections and scrubs by credential name.
    assert_eq!(
        v(
            "sluice_credential_injections_total",
            &[("credential", "test-api/api-key")]
        ),
        2.0
    );
    // Every echo carried the secret back (in a header and in the body) and was scrubbed: one
    // finding per scrubbed response part, each counted.
    let reflected = t
        .sluice
        .events()
        .iter()
        .filter(|e| {
            class(e) == 2004
                && e["finding_info"]["types"][0] == "sluice.provider_credential.reflected"
        })
        .count() as f64;
    assert!(reflected >= 2.0, "each echo was scrubbed");
    assert_eq!(
        v(
            "sluice_credential_scrubs_total",
            &[("credential", "test-api/api-key")]
        ),
        reflected
    );
    assert_eq!(
        v(
            "sluice_findings_total",
            &[("kind", "sluice.provider_credential.reflected")]
        ),
        reflected
    );
    // Latency histograms: one observation per request, per new connection's lookup, per dial.
    assert_eq!(
        v(
            "sluice_request_duration_seconds_count",
            &[("decision", "allowed")]
        ),
        3.0
    );
    assert_eq!(
        v(
            "sluice_request_duration_seconds_count",
            &[("decision", "denied")]
        ),
        2.0
    );
    assert_eq!(
        v(
            "sluice_identity_lookup_duration_seconds_count",
            &[("result", "ok")]
        ),
        6.0
    );
    // Caller re-checks, by how they read the caller's family: each later request of an
    // inspected tunnel is one (each curl's tunnel to `api` carries one request after its
    // `CONNECT`), and every one passed.
    for name in [
        "sluice_identity_rechecks_snapshot_total",
        "sluice_identity_rechecks_walked_total",
    ] {
        assert!(
            s.iter().any(|sample| sample.name == name),
            "{name} in {text}"
        );
    }
    let rechecks = v("sluice_identity_rechecks_snapshot_total", &[])
        + v("sluice_identity_rechecks_walked_total", &[]);
    assert!(rechecks >= 2.0, "{rechecks} re-checks");
    // Three upstream connections were needed: each either dialled or, for a caller's later
    // connection to the same destination, taken from the pool.
    assert_eq!(
        v(
            "sluice_upstream_connect_duration_seconds_count",
            &[("result", "ok")]
        ) + v("sluice_upstream_reused_total", &[]),
        3.0
    );
    // The CA's leaf for 127.0.0.1 (curl sends no SNI to an IP): minted once, then cached.
    assert_eq!(v("sluice_leaf_cache_total", &[("result", "miss")]), 1.0);
    assert_eq!(v("sluice_leaf_cache_total", &[("result", "hit")]), 1.0);
    // Nothing is open any more; the saturation bound and the sink's counters are there.
    assert_eq!(v("sluice_active_tunnels", &[]), 0.0);
    assert_eq!(v("sluice_active_connections", &[]), 0.0);
    assert_eq!(v("sluice_max_connections", &[]), 4096.0);
    assert_eq!(v("sluice_audit_write_errors_total", &[]), 0.0);
    assert_eq!(v("sluice_reloads_total", &[("result", "failed")]), 0.0);
    assert_eq!(v("sluice_dns_queries_total", &[("result", "refused")]), 0.0);

    // The counts are the audit log's, event for event.
    let events = t.sluice.events();
    let mut from_log: BTreeMap<(String, String, String, String), f64> = BTreeMap::new();
    for e in &events {
        let name = match (class(e), e["activity_id"].as_u64()) {
            (4001, Some(1)) => "sluice_connections_total",
            (4002, _) => "sluice_requests_total",
            _ => continue,
        };
        let policy = e["firewall_rule"]["name"]
            .as_str()
            .unwrap_or("-")
            .to_string();
        let engine = e["firewall_rule"]["type"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        *from_log
            .entry((name.to_string(), decision(e).to_string(), policy, engine))
            .or_default() += 1.0;
    }
    let mut from_metrics = BTreeMap::new();
    for Sample {
        name,
        labels,
        value,
    } in &s
    {
        if name == "sluice_connections_total" || name == "sluice_requests_total" {
            from_metrics.insert(
                (
                    name.clone(),
                    labels["decision"].clone(),
                    labels["policy"].clone(),
                    labels["engine"].clone(),
                ),
                *value,
            );
        }
    }
    assert_eq!(from_metrics, from_log, "metrics and audit log disagree");
    let classes = events.len() as f64;
    let counted: f64 = s
        .iter()
        .filter(|x| x.name == "sluice_audit_events_total")
        .map(|x| x.value)
        .sum();
    assert_eq!(counted, classes, "one count per audit line");
    // Never a secret, a path or a query in a label.
    assert!(!text.contains(sluice_e2e::scrape::SECRET));
    assert!(
        !text.contains("/v1/echo") && !text.contains("/write"),
        "{text}"
    );
    assert_events_valid(&t.sluice);

    // What a user without a Prometheus server reads: plain curl gets the same samples in the
    // Prometheus text format 0.0.4, which promtool accepts without a single lint.
    let (status, plain) = get(t.metrics, "/metrics");
    assert_eq!(status, 200, "{plain}");
    assert!(
        !plain.contains("# EOF") && !plain.contains("# UNIT"),
        "{plain}"
    );
    let key = |x: &Sample| format!("{} {:?} {}", x.name, x.labels, x.value);
    let mut openmetrics_samples: Vec<String> = s
        .iter()
        .filter(|x| !x.name.ends_with("_created"))
        .map(key)
        .collect();
    let mut classic_samples: Vec<String> = parse_classic(&plain).iter().map(key).collect();
    openmetrics_samples.sort();
    classic_samples.sort();
    assert_eq!(classic_samples, openmetrics_samples, "{plain}");
    if let Some(promtool) = promtool() {
        promtool_check_metrics(&promtool, &plain);
    }
}

#[test]
fn health_and_readiness_answer() {
    let t = known_traffic("ready");
    assert_eq!(get(t.metrics, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(get(t.metrics, "/readyz"), (200, "ready\n".to_string()));
    assert_eq!(get(t.metrics, "/nope").0, 404);
    let (status, text) = openmetrics(t.metrics);
    assert_eq!(status, 200);
    assert!(text.ends_with("# EOF\n"), "{text}");
}
