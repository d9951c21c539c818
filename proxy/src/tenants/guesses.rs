//! Failed proxy logins on a gateway, counted per client address and username: once an
//! address has sent [`BURST`] wrong passwords for one username (a password guesser), its next
//! attempts at that username are refused without being checked (`429
//! too_many_failed_logins`, with `Retry-After`), and it earns one more attempt every
//! [`REFILL`]. Without this, the only bound on guessing was the address's connection rate
//! (hundreds a second).
//!
//! - An IPv6 client counts under its /64 (one host commonly holds all of it), an IPv4-mapped
//!   one under its IPv4 address.
//! - The username is the one presented when it is a tenant's, else one shared entry for
//!   every other (unknown users, malformed credentials): a guesser at one username does not
//!   lock out another tenant behind the same address, and made-up usernames do not multiply
//!   the entries.
//! - An attempt is counted when it starts and refunded when it succeeds, under one lock, so
//!   that concurrent attempts cannot all pass the check before any is counted.
//! - The table survives reloads (it is not the tenants table's) and is bounded: a new entry
//!   in a full table first drops the entries that have earned their whole budget back, then
//!   the one that has spent least; an address never seen is never refused for the table
//!   being full.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Wrong passwords an address may send for one username before it is throttled.
pub const BURST: u32 = 20;
/// The time in which an address earns one attempt back.
pub const REFILL: Duration = Duration::from_secs(3);
/// Entries (address and username) remembered at most.
pub const MAX_ENTRIES: usize = 65_536;

/// The failed logins of every client address (see the module).
#[derive(Debug, Default)]
pub struct FailedLogins {
    table: Mutex<HashMap<Key, Spent>>,
}

/// An address (IPv4, or an IPv6 /64) and the username tried from it (empty: not a tenant's).
type Key = (IpAddr, Box<str>);

/// How much of its budget an entry has spent, as of `at`.
#[derive(Clone, Copy, Debug)]
struct Spent {
    failures: f64,
    at: Instant,
}

impl Spent {
    /// What is still spent at `now` (one failure earned back per [`REFILL`]).
    fn at(self, now: Instant) -> f64 {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() / REFILL.as_secs_f64();
        (self.failures - earned).max(0.0)
    }
}

/// The address part of a key.
fn prefix(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from_bits(a.to_bits() & (u128::MAX << 64))),
        v4 => v4,
    }
}

/// An attempt allowed and counted ([`FailedLogins::attempt`]): [`Attempt::succeeded`] refunds
/// it; dropped otherwise, it stays counted as a failure.
#[derive(Debug)]
#[must_use]
pub struct Attempt<'a> {
    logins: &'a FailedLogins,
    key: Key,
}

impl Attempt<'_> {
    /// The credentials were right: the attempt is not a failure.
    pub fn succeeded(self) {
        let mut table = self.logins.lock();
        if let Some(spent) = table.get_mut(&self.key) {
            let now = Instant::now();
            spent.failures = (spent.at(now) - 1.0).max(0.0);
            spent.at = now;
        }
    }
}

impl FailedLogins {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Spent>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts an attempt by `peer` at `user` (empty when not a tenant's username): counted as
    /// a failure until [`Attempt::succeeded`], or `Err(wait)` when the budget is spent and the
    /// next attempt is allowed after `wait` (not counted).
    pub fn attempt(&self, peer: IpAddr, user: &str, now: Instant) -> Result<Attempt<'_>, Duration> {
        let key: Key = (prefix(peer), user.into());
        let mut table = self.lock();
        let spent = table.get(&key).map_or(0.0, |s| s.at(now));
        let over = spent - f64::from(BURST - 1);
        if over > 0.0 {
            return Err(REFILL.mul_f64(over));
        }
        if !table.contains_key(&key) && table.len() >= MAX_ENTRIES {
            make_room(&mut table, now);
        }
        table.insert(
            key.clone(),
            Spent {
                failures: spent + 1.0,
                at: now,
            },
        );
        Ok(Attempt { logins: self, key })
    }

    /// Entries remembered now.
    pub fn remembered(&self) -> usize {
        self.lock().len()
    }
}

/// Room for one more entry: the entries that have earned their budget back go; if none
/// has, the one that has spent least.
fn make_room(table: &mut HashMap<Key, Spent>, now: Instant) {
    table.retain(|_, spent| spent.at(now) > 0.0);
    if table.len() < MAX_ENTRIES {
        return;
    }
    let least = table
        .iter()
        .min_by(|a, b| a.1.at(now).total_cmp(&b.1.at(now)))
        .map(|(k, _)| k.clone());
    if let Some(k) = least {
        table.remove(&k);
    }
}

