//! Security invariant 2 for this module: with a known secret in the store, no error, no
//! warning and no `Debug` output of any public type shows it.

use std::borrow::Cow;

use super::binding::tests::{bindings, scope};
use super::binding::{Mismatch, Resolve};
use super::placeholder;
use super::rewrite::UnavailableReason;
use super::secrets::{LineProblem, SecretsError, SecretsLoadError, Unavailability};
use super::*;
use crate::policy::Source;

const SECRET: &str = "SECRET-VALUE-7f3a9c";

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} leaks the secret: {text}");
    assert!(
        !text.contains("7f3a9c"),
        "{what} leaks part of the secret: {text}"
    );
}

fn cref() -> CredentialRef {
    let b = bindings(&[]);
    b.profiles()[1]
        .credential_ref(0)
        .unwrap_or_else(|| panic!("profile fixture changed"))
}

#[test]
fn no_secret_in_errors_debug_or_warnings() {
    let b = bindings(&[("GH_TOKEN", SECRET), ("TELEGRAM_BOT_TOKEN", SECRET)]);
    let inside = scope("api.github.com", 443, "/user", "/usr/bin/gh");
    let outside = scope("evil.example.com", 443, "/", "/usr/bin/gh");

    // Structures holding the secret.
    assert_clean("Bindings", &format!("{b:?} {b:#?}"));
    assert_clean("SecretStore", &format!("{:?}", b.store()));
    let scoped = b.scoped(inside);
    assert_clean("Scoped", &format!("{scoped:?}"));
    let allow = scoped.resolve("GH_TOKEN");
    assert!(matches!(allow, Resolution::Allow { .. }));
    assert_clean("Resolution::Allow", &format!("{allow:?}"));
    if let Some(Ok(secret)) = b.store().get("GH_TOKEN") {
        assert_clean("Secret", &format!("{secret:?} {secret:#?}"));
        assert_eq!(secret.expose(), SECRET);
    } else {
        panic!("secret not loaded");
    }

    // A successful rewrite: the result types, but not the rewritten head (it now holds the
    // secret, which is why the pipeline must not log it).
    let mut target = "/user".to_string();
    let mut headers = vec![("X".to_string(), b"openshell:resolve:env:GH_TOKEN".to_vec())];
    let injected = rewrite_request(&mut target, &mut headers, &scoped).unwrap_or_default();
    assert!(!injected.scrub.is_empty());
    assert_clean("Injected", &format!("{injected:?} {injected:#?}"));
    assert!(headers[0].1 == SECRET.as_bytes());
    assert_clean("redactor", &format!("{:?}", b.redactor()));
    let body = rewrite_body(
        Some("text/plain"),
        b"openshell:resolve:env:GH_TOKEN",
        &scoped,
    );
    match &body {
        Ok(r) => {
            assert!(matches!(r.body, Cow::Owned(_)));
            assert_clean("RewrittenBody", &format!("{r:?}"));
        }
        Err(e) => panic!("{e}"),
    }

    // Every error a request can produce, from real requests where possible.
    let mut errors: Vec<CredentialError> = Vec::new();
    let mismatched = b.scoped(outside);
    let mut t = "/x".to_string();
    let mut h = vec![("X".to_string(), b"openshell:resolve:env:GH_TOKEN".to_vec())];
    errors.extend(rewrite_request(&mut t, &mut h, &mismatched).err());
    let mut h = vec![("X".to_string(), b"openshell:resolve:env:NOPE".to_vec())];
    errors.extend(rewrite_request(&mut t, &mut h, &scoped).err());
    let mut h = vec![(
        "X".to_string(),
        b"a openshell:resolve:env:GH_TOKEN b".to_vec(),
    )];
    errors.extend(rewrite_request(&mut t, &mut h, &scoped).err());
    let bad_path = bindings(&[("TELEGRAM_BOT_TOKEN", "SECRET-VALUE-7f3a9c/x")]);
    let tg = bad_path.scoped(scope("api.telegram.org", 443, "/botX/getMe", "/x"));
    let mut t = "/botopenshell:resolve:env:TELEGRAM_BOT_TOKEN/getMe".to_string();
    errors.extend(rewrite_request(&mut t, &mut Vec::new(), &tg).err());
    assert!(!t.contains(SECRET));
    errors.extend([
        CredentialError::EndpointMismatch {
            credential: cref(),
            reason: Mismatch::Caller,
            site: Site::Body,
        },
        CredentialError::Unavailable {
            key: "GH_TOKEN".into(),
            credential: Some(cref()),
            reason: UnavailableReason::NoValue(Unavailability::ForbiddenCharacters),
            site: Site::Query,
        },
    ]);
    assert_eq!(errors.len(), 6);
    for e in &errors {
        assert_clean(
            "CredentialError",
            &format!("{e} {e:?} {}", e.client_message()),
        );
    }
    let body_errors = [
        BodyError::TooLarge { limit: 1 },
        BodyError::UnsupportedType("x/y".into()),
        BodyError::NoContentType,
        BodyError::UnsupportedCharset("latin1".into()),
        BodyError::NotUtf8,
        BodyError::InvalidJson("x"),
        BodyError::Credential(errors[0].clone()),
    ];
    for e in &body_errors {
        assert_clean("BodyError", &format!("{e} {e:?}"));
    }
    let mut guard = BodyGuard::new();
    guard.feed(SECRET.as_bytes());
    assert_clean("BodyGuard", &format!("{guard:?}"));
}

