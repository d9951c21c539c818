//! Refreshed credentials: the `refresh` block read, strategies sluice does not carry out
//! refused by name, material names, tokens valid only until they expire.

use super::*;
use crate::credentials::profile;
use crate::policy::Source;

fn load(text: &str) -> Result<profile::LoadedProfiles, Vec<String>> {
    profile::load(&[Source {
        name: "p.yaml".into(),
        text: text.into(),
    }])
    .map_err(|e| e.errors().map(ToString::to_string).collect())
}

fn with_refresh(refresh: &str) -> String {
    format!(
        "id: g\ncredentials:\n  - name: t\n    env_vars: [G_TOKEN]\n    refresh: {refresh}\nendpoints: [{{host: api.example.com, port: 443}}]\n"
    )
}

#[test]
fn oauth_strategies_are_read() {
    let loaded = load(&with_refresh(
        "{strategy: oauth2_refresh_token, token_url: 'https://oauth2.example.com/token', scopes: [a, b], refresh_before_seconds: 60, max_lifetime_seconds: 600, material: [{name: client_id}, {name: refresh_token, secret: true}]}",
    ))
    .unwrap_or_else(|e| panic!("{e:?}"));
    let r = loaded.profiles[0].credentials[0].refresh.clone().unwrap();
    assert_eq!(r.strategy, Strategy::RefreshToken);
    assert_eq!(r.token_url, "https://oauth2.example.com/token");
    assert_eq!(r.scopes, ["a", "b"]);
    assert_eq!(r.refresh_before, Duration::from_secs(60));
    assert_eq!(r.max_lifetime, Duration::from_secs(600));
    let r = load(&with_refresh(
        "{strategy: oauth2_client_credentials, token_url: 'https://t.example.com/'}",
    ))
    .unwrap_or_else(|e| panic!("{e:?}"));
    let r = r.profiles[0].credentials[0].refresh.clone().unwrap();
    assert_eq!(
        (r.refresh_before, r.max_lifetime),
        (DEFAULT_REFRESH_BEFORE, DEFAULT_MAX_LIFETIME)
    );
    // `static` is no refresh at all.
    let s = load(&with_refresh("{strategy: static}")).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(s.profiles[0].credentials[0].refresh.is_none());
}

#[test]
fn what_sluice_does_not_carry_out_is_refused_by_name() {
    let e = load(&with_refresh("{strategy: bespoke}")).unwrap_err();
    assert!(
        e[0].contains("unknown `refresh` strategy `bespoke`"),
        "{e:?}"
    );
    for (refresh, want) in [
        (
            "{strategy: oauth2_client_credentials}",
            "needs a `token_url`",
        ),
        (
            "{strategy: oauth2_client_credentials, token_url: 'http://t.example.com/'}",
            "is not an https:// URL",
        ),
        (
            "{strategy: oauth2_client_credentials, token_url: 'https://t/', max_lifetime_seconds: 0}",
            "out of range",
        ),
        (
            "{strategy: oauth2_client_credentials, token_url: 'https://t/', additional_outputs: []}",
            "applies to `aws_sts_assume_role`",
        ),
        (
            "{strategy: oauth2_client_credentials, token_url: 'https://t/', bogus: 1}",
            "unknown field `bogus`",
        ),
        ("{token_url: 'https://t/'}", "needs a `strategy`"),
    ] {
        let e = load(&with_refresh(refresh)).unwrap_err();
        assert!(e.iter().any(|e| e.contains(want)), "{refresh}: {e:?}");
    }
}

#[test]
fn material_is_named_after_the_first_env_var() {
    let key = EnvKey::new("GITHUB_TOKEN").unwrap();
    assert_eq!(
        material_key(&key, "client_secret"),
        "GITHUB_TOKEN_CLIENT_SECRET"
    );
}

#[test]
fn a_token_is_read_only_until_it_expires() {
    let tokens = Tokens::default();
    let keys = [EnvKey::new("A").unwrap(), EnvKey::new("B").unwrap()];
    tokens.set(&keys, "tok-1", SystemTime::now() + Duration::from_secs(60));
    assert_eq!(tokens.get("A").as_deref(), Some("tok-1"));
    assert_eq!(tokens.get("B").as_deref(), Some("tok-1"));
    tokens.set(&keys, "tok-2", SystemTime::now() - Duration::from_secs(1));
    assert_eq!(tokens.get("A"), None);
    assert!(!format!("{tokens:?}").contains("tok"));
}

/// A plan's digest changes with anything its tokens depend on (a gateway tenant's refresher
/// is kept across a reload only while it is the same), and never with the order material is
/// read in.
#[test]
fn a_plans_digest_follows_its_material_and_refresh_block() {
    let loaded = load(&with_refresh(
        "{strategy: oauth2_client_credentials, token_url: 'https://t.example.com/token', material: [{name: client_id}, {name: client_secret}]}",
    ))
    .unwrap_or_else(|e| panic!("{e:?}"));
    let source = |secret: &'static str| -> super::Source {
        Arc::new(move |k: &str| match k {
            "G_TOKEN_CLIENT_ID" => Some("id".to_string()),
            "G_TOKEN_CLIENT_SECRET" => Some(secret.to_string()),
            _ => None,
        })
    };
    let digest = |profiles: &[crate::credentials::ProviderProfile], s: &str| {
        let s: &'static str = Box::leak(s.to_string().into_boxed_str());
        Plan::of(profiles, &source(s)).unwrap().digest()
    };
    let a = digest(&loaded.profiles, "secret-a");
    assert_eq!(a, digest(&loaded.profiles, "secret-a"));
    assert_ne!(a, digest(&loaded.profiles, "secret-b"));
    let other_url = load(&with_refresh(
        "{strategy: oauth2_client_credentials, token_url: 'https://u.example.com/token', material: [{name: client_id}, {name: client_secret}]}",
    ))
    .unwrap_or_else(|e| panic!("{e:?}"));
    assert_ne!(a, digest(&other_url.profiles, "secret-a"));
    // Missing material refuses, naming the key.
    let none: super::Source = Arc::new(|_: &str| None);
    let e = Plan::of(&loaded.profiles, &none).unwrap_err();
    assert!(
        e.iter().any(|l| l.contains("G_TOKEN_CLIENT_SECRET")),
        "{e:?}"
    );
}
