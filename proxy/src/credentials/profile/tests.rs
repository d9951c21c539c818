//! Unit tests of `profile`.

use super::*;

fn src(name: &str, text: &str) -> Source {
    Source {
        name: name.to_string(),
        text: text.to_string(),
    }
}

fn load_str(text: &str) -> Result<LoadedProfiles, Vec<String>> {
    load(&[src("p.yaml", text)])
        .map_err(|e| e.errors().map(ToString::to_string).collect::<Vec<_>>())
}

fn errors(text: &str) -> Vec<String> {
    match load_str(text) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e,
    }
}

const GITHUB: &str = "\
id: github
display_name: GitHub
description: GitHub API
category: source-control
inference_capable: false
resource_version: 3
annotations: {team: infra}
credentials:
  - name: api_token
    description: GitHub token
    env_vars: [GITHUB_TOKEN, GH_TOKEN]
    required: true
    auth_style: bearer
    header_name: authorization
endpoints:
  - host: api.github.com
    port: 443
  - host: '*.githubusercontent.com'
    ports: [443, 80, 443]
    path: /repos/**
binaries: [/usr/bin/gh, {path: /usr/bin/git}, /opt/*/bin/git]
";

#[test]
fn full_profile() {
    let loaded = load_str(GITHUB).unwrap();
    // Endpoints without `protocol` on a profile with credentials: binding scopes only.
    let fields: Vec<String> = loaded
        .warnings
        .iter()
        .map(|d| format!("{} {}", d.location, d.field))
        .collect();
    assert_eq!(
        fields,
        ["p.yaml:16:5 endpoints[0]", "p.yaml:18:5 endpoints[1]"]
    );
    assert!(
        loaded.warnings[0]
            .message
            .starts_with("no `protocol`: on a profile with credentials")
    );
    let p = &loaded.profiles[0];
    assert_eq!(p.id.as_str(), "github");
    assert_eq!(p.display_name.as_deref(), Some("GitHub"));
    assert_eq!(p.category, Category::SourceControl);
    assert_eq!(p.resource_version, Some(3));
    assert_eq!(p.annotations.get("team").map(String::as_str), Some("infra"));
    let c = &p.credentials[0];
    assert_eq!(c.name.as_str(), "api_token");
    assert_eq!(
        c.env_vars.iter().map(EnvKey::as_str).collect::<Vec<_>>(),
        ["GITHUB_TOKEN", "GH_TOKEN"]
    );
    assert!(c.required);
    assert_eq!(c.auth_style, Some(AuthStyle::Bearer));
    assert_eq!(p.endpoints[1].ports, [80, 443]);
    assert!(p.endpoints[1].matches(&Authority::new("raw.githubusercontent.com", 443), "/repos"));
    assert!(p.endpoints[1].matches(
        &Authority::new("raw.githubusercontent.com", 80),
        "/repos/a/b"
    ));
    assert!(!p.endpoints[1].matches(&Authority::new("raw.githubusercontent.com", 443), "/user"));
    assert!(p.endpoints[0].matches(&Authority::new("api.github.com", 443), "/anything"));
    assert!(!p.endpoints[0].matches(&Authority::new("api.github.com", 80), "/"));
    assert_eq!(p.binaries.len(), 3);
    assert_eq!(p.location.pos, Pos::new(1, 1));
    assert_eq!(c.location.pos, Pos::new(9, 5));
}

#[test]
fn binaries_admit_caller_or_ancestor() {
    let loaded = load_str(GITHUB).unwrap();
    let p = &loaded.profiles[0];
    let none: Vec<String> = Vec::new();
    let caller = |exe, ancestors| Caller {
        exe,
        ancestors,
        cmdline: &[],
        tenant: None,
    };
    assert!(p.admits(&caller("/usr/bin/gh", &none)));
    assert!(p.admits(&caller("/opt/x/bin/git", &none)));
    assert!(!p.admits(&caller("/usr/bin/python3", &none)));
    let shell = vec!["/bin/bash".to_string(), "/usr/bin/git".to_string()];
    assert!(p.admits(&caller("/usr/bin/ssh", &shell)));
    // A gateway tenant's program is unknown: a profile naming programs does not admit it.
    assert!(!p.admits(&Caller::tenant("alpha")));
}

