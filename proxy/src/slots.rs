//! Connection slots a flood cannot take: for the small side listeners (the metrics endpoint,
//! the policy DNS over TCP) that a sandboxed program may reach. The accept loop never waits
//! for a slot; instead, when the listener is full (or one client address holds its share),
//! a new connection closes an older one that is idle (waiting for its next request), the
//! oldest of the address holding the most. A client that floods the listener closes its own
//! connections first, and a request being answered is closed only when every connection is
//! busy (then the oldest of the address holding the most). The policy DNS also holds its UDP
//! questions in flight here, each busy from the start.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// The live connections of one listener.
#[derive(Debug)]
pub struct Slots {
    cap: usize,
    per_address: usize,
    table: Mutex<Table>,
}

/// One admitted connection; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
}

/// Resolves when another connection needed this one's slot: the connection must close.
pub type Closed = oneshot::Receiver<()>;

#[derive(Debug)]
struct Entry {
    ip: IpAddr,
    busy: bool,
    /// Dropping it wakes the connection's [`Closed`].
    _closer: oneshot::Sender<()>,
}

/// By arrival order: the first entry of an address is its oldest.
#[derive(Debug, Default)]
struct Table {
    next: u64,
    live: BTreeMap<u64, Entry>,
}

impl Slots {
    /// At most `cap` connections, at most `per_address` of them from one client address.
    pub fn new(cap: usize, per_address: usize) -> Arc<Slots> {
        Arc::new(Slots {
            cap: cap.max(1),
            per_address: per_address.clamp(1, cap.max(1)),
            table: Mutex::new(Table::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a connection from `ip`, first closing another when the listener is full or
    /// `ip` holds its share.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> (Slot, Closed) {
        let (closer, closed) = oneshot::channel();
        let mut t = self.lock();
        let own = t.live.values().filter(|e| e.ip == ip).count();
        let victim = if own >= self.per_address {
            t.victim(Some(ip))
        } else if t.live.len() >= self.cap {
            t.victim(None)
        } else {
            None
        };
        if let Some(v) = victim {
            t.live.remove(&v);
        }
        let id = t.next;
        t.next += 1;
        t.live.insert(
            id,
            Entry {
                ip,
                busy: false,
                _closer: closer,
            },
        );
        drop(t);
        (
            Slot {
                slots: Arc::clone(self),
                id,
            },
            closed,
        )
    }

    /// How many connections are live.
    pub fn len(&self) -> usize {
        self.lock().live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Table {
    /// The connection to close: among `only`'s connections (or, for `None`, those of the
    /// address with the most idle ones, or when none is idle, the address with the most), the
    /// oldest idle one; when none is idle, the oldest.
    fn victim(&self, only: Option<IpAddr>) -> Option<u64> {
        let ours = |e: &Entry, ip: IpAddr| e.ip == ip;
        let address = match only {
            Some(ip) => ip,
            None => {
                let most = |busy: bool| {
                    let mut count: HashMap<IpAddr, usize> = HashMap::new();
                    for e in self.live.values().filter(|e| busy || !e.busy) {
                        *count.entry(e.ip).or_default() += 1;
                    }
                    count.into_iter().max_by_key(|(_, n)| *n).map(|(ip, _)| ip)
                };
                most(false).or_else(|| most(true))?
            }
        };
        self.live
            .iter()
            .find(|(_, e)| ours(e, address) && !e.busy)
            .or_else(|| self.live.iter().find(|(_, e)| ours(e, address)))
            .map(|(id, _)| *id)
    }
}

impl Slot {
    /// Marks the connection busy (a request is being answered) or idle (waiting for one).
    pub fn busy(&self, busy: bool) {
        if let Some(e) = self.slots.lock().live.get_mut(&self.id) {
            e.busy = busy;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.lock().live.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_full_listener_closes_the_oldest_idle_connection_of_the_busiest_address() {
        let slots = Slots::new(4, 4);
        let (scrape, mut scrape_closed) = slots.admit(ip("10.0.0.2"));
        let mut flood: Vec<(Slot, Closed)> = (0..3).map(|_| slots.admit(ip("10.0.0.1"))).collect();
        // The flood's oldest is busy: its next oldest idle one goes, the older scrape stays.
        flood[0].0.busy(true);
        let _more = slots.admit(ip("10.0.0.1"));
        assert_eq!(slots.len(), 4);
        assert!(flood[1].1.try_recv().is_err(), "closed");
        assert_eq!(
            flood[0].1.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
        assert_eq!(
            scrape_closed.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
        drop(scrape);
        assert_eq!(slots.len(), 3);
    }

    #[test]
    fn an_address_past_its_share_closes_its_own_connections() {
        let slots = Slots::new(10, 2);
        let (_other, mut other_closed) = slots.admit(ip("10.0.0.2"));
        let (_a, mut a_closed) = slots.admit(ip("10.0.0.1"));
        let _b = slots.admit(ip("10.0.0.1"));
        let _c = slots.admit(ip("10.0.0.1"));
        assert!(
            a_closed.try_recv().is_err(),
            "the address's oldest was closed"
        );
        assert_eq!(
            other_closed.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
        assert_eq!(slots.len(), 3);
    }

    #[test]
    fn when_every_slot_is_busy_the_address_holding_the_most_loses_its_oldest() {
        let slots = Slots::new(4, 3);
        let (other, mut other_closed) = slots.admit(ip("10.0.0.2"));
        other.busy(true);
        let flood: Vec<(Slot, Closed)> = (0..3)
            .map(|_| {
                let (slot, closed) = slots.admit(ip("10.0.0.1"));
                slot.busy(true);
                (slot, closed)
            })
            .collect();
        let (_third, _) = slots.admit(ip("10.0.0.3"));
        assert_eq!(slots.len(), 4);
        assert_eq!(
            other_closed.try_recv(),
            Err(oneshot::error::TryRecvError::Empty),
            "the older question of a quiet address stays"
        );
        let mut flood = flood;
        assert!(flood[0].1.try_recv().is_err(), "the flood's oldest went");
        assert_eq!(
            flood[1].1.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
    }
}
