//! Refreshed credentials (`refresh`, spec §3.1): a token sluice obtains itself, outside the
//! sandbox, from an OAuth 2.0 token endpoint, before it is needed, and again before it
//! expires.
//!
//! Owns the typed `refresh` block of a credential (`Refresh`), the current tokens
//! (`Tokens`: what the secret store reads a refreshed credential's value from, each token
//! only while it is valid) and the schedule of one credential's refreshes (`run`: one
//! refresh in flight per credential, `refresh_before_seconds` ahead of expiry, never past
//! `max_lifetime_seconds`, a failure retried with backoff while the last good token serves
//! until it expires). Each `material` value comes from sluice's environment or secrets file
//! as `<first env var>_<NAME>`. The token request itself is `oauth.rs` (STS's AssumeRole,
//! `sts.rs`, whose secret key and session token go to the sibling credentials its
//! `additional_outputs` name). Tokens are held zeroized and never logged; errors name
//! credentials, never values.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use zeroize::Zeroizing;

use super::profile::{CredentialRef, EnvKey};
pub use super::profile::{DEFAULT_MAX_LIFETIME, DEFAULT_REFRESH_BEFORE, Output, Refresh, Strategy};

mod external;
mod jwt;
pub mod oauth;
mod sts;
pub mod token_grant;

/// Where material (and `external` values) are read, by env var name: the secrets file, read
/// again on each call, then sluice's environment.
pub type Source = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The material sluice reads for a refresh (each strategy uses its own).
const MATERIAL: [&str; 13] = [
    "client_id",
    "client_secret",
    "refresh_token",
    "client_email",
    "private_key",
    "subject",
    "role_arn",
    "session_name",
    "external_id",
    "aws_region",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
];

/// The longest wait between two attempts after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// The shortest wait before the next refresh (a token that lives less than its margin).
const MIN_WAIT: Duration = Duration::from_millis(500);

/// The env var a material value is read from: `<first env var>_<NAME>`, upper-cased.
pub fn material_key(primary: &EnvKey, name: &str) -> String {
    format!("{}_{}", primary.as_str(), name).to_ascii_uppercase()
}

/// A token and the instant it stops being usable.
struct Token {
    value: Zeroizing<String>,
    expires: SystemTime,
}

/// The current tokens of every refreshed credential, by env key.
#[derive(Default)]
pub struct Tokens {
    by_key: Mutex<HashMap<String, Token>>,
}

impl Tokens {
    /// Whether a refresh supplies `key` (a token now or not): its value then never comes from
    /// anywhere else, so a failed refresh is a `503`, never a stale value.
    pub fn manages(&self, key: &str) -> bool {
        self.by_key
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(key)
    }

    /// Marks `keys` as supplied by a refresh, without a token yet.
    pub(crate) fn manage(&self, keys: &[EnvKey]) {
        let mut map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        for key in keys {
            map.entry(key.as_str().to_string())
                .or_insert_with(|| Token {
                    value: Zeroizing::new(String::new()),
                    expires: SystemTime::UNIX_EPOCH,
                });
        }
    }
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").finish_non_exhaustive()
    }
}

impl Tokens {
    /// The token for `key`, while it is valid.
    pub fn get(&self, key: &str) -> Option<String> {
        let map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(key)
            .filter(|t| SystemTime::now() < t.expires)
            .map(|t| t.value.to_string())
    }

    /// The token for `key` and when it expires, valid or not (`Bindings::take_tokens`: an
    /// expired one is still scrubbed, never served).
    pub fn current(&self, key: &str) -> Option<(String, SystemTime)> {
        let map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(key).map(|t| (t.value.to_string(), t.expires))
    }

    pub(crate) fn set(&self, keys: &[EnvKey], value: &str, expires: SystemTime) {
        let mut map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        for key in keys {
            map.insert(
                key.as_str().to_string(),
                Token {
                    value: Zeroizing::new(value.to_string()),
                    expires,
                },
            );
        }
    }

    /// Ends `keys`' tokens now.
    fn revoke(&self, keys: &[EnvKey]) {
        let mut map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        for key in keys {
            if let Some(t) = map.get_mut(key.as_str()) {
                t.expires = SystemTime::UNIX_EPOCH;
            }
        }
    }

