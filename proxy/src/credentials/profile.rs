//! Provider profiles (`--providers`): OpenShell's providers-v2 shape (spec §3.1), read into
//! typed values with every problem reported as `FILE:LINE:COL: field: message`.
//!
//! Owns the profile types and the step "profile files → validated `ProviderProfile`s":
//! splitting a file into its YAML documents, reading each with the schema of `schema.rs`
//! (unknown keys and fields sluice does not implement are errors, never silently ignored;
//! kebab-case ids, env var names outside the reserved placeholder namespaces, host patterns,
//! ports, path selectors, binaries) and the checks across files (duplicate ids, an env var
//! claimed twice). Hosts, paths and binaries compile with the policy engine's own matchers
//! (`policy::glob`, `validate::selector_for`), so a profile endpoint means exactly what the
//! same endpoint means in a policy. Each profile with endpoints also comes out as a raw
//! policy entry (`compose`), which the policy loader validates with the policy files
//! (`policy::compose`). It reads no secrets (`secrets.rs`) and decides nothing per request
//! (`binding.rs`).

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use crate::policy::compose::{self, Composed};
use crate::policy::decide::Caller;
use crate::policy::diag::{Diagnostic, Diagnostics, Location, Severity};
use crate::policy::glob::HostPattern;
use crate::policy::model::{Binary, PathSelector};
use crate::policy::raw::{RawBinary, RawEntry, Spanned};
use crate::policy::yaml::{self, Kind, Node, Pos};
use crate::policy::{Compat, Source};

use super::placeholder;

mod schema;

use schema::{ReadProfile, Reader};

// === Names ===

/// A profile `id` (kebab-case).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProfileId(Arc<str>);

/// A credential `name`: what logs, audit events and errors call a credential. Never secret.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CredentialName(Arc<str>);

/// An env var name from a credential's `env_vars`: `[A-Za-z0-9_]+`, not reserved.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EnvKey(Arc<str>);

