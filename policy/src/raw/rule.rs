//! One layer-7 rule as written, and the per-protocol stanzas of an endpoint that go with
//! rules: HTTP `method`/`path`/`query`, MCP `tool` and `params`, GraphQL `operation_type`,
//! `operation_name`, `fields` and the `graphql_persisted_queries` registry, SQL `command`,
//! and the `json_rpc` and `mcp` options.
//!
//! Owns the keys each of these knows and their shapes. It does not judge the values (a method
//! name, a glob, an operation type): `rules.rs`, `rpc.rs` and `graphql.rs` do.

use crate::Compat;
use crate::diag;
use crate::yaml::{Kind, Node, Pos, Style, parse_bool, parse_int};

use super::Spanned;
use super::reader::{Field, Reader};

/// `graphql_persisted_queries`: each id (or hash) and the operation it stands for (read as
/// a rule of `operation_type`, `operation_name`, `fields`).
pub type RawRegistry = Vec<(Spanned<String>, RawRule)>;

/// The `json_rpc` or `mcp` stanza of an endpoint.
#[derive(Clone, Debug, Default)]
pub struct RawRpcOptions {
    pub pos: Pos,
    pub max_body_bytes: Option<Spanned<i128>>,
    pub strict_tool_names: Option<Spanned<bool>>,
    pub allow_all_known_mcp_methods: Option<Spanned<bool>>,
}

#[derive(Clone, Debug)]
pub struct RawRule {
    pub pos: Pos,
    pub method: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub query: Vec<RawQuery>,
    /// MCP: the tool a `tools/call` names.
    pub tool: Option<RawMatcher>,
    /// MCP: `params` matchers, nested keys flattened to dotted ones (`params.name`).
    pub params: Vec<RawQuery>,
    pub params_pos: Option<Pos>,
    /// GraphQL: `operation_type`, `operation_name` (a glob), `fields` (root-field globs).
    pub operation_type: Option<Spanned<String>>,
    pub operation_name: Option<Spanned<String>>,
    pub fields: Option<Spanned<Vec<Spanned<String>>>>,
    /// SQL: `command`.
    pub command: Option<Spanned<String>>,
}

impl RawRule {
    /// It names a GraphQL operation (the reference's `json_rule_has_graphql_fields`).
    pub fn has_graphql_fields(&self) -> bool {
        let set = |s: &Option<Spanned<String>>| s.as_ref().is_some_and(|s| !s.value.is_empty());
        set(&self.operation_type) || set(&self.operation_name) || self.fields.is_some()
    }
}

#[derive(Clone, Debug)]
pub struct RawQuery {
    pub key: Spanned<String>,
    pub matcher: RawMatcher,
}

#[derive(Clone, Debug)]
pub enum RawMatcher {
    Glob(Spanned<String>),
    Any(Spanned<Vec<Spanned<String>>>),
}

pub(super) const JSON_RPC_FIELDS: &[&str] = &["max_body_bytes"];
pub(super) const MCP_FIELDS: &[&str] = &[
    "max_body_bytes",
    "strict_tool_names",
    "allow_all_known_mcp_methods",
];
const RULE_FIELDS: &[&str] = &[
    "method",
    "path",
    "query",
    "tool",
    "params",
    "operation_type",
    "operation_name",
    "fields",
    "command",
];
const REGISTRY_FIELDS: &[&str] = &["operation_type", "operation_name", "fields"];
const RULE_UNSUPPORTED: &[(&str, &str)] = &[];
const ALLOW_WRAPPER_FIELDS: &[&str] = &["allow"];
const ANY_FIELDS: &[&str] = &["any"];

