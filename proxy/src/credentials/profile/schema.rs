//! The provider profile schema: a positioned YAML document in, a `ProviderProfile` out.
//!
//! Owns which keys exist at each level and what their values may be, and reports every
//! problem of a document as a diagnostic (unknown keys, fields sluice does not implement,
//! policy settings that would have no effect in a profile, invalid names, hosts, ports, paths
//! and binaries). Splitting files into documents and the checks across documents belong to
//! `profile.rs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::policy::diag::{Diagnostics, Location};
use crate::policy::glob::{Glob, HostPattern};
use crate::policy::model::{Binary, BinaryMatcher, PathSelector};
use crate::policy::validate::selector_for;
use crate::policy::yaml::{Kind, Node, Pos, Style, parse_bool, parse_int};

use super::{
    AuthStyle, Category, CredentialName, CredentialSpec, EnvKey, Placement, ProfileEndpoint,
    ProfileId, ProviderProfile, placeholder,
};

const PROFILE_FIELDS: &[&str] = &[
    "id",
    "display_name",
    "description",
    "category",
    "inference_capable",
    "resource_version",
    "annotations",
    "credentials",
    "endpoints",
    "binaries",
];
const PROFILE_UNSUPPORTED: &[(&str, &str)] = &[(
    "discovery",
    "`discovery` (finding credentials on the host) is not supported by sluice yet; set the env vars in sluice's environment or --secrets-file",
)];
const CREDENTIAL_FIELDS: &[&str] = &[
    "name",
    "description",
    "env_vars",
    "required",
    "auth_style",
    "header_name",
    "query_param",
    "path_template",
];
const CREDENTIAL_UNSUPPORTED: &[(&str, &str)] = &[
    (
        "refresh",
        "`refresh` (credential refresh) is not supported by sluice yet",
    ),
    (
        "token_grant",
        "`token_grant` (SPIFFE token grants) is not supported by sluice yet",
    ),
];
const ENDPOINT_FIELDS: &[&str] = &[
    "host",
    "port",
    "ports",
    "path",
    "allow_plaintext_credentials",
];
/// Policy settings: the reference composes profiles into policy entries, sluice does not, so
/// these would be silently without effect; they belong on a policy endpoint.
const ENDPOINT_POLICY_FIELDS: &[&str] = &[
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
    "persisted_queries",
    "graphql_persisted_queries",
    "graphql_max_body_bytes",
];
const ENDPOINT_UNSUPPORTED: &[(&str, &str)] = &[
    (
        "credential_signing",
        "`credential_signing` (SigV4 request signing) is not supported by sluice yet",
    ),
    (
        "signing_service",
        "`signing_service` (SigV4 request signing) is not supported by sluice yet",
    ),
    (
        "signing_region",
        "`signing_region` (SigV4 request signing) is not supported by sluice yet",
    ),
];
const BINARY_FIELDS: &[&str] = &["path", "harness"];

pub(super) struct Reader<'a> {
    pub(super) file: &'a Arc<str>,
    pub(super) diags: &'a mut Diagnostics,
}

