//! The sockets each sibling held when a lookup last read its fd table, so that the next
//! lookups do not read it again: a client whose parent has thousands of children no longer
//! costs every lookup thousands of tables.
//!
//! Why it is enough. A lookup reads the children of every ancestor that does not hold the
//! socket (the client's siblings, its parent's siblings, ...) for one reason: a socket reaches
//! another process by fork (`owners`), and a child forked by an ancestor while that ancestor
//! held the socket holds it still unless it closed it. A process gains descriptors by fork
//! only once, when it is made; so a sibling whose table was read once, after it was made, can
//! hold a socket by fork now only if it held it then: a table kept from that read answers
//! for it, as long as the pid still names that process. Any other way for a sibling to gain
//! the socket is a hand-over (`SCM_RIGHTS`, `pidfd_getfd`), which a fork-family search never
//! follows (a process outside the family that took it over is not searched for either, and
//! re-checks never read siblings: see `OwnerSearch::without_siblings`). A new sibling, one
//! whose pid was reused, and one whose kept table holds the socket are read as before; so is
//! every ancestor and every holder's descendant, at every lookup.
//!
//! That the pid still names the process read is what the process connector says
//! (`connector`): every fork and exit is known before a table kept for that pid is used
//! again, and a table read while an event for its pid was on its way is not kept. When events
//! may have been lost, every table is forgotten; where sluice cannot subscribe (see
//! `connector`), nothing is kept and every sibling is read at every lookup.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;

use crate::connector::{Connector, Drained, Event};

/// Tables kept at most; past it, new ones are not kept (the oldest are dropped with their
/// processes' exits).
const CAPACITY: usize = 65_536;
/// Socket inodes kept per table at most: a larger table is read at every lookup.
const SOCKETS_KEPT: usize = 64;

/// Forks remembered, newest last (see [`Siblings::newest_forks`]).
const FORKS_KEPT: usize = 64;

/// How often the thread that reads the connector between lookups looks whether the
/// resolver is gone, when no event woke it.
const WATCH_TIMEOUT_MS: i32 = 1_000;

/// The kept tables, and the connector that keeps them true.
#[derive(Debug, Default)]
pub(crate) struct Siblings {
    /// Made at the first lookup, which starts the thread that subscribes.
    shared: OnceLock<Arc<Shared>>,
}

/// What the lookups and the thread that reads events between them share. The state's lock
/// is taken before the connector's, by both.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Set by the thread once subscribed (until then, and for good where sluice cannot
    /// subscribe, lookups read every sibling).
    connector: OnceLock<Mutex<Connector>>,
}

#[derive(Debug, Default)]
struct State {
    /// Events applied so far (and one more for each loss).
    sequence: u64,
    tables: HashMap<u32, Vec<u64>>,
    /// Reads under way: pid → (readers, the sequence of the last event for that pid).
    reading: HashMap<u32, (u32, u64)>,
    /// The sequence at the last loss of events: reads begun before it are not kept.
    lost_at: u64,
    /// The connector's socket broke, or it could not be opened: nothing is kept.
    broken: bool,
    /// The last [`FORKS_KEPT`] processes forked that have not exited since, oldest first:
    /// where a lookup looks for a fresh client before it lists `/proc`.
    forks: std::collections::VecDeque<u32>,
}

/// A lookup's reads of sibling tables, begun at `sequence` (see [`Siblings::plan`]); `None`
/// when no table may be kept from them (made before the connector was subscribed).
#[derive(Debug)]
pub(crate) struct Plan {
    /// The children to read now.
    pub(crate) read: Vec<u32>,
    sequence: Option<u64>,
}

impl Siblings {
    /// Of `children` (just listed), those whose tables must be read now for `inode`: every
    /// one with no kept table, or whose kept table holds it. The others hold it only if
    /// handed it since (see the module documentation). Without the connector: all of them.
    pub(crate) fn plan(&self, children: Vec<u32>, inode: u64) -> Plan {
        let Some(mut state) = self.current() else {
            return Plan {
                read: children,
                sequence: None,
            };
        };
        let sequence = state.sequence;
        let mut read = Vec::new();
        for child in children {
            if state
                .tables
                .get(&child)
                .is_some_and(|sockets| sockets.binary_search(&inode).is_err())
            {
                continue;
            }
            state.reading.entry(child).or_insert((0, 0)).0 += 1;
            read.push(child);
        }
        Plan {
            read,
            sequence: Some(sequence),
        }
    }

    /// Keeps what the reads of `plan` found: for each pid read in full, the socket inodes of
    /// its table (`None`: not read in full, or not readable). A table is kept only when no
    /// fork or exit of its pid, and no loss of events, came after the plan.
    pub(crate) fn record(
        &self,
        plan: Plan,
        read: impl IntoIterator<Item = (u32, Option<Vec<u64>>)>,
    ) {
        let (Some(shared), Some(sequence)) = (self.shared.get(), plan.sequence) else {
            return;
        };
        let mut state = lock(&shared.state);
        let fresh = sequence >= state.lost_at;
        let mut done: HashMap<u32, Option<Vec<u64>>> = read.into_iter().collect();
        for pid in plan.read {
            let Some((readers, last_event)) = state.reading.get_mut(&pid) else {
                continue;
            };
            *readers -= 1;
            let unchanged = *last_event <= sequence;
            if *readers == 0 {
                state.reading.remove(&pid);
            }
            let Some(Some(mut sockets)) = done.remove(&pid) else {
                continue;
            };
            if fresh && unchanged && sockets.len() <= SOCKETS_KEPT && state.tables.len() < CAPACITY
            {
                sockets.sort_unstable();
                state.tables.insert(pid, sockets);
            }
        }
    }

