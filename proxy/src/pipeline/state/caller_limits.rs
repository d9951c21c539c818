//! Per-caller admission: how many connections one program may hold at once, and how many it
//! may open per second, so that one caller cannot take every slot of `--max-connections`.
//!
//! Owns the per-caller table (keyed by the caller's executable path, the identity policy
//! matches on; on a gateway, by tenant, or by client address until the tenant is known) and
//! the slot a connection holds while it lasts. The table is bounded: a caller
//! with open connections keeps its entry (at most `--max-connections` of them), and entries of
//! callers with none are dropped first when the table is full, those that carry no state
//! (a full bucket) before the others. It does not identify callers (`caller.rs`) nor answer
//! them (the pipeline turns a [`Refused`] into a 429).
//!
//! Also owns the bound on the gateway connections still awaiting their credentials, all
//! addresses together ([`Awaiting`]): each address's share alone would let a few addresses
//! that send nothing hold every connection the gateway has.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use crate::http::respond::Code;
use crate::http::respond::Refusal;

/// The table key shared by every connection whose caller could not be identified (such a
/// connection is refused at the identity stage, but holds a connection slot until then).
/// Executable paths are absolute, so no caller's key is this.
pub const UNIDENTIFIED: &str = "(unidentified caller)";

/// The table key of a gateway client whose tenant is known only at its first head (by the
/// credentials it sends): its address (an IPv6 client's /64, which one host commonly
/// holds whole), so that one client waiting cannot hold every connection slot.
pub fn awaiting_credentials(peer: IpAddr) -> String {
    match peer.to_canonical() {
        IpAddr::V4(a) => format!("(awaiting credentials) {a}"),
        IpAddr::V6(a) => {
            let net = Ipv6Addr::from_bits(a.to_bits() & (u128::MAX << 64));
            format!("(awaiting credentials) {net}/64")
        }
    }
}

/// Why a caller was refused a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The caller already holds this many connections.
    Connections(usize),
    /// The caller opened this many connections in the last second (its bucket is empty).
    Rate(u32),
}

impl Refused {
    /// The answer: 429 with a JSON body naming the limit.
    pub fn refusal(self, exe: &str) -> Refusal {
        match self {
            Refused::Connections(limit) => Refusal::new(
                Code::CallerConnectionLimit,
                format!(
                    "{exe} already holds {limit} connections through sluice \
                     (--max-connections-per-caller); close some and retry"
                ),
            ),
            Refused::Rate(limit) => Refusal::new(
                Code::CallerRateLimit,
                format!(
                    "{exe} opened more than {limit} connections in a second \
                     (--max-new-connections-per-caller-per-sec); retry later"
                ),
            ),
        }
        .with("binary", exe.to_string())
    }
}

/// The per-caller limits and the table of callers.
#[derive(Debug)]
pub struct CallerLimits {
    max_active: usize,
    per_sec: u32,
    capacity: usize,
    table: Mutex<HashMap<String, Entry>>,
    awaiting: Mutex<Waiting>,
}

/// The connections awaiting their credentials, oldest first (by the order they came in),
/// each with the signal that displaces it.
#[derive(Debug)]
struct Waiting {
    cap: usize,
    next: u64,
    by_age: BTreeMap<u64, Arc<Notify>>,
}

#[derive(Debug)]
struct Entry {
    active: usize,
    /// Connections the caller may still open now (a token bucket of `per_sec` tokens).
    tokens: f64,
    refilled: Instant,
}

impl Entry {
    fn refill(&mut self, now: Instant, per_sec: u32) {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + elapsed * f64::from(per_sec)).min(f64::from(per_sec));
        self.refilled = now;
    }

    /// No connections and a full bucket: the entry says nothing a fresh one would not.
    fn is_blank(&self, now: Instant, per_sec: u32) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.active == 0 && self.tokens + elapsed * f64::from(per_sec) >= f64::from(per_sec)
    }
}

impl CallerLimits {
    /// `max_connections` is the proxy-wide limit: at most that many callers hold a slot at
    /// once, and the table keeps room for as many again without connections.
    pub fn new(max_active: usize, per_sec: u32, max_connections: usize) -> CallerLimits {
        CallerLimits {
            max_active: max_active.max(1),
            per_sec: per_sec.max(1),
            capacity: max_connections.saturating_mul(2).max(64),
            table: Mutex::new(HashMap::new()),
            awaiting: Mutex::new(Waiting {
                cap: (max_connections / 2).max(1),
                next: 0,
                by_age: BTreeMap::new(),
            }),
        }
    }

