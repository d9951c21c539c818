use super::*;
use crate::credentials::binding::Bindings;
use crate::credentials::binding::tests::{bindings, scope};

fn headers(list: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .collect()
}

fn value<'h>(headers: &'h [(String, Vec<u8>)], name: &str) -> &'h str {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| std::str::from_utf8(v).unwrap())
        .unwrap()
}

fn gh() -> Bindings {
    bindings(&[
        ("GH_TOKEN", "ghp_secret"),
        ("TELEGRAM_BOT_TOKEN", "123456:ABC-def"),
    ])
}

type Outcome = (
    Result<Injected, CredentialError>,
    String,
    Vec<(String, Vec<u8>)>,
);

fn run(b: &Bindings, host: &str, target: &str, hs: &[(&str, &str)]) -> Outcome {
    let mut target = target.to_string();
    let mut hs = headers(hs);
    let path = target.split('?').next().unwrap_or("").to_string();
    let scoped = b.scoped(scope(host, 443, &path, "/usr/bin/gh"));
    let r = rewrite_request(&mut target, &mut hs, &scoped);
    (r, target, hs)
}

#[test]
fn header_whole_and_scheme_forms() {
    let b = gh();
    let (r, _, hs) = run(
        &b,
        "api.github.com",
        "/user",
        &[
            ("X-Api-Key", "openshell:resolve:env:GH_TOKEN"),
            (
                "Authorization",
                "Bearer  openshell:resolve:env:GITHUB_TOKEN ",
            ),
            ("X-Token", "token xoxb-OPENSHELL-RESOLVE-ENV-GH_TOKEN"),
            ("X-Rev", "openshell:resolve:env:v7_GH_TOKEN"),
            ("Accept", "application/json"),
        ],
    );
    let injected = r.unwrap();
    assert_eq!(injected.credentials.len(), 1);
    assert_eq!(injected.credentials[0].to_string(), "github/token");
    assert_eq!(value(&hs, "X-Api-Key"), "ghp_secret");
    assert_eq!(value(&hs, "Authorization"), "Bearer ghp_secret");
    assert_eq!(value(&hs, "X-Token"), "token ghp_secret");
    assert_eq!(value(&hs, "X-Rev"), "ghp_secret");
    assert_eq!(value(&hs, "Accept"), "application/json");
}

#[test]
fn basic_auth_round_trip() {
    let b = gh();
    let creds = BASIC.encode("x-access-token:openshell:resolve:env:GH_TOKEN");
    let (r, _, hs) = run(
        &b,
        "api.github.com",
        "/",
        &[("Authorization", &format!("Basic {creds}"))],
    );
    r.unwrap();
    let v = value(&hs, "Authorization");
    let token = v.strip_prefix("Basic ").unwrap();
    assert_eq!(BASIC.decode(token).unwrap(), b"x-access-token:ghp_secret");
    // Both halves, unpadded input, lower-case scheme.
    let creds = BASIC.encode("openshell:resolve:env:GH_TOKEN:sk-OPENSHELL-RESOLVE-ENV-GH_TOKEN");
    let unpadded = creds.trim_end_matches('=');
    let (r, _, hs) = run(
        &b,
        "api.github.com",
        "/",
        &[("Authorization", &format!("basic {unpadded}"))],
    );
    r.unwrap();
    let token = value(&hs, "Authorization").strip_prefix("basic ").unwrap();
    assert_eq!(BASIC.decode(token).unwrap(), b"ghp_secret:ghp_secret");
    // A Basic credential without placeholders is left alone.
    let plain = BASIC.encode("user:pass");
    let (r, _, hs) = run(
        &b,
        "api.github.com",
        "/",
        &[("Authorization", &format!("Basic {plain}"))],
    );
    assert!(r.unwrap().is_empty());
    assert_eq!(value(&hs, "Authorization"), format!("Basic {plain}"));
}

#[test]
fn basic_auth_with_unknown_key_fails_closed() {
    let b = gh();
    let creds = BASIC.encode("u:openshell:resolve:env:NOPE");
    let (r, _, hs) = run(
        &b,
        "api.github.com",
        "/",
        &[("Authorization", &format!("Basic {creds}"))],
    );
    let e = r.unwrap_err();
    assert_eq!(e.code(), "credential_unavailable");
    assert_eq!(value(&hs, "Authorization"), format!("Basic {creds}"));
}