#[test]
fn the_shipped_example_loads() {
    let text = include_str!("../../../../configs/providers/anthropic.yaml");
    let loaded = load_str(text).unwrap();
    let p = &loaded.profiles[0];
    assert_eq!(p.id.as_str(), "anthropic");
    assert_eq!(p.credentials[0].env_vars[0].as_str(), "ANTHROPIC_API_KEY");
    assert!(p.binds(&Authority::new("api.anthropic.com", 443), "/v1/messages"));
    assert!(!p.binds(&Authority::new("api.anthropic.com", 443), "/v2/messages"));
}

#[test]
fn multiple_documents_with_positions() {
    let text = "\
# leading comment
%YAML 1.2
---
id: one
credentials:
  - {name: a, env_vars: [A_KEY]}
endpoints: [{host: a.example.com, port: 443}]
---
---
# an empty document above is skipped
id: two
credentials:
  - {name: b, env_vars: [B_KEY]}
endpoints: [{host: b.example.com, port: 443, bogus: 1}]
...
--- {id: three, credentials: [{name: c, env_vars: [C_KEY]}], endpoints: [{host: c.example.com, port: 1}]}
";
    assert_eq!(
        errors(text),
        [
            "p.yaml:14:46: endpoints[0].bogus: unknown field `bogus`; expected one of: host, port, ports, path, protocol, tls, enforcement, access, rules, deny_rules, allowed_ips, allow_encoded_slash, request_body_credential_rewrite, websocket_credential_rewrite, allow_uninspected_credentials, credential_signing, signing_service, signing_region, credential_binding, json_rpc, mcp, persisted_queries, graphql_persisted_queries, graphql_max_body_bytes, allow_plaintext_credentials"
        ]
    );
    let fixed = text.replace(", bogus: 1", "");
    let loaded = load_str(&fixed).unwrap();
    let ids: Vec<&str> = loaded.profiles.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["one", "two", "three"]);
    assert_eq!(loaded.profiles[1].location.pos, Pos::new(11, 1));
    assert_eq!(loaded.profiles[2].location.pos, Pos::new(16, 5));
}

#[test]
fn split_keeps_markers_inside_text() {
    let parts = split_documents("a: '---x'\nb: |\n  ---\n----\n");
    assert_eq!(parts, [(0, "a: '---x'\nb: |\n  ---\n----\n")]);
    let parts = split_documents("a: 1\n---\nb: 2\n");
    assert_eq!(parts, [(0, "a: 1\n"), (1, "---\nb: 2\n")]);
    assert!(split_documents("# nothing\n---\n...\n").is_empty());
}

