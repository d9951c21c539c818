//! Provider profiles composed into the policy (`policy::compose`): the `_provider_<id>`
//! entry, its validation and ambiguity checks with the policy files, every error at the
//! profile's file and line, and OpenShell's and NemoClaw's own fields.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::policy::{self, Compat, Loaded, Source};

fn src(name: &str, text: &str) -> Source {
    Source {
        name: name.to_string(),
        text: text.to_string(),
    }
}

fn profiles(text: &str) -> LoadedProfiles {
    load(&[src("prof.yaml", text)]).unwrap_or_else(|e| {
        panic!(
            "{:?}",
            e.errors().map(ToString::to_string).collect::<Vec<_>>()
        )
    })
}

fn profile_errors(text: &str) -> Vec<String> {
    match load(&[src("prof.yaml", text)]) {
        Ok(_) => panic!("expected profile errors for:\n{text}"),
        Err(e) => e.errors().map(ToString::to_string).collect(),
    }
}

/// The policy `policy_text` (a file `pol.yaml`; none: the embedded default) with the
/// profiles of `profile_text` composed in.
fn compose(
    policy_text: Option<&str>,
    profile_text: &str,
    compat: Compat,
) -> Result<Loaded, Vec<String>> {
    let p = profiles(profile_text);
    let sources = match policy_text {
        Some(t) => vec![src("pol.yaml", t)],
        None => vec![src(policy::DEFAULT_POLICY_NAME, policy::DEFAULT_POLICY)],
    };
    policy::load_composed(&sources, compat, &p.composed)
        .map_err(|e| e.errors().map(ToString::to_string).collect())
}

const OPENSHELL_GITHUB: &str = "\
id: github
display_name: GitHub
description: GitHub API
category: source_control
credentials:
  - name: token
    env_vars: [GITHUB_TOKEN]
    auth_style: bearer
discovery:
  credentials:
    - name: token
      env_vars: [GITHUB_TOKEN]
endpoints:
  - host: api.github.com
    port: 443
    protocol: rest
    enforcement: enforce
    access: read-only
  - host: github.com
    port: 443
    protocol: rest
    enforcement: enforce
    rules:
      - allow: {method: POST, path: '/*/*/git-upload-pack'}
binaries: [/usr/bin/gh, /usr/bin/git]
";

fn caller(exe: &str) -> Caller<'_> {
    Caller {
        exe,
        ancestors: &[],
        cmdline: &[],
        tenant: None,
    }
}

#[test]
fn a_profile_becomes_a_provider_entry_with_its_endpoints_and_binaries() {
    let loaded = compose(None, OPENSHELL_GITHUB, Compat::Strict).unwrap();
    let p = &loaded.policy;
    let entry = p
        .entries()
        .iter()
        .find(|e| e.key.as_str() == "_provider_github")
        .expect("composed entry");
    assert_eq!(entry.endpoints.len(), 2);
    assert_eq!(entry.binaries.len(), 2);
    assert_eq!(entry.location.to_string(), "prof.yaml:1:5");
    assert_eq!(
        entry.endpoints[1].location.to_string(),
        "prof.yaml:19:5",
        "endpoints keep the profile's positions"
    );
    // Its rules decide: read-only on the API, only upload-pack on github.com.
    let allow = |exe: &str, method: &str, host: &str, target: &str| {
        let question = policy::explain::Question {
            binary: exe.to_string(),
            ancestors: Vec::new(),
            cmdline_paths: Vec::new(),
            tenant: None,
            host: host.to_string(),
            port: 443,
            request: Some(policy::explain::QuestionRequest {
                method: method.to_string(),
                target: target.to_string(),
                websocket_upgrade: false,
                ..Default::default()
            }),
        };
        let answer = policy::explain::explain(p, &question);
        serde_json::to_value(&answer).unwrap()["decision"] == "allow"
    };
    assert!(allow("/usr/bin/gh", "GET", "api.github.com", "/repos/a/b"));
    assert!(!allow(
        "/usr/bin/gh",
        "DELETE",
        "api.github.com",
        "/repos/a/b"
    ));
    assert!(allow(
        "/usr/bin/git",
        "POST",
        "github.com",
        "/a/b/git-upload-pack"
    ));
    assert!(!allow(
        "/usr/bin/git",
        "POST",
        "github.com",
        "/a/b/git-receive-pack"
    ));
    assert!(!allow(
        "/usr/bin/curl",
        "GET",
        "api.github.com",
        "/repos/a/b"
    ));
    assert!(matches!(
        p.decide_l4(
            &caller("/usr/bin/curl"),
            &Authority::new("api.github.com", 443)
        ),
        policy::L4Decision::Deny(_)
    ));
}

