//! The refreshed credentials of `sluice run` at start-up: the refresher of the profiles'
//! refreshed credentials and token grants, or a gateway's tenants' refreshers, each first
//! token asked for before the first load reads it; the token client they share; and the
//! task that swaps each new token into the credentials in force (`keep_refreshed`).

use std::process::ExitCode;
use std::sync::Arc;

use super::RunArgs;

/// Starts refreshing `refresher`'s credentials: each new token (or one expired unreplaced)
/// is swapped into the credentials in force (`Reloader::take_tokens`, no reload), so the
/// redactor learns it and the one it replaces is still scrubbed from responses.
pub(in crate::cli) fn keep_refreshed(
    reloader: &Arc<crate::cli::reload::Reloader>,
    refresher: Option<&crate::credentials::refresh::Refresher>,
    tenants: Option<&crate::cli::tenant_refresh::TenantRefreshers>,
) {
    if refresher.is_none() && tenants.is_none() {
        return;
    }
    let rl = Arc::clone(reloader);
    let changed: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        let rl = Arc::clone(&rl);
        drop(tokio::task::spawn_blocking(move || rl.take_tokens()));
    });
    if let Some(r) = refresher {
        r.spawn(&changed);
    }
    if let Some(t) = tenants {
        t.spawn(&changed);
    }
}

/// A gateway's tenants' refreshers (`None` without `--tenants`), each tenant's first tokens
/// asked for before the first load reads them. Missing material stops sluice.
pub(super) async fn start_tenant_refresh(
    args: &RunArgs,
    sources: &crate::cli::config::Sources,
) -> Result<Option<Arc<crate::cli::tenant_refresh::TenantRefreshers>>, ExitCode> {
    let Some(path) = &sources.tenants else {
        return Ok(None);
    };
    let (client, socket) = token_client(args)?;
    let registry =
        crate::cli::tenant_refresh::TenantRefreshers::new(client, socket, sources.compat);
    if let Err(lines) = registry.prepare(path).await {
        for l in lines {
            eprintln!("sluice: {l}");
        }
        return Err(ExitCode::from(1));
    }
    Ok(Some(Arc::new(registry)))
}

/// The token client (TLS verified with sluice's upstream trust) and the Workload API socket
/// of token grants (sluice's own, never the sandbox's).
fn token_client(
    args: &RunArgs,
) -> Result<
    (
        crate::credentials::refresh::oauth::Client,
        Option<std::path::PathBuf>,
    ),
    ExitCode,
> {
    let tls = match crate::tls::upstream::UpstreamTls::new(&args.upstream_cas) {
        Ok(t) => t.config(crate::tls::upstream::Offer::Http11),
        Err(e) => {
            // A usage error, as when TLS termination reads the same files.
            eprintln!("sluice: --upstream-ca: {e}");
            return Err(ExitCode::from(2));
        }
    };
    let socket = std::env::var(crate::credentials::refresh::token_grant::workload::SOCKET_ENV)
        .ok()
        .and_then(|v| crate::credentials::refresh::token_grant::workload::socket_path(&v));
    Ok((crate::credentials::refresh::oauth::Client::new(tls), socket))
}

/// The refreshing of the profiles' refreshed credentials (`refresh`), their first tokens
/// asked for: `None` when no credential is refreshed (or the profiles do not load: the load
/// reports why). Gateway tenants' are `start_tenant_refresh`'s.
pub(super) async fn start_refresh(
    args: &RunArgs,
    sources: &crate::cli::config::Sources,
) -> Result<Option<Arc<crate::credentials::refresh::Refresher>>, ExitCode> {
    use crate::credentials::refresh::Refresher;
    if sources.tenants.is_some() {
        return Ok(None);
    }
    let Ok(profiles) =
        crate::credentials::profile::load_files_compat(&sources.providers, sources.compat.into())
    else {
        return Ok(None);
    };
    if !profiles
        .profiles
        .iter()
        .flat_map(|p| &p.credentials)
        .any(|c| c.refresh.is_some() || c.token_grant.is_some())
    {
        return Ok(None);
    }
    if let Some(path) = &sources.secrets_file
        && let Err(errors) = crate::credentials::secrets::read_secrets_file(path)
    {
        for e in errors {
            eprintln!("sluice: {e}");
        }
        return Err(ExitCode::from(1));
    }
    if let Some(path) = &sources.secrets_dir
        && let Err(errors) = crate::credentials::secrets_dir::read(path)
    {
        for e in errors {
            eprintln!("sluice: {e}");
        }
        return Err(ExitCode::from(1));
    }
    // Read again on each call: `external` values change while sluice runs.
    let material = crate::cli::tenant_refresh::material_source(
        sources.secrets_file.clone(),
        sources.secrets_dir.clone(),
        |k| std::env::var(k).ok(),
    );
    let (client, socket) = token_client(args)?;
    match Refresher::start(&profiles.profiles, material, client, socket).await {
        Ok(r) => Ok(Some(Arc::new(r))),
        Err(lines) => {
            for l in lines {
                eprintln!("sluice: {l}");
            }
            Err(ExitCode::from(1))
        }
    }
}
