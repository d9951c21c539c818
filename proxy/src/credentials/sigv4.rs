//! SigV4 re-signing (`credential_signing`, spec §3.8): a request to an AWS endpoint leaves
//! sluice signed with the real keys bound there, whatever the client signed it with.
//!
//! Owns the steps of one signature: the client's own signature headers dropped
//! (`Authorization`, `X-Amz-Date`, `X-Amz-Security-Token`, `X-Amz-Content-Sha256`); the
//! payload mode chosen from the endpoint's mode and what the client declared; the region from
//! `signing_region` or the host (FIPS, dual-stack, China, GovCloud, virtual-hosted S3); the
//! keys (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optional `AWS_SESSION_TOKEN`) taken
//! through the request's scoped bindings, so they sign only where they are bound; and the
//! signature itself, by AWS's `aws-sigv4`. Pure: no sockets. Errors name keys, never values.

use std::time::SystemTime;

use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;

use super::binding::{Resolution, Resolve};
use super::profile::CredentialRef;
use super::rewrite::{CredentialError, Site, UnavailableReason};
use super::secrets::Unavailability;
use crate::policy::model::{Signing, SigningMode};

/// The env vars whose values sign: the access key id, the secret key, the session token.
pub const ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
pub const SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
pub const SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";

/// The most body bytes read whole to hash into a signature.
pub const MAX_SIGNED_BODY_BYTES: usize = 10 * 1024 * 1024;

/// The client's signature headers: dropped before anything else reads the head.
const CLIENT_SIGNATURE: &[&str] = &[
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

const UNSIGNED: &str = "UNSIGNED-PAYLOAD";
const STREAMING_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

/// How the payload enters the signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    /// The body's SHA-256: it is read whole first (at most [`MAX_SIGNED_BODY_BYTES`]).
    Hashed,
    /// `UNSIGNED-PAYLOAD`: the body streams.
    Unsigned,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: an `aws-chunked` body with checksum trailers,
    /// streamed as the client framed it.
    StreamingTrailer,
}

/// Why a request could not be signed. Names keys and modes, never values.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// A key is unknown, unbound here or without a value: refused as any placeholder would be.
    #[error(transparent)]
    Credential(#[from] CredentialError),
    /// The client streams with per-chunk signatures, which only its own key could make.
    #[error(
        "X-Amz-Content-Sha256 `{0}`: chunk-signed streaming cannot be signed again by sluice; send the payload unsigned or whole"
    )]
    ChunkSigned(String),
    /// Neither `signing_region` nor the host names a region.
    #[error(
        "no AWS region in the host `{0}`; set `signing_region` on the endpoint (global endpoints need it)"
    )]
    NoRegion(String),
    /// A header that cannot go into a signature (not text).
    #[error("header `{0}` is not text, so it cannot be signed")]
    HeaderNotText(String),
    /// The signer refused the request (its message names no secret).
    #[error("the request could not be signed: {0}")]
    Signer(String),
}

impl SignError {
    /// The refusal code to answer with (its status is the code's).
    pub fn code(&self) -> crate::refusal_code::Code {
        use crate::refusal_code::Code;
        match self {
            SignError::Credential(e) => e.code(),
            SignError::ChunkSigned(_) | SignError::HeaderNotText(_) | SignError::Signer(_) => {
                Code::BadRequest
            }
            SignError::NoRegion(_) => Code::CredentialUnavailable,
        }
    }
}

/// Drops the client's own signature headers. The caller runs this before anything else
/// reads the head: they hold the client's placeholder key id and its signature.
pub fn strip_client_signature(headers: &mut Vec<(String, Vec<u8>)>) {
    headers.retain(|(n, _)| !CLIENT_SIGNATURE.iter().any(|c| n.eq_ignore_ascii_case(c)));
}