#[test]
fn composed_entries_merge_with_the_policy_files() {
    let pol = "version: 1\nnetwork_policies:\n  other:\n    endpoints: [{host: example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n";
    let loaded = compose(Some(pol), OPENSHELL_GITHUB, Compat::Strict).unwrap();
    let keys: Vec<&str> = loaded
        .policy
        .entries()
        .iter()
        .map(|e| e.key.as_str())
        .collect();
    assert_eq!(keys, ["_provider_github", "other"]);
    assert!(loaded.policy.sources().iter().any(|s| s == "prof.yaml"));
}

#[test]
fn errors_in_a_profile_endpoint_name_the_profile_file_and_line() {
    let text = "\
id: api
credentials: [{name: k, env_vars: [K]}]
endpoints:
  - host: api.example.com
    port: 443
    protocol: rest
    enforcement: enforce
    rules:
      - allow: {method: GET, path: v1}
  - host: b.example.com
    port: 443
    protocol: graphql
binaries: [/usr/bin/curl]
";
    let errors = compose(None, text, Compat::Strict).unwrap_err();
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(
        errors[0].starts_with(
            "prof.yaml:9:36: network_policies._provider_api.endpoints[0].rules[0].allow.path"
        ),
        "{errors:#?}"
    );
    assert_eq!(
        errors[1],
        "prof.yaml:10:5: network_policies._provider_api.endpoints[1]: `protocol: graphql` needs `rules` or `access`"
    );
}

#[test]
fn ambiguity_between_a_profile_and_a_policy_file_is_an_error() {
    let pol = "\
version: 1
network_policies:
  gh:
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        enforcement: audit
        access: full
    binaries: [{path: /usr/bin/curl}]
";
    let errors = compose(Some(pol), OPENSHELL_GITHUB, Compat::Strict).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let e = &errors[0];
    assert!(
        e.contains("'gh' endpoint[0]") && e.contains("'_provider_github' endpoint[0]"),
        "{e}"
    );
    assert!(e.contains("enforcement="), "{e}");
    assert!(
        e.starts_with("prof.yaml:14:5:") || e.starts_with("pol.yaml:5:9:"),
        "{e}"
    );
    assert!(e.contains("pol.yaml:5:9") && e.contains("prof.yaml"), "{e}");
}

#[test]
fn a_policy_entry_may_not_take_a_provider_entry_name() {
    let pol = "version: 1\nnetwork_policies:\n  _provider_github:\n    endpoints: [{host: example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n";
    let errors = compose(Some(pol), OPENSHELL_GITHUB, Compat::Strict).unwrap_err();
    assert_eq!(
        errors,
        [
            "prof.yaml:1:5: id: provider profile `github` composes into the policy `_provider_github`, which is already defined in pol.yaml:3:3"
        ]
    );
}

