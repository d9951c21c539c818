//! Comparing one case with the reference's answer, and classifying a difference by the
//! documented rule that covers it (or as unexplained).

use sluice::policy::diag::Kind;
use sluice::policy::explain::{self, Question, QuestionRequest};
use sluice::policy::model::PathSelector;
use sluice::policy::{Caller, Diagnostic, L4Decision, LoadError, Loaded, canon};

pub use crate::corpus::{DecisionCase, ValidationCase};
pub use crate::support::Outcome;
use crate::support::{NOT_SUPPORTED, first_error, unsupported};

pub fn compat_load(case: &ValidationCase, got: &Result<Loaded, LoadError>) -> Outcome {
    match (case.valid, got) {
        (true, Ok(_)) | (false, Err(_)) => Outcome::Agree,
        (false, Ok(_)) => Outcome::Unexplained(format!(
            "accepted, the reference refuses at {}: {}",
            case.stage.as_deref().unwrap_or("?"),
            case.error.lines().next().unwrap_or_default()
        )),
        (true, Err(e)) if unsupported(e) => Outcome::Explained(NOT_SUPPORTED),
        (true, Err(e)) => Outcome::Unexplained(format!("refused ({})", first_error(e, 60))),
    }
}

/// The strict loader may refuse more than the reference, but each error it adds to what
/// `--compat openshell` reports must be one that says what the reference would do (a
/// `Lenient` diagnostic), or a feature not supported yet.
pub fn strict_load(
    case: &ValidationCase,
    got: &Result<Loaded, LoadError>,
    compat: &Result<Loaded, LoadError>,
) -> Outcome {
    match (case.valid, got) {
        (true, Ok(_)) | (false, Err(_)) => Outcome::Agree,
        (false, Ok(_)) => Outcome::Unexplained(format!(
            "LOOSER: accepted, the reference refuses at {} ({})",
            case.stage.as_deref().unwrap_or("?"),
            case.label
        )),
        (true, Err(e)) => {
            let in_compat = |d: &Diagnostic| {
                compat.as_ref().err().is_some_and(|c| {
                    c.errors()
                        .any(|x| x.location == d.location && x.field == d.field)
                })
            };
            let extra: Vec<&Diagnostic> = e.errors().filter(|d| !in_compat(d)).collect();
            if extra.iter().all(|d| d.kind == Kind::Lenient) {
                Outcome::Explained(
                    "strict refuses a construct the reference misreads, saying what it would do",
                )
            } else if unsupported(e) {
                Outcome::Explained(NOT_SUPPORTED)
            } else {
                let other = extra
                    .iter()
                    .find(|d| d.kind != Kind::Lenient)
                    .map(|d| d.message.chars().take(60).collect::<String>())
                    .unwrap_or_default();
                Outcome::Unexplained(format!(
                    "strict refusal without the reference's reading ({other})"
                ))
            }
        }
    }
}

/// The reference's answer as one word: `deny` for an L4 denial, else the L7 decision
/// (`reject` counts as `deny`), else `allow`.
fn expected_decision(case: &DecisionCase) -> &str {
    let e = &case.expect;
    if e.l4 != "allow" || e.eval_error {
        return "deny";
    }
    match e.l7.as_deref() {
        None => "allow",
        Some("reject") => "deny",
        Some(other) => other,
    }
}

/// allow < audit (forwarded, logged) < deny.
fn rank(decision: &str) -> u8 {
    match decision {
        "allow" => 0,
        "audit" => 1,
        _ => 2,
    }
}

