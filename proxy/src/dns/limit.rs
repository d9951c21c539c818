//! The policy DNS's per-client rate limit: a token bucket per source address (`rate`
//! questions a second, bursts up to `rate`). A client over it gets REFUSED rather than
//! silence (so its resolver gives up at once instead of retrying), each refusal is counted,
//! and only the first refusal of a burst is audited: a flood cannot flood the audit log. A
//! burst ends once the client's bucket has refilled (it asked nothing over the rate for a
//! second).
//! The table of buckets is bounded; when it is full of active clients, new addresses share
//! one bucket.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// Client addresses tracked at once.
pub const MAX_CLIENTS: usize = 4096;

/// The default `--max-dns-queries-per-client-per-sec`.
pub const DEFAULT_RATE: u32 = 100;

/// What to do with one question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Answer,
    /// Over the limit, and the first such question since the client was last under it:
    /// refuse and audit.
    RefuseFirst,
    /// Over the limit again: refuse and count, without an audit event.
    Refuse,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    /// A question was refused since the bucket was last full (this burst is audited).
    limited: bool,
}

/// Per-source token buckets.
#[derive(Debug)]
pub struct RateLimit {
    rate: f64,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

/// The address new clients share once the table is full.
const OVERFLOW: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

impl RateLimit {
    /// `rate` questions a second per client address, bursts up to `rate` (at least 1).
    pub fn new(rate: u32) -> RateLimit {
        RateLimit {
            rate: f64::from(rate.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn rate(&self) -> u32 {
        // Built from a u32.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let r = self.rate as u32;
        r
    }

    /// Takes one question from `ip`'s bucket at `now`.
    pub fn check(&self, ip: IpAddr, now: Instant) -> Verdict {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let key = if buckets.contains_key(&ip) || buckets.len() < MAX_CLIENTS {
            ip
        } else {
            // Forget clients whose bucket has refilled (quiet for a second or more).
            let rate = self.rate;
            buckets.retain(|_, b| {
                b.limited || b.tokens + now.duration_since(b.at).as_secs_f64() * rate < rate
            });
            if buckets.len() < MAX_CLIENTS {
                ip
            } else {
                OVERFLOW
            }
        };
        let rate = self.rate;
        let b = buckets.entry(key).or_insert(Bucket {
            tokens: rate,
            at: now,
            limited: false,
        });
        let refill = now.saturating_duration_since(b.at).as_secs_f64() * rate;
        b.tokens = (b.tokens + refill).min(rate);
        b.at = now;
        // A burst ends when the client has slowed down enough for its bucket to refill.
        if b.tokens >= rate {
            b.limited = false;
        }
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Verdict::Answer;
        }
        if b.limited {
            Verdict::Refuse
        } else {
            b.limited = true;
            Verdict::RefuseFirst
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_past_the_rate_is_refused_and_audited_once() {
        let limit = RateLimit::new(10);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..10 {
            assert_eq!(limit.check(a, t0), Verdict::Answer);
        }
        assert_eq!(limit.check(a, t0), Verdict::RefuseFirst);
        for _ in 0..100 {
            assert_eq!(limit.check(a, t0), Verdict::Refuse);
        }
        // Another client is not affected.
        assert_eq!(limit.check(b, t0), Verdict::Answer);
        // A tenth of a second refills one question: still the same burst, not audited again.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(limit.check(a, t1), Verdict::Answer);
        assert_eq!(limit.check(a, t1), Verdict::Refuse);
        // A quiet second refills the bucket: the next burst is audited again.
        let t2 = t1 + Duration::from_secs(1);
        for _ in 0..10 {
            assert_eq!(limit.check(a, t2), Verdict::Answer);
        }
        assert_eq!(limit.check(a, t2), Verdict::RefuseFirst);
    }

    #[test]
    fn the_table_stays_bounded() {
        let limit = RateLimit::new(1);
        let t0 = Instant::now();
        for i in 0..(MAX_CLIENTS as u32 + 10) {
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            let _ = limit.check(ip, t0);
        }
        let n = limit.buckets.lock().unwrap().len();
        assert!(n <= MAX_CLIENTS + 1, "{n}");
    }
}
