//! Loading a gateway's tenants (`sluice run --tenants FILE`): the tenants file
//! (`tenants::file`), then each tenant's policy files, provider profiles and secrets, read
//! and validated the way `--policy`, `--providers` and `--secrets-file` are
//! (`config::load`), all or nothing: one tenant's error refuses the whole load.

use std::path::PathBuf;
use std::sync::Arc;

use super::CompatArg;
use super::config::{self, Sources};
use crate::credentials::ScrubSet;
use crate::tenants::file::{self, TenantSpec};
use crate::tenants::{ProxyAuth, Table, Tenant};

/// A loaded tenants file, ready to be swapped in.
#[derive(Debug)]
pub struct Loaded {
    pub table: Table,
    /// Every tenant's secret values, for the audit redactor.
    pub redactor: ScrubSet,
    /// Warnings of the tenants' policies, profiles and secrets, each line naming its file.
    pub warnings: Vec<String>,
}

/// Reads the tenants file at `path` and everything each tenant names; every error, each
/// naming its file, line and field, when any is wrong.
pub fn load(path: &str, compat: CompatArg) -> Result<Loaded, Vec<String>> {
    let specs = file::read(path, &has_password)
        .map_err(|d| d.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    let mut errors = Vec::new();
    let mut tenants = Vec::new();
    let mut redactor = ScrubSet::default();
    let mut warnings = Vec::new();
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
        match config::load(&tenant_sources(&spec, compat)) {
            Ok(c) => {
                redactor.merge(&c.bindings.redactor());
                warnings.extend(c.policy_warnings.iter().map(ToString::to_string));
                warnings.extend(c.credential_warnings);
                tenants.push(Tenant::new(
                    Arc::clone(&spec.name),
                    spec.sources.clone(),
                    auth,
                    Arc::new(c.policy),
                    Arc::new(c.bindings),
                ));
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
    Ok(Loaded {
        table: Table::new(tenants),
        redactor,
        warnings,
    })
}

/// Every file a change of which is a reason to reload: the tenants file and, as far as it
/// can be read now, each tenant's files.
pub fn files(path: &str) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from(path)];
    if let Ok(specs) = file::read(path, &|_| true) {
        for spec in &specs {
            out.extend(tenant_sources(&spec.clone(), CompatArg::Strict).files());
        }
    }
    out
}

/// Whether sluice's environment holds a non-empty `var` (a tenant's proxy password).
fn has_password(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty())
}

/// A tenant's files, in the shape `--policy`, `--providers` and `--secrets-file` give them.
fn tenant_sources(spec: &TenantSpec, compat: CompatArg) -> Sources {
    Sources {
        policies: spec.policies.clone(),
        providers: spec.providers.clone(),
        secrets_file: spec.secrets_file.clone(),
        compat,
        tenants: None,
    }
}
