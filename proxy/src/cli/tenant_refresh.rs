//! Refreshed credentials of a gateway's tenants (`--tenants`): each tenant whose provider
//! profiles have `refresh` strategies or `token_grant` gets its own refresher, its material
//! read from that tenant's secrets alone (its `secrets_file`, then its `secrets_dir`, then,
//! for a tenant with neither, sluice's environment, never a proxy password). Tokens are
//! never shared across tenants: the same profile in two tenants is two refreshers, two
//! tokens.
//!
//! Owns the registry of the tenants' refreshers across reloads ([`TenantRefreshers`]): before
//! each load of the tenants file, [`TenantRefreshers::prepare`] reads every tenant's plan
//! and keeps the refresher of a tenant whose plan is unchanged (same name, same digest: no
//! new token is asked for), starts one for a tenant that is new or changed (its first tokens
//! asked for before the load); the load reads each tenant's tokens from it; a load that is
//! swapped in [`commit`](TenantRefreshers::commit)s (the new refreshers' tasks start, those
//! of tenants removed or changed stop), one that is refused [`discard`]s what was prepared.
//! Also the one rule of where a tenant's values come from ([`tenant_env`], [`material_source`]).
//!
//! [`discard`]: TenantRefreshers::discard

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use super::CompatArg;
use crate::credentials::refresh::{Plan, Refresher, Source, Tokens, oauth};
use crate::tenants::file::{self, TenantSpec};

/// A tenant's refresher and the digest of the plan it was started from.
struct Entry {
    digest: [u8; 32],
    refresher: Arc<Refresher>,
}

/// What the refreshers are: in force (the configuration in force reads them), and prepared
/// for the load under way.
#[derive(Default)]
struct State {
    in_force: HashMap<Arc<str>, Entry>,
    next: Option<HashMap<Arc<str>, Entry>>,
}

/// The refreshers of a gateway's tenants, by tenant name.
pub struct TenantRefreshers {
    client: Arc<oauth::Client>,
    /// The Workload API socket of token grants (sluice's own).
    socket: Option<PathBuf>,
    compat: CompatArg,
    state: Mutex<State>,
    /// What a new token runs (set once the reloader exists).
    changed: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

impl std::fmt::Debug for TenantRefreshers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantRefreshers").finish_non_exhaustive()
    }
}

/// Whether sluice's environment holds a non-empty `var` (a tenant's proxy password).
pub fn has_password(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty())
}

/// A value of sluice's environment as a tenant may read it: none for a tenant with its own
/// secrets (`own_file`: a `secrets_file` or `secrets_dir`), never a proxy password.
pub fn tenant_env(own_file: bool, passwords: &[String], key: &str) -> Option<String> {
    (!own_file && !passwords.iter().any(|p| p == key))
        .then(|| std::env::var(key).ok())
        .flatten()
}

/// Where refresh material (and `external` values) are read, each call anew (`external`
/// values change while sluice runs): the secrets file, then the secrets directory, then
/// `env`, as for static secrets.
pub fn material_source(
    file: Option<PathBuf>,
    dir: Option<PathBuf>,
    env: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
) -> Source {
    Arc::new(move |k: &str| {
        let from_file = file
            .as_deref()
            .and_then(|p| crate::credentials::secrets::read_secrets_file(p).ok())
            .and_then(|mut values| values.remove(k));
        let from_dir = || {
            dir.as_deref()
                .and_then(|p| crate::credentials::secrets_dir::read(p).ok())
                .and_then(|mut values| values.remove(k))
        };
        from_file
            .or_else(from_dir)
            .map(|(v, _)| v)
            .or_else(|| env(k))
    })
}

/// The proxy passwords' env var names of `specs` (no tenant reads them).
pub fn passwords(specs: &[TenantSpec]) -> Vec<String> {
    specs
        .iter()
        .filter_map(|t| t.auth.as_ref().map(|a| a.password_env.clone()))
        .collect()
}

impl TenantRefreshers {
    pub fn new(
        client: oauth::Client,
        socket: Option<PathBuf>,
        compat: CompatArg,
    ) -> TenantRefreshers {
        TenantRefreshers {
            client: Arc::new(client),
            socket,
            compat,
            state: Mutex::new(State::default()),
            changed: Mutex::new(None),
        }
    }

