//! Property test of the policy engine against a from-scratch reference implementation of the
//! matching and decision semantics (spec `openshell-semantics.md` §1.8, §2.7, §2.10 and §13
//! rows 12, 13, 15, 18, 19).
//!
//! Random small policies are written as YAML text and loaded with the real loader (cases the
//! loader rejects, e.g. for an ambiguity conflict, are skipped and counted); random requests are
//! then decided by the compiled engine and by the reference (`reference.rs`; generators in
//! `generate.rs`), and the two must agree on:
//!
//! - L4: allow or deny; the deciding entry (smallest admitting key); the set of admitted
//!   endpoints (every endpoint of every admitting entry that matches host:port); the kind of
//!   denial (no endpoint, or binary mismatch with the list of refusing entries).
//! - L7 (on each admitted connection): the verdict (allow, deny, audit), its basis
//!   (uninspected, allow rule, deny rule, no allow rule, no endpoint path, malformed query) and
//!   the endpoints whose selectors decided.
//! - The ambiguity check (spec §1.10): a policy loads iff the reference finds no two endpoints
//!   that share a port and a host name and differ in `allowed_ips`, and no two that both carry
//!   request-level settings (REST, or `allowed_ips`), select a common canonical path with equal
//!   specificity and differ in protocol or enforcement. The reference searches bounded sets of
//!   witness hosts and paths rather than intersecting patterns.
//!
//! The reference's glob matcher is a naive recursive matcher written here, independent of the
//! engine's: `*` stays inside a segment; `**` follows globset with `literal_separator(true)`:
//! `**/` prefix, `/**` suffix, `/**/` middle, `**` alone matches everything, elsewhere `**` is
//! like `*`. Hosts: `*` within one label, `**` as the whole first label for one or more
//! labels; a hostless endpoint (`allowed_ips` only) matches every host. Request paths are
//! generated canonical (segments of letters, no dots, no percent), so the engine's
//! canonicalisation is the identity on them; queries carry `+` and `%XX` escapes, now and then
//! a malformed one.
//!
//! Further properties check the glob languages alone, on patterns that are not
//! segment-aligned: `Glob::is_match` and `new_covering_prefix` against the reference matcher,
//! `Glob::intersects` against a product-NFA search built from the reference tokens, and
//! `HostPattern::is_match`/`intersects` against the reference host matcher.
//!
//! Run with more cases to hunt: `PROPTEST_CASES=20000 cargo test -p sluice --test policy_props`.

use std::cell::RefCell;
use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sluice::policy::canon::CanonError;
use sluice::policy::decide::{L4DenyKind, RequestBasis};
use sluice::policy::glob::{Glob, HostPattern};
use sluice::policy::{Caller, Compat, L4Decision, Policy, Request, Source, Verdict, load};

// ---------------------------------------------------------------------------------------------

mod generate;
mod reference;

use generate::*;
use reference::*;

// ---------------------------------------------------------------------------------------------
// Engine side and comparison.
// ---------------------------------------------------------------------------------------------

fn ep_id(policy: &Policy, r: sluice::policy::EndpointRef) -> EpId {
    let ep = policy.endpoint(r);
    (ep.entry.as_str().to_string(), ep.index)
}

fn engine_basis(b: &RequestBasis<'_>) -> Basis {
    match b {
        RequestBasis::Uninspected => Basis::Uninspected,
        RequestBasis::Allowed(_) => Basis::Allowed,
        RequestBasis::DenyRule(_) => Basis::DenyRule,
        RequestBasis::NoAllowRule => Basis::NoAllowRule,
        RequestBasis::NoEndpointPath => Basis::NoEndpointPath,
        RequestBasis::Target(CanonError::InvalidQueryEncoding) => Basis::BadQuery,
        other => panic!("unexpected basis for a canonical REST request: {other:?}"),
    }
}

#[derive(Debug, Default)]
struct Stats {
    cases: usize,
    loaded: usize,
    rejected_ambiguity: usize,
    l4_allow: usize,
    l4_no_endpoint: usize,
    l4_binary: usize,
    l7: [usize; 6],
    audit: usize,
}

struct Witnesses {
    hosts: Vec<String>,
    paths: Vec<String>,
}

