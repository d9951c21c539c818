//! Provider profiles composed into the policy, as OpenShell composes them: each profile with
//! endpoints becomes one network policy entry named `_provider_<sanitised id>`, with the
//! profile's endpoints and binaries, validated and ambiguity-checked with the policy files.
//!
//! Owns the composed entry's name and the shape handed from the profile loader to the policy
//! loader (a raw entry positioned in the profile's file, so that every error names the
//! profile's file and line). Reading profiles belongs to `credentials::profile`; validating
//! the entry to `validate.rs`, like any other entry.

use std::sync::Arc;

use super::raw::RawEntry;

/// One profile as a policy entry, not yet validated.
#[derive(Clone, Debug)]
pub struct Composed {
    /// The profile's file: where the entry's diagnostics point.
    pub file: Arc<str>,
    /// The profile's `id`, as written.
    pub profile: String,
    /// Keyed `_provider_<sanitised id>`, positioned at the profile's `id`.
    pub entry: RawEntry,
}

/// `_provider_` and the id with every character outside `[a-z0-9_]` (the `-` of a
/// kebab-case id) written as `_`.
pub fn entry_key(id: &str) -> String {
    let sanitised: String = id
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("_provider_{sanitised}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sanitised() {
        assert_eq!(entry_key("github"), "_provider_github");
        assert_eq!(entry_key("google-vertex-ai"), "_provider_google_vertex_ai");
        assert_eq!(entry_key("A.b"), "_provider_a_b");
    }
}