impl Reader<'_> {
    fn error(&mut self, pos: Pos, field: &str, message: impl Into<String>) {
        self.diags.error(self.file, pos, field, message);
    }

    fn warning(&mut self, pos: Pos, field: &str, message: impl Into<String>) {
        self.diags.warning(self.file, pos, field, message);
    }

    fn location(&self, pos: Pos) -> Location {
        Location::new(self.file, pos)
    }

    fn expected(&mut self, node: &Node<'_>, field: &str, what: &str) {
        let found = node.type_name();
        self.error(node.pos, field, format!("expected {what}, found {found}"));
    }

    /// The fields of a mapping, checked against the schema; unknown, unsupported and
    /// duplicate keys are errors, the rest come back in order.
    fn fields<'n, 'a>(
        &mut self,
        node: &'n Node<'a>,
        path: &str,
        known: &[&str],
        unsupported: &[(&str, &str)],
        policy_only: &[&str],
    ) -> Option<Vec<(&'n str, &'n Node<'a>)>> {
        let Kind::Map(pairs) = &node.kind else {
            let what = if path.is_empty() {
                "a provider profile"
            } else {
                path
            };
            self.expected(node, path, &format!("a mapping for {what}"));
            return None;
        };
        let mut seen: HashMap<&str, Pos> = HashMap::new();
        let mut out = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            let Kind::Scalar(key, _) = &k.kind else {
                self.error(k.pos, path, "mapping keys must be plain strings");
                continue;
            };
            let field = join(path, key);
            if let Some((_, message)) = unsupported.iter().find(|(name, _)| name == key) {
                self.error(k.pos, &field, *message);
                continue;
            }
            if policy_only.contains(&key.as_ref()) {
                self.error(
                    k.pos,
                    &field,
                    format!(
                        "`{key}` is a policy setting: sluice does not turn provider profiles into network policy, so it would have no effect here; write it on the matching endpoint of a policy file"
                    ),
                );
                continue;
            }
            if !known.contains(&key.as_ref()) {
                self.error(
                    k.pos,
                    &field,
                    format!(
                        "unknown field `{key}`; expected one of: {}",
                        known.join(", ")
                    ),
                );
                continue;
            }
            if let Some(first) = seen.insert(key, k.pos) {
                self.error(
                    k.pos,
                    &field,
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

    fn string(&mut self, node: &Node<'_>, field: &str) -> Option<String> {
        match &node.kind {
            Kind::Scalar(s, _) if !node.is_null() => Some(s.to_string()),
            _ => {
                self.expected(node, field, "a string");
                None
            }
        }
    }

    fn bool(&mut self, node: &Node<'_>, field: &str) -> Option<bool> {
        if let Kind::Scalar(s, Style::Plain) = &node.kind
            && let Some(value) = parse_bool(s)
        {
            return Some(value);
        }
        self.expected(node, field, "`true` or `false`");
        None
    }

    fn int(&mut self, node: &Node<'_>, field: &str) -> Option<i128> {
        if let Kind::Scalar(s, Style::Plain) = &node.kind
            && let Some(value) = parse_int(s)
        {
            return Some(value);
        }
        self.expected(node, field, "an integer");
        None
    }

    fn list<'n, 'a>(&mut self, node: &'n Node<'a>, field: &str) -> Option<&'n [Node<'a>]> {
        match &node.kind {
            Kind::Seq(items) => Some(items),
            _ => {
                self.expected(node, field, "a list");
                None
            }
        }
    }

    /// One document: the profile, or `None` with its problems reported.
    pub(super) fn profile(&mut self, root: &Node<'_>) -> Option<ProviderProfile> {
        let fields = self.fields(root, "", PROFILE_FIELDS, PROFILE_UNSUPPORTED, &[])?;
        let mut ok = true;
        let mut id = None;
        let mut id_seen = false;
        let mut profile = ProviderProfile {
            id: ProfileId(Arc::from("")),
            display_name: None,
            description: None,
            category: Category::Other,
            inference_capable: false,
            resource_version: None,
            annotations: BTreeMap::new(),
            credentials: Vec::new(),
            endpoints: Vec::new(),
            binaries: Vec::new(),
            location: self.location(root.pos),
        };
        let mut credentials_pos = None;
        for (key, value) in fields {
            match key {
                "id" => {
                    id_seen = true;
                    match self.string(value, key) {
                        Some(text) => match ProfileId::new(&text) {
                            Some(valid) => id = Some(valid),
                            None => {
                                self.error(value.pos, key, format!("`{text}` is not a kebab-case id (lower-case letters and digits in words joined by `-`)"));
                                ok = false;
                            }
                        },
                        None => ok = false,
                    }
                }
                "display_name" => profile.display_name = self.optional_string(value, key, &mut ok),
                "description" => profile.description = self.optional_string(value, key, &mut ok),
                "category" => match self.string(value, key) {
                    Some(text) => match Category::parse(&text) {
                        Some(c) => profile.category = c,
                        None => {
                            self.error(value.pos, key, format!("unknown category `{text}`; expected one of: other, inference, agent, source_control, messaging, data, knowledge"));
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                "inference_capable" => match self.bool(value, key) {
                    Some(b) => profile.inference_capable = b,
                    None => ok = false,
                },
                "resource_version" => match self.int(value, key) {
                    Some(n) => match u64::try_from(n) {
                        Ok(n) => profile.resource_version = Some(n),
                        Err(_) => {
                            self.error(
                                value.pos,
                                key,
                                format!("{n} is not a non-negative version"),
                            );
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                "annotations" => match self.annotations(value) {
                    Some(a) => profile.annotations = a,
                    None => ok = false,
                },
                "credentials" => {
                    credentials_pos = Some(value.pos);
                    if !value.is_null() {
                        match self.credentials(value) {
                            Some(c) => profile.credentials = c,
                            None => ok = false,
                        }
                    }
                }
                "endpoints" if !value.is_null() => match self.endpoints(value) {
                    Some(e) => profile.endpoints = e,
                    None => ok = false,
                },
                "binaries" if !value.is_null() => match self.binaries(value) {
                    Some(b) => profile.binaries = b,
                    None => ok = false,
                },
                _ => {}
            }
        }
        if !id_seen {
            self.error(root.pos, "id", "a provider profile needs an `id`");
        }
        if ok && !profile.credentials.is_empty() && profile.endpoints.is_empty() {
            self.error(
                credentials_pos.unwrap_or(root.pos),
                "endpoints",
                "a profile with credentials needs `endpoints`: sluice swaps a secret in only on its profile's endpoints (binding from policy endpoints, `credential_binding`, is not supported yet)",
            );
            ok = false;
        }
        if ok && profile.credentials.is_empty() {
            self.warning(
                root.pos,
                "credentials",
                "the profile declares no credentials, so it has no effect in sluice",
            );
        }
        profile.id = id?;
        ok.then_some(profile)
    }

    fn optional_string(&mut self, node: &Node<'_>, field: &str, ok: &mut bool) -> Option<String> {
        if node.is_null() {
            return None;
        }
        let s = self.string(node, field);
        *ok &= s.is_some();
        s
    }

    fn annotations(&mut self, node: &Node<'_>) -> Option<BTreeMap<String, String>> {
        if node.is_null() {
            return Some(BTreeMap::new());
        }
        let Kind::Map(pairs) = &node.kind else {
            self.expected(node, "annotations", "a mapping of strings to strings");
            return None;
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (k, v) in pairs {
            let key = self.string(k, "annotations");
            let field = join("annotations", key.as_deref().unwrap_or(""));
            let value = self.string(v, &field);
            match (key, value) {
                (Some(key), Some(value)) => {
                    if out.insert(key.clone(), value).is_some() {
                        self.error(k.pos, &field, format!("duplicate annotation `{key}`"));
                        ok = false;
                    }
                }
                _ => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn credentials(&mut self, node: &Node<'_>) -> Option<Vec<CredentialSpec>> {
        let items = self.list(node, "credentials")?;
        let mut out: Vec<CredentialSpec> = Vec::new();
        let mut ok = true;
        // Names as written, valid credentials or not, so that a duplicate is reported even
        // next to other errors.
        let mut names: HashMap<String, Pos> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            let field = format!("credentials[{i}]");
            if let Some(name) = written_name(item) {
                if let Some(first) = names.get(&name) {
                    let message = format!(
                        "credential `{name}` is already defined at line {}",
                        first.line
                    );
                    self.error(item.pos, &join(&field, "name"), message);
                    ok = false;
                    continue;
                }
                names.insert(name, item.pos);
            }
            match self.credential(item, &field) {
                Some(c) => out.push(c),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn credential(&mut self, node: &Node<'_>, path: &str) -> Option<CredentialSpec> {
        let fields = self.fields(node, path, CREDENTIAL_FIELDS, CREDENTIAL_UNSUPPORTED, &[])?;
        let mut ok = true;
        let mut name = None;
        let mut name_seen = false;
        let mut env_vars = None;
        let mut spec = CredentialSpec {
            name: CredentialName(Arc::from("")),
            description: None,
            env_vars: Vec::new(),
            required: false,
            auth_style: None,
            header_name: None,
            query_param: None,
            path_template: None,
            placement: Placement::AnyHeader,
            location: self.location(node.pos),
        };
        for (key, value) in fields {
            let field = join(path, key);
            match key {
                "name" => {
                    name_seen = true;
                    match self.string(value, &field) {
                        Some(text) => match CredentialName::new(&text) {
                            Some(n) => name = Some(n),
                            None => {
                                self.error(value.pos, &field, format!("`{text}` is not a valid credential name (letters, digits, `_`, `.` and `-`, at most 128)"));
                                ok = false;
                            }
                        },
                        None => ok = false,
                    }
                }
                "description" => spec.description = self.optional_string(value, &field, &mut ok),
                "env_vars" => {
                    env_vars = Some(value.pos);
                    match self.env_vars(value, &field) {
                        Some(v) => spec.env_vars = v,
                        None => ok = false,
                    }
                }
                "required" => match self.bool(value, &field) {
                    Some(b) => spec.required = b,
                    None => ok = false,
                },
                "auth_style" => match self.string(value, &field) {
                    Some(text) => match AuthStyle::parse(&text) {
                        Some(s) => spec.auth_style = Some(s),
                        None => {
                            self.error(value.pos, &field, format!("unknown auth_style `{text}`; expected one of: basic, bearer, header, query, path"));
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                "header_name" => match self.string(value, &field) {
                    Some(text) if is_token(&text) => spec.header_name = Some(text),
                    Some(text) => {
                        self.error(
                            value.pos,
                            &field,
                            format!("`{text}` is not a valid HTTP header name"),
                        );
                        ok = false;
                    }
                    None => ok = false,
                },
                "query_param" => match self.string(value, &field) {
                    Some(text) if !text.is_empty() => spec.query_param = Some(text),
                    Some(_) => {
                        self.error(value.pos, &field, "`query_param` must not be empty");
                        ok = false;
                    }
                    None => ok = false,
                },
                "path_template" => match self.string(value, &field) {
                    Some(text) if text.matches("{credential}").count() == 1 => {
                        spec.path_template = Some(text);
                    }
                    Some(text) => {
                        let n = text.matches("{credential}").count();
                        self.error(value.pos, &field, format!("`path_template` must contain `{{credential}}` exactly once (found {n})"));
                        ok = false;
                    }
                    None => ok = false,
                },
                _ => {}
            }
        }
        if !name_seen {
            self.error(node.pos, path, "a credential needs a `name`");
            ok = false;
        }
        if env_vars.is_none() {
            self.error(
                node.pos,
                path,
                "a credential needs `env_vars` (at least one env var name)",
            );
            ok = false;
        }
        match placement(&spec) {
            Ok(p) => spec.placement = p,
            Err(message) => {
                self.error(node.pos, path, message);
                ok = false;
            }
        }
        spec.name = name?;
        ok.then_some(spec)
    }

    fn env_vars(&mut self, node: &Node<'_>, path: &str) -> Option<Vec<EnvKey>> {
        let items = self.list(node, path)?;
        if items.is_empty() {
            self.error(
                node.pos,
                path,
                "`env_vars` must list at least one env var name",
            );
            return None;
        }
        let mut out: Vec<EnvKey> = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let field = format!("{path}[{i}]");
            let Some(text) = self.string(item, &field) else {
                ok = false;
                continue;
            };
            match EnvKey::new(&text) {
                Some(key) if out.contains(&key) => {
                    self.error(item.pos, &field, format!("env var `{key}` is listed twice"));
                    ok = false;
                }
                Some(key) => out.push(key),
                None if placeholder::is_valid_key(&text) => {
                    self.error(item.pos, &field, format!("env var `{text}` is in a namespace reserved for placeholder revisions (`v<digits>_…`) and stable handles (`s<64 hex>_…`)"));
                    ok = false;
                }
                None => {
                    self.error(item.pos, &field, format!("`{text}` is not a valid env var name (letters, digits and `_`, at most {} characters)", placeholder::MAX_KEY_LEN));
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    fn endpoints(&mut self, node: &Node<'_>) -> Option<Vec<ProfileEndpoint>> {
        let items = self.list(node, "endpoints")?;
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.endpoint(item, &format!("endpoints[{i}]")) {
                Some(e) => out.push(e),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn endpoint(&mut self, node: &Node<'_>, path: &str) -> Option<ProfileEndpoint> {
        let fields = self.fields(
            node,
            path,
            ENDPOINT_FIELDS,
            ENDPOINT_UNSUPPORTED,
            ENDPOINT_POLICY_FIELDS,
        )?;
        let mut ok = true;
        let (mut host, mut port, mut ports) = (None, None, None);
        let mut selector = PathSelector::All;
        let mut allow_plaintext = false;
        for (key, value) in fields {
            let field = join(path, key);
            match key {
                "host" => match self.string(value, &field) {
                    Some(text) if text.is_empty() => {
                        self.error(value.pos, &field, "`host` must not be empty");
                        ok = false;
                    }
                    Some(text) => match HostPattern::new(&text) {
                        Ok(p) => host = Some(p),
                        Err(e) => {
                            self.error(value.pos, &field, e.to_string());
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                "port" => match self.port(value, &field) {
                    Some(p) => port = Some((p, value.pos)),
                    None => ok = false,
                },
                "ports" => match self.list(value, &field) {
                    Some([]) => {
                        self.error(value.pos, &field, "`ports` must list at least one port");
                        ok = false;
                    }
                    Some(items) => {
                        let mut list = Vec::new();
                        for (i, item) in items.iter().enumerate() {
                            match self.port(item, &format!("{field}[{i}]")) {
                                Some(p) => list.push(p),
                                None => ok = false,
                            }
                        }
                        ports = Some(list);
                    }
                    None => ok = false,
                },
                "allow_plaintext_credentials" => match self.bool(value, &field) {
                    Some(b) => allow_plaintext = b,
                    None => ok = false,
                },
                "path" => match self.string(value, &field) {
                    Some(text) => match selector_for(&text) {
                        Ok(s) => selector = s,
                        Err(msg) => {
                            self.error(value.pos, &field, msg);
                            ok = false;
                        }
                    },
                    None => ok = false,
                },
                _ => {}
            }
        }
        let mut all_ports = match (port, ports) {
            (Some((_, pos)), Some(_)) => {
                self.error(
                    pos,
                    &join(path, "port"),
                    "`port` and `ports` are both given; write one",
                );
                return None;
            }
            (Some((p, _)), None) => vec![p],
            (None, Some(list)) => list,
            (None, None) => {
                if ok {
                    self.error(node.pos, path, "an endpoint needs `port` or `ports`");
                }
                return None;
            }
        };
        all_ports.sort_unstable();
        all_ports.dedup();
        let Some(host) = host else {
            if ok {
                self.error(node.pos, path, "an endpoint needs a `host`");
            }
            return None;
        };
        ok.then(|| ProfileEndpoint {
            host,
            ports: all_ports,
            selector,
            allow_plaintext,
            location: self.location(node.pos),
        })
    }

    fn port(&mut self, node: &Node<'_>, field: &str) -> Option<u16> {
        let n = self.int(node, field)?;
        match u16::try_from(n) {
            Ok(p) if p != 0 => Some(p),
            _ => {
                self.error(node.pos, field, format!("port {n} is out of range 1-65535"));
                None
            }
        }
    }

    fn binaries(&mut self, node: &Node<'_>) -> Option<Vec<Binary>> {
        let items = self.list(node, "binaries")?;
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let field = format!("binaries[{i}]");
            let path = if let Kind::Map(_) = &item.kind {
                self.binary_object(item, &field)
            } else {
                self.string(item, &field).map(|s| (s, item.pos))
            };
            let Some((source, pos)) = path else {
                ok = false;
                continue;
            };
            match self.binary(source, pos, &field) {
                Some(b) => out.push(b),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// `{path: /usr/bin/gh}`, as the reference also accepts.
    fn binary_object(&mut self, node: &Node<'_>, path: &str) -> Option<(String, Pos)> {
        let fields = self.fields(node, path, BINARY_FIELDS, &[], &[])?;
        let mut out = None;
        for (key, value) in fields {
            let field = join(path, key);
            match key {
                "path" => out = self.string(value, &field).map(|s| (s, value.pos)),
                "harness" if self.bool(value, &field).is_some() => {
                    self.warning(
                        value.pos,
                        &field,
                        "`harness` is deprecated and has no effect",
                    );
                }
                _ => {}
            }
        }
        if out.is_none() {
            self.error(node.pos, path, "a binary needs a `path`");
        }
        out
    }

    /// Same language as policy binaries (spec §13 row 1): a glob only when it contains `*`.
    fn binary(&mut self, source: String, pos: Pos, field: &str) -> Option<Binary> {
        let matcher = if source == "*" {
            self.warning(
                pos,
                field,
                "`*` admits every executable, so it restricts nothing",
            );
            BinaryMatcher::Any
        } else if source.contains('*') {
            match Glob::new(&source, '/') {
                Ok(g) => BinaryMatcher::Glob(g),
                Err(e) => {
                    self.error(pos, field, e.to_string());
                    return None;
                }
            }
        } else {
            if !source.starts_with('/') {
                self.error(
                    pos,
                    field,
                    format!(
                        "`{source}` is not an absolute path, so it can never match an executable"
                    ),
                );
                return None;
            }
            if source.contains(['?', '[', ']', '{', '}']) {
                self.warning(pos, field, format!("`{source}` has glob characters but no `*`; like the reference, sluice reads it as a literal path"));
            }
            BinaryMatcher::Exact(source.clone())
        };
        Some(Binary {
            source,
            matcher,
            location: self.location(pos),
        })
    }
}

/// The `name` scalar of a credential mapping, as written.
fn written_name(node: &Node<'_>) -> Option<String> {
    let Kind::Map(pairs) = &node.kind else {
        return None;
    };
    pairs.iter().find_map(|(k, v)| match (&k.kind, &v.kind) {
        (Kind::Scalar(key, _), Kind::Scalar(name, _)) if key == "name" => Some(name.to_string()),
        _ => None,
    })
}

/// Where a credential goes, from its placement fields; an error for fields that contradict
/// each other or a style without the field it needs.
fn placement(spec: &CredentialSpec) -> Result<Placement, String> {
    let header = spec.header_name.as_ref().map(|h| h.to_ascii_lowercase());
    let query = spec.query_param.clone();
    let template = spec.path_template.as_ref().map(|t| {
        let (before, _) = t.split_once("{credential}").unwrap_or((t.as_str(), ""));
        before.to_string()
    });
    let given: Vec<&str> = [
        ("header_name", header.is_some()),
        ("query_param", query.is_some()),
        ("path_template", template.is_some()),
    ]
    .iter()
    .filter(|(_, set)| *set)
    .map(|(name, _)| *name)
    .collect();
    let only = |allowed: &str| -> Result<(), String> {
        match given.iter().find(|g| **g != allowed) {
            Some(extra) => Err(format!(
                "`{extra}` does not apply to auth_style `{}`",
                spec.auth_style.map_or("", AuthStyle::as_str)
            )),
            None => Ok(()),
        }
    };
    match spec.auth_style {
        Some(AuthStyle::Bearer | AuthStyle::Basic) => {
            only("header_name")?;
            Ok(Placement::Header(
                header.unwrap_or_else(|| "authorization".to_string()),
            ))
        }
        Some(AuthStyle::Header) => {
            only("header_name")?;
            header
                .map(Placement::Header)
                .ok_or_else(|| "auth_style `header` needs `header_name`".to_string())
        }
        Some(AuthStyle::Query) => {
            only("query_param")?;
            query
                .map(Placement::Query)
                .ok_or_else(|| "auth_style `query` needs `query_param`".to_string())
        }
        Some(AuthStyle::Path) => {
            only("path_template")?;
            Ok(Placement::Path(template))
        }
        None => match (header, query, template) {
            (None, None, None) => Ok(Placement::AnyHeader),
            (Some(h), None, None) => Ok(Placement::Header(h)),
            (None, Some(q), None) => Ok(Placement::Query(q)),
            (None, None, Some(t)) => Ok(Placement::Path(Some(t))),
            _ => Err(format!(
                "{} are given together: say where the credential goes with `auth_style`",
                given.join(" and ")
            )),
        },
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// RFC 9110 `token`: what a header name may be.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
