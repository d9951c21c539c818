//! The STS `AssumeRole` call of `aws_sts_assume_role`: sluice asks AWS STS itself for
//! temporary credentials, the request SigV4-signed (service `sts`) with the long-lived source
//! keys of the refresh material, over the same verified TLS as every token request.
//!
//! 1. The region: the `aws_region` material, else `us-east-1`; the endpoint: the refresh's
//!    `token_url`, else that region's `https://sts.<region>.amazonaws.com/`.
//! 2. The form (`Action=AssumeRole`, `RoleArn`, `RoleSessionName`, `DurationSeconds`,
//!    `ExternalId`), `DurationSeconds` being `max_lifetime_seconds` held within what STS
//!    accepts (900 s to 12 h); sluice still replaces them after `max_lifetime_seconds`.
//! 3. Signed by `aws-sigv4` with `aws_access_key_id`, `aws_secret_access_key` and the optional
//!    `aws_session_token` (temporary source keys).
//! 4. The XML answer read for `AccessKeyId` (the token), `SecretAccessKey` and `SessionToken`
//!    (the outputs) and `Expiration` (the lifetime).
//!
//! Errors name the endpoint and STS's error code, never a key, a signature or a value.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use zeroize::Zeroizing;

use super::oauth::{Client, Granted, TokenError, encode_form};
use super::{Output, Refresh};

/// What STS accepts as `DurationSeconds`.
const MIN_DURATION: u64 = 900;
const MAX_DURATION: u64 = 43_200;

/// The endpoint AssumeRole goes to (step 1): the configured one, else the region's.
fn endpoint(refresh: &Refresh, region: &str) -> Result<String, TokenError> {
    if !refresh.token_url.is_empty() {
        return Ok(refresh.token_url.clone());
    }
    // The region becomes a host name: only what region names are made of.
    if region.is_empty()
        || !region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(TokenError::BadMaterial(
            "aws_region".to_string(),
            "not an AWS region name",
        ));
    }
    Ok(format!("https://sts.{region}.amazonaws.com/"))
}

/// Temporary credentials from STS for `refresh`'s role.
pub(super) async fn assume_role(
    client: &Client,
    refresh: &Refresh,
    material: &HashMap<String, Zeroizing<String>>,
) -> Result<Granted, TokenError> {
    let get = |name: &str| {
        material
            .get(name)
            .map(|v| v.as_str())
            .ok_or_else(|| TokenError::Material(name.to_string()))
    };
    let region = material
        .get("aws_region")
        .map_or("us-east-1", |r| r.as_str());
    let url = endpoint(refresh, region)?;
    let duration = refresh
        .max_lifetime
        .as_secs()
        .clamp(MIN_DURATION, MAX_DURATION)
        .to_string();
    let mut pairs = vec![
        ("Action", "AssumeRole"),
        ("Version", "2011-06-15"),
        ("RoleArn", get("role_arn")?),
        (
            "RoleSessionName",
            material
                .get("session_name")
                .map_or("sluice", |s| s.as_str()),
        ),
        ("DurationSeconds", duration.as_str()),
    ];
    if let Some(id) = material.get("external_id") {
        pairs.push(("ExternalId", id.as_str()));
    }
    let form = encode_form(&pairs);
    let headers = signature(&url, region, &form, material)?;
    let (status, body) = client.send_form(&url, &headers, form).await?;
    let text = String::from_utf8_lossy(&body);
    if status != 200 {
        // Only STS's error code, and only if it is a plain code.
        let error = element(&text, "Code")
            .filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_alphanumeric()))
            .map(|c| c.to_string());
        return Err(TokenError::Refused { url, status, error });
    }
    let malformed = || TokenError::Malformed { url: url.clone() };
    let credentials = element(&text, "Credentials").ok_or_else(malformed)?;
    let value = |name: &str| {
        element(credentials, name)
            .map(unescape)
            .filter(|v| !v.is_empty() && !v.bytes().any(|b| b.is_ascii_control()))
            .ok_or_else(malformed)
    };
    let access_token = value("AccessKeyId")?;
    let outputs = vec![
        (Output::SecretAccessKey, value("SecretAccessKey")?),
        (Output::SessionToken, value("SessionToken")?),
    ];
    let expires_in = element(credentials, "Expiration")
        .and_then(parse_time)
        .map(|at| at.duration_since(SystemTime::now()).unwrap_or_default());
    Ok(Granted {
        access_token,
        expires_in,
        refresh_token: None,
        outputs,
    })
}

