//! Comparing one case with the reference's answer, and classifying a difference by the
//! documented rule that covers it (or as unexplained).

use sluice::policy::explain::{self, Question, QuestionRequest};
use sluice::policy::diag::Kind;
use sluice::policy::{Caller, Diagnostic, L4Decision, LoadError, Loaded, canon};

pub use crate::corpus::{DecisionCase, ValidationCase};

pub enum Outcome {
    Agree,
    /// A difference covered by the named rule.
    Explained(&'static str),
    /// A difference no rule covers.
    Unexplained(String),
}

pub fn compat_load(case: &ValidationCase, got: &Result<Loaded, LoadError>) -> Outcome {
    match (case.valid, got) {
        (true, Ok(_)) | (false, Err(_)) => Outcome::Agree,
        (false, Ok(_)) => Outcome::Unexplained(format!(
            "accepted, the reference refuses at {}",
            case.stage.as_deref().unwrap_or("?")
        )),
        (true, Err(e)) if e.errors().all(|d| d.kind == Kind::Unsupported) => {
            Outcome::Explained(NOT_SUPPORTED)
        }
        (true, Err(e)) => Outcome::Unexplained(format!("refused ({})", first_error(e))),
    }
}

/// README, "Where sluice differs": a feature sluice does not implement yet is refused, never
/// ignored.
const NOT_SUPPORTED: &str = "feature not supported yet: refused, never ignored";

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
                Outcome::Explained("strict refuses a construct the reference misreads, saying what it would do")
            } else if e.errors().all(|d| d.kind == Kind::Unsupported) {
                Outcome::Explained(NOT_SUPPORTED)
            } else {
                let other = extra
                    .iter()
                    .find(|d| d.kind != Kind::Lenient)
                    .map(|d| d.message.chars().take(60).collect::<String>())
                    .unwrap_or_default();
                Outcome::Unexplained(format!("strict refusal without the reference's reading ({other})"))
            }
        }
    }
}

fn first_error(e: &LoadError) -> String {
    e.errors()
        .next()
        .map(|d| d.message.chars().take(60).collect())
        .unwrap_or_default()
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

pub fn decision(case: &DecisionCase, loaded: &Result<Loaded, LoadError>) -> Outcome {
    let loaded = match loaded {
        Ok(l) => l,
        Err(e) if e.errors().all(|d| d.kind == Kind::Unsupported) => {
            return Outcome::Explained(NOT_SUPPORTED);
        }
        Err(e) => return Outcome::Unexplained(format!("policy refused ({})", first_error(e))),
    };
    let policy = &loaded.policy;
    let q = &case.query;
    let question = Question {
        binary: q.binary.clone(),
        ancestors: q.ancestors.clone(),
        host: q.host.clone(),
        port: q.port,
        request: q.method.as_ref().map(|m| QuestionRequest {
            method: m.clone(),
            target: q.path.clone().unwrap_or_default(),
            websocket_upgrade: false,
        }),
    };
    let answer = explain::explain(policy, &question);
    let want = expected_decision(case);
    // The matched entry is the L4 decision's (smallest admitting key).
    let entry = canon::normalize_host(&q.host).ok().and_then(|host| {
        let caller = Caller {
            exe: &q.binary,
            ancestors: &q.ancestors,
            cmdline: &q.cmdline_paths,
        };
        match policy.decide_l4(&caller, &host, q.port) {
            L4Decision::Allow(a) => Some(a.entry.to_string()),
            L4Decision::Deny(_) => None,
        }
    });
    let want_entry = if case.expect.l4 == "allow" && !case.expect.eval_error {
        case.expect.entry.clone()
    } else {
        None
    };
    if answer.decision == want && (entry == want_entry || answer.decision == "deny" && entry.is_none() == want_entry.is_none()) && entry == want_entry {
        return Outcome::Agree;
    }
    if answer.decision == want {
        return Outcome::Unexplained(format!("entry {entry:?}, the reference {want_entry:?}"));
    }
    Outcome::Unexplained(format!(
        "{} where the reference says {want} (mode {})",
        answer.decision,
        case.expect.mode.as_deref().unwrap_or("-")
    ))
}
