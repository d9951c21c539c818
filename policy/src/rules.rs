//! L7 rules of one endpoint: `access` presets (spec §1.7), `rules` and `deny_rules`.
//!
//! Owns the validation and compilation of rule objects (method, path, query matchers) and the
//! combination rules between `protocol`, `access`, `rules` and `deny_rules` (spec §1.9, §13
//! rows 7-9, 18, 19). Matching a request against the compiled rules is `decide.rs`'s job.

use super::glob::Glob;
use super::model::{
    Access, GraphqlOptions, MethodMatcher, PathMatcher, PolicyKey, Protocol, QueryMatcher,
    RpcOptions, Rule, RuleKind, RuleOrigin,
};
use super::raw::{RawEndpoint, RawMatcher, RawRule};
use super::report::{Idx, Sub, Validator};

/// What an endpoint's L7 fields compile to.
#[derive(Debug, Default)]
pub struct L7Rules {
    pub ok: bool,
    pub access: Option<Access>,
    pub rules: Vec<Rule>,
    pub deny_rules: Vec<Rule>,
    /// JSON-RPC and MCP options (defaults for other protocols).
    pub rpc: RpcOptions,
    /// GraphQL options (defaults for other protocols).
    pub graphql: GraphqlOptions,
}

pub fn endpoint_rules(
    v: &mut Validator<'_>,
    entry: &PolicyKey,
    index: usize,
    raw: &RawEndpoint,
    protocol: Protocol,
    path: &str,
) -> L7Rules {
    let mut out = L7Rules {
        ok: true,
        ..L7Rules::default()
    };
    let field = |name: &'static str| Sub(&path, name);

    if protocol.is_rpc() {
        let r = super::rpc::endpoint_rules(v, entry, index, raw, protocol, path);
        return L7Rules {
            ok: r.ok,
            access: None,
            rules: r.rules,
            deny_rules: r.deny_rules,
            rpc: r.options,
            graphql: GraphqlOptions::default(),
        };
    }
    match super::graphql::options(v, raw, protocol, path) {
        Ok(g) => out.graphql = g,
        Err(()) => out.ok = false,
    }
    if out.graphql.websocket_policy {
        for (i, rule) in raw.rules.iter().flat_map(|l| l.value.iter()).enumerate() {
            if rule
                .method
                .as_ref()
                .is_some_and(|m| m.value.eq_ignore_ascii_case("WEBSOCKET_TEXT"))
            {
                let rules_field = field("rules");
                v.error(
                    rule.pos,
                    Idx(&rules_field, i),
                    "WebSocket endpoints with GraphQL operation policy must use operation_type/operation_name/fields rules for client messages instead of WEBSOCKET_TEXT",
                );
                out.ok = false;
            }
        }
    }
    // The `json_rpc` and `mcp` stanzas, and MCP's rule fields, are refused on any other
    // protocol.
    if super::rpc::options(v, raw, protocol, path).is_err() {
        out.ok = false;
    }
    let lists = [("rules", &raw.rules), ("deny_rules", &raw.deny_rules)];
    for (name, list) in lists {
        for (i, rule) in list.iter().flat_map(|l| l.value.iter()).enumerate() {
            if rule.tool.is_some() || rule.params_pos.is_some() {
                let list_field = field(name);
                v.error(
                    rule.pos,
                    Idx(&list_field, i),
                    "`tool` and `params` (MCP rules) are only valid with `protocol: mcp`",
                );
                out.ok = false;
            }
        }
    }

    if protocol == Protocol::Tcp {
        let l7_fields = [
            ("rules", raw.rules.as_ref().map(|r| r.pos)),
            ("deny_rules", raw.deny_rules.as_ref().map(|r| r.pos)),
            ("access", raw.access.as_ref().map(|a| a.pos)),
            ("enforcement", raw.enforcement.as_ref().map(|e| e.pos)),
            ("path", raw.path.as_ref().map(|p| p.pos)),
            (
                "allow_encoded_slash",
                raw.allow_encoded_slash.as_ref().map(|p| p.pos),
            ),
        ];
        for (name, pos) in l7_fields {
            if let Some(pos) = pos {
                v.error(
                    pos,
                    field(name),
                    format!("`{name}` is an L7 setting and a `protocol: tcp` endpoint has none"),
                );
                out.ok = false;
            }
        }
        return out;
    }

    if protocol == Protocol::L4 {
        if let Some(d) = &raw.deny_rules {
            v.error(d.pos, field("deny_rules"), "`deny_rules` need `protocol: rest` or `websocket` (and rules or access to deny from)");
            out.ok = false;
        }
        for (name, pos) in [
            ("rules", raw.rules.as_ref().map(|r| r.pos)),
            ("access", raw.access.as_ref().map(|a| a.pos)),
        ] {
            if let Some(pos) = pos {
                let accepted = v.lenient(
                    pos,
                    field(name),
                    &format!("`{name}` has no effect without `protocol: rest` or `websocket`: requests would not be inspected at all (add `protocol: rest`, or remove `{name}`)"),
                    "ignores it and treats the endpoint as plain L4 (every request allowed)",
                );
                out.ok &= accepted;
            }
        }
        if let Some(e) = &raw.enforcement {
            v.warning(
                e.pos,
                field("enforcement"),
                "`enforcement` has no effect without `protocol: rest` or `websocket`",
            );
        }
        return out;
    }

    if protocol == Protocol::Sql {
        // Relayed without a parser (audit only, as in the reference): its rules are
        // checked for presence and never judged.
        if raw.rules.is_none() && raw.access.is_none() {
            v.error(raw.pos, path, "`protocol: sql` needs `rules` or `access`");
            out.ok = false;
        }
        if let Some(r) = raw.rules.as_ref().filter(|r| r.value.is_empty()) {
            v.error(
                r.pos,
                field("rules"),
                "`rules: []` is empty: it would deny every request",
            );
            out.ok = false;
        }
        return out;
    }

    // An L7 endpoint.
    let unreadable = |name: &str| raw.unreadable.contains(&name);
    let mut rules_given = raw.rules.as_ref().filter(|r| !r.value.is_empty());
    if let Some(r) = raw
        .rules
        .as_ref()
        .filter(|r| r.value.is_empty() && !unreadable("rules"))
    {
        if raw.access.is_some() {
            let accepted = v.lenient(
                r.pos,
                field("rules"),
                "`rules: []` is empty (remove it)",
                "ignores it and applies `access`",
            );
            out.ok &= accepted;
        } else {
            // Both modes: the reference refuses it too (spec §1.9).
            v.error(
                r.pos,
                field("rules"),
                "`rules: []` is empty: it would deny every request",
            );
            out.ok = false;
        }
        rules_given = None;
    }
    if let (Some(r), Some(_)) = (rules_given, &raw.access) {
        v.error(
            r.pos,
            field("rules"),
            "`rules` and `access` are mutually exclusive: use one",
        );
        out.ok = false;
        return out;
    }
    if let Some(a) = &raw.access {
        let access = match a.value.as_str() {
            "read-only" => Some(Access::ReadOnly),
            "read-write" => Some(Access::ReadWrite),
            "full" => Some(Access::Full),
            other => {
                let accepted = v.lenient(
                    a.pos,
                    field("access"),
                    &format!(
                        "unknown `access` preset `{other}` (expected read-only, read-write or full)"
                    ),
                    "warns and then denies every request on this endpoint",
                );
                out.ok &= accepted;
                None
            }
        };
        if let Some(access) = access {
            out.access = Some(access);
            out.rules = preset_rules(access, protocol, entry, index, v, a.pos);
        }
    } else if let Some(r) = rules_given {
        if protocol != Protocol::Graphql
            && r.value.iter().all(|rule| {
                rule.method.is_none()
                    && rule.path.is_none()
                    && rule.query.is_empty()
                    && !rule.has_graphql_fields()
            })
        {
            // Both modes: the reference refuses it too.
            v.error(
                r.pos,
                field("rules"),
                "no rule has an allow clause (`method`, `path`): they would deny every request; use `access: full` or write allow rules",
            );
            out.ok = false;
        }
        for (i, rule) in r.value.iter().enumerate() {
            let rules_field = field("rules");
            let item = Idx(&rules_field, i);
            let f = Sub(&item, "allow");
            match compile_rule(v, rule, protocol, RuleKind::Allow, entry, index, i, f) {
                Ok(Some(rule)) => out.rules.push(rule),
                Ok(None) => {}
                Err(()) => out.ok = false,
            }
        }
    } else if raw.rules.is_none() && !unreadable("rules") && !unreadable("access") {
        v.error(
            raw.pos,
            path,
            format!(
                "`protocol: {}` needs `rules` or `access`",
                protocol.as_str()
            ),
        );
        out.ok = false;
    }

    if let Some(d) = &raw.deny_rules {
        if d.value.is_empty() {
            let accepted = v.lenient(
                d.pos,
                field("deny_rules"),
                "`deny_rules: []` is empty (remove it)",
                "ignores it",
            );
            out.ok &= accepted;
        }
        for (i, rule) in d.value.iter().enumerate() {
            let deny_field = field("deny_rules");
            let f = Idx(&deny_field, i);
            match compile_rule(v, rule, protocol, RuleKind::Deny, entry, index, i, f) {
                Ok(Some(rule)) => out.deny_rules.push(rule),
                Ok(None) => {}
                Err(()) => out.ok = false,
            }
        }
    }
    out
}

