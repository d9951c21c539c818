//! The policy document as written: OpenShell policy v1 fields with their positions.
//!
//! Owns the step "positioned YAML tree → raw policy structs": the schema (which keys exist at
//! each level, their types), unknown keys, duplicate keys, and fields of the format that sluice
//! does not implement yet, which are errors naming the field (never silently ignored). It
//! collects every problem of a file, not only the first. It does not judge values (a port of
//! 70000, an unknown `access` preset): `validate.rs` does.

use std::collections::HashMap;
use std::sync::Arc;

use super::Compat;
use super::diag::{self, Diagnostics};
use super::yaml::{Kind, Node, Pos, Style, parse_bool, parse_int};

/// A value and where it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spanned<T> {
    pub value: T,
    pub pos: Pos,
}

#[derive(Clone, Debug, Default)]
pub struct RawDocument {
    pub file: Arc<str>,
    pub version: Option<Spanned<i128>>,
    pub network_policies: Vec<RawEntry>,
    pub filesystem_policy: Option<RawFilesystem>,
    pub landlock: Option<RawLandlock>,
    pub process: Option<RawProcess>,
    pub root_pos: Pos,
    /// The document is a mapping (else one error says so, and nothing else is checked).
    pub is_mapping: bool,
    /// `version` was written, even if with a value of the wrong type.
    pub version_given: bool,
    /// A NemoClaw `preset:` header was written: the document is a policy fragment, which
    /// may leave out `version`.
    pub preset: Option<Pos>,
}

#[derive(Clone, Debug)]
pub struct RawEntry {
    pub key: Spanned<String>,
    pub name: Option<Spanned<String>>,
    pub endpoints: Vec<RawEndpoint>,
    pub binaries: Vec<RawBinary>,
}

#[derive(Clone, Debug)]
pub struct RawBinary {
    pub path: Spanned<String>,
}

#[derive(Clone, Debug, Default)]
pub struct RawEndpoint {
    pub pos: Pos,
    /// Fields that were written but could not be read (already reported), so that checks
    /// for missing fields do not report them a second time.
    pub unreadable: Vec<&'static str>,
    pub host: Option<Spanned<String>>,
    pub port: Option<Spanned<i128>>,
    pub ports: Option<Spanned<Vec<Spanned<i128>>>>,
    pub path: Option<Spanned<String>>,
    pub protocol: Option<Spanned<String>>,
    pub tls: Option<Spanned<String>>,
    pub enforcement: Option<Spanned<String>>,
    pub access: Option<Spanned<String>>,
    pub rules: Option<Spanned<Vec<RawRule>>>,
    pub deny_rules: Option<Spanned<Vec<RawRule>>>,
    pub allowed_ips: Option<Spanned<Vec<Spanned<String>>>>,
    pub allow_encoded_slash: Option<Spanned<bool>>,
    pub request_body_credential_rewrite: Option<Spanned<bool>>,
    pub websocket_credential_rewrite: Option<Spanned<bool>>,
    pub allow_uninspected_credentials: Option<Spanned<bool>>,
    pub credential_signing: Option<Spanned<String>>,
    pub signing_service: Option<Spanned<String>>,
    pub signing_region: Option<Spanned<String>>,
    /// `credential_binding: {provider: ID}`: the provider profile whose credentials this
    /// endpoint binds.
    pub credential_binding: Option<Spanned<String>>,
    /// `json_rpc: {max_body_bytes}`.
    pub json_rpc: Option<RawRpcOptions>,
    /// `mcp: {max_body_bytes, strict_tool_names, allow_all_known_mcp_methods}`.
    pub mcp: Option<RawRpcOptions>,
    /// GraphQL: `persisted_queries` (`deny` or `allow_registered`).
    pub persisted_queries: Option<Spanned<String>>,
    /// GraphQL: `graphql_persisted_queries`, the trusted registry (id or hash → operation).
    pub graphql_persisted_queries: Option<Spanned<RawRegistry>>,
    pub graphql_max_body_bytes: Option<Spanned<i128>>,
}

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