fn check(
    p: &GenPolicy,
    requests: &[GenRequest],
    witnesses: &Witnesses,
    stats: &RefCell<Stats>,
) -> Result<(), TestCaseError> {
    stats.borrow_mut().cases += 1;
    let yaml = to_yaml(p);
    let sources = [Source {
        name: "prop.yaml".to_string(),
        text: yaml.clone(),
    }];
    let conflict = reference_conflict(p, &witnesses.hosts, &witnesses.paths);
    let policy = match load(&sources, Compat::Strict) {
        Ok(l) => l.policy,
        Err(e) => {
            // The generator writes only valid constructs; the one legitimate refusal is an
            // ambiguity conflict (two overlapping REST endpoints disagreeing on enforcement).
            let errors: Vec<String> = e.errors().map(ToString::to_string).collect();
            let other: Vec<&String> = errors
                .iter()
                .filter(|d| !d.contains("conflicting metadata"))
                .collect();
            prop_assert!(
                other.is_empty(),
                "unexpected load errors {other:#?}\n--- policy ---\n{yaml}"
            );
            prop_assert!(
                conflict.is_some(),
                "the loader reports an ambiguity the reference finds no witness for: {errors:#?}\n--- policy ---\n{yaml}"
            );
            stats.borrow_mut().rejected_ambiguity += 1;
            return Ok(());
        }
    };
    prop_assert!(
        conflict.is_none(),
        "the loader accepted a policy with an ambiguity: {}\n--- policy ---\n{yaml}",
        conflict.unwrap_or_default()
    );
    stats.borrow_mut().loaded += 1;

    for req in requests {
        let host = request_host(p, &req.host);
        let ancestors: Vec<String> = req.ancestors.iter().map(|a| (*a).to_string()).collect();
        let caller = Caller {
            exe: req.exe,
            ancestors: &ancestors,
            cmdline: &[],
            tenant: None,
        };
        let context = || {
            format!(
                "\n--- request ---\nexe {} ancestors {:?} -> {host}:{}  {} {}{}\n--- policy ---\n{yaml}",
                req.exe,
                req.ancestors,
                req.port,
                req.method,
                req.path,
                req.query
                    .as_deref()
                    .map(|q| format!("?{q}"))
                    .unwrap_or_default(),
            )
        };
        let want = reference_l4(p, req.exe, &ancestors, &host, req.port);
        let got = policy.decide_l4(&caller, &sluice_addr::Authority::new(&host, req.port));
        let admission = match (&want, got) {
            (RefL4::Allow { entry, endpoints }, L4Decision::Allow(a)) => {
                let got_eps: BTreeSet<EpId> =
                    a.endpoints.iter().map(|&r| ep_id(&policy, r)).collect();
                prop_assert_eq!(
                    a.entry.as_str(),
                    entry.as_str(),
                    "L4 deciding entry{}",
                    context()
                );
                prop_assert_eq!(&got_eps, endpoints, "L4 admitted endpoints{}", context());
                stats.borrow_mut().l4_allow += 1;
                a
            }
            (RefL4::NoEndpoint, L4Decision::Deny(d)) => {
                prop_assert_eq!(
                    d.kind,
                    L4DenyKind::NoEndpoint,
                    "L4 denial kind{}",
                    context()
                );
                stats.borrow_mut().l4_no_endpoint += 1;
                continue;
            }
            (RefL4::Binary { entries }, L4Decision::Deny(d)) => {
                let got: Option<Vec<String>> = match &d.kind {
                    L4DenyKind::Binary { entries } => {
                        Some(entries.iter().map(|k| k.as_str().to_string()).collect())
                    }
                    _ => None,
                };
                prop_assert_eq!(got.as_ref(), Some(entries), "L4 denial kind{}", context());
                stats.borrow_mut().l4_binary += 1;
                continue;
            }
            (want, got) => {
                return Err(TestCaseError::fail(format!(
                    "L4 disagreement: reference {want:?}, engine {got:?}{}",
                    context()
                )));
            }
        };
        let RefL4::Allow { endpoints, .. } = &want else {
            continue;
        };

        let target = match &req.query {
            Some(q) => format!("{}?{q}", req.path),
            None => req.path.clone(),
        };
        let want = match reference_l7(p, endpoints, req.method, &req.path, req.query.as_deref()) {
            Ok(w) => w,
            Err(msg) => return Err(TestCaseError::fail(format!("{msg}{}", context()))),
        };
        let got = policy.decide_request(
            &admission,
            &Request {
                method: req.method,
                target: target.as_bytes(),
                websocket_upgrade: false,
            },
        );
        let got_basis = engine_basis(&got.basis);
        let got_decided: BTreeSet<EpId> = match got_basis {
            Basis::Uninspected | Basis::NoEndpointPath => BTreeSet::new(),
            _ => got.endpoints.iter().map(|&r| ep_id(&policy, r)).collect(),
        };
        let got = RefL7 {
            verdict: got.verdict,
            basis: got_basis,
            decided: got_decided,
        };
        prop_assert_eq!(
            &got,
            &want,
            "L7 (left: engine, right: reference){}",
            context()
        );
        let mut s = stats.borrow_mut();
        s.l7[want.basis as usize] += 1;
        if want.verdict == Verdict::Audit {
            s.audit += 1;
        }
    }
    Ok(())
}

