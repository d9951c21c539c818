//! What the two conformance runs share (`tests/conformance`, the REST corpus, and
//! `tests/conformance_protocols`, the message-level one): reading a corpus's files, the
//! outcome of one case, the tally of a section with its summary line and its failures, and
//! the one documented difference both meet (a feature sluice does not implement yet).
//!
//! Each run declares it with `#[path]` (a folder with `mod.rs` is not a test target of its
//! own). What a case means, and how a difference is classified, stays with each run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::de::DeserializeOwned;
use sluice::policy::LoadError;
use sluice::policy::diag::Kind;

/// docs/policy.md, row 23 of the differences table: a feature sluice does not implement yet
/// is refused, never ignored.
pub const NOT_SUPPORTED: &str = "row 23: feature not supported yet, refused, never ignored";

/// One case compared with the reference.
pub enum Outcome {
    Agree,
    /// A difference covered by the named rule.
    Explained(&'static str),
    /// A difference no rule covers.
    Unexplained(String),
}

/// Counts per class for one section.
#[derive(Default)]
pub struct Section {
    cases: usize,
    agree: usize,
    explained: BTreeMap<String, usize>,
    unexplained: BTreeMap<String, Vec<String>>,
}

impl Section {
    pub fn record(&mut self, id: String, outcome: Outcome) {
        self.cases += 1;
        match outcome {
            Outcome::Agree => self.agree += 1,
            Outcome::Explained(class) => *self.explained.entry(class.to_string()).or_default() += 1,
            Outcome::Unexplained(class) => self.unexplained.entry(class).or_default().push(id),
        }
    }

    /// The summary line: `title`, cases, agreements, and differences by class.
    pub fn summary(&self, title: &str) -> String {
        let differ = self.cases - self.agree;
        let mut s = format!(
            "{title}: {} cases, agree {}, differ {differ}",
            self.cases, self.agree
        );
        for (class, n) in &self.explained {
            let _ = write!(s, "; explained [{class}] {n}");
        }
        for (class, ids) in &self.unexplained {
            let _ = write!(s, "; UNEXPLAINED [{class}] {}", ids.len());
        }
        s
    }

    /// One line for each class of unexplained differences, with up to eight of its cases.
    pub fn failures(&self, name: &str) -> Vec<String> {
        self.unexplained
            .iter()
            .map(|(class, ids)| {
                let shown: Vec<&str> = ids.iter().take(8).map(String::as_str).collect();
                format!(
                    "{name}: {} unexplained [{class}], e.g. {}",
                    ids.len(),
                    shown.join(", ")
                )
            })
            .collect()
    }
}

/// Every error of a refused policy is a feature sluice does not implement yet.
pub fn unsupported(e: &LoadError) -> bool {
    e.errors().all(|d| d.kind == Kind::Unsupported)
}

/// The first `chars` characters of a refused policy's first error, to name its class.
pub fn first_error(e: &LoadError, chars: usize) -> String {
    e.errors()
        .next()
        .map(|d| d.message.chars().take(chars).collect())
        .unwrap_or_default()
}

/// The policy file `name` of the corpus in `dir`.
pub fn read_policy(dir: &Path, name: &str) -> String {
    let path = dir.join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `validation.jsonl` of the corpus in `dir`, a case a line.
pub fn validation<T: DeserializeOwned>(dir: &Path) -> Vec<T> {
    let path = dir.join("validation.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("validation.jsonl: {e}: {l}")))
        .collect()
}

/// `decisions.jsonl.gz` of the corpus in `dir` (gzip, decompressed here), a case a line.
pub fn decisions<T: DeserializeOwned>(dir: &Path) -> Vec<T> {
    let path = dir.join("decisions.jsonl.gz");
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
