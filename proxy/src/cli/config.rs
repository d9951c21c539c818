//! The configuration `sluice run` loads at start and on every reload: the policy files, the
//! provider profiles (composed into `_provider_<id>` entries) and their secrets, or a
//! gateway's tenants file and each tenant's own such files, read and validated whole before
//! anything uses them (all or nothing), the operator's CA when `--ca-cert` and `--ca-key`
//! name one, and the Device Config State Change event that reports each load.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::CompatArg;
use super::tenant_refresh::{self, TenantRefreshers, has_password};
use crate::audit;
use crate::config_file::Kind;
use crate::credentials::{Bindings, ScrubSet};
use crate::listen::hop::Hop;
use crate::policy::{self, Diagnostic, Loaded, Policy};
use crate::tenants::file::{self, TenantSpec};
use crate::tenants::{ProxyAuth, Table, Tenant};
use crate::tls::ca::Ca;

/// Where the configuration comes from (the `run` flags that name files).
#[derive(Clone, Debug)]
pub struct Sources {
    pub policies: Vec<String>,
    pub providers: Vec<String>,
    pub secrets_file: Option<PathBuf>,
    /// `--secrets-dir`: one file per key, read after the secrets file, before the
    /// environment.
    pub secrets_dir: Option<PathBuf>,
    pub compat: CompatArg,
    /// `--tenants`: the gateway's tenants file (then the three above are empty).
    pub tenants: Option<String>,
    /// `--ca-cert` and `--ca-key`: an operator's CA, read at every load (a rotated CA is
    /// taken by a reload).
    pub ca: Option<CaFiles>,
    /// Refreshed credentials' tokens, which their env vars read first.
    pub refresh: Option<Arc<crate::credentials::refresh::Refresher>>,
    /// A gateway's tenants' refreshers (each tenant's tokens its own).
    pub tenant_refresh: Option<Arc<TenantRefreshers>>,
    /// `--tls-cert`, `--tls-key` and `--client-ca` of a running TLS hop: read at every reload
    /// (a renewed certificate is taken by it; at start the hop is loaded on its own).
    pub hop: Option<HopFiles>,
}

/// The files of the TLS proxy hop.
#[derive(Clone, Debug)]
pub struct HopFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// The files of an operator's CA.
#[derive(Clone, Debug)]
pub struct CaFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Sources {
    /// The names an audit event lists: the policy files (or the embedded default's name),
    /// then the provider profile files.
    pub fn names(&self) -> Vec<String> {
        if let Some(t) = &self.tenants {
            // A gateway: the tenants file names everything else.
            let mut names = vec![t.clone()];
            names.extend(self.ca.iter().map(|c| c.cert.display().to_string()));
            return names;
        }
        let mut names = if self.policies.is_empty() {
            vec![policy::DEFAULT_POLICY_NAME.to_string()]
        } else {
            self.policies.clone()
        };
        names.extend(self.providers.iter().cloned());
        names.extend(self.tenants.iter().cloned());
        names.extend(self.ca.iter().map(|c| c.cert.display().to_string()));
        names
    }

    /// Every file a change of which is a reason to reload, with what it is (which sets how
    /// much of it is read).
    pub fn files(&self) -> Vec<(PathBuf, Kind)> {
        let mut files: Vec<(PathBuf, Kind)> = self
            .policies
            .iter()
            .map(|p| (PathBuf::from(p), Kind::Policy))
            .chain(
                self.providers
                    .iter()
                    .map(|p| (PathBuf::from(p), Kind::Profiles)),
            )
            .chain(self.secrets_file.clone().map(|p| (p, Kind::Secrets)))
            .chain(
                self.secrets_dir
                    .iter()
                    .flat_map(|d| crate::credentials::secrets_dir::watched(d))
                    .map(|p| (p, Kind::Secrets)),
            )
            .collect();
        if let Some(t) = &self.tenants {
            files.extend(tenant_files(t));
        }
        if let Some(ca) = &self.ca {
            files.extend([
                (ca.cert.clone(), Kind::Pem),
                (ca.key.clone(), Kind::PrivateKey),
            ]);
        }
        if let Some(hop) = &self.hop {
            files.extend([
                (hop.cert.clone(), Kind::Pem),
                (hop.key.clone(), Kind::PrivateKey),
            ]);
            files.extend(hop.client_ca.clone().map(|p| (p, Kind::Pem)));
        }
        files
    }
}

