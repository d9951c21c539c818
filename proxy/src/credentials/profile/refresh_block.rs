//! A credential's `refresh` block, typed (spec §3.1): the strategy sluice carries out, its
//! token endpoint, scopes and timing, and the sibling credentials an AssumeRole co-mints
//! (`additional_outputs`). Read by `schema.rs`; carried out by `credentials::refresh`.

use std::time::Duration;

use super::CredentialName;

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
    /// `aws_sts_assume_role`: STS `AssumeRole`, signed with long-lived keys, mints a
    /// temporary access key id (this credential), secret key and session token (the
    /// `additional_outputs`).
    AwsStsAssumeRole,
    /// `external`: a process outside sluice keeps the value current in the secrets file (or
    /// directory) together with its expiry, `<first env var>_EXPIRES_AT`; sluice mints nothing
    /// and refuses the value once that instant has passed or when it is missing.
    External,
}

impl Strategy {
    pub fn parse(text: &str) -> Option<Strategy> {
        Some(match text {
            "oauth2_refresh_token" => Strategy::RefreshToken,
            "oauth2_client_credentials" => Strategy::ClientCredentials,
            "google_service_account_jwt" => Strategy::ServiceAccountJwt,
            "aws_sts_assume_role" => Strategy::AwsStsAssumeRole,
            "external" => Strategy::External,
            _ => return None,
        })
    }

    /// The material each strategy needs (the rest is optional).
    pub fn required_material(self) -> &'static [&'static str] {
        match self {
            Strategy::RefreshToken => &["client_id", "refresh_token"],
            Strategy::ClientCredentials => &["client_id", "client_secret"],
            Strategy::ServiceAccountJwt => &["client_email", "private_key"],
            // sluice has no ambient AWS identity to fall back on: the source keys are named.
            Strategy::AwsStsAssumeRole => {
                &["role_arn", "aws_access_key_id", "aws_secret_access_key"]
            }
            Strategy::External => &[],
        }
    }

    /// Whether sluice asks an endpoint for the value (every strategy but `external`).
    pub fn mints(self) -> bool {
        self != Strategy::External
    }
}

/// A value an AssumeRole mints besides the access key id (`additional_outputs[].output`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    SecretAccessKey,
    SessionToken,
}

impl Output {
    /// The env var the access key id an AssumeRole mints goes under (the SigV4 signer's).
    pub const PRIMARY_ENV_VAR: &'static str = "AWS_ACCESS_KEY_ID";
    pub const ALL: [Output; 2] = [Output::SecretAccessKey, Output::SessionToken];

    pub fn parse(text: &str) -> Option<Output> {
        Output::ALL.into_iter().find(|o| o.name() == text)
    }

    pub fn name(self) -> &'static str {
        match self {
            Output::SecretAccessKey => "secret_access_key",
            Output::SessionToken => "session_token",
        }
    }

    /// The env var the SigV4 signer reads this value under: the sibling must use it.
    pub fn env_var(self) -> &'static str {
        match self {
            Output::SecretAccessKey => "AWS_SECRET_ACCESS_KEY",
            Output::SessionToken => "AWS_SESSION_TOKEN",
        }
    }
}

/// A credential's `refresh` block, for a strategy sluice carries out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refresh {
    pub strategy: Strategy,
    /// `https://...`. For `aws_sts_assume_role`, the STS endpoint (empty: the regional
    /// endpoint of the `aws_region` material, `https://sts.<region>.amazonaws.com/`); empty
    /// for `external`.
    pub token_url: String,
    pub scopes: Vec<String>,
    pub refresh_before: Duration,
    pub max_lifetime: Duration,
    /// `additional_outputs`: which sibling credential receives each co-minted value.
    pub outputs: Vec<(Output, CredentialName)>,
}

/// Default `refresh_before_seconds`.
pub const DEFAULT_REFRESH_BEFORE: Duration = Duration::from_secs(300);
/// Default `max_lifetime_seconds`.
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(3600);
