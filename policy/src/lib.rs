//! The policy engine: OpenShell policy v1 documents in, an immutable compiled snapshot and
//! decisions out. Pure: no network, no /proc, no clock.
//!
//! The pipeline is a chain of types, each step in its own module:
//! text → `yaml` (positioned tree) → `raw` (schema) → `validate`/`rules` (typed values,
//! reported through `report`) →
//! `ambiguity` (endpoint pairs) → `compile` (indexed `Policy`) → `decide` (L4 and L7).
//! `glob` is the one matcher of hosts and paths; `canon` turns request targets into the
//! canonical form that both policy and upstream see; `explain` renders decisions for people
//! and scripts. Loading is all-or-nothing: any error, in any file, and nothing is returned
//! but the diagnostics.

pub mod ambiguity;
pub mod authority;
pub mod canon;
mod compile;
pub mod compose;
pub mod decide;
pub mod diag;
pub mod explain;
pub mod glob;
mod graphql;
pub mod graphql_body;
pub mod graphql_decide;
pub mod model;
pub mod raw;
pub mod report;
mod rpc;
pub mod rpc_body;
pub mod rpc_decide;
mod rules;
mod selector;
pub mod validate;
pub mod yaml;

use std::collections::HashMap;
use std::sync::Arc;

pub use compile::{EndpointRef, Policy};
pub use compose::Composed;
pub use decide::{Admission, Caller, L4Decision, Request, RequestDecision, Verdict};
pub use diag::{Diagnostic, Diagnostics, Severity};

use diag::Location;
use model::Sandbox;
use yaml::Pos;

/// The policy sluice runs with when none is given: no network policies, so every
/// connection is denied, and the reference's restrictive sandbox defaults.
pub const DEFAULT_POLICY: &str = include_str!("default.yaml");
/// The name diagnostics use for the embedded default.
pub const DEFAULT_POLICY_NAME: &str = "<embedded default policy>";

/// How to read constructs that the reference accepts but silently misreads (the README's
/// table of differences).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compat {
    /// Refuse them, explaining what the reference would do.
    #[default]
    Strict,
    /// Accept them with the reference's interpretation and a warning for each.
    OpenShell,
}

/// A policy document to load: its name (a file path) and its text.
#[derive(Clone, Debug)]
pub struct Source {
    pub name: String,
    pub text: String,
}

/// A successful load: the compiled policy and the warnings worth showing.
#[derive(Debug)]
pub struct Loaded {
    pub policy: Policy,
    pub warnings: Vec<Diagnostic>,
}

/// A failed load: every error and warning of every file, sorted.
#[derive(Debug, thiserror::Error)]
#[error("policy load failed with {} error(s)", self.errors().count())]
pub struct LoadError {
    pub diagnostics: Vec<Diagnostic>,
}

impl LoadError {
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }
}

/// Reads one named file for a loader: its text, or what is wrong with it (one line, shown
/// after the file's name). The policy engine reads nothing itself: its caller says how
/// (sluice's bounded reader of configuration files, `config_file::read_text`).
pub type ReadText<'a> = &'a dyn Fn(&str) -> Result<String, String>;

/// Reads the named files through `read` (a file that cannot be read is a diagnostic like any
/// other) and loads them as one policy.
pub fn load_files(
    paths: &[String],
    compat: Compat,
    read: ReadText<'_>,
) -> Result<Loaded, LoadError> {
    load_files_composed(paths, compat, &[], read)
}

/// `load_files` with provider profiles composed in (`compose.rs`); no paths = the embedded
/// deny-all default with the profiles' entries.
pub fn load_files_composed(
    paths: &[String],
    compat: Compat,
    composed: &[Composed],
    read: ReadText<'_>,
) -> Result<Loaded, LoadError> {
    if paths.is_empty() {
        return load_composed(&[default_source()], compat, composed);
    }
    let mut sources = Vec::new();
    let mut diags = Diagnostics::default();
    for path in paths {
        match read(path) {
            Ok(text) => sources.push(Source {
                name: path.clone(),
                text,
            }),
            Err(e) => diags.error(&Arc::from(path.as_str()), Pos::new(0, 0), "", e),
        }
    }
    load_with(&sources, compat, composed, diags)
}

fn default_source() -> Source {
    Source {
        name: DEFAULT_POLICY_NAME.to_string(),
        text: DEFAULT_POLICY.to_string(),
    }
}

/// Loads the embedded deny-all default.
pub fn load_default() -> Result<Loaded, LoadError> {
    load(&[default_source()], Compat::Strict)
}

/// Loads documents as one policy: each is parsed and validated, then they merge (a policy key
/// or a static section defined in two files is an error naming both), then the ambiguity
/// check runs over all endpoints, then the result is compiled.
pub fn load(sources: &[Source], compat: Compat) -> Result<Loaded, LoadError> {
    load_with(sources, compat, &[], Diagnostics::default())
}

