//! One request's judgement on an admitted connection, shared by every transport (HTTP/1
//! forward and tunnel, HTTP/2 tunnel): the L7 rules of inspected endpoints, canonicalisation
//! of the target (what policy judged is what goes upstream), and the refusal to send when
//! the answer is no.

use super::caller::Known;
use crate::audit::{Engine, Outcome};
use crate::http::respond::Refusal;
use crate::policy::Policy;
use crate::policy::Request as PolicyRequest;
use crate::policy::canon;
use crate::policy::decide::{Admission, RequestBasis, Verdict};

/// What the judgement found; filled in even for a refusal, for the audit record.
#[derive(Clone, Debug)]
pub struct Judged {
    /// The target to send upstream (canonical path, original query).
    pub origin_form: String,
    /// The canonical path, without the query (for audit).
    pub path: Option<String>,
    pub outcome: Outcome,
    pub engine: Engine,
    pub reason: Option<String>,
    /// `METHOD path` of the deciding rule.
    pub rule: Option<String>,
    /// The policy key that decided (the rule's entry, else the admission's).
    pub policy: String,
}

/// Judges `method path_and_query` on the admitted connection. `Err` carries the refusal and
/// what was found so far (its `engine` is the one that refused).
pub fn judge(
    policy: &Policy,
    admission: &Admission,
    known: &Known,
    method: &str,
    path_and_query: &str,
    hp: &str,
    websocket_upgrade: bool,
) -> Result<Judged, Box<(Refusal, Judged)>> {
    let mut judged = Judged {
        origin_form: path_and_query.to_string(),
        path: None,
        outcome: Outcome::Allowed,
        engine: Engine::L4,
        reason: None,
        rule: None,
        policy: admission.entry.to_string(),
    };
    let method_up = method.to_ascii_uppercase();
    if !admission.inspects(policy) {
        // An L4 endpoint: requests are not judged one by one, but the target still goes
        // upstream in canonical form.
        return match canon::canonicalize(path_and_query.as_bytes(), true) {
            Ok(t) => {
                judged.path = Some(t.path.clone());
                judged.origin_form = t.to_origin_form();
                Ok(judged)
            }
            Err(e) => {
                judged.engine = Engine::HttpParser;
                let refusal = Refusal::new(
                    400,
                    "invalid_request_target",
                    format!("request-target refused: {e}"),
                );
                Err(Box::new((refusal, judged)))
            }
        };
    }
    judged.engine = Engine::L7;
    let decision = policy.decide_request(
        admission,
        &PolicyRequest {
            method,
            target: path_and_query.as_bytes(),
            websocket_upgrade,
        },
    );
    judged.path = decision.target.as_ref().map(|t| t.path.clone());
    judged.rule = decision.rule().map(|r| r.summary());
    if let Some(r) = decision.rule() {
        judged.policy = r.origin.entry.to_string();
    }
    let shown_path = judged
        .path
        .clone()
        .unwrap_or_else(|| path_and_query.split('?').next().unwrap_or("/").to_string());
    match (decision.verdict, &decision.basis) {
        (Verdict::Deny, RequestBasis::Target(e)) => {
            judged.engine = Engine::HttpParser;
            let refusal = Refusal::new(
                400,
                "invalid_request_target",
                format!("request-target refused: {e}"),
            );
            return Err(Box::new((refusal, judged)));
        }
        (Verdict::Deny, _) => {
            let refusal = Refusal::new(
                403,
                "policy_denied",
                format!(
                    "{method_up} {hp}{shown_path} denied by L7 policy: {}",
                    decision.reason
                ),
            )
            .with_reason(decision.reason.clone())
            .with("policy", judged.policy.clone())
            .with(
                "rule",
                judged
                    .rule
                    .clone()
                    .map_or(serde_json::Value::Null, serde_json::Value::from),
            )
            .with("method", method_up.clone())
            .with("path", shown_path)
            .with("binary", known.exe.clone())
            .with("stage", "l7");
            judged.reason = Some(decision.reason);
            return Err(Box::new((refusal, judged)));
        }
        (Verdict::Audit, _) => {
            judged.outcome = Outcome::Audited;
            judged.reason = Some(decision.reason.clone());
        }
        (Verdict::Allow, _) => {}
    }
    if let Some(t) = decision.target {
        judged.origin_form = t.to_origin_form();
    }
    Ok(judged)
}
