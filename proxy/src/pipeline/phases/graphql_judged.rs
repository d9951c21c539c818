//! The record and refusal of a GraphQL request judged by its operations (`protocol_body`
//! calls this once the policy has decided): the record names each operation judged by type
//! and name (never its variables or arguments); a request that does not parse, or comes
//! compressed or multipart, is `400 invalid_graphql_request`; a refused operation is a
//! `403 policy_denied` naming the operation and the rule it would need.

use serde_json::json;

use super::record::Record;
use crate::audit::{Engine, Outcome};
use crate::http::respond::{Code, Refusal};
use crate::pipeline::authority::Authority;
use crate::pipeline::denial::Denial;
use crate::policy::decide::{RequestBasis, RequestDecision, Verdict};
use crate::policy::graphql_body::Operation;
use crate::policy::graphql_decide::UNREGISTERED;

/// The request as its refusal names it.
#[derive(Debug)]
pub(super) struct Asked<'a> {
    /// The request line's method.
    pub(super) method: &'a str,
    /// Path and query as the client sent them.
    pub(super) target: &'a str,
    /// The tunnel or forward target.
    pub(super) dst: &'a Authority,
    /// The caller's executable (for the operator's `policy explain` line).
    pub(super) binary: &'a str,
}

/// Judges into `rec` a request `d` decided: `Ok` lets it go upstream.
pub(super) fn judge(
    check: &Asked<'_>,
    d: &RequestDecision<'_>,
    rec: &mut Record,
) -> Result<(), Denial> {
    let parsed = d.graphql.clone().unwrap_or_default();
    let refused: Option<&Operation> = parsed.refused.and_then(|i| parsed.operations.get(i));
    let named: Vec<String> = match refused {
        Some(op) => vec![op.describe()],
        None => parsed.operations.iter().map(Operation::describe).collect(),
    };
    let named = if named.is_empty() {
        String::new()
    } else {
        format!(" (graphql: {})", named.join(", "))
    };
    rec.engine = Engine::L7;
    rec.rule = d.rule().map(|r| r.summary());
    if let Some(r) = d.rule() {
        rec.policy = Some(r.origin.entry.to_string());
    }
    rec.reason = Some(format!("{}{named}", d.reason));
    rec.outcome = match d.verdict {
        Verdict::Allow => Outcome::Allowed,
        Verdict::Audit => Outcome::Audited,
        Verdict::Deny => Outcome::Denied,
    };
    if d.verdict != Verdict::Deny {
        return Ok(());
    }
    let path = d.target.as_ref().map_or(check.target, |t| t.path.as_str());
    let line = format!("{} {}{path}", check.method, check.dst);
    if matches!(d.basis, RequestBasis::GraphqlRejected) {
        let refusal = Refusal::new(Code::InvalidGraphqlRequest, format!("{line}: {}", d.reason))
            .with_reason(rec.reason.clone().unwrap_or_default())
            .with("protocol", "graphql")
            .with("layer", "l7");
        return Err(Denial::new(Engine::L7, refusal));
    }
    let policy = rec.policy.clone().unwrap_or_default();
    let rule_needed = refused.filter(|op| !op.needs_registry()).map(|op| {
        let mut rule = json!({"operation_type": op.operation_type});
        if let Some(n) = &op.operation_name {
            rule["operation_name"] = json!(n);
        }
        if !op.fields.is_empty() {
            rule["fields"] = json!(op.fields);
        }
        rule
    });
    let step = match (&d.basis, &rule_needed) {
        (RequestBasis::DenyRule(r), _) => format!(
            "a deny rule (`{}`) of policy entry `{}` blocks it; deny rules win over allow rules",
            r.summary(),
            r.origin.entry
        ),
        _ if d.reason == UNREGISTERED => format!(
            "a hash-only persisted query is allowed only when the graphql endpoint of policy entry `{policy}` has `persisted_queries: allow_registered` and lists it in `graphql_persisted_queries`; or send the query document itself"
        ),
        (_, Some(rule)) => format!(
            "if the task needs it, ask the operator to add the allow rule {rule} to the graphql endpoint of policy entry `{policy}` for {}",
            check.dst
        ),
        _ => format!("the graphql endpoint of policy entry `{policy}` allows no such operation"),
    };
    let what = refused.map_or(String::new(), |op| {
        let fields = if op.fields.is_empty() {
            String::new()
        } else {
            format!(" (root fields: {})", op.fields.join(", "))
        };
        format!("; refused operation: {}{fields}", op.describe())
    });
    let refusal = Refusal::new(
        Code::PolicyDenied,
        format!("{line} denied by L7 policy: {}{what}", d.reason),
    )
    .with_reason(rec.reason.clone().unwrap_or_default())
    .with("policy", policy)
    .with("rule", rec.rule.clone().map_or(serde_json::Value::Null, Into::into))
    .with("layer", "l7")
    .with("protocol", "graphql")
    .with("operation_type", refused.map(|op| op.operation_type.clone()))
    .with("operation_name", refused.and_then(|op| op.operation_name.clone()))
    .with("missing", rule_needed.unwrap_or(serde_json::Value::Null))
    .with("next_steps", json!([
        "this request was refused by policy and retrying it unchanged will be refused again",
        step,
        format!("the operator can check a change with: sluice policy explain --policy FILE --binary {} --method {} https://{}{path} --body BODY", check.binary, check.method, check.dst),
    ]));
    Err(Denial::new(Engine::L7, refusal))
}
