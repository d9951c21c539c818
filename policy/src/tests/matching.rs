//! Decisions: hosts, ports, binaries, L4 reasons, L7 rules and endpoint path selection.

use super::*;

// === §1.8 hosts ===

#[test]
fn host_exact_is_case_insensitive() {
    let p = policy(&one("host: API.Example.com\n  port: 443"));
    assert!(allowed(&p, CURL, "api.example.com", 443));
    assert!(!allowed(&p, CURL, "api.example.org", 443));
}

#[test]
fn host_single_star_is_one_label() {
    let p = policy(&one("host: \"*.example.com\"\n  port: 443"));
    assert!(allowed(&p, CURL, "api.example.com", 443));
    assert!(!allowed(&p, CURL, "example.com", 443));
    assert!(!allowed(&p, CURL, "a.b.example.com", 443));
}

#[test]
fn host_double_star_is_one_or_more_labels_never_apex() {
    let p = policy(&one("host: \"**.example.com\"\n  port: 443"));
    assert!(allowed(&p, CURL, "a.example.com", 443));
    assert!(allowed(&p, CURL, "a.b.c.example.com", 443));
    assert!(!allowed(&p, CURL, "example.com", 443));
}

#[test]
fn host_intra_and_middle_label_wildcards() {
    let p = policy(&one("host: \"*-aiplatform.googleapis.com\"\n  port: 443"));
    assert!(allowed(
        &p,
        CURL,
        "us-central1-aiplatform.googleapis.com",
        443
    ));
    assert!(!allowed(
        &p,
        CURL,
        "us-central1.aiplatform.googleapis.com",
        443
    ));
    let p = policy(&one("host: \"*.s3.*.amazonaws.com\"\n  port: 443"));
    assert!(allowed(&p, CURL, "b.s3.us-east-1.amazonaws.com", 443));
    assert!(!allowed(&p, CURL, "s3.us-east-1.amazonaws.com", 443));
    assert!(!allowed(
        &p,
        CURL,
        "b.s3.dualstack.us-east-1.amazonaws.com",
        443
    ));
}

#[test]
fn host_glob_characters_without_star_are_literal() {
    // §13 row 2: match, and warn.
    let text = one("host: \"{a,b}.example.com\"\n  port: 443");
    let p = policy(&text);
    assert!(!allowed(&p, CURL, "a.example.com", 443));
    assert!(allowed(&p, CURL, "{a,b}.example.com", 443));
    let w = warnings_in(&text, Compat::Strict);
    assert!(
        w.iter()
            .any(|w| w.contains("has glob characters but no `*`")),
        "{w:?}"
    );
}

#[test]
fn host_wildcard_in_last_label_loads_with_warning() {
    // §13 row 4.
    let text = one("host: \"api.example.*\"\n  port: 443");
    assert!(allowed(&policy(&text), CURL, "api.example.net", 443));
    let w = warnings_in(&text, Compat::Strict);
    assert!(
        w.iter().any(|w| w.contains("wildcard in its last label")),
        "{w:?}"
    );
}

#[test]
fn host_patterns_refused_at_load() {
    for (host, msg) in [
        ("\"*\"", "at least three labels"),
        ("\"**\"", "at least three labels"),
        ("\"*.com\"", "at least three labels"),
        ("\"**.com\"", "at least three labels"),
        (
            "\"a.**.example.com\"",
            "`**` is only allowed as the whole first label",
        ),
        ("\"x.api-*.example.com\"", "partial-label wildcard"),
    ] {
        let e = errors(&one(&format!("host: {host}\n  port: 443")));
        assert_eq!(e.len(), 1, "{host}: {e:?}");
        assert!(
            e[0].starts_with("p.yaml:5:15: network_policies.p.endpoints[0].host: "),
            "{e:?}"
        );
        assert!(e[0].contains(msg), "{host}: {e:?}");
    }
}

#[test]
fn ip_literals_compare_as_text() {
    // §13 row 5: no normalisation; both spellings fail closed.
    let p = policy(&one("host: \"2001:db8:0::1\"\n  port: 443"));
    assert!(allowed(&p, CURL, "2001:db8:0::1", 443));
    assert!(!allowed(&p, CURL, "2001:db8::1", 443));
}