#[derive(Clone, Debug, Default)]
pub struct RawFilesystem {
    pub pos: Pos,
    pub include_workdir: Option<Spanned<bool>>,
    pub read_only: Vec<Spanned<String>>,
    pub read_write: Vec<Spanned<String>>,
}

#[derive(Clone, Debug)]
pub struct RawLandlock {
    pub pos: Pos,
    pub compatibility: Option<Spanned<String>>,
}

#[derive(Clone, Debug)]
pub struct RawProcess {
    pub pos: Pos,
    pub run_as_user: Option<Spanned<String>>,
    pub run_as_group: Option<Spanned<String>>,
}

const TOP_FIELDS: &[&str] = &[
    "version",
    "network_policies",
    "filesystem_policy",
    "landlock",
    "process",
];
const TOP_UNSUPPORTED: &[(&str, &str)] = &[("network_middlewares", "network middlewares")];
const ENTRY_FIELDS: &[&str] = &["name", "endpoints", "binaries"];
const BINARY_FIELDS: &[&str] = &["path", "harness"];
const ENDPOINT_FIELDS: &[&str] = &[
    "host",
    "port",
    "ports",
    "path",
    "protocol",
    "tls",
    "enforcement",
    "access",
    "rules",
    "deny_rules",
    "allowed_ips",
    "allow_encoded_slash",
    "request_body_credential_rewrite",
    "websocket_credential_rewrite",
    "allow_uninspected_credentials",
    "credential_signing",
    "signing_service",
    "signing_region",
    "credential_binding",
    "json_rpc",
    "mcp",
    "persisted_queries",
    "graphql_persisted_queries",
    "graphql_max_body_bytes",
];
const JSON_RPC_FIELDS: &[&str] = &["max_body_bytes"];
const MCP_FIELDS: &[&str] = &[
    "max_body_bytes",
    "strict_tool_names",
    "allow_all_known_mcp_methods",
];
const CREDENTIAL_BINDING_FIELDS: &[&str] = &["provider"];
const ENDPOINT_UNSUPPORTED: &[(&str, &str)] = &[];
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
const FILESYSTEM_FIELDS: &[&str] = &["include_workdir", "read_only", "read_write"];
const LANDLOCK_FIELDS: &[&str] = &["compatibility"];
const PROCESS_FIELDS: &[&str] = &["run_as_user", "run_as_group"];
const ANY_FIELDS: &[&str] = &["any"];

/// Reads one parsed document into raw structs, reporting every schema problem.
pub fn read(file: &Arc<str>, root: &Node, compat: Compat, diags: &mut Diagnostics) -> RawDocument {
    let mut r = Reader {
        file,
        diags,
        compat,
    };
    let mut doc = RawDocument {
        file: Arc::clone(file),
        root_pos: root.pos,
        ..RawDocument::default()
    };
    // A NemoClaw preset (`preset: {name, description}` over a policy fragment): the header
    // only names the fragment for people, so it is checked for shape and set aside.
    let without_preset;
    let root = match preset_header(root) {
        Some((header, rest)) => {
            doc.preset = Some(header.pos);
            r.preset(header);
            without_preset = rest;
            &without_preset
        }
        None => root,
    };
    let Some(fields) = r.fields(root, Field::Root, TOP_FIELDS, TOP_UNSUPPORTED) else {
        return doc;
    };
    doc.is_mapping = true;
    for (key, value) in fields {
        match key {
            "version" => {
                doc.version_given = true;
                doc.version = r.int(value, Field::Name(key));
            }
            "network_policies" => doc.network_policies = r.entries(value),
            "filesystem_policy" => doc.filesystem_policy = r.filesystem(value),
            "landlock" => doc.landlock = r.landlock(value),
            "process" => doc.process = r.process(value),
            _ => {}
        }
    }
    doc
}

/// Reads one endpoint mapping written outside a policy document (a provider profile's
/// endpoint, which has the same shape), reporting its schema problems under `path`. Keys in
/// `extra` are the caller's own: accepted and left for it to read.
pub fn read_endpoint(
    file: &Arc<str>,
    node: &Node,
    path: &str,
    extra: &[&str],
    compat: Compat,
    diags: &mut Diagnostics,
) -> Option<RawEndpoint> {
    let mut r = Reader {
        file,
        diags,
        compat,
    };
    r.endpoint_with(node, Field::Name(path), extra)
}