    /// Counts one more connection awaiting its credentials (already admitted under its
    /// address's key, [`awaiting_credentials`]). At most half of `--max-connections` wait
    /// at once, all addresses together, so that the other half is always there for clients
    /// that have said who they are; when that many wait already, the one that has waited
    /// longest is displaced (told so through its [`Awaiting::displaced`]) to make room: a
    /// client that sends its credentials as it connects is never refused for those that
    /// send nothing, and those are refused in turn, oldest first.
    pub fn awaiting(self: &Arc<Self>) -> Awaiting {
        let mut waiting = self.lock_awaiting();
        while waiting.by_age.len() >= waiting.cap && waiting.displace_oldest() {}
        let id = waiting.next;
        waiting.next += 1;
        let signal = Arc::new(Notify::new());
        waiting.by_age.insert(id, Arc::clone(&signal));
        Awaiting {
            limits: Arc::clone(self),
            id,
            signal,
        }
    }

    /// Displaces the connection that has waited longest for its credentials, if any waits:
    /// a client that comes when every connection sluice may hold is taken takes its place.
    /// Returns whether one was displaced (its connection slot is given back once it has
    /// been answered).
    pub fn displace_oldest_awaiting(&self) -> bool {
        self.lock_awaiting().displace_oldest()
    }

    /// Connections awaiting their credentials now (for tests of the bound).
    pub fn awaiting_now(&self) -> usize {
        self.lock_awaiting().by_age.len()
    }

    /// Each critical section leaves the queue consistent, so a poisoned lock is used as is.
    fn lock_awaiting(&self) -> MutexGuard<'_, Waiting> {
        self.awaiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits one new connection of the caller `exe`, or says which limit refuses it. A
    /// refused connection takes nothing from the caller's allowance.
    pub fn admit(self: &Arc<Self>, exe: &str, now: Instant) -> Result<CallerSlot, Refused> {
        let mut table = self.lock();
        if !table.contains_key(exe) && table.len() >= self.capacity {
            self.make_room(&mut table, now);
        }
        let entry = table.entry(exe.to_string()).or_insert_with(|| Entry {
            active: 0,
            tokens: f64::from(self.per_sec),
            refilled: now,
        });
        entry.refill(now, self.per_sec);
        if entry.active >= self.max_active {
            return Err(Refused::Connections(self.max_active));
        }
        if entry.tokens < 1.0 {
            return Err(Refused::Rate(self.per_sec));
        }
        entry.tokens -= 1.0;
        entry.active += 1;
        Ok(CallerSlot {
            limits: Arc::clone(self),
            exe: exe.to_string(),
        })
    }

    /// Entries in the table (for tests of its bound).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops callers without connections: blank ones first, then any. Callers holding a slot
    /// are at most `--max-connections`, half the capacity, so this always makes room.
    fn make_room(&self, table: &mut HashMap<String, Entry>, now: Instant) {
        table.retain(|_, entry| !entry.is_blank(now, self.per_sec));
        if table.len() >= self.capacity {
            table.retain(|_, entry| entry.active > 0);
        }
    }

    fn release(&self, exe: &str) {
        let mut table = self.lock();
        if let Some(entry) = table.get_mut(exe) {
            entry.active = entry.active.saturating_sub(1);
        }
    }

    /// Each critical section leaves the table consistent, so a poisoned lock is used as is.
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One admitted connection of a caller; the slot is given back on drop.
#[derive(Debug)]
pub struct CallerSlot {
    limits: Arc<CallerLimits>,
    exe: String,
}

impl Drop for CallerSlot {
    fn drop(&mut self) {
        self.limits.release(&self.exe);
    }
}

impl Waiting {
    fn displace_oldest(&mut self) -> bool {
        match self.by_age.pop_first() {
            Some((_, oldest)) => {
                oldest.notify_one();
                true
            }
            None => false,
        }
    }
}

/// One connection counted among those awaiting their credentials, until dropped (its head
/// arrived, or it ended).
#[derive(Debug)]
pub struct Awaiting {
    limits: Arc<CallerLimits>,
    id: u64,
    signal: Arc<Notify>,
}

impl Awaiting {
    /// Resolves once the connection was displaced by a newer one (see
    /// [`CallerLimits::awaiting`]); never, while it is not.
    pub async fn displaced(&self) {
        self.signal.notified().await;
    }
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        self.limits.lock_awaiting().by_age.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_client_awaiting_its_credentials_is_counted_by_its_address() {
        let key = |s: &str| awaiting_credentials(s.parse().unwrap());
        assert_eq!(key("192.0.2.7"), "(awaiting credentials) 192.0.2.7");
        assert_eq!(key("::ffff:192.0.2.7"), key("192.0.2.7"));
        assert_eq!(
            key("2001:db8:1:2:3:4:5:6"),
            "(awaiting credentials) 2001:db8:1:2::/64"
        );
        assert_eq!(key("2001:db8:1:2::9"), key("2001:db8:1:2:ffff::1"));
        assert_ne!(key("2001:db8:1:3::1"), key("2001:db8:1:2::1"));
    }