// === §1.8 ports, binaries ===

#[test]
fn ports_are_exact_membership() {
    let p = policy(&one("host: h.example.com\n  ports: [443, 8443]"));
    assert!(allowed(&p, CURL, "h.example.com", 8443));
    assert!(!allowed(&p, CURL, "h.example.com", 80));
}

#[test]
fn binary_exact_glob_and_ancestors() {
    let text = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: h.example.com, port: 443}\n    binaries:\n      - path: /usr/bin/py*\n      - path: /opt/tool\n";
    let p = policy(text);
    assert!(allowed(&p, "/usr/bin/python3", "h.example.com", 443));
    assert!(!allowed(&p, "/usr/bin/py/x", "h.example.com", 443));
    assert!(allowed(&p, "/opt/tool", "h.example.com", 443));
    assert!(!allowed(&p, "/opt/tool2", "h.example.com", 443));
    // An ancestor grants (spec §2.3), the command line never does.
    assert!(matches!(
        l4(&p, CURL, &["/bin/sh", "/opt/tool"], "h.example.com", 443),
        L4Decision::Allow(_)
    ));
    let cmd = vec!["/opt/tool".to_string()];
    let d = p.decide_l4(
        &Caller {
            exe: CURL,
            ancestors: &[],
            cmdline: &cmd,
            tenant: None,
        },
        &sluice_addr::Authority::new("h.example.com", 443),
    );
    assert!(matches!(d, L4Decision::Deny(_)));
}

#[test]
fn binary_star_alone_admits_no_executable() {
    // Binary globs are segment-bound: `*` does not cross `/`, so no absolute executable path
    // matches it (as in the reference). Strict refuses it and says to write `/**`.
    let text = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: h.example.com, port: 443}\n    binaries:\n      - path: \"*\"\n";
    let e = errors(text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("write `/**` to admit every executable"),
        "{e:?}"
    );
    let p = match try_load(text, Compat::OpenShell) {
        Ok(l) => l.policy,
        Err(e) => panic!("{:#?}", e.diagnostics),
    };
    assert!(!allowed(&p, "/any/where", "h.example.com", 443));
    assert!(!allowed(&p, "/usr/bin/curl", "h.example.com", 443));
    let every = policy(&text.replace("\"*\"", "\"/**\""));
    assert!(allowed(&every, "/usr/bin/curl", "h.example.com", 443));
}

#[test]
fn binary_braces_without_star_are_literal_with_warning() {
    let text = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: h.example.com, port: 443}\n    binaries:\n      - path: /usr/bin/{curl,wget}\n";
    let p = policy(text);
    assert!(!allowed(&p, "/usr/bin/curl", "h.example.com", 443));
    let w = warnings_in(text, Compat::Strict);
    assert_eq!(
        w,
        [
            "p.yaml:7:15: warning: network_policies.p.binaries[0].path: `/usr/bin/{curl,wget}` has glob characters but no `*`; like the reference, sluice reads it as a literal path, so it only matches an executable with exactly that name"
        ]
    );
}

#[test]
fn shells_and_interpreters_warn() {
    let text = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: h.example.com, port: 443}\n    binaries:\n      - path: /usr/bin/python3.11\n      - path: /bin/bash\n      - path: /usr/bin/curl\n";
    let w = warnings_in(text, Compat::Strict);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].starts_with("p.yaml:7:15: warning: network_policies.p.binaries[0].path: `/usr/bin/python3.11` is a shell or interpreter"));
    assert!(w[1].starts_with("p.yaml:8:15: warning: network_policies.p.binaries[1].path: `/bin/bash` is a shell or interpreter"));
}

// === §2.7 / §2.8 decision and reasons ===

#[test]
fn smallest_key_decides_and_all_matching_endpoints_are_kept() {
    let text = "version: 1\nnetwork_policies:\n  zeta:\n    endpoints: [{host: h.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n  alpha:\n    endpoints: [{host: \"*.example.com\", port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n";
    let a = admission(&policy(text), "h.example.com", 443);
    assert_eq!(a.entry.as_str(), "alpha");
    assert_eq!(a.endpoints.len(), 2);
}

