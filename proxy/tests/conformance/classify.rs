//! Comparing one case with the reference's answer, and classifying a difference by the
//! documented rule that covers it (or as unexplained).

use sluice::policy::explain::{self, Question, QuestionRequest};
use sluice::policy::{Caller, L4Decision, LoadError, Loaded, canon};

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
        (true, Err(e)) => Outcome::Unexplained(format!("refused ({})", first_error(e))),
    }
}

pub fn strict_load(
    case: &ValidationCase,
    got: &Result<Loaded, LoadError>,
    _compat: &Result<Loaded, LoadError>,
) -> Outcome {
    match (case.valid, got) {
        (true, Ok(_)) | (false, Err(_)) => Outcome::Agree,
        (false, Ok(_)) => Outcome::Unexplained(format!(
            "LOOSER: accepted, the reference refuses at {} ({})",
            case.stage.as_deref().unwrap_or("?"),
            case.label
        )),
        (true, Err(_)) => Outcome::Explained("stricter"),
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
