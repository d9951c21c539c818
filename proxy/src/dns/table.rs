//! Which name each address the policy DNS handed out stands for, for as long as the answer's
//! TTL (plus a grace period: clients keep using an address a little past its TTL).
//!
//! The transparent path and `protocol: tcp` endpoints ask [`HandedOut::names_for`] to tie a
//! raw connection to an address back to the name the client resolved. Bounded: past
//! [`HandedOut::capacity`] names, the entries closest to expiry are dropped first.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long past its TTL a handed-out address still stands for its name.
pub const GRACE: Duration = Duration::from_secs(60);

/// Default bound of (address, name) pairs remembered.
pub const DEFAULT_CAPACITY: usize = 65_536;

#[derive(Clone, Debug)]
struct Lease {
    name: String,
    until: Instant,
    /// When it was handed out (the most recent name comes first).
    at: Instant,
}

/// The table. `Send + Sync`; one lock, held only for map operations.
#[derive(Debug)]
pub struct HandedOut {
    leases: Mutex<HashMap<IpAddr, Vec<Lease>>>,
    capacity: usize,
}

impl Default for HandedOut {
    fn default() -> Self {
        HandedOut::new(DEFAULT_CAPACITY)
    }
}

impl HandedOut {
    pub fn new(capacity: usize) -> HandedOut {
        HandedOut {
            leases: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// The bound of (address, name) pairs.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Remembers that `ips` were handed out for `name` at `now` with `ttl`.
    pub fn record(&self, name: &str, ips: &[IpAddr], ttl: Duration, now: Instant) {
        let until = now + ttl + GRACE;
        let mut map = self.lock();
        for ip in ips {
            let leases = map.entry(ip.to_canonical()).or_default();
            leases.retain(|l| l.name != name && l.until > now);
            leases.push(Lease {
                name: name.to_string(),
                until,
                at: now,
            });
        }
        let len: usize = map.values().map(Vec::len).sum();
        if len > self.capacity {
            evict(&mut map, self.capacity, now);
        }
    }

    /// The names `ip` was handed out for and that have not expired at `now`, most recent
    /// first.
    pub fn names_for(&self, ip: IpAddr, now: Instant) -> Vec<String> {
        let map = self.lock();
        let Some(leases) = map.get(&ip.to_canonical()) else {
            return Vec::new();
        };
        let mut live: Vec<&Lease> = leases.iter().filter(|l| l.until > now).collect();
        live.sort_by_key(|l| std::cmp::Reverse(l.at));
        live.into_iter().map(|l| l.name.clone()).collect()
    }

    /// True when `ip` stands for `name` at `now`.
    pub fn stands_for(&self, ip: IpAddr, name: &str, now: Instant) -> bool {
        self.names_for(ip, now).iter().any(|n| n == name)
    }

    /// (address, name) pairs held, expired ones included until they are evicted.
    pub fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Vec<Lease>>> {
        // A panic while holding the lock leaves a consistent map (every operation is a plain
        // map update), so a poisoned lock is still usable.
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Drops expired leases, then the leases closest to expiry until `capacity` remain.
fn evict(map: &mut HashMap<IpAddr, Vec<Lease>>, capacity: usize, now: Instant) {
    for leases in map.values_mut() {
        leases.retain(|l| l.until > now);
    }
    map.retain(|_, l| !l.is_empty());
    let len: usize = map.values().map(Vec::len).sum();
    let mut excess = len.saturating_sub(capacity);
    let mut all: Vec<(Instant, IpAddr)> = map
        .iter()
        .flat_map(|(ip, ls)| ls.iter().map(move |l| (l.until, *ip)))
        .collect();
    all.sort();
    for (until, ip) in all {
        if excess == 0 {
            break;
        }
        if let Some(ls) = map.get_mut(&ip)
            && let Some(pos) = ls.iter().position(|l| l.until == until)
        {
            ls.remove(pos);
            excess -= 1;
        }
    }
    map.retain(|_, l| !l.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_stands_for_its_names_until_ttl_plus_grace() {
        let t = HandedOut::default();
        let now = Instant::now();
        t.record(
            "a.example.com",
            &[ip("10.0.0.1"), ip("2001:db8::1")],
            Duration::from_secs(30),
            now,
        );
        t.record(
            "b.example.com",
            &[ip("10.0.0.1")],
            Duration::from_secs(30),
            now + Duration::from_secs(1),
        );
        assert_eq!(
            t.names_for(ip("10.0.0.1"), now + Duration::from_secs(2)),
            ["b.example.com", "a.example.com"]
        );
        assert!(t.stands_for(ip("::ffff:10.0.0.1"), "a.example.com", now));
        assert!(t.stands_for(ip("2001:db8::1"), "a.example.com", now));
        assert!(!t.stands_for(ip("10.0.0.2"), "a.example.com", now));
        let later = now + Duration::from_secs(30) + GRACE + Duration::from_secs(1);
        assert!(t.names_for(ip("2001:db8::1"), later).is_empty());
    }

    #[test]
    fn the_table_is_bounded() {
        let t = HandedOut::new(100);
        let now = Instant::now();
        for i in 0..1000u32 {
            let addr = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            t.record(
                &format!("n{i}.example.com"),
                &[addr],
                Duration::from_secs(u64::from(i)),
                now,
            );
        }
        assert!(t.len() <= 100, "{}", t.len());
        // The longest-lived answers are the ones kept.
        assert!(t.stands_for(ip("10.0.3.231"), "n999.example.com", now));
    }
}
