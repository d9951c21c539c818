//! The degradation vocabulary: a protection left out in best-effort mode, and why.
//!
//! Owns only the value. `landlock`, `privilege` and `launch` produce degradations while they
//! work; `status` renders them on the `ready` line. Keeping it here lets each of them use it
//! without importing the others.

/// A protection left out in best-effort mode, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Degradation {
    /// Stable feature name (`landlock_scope`, `netns`, ...).
    pub feature: &'static str,
    /// Human explanation.
    pub detail: String,
}
