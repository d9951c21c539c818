//! Token grants (`token_grant`, spec §3.7): sluice trades the workload's SPIFFE identity for
//! access tokens itself and sets them on the requests that match the profile's endpoints.
//!
//! For each grant of a credential (its default audience, and each `audience_overrides`
//! entry's), a task keeps a token current:
//! 1. a JWT-SVID for `jwt_svid_audience` from the Workload API (`workload.rs`);
//! 2. traded at `token_endpoint` with an RFC 7523 client assertion (`grant_type=
//!    client_credentials`, `client_assertion_type`, `client_assertion`, `audience`, `scope`),
//!    or, with `grant: token_exchange`, in an RFC 8693 token exchange (`subject_token` the
//!    JWT-SVID, `subject_token_type` JWT, `audience`, `resource`, `scope`,
//!    `requested_token_type`; the answer's `issued_token_type` must be a token a header can
//!    carry), over sluice's verified TLS (`refresh::oauth`'s transport);
//! 3. kept for `cache_ttl_seconds`, else `expires_in` (at most an hour; five minutes when the
//!    answer has none) less a 30 s margin, under the grant's internal key, the way a refreshed
//!    token is (so it is bound, placed, scrubbed and redacted like any secret); obtained again
//!    at three quarters of that, a failure retried with backoff while the last token serves.
//!
//! Which grant a request gets (the most specific override) is `TokenGrant::key_for`; setting
//! the header is `pipeline::inject`. Errors name endpoints and codes, never an SVID or token.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use zeroize::Zeroizing;

use super::super::profile::{
    EnvKey, Exchange, JWT_TOKEN_TYPE, TOKEN_EXCHANGE_GRANT, TokenGrant, USABLE_TOKEN_TYPES,
};
use super::Tokens;
use super::oauth;

pub mod workload;

/// A token's lifetime when the answer gives none.
const DEFAULT_TTL: Duration = Duration::from_secs(300);
/// The longest lifetime taken from an answer.
const MAX_TTL: Duration = Duration::from_secs(3600);
/// Kept this much short of the lifetime the answer gives.
const MARGIN: Duration = Duration::from_secs(30);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Why no token could be obtained. Holds no SVID, assertion or token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrantError {
    /// The Workload API did not give a JWT-SVID.
    #[error("SPIFFE Workload API: {0}")]
    Workload(String),
    /// sluice has no Workload API socket.
    #[error(
        "no SPIFFE Workload API socket: set SPIFFE_ENDPOINT_SOCKET (an absolute unix: path) in sluice's environment"
    )]
    NoSocket,
    /// The token endpoint refused or could not be reached.
    #[error(transparent)]
    Endpoint(#[from] oauth::TokenError),
    /// The answer's token is not a token68 value (it could split a header).
    #[error("{0}: the answer's access_token is malformed")]
    Malformed(String),
    /// A token exchange's answer has no `issued_token_type`, or one that is not a token a
    /// header can carry (or not the one requested).
    #[error("{url}: the token exchange issued {issued}, not a token sluice can send ({wanted})")]
    IssuedType {
        url: String,
        issued: String,
        wanted: String,
    },
}

/// One grant to keep current.
#[derive(Debug, Clone)]
pub struct Grant {
    /// `profile/credential`, for messages.
    pub credential: String,
    pub key: EnvKey,
    pub grant: TokenGrant,
    pub audience: String,
    pub scopes: Vec<String>,
}

/// Every grant of `profiles`' `token_grant` credentials.
pub fn grants_of(profiles: &[super::super::ProviderProfile]) -> Vec<Grant> {
    let mut out = Vec::new();
    for p in profiles {
        for c in &p.credentials {
            let Some(g) = &c.token_grant else { continue };
            for (key, audience, scopes) in g.grants() {
                out.push(Grant {
                    credential: format!("{}/{}", p.id.as_str(), c.name.as_str()),
                    key: key.clone(),
                    grant: g.clone(),
                    audience: audience.to_string(),
                    scopes: scopes.to_vec(),
                });
            }
        }
    }
    out
}