/// The payload mode of a request: what the endpoint's mode and the client's own
/// `X-Amz-Content-Sha256` (read before [`strip_client_signature`]) say. `sized` is true when
/// the body is absent or has a `Content-Length`.
pub fn payload_of(
    mode: SigningMode,
    headers: &[(String, Vec<u8>)],
    sized: bool,
) -> Result<Payload, SignError> {
    let declared = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("x-amz-content-sha256"))
        .map(|(_, v)| String::from_utf8_lossy(v).trim().to_string());
    match declared.as_deref() {
        // An aws-chunked body with trailers stays framed as the client framed it.
        Some(STREAMING_TRAILER) => return Ok(Payload::StreamingTrailer),
        Some(d) if d.starts_with("STREAMING-") => {
            return Err(SignError::ChunkSigned(d.to_string()));
        }
        _ => {}
    }
    Ok(match (mode, declared.as_deref()) {
        (SigningMode::Body, _) => Payload::Hashed,
        (SigningMode::NoBody, _) | (SigningMode::Auto, Some(UNSIGNED)) => Payload::Unsigned,
        (SigningMode::Auto, Some(_)) => Payload::Hashed,
        (SigningMode::Auto, None) if sized => Payload::Hashed,
        (SigningMode::Auto, None) => Payload::Unsigned,
    })
}

/// The region an AWS host names: the label before `amazonaws.com` (or `amazonaws.com.cn`),
/// skipping `dualstack`; `None` for a global endpoint (`s3.amazonaws.com`) or another host.
pub fn region_from_host(host: &str) -> Option<String> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    // The index of `amazonaws`.
    let base = if host.ends_with(".amazonaws.com.cn") {
        labels.len().checked_sub(3)?
    } else if host.ends_with(".amazonaws.com") {
        labels.len().checked_sub(2)?
    } else {
        return None;
    };
    let mut at = base.checked_sub(1)?;
    while labels[at] == "dualstack" {
        at = at.checked_sub(1)?;
    }
    let label = labels[at];
    if looks_like_region(label) {
        // A region needs a service label before it.
        return (at > 0).then(|| label.to_string());
    }
    // The legacy S3 spelling: `s3-us-west-2.amazonaws.com`, `bucket.s3-eu-west-1...`.
    let legacy = label
        .strip_prefix("s3-fips-")
        .or_else(|| label.strip_prefix("s3-"))
        .filter(|r| looks_like_region(r))?;
    Some(legacy.to_string())
}

/// `us-east-1`, `us-gov-west-1`, `cn-north-1`, `eu-central-2`: words joined by `-`, the
/// last one a number.
fn looks_like_region(label: &str) -> bool {
    let words: Vec<&str> = label.split('-').collect();
    words.len() >= 3
        && words
            .last()
            .is_some_and(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()))
        && words[..words.len() - 1]
            .iter()
            .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase()))
}

/// One request to sign, as it goes upstream.
#[derive(Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The host the request goes to (lower-case, no port): where the region is read from.
    pub host: &'a str,
    /// The `Host` the upstream receives (`host`, or `host:port` off the scheme's default).
    pub authority: &'a str,
    /// The origin-form target as it goes upstream, placeholders already swapped.
    pub target: &'a str,
    /// The body, for [`Payload::Hashed`] (empty when there is none).
    pub body: &'a [u8],
}

