//! The registry of live admitted connections of a running proxy, swept when a reload swaps
//! the policy.
//!
//! Every connection the connection phase admits is registered here for as long as it lasts
//! (`connection::hold`, a [`Registration`] dropped with the connection): each tunnel
//! (CONNECT, raw or inspected, whatever it carries; a transparently redirected one too), and
//! each absolute-form request while it runs (its response, or its WebSocket after the
//! upgrade). An entry holds the raising side of the connection's stop signal and a [`Judge`]:
//! the connection phase's own L4 rule bound to the caller as identified and the destination
//! as admitted. The registry is bounded by `--max-connections` (one entry per client
//! connection).
//!
//! [`Live::sweep`] asks every judge about the policy and credential bindings now in force and
//! stops each connection they no longer allow; one still allowed is not touched.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::credentials::Bindings;
use crate::pipeline::client::stop::{Raise, StopReason};
use crate::policy::Policy;
use crate::tenants::Claim;

/// The configuration in force now for a caller: the local one (`None`), or a gateway
/// tenant's.
pub trait InForce {
    fn policy(&self, tenant: Option<&Claim>) -> Arc<Policy>;
    fn credentials(&self, tenant: Option<&Claim>) -> Arc<Bindings>;
}

/// Why the configuration in force no longer allows a connection; `None` while it does.
pub type Judge = Box<dyn Fn(&dyn InForce) -> Option<StopReason> + Send + Sync>;

/// One live connection.
struct Held {
    judge: Judge,
    raise: Raise,
    /// Tells a connection's successive registrations apart (a forwarded connection registers
    /// each request).
    generation: u64,
}

/// The registry: connection id → how to re-judge it and how to stop it.
#[derive(Default)]
pub struct Live {
    conns: Mutex<HashMap<u64, Held>>,
    next_generation: AtomicU64,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("connections", &self.lock().len())
            .finish()
    }
}

/// A connection's place in the registry; it leaves the registry when this is dropped.
#[derive(Debug)]
#[must_use = "the connection is deregistered when the registration is dropped"]
pub struct Registration<'a> {
    live: &'a Live,
    id: u64,
    generation: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut conns = self.live.lock();
        if conns.get(&self.id).map(|h| h.generation) == Some(self.generation) {
            conns.remove(&self.id);
        }
    }
}

impl Live {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Held>> {
        // The map holds no invariant a panicking holder could break half-way.
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers connection `id` until the returned registration drops (a later
    /// registration of the same id replaces this one).
    pub fn insert(&self, id: u64, judge: Judge, raise: Raise) -> Registration<'_> {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let held = Held {
            judge,
            raise,
            generation,
        };
        self.lock().insert(id, held);
        Registration {
            live: self,
            id,
            generation,
        }
    }

    /// Stops every registered connection with `reason`; returns how many this call stopped.
    pub fn stop_all(&self, reason: &StopReason) -> usize {
        let conns = self.lock();
        conns
            .values()
            .filter(|held| held.raise.raise(reason.clone()))
            .count()
    }

    /// Stops every registered connection the configuration in force no longer allows (each
    /// with its reason); returns how many this sweep stopped (not those stopped before, for
    /// another reason).
    pub fn sweep(&self, now: &dyn InForce) -> usize {
        // A judgement is a policy lookup (no I/O). The lock is held for the sweep, so that a
        // registration made meanwhile waits and then sees the new policy (see
        // `connection::hold`).
        let conns = self.lock();
        conns
            .values()
            .filter(|held| (held.judge)(now).is_some_and(|reason| held.raise.raise(reason)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::client::stop::signal;

    /// The default policy for everyone.
    struct Default;

    impl InForce for Default {
        fn policy(&self, _: Option<&Claim>) -> Arc<Policy> {
            Arc::new(
                crate::policy::load_default()
                    .expect("the default policy")
                    .policy,
            )
        }

        fn credentials(&self, _: Option<&Claim>) -> Arc<Bindings> {
            Arc::default()
        }
    }

    fn revoking(why: &'static str) -> Judge {
        Box::new(move |_| {
            Some(StopReason::PolicyRevoked {
                entry: "api".into(),
                dst: crate::pipeline::authority::Authority::new("example.com", 443),
                why: why.into(),
            })
        })
    }

    #[tokio::test]
    async fn a_sweep_stops_what_is_no_longer_allowed_and_nothing_else() {
        let live = Live::default();
        let (raise_a, stop_a) = signal();
        let (raise_b, stop_b) = signal();
        let _a = live.insert(1, revoking("gone"), raise_a);
        let _b = live.insert(2, Box::new(|_| None), raise_b);
        assert_eq!(live.sweep(&Default), 1);
        assert_eq!(
            stop_a.wait().await.to_string(),
            "policy revoked by reload (gone)"
        );
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(50), stop_b.wait()).await;
        assert!(waited.is_err(), "an allowed connection was stopped");
        // A second sweep stops nothing new: the first reason stands.
        assert_eq!(live.sweep(&Default), 0);
    }

    #[test]
    fn a_dropped_registration_leaves_and_a_replaced_one_stays() {
        let live = Live::default();
        let (raise, _stop) = signal();
        let first = live.insert(7, revoking("first"), raise.clone());
        let second = live.insert(7, revoking("second"), raise);
        drop(first);
        assert_eq!(live.lock().len(), 1, "the newer registration was removed");
        drop(second);
        assert_eq!(live.lock().len(), 0);
    }
}
