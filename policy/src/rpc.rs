//! JSON-RPC and MCP rules of one endpoint (`protocol: json-rpc`, `mcp`; spec §1.6, §1.9):
//! the `json_rpc` and `mcp` stanzas, the rules' `method`, `tool` and `params.name`, and the
//! reference's validation of them (`validate_jsonrpc_rule_fields`, `l7/mod.rs`).
//!
//! What a rule matches: JSON-RPC, a method exactly or `*`; MCP, a method glob (globs only
//! in the `tools/` family) and, for `tools/call`, the tool name (`tool` or `params.name`,
//! globs with `.` as delimiter as in the reference's Rego). With
//! `mcp.allow_all_known_mcp_methods` a rule may leave out `method`, and an endpoint
//! without rules allows every method. Matching calls is `rpc_decide`'s.

use super::glob::Glob;
use super::model::{
    MethodMatcher, PathMatcher, PolicyKey, Protocol, QueryMatcher, RpcMatcher, RpcMethod,
    RpcOptions, Rule, RuleKind, RuleOrigin,
};
use super::raw::{RawEndpoint, RawMatcher, RawRule};
use super::report::{Idx, Sub, Validator};

/// What a JSON-RPC or MCP endpoint's rules compile to.
#[derive(Debug, Default)]
pub(super) struct RpcRules {
    pub ok: bool,
    pub rules: Vec<Rule>,
    pub deny_rules: Vec<Rule>,
    pub options: RpcOptions,
}

/// Glob characters (a method or tool pattern with one is a wildcard).
fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

/// The `json_rpc` and `mcp` stanzas: only on the protocols they configure. `Err` when one
/// is misplaced (reported).
pub(super) fn options(
    v: &mut Validator<'_>,
    raw: &RawEndpoint,
    protocol: Protocol,
    path: &str,
) -> Result<RpcOptions, ()> {
    let mut out = RpcOptions::default();
    let mut ok = true;
    if let Some(m) = &raw.mcp {
        if protocol == Protocol::Mcp {
            if let Some(n) = &m.max_body_bytes {
                out.max_body_bytes = body_limit(v, n.value, n.pos, Sub(&path, "mcp"))?;
            }
            if let Some(s) = &m.strict_tool_names {
                out.strict_tool_names = s.value;
            }
            if let Some(a) = &m.allow_all_known_mcp_methods {
                out.allow_all_known_methods = a.value;
            }
        } else {
            v.error(
                m.pos,
                Sub(&path, "mcp"),
                "mcp options are only valid for protocol mcp",
            );
            ok = false;
        }
    }
    if let Some(j) = &raw.json_rpc {
        if protocol.is_rpc() {
            if let Some(n) = &j.max_body_bytes {
                out.max_body_bytes = body_limit(v, n.value, n.pos, Sub(&path, "json_rpc"))?;
            }
        } else {
            v.error(
                j.pos,
                Sub(&path, "json_rpc"),
                "JSON-RPC options are only valid for protocol json-rpc or mcp",
            );
            ok = false;
        }
    }
    if ok { Ok(out) } else { Err(()) }
}

/// A `max_body_bytes`: 1 to 2^32-1 bytes (0 is the default, 64 KiB, as in the reference).
fn body_limit(
    v: &mut Validator<'_>,
    n: i128,
    pos: super::yaml::Pos,
    field: impl std::fmt::Display,
) -> Result<usize, ()> {
    match u32::try_from(n) {
        Ok(0) => Ok(RpcOptions::default().max_body_bytes),
        Ok(n) => Ok(n as usize),
        Err(_) => {
            v.error(
                pos,
                field,
                format!("max_body_bytes {n} is out of range (0 to 4294967295)"),
            );
            Err(())
        }
    }
}