#[test]
fn schema_errors_have_positions() {
    let text = "\
id: Bad_Id
category: weird
inference_capable: maybe
discovery: {credentials: [X]}
credentials:
  - name: tok
    env_vars: [OK_KEY, v2_KEY, 'bad-key', OK_KEY]
    auth_style: digest
    header_name: 'x api'
    path_template: /bot/{credential}/{credential}
    refresh: {strategy: bespoke, token_url: 'https://x.example.com/t'}
    token_grant: {token_endpoint: x}
  - name: tok
    env_vars: [OTHER]
  - env_vars: []
endpoints:
  - host: '*.com'
    port: 70000
    path: v1
    protocol: rest
    access: read-only
    mcp: {}
  - host: a.example.com
    port: 443
    ports: [443]
  - port: 443
binaries: [relative/path, '/usr/bin/[', [x]]
extra: 1
";
    let got = errors(text);
    let want = [
        "p.yaml:1:5: id: `Bad_Id` is not a kebab-case id (lower-case letters and digits in words joined by `-`)",
        "p.yaml:2:11: category: unknown category `weird`; expected one of: other, inference, agent, source_control, messaging, data, knowledge",
        "p.yaml:3:20: inference_capable: expected `true` or `false`, found a string",
        "p.yaml:7:24: credentials[0].env_vars[1]: env var `v2_KEY` is in a namespace reserved for placeholder revisions (`v<digits>_…`) and stable handles (`s<64 hex>_…`)",
        "p.yaml:7:32: credentials[0].env_vars[2]: `bad-key` is not a valid env var name (letters, digits and `_`, at most 256 characters)",
        "p.yaml:7:43: credentials[0].env_vars[3]: env var `OK_KEY` is listed twice",
        "p.yaml:8:17: credentials[0].auth_style: unknown auth_style `digest`; expected one of: basic, bearer, header, query, path",
        "p.yaml:9:18: credentials[0].header_name: `x api` is not a valid HTTP header name",
        "p.yaml:10:20: credentials[0].path_template: `path_template` must contain `{credential}` exactly once (found 2)",
        "p.yaml:11:25: credentials[0].refresh.strategy: unknown `refresh` strategy `bespoke`; expected one of: static, external, oauth2_refresh_token, oauth2_client_credentials, google_service_account_jwt, aws_sts_assume_role",
        "p.yaml:12:35: credentials[0].token_grant.token_endpoint: `x` is not an https:// URL: sluice sends the workload's JWT-SVID only inside TLS (or to a loopback or in-cluster service host)",
        "p.yaml:13:5: credentials[1].name: credential `tok` is already defined at line 6",
        "p.yaml:15:5: credentials[2]: a credential needs a `name`",
        "p.yaml:15:15: credentials[2].env_vars: `env_vars` must list at least one env var name",
        "p.yaml:17:11: endpoints[0].host: a wildcard host needs at least three labels (`*.com` would match a whole top-level domain)",
        "p.yaml:18:11: endpoints[0].port: port 70000 is out of range 1-65535",
        "p.yaml:19:11: endpoints[0].path: `v1` must start with `/` (or be `**`)",
        "p.yaml:24:11: endpoints[1].port: `port` and `ports` are both given; write one",
        "p.yaml:26:5: endpoints[2]: an endpoint needs a `host`",
        "p.yaml:27:12: binaries[0]: `relative/path` is not an absolute path, so it can never match an executable",
        "p.yaml:27:41: binaries[2]: expected a string, found a list",
        "p.yaml:28:1: extra: unknown field `extra`; expected one of: id, display_name, description, category, inference_capable, resource_version, annotations, discovery, credentials, endpoints, binaries",
    ];
    assert_eq!(got, want, "\n{}", got.join("\n"));
}

#[test]
fn ids_and_env_vars_are_unique_across_files() {
    let a = "id: one\ncredentials: [{name: a, env_vars: [SHARED]}]\nendpoints: [{host: a.example.com, port: 443}]\n";
    let b = "id: one\n---\nid: two\ncredentials:\n  - name: b\n    env_vars: [SHARED]\nendpoints: [{host: b.example.com, port: 443}]\n";
    let err = load(&[src("a.yaml", a), src("b.yaml", b)]).unwrap_err();
    let got: Vec<String> = err.errors().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "b.yaml:1:1: id: provider profile `one` is already defined at a.yaml:1:1",
            "b.yaml:5:5: credentials[0].env_vars[0]: env var `SHARED` is already claimed by credential `one/a` at a.yaml:2:15",
        ]
    );
    assert_eq!(
        err.to_string(),
        "provider profile load failed with 2 error(s)"
    );
}

#[test]
fn endpointless_profiles_load_and_ids_are_required() {
    // Bound where a policy endpoint names it (`credential_binding`, `policy_binding.rs`).
    let loaded = load_str("id: x\ncredentials: [{name: a, env_vars: [A]}]\n").unwrap();
    assert!(loaded.profiles[0].endpoints.is_empty());
    assert!(loaded.composed.is_empty());
    assert_eq!(
        errors("display_name: X\n"),
        ["p.yaml:1:1: id: a provider profile needs an `id`"]
    );
    assert_eq!(
        errors("- id: x\n"),
        ["p.yaml:1:1: expected a mapping for a provider profile, found a list"]
    );
}

