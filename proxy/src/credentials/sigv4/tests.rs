//! SigV4 re-signing: the region a host names, the payload mode, the client's signature
//! dropped, the keys taken only where bound, and no key in any error.

use super::*;
use crate::credentials::binding::tests::scope;
use crate::credentials::{Bindings, profile, secrets::SecretStore};
use crate::policy::Source;

const SECRET: &str = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY";

fn h(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_string(), v.as_bytes().to_vec()))
        .collect()
}

fn text_of(headers: &[(String, Vec<u8>)]) -> String {
    headers
        .iter()
        .map(|(n, v)| format!("{n}: {}\n", String::from_utf8_lossy(v)))
        .collect()
}

fn aws_bindings(env: &[(&str, &str)]) -> Bindings {
    let text = "\
id: aws-test
credentials:
  - {name: access_key_id, env_vars: [AWS_ACCESS_KEY_ID]}
  - {name: secret_access_key, env_vars: [AWS_SECRET_ACCESS_KEY]}
  - {name: session_token, env_vars: [AWS_SESSION_TOKEN]}
endpoints:
  - {host: 's3.us-west-2.amazonaws.com', port: 443, protocol: rest, access: full, credential_signing: sigv4, signing_service: s3}
";
    let loaded = profile::load(&[Source {
        name: "aws.yaml".into(),
        text: text.into(),
    }])
    .unwrap_or_else(|e| {
        panic!(
            "{:?}",
            e.errors().map(ToString::to_string).collect::<Vec<_>>()
        )
    });
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    let store = SecretStore::load(
        &loaded.profiles,
        |k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
        None,
    )
    .unwrap_or_else(|_| panic!("secrets"));
    Bindings::new(loaded.profiles, store.store)
}

fn s3() -> Signing {
    Signing {
        mode: SigningMode::Auto,
        service: "s3".to_string(),
        region: None,
    }
}

#[test]
fn region_from_the_hosts_aws_writes() {
    for (host, region) in [
        ("bedrock-runtime.us-east-1.amazonaws.com", Some("us-east-1")),
        ("sts.us-east-2.amazonaws.com", Some("us-east-2")),
        (
            "bedrock-runtime-fips.us-west-2.amazonaws.com",
            Some("us-west-2"),
        ),
        ("s3.dualstack.eu-west-1.amazonaws.com", Some("eu-west-1")),
        (
            "s3-fips.dualstack.us-east-2.amazonaws.com",
            Some("us-east-2"),
        ),
        ("my-bucket.s3.ap-south-1.amazonaws.com", Some("ap-south-1")),
        (
            "my.dotted.bucket.s3.eu-central-1.amazonaws.com",
            Some("eu-central-1"),
        ),
        ("s3.cn-north-1.amazonaws.com.cn", Some("cn-north-1")),
        (
            "bucket.s3.cn-northwest-1.amazonaws.com.cn",
            Some("cn-northwest-1"),
        ),
        ("s3-fips.us-gov-west-1.amazonaws.com", Some("us-gov-west-1")),
        ("sts.us-gov-east-1.amazonaws.com", Some("us-gov-east-1")),
        ("s3-us-west-2.amazonaws.com", Some("us-west-2")),
        ("bucket.s3-eu-west-1.amazonaws.com", Some("eu-west-1")),
        ("STS.US-EAST-1.AMAZONAWS.COM.", Some("us-east-1")),
        // Global endpoints name no region: `signing_region` must.
        ("s3.amazonaws.com", None),
        ("my-bucket.s3.amazonaws.com", None),
        ("iam.amazonaws.com", None),
        ("us-east-1.amazonaws.com", None),
        ("amazonaws.com", None),
        // Not AWS, or AWS only in a label.
        ("api.anthropic.com", None),
        ("s3.us-east-1.amazonaws.com.evil.example", None),
        ("us-east-1.amazonaws.community", None),
    ] {
        assert_eq!(region_from_host(host).as_deref(), region, "{host}");
    }
}

#[test]
fn payload_mode_from_the_endpoint_and_the_client() {
    let hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let declared = |v: &str| h(&[("X-Amz-Content-Sha256", v)]);
    use Payload::*;
    use SigningMode::*;
    for (mode, headers, sized, want) in [
        (Auto, declared(hash), true, Hashed),
        (Auto, declared("UNSIGNED-PAYLOAD"), true, Unsigned),
        (Auto, declared(STREAMING_TRAILER), false, StreamingTrailer),
        (Auto, h(&[]), true, Hashed),
        (Auto, h(&[]), false, Unsigned),
        (Body, declared("UNSIGNED-PAYLOAD"), true, Hashed),
        (Body, h(&[]), false, Hashed),
        (NoBody, declared(hash), true, Unsigned),
        (NoBody, declared(STREAMING_TRAILER), false, StreamingTrailer),
    ] {
        let got = payload_of(mode, &headers, sized)
            .unwrap_or_else(|e| panic!("{mode:?} {headers:?}: {e}"));
        assert_eq!(got, want, "{mode:?} {headers:?} sized={sized}");
    }
    for mode in [Auto, Body, NoBody] {
        let e = payload_of(mode, &declared("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"), false);
        assert!(
            matches!(e, Err(SignError::ChunkSigned(_))),
            "{mode:?}: {e:?}"
        );
    }
}

