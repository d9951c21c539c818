//! `refresh.strategy: external` (the reference's meaning: a process outside the proxy keeps
//! the current value up to date; the proxy mints nothing): sluice re-reads the value and its
//! expiry where that process writes them, and serves the value only until the expiry.
//!
//! The value is the credential's first env var, `<KEY>`; its expiry `<KEY>_EXPIRES_AT`, Unix
//! seconds or `YYYY-MM-DDTHH:MM:SSZ`; both from the secrets file (re-read every second, so a
//! rewrite is taken in within a second) or sluice's environment. Fail-closed: without an
//! expiry, with one that does not parse or has passed, or without a value, the credential is
//! unavailable (`503 credential_refresh_failed`), never served stale. A new value or expiry is
//! taken in by a reload, as a refreshed token is. Errors name keys, never values.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zeroize::Zeroizing;

use super::{Job, Source, Tokens, material_key};

/// How often the value and its expiry are read again.
const POLL: Duration = Duration::from_secs(1);

/// Why the external value cannot be served. Names keys, never values.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExternalError {
    #[error("`{0}` is not set")]
    NoValue(String),
    #[error("`{0}` is not set: an external credential is served only until its expiry")]
    NoExpiry(String),
    #[error("`{0}` is neither Unix seconds nor YYYY-MM-DDTHH:MM:SSZ")]
    BadExpiry(String),
    #[error("the value expired at `{0}` and has not been replaced")]
    Expired(String),
}

/// The current value of `job` and when it expires.
pub(super) fn read(
    job: &Job,
    source: &Source,
) -> Result<(Zeroizing<String>, SystemTime), ExternalError> {
    let Some(primary) = job.keys.first() else {
        return Err(ExternalError::NoValue(String::new()));
    };
    let expiry_key = material_key(primary, "expires_at");
    let text = source(&expiry_key)
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| ExternalError::NoExpiry(expiry_key.clone()))?;
    let expires = parse_expiry(text.trim()).ok_or(ExternalError::BadExpiry(expiry_key.clone()))?;
    if expires <= SystemTime::now() {
        return Err(ExternalError::Expired(expiry_key));
    }
    let value = source(primary.as_str())
        .filter(|v| !v.is_empty())
        .map(Zeroizing::new)
        .ok_or_else(|| ExternalError::NoValue(primary.as_str().to_string()))?;
    Ok((value, expires))
}

fn parse_expiry(text: &str) -> Option<SystemTime> {
    match text.parse::<u64>() {
        Ok(secs) => Some(UNIX_EPOCH + Duration::from_secs(secs)),
        Err(_) => super::sts::parse_time(text),
    }
}

/// Takes `job`'s value in now if it is valid; whether it was.
pub(super) fn take_in(job: &Job, tokens: &Tokens, source: &Source) -> bool {
    match read(job, source) {
        Ok((value, expires)) => {
            tokens.set(&job.keys, &value, expires);
            true
        }
        Err(e) => {
            eprintln!("sluice: credential {}: external value: {e}", job.credential);
            false
        }
    }
}

/// Watches `job`'s value for as long as sluice runs: each change (value or expiry) is taken
/// in, and `changed` runs then and when the value expires unreplaced.
pub(super) async fn watch(
    job: Job,
    tokens: Arc<Tokens>,
    source: Source,
    changed: Arc<dyn Fn() + Send + Sync>,
) {
    let primary = job.keys.first().map(|k| k.as_str().to_string());
    let valid = |tokens: &Tokens| primary.as_deref().is_some_and(|k| tokens.valid(k));
    let mut in_force = valid(&tokens);
    let mut last: Option<(Zeroizing<String>, SystemTime)> = None;
    let mut last_error: Option<ExternalError> = None;
    loop {
        tokio::time::sleep(POLL).await;
        match read(&job, &source) {
            Ok(current) => {
                last_error = None;
                if last.as_ref() != Some(&current) {
                    tokens.set(&job.keys, &current.0, current.1);
                    last = Some(current);
                    in_force = true;
                    changed();
                }
            }
            Err(e) => {
                // Whatever was served before is not served past this: fail closed.
                tokens.revoke(&job.keys);
                if last_error.as_ref() != Some(&e) {
                    eprintln!("sluice: credential {}: external value: {e}", job.credential);
                    last_error = Some(e);
                }
                last = None;
            }
        }
        if in_force && !valid(&tokens) {
            // Expired unreplaced: taken out, so requests get 503, not a stale value.
            in_force = false;
            changed();
        }
    }
}
