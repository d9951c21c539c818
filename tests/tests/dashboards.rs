//! `dashboards/`: the Grafana dashboard parses and has the panels operators expect; every
//! metric its expressions and the alert rules name is one the real binary exports (scraped
//! after known traffic); `promtool check rules` accepts the rules and `promtool test rules`
//! shows them firing on the series that should fire them.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;
use sluice_e2e::proxy::run;
use sluice_e2e::scrape::{
    dashboards_dir, known_traffic, metric_names, openmetrics, parse, promtool,
};

fn dashboard() -> Value {
    let path = dashboards_dir().join("sluice.json");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Every PromQL expression of the dashboard's panels.
fn exprs(d: &Value) -> Vec<String> {
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_dashboard_has_the_expected_panels() {
    let d = dashboard();
    assert_eq!(d["uid"], "sluice-overview");
    let titles: BTreeSet<&str> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for want in [
        "Requests by policy entry and decision",
        "Connections by policy entry and decision",
        "Decisions by binary",
        "Decisions by host (top 20)",
        "Denials by engine",
        "Request latency",
        "Upstream connect latency",
        "Identity lookup latency",
        "Credential injections by credential",
        "Credential scrubs and findings",
        "Reloads",
        "Leaf cache hit ratio",
        "Active connections and tunnels",
        "Audit pipeline",
    ] {
        assert!(titles.contains(want), "no panel {want:?} in {titles:?}");
    }
    // Every non-row panel queries Prometheus through the dashboard's datasource variable.
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{} has no query", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
            assert!(t["expr"].as_str().unwrap().contains("sluice_"));
        }
    }
}

#[test]
fn every_metric_the_dashboard_and_the_rules_name_is_exported() {
    let d = dashboard();
    let rules = std::fs::read_to_string(dashboards_dir().join("alerts.yaml")).unwrap();
    let mut referenced: BTreeSet<String> = exprs(&d).iter().flat_map(|e| metric_names(e)).collect();
    let from_rules = metric_names(&rules);
    assert!(from_rules.len() >= 8, "{from_rules:?}");
    referenced.extend(from_rules);

    let t = known_traffic("dashboards");
    let (status, text) = openmetrics(t.metrics);
    assert_eq!(status, 200);
    let exported: BTreeSet<String> = parse(&text).into_iter().map(|s| s.name).collect();
    let missing: Vec<&String> = referenced.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "named by dashboards/ but not exported: {missing:?}\nexported: {exported:?}"
    );
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    let Some(promtool) = promtool() else { return };
    let dir = dashboards_dir();
    let (code, out, err) = run(Command::new(&promtool)
        .args(["check", "rules"])
        .arg(dir.join("alerts.yaml")));
    assert_eq!(code, 0, "promtool check rules: {out}{err}");
    assert!(out.contains("SUCCESS: 10 rules found"), "{out}");
    let (code, out, err) = run(Command::new(&promtool)
        .args(["test", "rules"])
        .arg(dir.join("alerts_test.yaml")));
    assert_eq!(code, 0, "promtool test rules: {out}{err}");
}