#[test]
fn header_markers_elsewhere_are_refused() {
    let b = gh();
    for v in [
        "prefix openshell:resolve:env:GH_TOKEN suffix",
        "x=openshell:resolve:env:GH_TOKEN",
        "openshell%3Aresolve%3Aenv%3AGH_TOKEN",
        "Bearer OPENSHELL-RESOLVE-ENV-GH_TOKEN",
        "Bearer Openshell:Resolve:Env:GH_TOKEN",
        "openshell:resolve:env:",
    ] {
        let (r, _, hs) = run(&b, "api.github.com", "/", &[("X-Api-Key", v)]);
        assert_eq!(
            r.unwrap_err(),
            CredentialError::InvalidPlaceholder {
                site: Site::Header("X-Api-Key".into())
            },
            "{v}"
        );
        assert_eq!(value(&hs, "X-Api-Key"), v);
    }
    let (r, _, _) = run(
        &b,
        "api.github.com",
        "/",
        &[("X-OPENSHELL-RESOLVE-ENV-A", "1")],
    );
    assert!(matches!(r, Err(CredentialError::InvalidPlaceholder { .. })));
}

#[test]
fn telegram_path_segment() {
    let b = gh();
    let (r, target, _) = run(
        &b,
        "api.telegram.org",
        "/botopenshell:resolve:env:TELEGRAM_BOT_TOKEN/sendMessage?chat_id=1",
        &[],
    );
    assert_eq!(r.unwrap().credentials[0].to_string(), "telegram/bot-token");
    assert_eq!(target, "/bot123456:ABC-def/sendMessage?chat_id=1");
    // Percent-encoded placeholder in the segment.
    let (r, target, _) = run(
        &b,
        "api.telegram.org",
        "/botopenshell%3Aresolve%3Aenv%3ATELEGRAM_BOT_TOKEN/getMe",
        &[],
    );
    r.unwrap();
    assert_eq!(target, "/bot123456:ABC-def/getMe");
}

#[test]
fn path_values_that_change_the_path_are_refused() {
    for bad in ["a/b", "a\\b", "a?b", "a#b", "..", "x..y", "a\tb"] {
        let b = bindings(&[("TELEGRAM_BOT_TOKEN", bad)]);
        let (r, target, _) = run(
            &b,
            "api.telegram.org",
            "/botopenshell:resolve:env:TELEGRAM_BOT_TOKEN/getMe",
            &[],
        );
        let e = r.unwrap_err();
        assert!(
            matches!(
                &e,
                CredentialError::Unavailable {
                    reason: UnavailableReason::UnsafeForSite,
                    site: Site::Path,
                    ..
                }
            ),
            "{bad}: {e:?}"
        );
        assert_eq!(target, "/botopenshell:resolve:env:TELEGRAM_BOT_TOKEN/getMe");
        assert!(!e.to_string().contains(bad), "{e}");
    }
    // Other characters are percent-encoded as a segment.
    let b = bindings(&[("TELEGRAM_BOT_TOKEN", "a b%c")]);
    let (r, target, _) = run(
        &b,
        "api.telegram.org",
        "/botopenshell:resolve:env:TELEGRAM_BOT_TOKEN/x",
        &[],
    );
    r.unwrap();
    assert_eq!(target, "/bota%20b%25c/x");
}

#[test]
fn query_values() {
    let b = bindings(&[("MAPS_KEY", "mk_secret")]);
    let (r, target, _) = run(
        &b,
        "maps.example.com",
        "/search?q=a+b&key=openshell%3Aresolve%3Aenv%3AMAPS_KEY&flag",
        &[],
    );
    let injected = r.unwrap();
    assert_eq!(target, "/search?q=a+b&key=mk_secret&flag");
    // The response scrub turns the secret back into what the client sent.
    let mut echoed = Vec::new();
    assert_eq!(injected.scrub.replace_all(b"got mk_secret", &mut echoed), 1);
    assert_eq!(echoed, b"got openshell:resolve:env:MAPS_KEY");
    let b = bindings(&[("MAPS_KEY", "a+b/c d")]);
    let (r, target, _) = run(
        &b,
        "maps.example.com",
        "/s?key=openshell:resolve:env:MAPS_KEY",
        &[],
    );
    let injected = r.unwrap();
    assert_eq!(target, "/s?key=a%2Bb%2Fc%20d");
    // Both spellings the upstream could echo are scrubbed.
    let mut echoed = Vec::new();
    injected
        .scrub
        .replace_all(b"a+b/c d|a%2Bb%2Fc%20d", &mut echoed);
    assert_eq!(
        echoed,
        b"openshell:resolve:env:MAPS_KEY|openshell:resolve:env:MAPS_KEY"
    );
    // Markers in a name or a bare part are refused.
    for t in [
        "/s?openshell:resolve:env:MAPS_KEY=1",
        "/s?openshell:resolve:env:MAPS_KEY",
    ] {
        let (r, target, _) = run(&b, "maps.example.com", t, &[]);
        assert!(
            matches!(
                r,
                Err(CredentialError::InvalidPlaceholder { site: Site::Query })
            ),
            "{t}"
        );
        assert_eq!(target, t);
    }
}

