//! The audit form of the callers of live connections, shared: one copy per process while
//! what audit records of it is unchanged. Owns that sharing only; `caller.rs` builds the
//! records.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::audit;

/// The audit form of the callers of live connections, one per process: the connections of a
/// process share one copy while what it records (pids, executables, command lines of the
/// process and its ancestors) is unchanged, instead of each holding its own (a process tree
/// with long command lines costs kilobytes per copy). Only an equal value is shared, so a
/// connection never carries another process's or an older state's record.
#[derive(Debug, Default)]
pub(crate) struct Seen(Mutex<SeenMap>);

#[derive(Debug, Default)]
struct SeenMap {
    by_pid: HashMap<u32, Weak<audit::Caller>>,
    /// Entries whose callers are all gone are swept when the map reaches this size.
    sweep_at: usize,
}

/// The smallest `sweep_at`: a sweep reads every entry, so not at every insert.
const SEEN_SWEEP_MIN: usize = 64;

impl Seen {
    pub(crate) fn share(&self, caller: audit::Caller) -> Arc<audit::Caller> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let pid = caller.process.pid;
        if let Some(kept) = map.by_pid.get(&pid).and_then(Weak::upgrade)
            && *kept == caller
        {
            return kept;
        }
        let caller = Arc::new(caller);
        if map.by_pid.len() >= map.sweep_at {
            map.by_pid.retain(|_, kept| kept.strong_count() > 0);
            map.sweep_at = (map.by_pid.len() * 2).max(SEEN_SWEEP_MIN);
        }
        map.by_pid.insert(pid, Arc::downgrade(&caller));
        caller
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(pid: u32, cmdline: &[&str]) -> audit::Caller {
        audit::Caller {
            process: audit::Process {
                pid,
                exe: "/usr/bin/curl".to_string(),
                cmdline: cmdline.iter().map(ToString::to_string).collect(),
                uid: Some(1000),
            },
            ancestors: vec![audit::Process {
                pid: 1,
                exe: "/sbin/init".to_string(),
                cmdline: vec!["init".to_string()],
                uid: None,
            }],
            ..audit::Caller::default()
        }
    }

    #[test]
    fn connections_of_one_unchanged_process_share_one_record() {
        let seen = Seen::default();
        let a = seen.share(caller(42, &["curl", "https://a"]));
        let b = seen.share(caller(42, &["curl", "https://a"]));
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn a_changed_process_or_another_pid_gets_its_own_record() {
        let seen = Seen::default();
        let a = seen.share(caller(42, &["curl", "https://a"]));
        // Same pid, another command line (an exec since): its own record, never the old one.
        let b = seen.share(caller(42, &["wget", "https://a"]));
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(b.process.cmdline, ["wget", "https://a"]);
        assert_eq!(a.process.cmdline, ["curl", "https://a"]);
        let c = seen.share(caller(43, &["curl", "https://a"]));
        assert!(!Arc::ptr_eq(&b, &c));
        assert_eq!(c.process.pid, 43);
    }

    #[test]
    fn records_of_gone_connections_are_swept() {
        let seen = Seen::default();
        for pid in 0..1000 {
            drop(seen.share(caller(pid, &["curl"])));
        }
        let map = seen.0.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(
            map.by_pid.len() <= SEEN_SWEEP_MIN * 2,
            "{}",
            map.by_pid.len()
        );
    }
}