#[test]
fn a_credentialed_endpoint_without_protocol_binds_by_path_and_grants_the_host_at_l4() {
    // sluice's binding-only endpoint: `path` scopes where the secret goes.
    let text = "id: api\ncredentials: [{name: k, env_vars: [K]}]\nendpoints: [{host: api.example.com, port: 443, path: /v1/**}]\nbinaries: [/usr/bin/curl]\n";
    let p = profiles(text);
    assert!(p.profiles[0].binds(&Authority::new("api.example.com", 443), "/v1/x"));
    assert!(!p.profiles[0].binds(&Authority::new("api.example.com", 443), "/v2/x"));
    let loaded = compose(None, text, Compat::Strict).unwrap();
    let entry = &loaded.policy.entries()[0];
    assert_eq!(entry.key.as_str(), "_provider_api");
    assert!(!entry.endpoints[0].inspects_requests());
    // Without credentials, `path` has no meaning but L7 selection: the policy rule applies.
    let errors = compose(
        None,
        "id: api\nendpoints: [{host: api.example.com, port: 443, path: /v1/**}]\nbinaries: [/usr/bin/curl]\n",
        Compat::Strict,
    )
    .unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].starts_with("prof.yaml:2:54: network_policies._provider_api.endpoints[0].path: `path` selects requests"), "{errors:#?}");
}

#[test]
fn what_would_weaken_enforcement_if_ignored_is_refused_by_name() {
    let cases = [
        (
            "credentials:\n  - {name: k, env_vars: [K], refresh: {strategy: bespoke}}\nendpoints: [{host: a.example.com, port: 443}]\n",
            "prof.yaml:3:50: credentials[0].refresh.strategy: unknown `refresh` strategy `bespoke`; expected one of: static, external, oauth2_refresh_token, oauth2_client_credentials, google_service_account_jwt, aws_sts_assume_role",
        ),
        (
            "middlewares: [{name: x}]\nendpoints: [{host: a.example.com, port: 443}]\n",
            "prof.yaml:2:1: middlewares: `middlewares` (network middlewares) is not supported by sluice yet",
        ),
    ];
    for (body, want) in cases {
        let text = format!("id: x\n{body}");
        let got = profile_errors(&text);
        assert_eq!(got, [want], "\n{text}");
    }
    // GraphQL rule fields load, and are refused where they would be ignored (a REST endpoint).
    let text = "id: x\nendpoints:\n  - host: a.example.com\n    port: 443\n    protocol: rest\n    rules: [{allow: {operation_type: query}}]\n";
    let errors = compose(None, text, Compat::Strict).unwrap_err();
    assert!(
        errors.iter().any(|e| e.contains("endpoints[0].rules[0]")
            && e.contains("only apply with `protocol: graphql`")),
        "{errors:?}"
    );
    // The JSON-RPC and MCP stanzas load, and are refused where they would be ignored.
    for stanza in ["mcp", "json_rpc"] {
        let text =
            format!("id: x\nendpoints:\n  - {{host: a.example.com, port: 443, {stanza}: {{}}}}\n");
        let errors = compose(None, &text, Compat::Strict).unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| e.contains(&format!("endpoints[0].{stanza}"))
                    && e.contains("only valid for protocol")),
            "{errors:?}"
        );
    }
}

#[test]
fn what_has_no_effect_on_enforcement_loads_with_a_note() {
    let text = "\
id: x
display_name: X
description: an example
category: inference
inference_capable: true
resource_version: 7
annotations: {owner: me}
discovery: {credentials: [{name: k, env_vars: [K]}]}
credentials:
  - name: k
    env_vars: [K]
    refresh: {strategy: static}
endpoints: [{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, access: full}]
";
    let p = profiles(text);
    let w: Vec<String> = p.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(w.len(), 2, "{w:#?}");
    assert!(
        w[0].starts_with("prof.yaml:8:12: warning: discovery: `discovery`"),
        "{w:#?}"
    );
    assert!(w[0].contains("no effect on enforcement"), "{w:#?}");
    assert!(
        w[1].starts_with("prof.yaml:12:25: warning: credentials[0].refresh.strategy"),
        "{w:#?}"
    );
}