#[test]
fn placeholders_go_only_where_the_profile_places_them() {
    let b = bindings(&[
        ("MAPS_KEY", "mk_secret"),
        ("GH_TOKEN", "ghp_secret"),
        ("TELEGRAM_BOT_TOKEN", "123456:ABC-def"),
    ]);
    let placement = |r: Result<Injected, CredentialError>| match r {
        Err(e @ CredentialError::PlacementMismatch { .. }) => {
            assert_eq!(
                (e.code().status(), e.code().as_str()),
                (403, "credential_placement_mismatch")
            );
            assert_eq!(e.finding(), Some(FINDING_PLACEMENT_MISMATCH));
            e.to_string()
        }
        other => panic!("{other:?}"),
    };
    // No placement declared (github): request headers only, never the path or query.
    let (r, target, _) = run(
        &b,
        "api.github.com",
        "/search?q=openshell:resolve:env:GH_TOKEN",
        &[],
    );
    assert_eq!(
        placement(r),
        "credential `github/token` in the query string is not where its profile places it (request headers only)"
    );
    assert_eq!(target, "/search?q=openshell:resolve:env:GH_TOKEN");
    let (r, _, _) = run(
        &b,
        "api.github.com",
        "/x/openshell:resolve:env:GH_TOKEN",
        &[],
    );
    placement(r);
    // `query_param: key`: that parameter only, not another one, not a header.
    let (r, _, _) = run(
        &b,
        "maps.example.com",
        "/s?other=openshell:resolve:env:MAPS_KEY",
        &[],
    );
    placement(r);
    let (r, _, hs) = run(
        &b,
        "maps.example.com",
        "/s",
        &[("User-Agent", "openshell:resolve:env:MAPS_KEY")],
    );
    assert_eq!(
        placement(r),
        "credential `maps/api-key` in the header `User-Agent` is not where its profile places it (query parameter `key` only)"
    );
    assert_eq!(value(&hs, "User-Agent"), "openshell:resolve:env:MAPS_KEY");
    // `path_template: /bot{credential}/`: that segment and position only.
    for t in [
        "/bot1/openshell:resolve:env:TELEGRAM_BOT_TOKEN",
        "/bot/xopenshell:resolve:env:TELEGRAM_BOT_TOKEN",
        "/botxopenshell:resolve:env:TELEGRAM_BOT_TOKEN/getMe",
        "/bot/getMe?x=openshell:resolve:env:TELEGRAM_BOT_TOKEN",
        "/botopenshell:resolve:env:TELEGRAM_BOT_TOKEN%2Etail/getMe",
        "/botopenshell:resolve:env:TELEGRAM_BOT_TOKEN.x/getMe",
        "/botopenshell:resolve:env:TELEGRAM_BOT_TOKEN",
    ] {
        let (r, _, _) = run(&b, "api.telegram.org", t, &[]);
        placement(r);
    }
    let (r, _, _) = run(
        &b,
        "api.telegram.org",
        "/bot1/x",
        &[("X-Token", "openshell:resolve:env:TELEGRAM_BOT_TOKEN")],
    );
    placement(r);
}