    /// Whether `key` has a token that is still valid.
    pub(crate) fn valid(&self, key: &str) -> bool {
        self.remaining(key).is_some()
    }

    /// How long `key`'s token stays valid.
    fn remaining(&self, key: &str) -> Option<Duration> {
        let map = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(key)
            .and_then(|t| t.expires.duration_since(SystemTime::now()).ok())
    }
}

/// One credential to keep refreshed.
#[derive(Debug)]
pub struct Job {
    pub credential: CredentialRef,
    /// Its env vars: the token is the value of each.
    pub keys: Vec<EnvKey>,
    pub refresh: Refresh,
    /// Material by name (`client_id`, `client_secret`, `refresh_token`, ...).
    pub material: HashMap<String, Zeroizing<String>>,
    /// The env vars of the sibling credential each co-minted value goes to.
    pub outputs: Vec<(Output, Vec<EnvKey>)>,
}

/// Obtains a token for `job` now and stores it; its lifetime, bounded by
/// `max_lifetime_seconds`.
pub async fn refresh_once(
    job: &mut Job,
    tokens: &Tokens,
    client: &oauth::Client,
) -> Result<Duration, oauth::TokenError> {
    let granted = match job.refresh.strategy {
        Strategy::AwsStsAssumeRole => {
            let call = sts::assume_role(client, &job.refresh, &job.material);
            tokio::time::timeout(oauth::TIMEOUT, call)
                .await
                .map_err(|_| oauth::TokenError::Transport {
                    url: job.refresh.token_url.clone(),
                    reason: format!("no answer within {} s", oauth::TIMEOUT.as_secs()),
                })??
        }
        _ => client.request(&job.refresh, &job.material).await?,
    };
    let lifetime = granted
        .expires_in
        .unwrap_or(job.refresh.max_lifetime)
        .min(job.refresh.max_lifetime);
    let expires = SystemTime::now() + lifetime;
    // Every output before the token: a reader never sees a new key with an old secret.
    for (output, keys) in &job.outputs {
        let value = granted
            .outputs
            .iter()
            .find(|(o, _)| o == output)
            .map(|(_, v)| v)
            .ok_or_else(|| oauth::TokenError::Malformed {
                url: job.refresh.token_url.clone(),
            })?;
        tokens.set(keys, value, expires);
    }
    tokens.set(&job.keys, &granted.access_token, expires);
    if let Some(rotated) = granted.refresh_token {
        // A rotating authorization server: the next refresh uses the new one.
        job.material.insert("refresh_token".to_string(), rotated);
    }
    Ok(lifetime)
}