#[test]
fn placement_comes_from_the_placement_fields() {
    let placement = |fields: &str| {
        let text = format!(
            "id: x\ncredentials:\n  - {{name: k, env_vars: [K]{fields}}}\nendpoints: [{{host: a.example.com, port: 443}}]\n"
        );
        load_str(&text).map(|l| l.profiles[0].credentials[0].placement.clone())
    };
    assert_eq!(placement(""), Ok(Placement::AnyHeader));
    assert_eq!(
        placement(", auth_style: bearer"),
        Ok(Placement::Header("authorization".into()))
    );
    assert_eq!(
        placement(", auth_style: basic, header_name: Proxy-Auth"),
        Ok(Placement::Header("proxy-auth".into()))
    );
    assert_eq!(
        placement(", header_name: X-Api-Key"),
        Ok(Placement::Header("x-api-key".into()))
    );
    assert_eq!(
        placement(", query_param: key"),
        Ok(Placement::Query("key".into()))
    );
    assert_eq!(
        placement(", auth_style: path, path_template: '/bot{credential}/x'"),
        Ok(Placement::Path(Some("/bot{credential}/x".into())))
    );
    assert_eq!(placement(", auth_style: path"), Ok(Placement::Path(None)));
    for (fields, error) in [
        (
            ", auth_style: header",
            "auth_style `header` needs `header_name`",
        ),
        (
            ", auth_style: query",
            "auth_style `query` needs `query_param`",
        ),
        (
            ", auth_style: query, query_param: k, header_name: x",
            "`header_name` does not apply to auth_style `query`",
        ),
        (
            ", header_name: x, query_param: k",
            "header_name and query_param are given together: say where the credential goes with `auth_style`",
        ),
    ] {
        assert_eq!(
            placement(fields),
            Err(vec![format!("p.yaml:3:5: credentials[0]: {error}")]),
            "{fields}"
        );
    }
}

#[test]
fn profile_without_credentials_or_endpoints_warns() {
    let loaded = load_str("id: x\ndisplay_name: X\n").unwrap();
    let w: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        w,
        [
            "p.yaml:1:1: warning: the profile declares no credentials and no endpoints, so it has no effect"
        ]
    );
    assert!(loaded.composed.is_empty());
    // With endpoints it is a policy entry, credentials or not.
    let loaded = load_str("id: x\nendpoints: [{host: a.example.com, port: 443}]\n").unwrap();
    assert!(loaded.warnings.is_empty());
    assert_eq!(loaded.composed[0].entry.key.value, "_provider_x");
}

#[test]
fn yaml_syntax_error_in_a_later_document() {
    let text = "id: one\n---\nid: [two\n";
    let got = errors(text);
    assert_eq!(got.len(), 1);
    assert!(got[0].starts_with("p.yaml:"), "{got:?}");
    let line: u32 = got[0].split(':').nth(1).unwrap().parse().unwrap();
    assert!(line >= 3, "{got:?}");
}

#[test]
fn unreadable_file_is_a_diagnostic() {
    let err = load_files(&["/nonexistent/sluice-profile.yaml".to_string()]).unwrap_err();
    let got: Vec<String> = err.errors().map(ToString::to_string).collect();
    assert_eq!(got.len(), 1);
    assert!(
        got[0].starts_with("/nonexistent/sluice-profile.yaml:1:1: cannot read: "),
        "{got:?}"
    );
}

#[test]
fn names() {
    assert!(ProfileId::new("google-vertex-ai").is_some());
    for bad in ["", "A", "a--b", "-a", "a-", "a_b", "a b"] {
        assert!(ProfileId::new(bad).is_none(), "{bad}");
    }
    assert!(CredentialName::new("api_key.v2-x").is_some());
    assert!(CredentialName::new("a b").is_none());
    assert!(EnvKey::new("GH_TOKEN").is_some());
    assert!(EnvKey::new("v1_X").is_none());
    assert_eq!(
        EnvKey::new("K").map(|k| k.placeholder()).as_deref(),
        Some("openshell:resolve:env:K")
    );
}