/// The `preset` value of a mapping root, and the root without it.
fn preset_header<'n, 'a>(root: &'n Node<'a>) -> Option<(&'n Node<'a>, Node<'a>)> {
    let Kind::Map(pairs) = &root.kind else {
        return None;
    };
    let is_preset = |k: &Node| matches!(&k.kind, Kind::Scalar(key, _) if key == "preset");
    let (_, header) = pairs.iter().find(|(k, _)| is_preset(k))?;
    let rest = Node {
        kind: Kind::Map(
            pairs
                .iter()
                .filter(|(k, _)| !is_preset(k))
                .cloned()
                .collect(),
        ),
        pos: root.pos,
    };
    Some((header, rest))
}

struct Reader<'a> {
    file: &'a Arc<str>,
    diags: &'a mut Diagnostics,
    compat: Compat,
}

/// A field path (`network_policies.a.endpoints[0].host`), built without allocating: it is
/// only turned into text when a diagnostic needs it, which keeps loading large policies fast.
#[derive(Clone, Copy, Debug)]
pub enum Field<'a> {
    Root,
    Name(&'a str),
    Key(&'a Field<'a>, &'a str),
    Index(&'a Field<'a>, usize),
}

impl std::fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Field::Root => Ok(()),
            Field::Name(n) => f.write_str(n),
            Field::Key(Field::Root, k) => f.write_str(k),
            Field::Key(p, k) => write!(f, "{p}.{k}"),
            Field::Index(p, i) => write!(f, "{p}[{i}]"),
        }
    }
}