#[test]
fn plaintext_needs_the_binding_to_opt_in() {
    let b = bindings(&[("MAPS_KEY", "mk_secret"), ("GH_TOKEN", "ghp_secret")]);
    let plain = |host, port, target: &str, hs: &[(&str, &str)]| {
        let mut target = target.to_string();
        let mut hs = headers(hs);
        let path = target.split('?').next().unwrap_or("").to_string();
        let mut s = scope(host, port, &path, "/usr/bin/gh");
        s.transport = crate::credentials::Transport::Plaintext;
        let r = rewrite_request(&mut target, &mut hs, &b.scoped(s));
        (r, target, hs)
    };
    let (r, _, hs) = plain(
        "api.github.com",
        443,
        "/user",
        &[("Authorization", "Bearer openshell:resolve:env:GH_TOKEN")],
    );
    let e = r.unwrap_err();
    assert_eq!(
        (e.code().status(), e.code().as_str()),
        (403, "credential_requires_tls")
    );
    assert_eq!(e.finding(), Some(FINDING_REQUIRES_TLS));
    assert_eq!(
        value(&hs, "Authorization"),
        "Bearer openshell:resolve:env:GH_TOKEN"
    );
    // `allow_plaintext_credentials: true` on the matching profile endpoint.
    let (r, target, _) = plain(
        "plain.example.com",
        8080,
        "/s?key=openshell:resolve:env:MAPS_KEY",
        &[],
    );
    r.unwrap();
    assert_eq!(target, "/s?key=mk_secret");
    let (r, _, _) = plain(
        "maps.example.com",
        443,
        "/s?key=openshell:resolve:env:MAPS_KEY",
        &[],
    );
    assert_eq!(r.unwrap_err().code(), "credential_requires_tls");
}

#[test]
fn basic_auth_echo_is_scrubbed_back_to_the_clients_token() {
    let b = gh();
    let creds = BASIC.encode("x:openshell:resolve:env:GH_TOKEN");
    let (r, _, hs) = run(
        &b,
        "api.github.com",
        "/",
        &[("Authorization", &format!("Basic {creds}"))],
    );
    let injected = r.unwrap();
    let sent = value(&hs, "Authorization").to_string();
    let mut echoed = Vec::new();
    injected
        .scrub
        .replace_all(format!("{sent} x:ghp_secret").as_bytes(), &mut echoed);
    assert_eq!(
        String::from_utf8(echoed).unwrap(),
        format!("Basic {creds} x:openshell:resolve:env:GH_TOKEN")
    );
}

#[test]
fn outside_binding_is_a_mismatch_and_changes_nothing() {
    let b = gh();
    let (r, target, hs) = run(
        &b,
        "evil.example.com",
        "/x?k=openshell:resolve:env:GH_TOKEN",
        &[("Authorization", "Bearer openshell:resolve:env:GH_TOKEN")],
    );
    let e = r.unwrap_err();
    assert_eq!(e.code().status(), 403);
    assert_eq!(e.code(), "credential_endpoint_mismatch");
    assert_eq!(e.finding(), Some(FINDING_ENDPOINT_MISMATCH));
    assert_eq!(
        e.to_string(),
        "credential `github/token` in the query string is not authorized for this request: the request's host, port and path are outside the credential's profile endpoints"
    );
    assert_eq!(target, "/x?k=openshell:resolve:env:GH_TOKEN");
    assert_eq!(
        value(&hs, "Authorization"),
        "Bearer openshell:resolve:env:GH_TOKEN"
    );
}

#[test]
fn all_or_nothing_and_worst_error_wins() {
    let b = gh();
    // One good header, one unknown key, one mismatched credential.
    let (r, target, hs) = run(
        &b,
        "api.github.com",
        "/user?k=openshell:resolve:env:UNKNOWN_KEY",
        &[
            ("X-A", "openshell:resolve:env:GH_TOKEN"),
            ("X-B", "openshell:resolve:env:TELEGRAM_BOT_TOKEN"),
        ],
    );
    let e = r.unwrap_err();
    assert!(
        matches!(e, CredentialError::EndpointMismatch { .. }),
        "{e:?}"
    );
    assert_eq!(value(&hs, "X-A"), "openshell:resolve:env:GH_TOKEN");
    assert_eq!(target, "/user?k=openshell:resolve:env:UNKNOWN_KEY");
    let (r, _, _) = run(
        &b,
        "api.github.com",
        "/user?k=openshell:resolve:env:UNKNOWN_KEY",
        &[],
    );
    let e = r.unwrap_err();
    assert_eq!(
        e.to_string(),
        "credential placeholder for `UNKNOWN_KEY` in the query string could not be resolved: no provider credential has this env var"
    );
    assert_eq!(
        (e.code().status(), e.code().as_str()),
        (500, "credential_unavailable")
    );
}