#[test]
fn a_nemoclaw_preset_loads_with_a_note() {
    let text = include_str!("../../../../tests/fixtures/nemoclaw/github-preset.yaml");
    let loaded = policy::load(&[src("preset.yaml", text)], Compat::Strict).unwrap();
    assert_eq!(loaded.policy.entries()[0].key.as_str(), "github");
    let w: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert!(
        w.iter()
            .any(|l| l.starts_with("preset.yaml:4:3: warning: preset: a NemoClaw preset header")),
        "{w:#?}"
    );
    // The header is checked for shape, and a full document still needs `version`.
    let bad = "preset: [x]\nnetwork_policies: {}\n";
    let errors: Vec<String> = policy::load(&[src("p.yaml", bad)], Compat::Strict)
        .unwrap_err()
        .errors()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        errors,
        ["p.yaml:1:9: preset: expected a mapping for preset, found a list"]
    );
    let loaded = policy::load(
        &[src(
            "p.yaml",
            "preset: {name: a, colour: red}\nnetwork_policies: {}\n",
        )],
        Compat::Strict,
    )
    .unwrap();
    let w: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert!(
        w.contains(&"p.yaml:1:19: warning: preset.colour: unknown preset header field `colour` is ignored (expected name, description)".to_string()),
        "{w:#?}"
    );
}

#[test]
fn the_shipped_profiles_compose_with_the_shipped_policies() {
    let files = [
        (
            "anthropic.yaml",
            include_str!("../../../../configs/providers/anthropic.yaml"),
        ),
        (
            "github.yaml",
            include_str!("../../../../configs/providers/github.yaml"),
        ),
        (
            "openai.yaml",
            include_str!("../../../../configs/providers/openai.yaml"),
        ),
    ];
    let sources: Vec<Source> = files.iter().map(|(n, t)| src(n, t)).collect();
    let p = load(&sources).unwrap();
    let policies = [
        (
            "llm-provider.yaml",
            include_str!("../../../../configs/policies/llm-provider.yaml"),
        ),
        (
            "github-readonly.yaml",
            include_str!("../../../../configs/policies/github-readonly.yaml"),
        ),
        (
            "package-registries.yaml",
            include_str!("../../../../configs/policies/package-registries.yaml"),
        ),
    ];
    let sources: Vec<Source> = policies.iter().map(|(n, t)| src(n, t)).collect();
    let loaded = policy::load_composed(&sources, Compat::Strict, &p.composed).unwrap_or_else(|e| {
        panic!(
            "{:#?}",
            e.errors().map(ToString::to_string).collect::<Vec<_>>()
        )
    });
    for key in [
        "_provider_anthropic",
        "_provider_github",
        "_provider_openai",
    ] {
        assert!(
            loaded
                .policy
                .entries()
                .iter()
                .any(|e| e.key.as_str() == key),
            "{key}"
        );
    }
}

#[test]
fn a_profile_without_binaries_admits_no_program_and_says_so() {
    let text = "id: api\ncredentials: [{name: k, env_vars: [K]}]\nendpoints: [{host: api.example.com, port: 443, protocol: rest, enforcement: enforce, access: full}]\n";
    let loaded = compose(None, text, Compat::Strict).unwrap();
    let w: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        w,
        [
            "prof.yaml:1:5: warning: binaries: the profile lists no `binaries`: as the policy `_provider_api` it admits no program, so its hosts must be granted by a policy file (its secrets may then be swapped in for any program that policy admits)"
        ]
    );
    assert!(matches!(
        loaded.policy.decide_l4(
            &caller("/usr/bin/curl"),
            &Authority::new("api.example.com", 443)
        ),
        policy::L4Decision::Deny(_)
    ));
}

#[test]
fn profile_endpoints_are_read_under_the_policy_compat_mode() {
    // A query matcher listed twice: strict refuses it, --compat openshell keeps the last.
    let text = "id: api\nendpoints:\n  - host: api.example.com\n    port: 443\n    protocol: rest\n    enforcement: enforce\n    rules:\n      - allow: {method: GET, path: /s, query: {a: x, a: y}}\nbinaries: [/usr/bin/curl]\n";
    assert!(load(&[src("prof.yaml", text)]).is_err());
    let loaded = load_with(
        &[src("prof.yaml", text)],
        Compat::OpenShell,
        Diagnostics::default(),
    )
    .unwrap_or_else(|e| {
        panic!(
            "{:?}",
            e.errors().map(ToString::to_string).collect::<Vec<_>>()
        )
    });
    assert_eq!(loaded.composed.len(), 1);
}