    #[test]
    fn concurrent_connections_are_limited_per_caller() {
        let limits = Arc::new(CallerLimits::new(2, 100, 10));
        let now = Instant::now();
        let a1 = limits.admit("/usr/bin/a", now).unwrap();
        let _a2 = limits.admit("/usr/bin/a", now).unwrap();
        assert_eq!(
            limits.admit("/usr/bin/a", now).unwrap_err(),
            Refused::Connections(2)
        );
        // Another program is not affected.
        let _b = limits.admit("/usr/bin/b", now).unwrap();
        drop(a1);
        let _a3 = limits.admit("/usr/bin/a", now).unwrap();
    }

    #[test]
    fn new_connections_per_second_are_a_token_bucket() {
        let limits = Arc::new(CallerLimits::new(100, 3, 10));
        let now = Instant::now();
        for _ in 0..3 {
            drop(limits.admit("/usr/bin/a", now).unwrap());
        }
        assert_eq!(
            limits.admit("/usr/bin/a", now).unwrap_err(),
            Refused::Rate(3)
        );
        // A refused attempt takes nothing; a third of a second refills one.
        let later = now + Duration::from_millis(340);
        drop(limits.admit("/usr/bin/a", later).unwrap());
        assert_eq!(
            limits.admit("/usr/bin/a", later).unwrap_err(),
            Refused::Rate(3)
        );
        let _b = limits.admit("/usr/bin/b", later).unwrap();
    }

    #[test]
    fn the_table_is_bounded_and_keeps_callers_with_connections() {
        let limits = Arc::new(CallerLimits::new(5, 100, 32));
        let now = Instant::now();
        let held: Vec<_> = (0..32)
            .map(|i| limits.admit(&format!("/held/{i}"), now).unwrap())
            .collect();
        // Thousands of callers that come and go never grow the table past its capacity.
        for i in 0..5000 {
            drop(limits.admit(&format!("/gone/{i}"), now).unwrap());
            assert!(limits.len() <= 64, "{} entries", limits.len());
        }
        // The callers holding slots kept their entries, and their count.
        for i in 0..32 {
            let exe = format!("/held/{i}");
            for _ in 0..4 {
                std::mem::forget(limits.admit(&exe, now + Duration::from_secs(10)).unwrap());
            }
            assert_eq!(
                limits
                    .admit(&exe, now + Duration::from_secs(20))
                    .unwrap_err(),
                Refused::Connections(5)
            );
        }
        drop(held);
    }

    #[tokio::test]
    async fn connections_awaiting_credentials_are_bounded_together_oldest_displaced_first() {
        let limits = Arc::new(CallerLimits::new(100, 100, 8));
        let waiting: Vec<Awaiting> = (0..4).map(|_| limits.awaiting()).collect();
        assert_eq!(limits.awaiting_now(), 4);
        // A fifth (from any address) displaces the oldest, and only it.
        let newest = limits.awaiting();
        assert_eq!(limits.awaiting_now(), 4);
        let wait = Duration::from_millis(50);
        assert!(
            tokio::time::timeout(wait, waiting[0].displaced())
                .await
                .is_ok()
        );
        for still in waiting.iter().skip(1).chain([&newest]) {
            assert!(tokio::time::timeout(wait, still.displaced()).await.is_err());
        }
        // One whose head arrived leaves room without displacing anyone.
        drop(waiting);
        assert_eq!(limits.awaiting_now(), 1);
        // A client past every connection slot displaces the oldest too.
        assert!(limits.displace_oldest_awaiting());
        assert!(tokio::time::timeout(wait, newest.displaced()).await.is_ok());
        assert!(!limits.displace_oldest_awaiting());
    }

    #[test]
    fn refusals_are_429_with_a_code() {
        let r = Refused::Connections(8).refusal("/usr/bin/python3");
        assert_eq!(
            (r.status, r.error.as_str()),
            (429, "caller_connection_limit")
        );
        let r = Refused::Rate(8).refusal("/usr/bin/python3");
        assert_eq!((r.status, r.error.as_str()), (429, "caller_rate_limit"));
    }
}
