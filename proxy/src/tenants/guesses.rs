//! Failed proxy logins on a gateway, counted per client address: once an address has sent
//! [`BURST`] wrong credentials in a row (a password guesser), its next attempts are refused
//! without being checked (`429 too_many_failed_logins`, with `Retry-After`), and it earns one
//! more attempt every [`REFILL`]. Without this, the only bound on guessing was the address's
//! connection rate (hundreds a second).
//!
//! An IPv6 client counts under its /64 (one host commonly holds all of it), an IPv4-mapped
//! one under its IPv4 address. A correct login does not spend the budget. The table survives
//! reloads (it is not the tenants table's) and is bounded: past [`MAX_ADDRESSES`], the
//! addresses that have earned their whole budget back are forgotten, then, if still full, the
//! attempt is counted nowhere and refused alike (a flood of addresses cannot reset the
//! guessers among them).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Wrong credentials an address may send before it is throttled.
pub const BURST: u32 = 20;
/// The time in which an address earns one attempt back.
pub const REFILL: Duration = Duration::from_secs(3);
/// Addresses remembered at most.
pub const MAX_ADDRESSES: usize = 65_536;

/// The failed logins of every client address (see the module).
#[derive(Debug, Default)]
pub struct FailedLogins {
    table: Mutex<HashMap<IpAddr, Spent>>,
}

/// How much of its budget an address has spent, as of `at`.
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

/// The key an address counts under.
fn key(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from_bits(a.to_bits() & (u128::MAX << 64))),
        v4 => v4,
    }
}

impl FailedLogins {
    /// `Some(wait)` when `peer` may not try credentials now: its budget is spent, and it
    /// earns its next attempt after `wait`.
    pub fn throttled(&self, peer: IpAddr, now: Instant) -> Option<Duration> {
        let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(spent) = table.get(&key(peer)) else {
            // A table full of addresses still spending is no place for a new one: refused
            // as if spent, so that a flood of addresses cannot push the guessers out.
            return (table.len() >= MAX_ADDRESSES).then_some(REFILL);
        };
        let left = spent.at(now) - f64::from(BURST - 1);
        (left > 0.0).then(|| REFILL.mul_f64(left))
    }

    /// Counts a wrong login from `peer`.
    pub fn failed(&self, peer: IpAddr, now: Instant) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let key = key(peer);
        if !table.contains_key(&key) && table.len() >= MAX_ADDRESSES {
            table.retain(|_, spent| spent.at(now) > 0.0);
            if table.len() >= MAX_ADDRESSES {
                return;
            }
        }
        let failures = table.get(&key).map_or(0.0, |s| s.at(now)) + 1.0;
        table.insert(key, Spent { failures, at: now });
    }

    /// Addresses remembered now.
    pub fn remembered(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_is_throttled_after_its_burst_and_earns_attempts_back() {
        let logins = FailedLogins::default();
        let t0 = Instant::now();
        let guesser = ip("192.0.2.7");
        for _ in 0..BURST - 1 {
            logins.failed(guesser, t0);
            assert_eq!(logins.throttled(guesser, t0), None);
        }
        logins.failed(guesser, t0);
        let wait = logins.throttled(guesser, t0).expect("throttled");
        assert!(wait <= REFILL && wait > REFILL / 2, "{wait:?}");
        // Others are not.
        assert_eq!(logins.throttled(ip("192.0.2.8"), t0), None);
        // One attempt back after the wait, and only one.
        let later = t0 + wait;
        assert_eq!(logins.throttled(guesser, later), None);
        logins.failed(guesser, later);
        assert!(logins.throttled(guesser, later).is_some());
        // The whole budget back in time.
        let much_later = later + REFILL * BURST;
        assert_eq!(logins.throttled(guesser, much_later), None);
    }

    #[test]
    fn an_ipv6_host_counts_under_its_64_and_a_mapped_ipv4_under_its_address() {
        let logins = FailedLogins::default();
        let t0 = Instant::now();
        for i in 0..BURST {
            logins.failed(ip(&format!("2001:db8:1:2::{:x}", i + 1)), t0);
        }
        assert!(logins.throttled(ip("2001:db8:1:2:ffff::1"), t0).is_some());
        assert_eq!(logins.throttled(ip("2001:db8:1:3::1"), t0), None);
        for _ in 0..BURST {
            logins.failed(ip("::ffff:192.0.2.9"), t0);
        }
        assert!(logins.throttled(ip("192.0.2.9"), t0).is_some());
    }

    #[test]
    fn a_full_table_forgets_the_recovered_and_never_the_guessers() {
        let logins = FailedLogins::default();
        let t0 = Instant::now();
        let guesser = ip("198.51.100.1");
        for _ in 0..BURST + 2 {
            logins.failed(guesser, t0);
        }
        let mut n: u32 = 0;
        while logins.remembered() < MAX_ADDRESSES {
            logins.failed(IpAddr::V4((0x0a00_0000 + n).into()), t0);
            n += 1;
        }
        // Full of addresses still spending: a new one is refused as if spent, and counted
        // nowhere; the guesser stays throttled.
        let newcomer = ip("203.0.113.5");
        assert!(logins.throttled(newcomer, t0).is_some());
        logins.failed(newcomer, t0);
        assert_eq!(logins.remembered(), MAX_ADDRESSES);
        assert!(logins.throttled(guesser, t0).is_some());
        // Once the one-off failures are earned back, they make room; the guesser is still
        // remembered (its budget is not whole again yet).
        let later = t0 + REFILL * 2;
        logins.failed(newcomer, later);
        assert!(logins.remembered() < 10, "{}", logins.remembered());
        assert!(logins.throttled(guesser, later).is_some());
        assert_eq!(logins.throttled(newcomer, later), None);
    }
}
