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
//! as `<first env var>_<NAME>`. The token request itself is `oauth.rs`. Tokens are held
//! zeroized and never logged; errors name credentials, never values.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use zeroize::Zeroizing;

use super::profile::{CredentialRef, EnvKey};
pub use super::profile::{DEFAULT_MAX_LIFETIME, DEFAULT_REFRESH_BEFORE, Refresh, Strategy};

mod jwt;
pub mod oauth;

/// The material sluice reads for a refresh (each strategy uses its own).
const MATERIAL: [&str; 6] = [
    "client_id",
    "client_secret",
    "refresh_token",
    "client_email",
    "private_key",
    "subject",
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

    fn set(&self, keys: &[EnvKey], value: &str, expires: SystemTime) {
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

    /// Whether `key` has a token that is still valid.
    fn valid(&self, key: &str) -> bool {
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
}

/// Obtains a token for `job` now and stores it; its lifetime, bounded by
/// `max_lifetime_seconds`.
pub async fn refresh_once(
    job: &mut Job,
    tokens: &Tokens,
    client: &oauth::Client,
) -> Result<Duration, oauth::TokenError> {
    let granted = client.request(&job.refresh, &job.material).await?;
    let lifetime = granted
        .expires_in
        .unwrap_or(job.refresh.max_lifetime)
        .min(job.refresh.max_lifetime);
    tokens.set(
        &job.keys,
        &granted.access_token,
        SystemTime::now() + lifetime,
    );
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

/// The refreshing of one sluice's credentials: the current tokens, the token client, and the
/// jobs until they are started.
pub struct Refresher {
    pub tokens: Arc<Tokens>,
    client: Arc<oauth::Client>,
    /// Each job with the wait before its next refresh; taken by `spawn`.
    jobs: Mutex<Vec<(Job, Duration)>>,
}

impl std::fmt::Debug for Refresher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refresher").finish_non_exhaustive()
    }
}

impl Refresher {
    /// A job for every refreshed credential of `profiles`, its material read with `material`
    /// (`<first env var>_<NAME>`), and a first token asked for now (a failure is printed and
    /// retried soon: the credential is unavailable until then). Missing material refuses.
    pub async fn start(
        profiles: &[super::ProviderProfile],
        material: &dyn Fn(&str) -> Option<String>,
        client: oauth::Client,
    ) -> Result<Refresher, Vec<String>> {
        let mut jobs = Vec::new();
        let mut errors = Vec::new();
        for profile in profiles {
            for (i, c) in profile.credentials.iter().enumerate() {
                let (Some(refresh), Some(credential), Some(primary)) =
                    (&c.refresh, profile.credential_ref(i), c.env_vars.first())
                else {
                    continue;
                };
                let mut values = HashMap::new();
                for name in MATERIAL {
                    let key = material_key(primary, name);
                    match material(&key) {
                        Some(v) if !v.is_empty() => {
                            values.insert(name.to_string(), Zeroizing::new(v));
                        }
                        _ if refresh.strategy.required_material().contains(&name) => {
                            errors.push(format!("credential `{credential}`: refresh material `{name}` is not set: set {key} in sluice's environment or --secrets-file"));
                        }
                        _ => {}
                    }
                }
                jobs.push(Job {
                    credential,
                    keys: c.env_vars.clone(),
                    refresh: refresh.clone(),
                    material: values,
                });
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let tokens = Arc::new(Tokens::default());
        let mut started = Vec::new();
        for mut job in jobs {
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
        Ok(Refresher {
            tokens,
            client: Arc::new(client),
            jobs: Mutex::new(started),
        })
    }

    /// Whether any credential is refreshed.
    pub fn is_empty(&self) -> bool {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Starts one task per credential (once); `changed` runs when a token changes.
    pub fn spawn(&self, changed: &Arc<dyn Fn() + Send + Sync>) {
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap_or_else(PoisonError::into_inner));
        for (job, wait) in jobs {
            tokio::spawn(run(
                job,
                Arc::clone(&self.tokens),
                Arc::clone(&self.client),
                wait,
                Arc::clone(changed),
            ));
        }
    }
}
