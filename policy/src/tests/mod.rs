//! Unit tests of the policy engine as a whole: text in, decisions and diagnostics out;
//! `matching` for decisions (§1.8, §2.7, §2.8, §13 row 12), `loading` for diagnostics (§1.9,
//! §13 strict / compat rows, §1.10, merging). This module holds their shared helpers.
//! Each test pins one rule of spec §1.8 (matching), §1.9 (validation), §1.10 (ambiguity)
//! or a row of §13 (strict / compat / fix), with the exact decision or message.

use super::decide::{L4DenyKind, RequestBasis, Stage};
use super::*;

const FILE: &str = "p.yaml";

fn try_load(text: &str, compat: Compat) -> Result<Loaded, LoadError> {
    load(
        &[Source {
            name: FILE.to_string(),
            text: text.to_string(),
        }],
        compat,
    )
}

fn policy(text: &str) -> Policy {
    match try_load(text, Compat::Strict) {
        Ok(l) => l.policy,
        Err(e) => panic!("policy did not load: {:#?}", e.diagnostics),
    }
}

fn errors(text: &str) -> Vec<String> {
    errors_in(text, Compat::Strict)
}

fn errors_in(text: &str, compat: Compat) -> Vec<String> {
    match try_load(text, compat) {
        Ok(_) => Vec::new(),
        Err(e) => e.errors().map(ToString::to_string).collect(),
    }
}

fn warnings_in(text: &str, compat: Compat) -> Vec<String> {
    match try_load(text, compat) {
        Ok(l) => l.warnings.iter().map(ToString::to_string).collect(),
        Err(e) => panic!("policy did not load: {:#?}", e.diagnostics),
    }
}

/// One entry `p` admitting `/usr/bin/curl`, with the given endpoint YAML (indented by 6).
fn one(endpoint: &str) -> String {
    format!(
        "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {}\n    binaries:\n      - path: /usr/bin/curl\n",
        endpoint.replace('\n', "\n      ")
    )
}

const CURL: &str = "/usr/bin/curl";

fn l4(p: &Policy, exe: &str, ancestors: &[&str], host: &str, port: u16) -> L4Decision {
    let ancestors: Vec<String> = ancestors.iter().map(ToString::to_string).collect();
    p.decide_l4(
        &Caller {
            exe,
            ancestors: &ancestors,
            cmdline: &[],
            tenant: None,
        },
        &sluice_addr::Authority::new(host, port),
    )
}

fn allowed(p: &Policy, exe: &str, host: &str, port: u16) -> bool {
    matches!(l4(p, exe, &[], host, port), L4Decision::Allow(_))
}

fn admission(p: &Policy, host: &str, port: u16) -> Admission {
    match l4(p, CURL, &[], host, port) {
        L4Decision::Allow(a) => a,
        L4Decision::Deny(d) => panic!("L4 denied: {}", d.reason),
    }
}

fn verdict(p: &Policy, host: &str, method: &str, target: &str) -> Verdict {
    let a = admission(p, host, 443);
    p.decide_request(
        &a,
        &Request {
            method,
            target: target.as_bytes(),
            websocket_upgrade: false,
        },
    )
    .verdict
}

mod loading;
mod matching;