#[test]
fn the_clients_signature_is_dropped_and_nothing_else() {
    let mut headers = h(&[
        (
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=openshell:resolve:env:AWS_ACCESS_KEY_ID/x",
        ),
        ("X-Amz-Date", "20260101T000000Z"),
        (
            "x-amz-security-token",
            "openshell:resolve:env:AWS_SESSION_TOKEN",
        ),
        ("X-AMZ-CONTENT-SHA256", "UNSIGNED-PAYLOAD"),
        ("Content-Type", "application/json"),
        ("X-Amz-Meta-Note", "kept"),
    ]);
    strip_client_signature(&mut headers);
    assert_eq!(
        headers,
        h(&[
            ("Content-Type", "application/json"),
            ("X-Amz-Meta-Note", "kept")
        ])
    );
}

fn sign_one(
    b: &Bindings,
    host: &str,
    headers: &mut Vec<(String, Vec<u8>)>,
) -> Result<Vec<CredentialRef>, SignError> {
    let scoped = b.scoped(scope(host, 443, "/bucket/key", "/usr/bin/python3"));
    let req = Request {
        method: "PUT",
        host,
        authority: host,
        target: "/bucket/key?x-id=PutObject",
        body: b"hello",
    };
    sign_request(&s3(), Payload::Hashed, &req, headers, &scoped)
}

#[test]
fn signed_with_the_bound_keys_and_the_hosts_region() {
    let b = aws_bindings(&[
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_SESSION_TOKEN", "session-token-value"),
    ]);
    let mut headers = h(&[
        ("Content-Type", "text/plain"),
        ("X-Amz-Meta-A", "b"),
        ("Accept", "*/*"),
    ]);
    let used =
        sign_one(&b, "s3.us-west-2.amazonaws.com", &mut headers).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(used.len(), 3, "{used:?}");
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_else(|| panic!("no {n}: {headers:?}"))
    };
    let auth = get("authorization");
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
        "{auth}"
    );
    assert!(auth.contains("/us-west-2/s3/aws4_request"), "{auth}");
    // What is signed: host, the content type and every x-amz-* header; not Accept.
    assert!(
        auth.contains(
            "SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-meta-a;x-amz-security-token,"
        ),
        "{auth}"
    );
    assert_eq!(
        get("x-amz-content-sha256"),
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    assert_eq!(get("x-amz-security-token"), "session-token-value");
    assert!(
        !text_of(&headers).contains(SECRET),
        "the secret key went into a header"
    );
}

#[test]
fn keys_sign_only_where_bound_and_no_error_shows_one() {
    let b = aws_bindings(&[
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
    ]);
    // Outside the profile's endpoints: refused as a placeholder there would be.
    let mut headers = h(&[]);
    let e = sign_one(&b, "s3.eu-west-1.amazonaws.com", &mut headers)
        .err()
        .unwrap_or_else(|| panic!("signed outside the binding"));
    assert_eq!(e.code().status(), 403, "{e}");
    assert!(headers.is_empty());
    assert!(!format!("{e} {e:?}").contains(SECRET));
    // No session token: signed without one.
    let mut headers = h(&[]);
    let used =
        sign_one(&b, "s3.us-west-2.amazonaws.com", &mut headers).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(used.len(), 2);
    assert!(!headers.iter().any(|(n, _)| n == "x-amz-security-token"));
    // No secret key: 500, naming the key.
    let b = aws_bindings(&[("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")]);
    let e = sign_one(&b, "s3.us-west-2.amazonaws.com", &mut h(&[]))
        .err()
        .unwrap_or_else(|| panic!("signed without a secret key"));
    assert_eq!(e.code().status(), 500, "{e}");
    assert!(e.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{e}");
}

#[test]
fn a_global_host_needs_signing_region() {
    let b = aws_bindings(&[
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
    ]);
    let scoped = b.scoped(scope(
        "s3.us-west-2.amazonaws.com",
        443,
        "/",
        "/usr/bin/python3",
    ));
    let req = Request {
        method: "GET",
        host: "s3.amazonaws.com",
        authority: "s3.amazonaws.com",
        target: "/",
        body: b"",
    };
    let e = sign_request(&s3(), Payload::Unsigned, &req, &mut h(&[]), &scoped);
    assert!(matches!(e, Err(SignError::NoRegion(_))), "{e:?}");
    let mut with_region = s3();
    with_region.region = Some("us-east-1".to_string());
    let mut headers = h(&[]);
    sign_request(&with_region, Payload::Unsigned, &req, &mut headers, &scoped)
        .unwrap_or_else(|e| panic!("{e}"));
    let text = text_of(&headers);
    assert!(text.contains("/us-east-1/s3/aws4_request"), "{text}");
    assert!(text.contains("UNSIGNED-PAYLOAD"), "{text}");
}