/// A loaded, validated configuration, ready to be swapped in.
#[derive(Debug)]
pub struct Config {
    pub policy: Policy,
    pub bindings: Bindings,
    /// Policy diagnostics of warning severity.
    pub policy_warnings: Vec<Diagnostic>,
    /// Warnings of the profiles and secrets (and of the tenants' files).
    pub credential_warnings: Vec<String>,
    /// A gateway's tenants (`--tenants`); empty otherwise.
    pub tenants: Table,
    /// Every secret value loaded (the tenants' and their proxy passwords too), for the audit
    /// redactor.
    pub redactor: ScrubSet,
    /// The operator's CA (`--ca-cert`, `--ca-key`); `None`: the ephemeral CA.
    pub ca: Option<Arc<Ca>>,
    /// The TLS hop loaded again (when `Sources::hop` names its files).
    pub hop: Option<Hop>,
}

/// Why a configuration was refused; each line names the file, line and field where known.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot load the provider profiles or their secrets")]
    Credentials(Vec<String>),
    #[error("cannot load the policy: {} error(s)", errors(.0).len())]
    Policy(Vec<Diagnostic>),
    #[error("cannot load the tenants")]
    Tenants(Vec<String>),
    /// The operator's CA files hold no usable CA.
    #[error("cannot load the CA: {0}")]
    Ca(String),
    /// The TLS hop's files hold no usable certificate and key.
    #[error("cannot load the TLS hop: {0}")]
    Hop(String),
}

fn errors(diags: &[Diagnostic]) -> Vec<String> {
    diags
        .iter()
        .filter(|d| d.severity == policy::Severity::Error)
        .map(ToString::to_string)
        .collect()
}

impl Config {
    /// Every policy loaded: the local one and each gateway tenant's.
    pub fn policies(&self) -> impl Iterator<Item = (Option<&str>, &Policy)> {
        let tenants = self
            .tenants
            .tenants()
            .iter()
            .map(|t| (Some(&*t.name), &*t.policy));
        std::iter::once((None, &self.policy)).chain(tenants)
    }
}

impl ConfigError {
    /// Every error, one a line (what the audit event carries).
    pub fn errors(&self) -> Vec<String> {
        match self {
            ConfigError::Credentials(lines) | ConfigError::Tenants(lines) => lines.clone(),
            ConfigError::Policy(diags) => errors(diags),
            ConfigError::Ca(e) | ConfigError::Hop(e) => vec![e.clone()],
        }
    }

    /// Every line to print: for the policy, warnings too.
    pub fn lines(&self) -> Vec<String> {
        match self {
            ConfigError::Credentials(lines) | ConfigError::Tenants(lines) => lines.clone(),
            ConfigError::Policy(diags) => diags.iter().map(ToString::to_string).collect(),
            ConfigError::Ca(e) | ConfigError::Hop(e) => vec![e.clone()],
        }
    }
}

/// Reads and validates everything `sources` names. Secrets come from `--secrets-file`, else
/// from sluice's own environment.
pub fn load(sources: &Sources) -> Result<Config, ConfigError> {
    let tokens = sources.refresh.as_ref().map(|r| Arc::clone(&r.tokens));
    // A key a refresh supplies comes from it alone: never the environment's stale value.
    let env = |k: &str| match &tokens {
        Some(t) if t.manages(k) => t.get(k),
        _ => std::env::var(k).ok(),
    };
    let mut config = load_with_env(sources, &env)?;
    // Each token serves until its expiry, not until the next swap.
    if let Some(t) = &tokens {
        config.bindings.take_tokens(&|k| t.current(k));
    }
    if let Some(files) = &sources.ca {
        let ca = Ca::load(&files.cert, &files.key).map_err(|e| ConfigError::Ca(e.to_string()))?;
        config.ca = Some(Arc::new(ca));
    }
    if let Some(files) = &sources.hop {
        let hop = Hop::load(&files.cert, &files.key, files.client_ca.as_deref())
            .map_err(|e| ConfigError::Hop(e.to_string()))?;
        config.hop = Some(hop);
    }
    Ok(config)
}

