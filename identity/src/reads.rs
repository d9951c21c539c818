//! How much of `/proc` one search has read, and how much it may.

/// What opening a process, listing its fd directory and reading its `stat` or `children`
/// cost, counted in descriptors read (one `readlink` each): measured, a process with a handful
/// of descriptors takes about 25 µs to check and a `readlink` about 1 µs.
const PROCESS_COST: usize = 16;

/// The reads of one search: descriptors (one `readlink` each) and processes opened, against
/// a limit in descriptors' worth. A search that reaches its limit stops where it is; what it
/// found then is no answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reads {
    /// Descriptors looked at.
    pub(crate) descriptors: usize,
    processes: usize,
    /// Other small reads: a thread's `children`, a `stat` of a `/proc/<pid>` directory.
    small: usize,
    limit: usize,
}

impl Reads {
    /// No limit.
    pub(crate) fn unlimited() -> Self {
        Self::within(usize::MAX)
    }

    /// At most `limit` descriptors' worth (a process counts as [`PROCESS_COST`]).
    pub(crate) fn within(limit: usize) -> Self {
        Self {
            descriptors: 0,
            processes: 0,
            small: 0,
            limit,
        }
    }

    /// Whether the limit is reached: nothing more may be read.
    pub(crate) fn spent(&self) -> bool {
        self.descriptors
            .saturating_add(self.small)
            .saturating_add(self.processes.saturating_mul(PROCESS_COST))
            >= self.limit
    }

    pub(crate) fn descriptor(&mut self) {
        self.descriptors += 1;
    }

    pub(crate) fn process(&mut self) {
        self.processes += 1;
    }

    /// `n` small reads, each as much as a descriptor: the `children` files of a process's
    /// `n` threads, or `n` `stat`s of `/proc/<pid>`.
    pub(crate) fn small(&mut self, n: usize) {
        self.small = self.small.saturating_add(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_costs_as_much_as_sixteen_descriptors() {
        let mut reads = Reads::within(18);
        reads.process();
        assert!(!reads.spent());
        reads.descriptor();
        assert!(!reads.spent());
        reads.descriptor();
        assert!(reads.spent());
        let mut threads = Reads::within(100);
        threads.small(99);
        assert!(!threads.spent());
        threads.small(usize::MAX);
        assert!(threads.spent());
        let mut unlimited = Reads::unlimited();
        for _ in 0..1_000 {
            unlimited.process();
            unlimited.descriptor();
        }
        assert!(!unlimited.spent());
    }
}
