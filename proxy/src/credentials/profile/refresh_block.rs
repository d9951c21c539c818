//! A credential's `refresh` block, typed (spec §3.1): the strategy sluice carries out, its
//! token endpoint, scopes and timing. Read by `schema.rs`; carried out by `credentials::refresh`.

use std::time::Duration;

/// The refresh strategies sluice carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// `oauth2_refresh_token`: a refresh token (and client id, optional secret) traded for
    /// an access token.
    RefreshToken,
    /// `oauth2_client_credentials`: a client id and secret traded for an access token.
    ClientCredentials,
    /// `google_service_account_jwt`: an RS256 JWT signed with the service account's key
    /// traded for an access token (RFC 7523 §2.1).
    ServiceAccountJwt,
}

impl Strategy {
    pub fn parse(text: &str) -> Option<Strategy> {
        Some(match text {
            "oauth2_refresh_token" => Strategy::RefreshToken,
            "oauth2_client_credentials" => Strategy::ClientCredentials,
            "google_service_account_jwt" => Strategy::ServiceAccountJwt,
            _ => return None,
        })
    }

    /// The material each strategy needs (the rest is optional).
    pub fn required_material(self) -> &'static [&'static str] {
        match self {
            Strategy::RefreshToken => &["client_id", "refresh_token"],
            Strategy::ClientCredentials => &["client_id", "client_secret"],
            Strategy::ServiceAccountJwt => &["client_email", "private_key"],
        }
    }
}

/// A credential's `refresh` block, for a strategy sluice carries out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refresh {
    pub strategy: Strategy,
    /// `https://...`.
    pub token_url: String,
    pub scopes: Vec<String>,
    pub refresh_before: Duration,
    pub max_lifetime: Duration,
}

/// Default `refresh_before_seconds`.
pub const DEFAULT_REFRESH_BEFORE: Duration = Duration::from_secs(300);
/// Default `max_lifetime_seconds`.
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(3600);
