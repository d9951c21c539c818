//! The schema reader's primitives: a mapping's fields checked against the keys a level of
//! the document knows (unknown keys with a suggestion, keys sluice does not support yet,
//! duplicates), and the scalars and lists read with their positions.
//!
//! Owns `Reader`, the context every part of the raw step reads through, and `Field`, the path
//! a diagnostic names. It does not know the policy's shape: which keys each level has is said
//! by the module reading that level (`raw.rs` for the document, entries and endpoints,
//! `rule.rs` for rules, `sandbox.rs` for the sandbox sections).

use std::collections::HashMap;
use std::sync::Arc;

use crate::Compat;
use crate::diag::{self, Diagnostics};
use crate::yaml::{Kind, Node, Pos, Style, parse_bool, parse_int};

use super::Spanned;

/// What every read of one file goes through: the file's name, where findings go, and the
/// compatibility mode.
pub(super) struct Reader<'a> {
    pub(super) file: &'a Arc<str>,
    pub(super) diags: &'a mut Diagnostics,
    pub(super) compat: Compat,
}

/// A field path (`network_policies.a.endpoints[0].host`), built without allocating: it is
/// only turned into text when a diagnostic needs it, which keeps loading large policies fast.
#[derive(Clone, Copy, Debug)]
pub enum Field<'a> {
    Root,
    Name(&'a str),
    Key(&'a Field<'a>, &'a str),
    Index(&'a Field<'a>, usize),
}

impl std::fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Field::Root => Ok(()),
            Field::Name(n) => f.write_str(n),
            Field::Key(Field::Root, k) => f.write_str(k),
            Field::Key(p, k) => write!(f, "{p}.{k}"),
            Field::Index(p, i) => write!(f, "{p}[{i}]"),
        }
    }
}

impl Reader<'_> {
    pub(super) fn error(&mut self, pos: Pos, field: Field<'_>, message: impl Into<String>) {
        self.diags.error(self.file, pos, field.to_string(), message);
    }

    pub(super) fn expected(&mut self, node: &Node, field: Field<'_>, what: &str) {
        let found = node.type_name();
        self.error(node.pos, field, format!("expected {what}, found {found}"));
    }

    /// The fields of a mapping, checked against the schema: unknown keys, keys sluice does
    /// not support yet, and duplicates are errors; what is left is returned in order.
    pub(super) fn fields<'n, 'a>(
        &mut self,
        node: &'n Node<'a>,
        path: Field<'_>,
        known: &[&str],
        unsupported: &[(&str, &str)],
    ) -> Option<Vec<(&'n str, &'n Node<'a>)>> {
        let Kind::Map(pairs) = &node.kind else {
            let what = if matches!(path, Field::Root) {
                "the policy document".to_string()
            } else {
                path.to_string()
            };
            let found = node.type_name();
            self.error(
                node.pos,
                path,
                format!("expected a mapping for {what}, found {found}"),
            );
            return None;
        };
        let mut seen: HashMap<&str, Pos> = HashMap::new();
        let mut out = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            let Kind::Scalar(key, _) = &k.kind else {
                self.error(k.pos, path, "mapping keys must be plain strings");
                continue;
            };
            let field = Field::Key(&path, key);
            if let Some((_, feature)) = unsupported.iter().find(|(name, _)| name == key) {
                self.diags.error_of(
                    diag::Kind::Unsupported,
                    self.file,
                    k.pos,
                    field,
                    format!("`{key}` ({feature}) is not supported by sluice yet"),
                );
                continue;
            }
            if !known.contains(&key.as_ref()) {
                let hint = suggest(key, known)
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                self.error(
                    k.pos,
                    field,
                    format!(
                        "unknown field `{key}`{hint}; expected one of: {}",
                        known.join(", ")
                    ),
                );
                continue;
            }
            if let Some(first) = seen.insert(key, k.pos) {
                self.error(
                    k.pos,
                    field,
                    format!(
                        "duplicate field `{key}` (first defined at line {})",
                        first.line
                    ),
                );
                continue;
            }
            out.push((key.as_ref(), v));
        }
        Some(out)
    }

    pub(super) fn string(&mut self, node: &Node, field: Field<'_>) -> Option<Spanned<String>> {
        match &node.kind {
            Kind::Scalar(s, _) if !node.is_null() => Some(Spanned {
                value: s.to_string(),
                pos: node.pos,
            }),
            _ => {
                self.expected(node, field, "a string");
                None
            }
        }
    }

    pub(super) fn int(&mut self, node: &Node, field: Field<'_>) -> Option<Spanned<i128>> {
        if let Kind::Scalar(s, Style::Plain) = &node.kind
            && let Some(value) = parse_int(s)
        {
            return Some(Spanned {
                value,
                pos: node.pos,
            });
        }
        self.expected(node, field, "an integer");
        None
    }

    pub(super) fn bool(&mut self, node: &Node, field: Field<'_>) -> Option<Spanned<bool>> {
        if let Kind::Scalar(s, Style::Plain) = &node.kind
            && let Some(value) = parse_bool(s)
        {
            return Some(Spanned {
                value,
                pos: node.pos,
            });
        }
        self.expected(node, field, "`true` or `false`");
        None
    }

    pub(super) fn list<'n, 'a>(
        &mut self,
        node: &'n Node<'a>,
        field: Field<'_>,
    ) -> Option<&'n [Node<'a>]> {
        match &node.kind {
            Kind::Seq(items) => Some(items),
            _ => {
                self.expected(node, field, "a list");
                None
            }
        }
    }

    pub(super) fn strings(
        &mut self,
        node: &Node,
        field: Field<'_>,
    ) -> Option<Spanned<Vec<Spanned<String>>>> {
        let items = self.list(node, field)?;
        let value = items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| self.string(item, Field::Index(&field, i)))
            .collect();
        Some(Spanned {
            value,
            pos: node.pos,
        })
    }
}

/// The known field closest to a misspelt one, if it is close enough to be a typo.
fn suggest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
