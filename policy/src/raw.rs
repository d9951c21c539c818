//! The policy document as written: OpenShell policy v1 fields with their positions.
//!
//! Owns the step "positioned YAML tree → raw policy structs": the schema (which keys exist at
//! each level, their types), unknown keys, duplicate keys, and fields of the format that sluice
//! does not implement yet, which are errors naming the field (never silently ignored). It
//! collects every problem of a file, not only the first. It does not judge values (a port of
//! 70000, an unknown `access` preset): `validate.rs` does.
//!
//! This file reads the document, its entries, binaries and endpoints. The reader's primitives
//! (a mapping's fields against a schema, scalars, lists) are in `raw/reader.rs`; the layer-7
//! rules and the per-protocol stanzas (GraphQL, JSON-RPC, MCP, SQL) in `raw/rule.rs`; the
//! sandbox sections in `raw/sandbox.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use super::Compat;
use super::diag::{self, Diagnostics};
use super::yaml::{Kind, Node, Pos};

mod reader;
mod rule;
mod sandbox;

pub use reader::Field;
use reader::Reader;
use rule::{JSON_RPC_FIELDS, MCP_FIELDS};
pub use rule::{RawMatcher, RawQuery, RawRegistry, RawRpcOptions, RawRule};
pub use sandbox::{RawFilesystem, RawLandlock, RawProcess};

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
const CREDENTIAL_BINDING_FIELDS: &[&str] = &["provider"];
const ENDPOINT_UNSUPPORTED: &[(&str, &str)] = &[];

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

impl Reader<'_> {
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
}

#[cfg(test)]
mod tests;
