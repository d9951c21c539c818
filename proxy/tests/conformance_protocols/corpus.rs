//! Reading the protocol corpus: `validation.jsonl`, `decisions.jsonl.gz` and the policy
//! files they name, under `corpus/` next to this file or under the folder
//! `SLUICE_PROTOCOL_CONFORMANCE_DIR` names (the other half, same layout).

use std::path::PathBuf;

use serde::Deserialize;

use crate::support;

fn dir() -> PathBuf {
    match std::env::var_os("SLUICE_PROTOCOL_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance_protocols/corpus")
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct ValidationCase {
    pub policy: String,
    pub valid: bool,
    #[serde(default)]
    pub stage: Option<String>,
    #[serde(default)]
    pub label: String,
}

#[derive(Debug, Deserialize)]
pub struct Query {
    pub binary: String,
    #[serde(default)]
    pub ancestors: Vec<String>,
    pub host: String,
    pub port: u16,
    pub method: Option<String>,
    pub path: Option<String>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    #[serde(default)]
    pub ws_text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Stage {
    pub l7: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Expect {
    pub l4: String,
    pub l7: Option<String>,
    pub entry: Option<String>,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub upgrade: Option<Stage>,
}

/// One line of `decisions.jsonl.gz`.
#[derive(Debug, Deserialize)]
pub struct DecisionCase {
    pub policy: String,
    #[serde(default)]
    pub label: String,
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
