//! Diagnostics: what `policy check` prints, and what every policy load failure carries.
//!
//! Owns the shape `FILE:LINE:COL: <field path>: <message>` (warnings add `warning: ` after the
//! position), the collection of all diagnostics of a load (never only the first), and their
//! deterministic order. It does not decide what is an error; `raw.rs`, `validate.rs` and
//! `ambiguity.rs` do.

use std::fmt;
use std::sync::Arc;

use super::yaml::Pos;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
}

/// Where in the policy sources something was written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    pub file: Arc<str>,
    pub pos: Pos,
}

impl Location {
    pub fn new(file: &Arc<str>, pos: Pos) -> Self {
        Location {
            file: Arc::clone(file),
            pos,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Line 0: the problem is the file itself (unreadable, not UTF-8), not a place in
        // it; still `FILE:LINE:COL`, as every diagnostic, at its start.
        if self.pos.line == 0 {
            write!(f, "{}:1:1", self.file)
        } else {
            write!(f, "{}:{}", self.file, self.pos)
        }
    }
}

/// What kind of problem a diagnostic reports, for tools that sort refusals by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Anything else: malformed, invalid or ambiguous.
    #[default]
    Other,
    /// A field or value of the format that sluice does not implement yet; refused rather
    /// than ignored, since ignoring a security setting would weaken enforcement.
    Unsupported,
    /// A construct the reference silently misreads: refused by the strict loader, with what
    /// the reference would do; accepted with a warning in `--compat openshell`.
    Lenient,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Diagnostic {
    pub location: Location,
    pub severity: Severity,
    /// Dotted path of the field, e.g. `network_policies.github.endpoints[0].host`.
    pub field: String,
    pub message: String,
    pub kind: Kind,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "",
            Severity::Warning => "warning: ",
        };
        if self.field.is_empty() {
            write!(f, "{}: {level}{}", self.location, self.message)
        } else {
            write!(
                f,
                "{}: {level}{}: {}",
                self.location, self.field, self.message
            )
        }
    }
}

/// Every diagnostic of one load, errors and warnings alike.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn error(
        &mut self,
        file: &Arc<str>,
        pos: Pos,
        field: impl fmt::Display,
        message: impl Into<String>,
    ) {
        self.push(
            Severity::Error,
            Kind::Other,
            file,
            pos,
            field,
            message.into(),
        );
    }

    /// An error of a given kind.
    pub fn error_of(
        &mut self,
        kind: Kind,
        file: &Arc<str>,
        pos: Pos,
        field: impl fmt::Display,
        message: impl Into<String>,
    ) {
        self.push(Severity::Error, kind, file, pos, field, message.into());
    }

    pub fn warning(
        &mut self,
        file: &Arc<str>,
        pos: Pos,
        field: impl fmt::Display,
        message: impl Into<String>,
    ) {
        self.push(
            Severity::Warning,
            Kind::Other,
            file,
            pos,
            field,
            message.into(),
        );
    }

    fn push(
        &mut self,
        severity: Severity,
        kind: Kind,
        file: &Arc<str>,
        pos: Pos,
        field: impl fmt::Display,
        message: String,
    ) {
        self.items.push(Diagnostic {
            location: Location::new(file, pos),
            severity,
            field: field.to_string(),
            message,
            kind,
        });
    }

    pub fn extend(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
    }

    pub fn error_count(&self) -> usize {
        self.errors().count()
    }

    pub fn has_errors(&self) -> bool {
        self.items.iter().any(|d| d.severity == Severity::Error)
    }

    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter().filter(|d| d.severity == Severity::Error)
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items
            .iter()
            .filter(|d| d.severity == Severity::Warning)
    }

    /// Sorted by file, position, severity, field and message, without duplicates, so that
    /// two runs over the same input print the same lines (the reference does not: spec §13
    /// row 20).
    pub fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.items.sort();
        self.items.dedup();
        self.items
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// The fields of a YAML mapping, checked against a schema: unknown keys, keys sluice does not
/// support yet (each with its message) and duplicates are errors in `diags`; the rest come
/// back in order. `path` is the mapping's field path (empty at the root, where `root` names
/// the document in the error for a node that is no mapping).
pub fn map_fields<'n, 'a>(
    diags: &mut Diagnostics,
    file: &Arc<str>,
    node: &'n super::yaml::Node<'a>,
    (path, root): (&str, &str),
    known: &[&str],
    unsupported: &[(&str, &str)],
) -> Option<Vec<(&'n str, &'n super::yaml::Node<'a>)>> {
    use super::yaml::Kind;
    let Kind::Map(pairs) = &node.kind else {
        let what = if path.is_empty() { root } else { path };
        let found = node.type_name();
        diags.error(
            file,
            node.pos,
            path,
            format!("expected a mapping for {what}, found {found}"),
        );
        return None;
    };
    let mut seen: std::collections::HashMap<&str, Pos> = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        let Kind::Scalar(key, _) = &k.kind else {
            diags.error(file, k.pos, path, "mapping keys must be plain strings");
            continue;
        };
        let field = join_field(path, key);
        if let Some((_, message)) = unsupported.iter().find(|(name, _)| name == key) {
            diags.error(file, k.pos, &field, *message);
        } else if !known.contains(&key.as_ref()) {
            let expected = known.join(", ");
            let message = format!("unknown field `{key}`; expected one of: {expected}");
            diags.error(file, k.pos, &field, message);
        } else if let Some(first) = seen.insert(key, k.pos) {
            let line = first.line;
            let message = format!("duplicate field `{key}` (first defined at line {line})");
            diags.error(file, k.pos, &field, message);
        } else {
            out.push((key.as_ref(), v));
        }
    }
    Some(out)
}

/// `path.key`, or `key` at the root.
pub fn join_field(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_shapes() {
        let file: Arc<str> = Arc::from("p.yaml");
        let mut d = Diagnostics::default();
        d.error(
            &file,
            Pos::new(3, 7),
            "network_policies.a.endpoints[0].port",
            "bad",
        );
        d.warning(&file, Pos::new(1, 1), "version", "missing");
        let out: Vec<String> = d.into_sorted().iter().map(ToString::to_string).collect();
        assert_eq!(
            out,
            [
                "p.yaml:1:1: warning: version: missing",
                "p.yaml:3:7: network_policies.a.endpoints[0].port: bad"
            ]
        );
    }
}