#[test]
fn deny_reasons_have_the_reference_wording() {
    let empty = policy("version: 1\nnetwork_policies: {}\n");
    let L4Decision::Deny(d) = l4(&empty, CURL, &[], "h.example.com", 443) else {
        panic!()
    };
    assert_eq!(d.kind, L4DenyKind::NoPolicies);
    assert_eq!(d.reason, "network connections not allowed by policy");

    let p = policy(&one("host: h.example.com\n  port: 443"));
    let L4Decision::Deny(d) = l4(&p, CURL, &[], "other.example.com", 443) else {
        panic!()
    };
    assert_eq!(
        d.reason,
        "endpoint other.example.com:443 is not allowed by any policy"
    );

    let ancestors = vec!["/usr/bin/bash".to_string(), "/usr/sbin/sshd".to_string()];
    let cmdline = vec!["/tmp/x.py".to_string()];
    let L4Decision::Deny(d) = p.decide_l4(
        &Caller {
            exe: "/usr/bin/python3",
            ancestors: &ancestors,
            cmdline: &cmdline,
            tenant: None,
        },
        &sluice_addr::Authority::new("h.example.com", 443),
    ) else {
        panic!()
    };
    assert_eq!(
        d.reason,
        "binary '/usr/bin/python3' not allowed in policy 'p' (ancestors: [/usr/bin/bash -> /usr/sbin/sshd], cmdline: [/tmp/x.py]). SYMLINK HINT: binaries are matched by their real path; if the policy names a symlink, list its target (readlink -f)"
    );
}

#[test]
fn default_policy_denies_everything() {
    let loaded = load_default().unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let L4Decision::Deny(d) = l4(&loaded.policy, CURL, &[], "example.com", 443) else {
        panic!()
    };
    assert_eq!(d.reason, "network connections not allowed by policy");
    // The host /tmp is never granted by default: `sluice exec` gives the command its own.
    assert_eq!(loaded.policy.sandbox().read_write, ["/dev/null"]);
}

// === §1.8 L7 rules ===

fn rest(rules: &str) -> Policy {
    policy(&one(&format!(
        "host: api.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  {rules}"
    )))
}

#[test]
fn get_rule_allows_head_but_not_options() {
    let p = rest("rules:\n  - allow: {method: GET, path: /v1/**}");
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/v1/x"),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&p, "api.example.com", "head", "/v1/x"),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&p, "api.example.com", "OPTIONS", "/v1/x"),
        Verdict::Deny
    );
    assert_eq!(
        verdict(&p, "api.example.com", "POST", "/v1/x"),
        Verdict::Deny
    );
}

#[test]
fn get_deny_rule_blocks_head_and_deny_wins() {
    let p = rest("access: full\n  deny_rules:\n    - {method: GET, path: /admin/**}");
    assert_eq!(
        verdict(&p, "api.example.com", "HEAD", "/admin/x"),
        Verdict::Deny
    );
    assert_eq!(
        verdict(&p, "api.example.com", "POST", "/admin/x"),
        Verdict::Allow
    );
    // §13 row 18 (fix): a deny rule `/x/**` also covers `/x`.
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/admin"),
        Verdict::Deny
    );
}

#[test]
fn allow_rule_double_star_suffix_does_not_cover_prefix() {
    // §13 row 18: match for allow rules.
    let p = rest("rules:\n  - allow: {method: GET, path: /x/**}");
    assert_eq!(verdict(&p, "api.example.com", "GET", "/x"), Verdict::Deny);
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/x/y/z"),
        Verdict::Allow
    );
}

#[test]
fn rule_star_is_segment_bound() {
    let p = rest("rules:\n  - allow: {method: \"*\", path: /v1/*/items}");
    assert_eq!(
        verdict(&p, "api.example.com", "DELETE", "/v1/a/items"),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/v1/a/b/items"),
        Verdict::Deny
    );
}

#[test]
fn rule_paths_match_the_canonical_form() {
    let p = rest("rules:\n  - allow: {method: GET, path: /a/b}");
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/a/./x/../b"),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/a;x/b"),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/%61/b"),
        Verdict::Allow
    );
}

