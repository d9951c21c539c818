//! An endpoint's `path` selector, as policy endpoints and credential bindings spell it: which
//! request paths an endpoint (or a binding) applies to. Pure; no policy context.

use super::glob::{Glob, GlobError};
use super::model::PathSelector;

/// Compiles an endpoint `path` selector: `""`, `**` and `/**` select everything.
/// A credential binding's `path` (spec §3.4): the reference's Rust selector, where `/x/**`
/// also covers `/x`.
pub fn selector_for(path: &str) -> Result<PathSelector, String> {
    match path {
        "" | "**" | "/**" => Ok(PathSelector::All),
        p if !p.starts_with('/') => Err(format!("`{p}` must start with `/` (or be `**`)")),
        p => Glob::new_covering_prefix(p, '/')
            .map(PathSelector::Glob)
            .map_err(|e| e.to_string()),
    }
}

/// A policy endpoint's `path` as a selector, with a typed error.
pub fn parse_selector(path: &str) -> Result<PathSelector, SelectorError> {
    match path {
        // `/**` selects every path too, but is more specific than "" (spec §1.8: the count of
        // characters other than `*`), so it is kept as a glob.
        "" | "**" => Ok(PathSelector::All),
        p if !p.starts_with('/') => Err(SelectorError::Relative(p.to_string())),
        // The same segment-bound glob as rule paths: `/x/**` selects what is below `/x`, not
        // `/x` itself (the reference's rule check refuses `/x` there too).
        p => Glob::new(p, '/')
            .map(PathSelector::Glob)
            .map_err(SelectorError::Glob),
    }
}

/// Why an endpoint `path` is not a selector.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("`{0}` must start with `/` (or be `**`)")]
    Relative(String),
    #[error("{0}")]
    Glob(GlobError),
}