impl Reader<'_> {
    /// `rules: [{allow: {...}}]` (wrapped) or `deny_rules: [{...}]` (flat).
    pub(super) fn rules(
        &mut self,
        node: &Node,
        path: Field<'_>,
        wrapped: bool,
    ) -> Option<Spanned<Vec<RawRule>>> {
        let items = self.list(node, path)?;
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let item_path = Field::Index(&path, i);
            let body = if wrapped {
                if let Kind::Map(pairs) = &item.kind
                    && !pairs.iter().any(|(k, _)| matches!(&k.kind, Kind::Scalar(s, _) if s == "allow"))
                    && pairs.iter().any(|(k, _)| matches!(&k.kind, Kind::Scalar(s, _) if s == "method" || s == "path"))
                {
                    self.error(
                        item.pos,
                        item_path,
                        "an allow rule is written `- allow: {method: ..., path: ...}` (only `deny_rules` items are flat)",
                    );
                    continue;
                }
                let Some(fields) = self.fields(item, item_path, ALLOW_WRAPPER_FIELDS, &[]) else {
                    continue;
                };
                let Some((_, inner)) = fields.into_iter().next() else {
                    self.error(
                        item.pos,
                        item_path,
                        "an allow rule needs an `allow` mapping",
                    );
                    continue;
                };
                (inner, Field::Key(&item_path, "allow"))
            } else {
                (item, item_path)
            };
            if let Some(rule) = self.rule(body.0, body.1) {
                out.push(rule);
            }
        }
        Some(Spanned {
            value: out,
            pos: node.pos,
        })
    }

    /// `graphql_persisted_queries`: a mapping of ids (or hashes) to operations.
    pub(super) fn registry(
        &mut self,
        node: &Node,
        path: Field<'_>,
    ) -> Option<Spanned<RawRegistry>> {
        let Kind::Map(pairs) = &node.kind else {
            self.expected(node, path, "a mapping of persisted-query ids to operations");
            return None;
        };
        let mut out = Vec::new();
        for (k, v) in pairs {
            let key = self.string(k, path)?;
            let field = Field::Key(&path, &key.value);
            if let Some(rule) = self.rule_of(v, field, REGISTRY_FIELDS) {
                out.push((key, rule));
            }
        }
        Some(Spanned {
            value: out,
            pos: node.pos,
        })
    }

    fn rule(&mut self, node: &Node, path: Field<'_>) -> Option<RawRule> {
        self.rule_of(node, path, RULE_FIELDS)
    }

    fn rule_of(&mut self, node: &Node, path: Field<'_>, known: &[&str]) -> Option<RawRule> {
        let fields = self.fields(node, path, known, RULE_UNSUPPORTED)?;
        let mut rule = RawRule {
            pos: node.pos,
            method: None,
            path: None,
            query: Vec::new(),
            tool: None,
            params: Vec::new(),
            params_pos: None,
            operation_type: None,
            operation_name: None,
            fields: None,
            command: None,
        };
        for (k, v) in fields {
            let field = Field::Key(&path, k);
            match k {
                "method" => rule.method = self.string(v, field),
                "path" => rule.path = self.string(v, field),
                "query" => rule.query = self.query(v, field),
                "tool" => rule.tool = self.matcher(v, field),
                "operation_type" => rule.operation_type = self.string(v, field),
                "operation_name" => rule.operation_name = self.string(v, field),
                "fields" => rule.fields = self.strings(v, field),
                "command" => rule.command = self.string(v, field),
                "params" => {
                    rule.params_pos = Some(v.pos);
                    self.params(v, field, "", &mut rule.params);
                }
                _ => {}
            }
        }
        Some(rule)
    }

    /// A `json_rpc` or `mcp` stanza.
    pub(super) fn rpc_options(
        &mut self,
        node: &Node,
        path: Field<'_>,
        known: &[&str],
    ) -> Option<RawRpcOptions> {
        let fields = self.fields(node, path, known, &[])?;
        let mut out = RawRpcOptions {
            pos: node.pos,
            ..RawRpcOptions::default()
        };
        for (k, v) in fields {
            let field = Field::Key(&path, k);
            match k {
                "max_body_bytes" => out.max_body_bytes = self.int(v, field),
                "strict_tool_names" => out.strict_tool_names = self.bool(v, field),
                "allow_all_known_mcp_methods" => {
                    out.allow_all_known_mcp_methods = self.bool(v, field);
                }
                _ => {}
            }
        }
        Some(out)
    }

    /// A glob string or `{any: [...]}`.
    fn matcher(&mut self, v: &Node, field: Field<'_>) -> Option<RawMatcher> {
        match &v.kind {
            Kind::Scalar(..) => self.string(v, field).map(RawMatcher::Glob),
            Kind::Map(_) => {
                let f = self.fields(v, field, ANY_FIELDS, &[])?;
                match f.into_iter().next() {
                    Some((_, list)) => self
                        .strings(list, Field::Key(&field, "any"))
                        .map(RawMatcher::Any),
                    None => {
                        self.error(v.pos, field, "a matcher mapping needs `any: [...]`");
                        None
                    }
                }
            }
            Kind::Seq(_) => {
                self.expected(v, field, "a glob string or `{any: [...]}`");
                None
            }
        }
    }

    /// `params`: a mapping whose nested mappings (other than `{any: [...]}`) flatten to
    /// dotted keys.
    fn params(&mut self, node: &Node, path: Field<'_>, prefix: &str, out: &mut Vec<RawQuery>) {
        let Kind::Map(pairs) = &node.kind else {
            self.expected(node, path, "a mapping of parameter names to matchers");
            return;
        };
        for (k, v) in pairs {
            let Some(key) = self.string(k, path) else {
                continue;
            };
            let field = Field::Key(&path, &key.value);
            let full = format!("{prefix}{}", key.value);
            let is_any = matches!(&v.kind, Kind::Map(p) if p.iter().any(|(k, _)| matches!(&k.kind, Kind::Scalar(s, _) if s == "any")));
            if matches!(v.kind, Kind::Map(_)) && !is_any {
                self.params(v, field, &format!("{full}."), out);
                continue;
            }
            if let Some(matcher) = self.matcher(v, field) {
                out.push(RawQuery {
                    key: Spanned {
                        value: full,
                        pos: key.pos,
                    },
                    matcher,
                });
            }
        }
    }

    fn query(&mut self, node: &Node, path: Field<'_>) -> Vec<RawQuery> {
        let Kind::Map(pairs) = &node.kind else {
            self.expected(node, path, "a mapping of query parameter names to matchers");
            return Vec::new();
        };
        let mut out: Vec<RawQuery> = Vec::new();
        for (k, v) in pairs {
            let Some(key) = self.string(k, path) else {
                continue;
            };
            let field = Field::Key(&path, &key.value);
            let matcher = match &v.kind {
                // The reference's schema wants a string here and refuses a number or a bool.
                Kind::Scalar(text, Style::Plain)
                    if parse_int(text).is_some()
                        || parse_bool(text).is_some()
                        || text.parse::<f64>().is_ok() =>
                {
                    self.error(
                        v.pos,
                        field,
                        format!("expected a glob string, found the number or bool `{text}`; quote it (`\"{text}\"`)"),
                    );
                    None
                }
                Kind::Scalar(..) => self.string(v, field).map(RawMatcher::Glob),
                Kind::Map(_) => self.fields(v, field, ANY_FIELDS, &[]).and_then(|f| {
                    match f.into_iter().next() {
                        Some((_, list)) => self
                            .strings(list, Field::Key(&field, "any"))
                            .map(RawMatcher::Any),
                        None => {
                            self.error(v.pos, field, "a query matcher mapping needs `any: [...]`");
                            None
                        }
                    }
                }),
                Kind::Seq(_) => {
                    self.expected(v, field, "a glob string or `{any: [...]}`");
                    None
                }
            };
            let Some(matcher) = matcher else { continue };
            if let Some(prev) = out.iter_mut().find(|q| q.key.value == key.value) {
                match self.compat {
                    Compat::Strict => self.diags.error_of(
                        diag::Kind::Lenient,
                        self.file,
                        key.pos,
                        field,
                        format!(
                            "query parameter `{}` is listed twice (first at {}); \
                             the reference silently keeps only the last one",
                            key.value, prev.key.pos
                        ),
                    ),
                    Compat::OpenShell => {
                        self.diags.warning(
                            self.file,
                            key.pos,
                            field,
                            format!(
                                "query parameter `{}` is listed twice; the last matcher wins \
                                 (--compat openshell)",
                                key.value
                            ),
                        );
                        *prev = RawQuery { key, matcher };
                    }
                }
                continue;
            }
            out.push(RawQuery { key, matcher });
        }
        out
    }
}