#[test]
fn presets_expand() {
    let ro = rest("access: read-only");
    for m in ["GET", "HEAD", "OPTIONS"] {
        assert_eq!(
            verdict(&ro, "api.example.com", m, "/x"),
            Verdict::Allow,
            "{m}"
        );
    }
    for m in ["POST", "PUT", "PATCH", "DELETE"] {
        assert_eq!(
            verdict(&ro, "api.example.com", m, "/x"),
            Verdict::Deny,
            "{m}"
        );
    }
    let rw = rest("access: read-write");
    for m in ["POST", "PUT", "PATCH"] {
        assert_eq!(
            verdict(&rw, "api.example.com", m, "/x"),
            Verdict::Allow,
            "{m}"
        );
    }
    assert_eq!(
        verdict(&rw, "api.example.com", "DELETE", "/x"),
        Verdict::Deny
    );
    let full = rest("access: full");
    assert_eq!(
        verdict(&full, "api.example.com", "DELETE", "/x"),
        Verdict::Allow
    );
}

#[test]
fn query_allow_side_needs_every_value() {
    let p = rest("rules:\n  - allow: {method: GET, path: /s, query: {tag: \"v1.*\"}}");
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/s?tag=v1.2"),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/s?tag=v1.2&tag=v2.0"),
        Verdict::Deny
    );
    assert_eq!(verdict(&p, "api.example.com", "GET", "/s"), Verdict::Deny);
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/s?other=1&tag=v1.x"),
        Verdict::Allow
    );
}

#[test]
fn query_globs_do_not_cross_dots_but_cross_slashes() {
    // §13 row 19.
    let p = rest("rules:\n  - allow: {method: GET, path: /s, query: {v: \"v*\"}}");
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/s?v=v1"),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/s?v=v1.2"),
        Verdict::Deny
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/s?v=v1%2F2"),
        Verdict::Allow
    );
}

#[test]
fn query_any_and_deny_side_any_value() {
    let p = rest(
        "rules:\n  - allow: {method: GET, path: /s, query: {f: {any: [json, xml]}}}\n  deny_rules:\n    - {method: GET, path: /s, query: {debug: \"1\"}}",
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/s?f=xml"),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/s?f=csv"),
        Verdict::Deny
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/s?f=json&debug=0&debug=1"),
        Verdict::Deny
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/s?f=json&debug=0"),
        Verdict::Allow
    );
}

#[test]
fn malformed_query_escape_refuses_the_request() {
    let p = rest("access: full");
    let a = admission(&p, "api.example.com", 443);
    let d = p.decide_request(
        &a,
        &Request {
            method: "GET",
            target: b"/s?x=%zz",
            websocket_upgrade: false,
        },
    );
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(d.stage(), Some(Stage::Target));
}

#[test]
fn audit_enforcement_forwards_with_audit_verdict() {
    let p = policy(&one(
        "host: api.example.com\n  port: 443\n  protocol: rest\n  enforcement: audit\n  access: read-only",
    ));
    assert_eq!(verdict(&p, "api.example.com", "POST", "/x"), Verdict::Audit);
    assert_eq!(verdict(&p, "api.example.com", "GET", "/x"), Verdict::Allow);
}

#[test]
fn l4_endpoint_requests_are_uninspected() {
    let p = policy(&one("host: api.example.com\n  port: 443"));
    let a = admission(&p, "api.example.com", 443);
    let d = p.decide_request(
        &a,
        &Request {
            method: "DELETE",
            target: b"/anything",
            websocket_upgrade: false,
        },
    );
    assert_eq!(d.verdict, Verdict::Allow);
    assert!(matches!(d.basis, RequestBasis::Uninspected));
}

#[test]
fn websocket_endpoint_requires_an_upgrade_even_in_audit() {
    // §13 row 15.
    let p = policy(&one(
        "host: api.example.com\n  port: 443\n  protocol: websocket\n  enforcement: audit\n  access: read-write",
    ));
    let a = admission(&p, "api.example.com", 443);
    let plain = p.decide_request(
        &a,
        &Request {
            method: "GET",
            target: b"/ws",
            websocket_upgrade: false,
        },
    );
    assert_eq!(plain.verdict, Verdict::Deny);
    assert_eq!(
        plain.reason,
        "websocket endpoint requires a valid WebSocket upgrade request"
    );
    let up = p.decide_request(
        &a,
        &Request {
            method: "GET",
            target: b"/ws",
            websocket_upgrade: true,
        },
    );
    assert_eq!(up.verdict, Verdict::Allow);
}

