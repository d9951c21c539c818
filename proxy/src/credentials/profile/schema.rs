//! The provider profile schema: a positioned YAML document in, a `ProviderProfile` out.
//!
//! Owns which keys exist at each level and what their values may be, and reports every
//! problem of a document as a diagnostic (unknown keys; fields sluice does not implement,
//! named; invalid names, hosts, ports, paths and binaries), with a note for fields that have
//! no effect on enforcement (`discovery`, `refresh: {strategy: static}`). Endpoints are read
//! with the policy endpoint schema (`policy::raw::read_endpoint`) and kept raw for
//! composition. The `refresh` and `token_grant` blocks are read by `schema/refresh.rs` and
//! `schema/token_grant.rs`. Splitting files into documents and the checks across documents
//! belong to `profile.rs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::policy::Compat;
use crate::policy::diag::{Diagnostics, Location, join_field, map_fields};
use crate::policy::glob::{Glob, HostPattern};
use crate::policy::model::{Binary, BinaryMatcher, PathSelector};
use crate::policy::raw::{RawEndpoint, read_endpoint};
use crate::policy::validate::selector_for;
use crate::policy::yaml::{Kind, Node, Pos, Style, parse_bool, parse_int};

mod refresh;
mod token_grant;

use token_grant::grant_keys;

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
    "discovery",
    "credentials",
    "endpoints",
    "binaries",
];
/// What would weaken enforcement if it were ignored: refused, named.
const PROFILE_UNSUPPORTED: &[(&str, &str)] = &[
    (
        "middlewares",
        "`middlewares` (network middlewares) is not supported by sluice yet",
    ),
    (
        "network_middlewares",
        "`network_middlewares` (network middlewares) is not supported by sluice yet",
    ),
];
const CREDENTIAL_FIELDS: &[&str] = &[
    "name",
    "description",
    "env_vars",
    "required",
    "auth_style",
    "header_name",
    "query_param",
    "path_template",
    "refresh",
    "token_grant",
];
const CREDENTIAL_UNSUPPORTED: &[(&str, &str)] = &[];
/// Endpoint fields of sluice's own that a policy endpoint does not have; every other field
/// is read with the policy endpoint schema (`policy::raw::read_endpoint`).
const PROFILE_ENDPOINT_FIELDS: &[&str] = &["allow_plaintext_credentials"];
const BINARY_FIELDS: &[&str] = &["path", "harness"];

/// A document read: the profile, its endpoints in the policy endpoint shape (for
/// composition, in the same order as `profile.endpoints`), and where its `id` is.
pub(super) struct ReadProfile {
    pub(super) profile: ProviderProfile,
    pub(super) policy_endpoints: Vec<RawEndpoint>,
    pub(super) id_pos: Pos,
}