/// The rules of a JSON-RPC or MCP endpoint.
pub(super) fn endpoint_rules(
    v: &mut Validator<'_>,
    entry: &PolicyKey,
    index: usize,
    raw: &RawEndpoint,
    protocol: Protocol,
    path: &str,
) -> RpcRules {
    let mut out = RpcRules {
        ok: true,
        ..RpcRules::default()
    };
    let field = |name: &'static str| Sub(&path, name);
    let Ok(opts) = options(v, raw, protocol, path) else {
        out.ok = false;
        return out;
    };
    if let Some(a) = &raw.access {
        let message = if protocol == Protocol::Mcp {
            "protocol mcp does not support access presets; use rules/deny_rules or set mcp.allow_all_known_mcp_methods: true for an allow-all MCP policy"
        } else {
            "protocol json-rpc does not support access presets; write rules with `method`"
        };
        v.error(a.pos, field("access"), message);
        out.ok = false;
    }
    let rules = raw
        .rules
        .as_ref()
        .map(|r| r.value.as_slice())
        .unwrap_or_default();
    if let Some(r) = raw.rules.as_ref().filter(|r| r.value.is_empty()) {
        v.error(
            r.pos,
            field("rules"),
            "`rules: []` is empty: it would deny every request",
        );
        out.ok = false;
    }
    let all_methods = protocol == Protocol::Mcp && opts.allow_all_known_methods;
    if raw.rules.is_none() && raw.access.is_none() {
        if all_methods {
            out.rules.push(any_method_rule(v, entry, index, raw));
        } else {
            let message = if protocol == Protocol::Mcp {
                "protocol mcp requires rules when mcp.allow_all_known_mcp_methods is false"
            } else {
                "protocol json-rpc requires rules with an explicit `method` (`*` allows every method)"
            };
            v.error(raw.pos, path, message);
            out.ok = false;
        }
    }
    let kinds = [(RuleKind::Allow, "rules"), (RuleKind::Deny, "deny_rules")];
    for (kind, name) in kinds {
        let list = match kind {
            RuleKind::Deny => raw.deny_rules.as_ref().map(|r| r.value.as_slice()),
            _ => Some(rules),
        };
        for (i, rule) in list.unwrap_or_default().iter().enumerate() {
            let list_field = field(name);
            let item = Idx(&list_field, i);
            let f = if kind == RuleKind::Allow {
                format!("{}", Sub(&item, "allow"))
            } else {
                item.to_string()
            };
            let at = Spot {
                entry,
                endpoint: index,
                kind,
                index: i,
            };
            match compile(v, rule, protocol, &opts, &at, &f) {
                Some(r) if kind == RuleKind::Deny => out.deny_rules.push(r),
                Some(r) => out.rules.push(r),
                None => out.ok = false,
            }
        }
    }
    if let Some(d) = raw.deny_rules.as_ref().filter(|d| d.value.is_empty()) {
        v.error(
            d.pos,
            field("deny_rules"),
            "`deny_rules: []` is empty (remove it)",
        );
        out.ok = false;
    }
    // A rule on every tool call contradicts allow rules naming tools.
    let tool_allows = out.rules.iter().any(has_tool);
    if protocol == Protocol::Mcp && tool_allows {
        for (i, raw_rule) in rules.iter().enumerate() {
            let narrows =
                raw_rule.tool.is_some() || raw_rule.params.iter().any(|p| p.key.value == "name");
            if !narrows
                && raw_rule
                    .method
                    .as_ref()
                    .is_some_and(|m| matches_tools_call(&m.value))
            {
                let rules_field = field("rules");
                v.error(
                    raw_rule.pos,
                    Idx(&rules_field, i),
                    "method matcher allows every tool call and conflicts with MCP tool allow rules; add tool or params.name to narrow tools/call, or remove the tool allow rules",
                );
                out.ok = false;
            }
        }
        for (i, (rule, raw_rule)) in out
            .deny_rules
            .iter()
            .zip(raw.deny_rules.iter().flat_map(|d| d.value.iter()))
            .enumerate()
        {
            let denies_tools_call = raw_rule
                .method
                .as_ref()
                .is_some_and(|m| matches_tools_call(&m.value));
            if denies_tools_call && !has_tool(rule) {
                let deny_field = field("deny_rules");
                v.error(
                    raw_rule.pos,
                    Idx(&deny_field, i),
                    "method matcher denies every tool call and conflicts with MCP tool allow rules; add tool or params.name to deny specific tools, or remove the tool allow rules",
                );
                out.ok = false;
            }
        }
    }
    out.options = opts;
    out
}

/// A written method that covers `tools/call` (the reference's
/// `method_matcher_matches_tools_call`).
fn matches_tools_call(method: &str) -> bool {
    method == "tools/call"
        || method == "*"
        || Glob::new(method, '/').is_ok_and(|g| g.is_match("tools/call"))
}

fn has_tool(rule: &Rule) -> bool {
    rule.rpc
        .as_ref()
        .is_some_and(|r| r.params.iter().any(|p| p.key == "name"))
}

/// Where a rule is.
struct Spot<'a> {
    entry: &'a PolicyKey,
    endpoint: usize,
    kind: RuleKind,
    index: usize,
}

/// The rule of an MCP endpoint that allows every method and has no rules.
fn any_method_rule(
    v: &Validator<'_>,
    entry: &PolicyKey,
    endpoint: usize,
    raw: &RawEndpoint,
) -> Rule {
    Rule {
        method: MethodMatcher::Post,
        path: PathMatcher::All,
        query: Vec::new(),
        rpc: Some(RpcMatcher {
            method: RpcMethod::Any,
            params: Vec::new(),
        }),
        graphql: None,
        origin: RuleOrigin {
            entry: entry.clone(),
            endpoint,
            kind: RuleKind::Allow,
            index: 0,
            location: super::diag::Location::new(v.file, raw.pos),
        },
    }
}

