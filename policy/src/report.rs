//! How validation reports what it finds: the [`Validator`] of one file (where its
//! diagnostics go, and whether constructs the reference misreads are refused or accepted with
//! a warning), and the field paths (`Sub`, `Idx`) a diagnostic names, formatted only when one
//! is written.
//!
//! Shared by `validate.rs` (documents, entries, endpoints) and `rules.rs` (L7 rules); it
//! judges nothing itself.

use std::fmt;
use std::sync::Arc;

use super::Compat;
use super::diag::{self, Diagnostics, Location};
use super::yaml::Pos;

/// `parent.name`, formatted only when a diagnostic needs it (loading is hot).
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)] // a formatting helper, shown through Display
pub struct Sub<'a>(pub &'a dyn fmt::Display, pub &'a str);

impl fmt::Display for Sub<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// `parent[i]`, formatted only when needed.
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)] // a formatting helper, shown through Display
pub struct Idx<'a>(pub &'a dyn fmt::Display, pub usize);

impl fmt::Display for Idx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

/// The validation of one file: its name, where its diagnostics go, and how strict to be.
#[derive(Debug)]
pub struct Validator<'a> {
    pub file: &'a Arc<str>,
    pub diags: &'a mut Diagnostics,
    pub compat: Compat,
}

impl Validator<'_> {
    pub fn error(&mut self, pos: Pos, field: impl fmt::Display, message: impl Into<String>) {
        self.diags.error(self.file, pos, field, message);
    }

    pub fn warning(&mut self, pos: Pos, field: impl fmt::Display, message: impl Into<String>) {
        self.diags.warning(self.file, pos, field, message);
    }

    /// A construct the reference silently misreads: an error in strict mode, a warning with
    /// the reference's interpretation in `--compat openshell`. Returns true when accepted.
    pub fn lenient(
        &mut self,
        pos: Pos,
        field: impl fmt::Display,
        problem: &str,
        reference: &str,
    ) -> bool {
        match self.compat {
            Compat::Strict => {
                self.diags.error_of(
                    diag::Kind::Lenient,
                    self.file,
                    pos,
                    field,
                    format!(
                        "{problem}; the reference {reference} (accept with --compat openshell)"
                    ),
                );
                false
            }
            Compat::OpenShell => {
                self.warning(
                    pos,
                    field,
                    format!("{problem}; as the reference does, sluice {reference}"),
                );
                true
            }
        }
    }

    pub(super) fn location(&self, pos: Pos) -> Location {
        Location::new(self.file, pos)
    }
}
