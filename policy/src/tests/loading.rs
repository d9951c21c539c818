//! Diagnostics: validation, the strict / compat rows of §13, ambiguity, merging.

use super::*;

// === §1.9 validation ===

#[test]
fn validation_messages() {
    let cases: &[(&str, &str)] = &[
        (
            "host: h.example.com\n  port: 0",
            "p.yaml:6:15: network_policies.p.endpoints[0].port: port 0 is out of range 1-65535",
        ),
        (
            "host: h.example.com\n  port: 70000",
            "p.yaml:6:15: network_policies.p.endpoints[0].port: port 70000 is out of range 1-65535",
        ),
        (
            "host: h.example.com",
            "p.yaml:5:9: network_policies.p.endpoints[0]: an endpoint needs `port` or `ports`",
        ),
        (
            "port: 443",
            "p.yaml:5:9: network_policies.p.endpoints[0].host: `host` is required (only an endpoint with `allowed_ips` may leave it out)",
        ),
        (
            "host: h.example.com\n  ports: []",
            "p.yaml:6:16: network_policies.p.endpoints[0].ports: `ports` must list at least one port",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: FTP\n  access: full",
            "p.yaml:7:19: network_policies.p.endpoints[0].protocol: unknown protocol `FTP`; expected rest, websocket, json-rpc, mcp, graphql, sql or tcp",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: graphql",
            "p.yaml:5:9: network_policies.p.endpoints[0]: `protocol: graphql` needs `rules` or `access`",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: rest",
            "p.yaml:5:9: network_policies.p.endpoints[0]: `protocol: rest` needs `rules` or `access`",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: rest\n  access: full\n  rules:\n    - allow: {method: GET, path: /}",
            "p.yaml:10:11: network_policies.p.endpoints[0].rules: `rules` and `access` are mutually exclusive: use one",
        ),
        (
            "host: h.example.com\n  port: 443\n  deny_rules:\n    - {method: GET, path: /}",
            "p.yaml:8:11: network_policies.p.endpoints[0].deny_rules: `deny_rules` need `protocol: rest` or `websocket` (and rules or access to deny from)",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: rest\n  rules:\n    - allow: {method: \"GE T\", path: /}",
            "p.yaml:9:29: network_policies.p.endpoints[0].rules[0].allow.method: `GE T` is not an HTTP method token; expected GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS or *",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: rest\n  rules:\n    - allow: {method: WEBSOCKET_TEXT, path: /}",
            "p.yaml:9:29: network_policies.p.endpoints[0].rules[0].allow.method: `WEBSOCKET_TEXT` is only valid with `protocol: websocket`",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: tcp\n  access: full",
            "p.yaml:8:17: network_policies.p.endpoints[0].access: `access` is an L7 setting and a `protocol: tcp` endpoint has none",
        ),
        (
            "host: 10.0.0.1\n  port: 5432\n  protocol: tcp",
            "p.yaml:5:15: network_policies.p.endpoints[0].host: a `protocol: tcp` endpoint needs a valid DNS host name (not an IP literal, no trailing dot)",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: rest\n  access: full\n  path: v1",
            "p.yaml:9:15: network_policies.p.endpoints[0].path: `v1` must start with `/` (or be `**`)",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: rest\n  rules:\n    - allow: {method: GET, path: /s, query: {a: \"\"}}",
            "p.yaml:9:55: network_policies.p.endpoints[0].rules[0].allow.query.a: an empty query matcher matches nothing; use `*` to require the parameter with any value",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: rest\n  rules:\n    - allow: {method: GET, path: /s, query: {a: {any: []}}}",
            "p.yaml:9:61: network_policies.p.endpoints[0].rules[0].allow.query.a: `any: []` lists no pattern and would match nothing; list at least one glob (`*` for any value)",
        ),
    ];
    let mismatches: Vec<String> = cases
        .iter()
        .filter_map(|(endpoint, want)| {
            let got = errors(&one(endpoint));
            (got != [*want])
                .then(|| format!("endpoint:\n{endpoint}\n want: {want}\n  got: {got:?}"))
        })
        .collect();
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn sandbox_section_validation() {
    let text = "version: 1\nfilesystem_policy:\n  read_only: [usr, /a/../b]\n  read_write: [/]\nprocess:\n  run_as_user: root\n  run_as_group: \"0\"\n";
    assert_eq!(
        errors(text),
        [
            "p.yaml:3:15: filesystem_policy.read_only[0]: `usr` must be an absolute path",
            "p.yaml:3:20: filesystem_policy.read_only[1]: `/a/../b` must not contain `..`",
            "p.yaml:4:16: filesystem_policy.read_write[0]: `/` cannot be writable",
            "p.yaml:6:16: process.run_as_user: `root` must be `sandbox` or a numeric id from 1 to 4294967294 (never root)",
            "p.yaml:7:17: process.run_as_group: `0` must be `sandbox` or a numeric id from 1 to 4294967294 (never root)",
        ]
    );
}

#[test]
fn extension_methods_load_with_a_warning_and_match_as_written() {
    // As the reference: an unknown method token warns and matches only itself.
    let text = one(
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  rules:\n    - allow: {method: purge, path: /**}",
    );
    for compat in [Compat::Strict, Compat::OpenShell] {
        let w = warnings_in(&text, compat);
        assert!(
            w.iter().any(|w| w.contains("unknown method `purge`")
                && w.contains("allows only `PURGE` requests")),
            "{w:?}"
        );
    }
}

#[test]
fn both_modes_refuse_what_the_reference_refuses() {
    for (endpoint, want) in [
        ("host: \"   \"\n  port: 443", "`host` is only whitespace"),
        (
            "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  rules:\n    - allow: {method: GET, path: /, query: {page: 1}}",
            "found the number or bool `1`; quote it",
        ),
        (
            "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  rules:\n    - allow: {}",
            "no rule has an allow clause",
        ),
    ] {
        let text = one(endpoint);
        for compat in [Compat::Strict, Compat::OpenShell] {
            let e = errors_in(&text, compat);
            assert!(
                e.iter().any(|e| e.contains(want)),
                "{compat:?} {endpoint}: {e:?}"
            );
        }
    }
}

#[test]
fn defaulted_enforcement_warns_with_the_line() {
    let text = one("host: h.example.com\n  port: 443\n  protocol: rest\n  access: full");
    let w = warnings_in(&text, Compat::Strict);
    assert_eq!(w.len(), 1);
    assert!(w[0].starts_with("p.yaml:5:9: warning: network_policies.p.endpoints[0]: `enforcement` is not set, so it is `audit`"), "{w:?}");
    // Written out explicitly: no warning.
    assert!(warnings_in(&one("host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: audit\n  access: full"), Compat::Strict).is_empty());
}

#[test]
fn version_checks() {
    assert_eq!(
        errors("version: 2\nnetwork_policies: {}\n"),
        [
            "p.yaml:1:10: version: unsupported policy version 2 (write `version: 1`); the reference never checks it and reads the document as version 1 (accept with --compat openshell)"
        ]
    );
    // A missing `version` is refused in both modes, as the reference refuses it.
    for compat in [Compat::Strict, Compat::OpenShell] {
        assert_eq!(
            errors_in("network_policies: {}\n", compat),
            [
                "p.yaml:1:1: version: `version` is missing; write `version: 1` (the reference refuses a document without it)"
            ]
        );
    }
    assert!(errors_in("version: 2\nnetwork_policies: {}\n", Compat::OpenShell).is_empty());
}

// === §13 strict / compat rows ===

/// (endpoint yaml, strict error substring, compat warning substring)
const STRICT_ROWS: &[(&str, &str, &str)] = &[
    // row 6
    (
        "host: h.example.com\n  port: 443\n  allowed_ips: [127.0.0.1]",
        "overlaps loopback 127.0.0.0/8",
        "still refuses those addresses",
    ),
    (
        "host: h.example.com\n  port: 443\n  allowed_ips: [not-an-ip]",
        "`not-an-ip` is not an IP address or CIDR",
        "refuses every connection",
    ),
    (
        "host: h.example.com\n  port: 443\n  allowed_ips: [10.0.0.0/33]",
        "`10.0.0.0/33` is not an IP address or CIDR",
        "refuses every connection",
    ),
    // row 7
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  access: full\n  deny_rules: []",
        "`deny_rules: []` is empty",
        "ignores it",
    ),
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  access: full\n  rules: []",
        "`rules: []` is empty",
        "applies `access`",
    ),
    // row 8
    (
        "host: h.example.com\n  port: 443\n  access: read-only",
        "`access` has no effect without `protocol",
        "plain L4",
    ),
    (
        "host: h.example.com\n  port: 443\n  rules:\n    - allow: {method: GET, path: /}",
        "`rules` has no effect without `protocol",
        "plain L4",
    ),
    // row 9
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  access: full\n  deny_rules:\n    - {method: POST}",
        "a deny rule without `path`",
        "blocks nothing",
    ),
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  rules:\n    - allow: {path: /x}",
        "an allow rule without `method`",
        "allows nothing",
    ),
    // row 10
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  access: read-ony",
        "unknown `access` preset `read-ony`",
        "denies every request",
    ),
    (
        "host: h.example.com\n  port: 443\n  tls: terminat",
        "unknown `tls` value `terminat`",
        "treats it as auto",
    ),
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: Enforce\n  access: full",
        "`enforcement: Enforce` is not lower-case",
        "treats it as `audit` when judging requests",
    ),
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: block\n  access: full",
        "unknown `enforcement` value `block`",
        "treats it as `audit`",
    ),
    (
        "host: h.example.com\n  port: 443\n  protocol: REST\n  enforcement: enforce\n  access: full",
        "protocol `REST` is not lower-case (write `rest`)",
        "reads it as `rest`",
    ),
    (
        "host: \"*..example.com\"\n  port: 443",
        "empty label in host `*..example.com`",
        "matches nothing",
    ),
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  path: \"/v1[\"\n  access: full",
        "unclosed character class",
        "selects only the request path equal to this text",
    ),
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  path: \"/v?/**\"\n  access: full",
        "glob characters before a trailing `/**`",
        "selects only paths below the literal text `/v?`",
    ),
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  rules:\n    - allow: {method: GET, path: \"*/x\"}",
        "rule path `*/x` does not start with `/`",
        "`*/x` matches `/x`",
    ),
    // row 11
    (
        "host: h.example.com\n  port: 443\n  ports: [8443]",
        "`port` and `ports` are both given",
        "drops `port`",
    ),
    // row 14
    (
        "host: h.example.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  access: read-only\n  tls: skip",
        "`tls: skip` turns off all L7 inspection",
        "uninspected",
    ),
];

#[test]
fn strict_rows_refuse_and_compat_accepts_with_warning() {
    for (endpoint, strict, compat) in STRICT_ROWS {
        let text = one(endpoint);
        let e = errors(&text);
        assert_eq!(e.len(), 1, "{endpoint}: {e:?}");
        assert!(
            e[0].contains(strict) && e[0].contains("accept with --compat openshell"),
            "{endpoint}: {e:?}"
        );
        let w = warnings_in(&text, Compat::OpenShell);
        assert!(
            w.iter()
                .any(|w| w.contains(compat) && w.contains("warning: ")),
            "{endpoint}: {w:?}"
        );
    }
}

/// `allowed_ips` is judged at load by the classifier every connection is judged by
/// (`sluice_resolver::always_blocked_in`): a network that reaches an always-blocked address
/// through an IPv6 form that carries an IPv4 address, or a blocked range the reference's
/// table lacks, is the same error as `127.0.0.1`; a network that reaches none loads.
#[test]
fn allowed_ips_overlapping_always_blocked_ranges_in_any_form_are_refused_at_load() {
    for (net, names) in [
        // SIIT-translated, IPv4-mapped, IPv4-compatible, NAT64 (well-known and local-use).
        ("::ffff:0:7f00:0/104", "loopback 127.0.0.0/8"),
        (
            "::ffff:0:a9fe:a9fe",
            "link-local (cloud metadata) 169.254.0.0/16",
        ),
        (
            "::ffff:a9fe:0/112",
            "link-local (cloud metadata) 169.254.0.0/16",
        ),
        ("::7f00:1", "loopback 127.0.0.0/8"),
        ("64:ff9b::7f00:0/120", "loopback 127.0.0.0/8"),
        ("64:ff9b:1:7f00::/64", "local-use NAT64"),
        // 6to4, Teredo's server and (inverted) client, ISATAP under any prefix.
        ("2002:7f00::/24", "loopback 127.0.0.0/8"),
        (
            "2001:0:a9fe:a9fe::/64",
            "link-local (cloud metadata) 169.254.0.0/16",
        ),
        ("2001:0:808:808::80ff:fffe/128", "loopback 127.0.0.0/8"),
        ("2001:db8:1:2:0:5efe:7f00:0/120", "loopback 127.0.0.0/8"),
        // Always blocked in the classifier, missing from the load-time table before.
        ("100.100.100.200", "cloud metadata (Alibaba Cloud)"),
        ("224.0.0.0/8", "multicast"),
        ("fd00:ec2::254", "cloud metadata (AWS IPv6)"),
        ("ff02::/16", "multicast"),
    ] {
        let text = one(&format!(
            "host: h.example.com\n  port: 443\n  allowed_ips: [\"{net}\"]"
        ));
        let e = errors(&text);
        assert!(
            e.len() == 1 && e[0].contains(names) && e[0].contains("always blocked"),
            "{net}: {e:?}"
        );
    }
    for net in [
        "10.0.0.0/8",
        "::ffff:10.0.0.0/104",
        "64:ff9b::808:808",
        "2002:808:808::/48",
        "2606:4700::/32",
        "fd12:3456::/32",
    ] {
        let text = one(&format!(
            "host: h.example.com\n  port: 443\n  allowed_ips: [\"{net}\"]"
        ));
        assert!(errors(&text).is_empty(), "{net}: {:?}", errors(&text));
    }
}

#[test]
fn compat_interpretations_are_the_references() {
    // row 8: rules dropped, endpoint is L4, every request passes.
    let text = one("host: h.example.com\n  port: 443\n  access: read-only");
    let p = try_load(&text, Compat::OpenShell).unwrap().policy;
    let a = admission(&p, "h.example.com", 443);
    assert!(!a.inspects(&p));
    // row 10: `Enforce` means audit.
    let text = one(
        "host: api.example.com\n  port: 443\n  protocol: rest\n  enforcement: Enforce\n  access: read-only",
    );
    let p = try_load(&text, Compat::OpenShell).unwrap().policy;
    assert_eq!(verdict(&p, "api.example.com", "POST", "/x"), Verdict::Audit);
    // row 11: the last duplicate wins, `port` dropped for `ports`.
    let text = one("host: api.example.com\n  port: 443\n  ports: [8443]");
    let p = try_load(&text, Compat::OpenShell).unwrap().policy;
    assert!(!allowed(&p, CURL, "api.example.com", 443));
    assert!(allowed(&p, CURL, "api.example.com", 8443));
    // row 6: an invalid allowed_ips entry loads but the endpoint refuses addresses later.
    let text = one("host: api.example.com\n  port: 443\n  allowed_ips: [bogus]");
    let p = try_load(&text, Compat::OpenShell).unwrap().policy;
    let a = admission(&p, "api.example.com", 443);
    assert!(p.endpoint(a.endpoint).allowed_ips.has_invalid);
}

#[test]
fn broad_allowed_ips_warn() {
    let w = warnings_in(
        &one("host: h.example.com\n  port: 443\n  allowed_ips: [10.0.0.0/8]"),
        Compat::Strict,
    );
    assert!(w.iter().any(|w| w.contains("very broad network")), "{w:?}");
}

// === §1.10 ambiguity ===

#[test]
fn ambiguity_names_both_endpoints_and_the_field() {
    let text = "version: 1\nnetwork_policies:\n  a:\n    name: alpha\n    endpoints:\n      - {host: \"*.example.com\", port: 443, protocol: rest, enforcement: enforce, access: full}\n    binaries: [{path: /usr/bin/curl}]\n  b:\n    endpoints:\n      - {host: api.example.com, ports: [443, 8443], protocol: rest, enforcement: audit, access: full}\n    binaries: [{path: /usr/bin/git}]\n";
    assert_eq!(
        errors(text),
        [
            "p.yaml:10:9: network_policies.b.endpoints[0]: network policies 'alpha' endpoint[0] (*.example.com:443) and 'b' endpoint[0] (api.example.com:443,8443) overlap on port(s) 443 with conflicting metadata: enforcement=\"enforce\" vs \"audit\" (other endpoint at p.yaml:6:9)"
        ]
    );
}

#[test]
fn ambiguity_ignores_disjoint_and_more_specific_paths() {
    // Different ports, non-overlapping hosts, and a more specific path are all fine.
    let text = "version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - {host: api.example.com, port: 443, protocol: rest, enforcement: enforce, access: full}\n      - {host: api.example.com, port: 8443, protocol: rest, enforcement: audit, access: full}\n      - {host: \"*.example.org\", port: 443, protocol: rest, enforcement: audit, access: full}\n      - {host: api.example.com, port: 443, path: /v1/**, protocol: rest, enforcement: audit, access: full}\n      - {host: api.example.com, port: 443}\n    binaries: [{path: /usr/bin/curl}]\n";
    assert_eq!(errors(text), Vec::<String>::new());
}

#[test]
fn ambiguity_connection_level_conflicts() {
    let text = "version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - {host: api.example.com, port: 443, tls: skip}\n      - {host: api.example.com, port: 443}\n    binaries: [{path: /usr/bin/curl}]\n";
    let e = errors(text);
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("tls=\"skip\" vs \"auto\""), "{e:?}");
}

// === merging ===

#[test]
fn merged_files_refuse_a_key_defined_twice() {
    let a = Source { name: "a.yaml".into(), text: "version: 1\nnetwork_policies:\n  gh:\n    endpoints: [{host: a.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n".into() };
    let b = Source { name: "b.yaml".into(), text: "version: 1\nnetwork_policies:\n  other:\n    endpoints: [{host: b.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n  gh:\n    endpoints: [{host: c.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n".into() };
    let e = load(&[a.clone(), b], Compat::Strict).unwrap_err();
    let lines: Vec<String> = e.errors().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        ["b.yaml:6:3: network_policies.gh: policy `gh` is already defined in a.yaml:3:3"]
    );
    let c = Source { name: "c.yaml".into(), text: "version: 1\nnetwork_policies:\n  more:\n    endpoints: [{host: d.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n".into() };
    let merged = load(&[a, c], Compat::Strict).unwrap().policy;
    assert_eq!(merged.entries().len(), 2);
}

#[test]
fn load_is_all_or_nothing_and_reports_every_file() {
    let good = Source {
        name: "good.yaml".into(),
        text: "version: 1\nnetwork_policies: {}\n".into(),
    };
    let bad1 = Source {
        name: "bad1.yaml".into(),
        text: "version: 1\nbogus: 1\n".into(),
    };
    let bad2 = Source {
        name: "bad2.yaml".into(),
        text: "version: [\n".into(),
    };
    let e = load(&[good, bad1, bad2], Compat::Strict).unwrap_err();
    let files: Vec<&str> = e.errors().map(|d| &*d.location.file).collect();
    assert_eq!(files, ["bad1.yaml", "bad2.yaml"]);
}

#[test]
fn diagnostics_are_deterministic() {
    let text = "version: 1\nnetwork_policies:\n  b:\n    endpoints: [{port: 0}]\n  a:\n    endpoints: [{host: \"*\", port: 1}]\n";
    let first = errors(text);
    for _ in 0..5 {
        assert_eq!(errors(text), first);
    }
}

// === authoring hints ===

#[test]
fn unquoted_star_host_says_to_quote_it() {
    let text = "version: 1\nnetwork_policies:\n  gh:\n    endpoints:\n      - host: *.github.com\n        port: 443\n    binaries:\n      - path: /usr/bin/curl\n";
    let e = errors(text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("p.yaml:5:15: ") && e[0].ends_with("quote it, `\"*.github.com\"`"),
        "{e:?}"
    );
}

#[test]
fn star_glued_to_a_name_suggests_the_dot() {
    let e = errors(&one("host: \"*github.com\"\n  port: 443"));
    assert_eq!(
        e,
        [
            "p.yaml:5:15: network_policies.p.endpoints[0].host: `*github.com` is not a valid wildcard host; did you mean `*.github.com` (any one label under github.com)?"
        ]
    );
}

#[test]
fn url_shaped_hosts_are_errors_with_the_fix() {
    for (host, fix) in [
        (
            "https://api.github.com",
            "write `host: api.github.com` with `port: 443`",
        ),
        (
            "http://api.github.com/repos/x",
            "write `host: api.github.com` with `port: 80`, and restrict the path",
        ),
        (
            "api.github.com:8443",
            "write `host: api.github.com` with `port: 8443`",
        ),
        (
            "api.github.com/repos",
            "write `host: api.github.com`, and restrict the path",
        ),
    ] {
        let text = one(&format!("host: \"{host}\"\n  port: 443"));
        let e = errors(&text);
        assert_eq!(e.len(), 1, "{host}: {e:?}");
        assert!(
            e[0].contains(fix) && e[0].contains("no request can match it"),
            "{host}: {e:?}"
        );
        // The reference loads it (it never matches): so does compat, with the same hint.
        let w = warnings_in(&text, Compat::OpenShell);
        assert!(w.iter().any(|w| w.contains(fix)), "{host}: {w:?}");
    }
    // A plain host name is not touched.
    assert!(errors(&one("host: api.github.com\n  port: 443")).is_empty());
}

#[test]
fn http_methods_on_a_websocket_endpoint_warn_that_they_never_apply() {
    let text = one(
        "host: h.example.com\n  port: 443\n  protocol: websocket\n  enforcement: enforce\n  rules:\n    - allow: {method: POST, path: /ws}\n    - allow: {method: GET, path: /ws}",
    );
    let w = warnings_in(&text, Compat::Strict);
    assert!(
        w.iter()
            .any(|w| w.contains("`POST` never applies on a `protocol: websocket` endpoint")),
        "{w:?}"
    );
    assert!(
        !w.iter().any(|w| w.contains("`GET` never applies")),
        "{w:?}"
    );
}

#[test]
fn credential_signing_is_checked_at_load() {
    let signed = |extra: &str| {
        one(&format!(
            "host: s3.us-east-1.amazonaws.com\n  port: 443\n  protocol: rest\n  enforcement: enforce\n  access: full\n{extra}"
        ))
    };
    let p = policy(&signed(
        "  credential_signing: 'sigv4:body'\n  signing_service: bedrock\n  signing_region: us-east-1",
    ));
    let r = p.endpoints_for("s3.us-east-1.amazonaws.com", 443);
    let s = p.endpoint(r[0]).signing.as_ref().unwrap();
    assert_eq!(
        (s.mode, s.service.as_str()),
        (model::SigningMode::Body, "bedrock")
    );
    assert_eq!(s.region.as_deref(), Some("us-east-1"));
    for (extra, want) in [
        (
            "  credential_signing: hmac\n  signing_service: s3",
            "unknown credential_signing `hmac`; expected one of: sigv4, sigv4:body, sigv4:no_body",
        ),
        (
            "  credential_signing: sigv4",
            "`credential_signing` needs `signing_service`",
        ),
        (
            "  credential_signing: sigv4\n  signing_service: s3\n  request_body_credential_rewrite: true",
            "cannot both be set",
        ),
        (
            "  credential_signing: sigv4\n  signing_service: 'S3\\n'",
            "is not an AWS service name",
        ),
        (
            "  credential_signing: sigv4\n  signing_service: s3\n  signing_region: 'us-east-1/x'",
            "is not an AWS region name",
        ),
    ] {
        let e = errors(&signed(extra));
        assert!(e.iter().any(|e| e.contains(want)), "{extra}: {e:?}");
    }
    // Signing needs requests sluice sees: strict refuses an L4 endpoint, compat warns.
    let l4 = one(
        "host: s3.us-east-1.amazonaws.com\n  port: 443\n  credential_signing: sigv4\n  signing_service: s3",
    );
    let e = errors(&l4);
    assert!(
        e.iter()
            .any(|e| e.contains("signs only requests sluice inspects")),
        "{e:?}"
    );
    assert!(errors_in(&l4, Compat::OpenShell).is_empty());
    // Without credential_signing, the service and region do nothing: a warning says so.
    let w = warnings_in(&signed("  signing_service: s3"), Compat::Strict);
    assert!(
        w.iter()
            .any(|w| w.contains("has no effect without `credential_signing`")),
        "{w:?}"
    );
}

#[test]
fn endpoints_that_disagree_on_signing_are_ambiguous() {
    let text = "version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - {host: s3.us-east-1.amazonaws.com, port: 443, protocol: rest, enforcement: enforce, access: full, credential_signing: sigv4, signing_service: s3}\n    binaries: [{path: /usr/bin/curl}]\n  b:\n    endpoints:\n      - {host: s3.us-east-1.amazonaws.com, port: 443, protocol: rest, enforcement: enforce, access: full, credential_signing: 'sigv4:no_body', signing_service: s3}\n    binaries: [{path: /usr/bin/git}]\n";
    let e = errors(text);
    assert!(
        e.iter()
            .any(|e| e.contains("credential_signing=\"sigv4\" vs \"sigv4:no_body\"")),
        "{e:?}"
    );
}