/// A token and how long to keep it, for `grant`.
pub async fn obtain(
    grant: &Grant,
    socket: Option<&PathBuf>,
    client: &oauth::Client,
) -> Result<(Zeroizing<String>, Duration), GrantError> {
    let socket = socket.ok_or(GrantError::NoSocket)?;
    let svid = workload::fetch_jwt_svid(socket, &grant.grant.svid_audience).await?;
    let scope = grant.scopes.join(" ");
    let exchange = grant.grant.exchange.as_ref();
    let mut pairs = match exchange {
        None => vec![
            ("grant_type", "client_credentials"),
            ("client_assertion_type", grant.grant.assertion_type.as_str()),
            ("client_assertion", svid.as_str()),
        ],
        Some(_) => vec![
            ("grant_type", TOKEN_EXCHANGE_GRANT),
            ("subject_token", svid.as_str()),
            ("subject_token_type", JWT_TOKEN_TYPE),
        ],
    };
    if !grant.audience.is_empty() {
        pairs.push(("audience", grant.audience.as_str()));
    }
    if let Some(resource) = exchange.and_then(|e| e.resource.as_deref()) {
        pairs.push(("resource", resource));
    }
    if !scope.is_empty() {
        pairs.push(("scope", scope.as_str()));
    }
    if let Some(wanted) = exchange.and_then(|e| e.requested_token_type.as_deref()) {
        pairs.push(("requested_token_type", wanted));
    }
    let form = oauth::encode_form(&pairs);
    let url = &grant.grant.token_endpoint;
    let (status, body) = client.send_form_any(url, form).await?;
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if status != 200 {
        let error = json["error"]
            .as_str()
            .filter(|e| e.len() <= 64 && e.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
            .map(ToString::to_string);
        return Err(oauth::TokenError::Refused {
            url: url.clone(),
            status,
            error,
        }
        .into());
    }
    let token = json["access_token"]
        .as_str()
        .filter(|t| is_token68(t))
        .map(|t| Zeroizing::new(t.to_string()))
        .ok_or_else(|| GrantError::Malformed(url.clone()))?;
    if let Some(e) = exchange {
        check_issued_type(url, &json, e)?;
    }
    let ttl = match grant.grant.cache_ttl {
        Some(ttl) => ttl,
        None => json["expires_in"]
            .as_u64()
            .filter(|s| *s > 0)
            .map_or(DEFAULT_TTL, |s| Duration::from_secs(s).min(MAX_TTL))
            .saturating_sub(MARGIN)
            .max(Duration::from_secs(1)),
    };
    Ok((token, ttl))
}

/// A token exchange's answer issued a token a header can carry: `issued_token_type` (required
/// by RFC 8693 §2.2.1) is the one requested, else one of [`USABLE_TOKEN_TYPES`].
fn check_issued_type(
    url: &str,
    answer: &serde_json::Value,
    exchange: &Exchange,
) -> Result<(), GrantError> {
    let issued = answer["issued_token_type"].as_str();
    let ok = match (&exchange.requested_token_type, issued) {
        (_, None) => false,
        (Some(wanted), Some(issued)) => wanted == issued,
        (None, Some(issued)) => USABLE_TOKEN_TYPES.contains(&issued),
    };
    if ok {
        return Ok(());
    }
    // A short, printable type only (the answer is not trusted to be either).
    let issued = issued
        .filter(|t| t.len() <= 80 && t.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(|| "no issued_token_type".to_string(), |t| format!("`{t}`"));
    let wanted = match &exchange.requested_token_type {
        Some(w) => format!("`{w}` was requested"),
        None => USABLE_TOKEN_TYPES.join(" or "),
    };
    Err(GrantError::IssuedType {
        url: url.to_string(),
        issued,
        wanted,
    })
}

/// RFC 7235's token68: what can follow `Bearer ` in a header.
fn is_token68(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

/// When to ask again for a token kept for `ttl`: at three quarters of it.
pub fn renew_after(ttl: Duration) -> Duration {
    (ttl * 3 / 4).max(Duration::from_millis(500))
}

/// What keeping grants current needs: where tokens go, the Workload API socket, the token
/// client, and what runs when a token changes.
pub struct Keeper {
    pub tokens: Arc<Tokens>,
    pub socket: Option<PathBuf>,
    pub client: Arc<oauth::Client>,
    pub changed: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper").finish_non_exhaustive()
    }
}

impl Keeper {
    /// Keeps `grant`'s token current for as long as sluice runs (step 3), the first time
    /// after `wait`; `changed` runs after each new token and when the last one expires
    /// unreplaced.
    pub async fn keep(self, grant: Grant, mut wait: Duration) {
        let mut backoff = Duration::from_secs(1);
        let keys = [grant.key.clone()];
        let mut in_force = self.tokens.valid(grant.key.as_str());
        loop {
            tokio::time::sleep(wait).await;
            wait = match obtain(&grant, self.socket.as_ref(), &self.client).await {
                Ok((token, ttl)) => {
                    self.tokens.set(&keys, &token, SystemTime::now() + ttl);
                    backoff = Duration::from_secs(1);
                    in_force = true;
                    (self.changed)();
                    renew_after(ttl)
                }
                Err(e) => {
                    eprintln!(
                        "sluice: credential {}: token grant failed: {e}; retrying in {} s",
                        grant.credential,
                        backoff.as_secs()
                    );
                    if in_force && !self.tokens.valid(grant.key.as_str()) {
                        // Expired unreplaced: taken out, so requests get 503.
                        in_force = false;
                        (self.changed)();
                    }
                    let next = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    next
                }
            };
        }
    }
}

/// Sets the token of each `token_grant` credential bound where `scoped` points (the grant of
/// the most specific override for the destination and path of `target`) on `headers`, replacing whatever
/// the client sent under that name: `Authorization: Bearer <token>`, or `<header_name>:
/// <token>` with `auth_style: header`. A grant not bound here sets nothing; one bound here
/// without a current token, or over plain HTTP to an endpoint that does not allow it, refuses
/// the request (`502 token_grant_failed` as the reference answers, `403 credential_requires_tls`). The
/// credentials whose tokens went in.
pub fn set_grant_headers(
    profiles: &[super::super::ProviderProfile],
    scoped: &dyn super::super::Resolve,
    target: (&sluice_addr::Authority, &str),
    headers: &mut Vec<(String, Vec<u8>)>,
) -> Result<Vec<super::super::CredentialRef>, super::super::CredentialError> {
    use super::super::profile::AuthStyle;
    use super::super::{CredentialError, Resolution, Site};
    let (dst, path) = target;
    let mut used = Vec::new();
    for c in profiles.iter().flat_map(|p| &p.credentials) {
        let Some(grant) = &c.token_grant else {
            continue;
        };
        let key = grant.key_for(dst, path);
        let (name, bearer) = match (c.auth_style, &c.header_name) {
            (Some(AuthStyle::Header), Some(name)) => (name.to_ascii_lowercase(), false),
            (_, Some(name)) => (name.to_ascii_lowercase(), true),
            _ => ("authorization".to_string(), true),
        };
        let site = || Site::Header(name.clone());
        match scoped.resolve(key.as_str()) {
            Resolution::Allow {
                secret, credential, ..
            } => {
                let token = secret.expose();
                let value = if bearer {
                    format!("Bearer {token}")
                } else {
                    token.to_string()
                };
                headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
                headers.push((name.clone(), value.into_bytes()));
                used.push(credential);
            }
            Resolution::Unknown | Resolution::OutsideBinding { .. } => {}
            Resolution::Unavailable { credential, .. } => {
                return Err(CredentialError::Unavailable {
                    key: key.as_str().to_string(),
                    credential: Some(credential),
                    reason: super::super::rewrite::UnavailableReason::GrantFailed,
                    site: site(),
                });
            }
            Resolution::RequiresTls { credential } => {
                return Err(CredentialError::RequiresTls {
                    credential,
                    site: site(),
                });
            }
        }
    }
    Ok(used)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_token68_values_are_set_in_a_header() {
        for good in ["abc", "a.b-c_d~e+f/g==", "eyJ0eXAi.eyJzdWIi.sig"] {
            assert!(is_token68(good), "{good}");
        }
        for bad in ["", "==", "a b", "a\r\nX-Evil: 1", "a=b", "tok\"en"] {
            assert!(!is_token68(bad), "{bad}");
        }
    }
}