// === §13 row 12: endpoint path selection ===

const SELECTORS: &str = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: api.example.com, port: 443, protocol: rest, enforcement: enforce, access: full}\n      - {host: api.example.com, port: 443, path: /v1/**, protocol: rest, enforcement: audit, access: read-only}\n    binaries: [{path: /usr/bin/curl}]\n";

#[test]
fn most_specific_selector_decides_alone() {
    let p = policy(SELECTORS);
    // Below /v1: only the read-only audit endpoint's rules allow; the broader `full` one
    // takes no part.
    assert_eq!(
        verdict(&p, "api.example.com", "POST", "/v1/x"),
        Verdict::Audit
    );
    // `/v1/**` selects what is below /v1, not /v1 itself (the rule-path glob meaning).
    assert_eq!(
        verdict(&p, "api.example.com", "POST", "/v1"),
        Verdict::Allow
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/v1/x"),
        Verdict::Allow
    );
    // Elsewhere the broad endpoint decides.
    assert_eq!(
        verdict(&p, "api.example.com", "POST", "/v2/x"),
        Verdict::Allow
    );
}

#[test]
fn no_selector_matching_is_a_hard_deny() {
    let p = policy(&one(
        "host: api.example.com\n  port: 443\n  path: /v1/**\n  protocol: rest\n  enforcement: audit\n  access: full",
    ));
    let a = admission(&p, "api.example.com", 443);
    let d = p.decide_request(
        &a,
        &Request {
            method: "GET",
            target: b"/v2",
            websocket_upgrade: false,
        },
    );
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(d.reason, "no L7 endpoint path matched request /v2");
}

#[test]
fn second_entry_l7_applies() {
    // §13 row 13: an ancestor that matches a second entry brings its L7 endpoint along.
    let text = "version: 1\nnetwork_policies:\n  a:\n    endpoints: [{host: api.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n  b:\n    endpoints: [{host: api.example.com, port: 443, protocol: rest, enforcement: enforce, access: read-only}]\n    binaries: [{path: /usr/bin/bash}]\n";
    let p = policy(text);
    let L4Decision::Allow(a) = l4(&p, CURL, &["/usr/bin/bash"], "api.example.com", 443) else {
        panic!()
    };
    let d = p.decide_request(
        &a,
        &Request {
            method: "POST",
            target: b"/x",
            websocket_upgrade: false,
        },
    );
    assert_eq!(d.verdict, Verdict::Deny);
}

#[test]
fn encoded_slash_only_where_allowed() {
    let text = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: registry.example.com, port: 443, protocol: rest, enforcement: enforce, access: read-only, allow_encoded_slash: true}\n    binaries: [{path: /usr/bin/curl}]\n";
    let p = policy(text);
    assert_eq!(
        verdict(&p, "registry.example.com", "GET", "/@scope%2fname"),
        Verdict::Allow
    );
    let strict = rest("access: read-only");
    assert_eq!(
        verdict(&strict, "api.example.com", "GET", "/@scope%2fname"),
        Verdict::Deny
    );
}

#[test]
fn deny_rules_of_broader_selectors_still_apply() {
    // The `/graphql` endpoint is the most specific and its preset allows POST; the broader
    // endpoint's deny rule still blocks POST /graphql (as in the reference), under the
    // selected endpoint's enforcement.
    let text = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: api.example.com, port: 443, protocol: rest, enforcement: enforce, access: full, deny_rules: [{method: POST, path: /graphql}]}\n      - {host: api.example.com, port: 443, path: /graphql, protocol: rest, enforcement: enforce, access: read-write}\n    binaries: [{path: /usr/bin/curl}]\n";
    let p = policy(text);
    assert_eq!(
        verdict(&p, "api.example.com", "POST", "/graphql"),
        Verdict::Deny
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/graphql"),
        Verdict::Allow
    );
}

#[test]
fn slash_star_star_is_more_specific_than_no_selector() {
    // `/**` (one character other than `*`) beats an endpoint without `path` (none): only the
    // read-only `/**` endpoint's rules can allow, and the two do not conflict on enforcement.
    let text = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: api.example.com, port: 443, protocol: rest, enforcement: enforce, access: full}\n      - {host: api.example.com, port: 443, path: /**, protocol: rest, enforcement: audit, access: read-only}\n    binaries: [{path: /usr/bin/curl}]\n";
    let p = policy(text);
    assert_eq!(verdict(&p, "api.example.com", "POST", "/x"), Verdict::Audit);
    assert_eq!(verdict(&p, "api.example.com", "GET", "/x"), Verdict::Allow);
}

#[test]
fn glob_characters_before_a_trailing_double_star_select_the_literal_prefix_in_compat() {
    let text = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: api.example.com, port: 443, path: \"/v*/**\", protocol: rest, enforcement: enforce, access: full}\n    binaries: [{path: /usr/bin/curl}]\n";
    let p = match try_load(text, Compat::OpenShell) {
        Ok(l) => l.policy,
        Err(e) => panic!("{:#?}", e.diagnostics),
    };
    // The reference's selector reads `/v*` as text: `/v1/x` is not below it, `/v*/x` is.
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/v1/x"),
        Verdict::Deny
    );
    assert_eq!(
        verdict(&p, "api.example.com", "GET", "/v*/x"),
        Verdict::Allow
    );
}

