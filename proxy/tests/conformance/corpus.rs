//! Reading the corpus: `validation.jsonl`, `decisions.jsonl.gz` (gzip, decompressed here) and
//! the policy files they name, all under `corpus/` next to this file, or under the folder
//! `SLUICE_CONFORMANCE_DIR` names (another half of the corpus, same layout).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use serde::Deserialize;

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
    let path = dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn validation() -> Vec<ValidationCase> {
    let path = dir().join("validation.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("validation.jsonl: {e}: {l}")))
        .collect()
}

pub fn decisions() -> Vec<DecisionCase> {
    let path = dir().join("decisions.jsonl.gz");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    BufReader::new(flate2::read::GzDecoder::new(file))
        .lines()
        .map(|l| l.unwrap_or_else(|e| panic!("decisions.jsonl.gz: {e}")))
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(&l).unwrap_or_else(|e| panic!("decisions.jsonl.gz: {e}: {l}"))
        })
        .collect()
}