/// One rule, or `None` with its errors reported.
fn compile(
    v: &mut Validator<'_>,
    raw: &RawRule,
    protocol: Protocol,
    opts: &RpcOptions,
    at: &Spot<'_>,
    field: &str,
) -> Option<Rule> {
    let mut ok = true;
    let method = raw.method.as_ref().map_or("", |m| m.value.as_str());
    let mpos = raw.method.as_ref().map_or(raw.pos, |m| m.pos);
    let mfield = format!("{field}.method");
    let name_in_params = raw.params.iter().any(|p| p.key.value == "name");
    let has_selector = raw.tool.is_some() || name_in_params;
    if raw.path.as_ref().is_some_and(|p| !p.value.is_empty()) || !raw.query.is_empty() {
        let what = if protocol == Protocol::Mcp {
            "method/tool"
        } else {
            "method"
        };
        v.error(
            raw.pos,
            field,
            format!(
                "{} L7 rules must use {what}, not path/query",
                protocol.as_str()
            ),
        );
        ok = false;
    }
    let rpc_method = if protocol == Protocol::JsonRpc {
        if method.is_empty() {
            v.error(mpos, &mfield, "required for json-rpc L7 rules");
            ok = false;
        } else if method != "*" && has_wildcard(method) {
            v.error(mpos, &mfield, "generic JSON-RPC method rules do not support glob or wildcard matchers; use \"*\" to allow all methods or an exact method name");
            ok = false;
        }
        if raw.params_pos.is_some() {
            v.error(
                raw.pos,
                field,
                "JSON-RPC rules do not support params matchers yet",
            );
            ok = false;
        }
        if raw.tool.is_some() {
            v.error(
                raw.pos,
                format!("{field}.tool"),
                "MCP tool matching is only valid for protocol mcp",
            );
            ok = false;
        }
        if method == "*" {
            RpcMethod::Any
        } else {
            RpcMethod::Exact(method.to_string())
        }
    } else {
        if has_wildcard(method) && !method.starts_with("tools/") {
            v.error(mpos, &mfield, "MCP method globs are only valid for the tools/ method family; omit method to use the endpoint method profile");
            ok = false;
        }
        if method.is_empty() && !opts.allow_all_known_methods {
            v.error(
                mpos,
                &mfield,
                "required when mcp.allow_all_known_mcp_methods is false",
            );
            ok = false;
        } else if has_selector && !method.is_empty() && method != "tools/call" {
            v.error(
                mpos,
                &mfield,
                format!(
                    "must be tools/call when an MCP rule uses tool or params.name, got '{method}'"
                ),
            );
            ok = false;
        }
        if raw.tool.is_some() && name_in_params {
            v.error(
                raw.pos,
                field,
                "MCP rules must use either tool or params.name, not both",
            );
            ok = false;
        }
        for p in raw.params.iter().filter(|p| p.key.value != "name") {
            v.error(
                p.key.pos,
                format!("{field}.params.{}", p.key.value),
                "MCP tool argument matching is not supported yet",
            );
            ok = false;
        }
        let effective = match method {
            "" if has_selector => "tools/call",
            "" => "*",
            m => m,
        };
        match Glob::new(effective, '.') {
            Ok(g) => RpcMethod::Glob(g),
            Err(e) => {
                v.error(mpos, &mfield, e.to_string());
                ok = false;
                RpcMethod::Any
            }
        }
    };
    let mut params = Vec::new();
    let selector = raw
        .tool
        .as_ref()
        .map(|t| (t, format!("{field}.tool")))
        .or_else(|| {
            raw.params
                .iter()
                .find(|p| p.key.value == "name")
                .map(|p| (&p.matcher, format!("{field}.params.name")))
        });
    if let Some((matcher, f)) = selector {
        let (patterns, pos): (Vec<&str>, _) = match matcher {
            RawMatcher::Glob(g) => (vec![g.value.as_str()], g.pos),
            RawMatcher::Any(list) => (
                list.value.iter().map(|s| s.value.as_str()).collect(),
                list.pos,
            ),
        };
        if patterns.is_empty() || patterns.iter().any(|p| p.is_empty()) {
            v.error(pos, &f, "a tool matcher needs at least one non-empty glob");
            ok = false;
        }
        if !opts.strict_tool_names && patterns.iter().any(|p| has_wildcard(p)) {
            v.error(
                pos,
                &f,
                "wildcard tool-name matchers require mcp.strict_tool_names to remain enabled",
            );
            ok = false;
        }
        let mut globs = Vec::new();
        for p in patterns {
            match Glob::new(p, '.') {
                Ok(g) => globs.push(g),
                Err(e) => {
                    v.error(pos, &f, e.to_string());
                    ok = false;
                }
            }
        }
        params.push(QueryMatcher {
            key: "name".to_string(),
            globs,
        });
    }
    if !ok {
        return None;
    }
    Some(Rule {
        method: MethodMatcher::Post,
        path: PathMatcher::All,
        query: Vec::new(),
        rpc: Some(RpcMatcher {
            method: rpc_method,
            params,
        }),
        graphql: None,
        origin: RuleOrigin {
            entry: at.entry.clone(),
            endpoint: at.endpoint,
            kind: at.kind,
            index: at.index,
            location: super::diag::Location::new(v.file, raw.pos),
        },
    })
}