#[test]
fn engine_agrees_with_reference() {
    // 256 cases by default; `PROPTEST_CASES` overrides (for longer hunts).
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let config = Config {
        failure_persistence: None,
        ..Config::with_cases(cases)
    };
    let cases = config.cases as usize;
    let mut runner = TestRunner::new(config);
    let stats = RefCell::new(Stats::default());
    let strategy = (policy(), prop::collection::vec(request(), 16));
    let witnesses = Witnesses {
        hosts: witness_hosts(),
        paths: witness_paths(),
    };
    let result = runner.run(&strategy, |(p, requests)| {
        check(&p, &requests, &witnesses, &stats)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let s = stats.into_inner();
    println!("{s:#?}");
    assert!(s.cases >= cases, "{s:?}");
    // The generator is tuned so that most policies load; a drop means it (or the loader) changed.
    assert!(
        s.loaded * 2 >= s.cases,
        "too few generated policies load: {s:?}"
    );
    assert!(
        s.l4_allow > 0 && s.l4_no_endpoint > 0 && s.l4_binary > 0,
        "{s:?}"
    );
    assert!(
        s.l7.iter().all(|&n| n > 0),
        "every L7 basis should occur: {s:?}"
    );
    assert!(s.audit > 0, "{s:?}");
}

/// The reference matcher itself, on the spec's examples.
#[test]
fn reference_matcher_examples() {
    let m = |p: &str, s: &str| glob_match(p, b'/', s);
    assert!(m("/v1/*", "/v1/a") && !m("/v1/*", "/v1/a/b") && m("/v1/*", "/v1/"));
    assert!(m("/x/**", "/x/a/b") && m("/x/**", "/x/") && !m("/x/**", "/x"));
    assert!(covering_match("/x/**", "/x") && !covering_match("/x/**", "/xy"));
    assert!(
        m("**/foo", "foo") && m("**/foo", "/foo") && m("**/foo", "a/b/foo") && !m("**/foo", "afoo")
    );
    assert!(m("/a/**/z", "/a/z") && m("/a/**/z", "/a/b/c/z") && !m("/a/**/z", "/az"));
    assert!(m("**", "") && m("**", "/a/b") && m("/**", "/a/b/c"));
    assert!(m("/a**", "/abc") && !m("/a**", "/ab/c"));
    assert!(m("/**/**", "/a/b") && m("/a/**/**", "/a/b") && !m("/a/**/**", "/a"));
    assert!(glob_match("v1.*", b'.', "v1.2") && !glob_match("v*", b'.', "v1.2"));
    assert!(
        host_match("*.example.com", "api.example.com")
            && !host_match("*.example.com", "example.com")
    );
    assert!(
        !host_match("*.example.com", "a.b.example.com")
            && host_match("**.example.com", "a.b.example.com")
    );
    assert!(!host_match("**.example.com", "example.com"));
    assert!(host_match("*-ai.g.com", "us-ai.g.com") && !host_match("*-ai.g.com", "us.ai.g.com"));
    assert!(host_match(
        "*.s3.*.amazonaws.com",
        "b.s3.us-east-1.amazonaws.com"
    ));
    assert!(!host_match(
        "*.s3.*.amazonaws.com",
        "s3.us-east-1.amazonaws.com"
    ));
    assert!(
        binary_match("/usr/bin/py*", "/usr/bin/python3")
            && !binary_match("/usr/bin/py*", "/usr/bin/py/x")
    );
    assert!(!binary_match("*", "/usr/bin/curl") && binary_match("/usr/**", "/usr/bin/curl"));
    assert_eq!(
        parse_query(Some("a=1&b&&c=%61+b")),
        Some(vec![
            ("a".into(), "1".into()),
            ("b".into(), String::new()),
            ("c".into(), "a b".into())
        ])
    );
    assert_eq!(parse_query(Some("a=%g1")), None);
    assert_eq!(parse_query(Some("a=%4")), None);
}

// ---------------------------------------------------------------------------------------------
// The glob languages on their own: the engine's `Glob` and `HostPattern` against the reference
// matcher, on patterns that are not segment-aligned (`a**`, `**b/`, `/**/**`, ...).
// ---------------------------------------------------------------------------------------------

fn raw_pattern() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(&["a", "b", "/", "*", "**"][..]), 1..=6)
        .prop_map(|t| t.concat())
}

