//! The OpenShell conformance corpus (`corpus/`, provenance in its README) run against the
//! policy library, case by case.
//!
//! Sections:
//! - `validation compat`: `--compat openshell` must load exactly the policies the reference
//!   loads, except policies refused for a feature sluice does not implement yet (docs/policy.md,
//!   "Where sluice differs": a security setting is never silently ignored).
//! - `validation strict`: the default loader must never accept what the reference refuses; it
//!   may refuse more, each extra refusal saying what the reference would do.
//! - `decisions`: under `--compat openshell`, the decision (`allow`, `deny`, `audit`; the
//!   reference's `reject` counts as `deny`) and the matched entry must be the reference's,
//!   except where a documented difference applies, and there sluice may only be stricter.
//!
//! A difference counts as explained only when `classify` recognises it from the case's own
//! semantics (the target host, the request target, the endpoints involved, the deciding rule),
//! by the rule of the table in docs/policy.md that covers it. Every other difference fails the test.
//! Each section prints one summary line: cases, agreements, and differences by class.

mod classify;
mod corpus;
#[path = "../conformance_support/mod.rs"]
mod support;

use std::collections::BTreeMap;

use classify::DecisionCase;
use sluice::policy::{Compat, Source, load};
use support::Section;

fn source(policy: &str) -> Source {
    Source {
        name: policy.to_string(),
        text: corpus::read_policy(policy),
    }
}

#[test]
fn openshell_conformance() {
    let validation = corpus::validation();
    let mut compat = Section::default();
    let mut strict = Section::default();
    for case in &validation {
        let src = [source(&case.policy)];
        let c = load(&src, Compat::OpenShell);
        compat.record(case.policy.clone(), classify::compat_load(case, &c));
        let s = load(&src, Compat::Strict);
        strict.record(case.policy.clone(), classify::strict_load(case, &s, &c));
    }

    let mut decisions = Section::default();
    let mut by_policy: BTreeMap<String, Vec<DecisionCase>> = BTreeMap::new();
    for case in corpus::decisions() {
        by_policy.entry(case.policy.clone()).or_default().push(case);
    }
    for (policy, cases) in &by_policy {
        let loaded = load(&[source(policy)], Compat::OpenShell);
        for (i, case) in cases.iter().enumerate() {
            let id = format!("{policy}#{i}");
            decisions.record(id, classify::decision(case, &loaded));
        }
    }

    let sections = [
        ("validation compat", &compat),
        ("validation strict", &strict),
        ("decisions", &decisions),
    ];
    let mut failures = Vec::new();
    for (name, section) in sections {
        println!("{}", section.summary(&format!("conformance {name}")));
        failures.extend(section.failures(name));
    }
    assert!(
        failures.is_empty(),
        "differences from the reference that no documented rule explains:\n{}",
        failures.join("\n")
    );
}