    /// Reads the tenants file at `path` and prepares each tenant's refresher for the next
    /// load: the one in force when its plan is unchanged, else a new one with its first
    /// tokens. A file or profile that does not read is left to the load to report. Missing
    /// material refuses, each line naming the tenant.
    pub async fn prepare(&self, path: &str) -> Result<(), Vec<String>> {
        let Ok(specs) = file::read(path, &has_password) else {
            self.set_next(HashMap::new());
            return Ok(());
        };
        let passwords = passwords(&specs);
        let mut next = HashMap::new();
        let mut errors = Vec::new();
        for spec in &specs {
            let Ok(profiles) =
                crate::credentials::profile::load_files_compat(&spec.providers, self.compat.into())
            else {
                continue;
            };
            let own_file = spec.secrets_file.is_some() || spec.secrets_dir.is_some();
            let pw = passwords.clone();
            let material = material_source(
                spec.secrets_file.clone(),
                spec.secrets_dir.clone(),
                move |k| tenant_env(own_file, &pw, k),
            );
            let plan = match Plan::of(&profiles.profiles, &material) {
                Ok(p) if p.is_empty() => continue,
                Ok(p) => p,
                Err(lines) => {
                    errors.extend(
                        lines
                            .into_iter()
                            .map(|l| format!("{}: tenant `{}`: {l}", spec.location, spec.name)),
                    );
                    continue;
                }
            };
            let digest = plan.digest();
            let kept = self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .in_force
                .get(&spec.name)
                .filter(|e| e.digest == digest)
                .map(|e| Arc::clone(&e.refresher));
            let refresher = match kept {
                Some(r) => r,
                None => Arc::new(
                    Refresher::begin(
                        plan,
                        material,
                        Arc::clone(&self.client),
                        self.socket.clone(),
                    )
                    .await,
                ),
            };
            next.insert(Arc::clone(&spec.name), Entry { digest, refresher });
        }
        if !errors.is_empty() {
            self.set_next(HashMap::new());
            return Err(errors);
        }
        self.set_next(next);
        Ok(())
    }

    fn set_next(&self, next: HashMap<Arc<str>, Entry>) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next = Some(next);
    }

    /// The tokens the load under way reads for `tenant` (those prepared; between loads,
    /// those in force).
    pub fn tokens_of(&self, tenant: &str) -> Option<Arc<Tokens>> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .next
            .as_ref()
            .unwrap_or(&state.in_force)
            .get(tenant)
            .map(|e| Arc::clone(&e.refresher.tokens))
    }

    /// The tokens in force of each tenant that has a refresher.
    pub fn in_force(&self) -> Vec<(Arc<str>, Arc<Tokens>)> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .in_force
            .iter()
            .map(|(name, e)| (Arc::clone(name), Arc::clone(&e.refresher.tokens)))
            .collect()
    }

    /// The load that read the prepared refreshers is in force: they are now, their tasks
    /// started (once); those no longer in force (a tenant removed, or given another plan)
    /// stop.
    pub fn commit(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(next) = state.next.take() else {
            return;
        };
        for (name, old) in &state.in_force {
            let kept = next
                .get(name)
                .is_some_and(|e| Arc::ptr_eq(&e.refresher, &old.refresher));
            if !kept {
                old.refresher.stop();
            }
        }
        state.in_force = next;
        let changed = self
            .changed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(changed) = changed {
            for e in state.in_force.values() {
                e.refresher.spawn(&changed);
            }
        }
    }

    /// The load was refused: what was prepared for it is dropped (never started), and the
    /// refreshers in force serve on.
    pub fn discard(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next = None;
    }

    /// Starts the tasks of the refreshers in force, each new token running `changed` (and so
    /// will those a reload starts).
    pub fn spawn(&self, changed: &Arc<dyn Fn() + Send + Sync>) {
        *self.changed.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(changed));
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for e in state.in_force.values() {
            e.refresher.spawn(changed);
        }
    }
}