/// The `Retry-After` seconds for `wait`: rounded up (a client that waits that long is
/// checked again), at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn fail(logins: &FailedLogins, peer: &str, user: &str, now: Instant) {
        drop(logins.attempt(ip(peer), user, now).expect("allowed"));
    }

    #[test]
    fn an_address_is_throttled_after_its_burst_and_earns_attempts_back() {
        let logins = FailedLogins::default();
        let t0 = Instant::now();
        for _ in 0..BURST {
            fail(&logins, "192.0.2.7", "gamma", t0);
        }
        let wait = logins
            .attempt(ip("192.0.2.7"), "gamma", t0)
            .expect_err("throttled");
        assert!(wait <= REFILL && wait > REFILL / 2, "{wait:?}");
        // Another address, and another username from the same address, are not.
        assert!(logins.attempt(ip("192.0.2.8"), "gamma", t0).is_ok());
        assert!(logins.attempt(ip("192.0.2.7"), "delta", t0).is_ok());
        // One attempt back after the wait, and only one.
        let later = t0 + wait;
        fail(&logins, "192.0.2.7", "gamma", later);
        assert!(logins.attempt(ip("192.0.2.7"), "gamma", later).is_err());
        // The whole budget back in time.
        let much_later = later + REFILL * BURST;
        assert!(logins.attempt(ip("192.0.2.7"), "gamma", much_later).is_ok());
    }

    #[test]
    fn a_right_password_spends_nothing() {
        let logins = FailedLogins::default();
        let t0 = Instant::now();
        for _ in 0..BURST * 3 {
            logins
                .attempt(ip("192.0.2.7"), "gamma", t0)
                .expect("allowed")
                .succeeded();
        }
        for _ in 0..BURST {
            fail(&logins, "192.0.2.7", "gamma", t0);
        }
        assert!(logins.attempt(ip("192.0.2.7"), "gamma", t0).is_err());
    }

    #[test]
    fn an_ipv6_host_counts_under_its_64_and_a_mapped_ipv4_under_its_address() {
        let logins = FailedLogins::default();
        let t0 = Instant::now();
        for i in 0..BURST {
            fail(&logins, &format!("2001:db8:1:2::{:x}", i + 1), "", t0);
        }
        assert!(logins.attempt(ip("2001:db8:1:2:ffff::1"), "", t0).is_err());
        assert!(logins.attempt(ip("2001:db8:1:3::1"), "", t0).is_ok());
        for _ in 0..BURST {
            fail(&logins, "::ffff:192.0.2.9", "", t0);
        }
        assert!(logins.attempt(ip("192.0.2.9"), "", t0).is_err());
    }

    #[test]
    fn a_full_table_refuses_no_newcomer_and_keeps_the_guessers() {
        let logins = FailedLogins::default();
        let t0 = Instant::now();
        for _ in 0..BURST {
            fail(&logins, "198.51.100.1", "gamma", t0);
        }
        let mut n: u32 = 0;
        while logins.remembered() < MAX_ENTRIES {
            drop(logins.attempt(IpAddr::V4((0x0a00_0000 + n).into()), "", t0));
            n += 1;
        }
        // Full of entries that all still count: a newcomer is checked (not refused for the
        // table being full), taking the place of one that spent least; the guesser stays.
        assert!(logins.attempt(ip("203.0.113.5"), "gamma", t0).is_ok());
        assert_eq!(logins.remembered(), MAX_ENTRIES);
        assert!(logins.attempt(ip("198.51.100.1"), "gamma", t0).is_err());
        // Later, the one-off failures are forgotten at the next newcomer; the guesser is
        // remembered with what it has still spent (two attempts earned back, no more).
        let later = t0 + REFILL * 2;
        assert!(logins.attempt(ip("203.0.113.6"), "gamma", later).is_ok());
        assert_eq!(logins.remembered(), 2);
        fail(&logins, "198.51.100.1", "gamma", later);
        fail(&logins, "198.51.100.1", "gamma", later);
        assert!(logins.attempt(ip("198.51.100.1"), "gamma", later).is_err());
    }

    #[test]
    fn concurrent_attempts_are_counted_before_any_is_checked() {
        let logins = std::sync::Arc::new(FailedLogins::default());
        let t0 = Instant::now();
        let allowed = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..BURST {
                        if let Ok(a) = logins.attempt(ip("192.0.2.7"), "gamma", t0) {
                            drop(a);
                            allowed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(allowed.into_inner(), BURST);
    }

    #[test]
    fn retry_after_rounds_up() {
        assert_eq!(retry_after_secs(Duration::from_millis(2500)), 3);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(10)), 1);
    }
}