pub(super) struct Reader<'a> {
    pub(super) file: &'a Arc<str>,
    pub(super) diags: &'a mut Diagnostics,
    /// How the endpoints' policy settings are read (as the policy files are).
    pub(super) compat: Compat,
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

    /// The fields of a mapping, checked against the schema (`diag::map_fields`).
    fn fields<'n, 'a>(
        &mut self,
        node: &'n Node<'a>,
        path: &str,
        known: &[&str],
        unsupported: &[(&str, &str)],
    ) -> Option<Vec<(&'n str, &'n Node<'a>)>> {
        let at = (path, "a provider profile");
        map_fields(self.diags, self.file, node, at, known, unsupported)
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

    /// One document: the profile and its endpoints as policy endpoints, or `None` with its
    /// problems reported.
    pub(super) fn profile(&mut self, root: &Node<'_>) -> Option<ReadProfile> {
        let fields = self.fields(root, "", PROFILE_FIELDS, PROFILE_UNSUPPORTED)?;
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
        let mut id_pos = root.pos;
        let mut policy_endpoints = Vec::new();
        for (key, value) in fields {
            match key {
                "id" => {
                    id_seen = true;
                    id_pos = value.pos;
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
                "credentials" if !value.is_null() => match self.credentials(value) {
                    Some(c) => profile.credentials = c,
                    None => ok = false,
                },
                "endpoints" if !value.is_null() => match self.endpoints(value) {
                    Some(e) => {
                        (profile.endpoints, policy_endpoints) = e.into_iter().unzip();
                    }
                    None => ok = false,
                },
                "discovery" => self.warning(
                    value.pos,
                    key,
                    "`discovery` (how the OpenShell CLI finds credentials on your machine) has no effect on enforcement and is ignored; sluice reads each secret from its own environment or --secrets-file",
                ),
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
        if ok && !profile.credentials.is_empty() {
            for (i, ep) in policy_endpoints.iter().enumerate() {
                if ep.protocol.is_none()
                    && !ep
                        .allow_uninspected_credentials
                        .as_ref()
                        .is_some_and(|f| f.value)
                {
                    self.warning(
                        ep.pos,
                        &format!("endpoints[{i}]"),
                        "no `protocol`: on a profile with credentials this endpoint only bounds where its secrets may be swapped in; as a policy entry it admits uninspected tunnels, which sluice refuses for a credentialed host (the reference refuses such a profile when it is attached), so its requests need L7 rules: `protocol: rest` with `access` or `rules` here, or in a policy file",
                    );
                }
            }
        }
        if ok && profile.credentials.is_empty() && profile.endpoints.is_empty() {
            self.warning(
                root.pos,
                "",
                "the profile declares no credentials and no endpoints, so it has no effect",
            );
        }
        profile.id = id?;
        grant_keys(&profile.id, &mut profile.credentials);
        ok.then_some(ReadProfile {
            profile,
            policy_endpoints,
            id_pos,
        })
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
            let field = join_field("annotations", key.as_deref().unwrap_or(""));
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
                    self.error(item.pos, &join_field(&field, "name"), message);
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
        ok &= self.co_minted(node, &mut out);
        ok.then_some(out)
    }

    fn credential(&mut self, node: &Node<'_>, path: &str) -> Option<CredentialSpec> {
        let fields = self.fields(node, path, CREDENTIAL_FIELDS, CREDENTIAL_UNSUPPORTED)?;
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
            refresh: None,
            refreshed_by: None,
            token_grant: None,
            location: self.location(node.pos),
        };
        for (key, value) in fields {
            let field = join_field(path, key);
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
                "refresh" => match self.refresh(value, &field) {
                    Some(r) => spec.refresh = r,
                    None => ok = false,
                },
                "token_grant" => match self.token_grant(value, &field) {
                    Some(g) => spec.token_grant = Some(g),
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
        if env_vars.is_none() && spec.token_grant.is_none() {
            self.error(
                node.pos,
                path,
                "a credential needs `env_vars` (at least one env var name)",
            );
            ok = false;
        }
        match spec.derive_placement() {
            Ok(p) => spec.placement = p,
            Err(message) => {
                self.error(node.pos, path, message);
                ok = false;
            }
        }
        spec.name = name?;
        ok.then_some(spec)
    }

    fn strings(&mut self, node: &Node<'_>, field: &str) -> Option<Vec<String>> {
        let items = self.list(node, field)?;
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            out.push(self.string(item, &format!("{field}[{i}]"))?);
        }
        Some(out)
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

    fn endpoints(&mut self, node: &Node<'_>) -> Option<Vec<(ProfileEndpoint, RawEndpoint)>> {
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

    /// One endpoint: the policy endpoint shape (read by the policy's own schema, kept raw
    /// for composition) plus sluice's `allow_plaintext_credentials`; its host, ports and
    /// path also bind the profile's credentials.
    fn endpoint(&mut self, node: &Node<'_>, path: &str) -> Option<(ProfileEndpoint, RawEndpoint)> {
        let Kind::Map(pairs) = &node.kind else {
            self.expected(node, path, &format!("a mapping for {path}"));
            return None;
        };
        let mut ok = true;
        let errors_before = self.diags.error_count();
        let raw = read_endpoint(
            self.file,
            node,
            path,
            PROFILE_ENDPOINT_FIELDS,
            self.compat,
            self.diags,
        )?;
        let mut allow_plaintext = false;
        for (k, v) in pairs {
            if matches!(&k.kind, Kind::Scalar(key, _) if key == "allow_plaintext_credentials") {
                let field = join_field(path, "allow_plaintext_credentials");
                match self.bool(v, &field) {
                    Some(b) => allow_plaintext = b,
                    None => ok = false,
                }
            }
        }
        ok &= self.diags.error_count() == errors_before;

        let mut host = None;
        match &raw.host {
            Some(h) if h.value.is_empty() => {
                self.error(h.pos, &join_field(path, "host"), "`host` must not be empty");
                ok = false;
            }
            Some(h) => match HostPattern::new(&h.value) {
                Ok(p) => host = Some(p),
                Err(e) => {
                    self.error(h.pos, &join_field(path, "host"), e.to_string());
                    ok = false;
                }
            },
            None => {}
        }
        let mut all_ports = Vec::new();
        match (&raw.port, &raw.ports) {
            (Some(p), Some(_)) => {
                self.error(
                    p.pos,
                    &join_field(path, "port"),
                    "`port` and `ports` are both given; write one",
                );
                return None;
            }
            (Some(p), None) => {
                ok &= self.port(p.value, p.pos, &join_field(path, "port"), &mut all_ports);
            }
            (None, Some(list)) if list.value.is_empty() => {
                self.error(
                    list.pos,
                    &join_field(path, "ports"),
                    "`ports` must list at least one port",
                );
                ok = false;
            }
            (None, Some(list)) => {
                for (i, p) in list.value.iter().enumerate() {
                    ok &= self.port(
                        p.value,
                        p.pos,
                        &format!("{path}.ports[{i}]"),
                        &mut all_ports,
                    );
                }
            }
            (None, None) => {
                if ok && !raw.unreadable.iter().any(|f| *f == "port" || *f == "ports") {
                    self.error(node.pos, path, "an endpoint needs `port` or `ports`");
                }
                return None;
            }
        }
        let mut selector = PathSelector::All;
        if let Some(p) = &raw.path {
            match selector_for(&p.value) {
                Ok(s) => selector = s,
                Err(msg) => {
                    self.error(p.pos, &join_field(path, "path"), msg);
                    ok = false;
                }
            }
        }
        all_ports.sort_unstable();
        all_ports.dedup();
        let Some(host) = host else {
            if ok && !raw.unreadable.contains(&"host") {
                self.error(node.pos, path, "an endpoint needs a `host`");
            }
            return None;
        };
        ok.then(|| {
            (
                ProfileEndpoint {
                    host,
                    ports: all_ports,
                    selector,
                    allow_plaintext,
                    location: self.location(node.pos),
                },
                raw,
            )
        })
    }

    /// Pushes `n` when it is a port; reports it and returns false otherwise.
    fn port(&mut self, n: i128, pos: Pos, field: &str, out: &mut Vec<u16>) -> bool {
        match u16::try_from(n) {
            Ok(p) if p != 0 => {
                out.push(p);
                true
            }
            _ => {
                self.error(pos, field, format!("port {n} is out of range 1-65535"));
                false
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
        let fields = self.fields(node, path, BINARY_FIELDS, &[])?;
        let mut out = None;
        for (key, value) in fields {
            let field = join_field(path, key);
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

/// RFC 9110 `token`: what a header name may be.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