/// Keeps `job` refreshed for as long as sluice runs: the next refresh
/// `refresh_before_seconds` ahead of expiry; a failure retried with backoff (1 s, doubling,
/// at most 60 s) while the last token serves until it expires. `changed` runs after each new
/// token and when the last one expires unreplaced.
pub async fn run(
    mut job: Job,
    tokens: Arc<Tokens>,
    client: Arc<oauth::Client>,
    first_wait: Duration,
    changed: Arc<dyn Fn() + Send + Sync>,
) {
    let mut wait = first_wait;
    let mut backoff = Duration::from_secs(1);
    let primary = job.keys.first().map(|k| k.as_str().to_string());
    // Whether the configuration in force holds a token (the first load took it in).
    let mut in_force = primary.as_deref().is_some_and(|k| tokens.valid(k));
    loop {
        tokio::time::sleep(wait).await;
        match refresh_once(&mut job, &tokens, &client).await {
            Ok(lifetime) => {
                backoff = Duration::from_secs(1);
                wait = lifetime
                    .saturating_sub(job.refresh.refresh_before)
                    .max(MIN_WAIT);
                in_force = true;
                changed();
            }
            Err(e) => {
                eprintln!(
                    "sluice: credential {}: token refresh failed: {e}; retrying in {} s",
                    job.credential,
                    backoff.as_secs()
                );
                let left = primary.as_deref().and_then(|k| tokens.remaining(k));
                if in_force && left.is_none() {
                    // Expired unreplaced: taken out, so requests get 503, not a dead token.
                    in_force = false;
                    changed();
                }
                // The next attempt, or the last token's expiry (to drop it), if sooner.
                wait = left.map_or(backoff, |l| backoff.min(l + MIN_WAIT));
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// What one refresher keeps current, read before any token is asked for: each refreshed
/// credential's job (its material read) and each token grant.
pub struct Plan {
    jobs: Vec<Job>,
    grants: Vec<token_grant::Grant>,
}

impl std::fmt::Debug for Plan {
    /// Never the material's values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan").finish_non_exhaustive()
    }
}

impl Plan {
    /// A job for every refreshed credential of `profiles`, its material read with `material`
    /// (`<first env var>_<NAME>`), and every token grant. Missing material refuses, each line
    /// naming the credential and the key to set.
    pub fn of(profiles: &[super::ProviderProfile], material: &Source) -> Result<Plan, Vec<String>> {
        let mut jobs = Vec::new();
        let mut errors = Vec::new();
        for profile in profiles {
            for (i, c) in profile.credentials.iter().enumerate() {
                let (Some(refresh), Some(credential), Some(primary)) =
                    (&c.refresh, profile.credential_ref(i), c.env_vars.first())
                else {
                    continue;
                };
                let outputs = refresh
                    .outputs
                    .iter()
                    .filter_map(|(output, name)| {
                        let sibling = profile.credentials.iter().find(|s| &s.name == name)?;
                        Some((*output, sibling.env_vars.clone()))
                    })
                    .collect();
                let mut values = HashMap::new();
                for name in MATERIAL {
                    let key = material_key(primary, name);
                    match material(&key) {
                        Some(v) if !v.is_empty() => {
                            values.insert(name.to_string(), Zeroizing::new(v));
                        }
                        _ if refresh.strategy.required_material().contains(&name) => {
                            errors.push(format!("credential `{credential}`: refresh material `{name}` is not set: set {key} where its secrets are read (sluice's environment, --secrets-file or --secrets-dir; for a gateway tenant, its secrets_file or secrets_dir)"));
                        }
                        _ => {}
                    }
                }
                jobs.push(Job {
                    credential,
                    keys: c.env_vars.clone(),
                    refresh: refresh.clone(),
                    material: values,
                    outputs,
                });
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Plan {
            jobs,
            grants: token_grant::grants_of(profiles),
        })
    }

    /// Whether nothing is refreshed.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.grants.is_empty()
    }

    /// A SHA-256 of everything the tokens depend on: each job's credential, env vars,
    /// `refresh` block and material values, each grant. Two plans with the same digest obtain
    /// the same tokens the same way (a reload keeps the refresher; any change starts anew).
    pub fn digest(&self) -> [u8; 32] {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        let mut field = |bytes: &[u8]| {
            ctx.update(&(bytes.len() as u64).to_be_bytes());
            ctx.update(bytes);
        };
        for job in &self.jobs {
            field(job.credential.to_string().as_bytes());
            field(format!("{:?} {:?} {:?}", job.keys, job.refresh, job.outputs).as_bytes());
            let mut names: Vec<&String> = job.material.keys().collect();
            names.sort();
            for name in names {
                field(name.as_bytes());
                field(job.material.get(name).map_or(&[][..], |v| v.as_bytes()));
            }
        }
        for grant in &self.grants {
            field(format!("{grant:?}").as_bytes());
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        out
    }
}

/// The refreshing of one sluice's credentials (or one gateway tenant's): the current tokens,
/// the token client, and the jobs until they are started.
pub struct Refresher {
    pub tokens: Arc<Tokens>,
    client: Arc<oauth::Client>,
    source: Source,
    /// Token grants to keep current, and the Workload API socket they ask.
    grants: Mutex<Vec<(token_grant::Grant, Duration)>>,
    socket: Option<std::path::PathBuf>,
    /// Each job with the wait before its next refresh; taken by `spawn`.
    jobs: Mutex<Vec<(Job, Duration)>>,
    /// The tasks `spawn` started, which `stop` ends.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl std::fmt::Debug for Refresher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refresher").finish_non_exhaustive()
    }
}

impl Refresher {
    /// [`Plan::of`] `profiles`, then [`Refresher::begin`].
    pub async fn start(
        profiles: &[super::ProviderProfile],
        material: Source,
        client: oauth::Client,
        socket: Option<std::path::PathBuf>,
    ) -> Result<Refresher, Vec<String>> {
        let plan = Plan::of(profiles, &material)?;
        Ok(Refresher::begin(plan, material, Arc::new(client), socket).await)
    }

    /// The refresher of `plan`, a first token asked for each credential now (a failure is
    /// printed and retried soon: the credential is unavailable until then).
    pub async fn begin(
        plan: Plan,
        material: Source,
        client: Arc<oauth::Client>,
        socket: Option<std::path::PathBuf>,
    ) -> Refresher {
        let tokens = Arc::new(Tokens::default());
        let mut started = Vec::new();
        for mut job in plan.jobs {
            tokens.manage(&job.keys);
            for (_, keys) in &job.outputs {
                tokens.manage(keys);
            }
            if !job.refresh.strategy.mints() {
                external::take_in(&job, &tokens, &material);
                started.push((job, Duration::ZERO));
                continue;
            }
            let wait = match refresh_once(&mut job, &tokens, &client).await {
                Ok(lifetime) => lifetime
                    .saturating_sub(job.refresh.refresh_before)
                    .max(MIN_WAIT),
                Err(e) => {
                    eprintln!(
                        "sluice: credential {}: first token refresh failed: {e}; retrying",
                        job.credential
                    );
                    Duration::from_secs(1)
                }
            };
            started.push((job, wait));
        }
        // Token grants: each one's first token asked for now (a failure is printed; the task
        // retries).
        let mut grants = Vec::new();
        for grant in plan.grants {
            tokens.manage(std::slice::from_ref(&grant.key));
            let wait = match token_grant::obtain(&grant, socket.as_ref(), &client).await {
                Ok((token, ttl)) => {
                    tokens.set(
                        std::slice::from_ref(&grant.key),
                        &token,
                        SystemTime::now() + ttl,
                    );
                    token_grant::renew_after(ttl)
                }
                Err(e) => {
                    eprintln!(
                        "sluice: credential {}: first token grant failed: {e}; retrying",
                        grant.credential
                    );
                    Duration::from_secs(1)
                }
            };
            grants.push((grant, wait));
        }
        Refresher {
            tokens,
            client,
            source: material,
            grants: Mutex::new(grants),
            socket,
            jobs: Mutex::new(started),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Whether any credential is refreshed.
    pub fn is_empty(&self) -> bool {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
            && self
                .grants
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
    }

    /// Starts one task per credential (once); `changed` runs when a token changes.
    pub fn spawn(&self, changed: &Arc<dyn Fn() + Send + Sync>) {
        let mut tasks = Vec::new();
        let grants =
            std::mem::take(&mut *self.grants.lock().unwrap_or_else(PoisonError::into_inner));
        for (grant, wait) in grants {
            let tokens = Arc::clone(&self.tokens);
            let client = Arc::clone(&self.client);
            let changed = Arc::clone(changed);
            let socket = self.socket.clone();
            let keeper = token_grant::Keeper {
                tokens,
                socket,
                client,
                changed,
            };
            tasks.push(tokio::spawn(keeper.keep(grant, wait)).abort_handle());
        }
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap_or_else(PoisonError::into_inner));
        for (job, wait) in jobs {
            if !job.refresh.strategy.mints() {
                tasks.push(
                    tokio::spawn(external::watch(
                        job,
                        Arc::clone(&self.tokens),
                        Arc::clone(&self.source),
                        Arc::clone(changed),
                    ))
                    .abort_handle(),
                );
                continue;
            }
            tasks.push(
                tokio::spawn(run(
                    job,
                    Arc::clone(&self.tokens),
                    Arc::clone(&self.client),
                    wait,
                    Arc::clone(changed),
                ))
                .abort_handle(),
            );
        }
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(tasks);
    }

    /// Ends every task `spawn` started: no token is asked for again (a gateway tenant removed
    /// or given other material by a reload). The tokens obtained stay readable.
    pub fn stop(&self) {
        for task in std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner))
        {
            task.abort();
        }
    }
}