    /// The processes forked last that have not exited since, newest first, as far as the
    /// process connector has told (every fork before this call, less any it dropped); empty
    /// without it. Only where to look first: a process it leaves out is found by the scan.
    pub(crate) fn newest_forks(&self) -> Vec<u32> {
        self.current()
            .map(|state| state.forks.iter().rev().copied().collect())
            .unwrap_or_default()
    }

    /// The state with every event so far applied, or `None` when tables cannot be kept.
    fn current(&self) -> Option<MutexGuard<'_, State>> {
        self.shared.get_or_init(Shared::start).current()
    }
}

impl Shared {
    /// Starts the thread that subscribes and then reads events between lookups (so that a
    /// lookup waits neither for the kernel's answer to the subscription nor, on a host that
    /// forks a lot, for reading every event since the last lookup).
    fn start() -> Arc<Shared> {
        let shared = Arc::new(Shared::default());
        let weak = Arc::downgrade(&shared);
        let started = std::thread::Builder::new()
            .name("sluice-proc-events".into())
            .spawn(move || Shared::subscribe_and_watch(&weak));
        if started.is_err() {
            lock(&shared.state).broken = true;
        }
        shared
    }

    fn subscribe_and_watch(weak: &Weak<Shared>) {
        let subscribed =
            Connector::open().and_then(|connector| Ok((connector.try_clone_fd()?, connector)));
        let Some(shared) = weak.upgrade() else {
            return;
        };
        match subscribed {
            Ok((watched, connector)) => {
                let _ = shared.connector.set(Mutex::new(connector));
                drop(shared);
                Shared::watch(weak, &watched);
            }
            Err(_) => lock(&shared.state).broken = true,
        }
    }

    /// Reads events as they come until the resolver is gone (or the socket breaks).
    fn watch(weak: &Weak<Shared>, socket: &OwnedFd) {
        loop {
            let mut ready = [PollFd::new(socket, PollFlags::IN)];
            let waited = rustix::event::poll(&mut ready, Some(&timeout(WATCH_TIMEOUT_MS)));
            let Some(shared) = weak.upgrade() else {
                return;
            };
            match waited {
                Ok(0) | Err(Errno::INTR) => {}
                Ok(_) => {
                    if shared.current().is_none() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// The state with every event so far applied, or `None` when tables cannot be kept.
    fn current(&self) -> Option<MutexGuard<'_, State>> {
        let connector = self.connector.get()?;
        let mut state = lock(&self.state);
        if state.broken {
            return None;
        }
        // Drained with the state locked: an event read is applied before anyone else
        // looks at the tables.
        let drained = lock(connector).drain();
        match drained {
            Ok(Drained::All(events)) => {
                for event in events {
                    state.apply(event);
                }
                Some(state)
            }
            Ok(Drained::Lost) => {
                state.forget_all();
                Some(state)
            }
            Err(_) => {
                // The socket broke: no table can be trusted from here on.
                state.forget_all();
                state.broken = true;
                None
            }
        }
    }
}

/// A poll timeout of `ms` milliseconds.
fn timeout(ms: i32) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: i64::from(ms / 1_000),
        tv_nsec: i64::from(ms % 1_000) * 1_000_000,
    }
}

impl State {
    fn apply(&mut self, event: Event) {
        self.sequence += 1;
        let pid = match event {
            Event::Forked(pid) => {
                if self.forks.len() >= FORKS_KEPT {
                    self.forks.pop_front();
                }
                self.forks.push_back(pid);
                pid
            }
            Event::Exited(pid) => {
                if let Some(at) = self.forks.iter().rposition(|forked| *forked == pid) {
                    self.forks.remove(at);
                }
                pid
            }
        };
        self.tables.remove(&pid);
        if let Some((_, last)) = self.reading.get_mut(&pid) {
            *last = self.sequence;
        }
    }

    fn forget_all(&mut self) {
        self.sequence += 1;
        self.lost_at = self.sequence;
        self.tables.clear();
    }
}

/// Every critical section leaves the state whole (map operations), so a poisoned lock is
/// used as is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state alone, as events and reads change it.
    fn state_after(events: &[Event]) -> State {
        let mut state = State::default();
        for event in events {
            state.apply(*event);
        }
        state
    }

    #[test]
    fn an_event_for_a_pid_drops_its_table_and_marks_its_reads() {
        let mut state = state_after(&[]);
        state.tables.insert(7, vec![1, 2]);
        state.reading.insert(8, (1, 0));
        state.apply(Event::Exited(7));
        state.apply(Event::Forked(8));
        assert!(!state.tables.contains_key(&7));
        assert_eq!(state.reading.get(&8), Some(&(1, 2)));
        state.tables.insert(9, vec![3]);
        state.forget_all();
        assert!(state.tables.is_empty());
        assert_eq!(state.lost_at, state.sequence);
    }

    #[test]
    fn the_newest_forks_are_kept_until_they_exit() {
        let mut events: Vec<Event> = (1..=FORKS_KEPT as u32 + 2).map(Event::Forked).collect();
        events.push(Event::Exited(FORKS_KEPT as u32));
        let state = state_after(&events);
        assert_eq!(state.forks.len(), FORKS_KEPT - 1);
        assert_eq!(state.forks.front(), Some(&3));
        assert_eq!(state.forks.back(), Some(&(FORKS_KEPT as u32 + 2)));
        assert!(!state.forks.contains(&(FORKS_KEPT as u32)));
    }
}
