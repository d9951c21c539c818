//! Reading the corpus: `validation.jsonl`, `decisions.jsonl.gz` (gzip, decompressed here) and
//! the policy files they name, all under `corpus/` next to this file, or under the folder
//! `SLUICE_CONFORMANCE_DIR` names (another half of the corpus, same layout).

use std::path::PathBuf;

use serde::Deserialize;

use crate::support;

fn dir() -> PathBuf {
    match std::env::var_os("SLUICE_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/corpus"),
    }
}

/// One line of `validation.jsonl`: does the reference load this policy?
#[derive(Debug, Deserialize)]
pub struct ValidationCase {
    pub policy: String,
    pub valid: bool,
    #[serde(default)]
    pub stage: Option<String>,
    #[serde(default)]
    pub error: String,
    #[serde(default)]
    pub label: String,
}

#[derive(Debug, Deserialize)]
pub struct Query {
    pub binary: String,
    #[serde(default)]
    pub ancestors: Vec<String>,
    #[serde(default)]
    pub cmdline_paths: Vec<String>,
    pub host: String,
    pub port: u16,
    pub method: Option<String>,
    pub path: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Expect {
    pub l4: String,
    pub l7: Option<String>,
    pub entry: Option<String>,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub eval_error: bool,
}

/// One line of `decisions.jsonl.gz`.
#[derive(Debug, Deserialize)]
pub struct DecisionCase {
    pub policy: String,
    pub query: Query,
    pub expect: Expect,
}

pub fn read_policy(name: &str) -> String {
    support::read_policy(&dir(), name)
}

pub fn validation() -> Vec<ValidationCase> {
    support::validation(&dir())
}

pub fn decisions() -> Vec<DecisionCase> {
    support::decisions(&dir())
}