#[test]
fn a_gateway_tenant_gets_only_entries_that_admit_every_program() {
    // The gateway cannot see a tenant's program: an entry naming programs does not apply,
    // one whose binaries match every program (`/**`, `**`) does.
    let text = "version: 1\nnetwork_policies:\n  any:\n    endpoints:\n      - {host: a.example.com, port: 443}\n    binaries:\n      - path: /usr/bin/curl\n      - path: \"/**\"\n  named:\n    endpoints:\n      - {host: n.example.com, port: 443}\n    binaries:\n      - path: /usr/bin/curl\n      - path: /usr/**\n";
    let p = policy(text);
    let tenant = Caller::tenant("alpha");
    assert!(matches!(
        p.decide_l4(&tenant, &sluice_addr::Authority::new("a.example.com", 443)),
        L4Decision::Allow(_)
    ));
    match p.decide_l4(&tenant, &sluice_addr::Authority::new("n.example.com", 443)) {
        L4Decision::Deny(d) => assert!(
            d.reason
                .contains("policy 'named' does not apply to tenant 'alpha'"),
            "{}",
            d.reason
        ),
        L4Decision::Allow(_) => panic!("a tenant was granted an entry naming programs"),
    }
    // The same entry still grants the program it names to a local caller.
    assert!(allowed(&p, CURL, "n.example.com", 443));
}

#[test]
fn a_json_rpc_endpoint_decides_nothing_from_the_head_and_refuses_a_websocket_upgrade() {
    let text = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: mcp.example.com, port: 443, protocol: mcp, enforcement: audit, mcp: {allow_all_known_mcp_methods: true}}\n    binaries: [{path: /usr/bin/curl}]\n";
    let p = policy(text);
    let a = admission(&p, "mcp.example.com", 443);
    let head = Request {
        method: "POST",
        target: b"/mcp",
        websocket_upgrade: false,
    };
    // Without its body a request is refused, even under audit (the proxy judges it again
    // with its body).
    let d = p.decide_request(&a, &head);
    assert_eq!(d.verdict, Verdict::Deny);
    assert!(matches!(d.basis, RequestBasis::RpcBodyUnread));
    assert_eq!(p.rpc_body_limit(&a, &head), Some(64 * 1024));
    // An upgrade would relay frames nobody judges: refused even under audit.
    let upgrade = Request {
        method: "GET",
        target: b"/mcp",
        websocket_upgrade: true,
    };
    let d = p.decide_request(&a, &upgrade);
    assert_eq!(d.verdict, Verdict::Deny, "{}", d.reason);
    assert!(matches!(d.basis, RequestBasis::RpcRejected));
    // With its body, every method is allowed here.
    let body = rpc_decide::Body {
        bytes: br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"},"id":1}"#,
        receive_stream: false,
        unreadable: None,
    };
    assert_eq!(
        p.decide_rpc_request(&a, &head, body).verdict,
        Verdict::Allow
    );
}

