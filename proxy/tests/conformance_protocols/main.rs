//! The OpenShell message-level protocol corpus (`corpus/`, provenance in its README: MCP,
//! JSON-RPC, GraphQL, WebSocket text) run against the policy library, case by case, as the
//! REST corpus is in `tests/conformance`.
//!
//! Sections:
//! - `validation compat`: `--compat openshell` loads exactly what the reference loads,
//!   except policies refused for a feature sluice does not implement yet (docs/policy.md,
//!   row 23: refused, never ignored).
//! - `decisions`: the L4 answer and its entry, then the request's decision (`l7`) as the
//!   proxy takes it: for a WebSocket case, the upgrade's and then the text message's,
//!   judged as `WEBSOCKET_TEXT <upgrade path>` where the upgrade's endpoint is
//!   `protocol: websocket`, not judged (`null`) where it is not.
//!
//! Each section prints one summary line; any difference no documented rule explains fails.
//! `SLUICE_PROTOCOL_CONFORMANCE_DIR` names another folder of the same layout to run instead.

mod corpus;
#[path = "../conformance_support/mod.rs"]
mod support;

use std::collections::BTreeMap;

use sluice::policy::rpc_decide::Body;
use sluice::policy::{
    Caller, Compat, L4Decision, LoadError, Loaded, Request, Source, Verdict, canon, load,
};
use support::{NOT_SUPPORTED, Outcome, Section, first_error, unsupported};

fn validation(case: &corpus::ValidationCase, got: &Result<Loaded, LoadError>) -> Outcome {
    match (case.valid, got) {
        (true, Ok(_)) | (false, Err(_)) => Outcome::Agree,
        (false, Ok(_)) => Outcome::Unexplained(format!(
            "accepted, the reference refuses at {} ({})",
            case.stage.as_deref().unwrap_or("?"),
            case.label
        )),
        (true, Err(e)) if unsupported(e) => Outcome::Explained(NOT_SUPPORTED),
        (true, Err(e)) => Outcome::Unexplained(format!("refused ({})", first_error(e, 80))),
    }
}

/// The verdict as the corpus writes it.
fn word(v: Verdict) -> &'static str {
    match v {
        Verdict::Allow => "allow",
        Verdict::Audit => "audit",
        Verdict::Deny => "deny",
    }
}

fn decision(case: &corpus::DecisionCase, loaded: &Result<Loaded, LoadError>) -> Outcome {
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) if unsupported(e) => return Outcome::Explained(NOT_SUPPORTED),
        Err(e) => return Outcome::Unexplained(format!("policy refused ({})", first_error(e, 80))),
    };
    let policy = &loaded.policy;
    let q = &case.query;
    let want = &case.expect;
    let caller = Caller {
        exe: &q.binary,
        ancestors: &q.ancestors,
        cmdline: &[],
        tenant: None,
    };
    let Ok(host) = canon::normalize_host(&q.host) else {
        return Outcome::Unexplained(format!("host {} refused", q.host));
    };
    let admission = match policy.decide_l4(&caller, &sluice_addr::Authority::new(&host, q.port)) {
        L4Decision::Allow(a) => a,
        L4Decision::Deny(_) if want.l4 != "allow" => return Outcome::Agree,
        L4Decision::Deny(d) => {
            return Outcome::Unexplained(format!("L4 denied where allowed ({})", d.reason));
        }
    };
    if want.l4 != "allow" {
        return Outcome::Unexplained("L4 allowed where denied".to_string());
    }
    if want.entry.as_deref() != Some(admission.entry.as_str()) {
        return Outcome::Unexplained(format!(
            "entry {} where the reference has {:?}",
            admission.entry, want.entry
        ));
    }
    let Some(method) = &q.method else {
        return Outcome::Agree;
    };
    let target = q.path.clone().unwrap_or_default();
    let upgrade = q.ws_text.is_some();
    let req = Request {
        method,
        target: target.as_bytes(),
        websocket_upgrade: upgrade,
    };
    let d = match policy.rpc_body_limit(&admission, &req) {
        None => policy.decide_request(&admission, &req),
        Some(limit) => {
            let bytes = q.body.as_deref().unwrap_or_default().as_bytes();
            if bytes.len() > limit {
                // The reference's reader refuses it before policy (`reject`).
                return if want.l7.as_deref() == Some("reject") {
                    Outcome::Agree
                } else {
                    Outcome::Unexplained(format!("body over {limit} bytes refused"))
                };
            }
            let receive_stream = method.eq_ignore_ascii_case("GET")
                && q.body.is_none()
                && q.headers.iter().any(|(n, v)| {
                    n.eq_ignore_ascii_case("accept")
                        && v.split(',').any(|p| {
                            p.split(';')
                                .next()
                                .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"))
                        })
                });
            let unreadable = sluice::policy::graphql_body::unreadable(
                q.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
            );
            let body = Body {
                bytes,
                receive_stream,
                unreadable: unreadable.as_deref(),
            };
            policy.decide_rpc_request(&admission, &req, body)
        }
    };
    let got = if let Some(text) = &q.ws_text {
        let up = want.upgrade.as_ref().and_then(|u| u.l7.clone());
        if up.as_deref() != Some(word(d.verdict)) {
            return Outcome::Unexplained(format!(
                "upgrade {} where the reference says {up:?} ({:?})",
                word(d.verdict),
                want.reason
            ));
        }
        if d.verdict == Verdict::Deny {
            None
        } else if policy.inspects_websocket_messages(&d) {
            let m = policy.decide_websocket_text(&admission, target.as_bytes(), text.as_bytes());
            Some(word(m.verdict))
        } else {
            None
        }
    } else {
        Some(word(d.verdict))
    };
    let want_l7 = want
        .l7
        .as_deref()
        .map(|w| if w == "reject" { "deny" } else { w });
    if got == want_l7 {
        return Outcome::Agree;
    }
    if std::env::var_os("CONFORMANCE_DUMP").is_some() {
        eprintln!(
            "DUMP {} {} q={q:?} expect={want:?} got={got:?} reason={}",
            case.policy, case.label, d.reason
        );
    }
    Outcome::Unexplained(format!(
        "{got:?} where the reference says {want_l7:?} (protocol {:?})",
        want.protocol
    ))
}

fn source(policy: &str) -> Source {
    Source {
        name: policy.to_string(),
        text: corpus::read_policy(policy),
    }
}

#[test]
fn openshell_protocol_conformance() {
    let mut compat = Section::default();
    for case in &corpus::validation() {
        let got = load(&[source(&case.policy)], Compat::OpenShell);
        compat.record(case.policy.clone(), validation(case, &got));
    }
    let mut decisions = Section::default();
    let mut by_policy: BTreeMap<String, Vec<corpus::DecisionCase>> = BTreeMap::new();
    for case in corpus::decisions() {
        by_policy.entry(case.policy.clone()).or_default().push(case);
    }
    for (policy, cases) in &by_policy {
        let loaded = load(&[source(policy)], Compat::OpenShell);
        for (i, case) in cases.iter().enumerate() {
            decisions.record(
                format!("{policy}#{i} {}", case.label),
                decision(case, &loaded),
            );
        }
    }
    let mut failures = Vec::new();
    for (name, section) in [("validation compat", &compat), ("decisions", &decisions)] {
        println!(
            "{}",
            section.summary(&format!("protocol conformance {name}"))
        );
        failures.extend(section.failures(name));
    }
    assert!(
        failures.is_empty(),
        "differences from the reference that no documented rule explains:\n{}",
        failures.join("\n")
    );
}