macro_rules! name_type {
    ($t:ident) => {
        impl $t {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}
name_type!(ProfileId);
name_type!(CredentialName);
name_type!(EnvKey);

impl ProfileId {
    /// `Some` for a kebab-case id: `[a-z0-9]+(-[a-z0-9]+)*`.
    pub fn new(id: &str) -> Option<ProfileId> {
        let ok = !id.is_empty()
            && id.len() <= 128
            && id.split('-').all(|w| {
                !w.is_empty()
                    && w.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            });
        ok.then(|| ProfileId(Arc::from(id)))
    }
}

impl CredentialName {
    /// `Some` for `[A-Za-z0-9_.-]+` of at most 128 characters: names go into logs as is.
    pub fn new(name: &str) -> Option<CredentialName> {
        let ok = !name.is_empty()
            && name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        ok.then(|| CredentialName(Arc::from(name)))
    }
}

impl EnvKey {
    /// `Some` for a valid, unreserved env var name.
    pub fn new(key: &str) -> Option<EnvKey> {
        (placeholder::is_valid_key(key) && !placeholder::is_reserved_key(key))
            .then(|| EnvKey(Arc::from(key)))
    }

    /// The canonical placeholder the sandboxed side receives for this env var.
    pub fn placeholder(&self) -> String {
        placeholder::canonical_for(&self.0)
    }
}

impl Borrow<str> for EnvKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A credential as logs, audit events and errors name it: `profile/name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CredentialRef {
    pub profile: ProfileId,
    pub name: CredentialName,
}

impl fmt::Display for CredentialRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.profile, self.name)
    }
}

// === The validated profile ===

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Category {
    #[default]
    Other,
    Inference,
    Agent,
    SourceControl,
    Messaging,
    Data,
    Knowledge,
}

impl Category {
    /// Accepts `_` and `-` alike (`source_control`, and `source-control` as the reference's
    /// own profile files write it).
    pub fn parse(text: &str) -> Option<Category> {
        Some(match text.replace('-', "_").as_str() {
            "other" => Category::Other,
            "inference" => Category::Inference,
            "agent" => Category::Agent,
            "source_control" => Category::SourceControl,
            "messaging" => Category::Messaging,
            "data" => Category::Data,
            "knowledge" => Category::Knowledge,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Other => "other",
            Category::Inference => "inference",
            Category::Agent => "agent",
            Category::SourceControl => "source_control",
            Category::Messaging => "messaging",
            Category::Data => "data",
            Category::Knowledge => "knowledge",
        }
    }
}

/// Where a credential is meant to go. Like the reference, sluice stores it but injects by
/// placeholder only (spec §3.1): the request says where the secret goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthStyle {
    Basic,
    Bearer,
    Header,
    Query,
    Path,
}

impl AuthStyle {
    pub fn parse(text: &str) -> Option<AuthStyle> {
        Some(match text {
            "basic" => AuthStyle::Basic,
            "bearer" => AuthStyle::Bearer,
            "header" => AuthStyle::Header,
            "query" => AuthStyle::Query,
            "path" => AuthStyle::Path,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AuthStyle::Basic => "basic",
            AuthStyle::Bearer => "bearer",
            AuthStyle::Header => "header",
            AuthStyle::Query => "query",
            AuthStyle::Path => "path",
        }
    }
}

/// Where a credential's placeholder may be swapped, from `auth_style`, `header_name`,
/// `query_param` and `path_template` (sluice's rule; the reference stores these fields and
/// swaps a placeholder wherever it is found).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Nothing declared: any request header, never the path or the query.
    AnyHeader,
    /// This header only (lower-case): `header_name`, else `authorization` for `bearer` and
    /// `basic`.
    Header(String),
    /// The value of this query parameter only.
    Query(String),
    /// The path: where `path_template` (kept whole, `{credential}` once) puts the
    /// placeholder, or, without a template, any path segment.
    Path(Option<String>),
}

/// What `path_template` writes where the credential goes.
pub const TEMPLATE_SLOT: &str = "{credential}";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialSpec {
    pub name: CredentialName,
    pub description: Option<String>,
    /// At least one; the first is the credential's primary name.
    pub env_vars: Vec<EnvKey>,
    pub required: bool,
    pub auth_style: Option<AuthStyle>,
    pub header_name: Option<String>,
    pub query_param: Option<String>,
    /// Contains `{credential}` exactly once.
    pub path_template: Option<String>,
    /// Where the placeholder may be swapped, from the four fields above.
    pub placement: Placement,
    pub location: Location,
}

/// A profile endpoint: where the profile's secrets may be swapped in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileEndpoint {
    pub host: HostPattern,
    /// Sorted, deduplicated, never empty.
    pub ports: Vec<u16>,
    pub selector: PathSelector,
    /// `allow_plaintext_credentials: true`: secrets may be sent to this endpoint over plain
    /// HTTP (a loopback test service). Off by default: a secret travels only inside TLS to an
    /// upstream whose certificate was verified for the host.
    pub allow_plaintext: bool,
    pub location: Location,
}

impl ProfileEndpoint {
    /// `host` lower-case, `path` the canonical path without its query.
    pub fn matches(&self, host: &str, port: u16, path: &str) -> bool {
        self.covers(host, port) && self.selector.is_match(path)
    }

    /// Host and port only (any path).
    pub fn covers(&self, host: &str, port: u16) -> bool {
        self.ports.contains(&port) && self.host.is_match(host)
    }

    /// `host:port,port[path]`, as in policy messages.
    pub fn describe(&self) -> String {
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        format!(
            "{}:{}{}",
            self.host,
            ports.join(","),
            self.selector.as_str()
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderProfile {
    pub id: ProfileId,
    pub display_name: Option<String>,
    pub description: Option<String>,
    pub category: Category,
    pub inference_capable: bool,
    pub resource_version: Option<u64>,
    pub annotations: BTreeMap<String, String>,
    pub credentials: Vec<CredentialSpec>,
    /// Never empty when `credentials` is not.
    pub endpoints: Vec<ProfileEndpoint>,
    /// Empty: any caller. Otherwise the caller or one of its ancestors must match (sluice's
    /// addition: the reference uses profile binaries for policy composition only).
    pub binaries: Vec<Binary>,
    pub location: Location,
}

impl ProviderProfile {
    /// Whether this profile's secrets may be swapped in for `caller`.
    pub fn admits(&self, caller: &Caller<'_>) -> bool {
        self.binaries.is_empty()
            || self.binaries.iter().any(|b| {
                b.matcher.is_match(caller.exe)
                    || caller.ancestors.iter().any(|a| b.matcher.is_match(a))
            })
    }

    /// Whether a request to `host:port` and `path` is inside this profile's endpoints.
    pub fn binds(&self, host: &str, port: u16, path: &str) -> bool {
        self.endpoints.iter().any(|e| e.matches(host, port, path))
    }

    /// Whether a matching endpoint opts in to secrets over plain HTTP.
    pub fn binds_plaintext(&self, host: &str, port: u16, path: &str) -> bool {
        self.endpoints
            .iter()
            .any(|e| e.allow_plaintext && e.matches(host, port, path))
    }

    pub fn placement(&self, index: usize) -> Option<&Placement> {
        self.credentials.get(index).map(|c| &c.placement)
    }

    pub fn credential_ref(&self, index: usize) -> Option<CredentialRef> {
        self.credentials.get(index).map(|c| CredentialRef {
            profile: self.id.clone(),
            name: c.name.clone(),
        })
    }
}

// === Loading ===

/// A successful load: every profile of every file, in file and document order.
#[derive(Debug)]
pub struct LoadedProfiles {
    pub profiles: Vec<ProviderProfile>,
    /// Each profile with endpoints as a policy entry, for `policy::load_files_composed`.
    pub composed: Vec<Composed>,
    pub warnings: Vec<Diagnostic>,
}

/// A failed load: every error and warning of every file, sorted.
#[derive(Debug, thiserror::Error)]
#[error("provider profile load failed with {} error(s)", self.errors().count())]
pub struct ProfileLoadError {
    pub diagnostics: Vec<Diagnostic>,
}

impl ProfileLoadError {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }
}

/// Reads the named files (an unreadable file is a diagnostic like any other) and loads them.
pub fn load_files(paths: &[String]) -> Result<LoadedProfiles, ProfileLoadError> {
    load_files_compat(paths, Compat::Strict)
}

/// `load_files`, reading the endpoints' policy settings under `compat` (as the policy files
/// they compose with are read).
pub fn load_files_compat(
    paths: &[String],
    compat: Compat,
) -> Result<LoadedProfiles, ProfileLoadError> {
    let mut sources = Vec::new();
    let mut diags = Diagnostics::default();
    for path in paths {
        let file: Arc<str> = Arc::from(path.as_str());
        match std::fs::read(path) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => sources.push(Source {
                    name: path.clone(),
                    text,
                }),
                Err(e) => diags.error(
                    &file,
                    Pos::new(0, 0),
                    "",
                    format!("not valid UTF-8 (byte {})", e.utf8_error().valid_up_to()),
                ),
            },
            Err(e) => diags.error(&file, Pos::new(0, 0), "", format!("cannot read: {e}")),
        }
    }
    load_with(&sources, compat, diags)
}

/// Loads profile documents: all-or-nothing, every problem reported.
pub fn load(sources: &[Source]) -> Result<LoadedProfiles, ProfileLoadError> {
    load_with(sources, Compat::Strict, Diagnostics::default())
}

fn load_with(
    sources: &[Source],
    compat: Compat,
    mut diags: Diagnostics,
) -> Result<LoadedProfiles, ProfileLoadError> {
    let mut profiles: Vec<ProviderProfile> = Vec::new();
    let mut composed: Vec<Composed> = Vec::new();
    let mut ids: HashMap<ProfileId, Location> = HashMap::new();
    let mut env_owners: HashMap<EnvKey, (CredentialRef, Location)> = HashMap::new();
    for source in sources {
        let file: Arc<str> = Arc::from(source.name.as_str());
        let mut any = false;
        for (offset, text) in split_documents(&source.text) {
            let mut root = match yaml::parse(text) {
                Ok(Some(root)) => root,
                Ok(None) => continue,
                Err(e) => {
                    let pos = Pos::new(e.pos.line.saturating_add(offset), e.pos.col);
                    diags.error(&file, pos, "", e.message);
                    // The parser cannot resume inside a broken document; later ones may be fine.
                    any = true;
                    continue;
                }
            };
            if root.is_null() {
                continue;
            }
            any = true;
            shift_lines(&mut root, offset);
            let mut reader = Reader {
                file: &file,
                diags: &mut diags,
                compat,
            };
            let Some(read) = reader.profile(&root) else {
                continue;
            };
            if let Some(c) = compose(&file, &read) {
                composed.push(c);
            }
            let profile = read.profile;
            if let Some(first) = ids.get(&profile.id) {
                diags.error(
                    &file,
                    profile.location.pos,
                    "id",
                    format!(
                        "provider profile `{}` is already defined at {first}",
                        profile.id
                    ),
                );
                continue;
            }
            ids.insert(profile.id.clone(), profile.location.clone());
            for (i, credential) in profile.credentials.iter().enumerate() {
                let Some(cref) = profile.credential_ref(i) else {
                    continue;
                };
                for (j, key) in credential.env_vars.iter().enumerate() {
                    if let Some((owner, at)) = env_owners.get(key) {
                        diags.error(
                            &file,
                            credential.location.pos,
                            format!("credentials[{i}].env_vars[{j}]"),
                            format!(
                                "env var `{key}` is already claimed by credential `{owner}` at {at}"
                            ),
                        );
                    } else {
                        env_owners.insert(key.clone(), (cref.clone(), credential.location.clone()));
                    }
                }
            }
            profiles.push(profile);
        }
        if !any {
            diags.warning(
                &file,
                Pos::new(1, 1),
                "",
                "the file holds no provider profile",
            );
        }
    }
    if diags.has_errors() {
        return Err(ProfileLoadError {
            diagnostics: diags.into_sorted(),
        });
    }
    Ok(LoadedProfiles {
        profiles,
        composed,
        warnings: diags.into_sorted(),
    })
}

/// The profile as a policy entry (`policy::compose`): its endpoints and binaries, keyed
/// `_provider_<sanitised id>` at its `id`. `None` for a profile without endpoints (it would
/// grant nothing). On an endpoint of a profile with credentials and no `protocol`, `path`
/// only scopes where the secrets may be swapped in (the binding); as a policy endpoint
/// without `protocol` it would be meaningless, so the composed endpoint leaves it out.
fn compose(file: &Arc<str>, read: &ReadProfile) -> Option<Composed> {
    if read.policy_endpoints.is_empty() {
        return None;
    }
    let credentialed = !read.profile.credentials.is_empty();
    let endpoints = read
        .policy_endpoints
        .iter()
        .map(|ep| {
            let mut ep = ep.clone();
            if credentialed && ep.protocol.is_none() {
                ep.path = None;
            }
            ep
        })
        .collect();
    let binaries = read
        .profile
        .binaries
        .iter()
        .map(|b| RawBinary {
            path: Spanned {
                value: b.source.clone(),
                pos: b.location.pos,
            },
        })
        .collect();
    let id = read.profile.id.as_str();
    Some(Composed {
        file: Arc::clone(file),
        profile: id.to_string(),
        entry: RawEntry {
            key: Spanned {
                value: compose::entry_key(id),
                pos: read.id_pos,
            },
            name: None,
            endpoints,
            binaries,
        },
    })
}

/// Splits a YAML stream into its documents, each with the number of lines before it.
///
/// A line that starts with `---` or `...` followed by a blank or the end of the line is a
/// document marker wherever it appears: YAML 1.2 forbids such a line inside any scalar
/// (`c-forbidden`), so splitting the text there is exact. Each part then goes through the
/// policy engine's one-document parser with its limits.
fn split_documents(text: &str) -> Vec<(u32, &str)> {
    fn marker(line: &str, m: &str) -> Option<bool> {
        let rest = line.strip_prefix(m)?;
        match rest.bytes().next() {
            None => Some(false),
            Some(b' ' | b'\t' | b'\r' | b'\n') => {
                let rest = rest.trim();
                Some(!rest.is_empty() && !rest.starts_with('#'))
            }
            Some(_) => None,
        }
    }
    let mut out = Vec::new();
    let (mut start, mut start_line) = (0usize, 0u32);
    let (mut content, mut started) = (false, false);
    let (mut offset, mut line_no) = (0usize, 0u32);
    for line in text.split_inclusive('\n') {
        if let Some(inline_content) = marker(line, "---") {
            if content {
                out.push((start_line, &text[start..offset]));
            }
            // Comments and directives before the first marker belong to its document; an
            // empty document between two markers is dropped.
            if content || started {
                start = offset;
                start_line = line_no;
            }
            started = true;
            content = inline_content;
        } else if marker(line, "...").is_some() {
            if content {
                out.push((start_line, &text[start..offset + line.len()]));
            }
            start = offset + line.len();
            start_line = line_no + 1;
            content = false;
            started = false;
        } else {
            let t = line.trim();
            if !t.is_empty() && !t.starts_with('#') && !t.starts_with('%') {
                content = true;
            }
        }
        offset += line.len();
        line_no = line_no.saturating_add(1);
    }
    if content {
        out.push((start_line, &text[start..]));
    }
    out
}

fn shift_lines(node: &mut Node<'_>, offset: u32) {
    node.pos.line = node.pos.line.saturating_add(offset);
    match &mut node.kind {
        Kind::Scalar(..) => {}
        Kind::Seq(items) => items.iter_mut().for_each(|n| shift_lines(n, offset)),
        Kind::Map(pairs) => pairs.iter_mut().for_each(|(k, v)| {
            shift_lines(k, offset);
            shift_lines(v, offset);
        }),
    }
}

#[cfg(test)]
mod compose_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn src(name: &str, text: &str) -> Source {
        Source {
            name: name.to_string(),
            text: text.to_string(),
        }
    }

    fn load_str(text: &str) -> Result<LoadedProfiles, Vec<String>> {
        load(&[src("p.yaml", text)])
            .map_err(|e| e.errors().map(ToString::to_string).collect::<Vec<_>>())
    }

    fn errors(text: &str) -> Vec<String> {
        match load_str(text) {
            Ok(_) => panic!("expected errors for:\n{text}"),
            Err(e) => e,
        }
    }

    const GITHUB: &str = "\
id: github
display_name: GitHub
description: GitHub API
category: source-control
inference_capable: false
resource_version: 3
annotations: {team: infra}
credentials:
  - name: api_token
    description: GitHub token
    env_vars: [GITHUB_TOKEN, GH_TOKEN]
    required: true
    auth_style: bearer
    header_name: authorization
endpoints:
  - host: api.github.com
    port: 443
  - host: '*.githubusercontent.com'
    ports: [443, 80, 443]
    path: /repos/**
binaries: [/usr/bin/gh, {path: /usr/bin/git}, /opt/*/bin/git]
";

    #[test]
    fn full_profile() {
        let loaded = load_str(GITHUB).unwrap();
        // Endpoints without `protocol` on a profile with credentials: binding scopes only.
        let fields: Vec<String> = loaded
            .warnings
            .iter()
            .map(|d| format!("{} {}", d.location, d.field))
            .collect();
        assert_eq!(
            fields,
            ["p.yaml:16:5 endpoints[0]", "p.yaml:18:5 endpoints[1]"]
        );
        assert!(
            loaded.warnings[0]
                .message
                .starts_with("no `protocol`: on a profile with credentials")
        );
        let p = &loaded.profiles[0];
        assert_eq!(p.id.as_str(), "github");
        assert_eq!(p.display_name.as_deref(), Some("GitHub"));
        assert_eq!(p.category, Category::SourceControl);
        assert_eq!(p.resource_version, Some(3));
        assert_eq!(p.annotations.get("team").map(String::as_str), Some("infra"));
        let c = &p.credentials[0];
        assert_eq!(c.name.as_str(), "api_token");
        assert_eq!(
            c.env_vars.iter().map(EnvKey::as_str).collect::<Vec<_>>(),
            ["GITHUB_TOKEN", "GH_TOKEN"]
        );
        assert!(c.required);
        assert_eq!(c.auth_style, Some(AuthStyle::Bearer));
        assert_eq!(p.endpoints[1].ports, [80, 443]);
        assert!(p.endpoints[1].matches("raw.githubusercontent.com", 443, "/repos"));
        assert!(p.endpoints[1].matches("raw.githubusercontent.com", 80, "/repos/a/b"));
        assert!(!p.endpoints[1].matches("raw.githubusercontent.com", 443, "/user"));
        assert!(p.endpoints[0].matches("api.github.com", 443, "/anything"));
        assert!(!p.endpoints[0].matches("api.github.com", 80, "/"));
        assert_eq!(p.binaries.len(), 3);
        assert_eq!(p.location.pos, Pos::new(1, 1));
        assert_eq!(c.location.pos, Pos::new(9, 5));
    }

    #[test]
    fn binaries_admit_caller_or_ancestor() {
        let loaded = load_str(GITHUB).unwrap();
        let p = &loaded.profiles[0];
        let none: Vec<String> = Vec::new();
        let caller = |exe, ancestors| Caller {
            exe,
            ancestors,
            cmdline: &[],
        };
        assert!(p.admits(&caller("/usr/bin/gh", &none)));
        assert!(p.admits(&caller("/opt/x/bin/git", &none)));
        assert!(!p.admits(&caller("/usr/bin/python3", &none)));
        let shell = vec!["/bin/bash".to_string(), "/usr/bin/git".to_string()];
        assert!(p.admits(&caller("/usr/bin/ssh", &shell)));
    }

    #[test]
    fn the_shipped_example_loads() {
        let text = include_str!("../../../configs/providers/anthropic.yaml");
        let loaded = load_str(text).unwrap();
        let p = &loaded.profiles[0];
        assert_eq!(p.id.as_str(), "anthropic");
        assert_eq!(p.credentials[0].env_vars[0].as_str(), "ANTHROPIC_API_KEY");
        assert!(p.binds("api.anthropic.com", 443, "/v1/messages"));
        assert!(!p.binds("api.anthropic.com", 443, "/v2/messages"));
    }

    #[test]
    fn multiple_documents_with_positions() {
        let text = "\
# leading comment
%YAML 1.2
---
id: one
credentials:
  - {name: a, env_vars: [A_KEY]}
endpoints: [{host: a.example.com, port: 443}]
---
---
# an empty document above is skipped
id: two
credentials:
  - {name: b, env_vars: [B_KEY]}
endpoints: [{host: b.example.com, port: 443, bogus: 1}]
...
--- {id: three, credentials: [{name: c, env_vars: [C_KEY]}], endpoints: [{host: c.example.com, port: 1}]}
";
        assert_eq!(
            errors(text),
            [
                "p.yaml:14:46: endpoints[0].bogus: unknown field `bogus`; expected one of: host, port, ports, path, protocol, tls, enforcement, access, rules, deny_rules, allowed_ips, allow_encoded_slash, request_body_credential_rewrite, websocket_credential_rewrite, allow_uninspected_credentials, allow_plaintext_credentials"
            ]
        );
        let fixed = text.replace(", bogus: 1", "");
        let loaded = load_str(&fixed).unwrap();
        let ids: Vec<&str> = loaded.profiles.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["one", "two", "three"]);
        assert_eq!(loaded.profiles[1].location.pos, Pos::new(11, 1));
        assert_eq!(loaded.profiles[2].location.pos, Pos::new(16, 5));
    }

    #[test]
    fn split_keeps_markers_inside_text() {
        let parts = split_documents("a: '---x'\nb: |\n  ---\n----\n");
        assert_eq!(parts, [(0, "a: '---x'\nb: |\n  ---\n----\n")]);
        let parts = split_documents("a: 1\n---\nb: 2\n");
        assert_eq!(parts, [(0, "a: 1\n"), (1, "---\nb: 2\n")]);
        assert!(split_documents("# nothing\n---\n...\n").is_empty());
    }

    #[test]
    fn schema_errors_have_positions() {
        let text = "\
id: Bad_Id
category: weird
inference_capable: maybe
discovery: {credentials: [X]}
credentials:
  - name: tok
    env_vars: [OK_KEY, v2_KEY, 'bad-key', OK_KEY]
    auth_style: digest
    header_name: 'x api'
    path_template: /bot/{credential}/{credential}
    refresh: {strategy: oauth2_refresh_token, token_url: 'https://x.example.com/t'}
    token_grant: {token_endpoint: x}
  - name: tok
    env_vars: [OTHER]
  - env_vars: []
endpoints:
  - host: '*.com'
    port: 70000
    path: v1
    protocol: rest
    access: read-only
    credential_signing: sigv4
  - host: a.example.com
    port: 443
    ports: [443]
  - port: 443
binaries: [relative/path, '/usr/bin/[', [x]]
extra: 1
";
        let got = errors(text);
        let want = [
            "p.yaml:1:5: id: `Bad_Id` is not a kebab-case id (lower-case letters and digits in words joined by `-`)",
            "p.yaml:2:11: category: unknown category `weird`; expected one of: other, inference, agent, source_control, messaging, data, knowledge",
            "p.yaml:3:20: inference_capable: expected `true` or `false`, found a string",
            "p.yaml:7:24: credentials[0].env_vars[1]: env var `v2_KEY` is in a namespace reserved for placeholder revisions (`v<digits>_…`) and stable handles (`s<64 hex>_…`)",
            "p.yaml:7:32: credentials[0].env_vars[2]: `bad-key` is not a valid env var name (letters, digits and `_`, at most 256 characters)",
            "p.yaml:7:43: credentials[0].env_vars[3]: env var `OK_KEY` is listed twice",
            "p.yaml:8:17: credentials[0].auth_style: unknown auth_style `digest`; expected one of: basic, bearer, header, query, path",
            "p.yaml:9:18: credentials[0].header_name: `x api` is not a valid HTTP header name",
            "p.yaml:10:20: credentials[0].path_template: `path_template` must contain `{credential}` exactly once (found 2)",
            "p.yaml:11:25: credentials[0].refresh.strategy: `refresh` strategy `oauth2_refresh_token` (credential refresh) is not supported by sluice yet; only `static` is",
            "p.yaml:12:5: credentials[0].token_grant: `token_grant` (SPIFFE token grants) is not supported by sluice yet",
            "p.yaml:13:5: credentials[1].name: credential `tok` is already defined at line 6",
            "p.yaml:15:5: credentials[2]: a credential needs a `name`",
            "p.yaml:15:15: credentials[2].env_vars: `env_vars` must list at least one env var name",
            "p.yaml:17:11: endpoints[0].host: a wildcard host needs at least three labels (`*.com` would match a whole top-level domain)",
            "p.yaml:18:11: endpoints[0].port: port 70000 is out of range 1-65535",
            "p.yaml:19:11: endpoints[0].path: `v1` must start with `/` (or be `**`)",
            "p.yaml:22:5: endpoints[0].credential_signing: `credential_signing` (SigV4 request signing) is not supported by sluice yet",
            "p.yaml:24:11: endpoints[1].port: `port` and `ports` are both given; write one",
            "p.yaml:26:5: endpoints[2]: an endpoint needs a `host`",
            "p.yaml:27:12: binaries[0]: `relative/path` is not an absolute path, so it can never match an executable",
            "p.yaml:27:41: binaries[2]: expected a string, found a list",
            "p.yaml:28:1: extra: unknown field `extra`; expected one of: id, display_name, description, category, inference_capable, resource_version, annotations, discovery, credentials, endpoints, binaries",
        ];
        assert_eq!(got, want, "\n{}", got.join("\n"));
    }

    #[test]
    fn ids_and_env_vars_are_unique_across_files() {
        let a = "id: one\ncredentials: [{name: a, env_vars: [SHARED]}]\nendpoints: [{host: a.example.com, port: 443}]\n";
        let b = "id: one\n---\nid: two\ncredentials:\n  - name: b\n    env_vars: [SHARED]\nendpoints: [{host: b.example.com, port: 443}]\n";
        let err = load(&[src("a.yaml", a), src("b.yaml", b)]).unwrap_err();
        let got: Vec<String> = err.errors().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "b.yaml:1:1: id: provider profile `one` is already defined at a.yaml:1:1",
                "b.yaml:5:5: credentials[0].env_vars[0]: env var `SHARED` is already claimed by credential `one/a` at a.yaml:2:15",
            ]
        );
        assert_eq!(
            err.to_string(),
            "provider profile load failed with 2 error(s)"
        );
    }

    #[test]
    fn credentials_need_endpoints_and_ids_are_required() {
        assert_eq!(
            errors("id: x\ncredentials: [{name: a, env_vars: [A]}]\n"),
            [
                "p.yaml:2:14: endpoints: a profile with credentials needs `endpoints`: sluice swaps a secret in only on its profile's endpoints (binding from policy endpoints, `credential_binding`, is not supported yet)"
            ]
        );
        assert_eq!(
            errors("display_name: X\n"),
            ["p.yaml:1:1: id: a provider profile needs an `id`"]
        );
        assert_eq!(
            errors("- id: x\n"),
            ["p.yaml:1:1: expected a mapping for a provider profile, found a list"]
        );
    }

    #[test]
    fn placement_comes_from_the_placement_fields() {
        let placement = |fields: &str| {
            let text = format!(
                "id: x\ncredentials:\n  - {{name: k, env_vars: [K]{fields}}}\nendpoints: [{{host: a.example.com, port: 443}}]\n"
            );
            load_str(&text).map(|l| l.profiles[0].credentials[0].placement.clone())
        };
        assert_eq!(placement(""), Ok(Placement::AnyHeader));
        assert_eq!(
            placement(", auth_style: bearer"),
            Ok(Placement::Header("authorization".into()))
        );
        assert_eq!(
            placement(", auth_style: basic, header_name: Proxy-Auth"),
            Ok(Placement::Header("proxy-auth".into()))
        );
        assert_eq!(
            placement(", header_name: X-Api-Key"),
            Ok(Placement::Header("x-api-key".into()))
        );
        assert_eq!(
            placement(", query_param: key"),
            Ok(Placement::Query("key".into()))
        );
        assert_eq!(
            placement(", auth_style: path, path_template: '/bot{credential}/x'"),
            Ok(Placement::Path(Some("/bot{credential}/x".into())))
        );
        assert_eq!(placement(", auth_style: path"), Ok(Placement::Path(None)));
        for (fields, error) in [
            (
                ", auth_style: header",
                "auth_style `header` needs `header_name`",
            ),
            (
                ", auth_style: query",
                "auth_style `query` needs `query_param`",
            ),
            (
                ", auth_style: query, query_param: k, header_name: x",
                "`header_name` does not apply to auth_style `query`",
            ),
            (
                ", header_name: x, query_param: k",
                "header_name and query_param are given together: say where the credential goes with `auth_style`",
            ),
        ] {
            assert_eq!(
                placement(fields),
                Err(vec![format!("p.yaml:3:5: credentials[0]: {error}")]),
                "{fields}"
            );
        }
    }

    #[test]
    fn profile_without_credentials_or_endpoints_warns() {
        let loaded = load_str("id: x\ndisplay_name: X\n").unwrap();
        let w: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            w,
            [
                "p.yaml:1:1: warning: the profile declares no credentials and no endpoints, so it has no effect"
            ]
        );
        assert!(loaded.composed.is_empty());
        // With endpoints it is a policy entry, credentials or not.
        let loaded = load_str("id: x\nendpoints: [{host: a.example.com, port: 443}]\n").unwrap();
        assert!(loaded.warnings.is_empty());
        assert_eq!(loaded.composed[0].entry.key.value, "_provider_x");
    }

    #[test]
    fn yaml_syntax_error_in_a_later_document() {
        let text = "id: one\n---\nid: [two\n";
        let got = errors(text);
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("p.yaml:"), "{got:?}");
        let line: u32 = got[0].split(':').nth(1).unwrap().parse().unwrap();
        assert!(line >= 3, "{got:?}");
    }

    #[test]
    fn unreadable_file_is_a_diagnostic() {
        let err = load_files(&["/nonexistent/sluice-profile.yaml".to_string()]).unwrap_err();
        let got: Vec<String> = err.errors().map(ToString::to_string).collect();
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with("/nonexistent/sluice-profile.yaml: cannot read: "),
            "{got:?}"
        );
    }

    #[test]
    fn names() {
        assert!(ProfileId::new("google-vertex-ai").is_some());
        for bad in ["", "A", "a--b", "-a", "a-", "a_b", "a b"] {
            assert!(ProfileId::new(bad).is_none(), "{bad}");
        }
        assert!(CredentialName::new("api_key.v2-x").is_some());
        assert!(CredentialName::new("a b").is_none());
        assert!(EnvKey::new("GH_TOKEN").is_some());
        assert!(EnvKey::new("v1_X").is_none());
        assert_eq!(
            EnvKey::new("K").map(|k| k.placeholder()).as_deref(),
            Some("openshell:resolve:env:K")
        );
    }
}
