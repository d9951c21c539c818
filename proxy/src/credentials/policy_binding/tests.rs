//! `credential_binding`: an endpointless profile bound where a policy endpoint names it.

use super::*;
use crate::credentials::profile;
use crate::policy::{Compat, Source, load};

const BEDROCK: &str = "\
id: aws-bedrock
credentials:
  - {name: aws_access_key_id, env_vars: [AWS_ACCESS_KEY_ID], required: false}
  - {name: aws_secret_access_key, env_vars: [AWS_SECRET_ACCESS_KEY], required: false}
endpoints: []
binaries: []
";

fn policy(text: &str) -> Policy {
    load(
        &[Source {
            name: "p.yaml".into(),
            text: text.into(),
        }],
        Compat::Strict,
    )
    .unwrap_or_else(|e| {
        panic!(
            "{:?}",
            e.errors().map(ToString::to_string).collect::<Vec<_>>()
        )
    })
    .policy
}

fn profiles() -> Vec<ProviderProfile> {
    profile::load(&[Source {
        name: "bedrock.yaml".into(),
        text: BEDROCK.into(),
    }])
    .unwrap_or_else(|e| {
        panic!(
            "{:?}",
            e.errors().map(ToString::to_string).collect::<Vec<_>>()
        )
    })
    .profiles
}

#[test]
fn a_policy_endpoint_binds_an_endpointless_profile() {
    let mut p = profiles();
    // Alone, the profile loads and binds nowhere: a warning says so.
    let alone = bind_from_policy(&mut p, &policy("version: 1\nnetwork_policies: {}\n"));
    assert!(alone.errors.is_empty());
    assert_eq!(alone.warnings.len(), 1, "{:?}", alone.warnings);
    assert!(
        alone.warnings[0].contains("swapped in nowhere"),
        "{:?}",
        alone.warnings
    );
    let text = "version: 1\nnetwork_policies:\n  bedrock:\n    endpoints:\n      - {host: bedrock-runtime.us-east-1.amazonaws.com, port: 443, protocol: rest, enforcement: enforce, access: full, credential_binding: {provider: aws-bedrock}, credential_signing: sigv4, signing_service: bedrock}\n    binaries: [{path: /usr/bin/python3}]\n";
    let bound = bind_from_policy(&mut p, &policy(text));
    assert!(
        bound.errors.is_empty() && bound.warnings.is_empty(),
        "{bound:?}"
    );
    assert_eq!(p[0].endpoints.len(), 1);
    assert!(p[0].binds(
        &sluice_addr::Authority::new("bedrock-runtime.us-east-1.amazonaws.com", 443),
        "/model/x/invoke"
    ));
    assert!(!p[0].binds(
        &sluice_addr::Authority::new("bedrock-runtime.us-west-2.amazonaws.com", 443),
        "/"
    ));
}

#[test]
fn a_binding_to_no_loaded_profile_is_an_error_at_its_line() {
    let mut p = profiles();
    let text = "version: 1\nnetwork_policies:\n  x:\n    endpoints:\n      - {host: api.example.com, port: 443, protocol: rest, access: full, credential_binding: {provider: aws-prod}}\n    binaries: [{path: /usr/bin/curl}]\n";
    let bound = bind_from_policy(&mut p, &policy(text));
    assert_eq!(
        bound.errors,
        [
            "p.yaml:5:9: network_policies.x.endpoints[0].credential_binding.provider: no provider profile `aws-prod` is loaded (--providers)"
        ]
    );
}