/// [`load`], with the values of sluice's environment as `env` gives them.
fn load_with_env(
    sources: &Sources,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let profiles =
        crate::credentials::profile::load_files_compat(&sources.providers, sources.compat.into())
            .map_err(|e| ConfigError::Credentials(e.errors().map(ToString::to_string).collect()))?;
    let loaded = load_policy(&sources.policies, sources.compat, &profiles.composed)
        .map_err(ConfigError::Policy)?;
    // Endpointless profiles are bound where policy endpoints name them (spec §3.4).
    let mut profiles = profiles;
    let bound = crate::credentials::policy_binding::bind_from_policy(
        &mut profiles.profiles,
        &loaded.policy,
    );
    if !bound.errors.is_empty() {
        return Err(ConfigError::Credentials(bound.errors));
    }
    // The directory's values come before the environment's (the secrets file's first).
    let dir = match &sources.secrets_dir {
        Some(d) => crate::credentials::secrets_dir::read(d)
            .map_err(|e| ConfigError::Credentials(e.iter().map(ToString::to_string).collect()))?,
        None => std::collections::HashMap::new(),
    };
    // A refreshed credential's value comes from its refresh alone (as for the secrets
    // file): a directory entry of the same name, maybe stale, is never served for it.
    let refreshed: std::collections::HashSet<String> = profiles
        .profiles
        .iter()
        .flat_map(|p| p.credentials.iter())
        .filter(|c| c.is_refreshed())
        .flat_map(|c| c.env_vars.iter().map(|k| k.as_str().to_string()))
        .collect();
    let env = |k: &str| match refreshed.contains(k) {
        true => env(k),
        false => dir.get(k).map(|(v, _)| v.clone()).or_else(|| env(k)),
    };
    let credentials =
        crate::credentials::with_profiles(profiles, env, sources.secrets_file.as_deref())
            .map_err(|e| ConfigError::Credentials(e.lines()))?;
    let mut redactor = credentials.bindings.redactor();
    let mut credential_warnings = credentials.warnings;
    credential_warnings.extend(bound.warnings);
    let tenants = match &sources.tenants {
        None => Table::default(),
        Some(path) => {
            let loaded = load_tenants(path, sources.compat, sources.tenant_refresh.as_deref())
                .map_err(ConfigError::Tenants)?;
            redactor.merge(&loaded.redactor);
            credential_warnings.extend(loaded.warnings);
            loaded.table
        }
    };
    Ok(Config {
        policy: loaded.policy,
        bindings: credentials.bindings,
        policy_warnings: loaded.warnings,
        credential_warnings,
        tenants,
        redactor,
        ca: None,
        hop: None,
    })
}

/// The Device Config State Change event of one load of `sources`.
pub fn change_event(sources: &Sources, result: &Result<Config, ConfigError>) -> audit::Event {
    audit::Event::PolicyChange(audit::PolicyChange {
        time: SystemTime::now(),
        sources: sources.names(),
        result: match result {
            Ok(c) if c.tenants.is_gateway() => {
                Ok(c.tenants.tenants().iter().fold((0, 0), |(e, p), t| {
                    (e + t.policy.entries().len(), p + t.policy.endpoint_count())
                }))
            }
            Ok(c) => Ok((c.policy.entries().len(), c.policy.endpoint_count())),
            Err(e) => Err(e.errors()),
        },
        hash: None,
        warnings: result.as_ref().map_or(0, |c| c.policy_warnings.len()),
    })
}

/// The policy files (none: the embedded default) with the provider profiles' entries
/// composed in.
pub fn load_policy(
    policies: &[String],
    compat: CompatArg,
    composed: &[policy::Composed],
) -> Result<Loaded, Vec<Diagnostic>> {
    let loaded = policy::load_files_composed(
        policies,
        compat.into(),
        composed,
        &crate::config_file::read_policy,
    );
    match loaded {
        Ok(mut l) => {
            // Policy paths that are symlinks match their targets (spec §2.4).
            l.policy.add_symlink_targets(|p| {
                std::fs::canonicalize(p)
                    .ok()
                    .and_then(|t| t.to_str().map(str::to_string))
            });
            Ok(l)
        }
        Err(e) => Err(e.diagnostics),
    }
}

// === Tenants ===

/// A loaded tenants file, ready to be swapped in.
#[derive(Debug)]
pub struct LoadedTenants {
    pub table: Table,
    /// Every tenant's secret values, for the audit redactor.
    pub redactor: ScrubSet,
    /// Warnings of the tenants' policies, profiles and secrets, each line naming its file.
    pub warnings: Vec<String>,
}

