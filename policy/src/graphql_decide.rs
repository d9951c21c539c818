//! The decision on a GraphQL request (spec §1.8, §5.5; the reference's Rego): what does not
//! parse is refused even under audit; otherwise every operation must be allowed. A request
//! is denied by a deny rule of any endpoint whose path selects it (a REST deny rule by
//! method and path, a GraphQL deny rule by one matching operation), and by any such
//! GraphQL endpoint (or WebSocket endpoint with GraphQL policy) that does not allow every
//! operation itself: a broader REST rule cannot let through what the GraphQL endpoint
//! refuses. An operation is allowed by an allow rule matching its type (`*` any), its name
//! (a glob) and every root field (when the rule lists fields); a hash-only persisted query
//! is judged as its registry entry, and is refused unless `persisted_queries:
//! allow_registered` and the registry has it.

use super::graphql_body::{GraphqlRequest, Operation};
use super::model::{Endpoint, GraphqlMatcher, Protocol, RegisteredOperation, Rule};
use super::rpc_decide::{Case, Found};

/// The reason of a request refused for a persisted query the registry lacks.
pub const UNREGISTERED: &str = "GraphQL persisted query is not registered";
/// The reason of a request some operation of which is not allowed.
pub const BLOCKED: &str = "GraphQL operation blocked by endpoint policy";

/// An operation as rules see it: itself, or (hash-only) its registry entry.
struct Effective<'a> {
    operation_type: &'a str,
    operation_name: &'a str,
    fields: &'a [String],
}

fn effective<'a>(op: &'a Operation, e: &'a Endpoint) -> Option<Effective<'a>> {
    if !op.needs_registry() {
        return Some(Effective {
            operation_type: &op.operation_type,
            operation_name: op.operation_name.as_deref().unwrap_or(""),
            fields: &op.fields,
        });
    }
    let r: &RegisteredOperation = e.graphql.registry.get(op.registry_key()?)?;
    Some(Effective {
        operation_type: &r.operation_type,
        operation_name: r.operation_name.as_deref().unwrap_or(""),
        fields: &r.fields,
    })
}

fn type_and_name(m: &GraphqlMatcher, op: &Effective<'_>) -> bool {
    let kind = m.operation_type == "*" || m.operation_type.eq_ignore_ascii_case(op.operation_type);
    kind && m
        .operation_name
        .as_ref()
        .is_none_or(|g| g.is_match(op.operation_name))
}

fn field_matches(m: &GraphqlMatcher, field: &str) -> bool {
    m.fields.iter().any(|g| g.is_match(field))
}

/// An allow rule: type, name, and every root field (at least one) when it lists fields.
fn allows(m: &GraphqlMatcher, op: &Effective<'_>) -> bool {
    type_and_name(m, op)
        && (m.fields.is_empty()
            || (!op.fields.is_empty() && op.fields.iter().all(|f| field_matches(m, f))))
}

/// A deny rule: type, name, and one root field when it lists fields.
fn denies(m: &GraphqlMatcher, op: &Effective<'_>) -> bool {
    type_and_name(m, op) && (m.fields.is_empty() || op.fields.iter().any(|f| field_matches(m, f)))
}

/// A hash-only persisted query the endpoint does not trust.
fn unregistered(op: &Operation, e: &Endpoint) -> bool {
    op.needs_registry()
        && !(e.graphql.allow_registered
            && op
                .registry_key()
                .is_some_and(|k| e.graphql.registry.contains_key(k)))
}

/// The allow rule of `e` that allows `op`, if one does.
fn allowed_by<'p>(op: &Operation, e: &'p Endpoint) -> Option<&'p Rule> {
    if unregistered(op, e) {
        return None;
    }
    let eff = effective(op, e)?;
    e.rules
        .iter()
        .find(|r| r.graphql.as_ref().is_some_and(|m| allows(m, &eff)))
}

/// The request's decision, with the index of the operation refused (if one was).
pub(super) fn decide<'p>(case: &Case<'_, 'p>, req: &GraphqlRequest) -> (Found<'p>, Option<usize>) {
    if let Some(e) = &req.error {
        return (Found::Hard(format!("GraphQL request rejected: {e}")), None);
    }
    for e in case.matching {
        let rest_deny = e.deny_rules.iter().find(|r| {
            !e.protocol.is_rpc()
                && r.rpc.is_none()
                && r.graphql.is_none()
                && r.method.matches(case.method)
                && r.path.is_match(case.path)
                && super::model::deny_query_matches(&r.query, case.query)
        });
        if let Some(rule) = rest_deny {
            return (Found::Denied(rule), None);
        }
        for (i, op) in req.operations.iter().enumerate() {
            let Some(eff) = effective(op, e) else {
                continue;
            };
            let hit = e
                .deny_rules
                .iter()
                .find(|r| r.graphql.as_ref().is_some_and(|m| denies(m, &eff)));
            if let Some(rule) = hit {
                return (Found::Denied(rule), Some(i));
            }
        }
    }
    for e in case.matching {
        if !matches!(e.protocol, Protocol::Graphql | Protocol::WebSocket) {
            continue;
        }
        if let Some(i) = req
            .operations
            .iter()
            .position(|op| allowed_by(op, e).is_none())
        {
            return (Found::NotAllowed, Some(i));
        }
    }
    let first = case
        .selected
        .iter()
        .find(|e| e.protocol == Protocol::Graphql)
        .and_then(|e| req.operations.first().and_then(|op| allowed_by(op, e)));
    (Found::Allowed(first), None)
}

/// The reason the reference gives a refused request: an unregistered persisted query
/// first, else the operation blocked.
pub(super) fn reason(req: &GraphqlRequest, selected: &Endpoint) -> &'static str {
    if req.operations.iter().any(|op| unregistered(op, selected)) {
        UNREGISTERED
    } else {
        BLOCKED
    }
}