#[test]
fn no_secret_in_load_errors_and_warnings() {
    let profiles = profile::load(&[Source {
        name: "p.yaml".into(),
        text: "id: p\ncredentials:\n  - {name: c, env_vars: [A_KEY], required: true}\n  - {name: d, env_vars: [B_KEY]}\nendpoints: [{host: a.example.com, port: 443}]\n".into(),
    }])
    .unwrap_or_else(|e| panic!("{e}"))
    .profiles;
    let bad = format!("{SECRET}\r\nInjected: 1");
    let err = SecretStore::load(
        &profiles,
        |k| (k == "A_KEY" || k == "B_KEY").then(|| bad.clone()),
        None,
    )
    .err()
    .unwrap_or_else(|| panic!("expected an error"));
    assert_clean("SecretsLoadError", &format!("{err} {err:?}"));
    for e in &err.errors {
        assert_clean("SecretsError", &format!("{e} {e:?}"));
    }
    let le = LoadError::from(err);
    assert_clean("LoadError", &format!("{le} {le:?} {:?}", le.lines()));

    let ok = SecretStore::load(
        &profiles,
        |k| (k == "A_KEY").then(|| SECRET.to_string()),
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok.warnings.len(), 1);
    assert_clean("LoadedSecrets", &format!("{ok:?}"));
    for w in &ok.warnings {
        assert_clean("SecretsWarning", &format!("{w} {w:?}"));
    }

    let path = std::path::PathBuf::from("/s");
    let file_errors = [
        SecretsError::Unusable {
            path: path.clone(),
            source: crate::config_file::FileError::TooLarge {
                limit: 1,
                noun: "a secrets file",
            },
        },
        SecretsError::InsecureMode {
            path: path.clone(),
            mode: 0o644,
        },
        SecretsError::WrongOwner {
            path: path.clone(),
            owner: 0,
            uid: 1,
        },
        SecretsError::UnknownUid { path: path.clone() },
        SecretsError::Malformed {
            path: path.clone(),
            line: 1,
            problem: LineProblem::NoEquals,
        },
        SecretsError::Unusable {
            path,
            source: crate::config_file::FileError::Io(std::io::Error::from(
                std::io::ErrorKind::NotFound,
            )),
        },
    ];
    let all = SecretsLoadError {
        errors: file_errors.into_iter().collect(),
    };
    assert_clean(
        "SecretsError",
        &format!(
            "{all:?} {:?}",
            all.errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        ),
    );
}

#[test]
fn facade_load_with_the_shipped_example() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/providers/anthropic.yaml"
    );
    let loaded = load(
        &[file.to_string()],
        |k| (k == "ANTHROPIC_API_KEY").then(|| SECRET.to_string()),
        None,
    )
    .unwrap_or_else(|e| panic!("{:?}", e.lines()));
    assert_clean("Loaded", &format!("{loaded:?}"));
    let b = &loaded.bindings;
    assert!(b.is_credentialed(&sluice_addr::Authority::new("api.anthropic.com", 443)));
    assert_eq!(
        b.child_env(),
        [(
            "ANTHROPIC_API_KEY".to_string(),
            "openshell:resolve:env:ANTHROPIC_API_KEY".to_string()
        )]
    );
    let claude = scope(
        "api.anthropic.com",
        443,
        "/v1/messages",
        "/usr/local/bin/claude",
    );
    let mut target = "/v1/messages".to_string();
    let mut headers = vec![(
        "x-api-key".to_string(),
        placeholder::canonical_for("ANTHROPIC_API_KEY").into_bytes(),
    )];
    let injected = rewrite_request(&mut target, &mut headers, &b.scoped(claude))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        injected.credentials[0].to_string(),
        "anthropic/anthropic-api-key"
    );
    assert_eq!(headers[0].1, SECRET.as_bytes());

    let err = load(&["/nonexistent.yaml".to_string()], |_| None, None)
        .err()
        .unwrap_or_else(|| panic!("expected an error"));
    assert_eq!(err.lines().len(), 1);
}