fn preset_rules(
    access: Access,
    protocol: Protocol,
    entry: &PolicyKey,
    endpoint: usize,
    v: &Validator<'_>,
    pos: super::yaml::Pos,
) -> Vec<Rule> {
    use MethodMatcher as M;
    if protocol == Protocol::Graphql {
        return super::graphql::preset_rules(v, access, entry, endpoint, pos);
    }
    let methods: &[MethodMatcher] = match (protocol, access) {
        (Protocol::WebSocket, Access::ReadOnly) => &[M::Get],
        (Protocol::WebSocket, Access::ReadWrite) => &[M::Get, M::WebsocketText],
        (_, Access::ReadOnly) => &[M::Get, M::Head, M::Options],
        (_, Access::ReadWrite) => &[M::Get, M::Head, M::Options, M::Post, M::Put, M::Patch],
        (_, Access::Full) => &[M::Any],
    };
    methods
        .iter()
        .enumerate()
        .map(|(i, method)| Rule {
            method: method.clone(),
            path: PathMatcher::All,
            query: Vec::new(),
            rpc: None,
            graphql: None,
            origin: RuleOrigin {
                entry: entry.clone(),
                endpoint,
                kind: RuleKind::Preset(access),
                index: i,
                location: super::diag::Location::new(v.file, pos),
            },
        })
        .collect()
}

