//! The service-account assertion of `google_service_account_jwt` (RFC 7523 §2.1, as Google
//! asks for it): an RS256 JWT with `iss` the `client_email`, `scope` the scopes, `aud` the
//! `token_url`, `iat` now, `exp` an hour later, and `sub` the `subject` for domain-wide
//! delegation; signed with the `private_key` (PEM, PKCS#8, as a key file holds it; `\n`
//! written out as two characters is read as a line break).

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use zeroize::Zeroizing;

use super::Refresh;

/// Why no assertion could be made: material missing (by name), or the key unusable (why).
#[derive(Debug)]
pub(super) enum JwtError {
    Missing(&'static str),
    BadKey(&'static str),
}

/// The signed assertion.
pub(super) fn assertion(
    refresh: &Refresh,
    material: &HashMap<String, Zeroizing<String>>,
) -> Result<Zeroizing<String>, JwtError> {
    let get = |name: &'static str| material.get(name).ok_or(JwtError::Missing(name));
    let bad = JwtError::BadKey;
    let pem = Zeroizing::new(get("private_key")?.replace("\\n", "\n"));
    let body: Zeroizing<String> = Zeroizing::new(
        pem.lines()
            .skip_while(|l| !l.starts_with("-----BEGIN PRIVATE KEY-----"))
            .skip(1)
            .take_while(|l| !l.starts_with("-----END"))
            .collect(),
    );
    let der = Zeroizing::new(
        STANDARD
            .decode(body.trim())
            .map_err(|_| bad("not a PEM `PRIVATE KEY`"))?,
    );
    let key =
        ring::signature::RsaKeyPair::from_pkcs8(&der).map_err(|_| bad("not a PKCS#8 RSA key"))?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut claims = serde_json::json!({
        "iss": get("client_email")?.as_str(),
        "aud": refresh.token_url,
        "iat": now,
        "exp": now + 3600,
    });
    if !refresh.scopes.is_empty() {
        claims["scope"] = refresh.scopes.join(" ").into();
    }
    if let Some(subject) = material.get("subject") {
        claims["sub"] = subject.as_str().into();
    }
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signed = format!("{header}.{payload}");
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        signed.as_bytes(),
        &mut signature,
    )
    .map_err(|_| bad("signing failed"))?;
    Ok(Zeroizing::new(format!(
        "{signed}.{}",
        URL_SAFE_NO_PAD.encode(signature)
    )))
}
