//! GraphQL rules of one endpoint (`protocol: graphql`, and GraphQL message policy on a
//! `protocol: websocket` endpoint; spec §1.6, §1.7, §1.9): `operation_type`,
//! `operation_name`, `fields`, the `persisted_queries` mode, the registry
//! `graphql_persisted_queries` and `graphql_max_body_bytes`, validated as the reference
//! validates them (`validate_sandbox_policy`, `validate_l7_policies`). Matching operations
//! is `graphql_decide`'s.

use super::glob::Glob;
use super::model::{
    Access, GraphqlMatcher, GraphqlOptions, MethodMatcher, PathMatcher, PolicyKey, Protocol, Rule,
    RuleKind, RuleOrigin,
};
use super::raw::{RawEndpoint, RawRule};
use super::report::{Sub, Validator};
use super::yaml::Pos;

/// The three operation types a written rule may name on a `protocol: graphql` endpoint
/// (exactly: the reference refuses `Query` and `*` there).
const TYPES: [&str; 3] = ["query", "mutation", "subscription"];

/// The endpoint's GraphQL options: the body cap, the persisted-query mode and registry.
/// `Err` when one is invalid (reported).
pub(super) fn options(
    v: &mut Validator<'_>,
    raw: &RawEndpoint,
    protocol: Protocol,
    path: &str,
) -> Result<GraphqlOptions, ()> {
    let field = |name: &'static str| Sub(&path, name);
    let mut out = GraphqlOptions::default();
    let mut ok = true;
    let applies = matches!(protocol, Protocol::Graphql | Protocol::WebSocket);
    for (name, pos) in [
        (
            "persisted_queries",
            raw.persisted_queries.as_ref().map(|p| p.pos),
        ),
        (
            "graphql_persisted_queries",
            raw.graphql_persisted_queries.as_ref().map(|p| p.pos),
        ),
        (
            "graphql_max_body_bytes",
            raw.graphql_max_body_bytes.as_ref().map(|p| p.pos),
        ),
    ] {
        if let Some(pos) = pos
            && !applies
        {
            ok &= v.lenient(
                pos,
                field(name),
                &format!("`{name}` only applies with `protocol: graphql` or `websocket`"),
                "warns and ignores it",
            );
        }
    }
    if let Some(m) = &raw.persisted_queries {
        match m.value.as_str() {
            "" | "deny" => {}
            "allow_registered" => out.allow_registered = true,
            other => {
                v.error(
                    m.pos,
                    field("persisted_queries"),
                    format!(
                        "persisted_queries must be 'deny' or 'allow_registered', got '{other}'"
                    ),
                );
                ok = false;
            }
        }
    }
    if let Some(n) = &raw.graphql_max_body_bytes {
        match u32::try_from(n.value) {
            Ok(0) => {}
            Ok(n) => out.max_body_bytes = n as usize,
            Err(_) => {
                v.error(
                    n.pos,
                    field("graphql_max_body_bytes"),
                    "graphql_max_body_bytes must be a positive integer (at most 4294967295)",
                );
                ok = false;
            }
        }
    }
    if let Some(reg) = &raw.graphql_persisted_queries {
        let reg_field = field("graphql_persisted_queries");
        for (key, op) in &reg.value {
            let f = format!("{reg_field}[{}]", key.value);
            let Some(m) = matcher(v, op, protocol, &f) else {
                ok = false;
                continue;
            };
            let registered = super::model::RegisteredOperation {
                operation_type: m.operation_type,
                operation_name: op.operation_name.as_ref().map(|n| n.value.clone()),
                fields: op
                    .fields
                    .iter()
                    .flat_map(|f| f.value.iter().map(|s| s.value.clone()))
                    .collect(),
            };
            out.registry.insert(key.value.clone(), registered);
        }
    }
    out.websocket_policy = protocol == Protocol::WebSocket && websocket_policy(raw);
    if out.websocket_policy {
        v.warning(
            raw.pos,
            path,
            "this WebSocket endpoint has GraphQL policy, so its client messages are read as GraphQL over WebSocket: lifecycle messages pass, and every `subscribe`/`start` operation is refused (as in the reference, no allow rule naming operations can be written for a WebSocket endpoint; its deny rules and registry only narrow the refusal)",
        );
    }
    if ok { Ok(out) } else { Err(()) }
}

/// A WebSocket endpoint with GraphQL message policy (the reference's
/// `json_endpoint_has_graphql_policy`): a registry, `allow_registered`, or a rule naming
/// GraphQL fields.
fn websocket_policy(raw: &RawEndpoint) -> bool {
    let registry = raw
        .graphql_persisted_queries
        .as_ref()
        .is_some_and(|r| !r.value.is_empty());
    let mode = raw
        .persisted_queries
        .as_ref()
        .is_some_and(|m| !m.value.is_empty() && m.value != "deny");
    let rules = [&raw.rules, &raw.deny_rules]
        .into_iter()
        .flatten()
        .flat_map(|l| l.value.iter())
        .any(RawRule::has_graphql_fields);
    registry || mode || rules
}

