//! Credentials: provider profiles, the secrets they name, and the placeholders the sandboxed
//! side uses instead (spec §3). Pure: no sockets; only the loaders read files.
//!
//! The pieces, in the order a request meets them:
//! `profile` (provider profile files → typed profiles), `secrets` (each env var's value, held
//! in zeroized `Secret`s), `binding` (which key may resolve on which host, port, path and
//! caller), `placeholder` (the grammar, and marker detection for refusals), `rewrite`
//! (headers, path segments and query values of a request head, all or nothing) and `body`
//! (the streaming guard for bodies, and the opt-in body rewrite).
//!
//! Per request, the pipeline builds a `RequestScope` (lower-case host, port, canonical path,
//! caller), takes `bindings.scoped(scope)`, calls `rewrite_request` on the canonical target
//! and the headers just before writing upstream, and maps a `CredentialError` to its status,
//! code and finding. A secret never appears in an error, a `Debug` output or a log line.

pub(crate) mod aws_chunks;
pub(crate) mod binding;
pub mod body;
pub mod placeholder;
pub mod policy_binding;
pub mod profile;
pub mod refresh;
pub(crate) mod rewrite;
pub(crate) mod scrub;
pub(crate) mod secrets;
pub(crate) mod secrets_dir;
pub mod sigv4;

use std::path::Path;

pub use binding::{Bindings, Mismatch, RequestScope, Resolution, Resolve, Scoped, Transport};
pub use body::{BodyError, BodyGuard, RewrittenBody, rewrite_body, set_content_length};
pub use profile::{CredentialName, CredentialRef, EnvKey, ProfileId, ProviderProfile};
pub use rewrite::{CredentialError, Injected, Site, head_has_marker, rewrite_request};
pub use scrub::{ScrubError, ScrubSet, Scrubbed, ask_whole_plain_response, scrub_response};
pub use secrets::{Secret, SecretStore, SecretsWarning};

/// Profiles and secrets, ready for requests, and what the operator should be told.
#[derive(Debug)]
pub struct Loaded {
    pub bindings: Bindings,
    /// Profile diagnostics (`FILE:LINE:COL: warning: ...`) and secrets warnings, as lines.
    pub warnings: Vec<String>,
}

/// Why credentials could not be loaded. Every line of `lines()` is worth printing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error(transparent)]
    Profiles(#[from] profile::ProfileLoadError),
    #[error(transparent)]
    Secrets(#[from] secrets::SecretsLoadError),
}

impl LoadError {
    /// One line per problem, for the CLI.
    pub fn lines(&self) -> Vec<String> {
        match self {
            LoadError::Profiles(e) => e.errors().map(ToString::to_string).collect(),
            LoadError::Secrets(e) => e.errors.iter().map(ToString::to_string).collect(),
        }
    }
}

/// Loads `--providers` files and their secrets (from `--secrets-file`, else sluice's
/// environment through `env`). With no profile files, the bindings are empty and every
/// placeholder is unknown.
pub fn load(
    profile_files: &[String],
    env: impl Fn(&str) -> Option<String>,
    secrets_file: Option<&Path>,
) -> Result<Loaded, LoadError> {
    let profiles = profile::load_files(profile_files)?;
    with_profiles(profiles, env, secrets_file)
}

/// `load` for profiles already loaded (by `run`, which composes them into the policy first).
pub fn with_profiles(
    profiles: profile::LoadedProfiles,
    env: impl Fn(&str) -> Option<String>,
    secrets_file: Option<&Path>,
) -> Result<Loaded, LoadError> {
    let secrets = SecretStore::load(&profiles.profiles, env, secrets_file)?;
    let mut warnings: Vec<String> = profiles.warnings.iter().map(ToString::to_string).collect();
    warnings.extend(secrets.warnings.iter().map(ToString::to_string));
    Ok(Loaded {
        bindings: Bindings::new(profiles.profiles, secrets.store),
        warnings,
    })
}

#[cfg(test)]
mod tests;
