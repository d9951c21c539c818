//! Hostile input never panics the policy engine: arbitrary policy text (and mutations of a
//! valid policy), arbitrary request targets, queries and hosts. The parsers of what a client
//! sends have their own runner (`fuzz_parsers.rs`) and libFuzzer targets (`fuzz/`).

use proptest::prelude::*;
use sluice::policy::canon::{canonicalize, normalize_host, parse_query};
use sluice::policy::{Caller, Compat, L4Decision, Request, Source, load};

const VALID: &str = include_str!("../../configs/policies/github-readonly.yaml");

fn load_text(text: String, compat: Compat) {
    let _ = load(
        &[Source {
            name: "fuzz.yaml".into(),
            text,
        }],
        compat,
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_policy_text(text in ".{0,400}") {
        load_text(text.clone(), Compat::Strict);
        load_text(text, Compat::OpenShell);
    }

    #[test]
    fn yaml_shaped_policy_text(text in "[a-z_:\\-\\[\\]{}*,/ \\n'\"&!|>0-9.]{0,300}") {
        load_text(format!("version: 1\nnetwork_policies:\n{text}"), Compat::Strict);
    }

    #[test]
    fn mutated_valid_policy(cuts in proptest::collection::vec((0usize..4000, any::<char>()), 1..6)) {
        let mut chars: Vec<char> = VALID.chars().collect();
        for (at, c) in cuts {
            let i = at % chars.len().max(1);
            chars[i] = c;
        }
        load_text(chars.into_iter().collect(), Compat::OpenShell);
    }

    #[test]
    fn arbitrary_targets(target in proptest::collection::vec(any::<u8>(), 0..300), slash in any::<bool>()) {
        if let Ok(t) = canonicalize(&target, slash) {
            // A canonical path is visible ASCII, starts with `/`, and is a fixed point.
            prop_assert!(t.path.starts_with('/'));
            prop_assert!(t.path.bytes().all(|b| (0x21..0x7f).contains(&b)));
            prop_assert_eq!(canonicalize(t.path.as_bytes(), slash).map(|c| c.path), Ok(t.path.clone()));
        }
    }

    #[test]
    fn arbitrary_queries_and_hosts(q in ".{0,200}", h in ".{0,80}") {
        let _ = parse_query(&q);
        let _ = normalize_host(&h);
    }

    #[test]
    fn arbitrary_requests_on_a_valid_policy(
        host in "[a-z.]{0,30}",
        port in any::<u16>(),
        method in "[A-Za-z*]{0,8}",
        target in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        let loaded = load(&[Source { name: "p.yaml".into(), text: VALID.to_string() }], Compat::Strict).unwrap();
        let p = &loaded.policy;
        if let Ok(h) = normalize_host(&host) {
            let caller = Caller { exe: "/usr/bin/git", ancestors: &[], cmdline: &[], tenant: None };
            if let L4Decision::Allow(a) = p.decide_l4(&caller, &sluice_addr::Authority::new(&h, port)) {
                let _ = p.decide_request(&a, &Request { method: &method, target: &target, websocket_upgrade: false });
            }
        }
    }
}
