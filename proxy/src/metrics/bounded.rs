//! Label values that cannot grow without bound: the first `cap` distinct values seen keep
//! their own series, every later one is counted under [`OTHER`]. A sandboxed program can make
//! up any number of host names or executable paths; the metrics endpoint stays the same size.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// The label value every value past the cap is counted under.
pub const OTHER: &str = "_other";

/// The distinct values admitted so far, at most `cap`.
#[derive(Debug)]
pub struct Bounded {
    cap: usize,
    seen: Mutex<HashSet<String>>,
}

impl Bounded {
    pub fn new(cap: usize) -> Bounded {
        Bounded {
            cap,
            seen: Mutex::new(HashSet::new()),
        }
    }

    /// `value` itself while it is one of the first `cap` distinct values, else [`OTHER`].
    pub fn label(&self, value: &str) -> String {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(value) {
            return value.to_owned();
        }
        if seen.len() < self.cap {
            seen.insert(value.to_owned());
            return value.to_owned();
        }
        OTHER.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_past_the_cap_share_one_label() {
        let b = Bounded::new(2);
        assert_eq!(b.label("a"), "a");
        assert_eq!(b.label("b"), "b");
        assert_eq!(b.label("c"), OTHER);
        assert_eq!(b.label("a"), "a");
        assert_eq!(b.label("d"), OTHER);
    }
}