/// `load` with provider profiles composed in: each composed entry is validated like an entry
/// of a policy file (its diagnostics in the profile's file), merged (its name must be free),
/// and ambiguity-checked with all the others.
pub fn load_composed(
    sources: &[Source],
    compat: Compat,
    composed: &[Composed],
) -> Result<Loaded, LoadError> {
    load_with(sources, compat, composed, Diagnostics::default())
}

fn load_with(
    sources: &[Source],
    compat: Compat,
    composed: &[Composed],
    mut diags: Diagnostics,
) -> Result<Loaded, LoadError> {
    let mut entries = Vec::new();
    let mut sandbox = Sandbox::default();
    let mut defined: HashMap<String, Location> = HashMap::new();
    let mut sections: HashMap<&'static str, Location> = HashMap::new();
    for source in sources {
        let file: Arc<str> = Arc::from(source.name.as_str());
        let root = match yaml::parse(&source.text) {
            Ok(Some(root)) => root,
            Ok(None) => {
                diags.error(&file, Pos::new(1, 1), "", "the policy document is empty");
                continue;
            }
            Err(e) => {
                let hint = if e.over_budget {
                    String::new()
                } else {
                    syntax_hint(&source.text, e.pos).unwrap_or_default()
                };
                diags.error(&file, e.pos, "", format!("{}{hint}", e.message));
                continue;
            }
        };
        let raw = raw::read(&file, &root, compat, &mut diags);
        let mut validator = report::Validator {
            file: &file,
            diags: &mut diags,
            compat,
        };
        let validated = validator.document(&raw);
        for entry in validated.entries {
            if let Some(first) = defined.get(entry.key.as_str()) {
                diags.error(
                    &file,
                    entry.location.pos,
                    format!("network_policies.{}", entry.key),
                    format!("policy `{}` is already defined in {first}", entry.key),
                );
                continue;
            }
            defined.insert(entry.key.as_str().to_string(), entry.location.clone());
            entries.push(entry);
        }
        for (name, location) in validated.sections {
            if let Some(first) = sections.get(name) {
                diags.error(
                    &file,
                    location.pos,
                    name,
                    format!("`{name}` is already defined in {first}"),
                );
            } else {
                sections.insert(name, location);
            }
        }
        merge_sandbox(&mut sandbox, validated.sandbox);
    }
    for c in composed {
        let mut validator = report::Validator {
            file: &c.file,
            diags: &mut diags,
            compat,
        };
        let Some(entry) = validator.composed_entry(&c.entry) else {
            continue;
        };
        if let Some(first) = defined.get(entry.key.as_str()) {
            diags.error(
                &c.file,
                entry.location.pos,
                "id",
                format!(
                    "provider profile `{}` composes into the policy `{}`, which is already defined in {first}",
                    c.profile, entry.key
                ),
            );
            continue;
        }
        defined.insert(entry.key.as_str().to_string(), entry.location.clone());
        entries.push(entry);
    }
    ambiguity::check(&entries, &mut diags);
    if diags.has_errors() {
        return Err(LoadError {
            diagnostics: diags.into_sorted(),
        });
    }
    let mut names: Vec<String> = sources.iter().map(|s| s.name.clone()).collect();
    for c in composed {
        if !names.iter().any(|n| **n == *c.file) {
            names.push(c.file.to_string());
        }
    }
    Ok(Loaded {
        policy: Policy::compile(entries, sandbox, names),
        warnings: diags.into_sorted(),
    })
}

/// What a YAML syntax error at `pos` most likely means, from the text there: a plain value
/// starting with `*` is read by YAML as an alias (`host: *.github.com`).
fn syntax_hint(text: &str, pos: Pos) -> Option<String> {
    let line = text
        .lines()
        .nth(usize::try_from(pos.line).ok()?.checked_sub(1)?)?;
    let col = usize::try_from(pos.col).ok()?.checked_sub(1)?;
    let rest = line.get(col..)?;
    if !rest.starts_with('*') {
        return None;
    }
    let value = rest.split(" #").next().unwrap_or(rest).trim_end();
    Some(format!(
        "; a plain value cannot start with `*` (YAML reads it as an alias): quote it, `\"{value}\"`"
    ))
}

/// Each static section comes from at most one file (a second one is an error), so merging
/// takes whichever file set it.
fn merge_sandbox(into: &mut Sandbox, from: Sandbox) {
    into.include_workdir = into.include_workdir.or(from.include_workdir);
    into.read_only.extend(from.read_only);
    into.read_write.extend(from.read_write);
    into.landlock = into.landlock.or(from.landlock);
    into.run_as_user = into.run_as_user.or(from.run_as_user);
    into.run_as_group = into.run_as_group.or(from.run_as_group);
}

#[cfg(test)]
mod tests;