/// Every string of up to 7 characters over the patterns' alphabet.
fn raw_witnesses() -> Vec<String> {
    all_strings(&["a", "b", "/"], 0, 7, "")
}

fn run(name: &str, test: impl Fn(&mut TestRunner) -> Result<(), String>) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let mut runner = TestRunner::new(Config {
        failure_persistence: None,
        ..Config::with_cases(cases)
    });
    if let Err(e) = test(&mut runner) {
        panic!("{name}: {e}");
    }
}

#[test]
fn glob_matching_agrees_with_reference() {
    let inputs = raw_witnesses();
    run("glob matching", |runner| {
        runner
            .run(&(raw_pattern(), any::<bool>()), |(pattern, dot)| {
                let (delim, d) = if dot { ('.', b'.') } else { ('/', b'/') };
                // The same patterns with `.` as the delimiter, for query values.
                let pattern = if dot {
                    pattern.replace('/', ".")
                } else {
                    pattern
                };
                let glob =
                    Glob::new(&pattern, delim).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let covering = Glob::new_covering_prefix(&pattern, delim)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                for input in &inputs {
                    let input = if dot {
                        input.replace('/', ".")
                    } else {
                        input.clone()
                    };
                    let want = glob_match(&pattern, d, &input);
                    prop_assert_eq!(
                        glob.is_match(&input),
                        want,
                        "pattern {:?} input {:?}",
                        pattern,
                        input
                    );
                    if !dot {
                        let want = covering_match(&pattern, &input);
                        prop_assert_eq!(
                            covering.is_match(&input),
                            want,
                            "covering pattern {:?} input {:?}",
                            pattern,
                            input
                        );
                    }
                }
                Ok(())
            })
            .map_err(|e| e.to_string())
    });
}

#[test]
fn glob_intersection_agrees_with_reference() {
    let inputs = raw_witnesses();
    run("glob intersection", |runner| {
        runner
            .run(&(raw_pattern(), raw_pattern()), |(a, b)| {
                let ga = Glob::new(&a, '/').map_err(|e| TestCaseError::fail(e.to_string()))?;
                let gb = Glob::new(&b, '/').map_err(|e| TestCaseError::fail(e.to_string()))?;
                let want = reference_intersects(&a, &b, b'/');
                // The two references agree with each other: a short witness means an intersection.
                let witness = inputs
                    .iter()
                    .find(|s| glob_match(&a, b'/', s) && glob_match(&b, b'/', s));
                prop_assert!(
                    want || witness.is_none(),
                    "reference NFA misses witness {:?} of {:?} and {:?}",
                    witness,
                    a,
                    b
                );
                prop_assert_eq!(
                    ga.intersects(&gb),
                    want,
                    "{:?} and {:?}: witness {:?}",
                    a,
                    b,
                    witness
                );
                prop_assert_eq!(gb.intersects(&ga), want, "{:?} and {:?} (swapped)", b, a);
                Ok(())
            })
            .map_err(|e| e.to_string())
    });
}

fn raw_host_pattern() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&["a", "b", "*", "**", "a*", "*b", "A"][..]),
        prop::collection::vec(prop::sample::select(&["a", "b", "*"][..]), 1..=3),
    )
        .prop_map(|(first, rest)| format!("{first}.{}", rest.join(".")))
}

#[test]
fn host_patterns_agree_with_reference() {
    let hosts = all_strings(&["a", "b", "ab", "c"], 1, 5, ".");
    run("host patterns", |runner| {
        runner
            .run(&(raw_host_pattern(), raw_host_pattern()), |(a, b)| {
                // Patterns the loader refuses (`*.a`: too broad) are out of scope here.
                let (Ok(ha), Ok(hb)) = (HostPattern::new(&a), HostPattern::new(&b)) else {
                    return Ok(());
                };
                for h in &hosts {
                    prop_assert_eq!(
                        ha.is_match(h),
                        host_match(&a, h),
                        "pattern {:?} host {:?}",
                        a,
                        h
                    );
                }
                let witness = hosts
                    .iter()
                    .find(|h| host_match(&a, h) && host_match(&b, h));
                prop_assert_eq!(
                    ha.intersects(&hb),
                    witness.is_some(),
                    "{:?} and {:?}: witness {:?}",
                    a,
                    b,
                    witness
                );
                prop_assert_eq!(
                    hb.intersects(&ha),
                    witness.is_some(),
                    "{:?} and {:?} (swapped)",
                    b,
                    a
                );
                Ok(())
            })
            .map_err(|e| e.to_string())
    });
}