/// Whether a target host is a DNS name (letters, digits, `-`, `_`; no empty label, after one
/// trailing dot) or an IP literal: written here from the definition, independently of sluice.
fn valid_target_host(host: &str) -> bool {
    let h = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if h.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let h = h.strip_suffix('.').unwrap_or(h);
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The rows of docs/policy.md, as they apply to one case whose decision differs.
const ROW3: &str = "row 3 (Fix): target host not a DNS name or IP literal, refused before policy";
const ROW12: &str = "row 12 (Fix): endpoint `path` selection, one meaning";
const ROW17: &str = "row 17 (Fix): request target byte outside visible ASCII refused";
const ROW18: &str = "row 18 (Fix): deny rule `/x/**` also covers `/x`";
const HOST_SPELLING: &str =
    "row 5: target host spelling (one trailing dot, IPv6 brackets) names the same host";
const L4_RAW: &str = "row 22: an L4 endpoint's tunnel is relayed, not parsed";

pub fn decision(case: &DecisionCase, loaded: &Result<Loaded, LoadError>) -> Outcome {
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) if unsupported(e) => {
            return Outcome::Explained(NOT_SUPPORTED);
        }
        Err(e) => return Outcome::Unexplained(format!("policy refused ({})", first_error(e, 60))),
    };
    let policy = &loaded.policy;
    let q = &case.query;
    let question = Question {
        binary: q.binary.clone(),
        ancestors: q.ancestors.clone(),
        cmdline_paths: q.cmdline_paths.clone(),
        tenant: None,
        host: q.host.clone(),
        port: q.port,
        request: q.method.as_ref().map(|m| QuestionRequest {
            method: m.clone(),
            target: q.path.clone().unwrap_or_default(),
            websocket_upgrade: false,
            ..Default::default()
        }),
    };
    let answer = explain::explain(policy, &question);
    let want = expected_decision(case);
    // The matched entry is the L4 decision's (smallest admitting key).
    let admission = canon::normalize_host(&q.host).ok().and_then(|host| {
        let caller = Caller {
            exe: &q.binary,
            ancestors: &q.ancestors,
            cmdline: &q.cmdline_paths,
            tenant: None,
        };
        match policy.decide_l4(&caller, &sluice_addr::Authority::new(&host, q.port)) {
            L4Decision::Allow(a) => Some(a),
            L4Decision::Deny(_) => None,
        }
    });
    let entry = admission.as_ref().map(|a| a.entry.to_string());
    let want_entry = if case.expect.l4 == "allow" && !case.expect.eval_error {
        case.expect.entry.clone()
    } else {
        None
    };
    if answer.decision == want && entry == want_entry {
        return Outcome::Agree;
    }
    let got = answer.decision;
    // Stricter: a decision at least as restrictive, or the same decision taken earlier (at
    // L4 or before policy) where the reference admitted the connection.
    let stricter = rank(got) > rank(want) || (rank(got) == rank(want) && entry.is_none());
    let path = q.path.as_deref().unwrap_or("");

    let bracketed = q.host.starts_with('[') && q.host.ends_with(']');
    if (q.host.ends_with('.') && !q.host.ends_with("..") || bracketed) && valid_target_host(&q.host)
    {
        return Outcome::Explained(HOST_SPELLING);
    }
    if stricter && !valid_target_host(&q.host) && answer.stage == Some("target") {
        return Outcome::Explained(ROW3);
    }
    if stricter
        && q.method.is_some()
        && path.bytes().any(|b| !(0x21..=0x7e).contains(&b))
        && answer.stage == Some("target")
    {
        return Outcome::Explained(ROW17);
    }
    let inspected = admission.as_ref().is_some_and(|a| a.inspects(policy));
    if !inspected
        && admission.is_some()
        && case.expect.mode.as_deref() == Some("passthrough")
        && got == "allow"
        && entry == want_entry
    {
        return Outcome::Explained(L4_RAW);
    }
    if stricter
        && got == "deny"
        && let (Some(rule), Some(canonical)) = (&answer.rule, &answer.canonical)
        && rule
            .split_once(' ')
            .and_then(|(_, p)| p.strip_suffix("/**"))
            .is_some_and(|prefix| prefix == canonical)
    {
        return Outcome::Explained(ROW18);
    }
    if stricter
        && let Some(a) = &admission
        && a.l7_endpoints(policy)
            .iter()
            .any(|(_, e)| !matches!(e.selector, PathSelector::All))
    {
        return Outcome::Explained(ROW12);
    }
    if std::env::var_os("CONFORMANCE_DUMP").is_some() {
        eprintln!(
            "DUMP {} q={:?} expect={:?} got={} {:?} reason={:?} rule={:?} entry={entry:?}",
            case.policy, q, case.expect, answer.decision, answer.stage, answer.reason, answer.rule
        );
    }
    if answer.decision == want {
        return Outcome::Unexplained(format!(
            "same decision, entry {entry:?} where the reference has {want_entry:?}"
        ));
    }
    Outcome::Unexplained(format!(
        "{got} where the reference says {want} (mode {}; the reference's reason: {:?})",
        case.expect.mode.as_deref().unwrap_or("-"),
        case.expect.reason
    ))
}
