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

use sluice_addr::Authority;

use crate::policy::compose::{self, Composed};
use crate::policy::decide::Caller;
use crate::policy::diag::{Diagnostic, Diagnostics, Location, Severity};
use crate::policy::glob::HostPattern;
use crate::policy::model::{Binary, PathSelector};
use crate::policy::raw::{RawBinary, RawEntry, Spanned};
use crate::policy::yaml::{self, Kind, Node, Pos};
use crate::policy::{Compat, Source};

use super::placeholder;

mod placement;
mod refresh_block;
mod schema;
mod token_grant_block;

pub use refresh_block::{DEFAULT_MAX_LIFETIME, DEFAULT_REFRESH_BEFORE, Output, Refresh, Strategy};
pub use token_grant_block::{
    AudienceOverride, DEFAULT_ASSERTION_TYPE, Exchange, JWT_TOKEN_TYPE, TOKEN_EXCHANGE_GRANT,
    TokenGrant, USABLE_TOKEN_TYPES,
};

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
    pub(crate) fn new(id: &str) -> Option<ProfileId> {
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
    pub(crate) fn new(name: &str) -> Option<CredentialName> {
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
pub(super) const TEMPLATE_SLOT: &str = "{credential}";

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
    /// `refresh` with a strategy sluice carries out: its value is a token sluice obtains.
    pub refresh: Option<Refresh>,
    /// Named by another credential's `additional_outputs`: that credential's refresh mints
    /// this value too (an AssumeRole's secret key or session token).
    pub refreshed_by: Option<CredentialName>,
    /// `token_grant`: sluice trades the workload's SPIFFE identity for this credential's
    /// tokens and sets them on matching requests (its `keys` are appended to `env_vars`).
    pub token_grant: Option<TokenGrant>,
    pub location: Location,
}

impl CredentialSpec {
    /// Whether a refresh, this credential's or a sibling's, supplies the value: it is then
    /// never read from the environment or the secrets file directly.
    pub fn is_refreshed(&self) -> bool {
        self.refresh.is_some() || self.refreshed_by.is_some() || self.token_grant.is_some()
    }
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
    /// `dst`'s host lower-case, `path` the canonical path without its query.
    fn matches(&self, dst: &Authority, path: &str) -> bool {
        self.covers(dst) && self.selector.is_match(path)
    }

    /// Host and port only (any path).
    pub(super) fn covers(&self, dst: &Authority) -> bool {
        self.ports.contains(&dst.port()) && self.host.is_match(dst.host())
    }

    /// `host:port,port[path]`, as in policy messages.
    pub fn describe(&self) -> String {
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        // An IPv6 literal in brackets, as before any port (`sluice-addr`).
        format!(
            "{}:{}{}",
            sluice_addr::UriHost(&self.host.to_string()),
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
    pub(super) fn admits(&self, caller: &Caller<'_>) -> bool {
        self.binaries.is_empty() || self.binaries.iter().any(|b| b.admits(caller))
    }

    /// Whether a request to `dst` and `path` is inside this profile's endpoints.
    pub(crate) fn binds(&self, dst: &Authority, path: &str) -> bool {
        self.endpoints.iter().any(|e| e.matches(dst, path))
    }

    /// Whether a matching endpoint opts in to secrets over plain HTTP.
    pub(super) fn binds_plaintext(&self, dst: &Authority, path: &str) -> bool {
        self.endpoints
            .iter()
            .any(|e| e.allow_plaintext && e.matches(dst, path))
    }

    pub(super) fn placement(&self, index: usize) -> Option<&Placement> {
        self.credentials.get(index).map(|c| &c.placement)
    }

    pub(super) fn credential_ref(&self, index: usize) -> Option<CredentialRef> {
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
        let read = crate::config_file::read_text(
            std::path::Path::new(path),
            crate::config_file::Kind::Profiles,
        );
        match read {
            Ok(text) => sources.push(Source {
                name: path.clone(),
                text,
            }),
            Err(e) => diags.error(&file, Pos::new(0, 0), "", e),
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
mod tests;
