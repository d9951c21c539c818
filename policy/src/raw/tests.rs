//! Unit tests of `raw`.

use super::*;
use crate::yaml;

fn read_str(text: &str, compat: Compat) -> (RawDocument, Vec<String>) {
    let file: Arc<str> = Arc::from("p.yaml");
    let node = yaml::parse(text).unwrap().unwrap();
    let mut diags = Diagnostics::default();
    let doc = read(&file, &node, compat, &mut diags);
    (
        doc,
        diags
            .into_sorted()
            .iter()
            .map(ToString::to_string)
            .collect(),
    )
}

#[test]
fn reads_a_full_endpoint() {
    let (doc, diags) = read_str(
        "version: 1\nnetwork_policies:\n  gh:\n    name: github\n    endpoints:\n      - host: api.github.com\n        port: 443\n        protocol: rest\n        rules:\n          - allow: {method: GET, path: /repos/**, query: {per_page: \"1*\", tag: {any: [a, b]}}}\n        deny_rules:\n          - {method: POST, path: /x}\n    binaries:\n      - path: /usr/bin/curl\n",
        Compat::Strict,
    );
    assert_eq!(diags, Vec::<String>::new());
    let ep = &doc.network_policies[0].endpoints[0];
    assert_eq!(ep.host.as_ref().unwrap().value, "api.github.com");
    assert_eq!(ep.port.as_ref().unwrap().value, 443);
    let rule = &ep.rules.as_ref().unwrap().value[0];
    assert_eq!(rule.path.as_ref().unwrap().value, "/repos/**");
    assert_eq!(rule.query.len(), 2);
    assert_eq!(ep.deny_rules.as_ref().unwrap().value.len(), 1);
    assert_eq!(
        doc.network_policies[0].binaries[0].path.value,
        "/usr/bin/curl"
    );
}

#[test]
fn unknown_and_unsupported_fields() {
    let (_, diags) = read_str(
        "version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - hots: x\n        persisted_queries: {}\n",
        Compat::Strict,
    );
    assert_eq!(
        diags,
        [
            "p.yaml:5:9: network_policies.a.endpoints[0].hots: unknown field `hots` (did you mean `host`?); expected one of: host, port, ports, path, protocol, tls, enforcement, access, rules, deny_rules, allowed_ips, allow_encoded_slash, request_body_credential_rewrite, websocket_credential_rewrite, allow_uninspected_credentials, credential_signing, signing_service, signing_region, credential_binding, json_rpc, mcp, persisted_queries, graphql_persisted_queries, graphql_max_body_bytes",
            "p.yaml:6:28: network_policies.a.endpoints[0].persisted_queries: expected a string, found a mapping",
        ]
    );
}

#[test]
fn all_errors_not_only_the_first() {
    let (_, diags) = read_str(
        "version: \"1\"\nnetwork_policies:\n  a:\n    endpoints:\n      - port: x\n        allow_encoded_slash: yes\n",
        Compat::Strict,
    );
    assert_eq!(
        diags,
        [
            "p.yaml:1:10: version: expected an integer, found a string",
            "p.yaml:5:15: network_policies.a.endpoints[0].port: expected an integer, found a string",
            "p.yaml:6:30: network_policies.a.endpoints[0].allow_encoded_slash: expected `true` or `false`, found a string",
        ]
    );
}

#[test]
fn duplicate_policy_key_strict_and_compat() {
    let text = "version: 1\nnetwork_policies:\n  a:\n    name: first\n  a:\n    name: second\n";
    let (_, diags) = read_str(text, Compat::Strict);
    assert_eq!(diags.len(), 1);
    assert!(diags[0].starts_with("p.yaml:5:3: network_policies.a: policy `a` is defined twice"));
    let (doc, diags) = read_str(text, Compat::OpenShell);
    assert!(diags[0].contains("warning: "));
    assert_eq!(doc.network_policies.len(), 1);
    assert_eq!(
        doc.network_policies[0].name.as_ref().unwrap().value,
        "second"
    );
}

#[test]
fn duplicate_field_is_always_an_error() {
    let (_, diags) = read_str(
        "version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - host: x\n        host: y\n",
        Compat::OpenShell,
    );
    assert_eq!(
        diags,
        [
            "p.yaml:6:9: network_policies.a.endpoints[0].host: duplicate field `host` (first defined at line 5)"
        ]
    );
}

#[test]
fn middlewares_are_unsupported_and_graphql_rule_fields_read() {
    let (_, diags) = read_str(
        "version: 1\nnetwork_middlewares: {}\nnetwork_policies:\n  a:\n    endpoints:\n      - host: x.y.z\n        rules:\n          - allow: {operation_type: query}\n",
        Compat::OpenShell,
    );
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert!(diags[0].contains("network_middlewares: `network_middlewares` (network middlewares) is not supported by sluice yet"));
}