#[test]
fn a_sql_endpoint_loads_audit_only_and_is_relayed_unjudged() {
    let text = "version: 1\nnetwork_policies:\n  db:\n    endpoints:\n      - {host: db.example.com, port: 5432, protocol: sql, enforcement: audit, rules: [{allow: {command: SELECT}}]}\n    binaries: [{path: /usr/bin/curl}]\n";
    let p = policy(text);
    let a = admission(&p, "db.example.com", 5432);
    assert!(
        !a.inspects(&p),
        "no SQL parser: the connection is relayed as it is"
    );
    let req = Request {
        method: "GET",
        target: b"/",
        websocket_upgrade: false,
    };
    assert!(matches!(
        p.decide_request(&a, &req).basis,
        RequestBasis::Uninspected
    ));
}

#[test]
fn graphql_operations_are_judged_by_type_name_and_root_field() {
    let text = "version: 1\nnetwork_policies:\n  g:\n    endpoints:\n      - {host: api.example.com, port: 443, protocol: graphql, enforcement: enforce, rules: [{allow: {operation_type: query}}, {allow: {operation_type: mutation, operation_name: 'Add*', fields: [addComment]}}], deny_rules: [{operation_type: query, fields: [secret]}]}\n    binaries: [{path: /usr/bin/curl}]\n";
    let p = policy(text);
    let a = admission(&p, "api.example.com", 443);
    let req = Request {
        method: "POST",
        target: b"/graphql",
        websocket_upgrade: false,
    };
    let verdict = |body: &str| {
        let b = rpc_decide::Body {
            bytes: body.as_bytes(),
            receive_stream: false,
            unreadable: None,
        };
        p.decide_rpc_request(&a, &req, b).verdict
    };
    assert_eq!(verdict(r#"{"query":"{ viewer }"}"#), Verdict::Allow);
    assert_eq!(verdict(r#"{"query":"{ a: secret }"}"#), Verdict::Deny);
    assert_eq!(
        verdict(r#"{"query":"mutation AddOne { addComment }"}"#),
        Verdict::Allow
    );
    assert_eq!(
        verdict(r#"{"query":"mutation Other { addComment }"}"#),
        Verdict::Deny
    );
    assert_eq!(
        verdict(r#"{"query":"mutation AddOne { addComment deleteRepo }"}"#),
        Verdict::Deny
    );
    assert_eq!(
        verdict(r#"[{"query":"{ viewer }"},{"query":"mutation { x }"}]"#),
        Verdict::Deny
    );
    assert_eq!(p.rpc_body_limit(&a, &req), Some(64 * 1024));
}

#[test]
fn explain_brackets_an_ipv6_destination_wherever_a_port_follows() {
    let p = policy(&one(
        "{host: \"::1\", port: 8443, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, path: /ok}}]}",
    ));
    let ask = |host: &str, port: u16, target: Option<&str>| {
        explain::explain(
            &p,
            &explain::Question {
                binary: CURL.to_string(),
                ancestors: Vec::new(),
                cmdline_paths: Vec::new(),
                tenant: None,
                host: host.to_string(),
                port,
                request: target.map(|t| explain::QuestionRequest {
                    method: "GET".to_string(),
                    target: t.to_string(),
                    ..Default::default()
                }),
            },
        )
    };
    let open = ask("::1", 8443, None);
    assert_eq!(open.decision, "allow", "{open:#?}");
    assert_eq!(
        open.reason,
        "connection to [::1]:8443 allowed; each request is judged by the L7 rules"
    );
    let denied = ask("::1", 9443, None);
    assert!(denied.reason.contains("[::1]:9443"), "{denied:#?}");
    assert!(!denied.reason.contains("::1:9443"), "{denied:#?}");
    let judged = ask("[::1]", 8443, Some("/ok"));
    assert_eq!(judged.decision, "allow", "{judged:#?}");
}

#[test]
fn an_ipv6_endpoint_is_described_with_brackets() {
    let p = policy(&one("{host: \"::1\", port: 8443}"));
    let described: Vec<String> = p
        .endpoints_for("::1", 8443)
        .into_iter()
        .map(|r| p.endpoint(r).describe())
        .collect();
    assert_eq!(described.len(), 1, "{described:?}");
    assert!(described[0].starts_with("[::1]:8443"), "{described:?}");
}
