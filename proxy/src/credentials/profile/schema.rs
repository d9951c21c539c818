//! The provider profile schema: a positioned YAML document in, a `ProviderProfile` out.
//!
//! Owns which keys exist at each level and what their values may be, and reports every
//! problem of a document as a diagnostic (unknown keys; fields sluice does not implement,
//! named; invalid names, hosts, ports, paths and binaries), with a note for fields that have
//! no effect on enforcement (`discovery`, `refresh: {strategy: static}`). Endpoints are read
//! with the policy endpoint schema (`policy::raw::read_endpoint`) and kept raw for
//! composition. Splitting files into documents and the checks across documents belong to
//! `profile.rs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::policy::Compat;
use crate::policy::diag::{Diagnostics, Location, join_field, map_fields};
use crate::policy::glob::{Glob, HostPattern};
use crate::policy::model::{Binary, BinaryMatcher, PathSelector};
use crate::policy::raw::{RawEndpoint, read_endpoint};
use crate::policy::validate::selector_for;
use crate::policy::yaml::{Kind, Node, Pos, Style, parse_bool, parse_int};

use super::refresh_block::{
    DEFAULT_MAX_LIFETIME, DEFAULT_REFRESH_BEFORE, Output, Refresh, Strategy,
};
use super::token_grant_block::{
    AudienceOverride, DEFAULT_ASSERTION_TYPE, TokenGrant, Written, issuer_of,
};

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
const REFRESH_FIELDS: &[&str] = &[
    "strategy",
    "token_url",
    "scopes",
    "refresh_before_seconds",
    "max_lifetime_seconds",
    "material",
    "additional_outputs",
];
const CREDENTIAL_UNSUPPORTED: &[(&str, &str)] = &[];
const TOKEN_GRANT_FIELDS: &[&str] = &[
    "token_endpoint",
    "audience",
    "jwt_svid_audience",
    "client_assertion_type",
    "scopes",
    "cache_ttl_seconds",
    "audience_overrides",
    "grant",
    "resource",
    "requested_token_type",
];
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

    /// `additional_outputs`: each names a sibling credential (declared, without its own
    /// `refresh`, with the one env var the SigV4 signer reads that value under), which is then
    /// marked as refreshed by the primary; the primary maps to `AWS_ACCESS_KEY_ID`.
    fn co_minted(&mut self, node: &Node<'_>, credentials: &mut [CredentialSpec]) -> bool {
        let mut ok = true;
        let mut marks = Vec::new();
        for (i, c) in credentials.iter().enumerate() {
            let Some(refresh) = &c.refresh else { continue };
            if refresh.strategy != Strategy::AwsStsAssumeRole {
                continue;
            }
            let field = format!("credentials[{i}].refresh.additional_outputs");
            if c.env_vars.len() != 1 || c.env_vars[0].as_str() != Output::PRIMARY_ENV_VAR {
                self.error(node.pos, &format!("credentials[{i}].env_vars"), format!("`aws_sts_assume_role` mints the access key id: credential `{}` must have `env_vars: [AWS_ACCESS_KEY_ID]`", c.name));
                ok = false;
            }
            for output in Output::ALL {
                if !refresh.outputs.iter().any(|(o, _)| *o == output) {
                    self.error(node.pos, &field, format!("`aws_sts_assume_role` needs an output `{}` naming the credential it goes to", output.name()));
                    ok = false;
                }
            }
            for (output, name) in &refresh.outputs {
                let Some(j) = credentials.iter().position(|s| &s.name == name) else {
                    self.error(
                        node.pos,
                        &field,
                        format!(
                            "output `{}` names credential `{name}`, which is not declared",
                            output.name()
                        ),
                    );
                    ok = false;
                    continue;
                };
                let sibling = &credentials[j];
                if sibling.refresh.is_some() || j == i {
                    self.error(node.pos, &field, format!("credential `{name}` receives output `{}`: it must not have its own `refresh`", output.name()));
                    ok = false;
                } else if sibling.env_vars.len() != 1
                    || sibling.env_vars[0].as_str() != output.env_var()
                {
                    self.error(node.pos, &field, format!("credential `{name}` receives output `{}`: it must have `env_vars: [{}]`", output.name(), output.env_var()));
                    ok = false;
                } else {
                    marks.push((j, c.name.clone()));
                }
            }
        }
        for (j, by) in marks {
            credentials[j].refreshed_by = Some(by);
        }
        ok
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

    /// `refresh`: `strategy: static` is what sluice does anyway (a note says so);
    /// `oauth2_refresh_token` and `oauth2_client_credentials` are read into a `Refresh`
    /// (`None` inside for `static`); any other strategy would leave a stale or missing secret
    /// if ignored, so it is refused by name.
    fn refresh(&mut self, node: &Node<'_>, path: &str) -> Option<Option<Refresh>> {
        let fields = self.fields(node, path, REFRESH_FIELDS, &[])?;
        let strategy = fields
            .iter()
            .find(|(k, _)| *k == "strategy")
            .map(|(_, v)| *v);
        let field = join_field(path, "strategy");
        let Some(v) = strategy else {
            self.error(node.pos, path, "`refresh` needs a `strategy`");
            return None;
        };
        let text = self.string(v, &field)?;
        if text == "static" {
            self.warning(
                v.pos,
                &field,
                "`refresh` with `strategy: static` has no effect: sluice reads the secret once, at start",
            );
            return Some(None);
        }
        let Some(strategy) = Strategy::parse(&text) else {
            self.error(
                v.pos,
                &field,
                format!("unknown `refresh` strategy `{text}`; expected one of: static, external, oauth2_refresh_token, oauth2_client_credentials, google_service_account_jwt, aws_sts_assume_role"),
            );
            return None;
        };
        let mut ok = true;
        let mut refresh = Refresh {
            strategy,
            token_url: String::new(),
            scopes: Vec::new(),
            refresh_before: DEFAULT_REFRESH_BEFORE,
            max_lifetime: DEFAULT_MAX_LIFETIME,
            outputs: Vec::new(),
        };
        for (key, value) in fields {
            let field = join_field(path, key);
            match key {
                "token_url" => match self.string(value, &field) {
                    Some(url) if url.starts_with("https://") && url.len() > 8 => {
                        refresh.token_url = url
                    }
                    Some(url) => {
                        self.error(value.pos, &field, format!("`{url}` is not an https:// URL: sluice sends client secrets and refresh tokens only inside TLS"));
                        ok = false;
                    }
                    None => ok = false,
                },
                "scopes" => match self.list(value, &field) {
                    Some(items) => {
                        for (i, item) in items.iter().enumerate() {
                            match self.string(item, &format!("{field}[{i}]")) {
                                Some(s) => refresh.scopes.push(s),
                                None => ok = false,
                            }
                        }
                    }
                    None => ok = false,
                },
                "refresh_before_seconds" | "max_lifetime_seconds" => {
                    match self.int(value, &field) {
                        Some(n)
                            if (0..=86_400 * 366).contains(&n)
                                && (n > 0 || key == "refresh_before_seconds") =>
                        {
                            let d = std::time::Duration::from_secs(
                                u64::try_from(n).unwrap_or_default(),
                            );
                            if key == "max_lifetime_seconds" {
                                refresh.max_lifetime = d;
                            } else {
                                refresh.refresh_before = d;
                            }
                        }
                        Some(n) => {
                            self.error(value.pos, &field, format!("{n} seconds is out of range"));
                            ok = false;
                        }
                        None => ok = false,
                    }
                }
                "additional_outputs" if strategy == Strategy::AwsStsAssumeRole => {
                    match self.outputs(value, &field) {
                        Some(outputs) => refresh.outputs = outputs,
                        None => ok = false,
                    }
                }
                "additional_outputs" => {
                    self.error(
                        value.pos,
                        &field,
                        format!(
                            "`additional_outputs` applies to `aws_sts_assume_role`, not `{text}`"
                        ),
                    );
                    ok = false;
                }
                // Names only: the values come from `<first env var>_<NAME>`.
                "material" => ok &= self.list(value, &field).is_some(),
                _ => {}
            }
        }
        // STS defaults to the region's endpoint; `external` asks no endpoint.
        let needs_url = !matches!(strategy, Strategy::AwsStsAssumeRole | Strategy::External);
        if refresh.token_url.is_empty() && needs_url && ok {
            self.error(
                node.pos,
                path,
                format!("`refresh` strategy `{text}` needs a `token_url`"),
            );
            ok = false;
        }
        ok.then_some(Some(refresh))
    }

    /// `token_grant`: the token endpoint (TLS, or plain HTTP only to a loopback or in-cluster
    /// service host, as the reference allows, with a warning), audiences, scopes, the cache
    /// TTL override and `audience_overrides`.
    fn token_grant(&mut self, node: &Node<'_>, path: &str) -> Option<TokenGrant> {
        let fields = self.fields(node, path, TOKEN_GRANT_FIELDS, &[])?;
        let mut ok = true;
        let mut grant = TokenGrant {
            token_endpoint: String::new(),
            audience: String::new(),
            svid_audience: String::new(),
            assertion_type: DEFAULT_ASSERTION_TYPE.to_string(),
            scopes: Vec::new(),
            cache_ttl: None,
            overrides: Vec::new(),
            keys: Vec::new(),
            exchange: None,
        };
        let mut written = Written::default();
        for (key, value) in fields {
            let field = join_field(path, key);
            match key {
                "token_endpoint" => match self.string(value, &field) {
                    Some(url) if url.starts_with("https://") && url.len() > 8 => {
                        grant.token_endpoint = url;
                    }
                    Some(url) if plain_grant_endpoint(&url) => {
                        self.warning(value.pos, &field, format!("`{url}` is plain HTTP: the workload's JWT-SVID travels unencrypted to it (accepted, as the reference does, only for a loopback or in-cluster service host)"));
                        grant.token_endpoint = url;
                    }
                    Some(url) => {
                        self.error(value.pos, &field, format!("`{url}` is not an https:// URL: sluice sends the workload's JWT-SVID only inside TLS (or to a loopback or in-cluster service host)"));
                        ok = false;
                    }
                    None => ok = false,
                },
                "audience" => grant.audience = self.string(value, &field).unwrap_or_default(),
                "jwt_svid_audience" => {
                    grant.svid_audience = self.string(value, &field).unwrap_or_default();
                }
                "client_assertion_type" => match self.string(value, &field) {
                    Some(t) if !t.trim().is_empty() => {
                        grant.assertion_type = t;
                        written.assertion_type = true;
                    }
                    _ => {}
                },
                "grant" => written.grant = self.string(value, &field),
                "resource" => written.resource = self.string(value, &field),
                "requested_token_type" => {
                    written.requested_token_type = self.string(value, &field);
                }
                "scopes" => match self.strings(value, &field) {
                    Some(s) => grant.scopes = s,
                    None => ok = false,
                },
                "cache_ttl_seconds" => match self.int(value, &field) {
                    Some(0) => {}
                    Some(n) if (1..=86_400).contains(&n) => {
                        grant.cache_ttl = Some(std::time::Duration::from_secs(
                            u64::try_from(n).unwrap_or_default(),
                        ));
                    }
                    Some(n) => {
                        self.error(value.pos, &field, format!("{n} seconds is out of range"));
                        ok = false;
                    }
                    None => ok = false,
                },
                _ => match self.audience_overrides(value, &field) {
                    Some(o) => grant.overrides = o,
                    None => ok = false,
                },
            }
        }
        if grant.token_endpoint.is_empty() && ok {
            self.error(node.pos, path, "`token_grant` needs a `token_endpoint`");
            ok = false;
        }
        if grant.svid_audience.is_empty() {
            grant.svid_audience = issuer_of(&grant.token_endpoint);
        }
        match written.exchange() {
            Ok(exchange) => grant.exchange = exchange,
            Err(problems) => {
                for (key, message) in problems {
                    self.error(node.pos, &join_field(path, key), message);
                }
                ok = false;
            }
        }
        ok.then_some(grant)
    }

    fn strings(&mut self, node: &Node<'_>, field: &str) -> Option<Vec<String>> {
        let items = self.list(node, field)?;
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            out.push(self.string(item, &format!("{field}[{i}]"))?);
        }
        Some(out)
    }

    fn audience_overrides(&mut self, node: &Node<'_>, path: &str) -> Option<Vec<AudienceOverride>> {
        let items = self.list(node, path)?;
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let field = format!("{path}[{i}]");
            let fields = self.fields(
                item,
                &field,
                &["host", "port", "path", "audience", "scopes"],
                &[],
            )?;
            let mut host = None;
            let mut entry = AudienceOverride {
                host: HostPattern::Any,
                port: None,
                path: PathSelector::All,
                path_text: String::new(),
                audience: String::new(),
                scopes: Vec::new(),
            };
            for (key, value) in fields {
                let f = join_field(&field, key);
                match key {
                    "host" => {
                        let text = self.string(value, &f)?;
                        match HostPattern::new(&text.to_ascii_lowercase()) {
                            Ok(h) => host = Some(h),
                            Err(e) => {
                                self.error(value.pos, &f, e.to_string());
                                return None;
                            }
                        }
                    }
                    "port" => match self.int(value, &f).and_then(|n| u16::try_from(n).ok()) {
                        Some(p) if p > 0 => entry.port = Some(p),
                        _ => {
                            self.error(value.pos, &f, "not a port (1-65535)");
                            return None;
                        }
                    },
                    "path" => {
                        let text = self.string(value, &f)?;
                        if !text.is_empty() {
                            match selector_for(&text) {
                                Ok(s) => entry.path = s,
                                Err(msg) => {
                                    self.error(value.pos, &f, msg);
                                    return None;
                                }
                            }
                        }
                        entry.path_text = text;
                    }
                    "audience" => entry.audience = self.string(value, &f)?,
                    _ => entry.scopes = self.strings(value, &f)?,
                }
            }
            let Some(host) = host else {
                self.error(item.pos, &field, "an audience override needs a `host`");
                return None;
            };
            entry.host = host;
            out.push(entry);
        }
        Some(out)
    }

    /// `additional_outputs: [{output, credential}]`, each output once.
    fn outputs(&mut self, node: &Node<'_>, path: &str) -> Option<Vec<(Output, CredentialName)>> {
        let items = self.list(node, path)?;
        let mut out: Vec<(Output, CredentialName)> = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let field = format!("{path}[{i}]");
            let fields = self.fields(item, &field, &["output", "credential"], &[])?;
            let mut output = None;
            let mut credential = None;
            for (key, value) in fields {
                let f = join_field(&field, key);
                let Some(text) = self.string(value, &f) else {
                    ok = false;
                    continue;
                };
                match key {
                    "output" => match Output::parse(&text) {
                        Some(o) if out.iter().any(|(p, _)| *p == o) => {
                            self.error(value.pos, &f, format!("output `{text}` is listed twice"));
                            ok = false;
                        }
                        Some(o) => output = Some(o),
                        None => {
                            self.error(value.pos, &f, format!("`aws_sts_assume_role` has no output `{text}`; it mints `secret_access_key` and `session_token`"));
                            ok = false;
                        }
                    },
                    _ => match CredentialName::new(&text) {
                        Some(n) => credential = Some(n),
                        None => {
                            self.error(
                                value.pos,
                                &f,
                                format!("`{text}` is not a valid credential name"),
                            );
                            ok = false;
                        }
                    },
                }
            }
            match (output, credential) {
                (Some(o), Some(c)) => out.push((o, c)),
                _ if ok => {
                    self.error(
                        item.pos,
                        &field,
                        "an additional output needs `output` and `credential`",
                    );
                    ok = false;
                }
                _ => {}
            }
        }
        ok.then_some(out)
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