/// A static credential that no profile binds to endpoints is never resolvable: a value in
/// sluice's environment under a name no profile claims stays unknown everywhere, and a
/// profile with credentials but no endpoints is refused at load.
#[test]
fn unbound_static_credentials_are_never_resolvable() {
    let dir = std::env::temp_dir().join(format!("sluice-unbound-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_default();
    let profile = dir.join("p.yaml");
    std::fs::write(
        &profile,
        "id: api\ncredentials: [{name: k, env_vars: [API_KEY]}]\nendpoints: [{host: api.example.com, port: 443}]\n",
    )
    .unwrap_or_default();
    let env = |k: &str| match k {
        "API_KEY" | "STRAY_KEY" => Some(SECRET.to_string()),
        _ => None,
    };
    let loaded = load(&[profile.display().to_string()], env, None)
        .unwrap_or_else(|e| panic!("{:?}", e.lines()));
    for (host, path) in [("api.example.com", "/"), ("evil.example.com", "/x")] {
        let s = scope(host, 443, path, "/usr/bin/curl");
        assert!(
            matches!(
                loaded.bindings.resolve("STRAY_KEY", &s),
                Resolution::Unknown
            ),
            "{host}"
        );
    }
    assert!(
        !loaded
            .bindings
            .child_env()
            .iter()
            .any(|(k, _)| k == "STRAY_KEY")
    );
    std::fs::write(
        &profile,
        "id: api\ncredentials: [{name: k, env_vars: [API_KEY]}]\n",
    )
    .unwrap_or_default();
    // Without endpoints (and so without a binding here), nothing resolves.
    let loaded = load(&[profile.display().to_string()], env, None)
        .unwrap_or_else(|e| panic!("{:?}", e.lines()));
    let s = scope("api.example.com", 443, "/", "/usr/bin/curl");
    assert!(matches!(
        loaded.bindings.resolve("API_KEY", &s),
        Resolution::OutsideBinding { .. }
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A refreshed token is swapped into a copy of the bindings in force (no reload): the new
/// one serves, the one it replaced is still scrubbed, and an expired one never serves
/// (however late the next swap) while it is still scrubbed.
#[test]
fn a_refreshed_token_serves_until_its_expiry_and_is_scrubbed_after() {
    use std::time::{Duration, SystemTime};
    let profiles = profile::load(&[Source {
        name: "p.yaml".into(),
        text: "id: p\ncredentials:\n  - name: t\n    env_vars: [T_TOKEN]\n    refresh: {strategy: oauth2_client_credentials, token_url: 'https://auth.example.com/token'}\nendpoints: [{host: api.example.com, port: 443}]\n".into(),
    }])
    .unwrap_or_else(|e| panic!("{e}"))
    .profiles;
    let store = SecretStore::load(&profiles, |_| None, None)
        .unwrap_or_else(|e| panic!("{e}"))
        .store;
    let mut first = Bindings::new(profiles, store);
    let later = SystemTime::now() + Duration::from_secs(60);
    first.take_tokens(&|_| Some(("token-one-8c1f2a".to_string(), later)));
    let inside = || scope("api.example.com", 443, "/", "/usr/bin/curl");
    let served = |b: &Bindings| match b.scoped(inside()).resolve("T_TOKEN") {
        Resolution::Allow { secret, .. } => Some(secret.expose().to_string()),
        _ => None,
    };
    let scrubs = |b: &Bindings, value: &str| {
        let mut out = Vec::new();
        b.endpoint_secrets(&sluice_addr::Authority::new("api.example.com", 443))
            .replace_all(value.as_bytes(), &mut out)
            == 1
    };
    assert_eq!(served(&first).as_deref(), Some("token-one-8c1f2a"));

    let mut second = first.copy();
    second.take_tokens(&|_| Some(("token-two-3e9d70".to_string(), later)));
    second.retire_from(&first);
    assert_eq!(served(&second).as_deref(), Some("token-two-3e9d70"));
    assert!(scrubs(&second, "token-one-8c1f2a"), "the replaced token");
    assert!(scrubs(&second, "token-two-3e9d70"));
    assert!(
        second
            .redactor()
            .replace_all(b"token-two-3e9d70", &mut Vec::new())
            == 1
    );

    // Expired, and no new token yet: not served, still scrubbed.
    let mut third = second.copy();
    third.take_tokens(&|_| Some(("token-two-3e9d70".to_string(), SystemTime::UNIX_EPOCH)));
    third.retire_from(&second);
    assert_eq!(served(&third), None);
    assert!(matches!(
        third.scoped(inside()).resolve("T_TOKEN"),
        Resolution::Unavailable {
            reason: Unavailability::NotRefreshed,
            ..
        }
    ));
    assert!(scrubs(&third, "token-two-3e9d70"));
    assert!(scrubs(&third, "token-one-8c1f2a"));
}