/// A gateway's tenants (`--tenants`): reads the tenants file at `path` (`tenants::file`)
/// and everything each tenant names, the way `--policy`, `--providers` and
/// `--secrets-file` are read ([`load`]), all or nothing; every error, each
/// naming its file, line and field, when any is wrong. A tenant's refreshed credentials take
/// the tokens of its refresher in `refresh` (prepared for this load).
pub fn load_tenants(
    path: &str,
    compat: CompatArg,
    refresh: Option<&TenantRefreshers>,
) -> Result<LoadedTenants, Vec<String>> {
    let specs = file::read(path, &has_password)
        .map_err(|d| d.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    let mut errors = Vec::new();
    let mut tenants = Vec::new();
    let mut redactor = ScrubSet::default();
    let mut warnings = Vec::new();
    // The proxy passwords are in sluice's environment: no tenant's profile may read them.
    let passwords = tenant_refresh::passwords(&specs);
    for spec in specs {
        let auth = match &spec.auth {
            None => None,
            Some(a) => match std::env::var(&a.password_env) {
                Ok(password) if !password.is_empty() => {
                    // Known to the redactor: a password never reaches a log line either.
                    redactor.add(password.as_bytes(), b"[redacted:proxy password]");
                    Some(ProxyAuth::new(a.username.clone(), password.as_bytes()))
                }
                _ => {
                    errors.push(format!(
                        "{}: tenant `{}`: proxy_auth.password_env: the environment variable `{}` is not set or is empty; export the tenant's proxy password in it",
                        a.password_location, spec.name, a.password_env
                    ));
                    None
                }
            },
        };
        // A tenant with a secrets file has its secrets from it alone; one without has them
        // from sluice's environment, but never a proxy password.
        let own_file = spec.secrets_file.is_some() || spec.secrets_dir.is_some();
        // A key the tenant's refresher supplies comes from it alone.
        let tokens = refresh.and_then(|r| r.tokens_of(&spec.name));
        let env = |k: &str| match &tokens {
            Some(t) if t.manages(k) => t.get(k),
            _ => tenant_refresh::tenant_env(own_file, &passwords, k),
        };
        match load_with_env(&tenant_sources(&spec, compat), &env) {
            Ok(c)
                if tokens.is_none()
                    && c.bindings
                        .profiles()
                        .iter()
                        .flat_map(|p| &p.credentials)
                        .any(|cr| cr.is_refreshed()) =>
            {
                // Refused, not left without tokens (a load without the tenants' refreshers).
                errors.push(format!("{}: tenant `{}`: its refreshed credentials (`refresh` other than `static`, or `token_grant`) have no refresher in this load", spec.location, spec.name));
            }
            Ok(mut c) => {
                // Each token serves until its expiry, not until the next swap.
                if let Some(t) = &tokens {
                    c.bindings.take_tokens(&|k| t.current(k));
                }
                redactor.merge(&c.bindings.redactor());
                warnings.extend(c.policy_warnings.iter().map(ToString::to_string));
                warnings.extend(c.credential_warnings);
                tenants.push(
                    Tenant::new(
                        Arc::clone(&spec.name),
                        spec.sources.clone(),
                        auth,
                        Arc::new(c.policy),
                        Arc::new(c.bindings),
                    )
                    .with_certs(spec.certs.iter().map(|(m, _)| m.clone()).collect()),
                );
            }
            Err(e) => {
                errors.push(format!("{}: tenant `{}`: {e}:", spec.location, spec.name));
                errors.extend(e.lines().into_iter().map(|l| format!("  {l}")));
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(LoadedTenants {
        table: Table::new(tenants),
        redactor,
        warnings,
    })
}

/// Every file a change of which is a reason to reload: the tenants file and, as far as it
/// can be read now, each tenant's files.
pub fn tenant_files(path: &str) -> Vec<(PathBuf, Kind)> {
    let mut out = vec![(PathBuf::from(path), Kind::Tenants)];
    if let Ok(specs) = file::read(path, &|_| true) {
        for spec in &specs {
            out.extend(tenant_sources(&spec.clone(), CompatArg::Strict).files());
        }
    }
    out
}

/// A tenant's files, in the shape `--policy`, `--providers` and `--secrets-file` give them.
fn tenant_sources(spec: &TenantSpec, compat: CompatArg) -> Sources {
    Sources {
        policies: spec.policies.clone(),
        providers: spec.providers.clone(),
        secrets_file: spec.secrets_file.clone(),
        secrets_dir: spec.secrets_dir.clone(),
        compat,
        tenants: None,
        ca: None,
        hop: None,
        refresh: None,
        tenant_refresh: None,
    }
}