impl Reader<'_> {
    fn error(&mut self, pos: Pos, field: Field<'_>, message: impl Into<String>) {
        self.diags.error(self.file, pos, field.to_string(), message);
    }

    fn expected(&mut self, node: &Node, field: Field<'_>, what: &str) {
        let found = node.type_name();
        self.error(node.pos, field, format!("expected {what}, found {found}"));
    }

    /// The fields of a mapping, checked against the schema: unknown keys, keys sluice does
    /// not support yet, and duplicates are errors; what is left is returned in order.
    fn fields<'n, 'a>(
        &mut self,
        node: &'n Node<'a>,
        path: Field<'_>,
        known: &[&str],
        unsupported: &[(&str, &str)],
    ) -> Option<Vec<(&'n str, &'n Node<'a>)>> {
        let Kind::Map(pairs) = &node.kind else {
            let what = if matches!(path, Field::Root) {
                "the policy document".to_string()
            } else {
                path.to_string()
            };
            let found = node.type_name();
            self.error(
                node.pos,
                path,
                format!("expected a mapping for {what}, found {found}"),
            );
            return None;
        };
        let mut seen: HashMap<&str, Pos> = HashMap::new();
        let mut out = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            let Kind::Scalar(key, _) = &k.kind else {
                self.error(k.pos, path, "mapping keys must be plain strings");
                continue;
            };
            let field = Field::Key(&path, key);
            if let Some((_, feature)) = unsupported.iter().find(|(name, _)| name == key) {
                self.diags.error_of(
                    diag::Kind::Unsupported,
                    self.file,
                    k.pos,
                    field,
                    format!("`{key}` ({feature}) is not supported by sluice yet"),
                );
                continue;
            }
            if !known.contains(&key.as_ref()) {
                let hint = suggest(key, known)
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                self.error(
                    k.pos,
                    field,
                    format!(
                        "unknown field `{key}`{hint}; expected one of: {}",
                        known.join(", ")
                    ),
                );
                continue;
            }
            if let Some(first) = seen.insert(key, k.pos) {
                self.error(
                    k.pos,
                    field,
                    format!(
                        "duplicate field `{key}` (first defined at line {})",
                        first.line
                    ),
                );
                continue;
            }
            out.push((key.as_ref(), v));
        }
        Some(out)
    }

    fn string(&mut self, node: &Node, field: Field<'_>) -> Option<Spanned<String>> {
        match &node.kind {
            Kind::Scalar(s, _) if !node.is_null() => Some(Spanned {
                value: s.to_string(),
                pos: node.pos,
            }),
            _ => {
                self.expected(node, field, "a string");
                None
            }
        }
    }

    fn int(&mut self, node: &Node, field: Field<'_>) -> Option<Spanned<i128>> {
        if let Kind::Scalar(s, Style::Plain) = &node.kind
            && let Some(value) = parse_int(s)
        {
            return Some(Spanned {
                value,
                pos: node.pos,
            });
        }
        self.expected(node, field, "an integer");
        None
    }

    fn bool(&mut self, node: &Node, field: Field<'_>) -> Option<Spanned<bool>> {
        if let Kind::Scalar(s, Style::Plain) = &node.kind
            && let Some(value) = parse_bool(s)
        {
            return Some(Spanned {
                value,
                pos: node.pos,
            });
        }
        self.expected(node, field, "`true` or `false`");
        None
    }

    fn list<'n, 'a>(&mut self, node: &'n Node<'a>, field: Field<'_>) -> Option<&'n [Node<'a>]> {
        match &node.kind {
            Kind::Seq(items) => Some(items),
            _ => {
                self.expected(node, field, "a list");
                None
            }
        }
    }

    fn strings(&mut self, node: &Node, field: Field<'_>) -> Option<Spanned<Vec<Spanned<String>>>> {
        let items = self.list(node, field)?;
        let value = items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| self.string(item, Field::Index(&field, i)))
            .collect();
        Some(Spanned {
            value,
            pos: node.pos,
        })
    }

    /// A NemoClaw `preset:` header: `name` and `description` for people; nothing in it
    /// changes what the policy allows, which the note says. Other header keys are ignored
    /// with a warning (they cannot change enforcement either).
    fn preset(&mut self, node: &Node) {
        let field = Field::Name("preset");
        let Kind::Map(pairs) = &node.kind else {
            self.expected(node, field, "a mapping for preset");
            return;
        };
        for (k, v) in pairs {
            let Some(key) = self.string(k, field) else {
                continue;
            };
            let sub = Field::Key(&field, &key.value);
            match key.value.as_str() {
                "name" | "description" => {
                    self.string(v, sub);
                }
                other => self.diags.warning(
                    self.file,
                    k.pos,
                    sub,
                    format!("unknown preset header field `{other}` is ignored (expected name, description)"),
                ),
            }
        }
        self.diags.warning(
            self.file,
            node.pos,
            field,
            "a NemoClaw preset header (`name`, `description`) has no effect on enforcement; the `network_policies` below it load as in any policy file",
        );
    }

    fn entries(&mut self, node: &Node) -> Vec<RawEntry> {
        const PATH: &str = "network_policies";
        // `network_policies:` with nothing under it denies everything, like an empty map.
        if node.is_null() {
            return Vec::new();
        }
        let Kind::Map(pairs) = &node.kind else {
            self.expected(
                node,
                Field::Name(PATH),
                "a mapping of policy names to policies",
            );
            return Vec::new();
        };
        let mut out: Vec<RawEntry> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for (k, v) in pairs {
            let Some(key) = self.string(k, Field::Name(PATH)) else {
                continue;
            };
            let field = Field::Key(&Field::Name(PATH), &key.value);
            if key.value.is_empty() {
                self.error(k.pos, Field::Name(PATH), "policy names must not be empty");
                continue;
            }
            let entry = self.entry(key.clone(), v, field);
            match index.get(&key.value) {
                Some(&i) => {
                    let first = out[i].key.pos.line;
                    match self.compat {
                        Compat::Strict => self.diags.error_of(
                            diag::Kind::Lenient,
                            self.file,
                            key.pos,
                            field,
                            format!(
                                "policy `{}` is defined twice in this file (first at line {first}); \
                                 the reference silently keeps only the last one",
                                key.value
                            ),
                        ),
                        Compat::OpenShell => {
                            self.diags.warning(
                                self.file,
                                key.pos,
                                field,
                                format!(
                                    "policy `{}` is defined twice (first at line {first}); \
                                     the last definition wins (--compat openshell)",
                                    key.value
                                ),
                            );
                            if let Some(entry) = entry {
                                out[i] = entry;
                            }
                        }
                    }
                }
                None => {
                    if let Some(entry) = entry {
                        index.insert(key.value.clone(), out.len());
                        out.push(entry);
                    }
                }
            }
        }
        out
    }

    fn entry(&mut self, key: Spanned<String>, node: &Node, path: Field<'_>) -> Option<RawEntry> {
        let fields = self.fields(node, path, ENTRY_FIELDS, &[])?;
        let mut entry = RawEntry {
            key,
            name: None,
            endpoints: Vec::new(),
            binaries: Vec::new(),
        };
        for (k, v) in fields {
            let field = Field::Key(&path, k);
            match k {
                "name" => entry.name = self.string(v, field),
                "endpoints" => {
                    if let Some(items) = self.list(v, field) {
                        entry.endpoints = items
                            .iter()
                            .enumerate()
                            .filter_map(|(i, item)| self.endpoint(item, Field::Index(&field, i)))
                            .collect();
                    }
                }
                "binaries" => {
                    if let Some(items) = self.list(v, field) {
                        entry.binaries = items
                            .iter()
                            .enumerate()
                            .filter_map(|(i, item)| self.binary(item, Field::Index(&field, i)))
                            .collect();
                    }
                }
                _ => {}
            }
        }
        Some(entry)
    }

    fn binary(&mut self, node: &Node, path: Field<'_>) -> Option<RawBinary> {
        let fields = self.fields(node, path, BINARY_FIELDS, &[])?;
        let mut out = None;
        let mut path_seen = false;
        for (k, v) in fields {
            let field = Field::Key(&path, k);
            match k {
                "path" => {
                    path_seen = true;
                    out = self.string(v, field).map(|path| RawBinary { path });
                }
                "harness" if self.bool(v, field).is_some() => {
                    self.diags.warning(
                        self.file,
                        v.pos,
                        field,
                        "`harness` is deprecated and has no effect",
                    );
                }
                _ => {}
            }
        }
        if !path_seen {
            self.error(node.pos, path, "a binary needs a `path`");
        }
        out
    }

    fn endpoint(&mut self, node: &Node, path: Field<'_>) -> Option<RawEndpoint> {
        self.endpoint_with(node, path, &[])
    }

    fn endpoint_with(
        &mut self,
        node: &Node,
        path: Field<'_>,
        extra: &[&str],
    ) -> Option<RawEndpoint> {
        let known: std::borrow::Cow<'_, [&str]> = if extra.is_empty() {
            std::borrow::Cow::Borrowed(ENDPOINT_FIELDS)
        } else {
            std::borrow::Cow::Owned([ENDPOINT_FIELDS, extra].concat())
        };
        let fields = self.fields(node, path, &known, ENDPOINT_UNSUPPORTED)?;
        let mut ep = RawEndpoint {
            pos: node.pos,
            ..RawEndpoint::default()
        };
        for (k, v) in fields {
            let field = Field::Key(&path, k);
            let errors_before = self.diags.error_count();
            match k {
                "host" => ep.host = self.string(v, field),
                "port" => ep.port = self.int(v, field),
                "ports" => {
                    if let Some(items) = self.list(v, field) {
                        let value = items
                            .iter()
                            .enumerate()
                            .filter_map(|(i, item)| self.int(item, Field::Index(&field, i)))
                            .collect();
                        ep.ports = Some(Spanned { value, pos: v.pos });
                    }
                }
                "path" => ep.path = self.string(v, field),
                "protocol" => ep.protocol = self.string(v, field),
                "tls" => ep.tls = self.string(v, field),
                "enforcement" => ep.enforcement = self.string(v, field),
                "access" => ep.access = self.string(v, field),
                "rules" => ep.rules = self.rules(v, field, true),
                "deny_rules" => ep.deny_rules = self.rules(v, field, false),
                "allowed_ips" => ep.allowed_ips = self.strings(v, field),
                "allow_encoded_slash" => ep.allow_encoded_slash = self.bool(v, field),
                "request_body_credential_rewrite" => {
                    ep.request_body_credential_rewrite = self.bool(v, field);
                }
                "websocket_credential_rewrite" => {
                    ep.websocket_credential_rewrite = self.bool(v, field);
                }
                "allow_uninspected_credentials" => {
                    ep.allow_uninspected_credentials = self.bool(v, field);
                }
                "json_rpc" => ep.json_rpc = self.rpc_options(v, field, JSON_RPC_FIELDS),
                "mcp" => ep.mcp = self.rpc_options(v, field, MCP_FIELDS),
                "persisted_queries" => ep.persisted_queries = self.string(v, field),
                "graphql_max_body_bytes" => ep.graphql_max_body_bytes = self.int(v, field),
                "graphql_persisted_queries" => {
                    ep.graphql_persisted_queries = self.registry(v, field);
                }
                "credential_signing" => ep.credential_signing = self.string(v, field),
                "signing_service" => ep.signing_service = self.string(v, field),
                "signing_region" => ep.signing_region = self.string(v, field),
                "credential_binding" => {
                    if let Some(fields) = self.fields(v, field, CREDENTIAL_BINDING_FIELDS, &[]) {
                        for (k, value) in fields {
                            ep.credential_binding = self.string(value, Field::Key(&field, k));
                        }
                        if ep.credential_binding.is_none()
                            && self.diags.error_count() == errors_before
                        {
                            self.error(v.pos, field, "`credential_binding` needs a `provider`");
                        }
                    }
                }
                _ => {}
            }
            if self.diags.error_count() > errors_before
                && let Some(name) = ENDPOINT_FIELDS.iter().find(|f| **f == k)
            {
                ep.unreadable.push(name);
            }
        }
        Some(ep)
    }

    /// `rules: [{allow: {...}}]` (wrapped) or `deny_rules: [{...}]` (flat).
    fn rules(
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
    fn registry(&mut self, node: &Node, path: Field<'_>) -> Option<Spanned<RawRegistry>> {
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
    fn rpc_options(
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

    fn filesystem(&mut self, node: &Node) -> Option<RawFilesystem> {
        const PATH: &str = "filesystem_policy";
        let fields = self.fields(node, Field::Name(PATH), FILESYSTEM_FIELDS, &[])?;
        let mut fs = RawFilesystem {
            pos: node.pos,
            ..RawFilesystem::default()
        };
        for (k, v) in fields {
            let field = Field::Key(&Field::Name(PATH), k);
            match k {
                "include_workdir" => fs.include_workdir = self.bool(v, field),
                "read_only" => {
                    fs.read_only = self.strings(v, field).map(|s| s.value).unwrap_or_default()
                }
                "read_write" => {
                    fs.read_write = self.strings(v, field).map(|s| s.value).unwrap_or_default();
                }
                _ => {}
            }
        }
        Some(fs)
    }

    fn landlock(&mut self, node: &Node) -> Option<RawLandlock> {
        const PATH: &str = "landlock";
        let fields = self.fields(node, Field::Name(PATH), LANDLOCK_FIELDS, &[])?;
        let mut out = RawLandlock {
            pos: node.pos,
            compatibility: None,
        };
        for (_, v) in fields {
            out.compatibility =
                self.string(v, Field::Key(&Field::Name("landlock"), "compatibility"));
        }
        Some(out)
    }

    fn process(&mut self, node: &Node) -> Option<RawProcess> {
        const PATH: &str = "process";
        let fields = self.fields(node, Field::Name(PATH), PROCESS_FIELDS, &[])?;
        let mut out = RawProcess {
            pos: node.pos,
            run_as_user: None,
            run_as_group: None,
        };
        for (k, v) in fields {
            let field = Field::Key(&Field::Name(PATH), k);
            match k {
                "run_as_user" => out.run_as_user = self.string(v, field),
                "run_as_group" => out.run_as_group = self.string(v, field),
                _ => {}
            }
        }
        Some(out)
    }
}

/// The known field closest to a misspelt one, if it is close enough to be a typo.
fn suggest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests;