/// Signs `req` for `signing` with the keys `keys` resolves on this request, adding
/// `Authorization`, `X-Amz-Date`, `X-Amz-Content-Sha256` and, with a session token,
/// `X-Amz-Security-Token` to `headers` (the client's were dropped by
/// [`strip_client_signature`]). Signed: `host`, `content-type`, `content-md5`,
/// `content-encoding` and every `x-amz-*` header. Returns the credentials used.
pub fn sign_request(
    signing: &Signing,
    payload: Payload,
    req: &Request<'_>,
    headers: &mut Vec<(String, Vec<u8>)>,
    keys: &dyn Resolve,
) -> Result<Vec<CredentialRef>, SignError> {
    let region = match &signing.region {
        Some(r) => r.clone(),
        None => {
            region_from_host(req.host).ok_or_else(|| SignError::NoRegion(req.host.to_string()))?
        }
    };
    let (access, access_ref) = required(keys, ACCESS_KEY_ID)?;
    let (secret, secret_ref) = required(keys, SECRET_ACCESS_KEY)?;
    let token = optional(keys, SESSION_TOKEN)?;
    let mut used = vec![access_ref, secret_ref];
    if let Some((_, r)) = &token {
        used.push(r.clone());
    }
    used.sort();
    used.dedup();

    let mut signed: Vec<(String, String)> = vec![("host".to_string(), req.authority.to_string())];
    for (name, value) in headers.iter() {
        let lower = name.to_ascii_lowercase();
        let wanted = lower.starts_with("x-amz-")
            || matches!(
                lower.as_str(),
                "content-type" | "content-md5" | "content-encoding"
            );
        if !wanted {
            continue;
        }
        let text =
            std::str::from_utf8(value).map_err(|_| SignError::HeaderNotText(lower.clone()))?;
        signed.push((lower, text.trim().to_string()));
    }
    let body = match payload {
        Payload::Hashed => SignableBody::Bytes(req.body),
        Payload::Unsigned => SignableBody::UnsignedPayload,
        Payload::StreamingTrailer => SignableBody::StreamingUnsignedPayloadTrailer,
    };
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    if signing.service == "s3" {
        // S3 signs the path as sent: neither normalised nor encoded twice.
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        settings.percent_encoding_mode = PercentEncodingMode::Single;
    }
    let identity = aws_credential_types::Credentials::new(
        access,
        secret,
        token.map(|(t, _)| t),
        None,
        "sluice",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name(&signing.service)
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .map_err(|e| SignError::Signer(e.to_string()))?
        .into();
    let uri = format!("https://{}{}", req.authority, req.target);
    let signable = SignableRequest::new(
        req.method,
        &uri,
        signed.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        body,
    )
    .map_err(|e| SignError::Signer(e.to_string()))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| SignError::Signer(e.to_string()))?
        .into_parts();
    for (name, value) in instructions.headers() {
        headers.push((name.to_string(), value.as_bytes().to_vec()));
    }
    Ok(used)
}

/// A key's value on this request, or the refusal a placeholder for it would get.
fn required(keys: &dyn Resolve, key: &str) -> Result<(String, CredentialRef), SignError> {
    match optional(keys, key)? {
        Some(found) => Ok(found),
        None => Err(unavailable(key, None, UnavailableReason::UnknownKey).into()),
    }
}

/// A key's value on this request; `None` when no credential has it or it is unset.
fn optional(keys: &dyn Resolve, key: &str) -> Result<Option<(String, CredentialRef)>, SignError> {
    let site = || Site::Header("authorization".to_string());
    match keys.resolve(key) {
        Resolution::Allow {
            secret, credential, ..
        } => Ok(Some((secret.expose().to_string(), credential))),
        Resolution::Unknown
        | Resolution::Unavailable {
            reason: Unavailability::Unset,
            ..
        } => Ok(None),
        Resolution::Unavailable { credential, reason } => {
            Err(unavailable(key, Some(credential), UnavailableReason::NoValue(reason)).into())
        }
        Resolution::OutsideBinding { credential, reason } => {
            Err(CredentialError::EndpointMismatch {
                credential,
                reason,
                site: site(),
            }
            .into())
        }
        Resolution::RequiresTls { credential } => Err(CredentialError::RequiresTls {
            credential,
            site: site(),
        }
        .into()),
    }
}

fn unavailable(
    key: &str,
    credential: Option<CredentialRef>,
    reason: UnavailableReason,
) -> CredentialError {
    CredentialError::Unavailable {
        key: key.to_string(),
        credential,
        reason,
        site: Site::Header("authorization".to_string()),
    }
}

#[cfg(test)]
mod tests;
