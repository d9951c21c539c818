//! A count that orders the opens and reads of `/proc` files across lookups on every thread:
//! a number taken after one finished and another taken before a second started, the smaller
//! first, says the first finished before the second started (the counter is one atomic
//! sequence, so taking a larger number than another thread's synchronizes with it).

use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(1);

/// The next number of the sequence.
pub(crate) fn next() -> u64 {
    NEXT.fetch_add(1, Ordering::SeqCst)
}