#[test]
fn unavailable_value_and_caller_mismatch() {
    let b = bindings(&[]);
    let (r, _, _) = run(
        &b,
        "api.github.com",
        "/",
        &[("X", "openshell:resolve:env:GITHUB_UNSET")],
    );
    assert_eq!(
        r.unwrap_err().to_string(),
        "credential placeholder for `GITHUB_UNSET` in the header `X` could not be resolved: no value is set"
    );
    let b = gh();
    let mut hs = headers(&[("X", "openshell:resolve:env:GH_TOKEN")]);
    let mut target = "/".to_string();
    let scoped = b.scoped(scope("api.github.com", 443, "/", "/usr/bin/curl"));
    let e = rewrite_request(&mut target, &mut hs, &scoped).unwrap_err();
    assert!(matches!(
        e,
        CredentialError::EndpointMismatch {
            reason: Mismatch::Caller,
            ..
        }
    ));
}

#[test]
fn no_marker_no_change() {
    let b = gh();
    let (r, target, hs) = run(
        &b,
        "api.github.com",
        "/a%20b/c?x=1+2",
        &[("Authorization", "Bearer real")],
    );
    assert!(r.unwrap().is_empty());
    assert_eq!(target, "/a%20b/c?x=1+2");
    assert_eq!(value(&hs, "Authorization"), "Bearer real");
    assert!(!head_has_marker("/a", &hs));
    let creds = BASIC.encode("u:openshell:resolve:env:X");
    assert!(head_has_marker(
        "/a",
        &headers(&[("Authorization", &format!("Basic {creds}"))])
    ));
    assert!(head_has_marker("/a%3Aopenshell%3aresolve%3Aenv%3A", &[]));
}

#[test]
fn header_secret_with_control_bytes_is_refused() {
    let b = bindings(&[("GH_TOKEN", "a\u{1b}b")]);
    let (r, _, _) = run(
        &b,
        "api.github.com",
        "/",
        &[("X", "openshell:resolve:env:GH_TOKEN")],
    );
    assert!(matches!(
        r.unwrap_err(),
        CredentialError::Unavailable {
            reason: UnavailableReason::UnsafeForSite,
            ..
        }
    ));
}

#[test]
fn decoding_keeps_offsets() {
    let (d, o) = percent_decode(b"a%3Ab%zz+", true);
    assert_eq!(d, b"a:b%zz ");
    assert_eq!(o, [0, 1, 4, 5, 6, 7, 8, 9]);
}