/// The SigV4 headers of the AssumeRole request (step 3).
fn signature(
    url: &str,
    region: &str,
    form: &str,
    material: &HashMap<String, Zeroizing<String>>,
) -> Result<Vec<(String, String)>, TokenError> {
    let get = |name: &str| {
        material
            .get(name)
            .map(|v| v.to_string())
            .ok_or_else(|| TokenError::Material(name.to_string()))
    };
    let unsignable = |_| TokenError::Url(url.to_string());
    let uri: http::Uri = url.parse().map_err(|_| TokenError::Url(url.to_string()))?;
    let host = uri
        .authority()
        .map(ToString::to_string)
        .ok_or_else(|| TokenError::Url(url.to_string()))?;
    let identity = aws_credential_types::Credentials::new(
        get("aws_access_key_id")?,
        get("aws_secret_access_key")?,
        material.get("aws_session_token").map(|t| t.to_string()),
        None,
        "sluice-sts",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|_| TokenError::Url(url.to_string()))?
        .into();
    let content_type = "application/x-www-form-urlencoded";
    let signable = SignableRequest::new(
        "POST",
        url,
        [("host", host.as_str()), ("content-type", content_type)].into_iter(),
        SignableBody::Bytes(form.as_bytes()),
    )
    .map_err(unsignable)?;
    let (instructions, _) = sign(signable, &params).map_err(unsignable)?.into_parts();
    Ok(instructions
        .headers()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect())
}

/// The text inside the first `<name>…</name>` of `xml`.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(xml[start..end].trim())
}

/// XML's five predefined entities, decoded.
fn unescape(text: &str) -> Zeroizing<String> {
    Zeroizing::new(
        text.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z`, as STS writes `Expiration`.
pub(super) fn parse_time(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20 || !text.ends_with('Z') || b[4] != b'-' || b[10] != b'T' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sts_times_are_read() {
        let t = parse_time("2026-12-07T17:02:52.126Z").unwrap();
        assert_eq!(
            t.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_796_662_972
        );
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(UNIX_EPOCH));
        assert_eq!(parse_time("2026-13-07T17:02:52Z"), None);
        assert_eq!(parse_time("yesterday"), None);
    }

    #[test]
    fn the_answer_is_read_and_the_region_guards_the_host() {
        let xml = "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIA1</AccessKeyId><SecretAccessKey>s&amp;k</SecretAccessKey></Credentials></AssumeRoleResult></AssumeRoleResponse>";
        let c = element(xml, "Credentials").unwrap();
        assert_eq!(element(c, "AccessKeyId"), Some("ASIA1"));
        assert_eq!(
            unescape(element(c, "SecretAccessKey").unwrap()).as_str(),
            "s&k"
        );
        let refresh = Refresh {
            strategy: super::super::Strategy::AwsStsAssumeRole,
            token_url: String::new(),
            scopes: Vec::new(),
            refresh_before: Duration::from_secs(1),
            max_lifetime: Duration::from_secs(60),
            outputs: Vec::new(),
        };
        assert_eq!(
            endpoint(&refresh, "eu-west-1").unwrap(),
            "https://sts.eu-west-1.amazonaws.com/"
        );
        for bad in ["", "evil.com/x", "a.b", "EU"] {
            assert!(endpoint(&refresh, bad).is_err(), "{bad}");
        }
    }
}