/// `Ok(None)`: a rule the reference loads but never matches, accepted in compat mode.
#[allow(clippy::too_many_arguments)] // each argument is a distinct part of the rule's origin
fn compile_rule(
    v: &mut Validator<'_>,
    raw: &RawRule,
    protocol: Protocol,
    kind: RuleKind,
    entry: &PolicyKey,
    endpoint: usize,
    index: usize,
    field: impl std::fmt::Display + Copy,
) -> Result<Option<Rule>, ()> {
    let what = if kind == RuleKind::Deny {
        "a deny rule"
    } else {
        "an allow rule"
    };
    let effect = if kind == RuleKind::Deny {
        "blocks nothing"
    } else {
        "allows nothing"
    };
    let mut never = false;
    if protocol == Protocol::Graphql
        || (protocol == Protocol::WebSocket && raw.has_graphql_fields())
    {
        let at = super::graphql::Spot {
            entry,
            endpoint,
            kind,
            index,
            pos: raw.pos,
        };
        return super::graphql::compile(v, raw, protocol, &at, &field.to_string()).map(Some);
    }
    if raw.has_graphql_fields() {
        let accepted = v.lenient(
            raw.pos,
            field,
            "GraphQL rule fields (operation_type, operation_name, fields) only apply with `protocol: graphql` or `websocket`",
            "warns and ignores them",
        );
        if !accepted {
            return Err(());
        }
    }
    if let Some(c) = &raw.command {
        let accepted = v.lenient(
            c.pos,
            Sub(&field, "command"),
            "`command` (SQL rules) only applies with `protocol: sql`",
            "warns and ignores it",
        );
        if !accepted {
            return Err(());
        }
    }

    let method = match &raw.method {
        None => {
            if !v.lenient(
                raw.pos,
                field,
                &format!("{what} without `method` (add one, e.g. `method: GET`, or `*`)"),
                &format!("loads it and it {effect}"),
            ) {
                return Err(());
            }
            never = true;
            None
        }
        Some(m) => {
            let parsed = MethodMatcher::parse(&m.value);
            if parsed == Some(MethodMatcher::WebsocketText) && protocol != Protocol::WebSocket {
                v.error(
                    m.pos,
                    Sub(&field, "method"),
                    "`WEBSOCKET_TEXT` is only valid with `protocol: websocket`",
                );
                return Err(());
            }
            let expected = if protocol == Protocol::WebSocket {
                "GET, WEBSOCKET_TEXT or *"
            } else {
                "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS or *"
            };
            match parsed {
                Some(p)
                    if protocol == Protocol::WebSocket
                        && !matches!(
                            p,
                            MethodMatcher::Get | MethodMatcher::WebsocketText | MethodMatcher::Any
                        ) =>
                {
                    // A websocket endpoint only takes upgrades (GET) and text messages.
                    v.warning(
                        m.pos,
                        Sub(&field, "method"),
                        format!(
                            "`{}` never applies on a `protocol: websocket` endpoint (expected {expected}), so this rule {}",
                            m.value,
                            if kind == RuleKind::Deny { "blocks nothing" } else { "allows nothing" }
                        ),
                    );
                    Some(p)
                }
                Some(p) => Some(p),
                None => {
                    // The reference warns and matches the method as written; so does sluice,
                    // in both modes: a rule for an extension method (`PURGE`) is meant.
                    let Some(other) = MethodMatcher::other(&m.value) else {
                        v.error(
                            m.pos,
                            Sub(&field, "method"),
                            format!(
                                "`{}` is not an HTTP method token; expected {expected}",
                                m.value
                            ),
                        );
                        return Err(());
                    };
                    v.warning(
                        m.pos,
                        Sub(&field, "method"),
                        format!(
                            "unknown method `{}` (expected {expected}); as the reference does, sluice matches it as written, so this rule {} only `{}` requests",
                            m.value,
                            if kind == RuleKind::Deny { "blocks" } else { "allows" },
                            other.as_str()
                        ),
                    );
                    Some(other)
                }
            }
        }
    };

    let path = match &raw.path {
        None => {
            if !v.lenient(
                raw.pos,
                field,
                &format!("{what} without `path` (add one, e.g. `path: /**`)"),
                &format!("loads it and it {effect}"),
            ) {
                return Err(());
            }
            never = true;
            None
        }
        Some(p) => {
            let pf = Sub(&field, "path");
            if p.value == "**" {
                Some(PathMatcher::All)
            } else if !p.value.starts_with('/') {
                // The reference matches it as a glob all the same: `*/x` matches `/x` (a `*`
                // may be empty), `repos/**` matches nothing.
                if !v.lenient(
                    p.pos,
                    pf,
                    &format!(
                        "rule path `{}` does not start with `/` (write the absolute path)",
                        p.value
                    ),
                    "matches it as a glob against the absolute request path (`*/x` matches `/x`; `x/**` matches nothing)",
                ) {
                    return Err(());
                }
                match Glob::new(&p.value, '/') {
                    Ok(g) => Some(PathMatcher::Glob(g)),
                    Err(e) => {
                        v.error(p.pos, pf, e.to_string());
                        return Err(());
                    }
                }
            } else {
                let compiled = if kind == RuleKind::Deny {
                    // A deny rule `/x/**` also covers `/x` (spec §13 row 18: fixed).
                    Glob::new_covering_prefix(&p.value, '/')
                } else {
                    Glob::new(&p.value, '/')
                };
                match compiled {
                    Ok(g) => {
                        if let Some(c) = p.value.chars().find(|&c| !is_canonical_path_char(c)) {
                            v.warning(p.pos, pf, format!("rule path `{}` contains {c:?}, which never appears in a canonical request path (it is percent-encoded there); write it encoded", p.value));
                        }
                        Some(PathMatcher::Glob(g))
                    }
                    Err(e) => {
                        if !v.lenient(
                            p.pos,
                            pf,
                            &e.to_string(),
                            &format!("warns, and the rule {effect}"),
                        ) {
                            return Err(());
                        }
                        never = true;
                        None
                    }
                }
            }
        }
    };

    let mut query = Vec::new();
    let mut bad = false;
    for q in &raw.query {
        let query_field = Sub(&field, "query");
        let qf = Sub(&query_field, &q.key.value);
        let (patterns, pos): (Vec<&str>, _) = match &q.matcher {
            RawMatcher::Glob(g) => (vec![g.value.as_str()], g.pos),
            RawMatcher::Any(list) => (
                list.value.iter().map(|s| s.value.as_str()).collect(),
                list.pos,
            ),
        };
        if patterns.is_empty() {
            v.error(pos, qf, "`any: []` lists no pattern and would match nothing; list at least one glob (`*` for any value)");
            bad = true;
            continue;
        }
        let mut globs = Vec::new();
        for p in patterns {
            if p.is_empty() {
                v.error(pos, qf, "an empty query matcher matches nothing; use `*` to require the parameter with any value");
                bad = true;
                continue;
            }
            match Glob::new(p, '.') {
                Ok(g) => globs.push(g),
                Err(e) => {
                    v.error(pos, qf, e.to_string());
                    bad = true;
                }
            }
        }
        query.push(QueryMatcher {
            key: q.key.value.clone(),
            globs,
        });
    }
    if bad {
        return Err(());
    }
    match (method, path, never) {
        (Some(method), Some(path), false) => Ok(Some(Rule {
            method,
            path,
            query,
            rpc: None,
            graphql: None,
            origin: RuleOrigin {
                entry: entry.clone(),
                endpoint,
                kind,
                index,
                location: super::diag::Location::new(v.file, raw.pos),
            },
        })),
        _ => Ok(None),
    }
}

/// Characters that survive canonicalisation unencoded (spec §5.2 step 5), plus glob syntax.
fn is_canonical_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:@/%?[]{}\\".contains(c)
}