/// Whether a token endpoint may be plain HTTP: a loopback host or an in-cluster service name
/// (`<svc>.<ns>.svc`, `<svc>.<ns>.svc.cluster.local`), the reference's rule.
fn plain_grant_endpoint(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    }
    .trim_matches(['[', ']'])
    .trim_end_matches('.')
    .to_ascii_lowercase();
    if host == "localhost" {
        return true;
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let labels: Vec<&str> = host.split('.').collect();
    labels.iter().all(|l| !l.is_empty())
        && ((labels.len() == 3 && labels[2] == "svc")
            || (labels.len() == 5 && labels[2..] == ["svc", "cluster", "local"]))
}

/// The internal key of each grant of each `token_grant` credential, appended to its
/// `env_vars`: `TOKEN_GRANT_<PROFILE>_<CREDENTIAL>_<i>`, upper-cased, `-` and `.` as `_`.
fn grant_keys(id: &ProfileId, credentials: &mut [CredentialSpec]) {
    for c in credentials {
        let Some(grant) = &mut c.token_grant else {
            continue;
        };
        let stem = format!("TOKEN_GRANT_{}_{}", id.as_str(), c.name.as_str())
            .to_ascii_uppercase()
            .replace(['-', '.'], "_");
        grant.keys = (0..=grant.overrides.len())
            .filter_map(|i| EnvKey::new(&format!("{stem}_{i}")))
            .collect();
        c.env_vars.extend(grant.keys.iter().cloned());
    }
}