/// The matcher of one GraphQL rule (or registry entry), or `None` with its errors reported.
fn matcher(
    v: &mut Validator<'_>,
    raw: &RawRule,
    protocol: Protocol,
    field: &str,
) -> Option<GraphqlMatcher> {
    let mut ok = true;
    let kind = raw.operation_type.as_ref().map_or("", |t| t.value.as_str());
    let pos = raw.operation_type.as_ref().map_or(raw.pos, |t| t.pos);
    let valid = if protocol == Protocol::Graphql {
        TYPES.contains(&kind)
    } else {
        TYPES.contains(&kind.to_ascii_lowercase().as_str()) || kind == "*"
    };
    if !valid {
        let message = if kind.is_empty() {
            "required for GraphQL rules: query, mutation or subscription".to_string()
        } else {
            format!("must be query, mutation, or subscription, got '{kind}'")
        };
        v.error(pos, format!("{field}.operation_type"), message);
        ok = false;
    }
    let name = match raw.operation_name.as_ref().filter(|n| !n.value.is_empty()) {
        None => None,
        Some(n) => match Glob::new(&n.value, '.') {
            Ok(g) => Some(g),
            Err(e) => {
                v.error(n.pos, format!("{field}.operation_name"), e.to_string());
                ok = false;
                None
            }
        },
    };
    let mut fields = Vec::new();
    if let Some(list) = &raw.fields {
        let f = format!("{field}.fields");
        if list.value.is_empty() {
            v.error(
                list.pos,
                &f,
                "list must not be empty; omit fields to match all root fields",
            );
            ok = false;
        }
        for item in &list.value {
            if item.value.is_empty() {
                v.error(item.pos, &f, "field glob must not be empty");
                ok = false;
                continue;
            }
            match Glob::new(&item.value, '.') {
                Ok(g) => fields.push(g),
                Err(e) => {
                    v.error(item.pos, &f, e.to_string());
                    ok = false;
                }
            }
        }
    }
    ok.then(|| GraphqlMatcher {
        operation_type: kind.to_string(),
        operation_name: name,
        fields,
    })
}

/// Where a rule is.
pub(super) struct Spot<'a> {
    pub entry: &'a PolicyKey,
    pub endpoint: usize,
    pub kind: RuleKind,
    pub index: usize,
    pub pos: Pos,
}

/// A rule that judges GraphQL operations (no method or path of its own).
fn rule(v: &Validator<'_>, m: GraphqlMatcher, at: &Spot<'_>) -> Rule {
    Rule {
        method: MethodMatcher::Any,
        path: PathMatcher::All,
        query: Vec::new(),
        rpc: None,
        graphql: Some(m),
        origin: RuleOrigin {
            entry: at.entry.clone(),
            endpoint: at.endpoint,
            kind: at.kind,
            index: at.index,
            location: super::diag::Location::new(v.file, at.pos),
        },
    }
}

/// A written rule of a `protocol: graphql` endpoint, or of a WebSocket endpoint that names
/// GraphQL fields; `Err` with its errors reported.
pub(super) fn compile(
    v: &mut Validator<'_>,
    raw: &RawRule,
    protocol: Protocol,
    at: &Spot<'_>,
    field: &str,
) -> Result<Rule, ()> {
    let transport = raw.method.is_some() || raw.path.is_some() || !raw.query.is_empty();
    if protocol == Protocol::WebSocket {
        // The reference writes an empty method and path into every allow rule, so a
        // WebSocket allow rule naming GraphQL fields never loads there; deny rules load
        // when they name no method, path or query.
        if at.kind == RuleKind::Allow || transport {
            let what = if at.kind == RuleKind::Allow {
                "allow"
            } else {
                "deny"
            };
            v.error(
                raw.pos,
                field,
                format!("WebSocket GraphQL {what} rules must not combine method/path/query with operation_type/operation_name/fields (the reference loads GraphQL policy on a WebSocket endpoint only as deny rules, `persisted_queries` and `graphql_persisted_queries`; the allowed operations then come from `access`)"),
            );
            return Err(());
        }
    } else if transport {
        v.error(
            raw.pos,
            field,
            "GraphQL rules judge operations: use operation_type, operation_name and fields, not method/path/query",
        );
        return Err(());
    }
    match matcher(v, raw, protocol, field) {
        Some(m) => Ok(rule(v, m, at)),
        None => Err(()),
    }
}

/// The rules an `access` preset gives a `protocol: graphql` endpoint (spec §1.7).
pub(super) fn preset_rules(
    v: &Validator<'_>,
    access: Access,
    entry: &PolicyKey,
    endpoint: usize,
    pos: Pos,
) -> Vec<Rule> {
    let kinds: &[&str] = match access {
        Access::ReadOnly => &["query"],
        Access::ReadWrite => &["query", "mutation"],
        Access::Full => &["*"],
    };
    kinds
        .iter()
        .enumerate()
        .map(|(index, kind)| {
            let m = GraphqlMatcher {
                operation_type: (*kind).to_string(),
                operation_name: None,
                fields: Vec::new(),
            };
            let at = Spot {
                entry,
                endpoint,
                kind: RuleKind::Preset(access),
                index,
                pos,
            };
            rule(v, m, &at)
        })
        .collect()
}