/// The revisioned (`v<N>_KEY`) and stable (`s<64 hex>_KEY`) spellings, in both the
/// `openshell:resolve:env:` and the `OPENSHELL-RESOLVE-ENV-` forms, are accepted wherever
/// the canonical form is: header, Basic credentials, path segment, query value; and, like
/// it, never resolve a key that no profile binds.
#[test]
fn revisioned_and_stable_forms_go_wherever_the_canonical_form_goes() {
    let hex = "0123456789abcdef".repeat(4);
    let spellings = |key: &str| {
        [
            format!("openshell:resolve:env:v12_{key}"),
            format!("openshell:resolve:env:s{hex}_{key}"),
            format!("sk-OPENSHELL-RESOLVE-ENV-v12_{key}"),
            format!("sk-OPENSHELL-RESOLVE-ENV-s{hex}_{key}"),
        ]
    };
    let b = bindings(&[
        ("GH_TOKEN", "ghp_secret"),
        ("TELEGRAM_BOT_TOKEN", "123456:ABC-def"),
        ("MAPS_KEY", "mk_secret"),
    ]);
    for ph in spellings("GH_TOKEN") {
        let (r, _, hs) = run(
            &b,
            "api.github.com",
            "/user",
            &[("Authorization", &format!("Bearer {ph}"))],
        );
        assert_eq!(
            r.unwrap().credentials[0].to_string(),
            "github/token",
            "{ph}"
        );
        assert_eq!(value(&hs, "Authorization"), "Bearer ghp_secret", "{ph}");
        let creds = BASIC.encode(format!("x-access-token:{ph}"));
        let (r, _, hs) = run(
            &b,
            "api.github.com",
            "/",
            &[("Authorization", &format!("Basic {creds}"))],
        );
        r.unwrap();
        let token = value(&hs, "Authorization").strip_prefix("Basic ").unwrap();
        assert_eq!(
            BASIC.decode(token).unwrap(),
            b"x-access-token:ghp_secret",
            "{ph}"
        );
    }
    // (An alias's prefix takes in the `bot` before it, so only the colon forms fit a
    // template that places the credential after `/bot`, as with the unrevisioned forms.)
    for ph in spellings("TELEGRAM_BOT_TOKEN").into_iter().take(2) {
        let (r, target, _) = run(&b, "api.telegram.org", &format!("/bot{ph}/getMe"), &[]);
        r.unwrap();
        assert_eq!(target, "/bot123456:ABC-def/getMe", "{ph}");
    }
    for ph in spellings("MAPS_KEY") {
        let (r, target, _) = run(&b, "maps.example.com", &format!("/s?key={ph}"), &[]);
        r.unwrap();
        assert_eq!(target, "/s?key=mk_secret", "{ph}");
    }
    // Outside its binding, a revisioned spelling is refused like the canonical one.
    for ph in spellings("GH_TOKEN") {
        let (r, _, hs) = run(
            &b,
            "example.com",
            "/",
            &[("Authorization", &format!("Bearer {ph}"))],
        );
        assert_eq!(
            r.unwrap_err().code(),
            "credential_endpoint_mismatch",
            "{ph}"
        );
        assert_eq!(value(&hs, "Authorization"), format!("Bearer {ph}"));
    }
    // A key no profile binds never resolves, in any spelling: fail closed.
    for ph in spellings("UNBOUND_KEY")
        .into_iter()
        .chain(["openshell:resolve:env:UNBOUND_KEY".to_string()])
    {
        let (r, _, hs) = run(
            &b,
            "api.github.com",
            "/",
            &[("Authorization", &format!("Bearer {ph}"))],
        );
        assert_eq!(r.unwrap_err().code(), "credential_unavailable", "{ph}");
        assert_eq!(value(&hs, "Authorization"), format!("Bearer {ph}"));
    }
}

/// Runs `permits` for a placeholder of `len` bytes in the path `target` (origin form), in
/// the first segment that holds `@`, the way `target` splits the path.
fn path_permits(template: &str, target: &str) -> bool {
    let placement = Placement::Path(Some(template.to_string()));
    let path = target.split('?').next().unwrap_or("");
    let count = path.split('/').count();
    let mut at = 0;
    for (index, segment) in path.split('/').enumerate() {
        let (decoded, _) = percent_decode(segment.as_bytes(), false);
        if let Some(start) = decoded.iter().position(|&b| b == b'@') {
            let spot = Spot::Segment {
                decoded: &decoded,
                before: &path[..at],
                last: index + 1 == count,
            };
            return permits(&placement, spot, start..start + 1);
        }
        at += segment.len() + 1;
    }
    panic!("no @ in {target}");
}

#[test]
fn a_path_template_is_matched_literally_around_the_placeholder() {
    let t = "/v1/keys/{credential}";
    assert!(path_permits(t, "/v1/keys/@"));
    assert!(path_permits(t, "/v1/keys/@?x=1"));
    for refused in [
        "/v1/other/@",
        "/v1/other/@%2Etail",
        "/v1/keys/@%2Etail",
        "/v1/keys/@.tail",
        "/v1/keys/x@",
        "/v1/keys/@/more",
        "/v2/keys/@",
        "/v1/Keys/@",
        "/v1//keys/@",
        "/v1/%6Beys/@",
        "/x/v1/keys/@",
        "/v1/keys/../other/@",
    ] {
        assert!(!path_permits(t, refused), "{refused}");
    }
    let t = "/bot{credential}/";
    assert!(path_permits(t, "/bot@/getMe"));
    assert!(path_permits(t, "/bot@/"));
    for refused in [
        "/bot@",
        "/bot@x/getMe",
        "/x@/getMe",
        "/a/bot@/getMe",
        "/bo@/getMe",
    ] {
        assert!(!path_permits(t, refused), "{refused}");
    }
    let t = "/a/{credential}.json/x";
    assert!(path_permits(t, "/a/@.json/y"));
    assert!(!path_permits(t, "/a/@.jsonx/y"));
    assert!(!path_permits(t, "/a/@.json"));
    let t = "/{credential}";
    assert!(path_permits(t, "/@"));
    assert!(!path_permits(t, "/@/x"));
}
