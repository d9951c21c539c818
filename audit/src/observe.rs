//! Who else sees every audit event: observers installed once per process (the Prometheus
//! counters, the OTLP export), called by the sink for each event it writes. Metrics and
//! exports are derived from the events themselves, at the one point every event passes, so
//! what they count is exactly what the audit log holds: each audited decision once.
//!
//! An observer runs on the emitting task: it must be quick and must never block (count, or
//! hand the event to a bounded queue and drop when full).

use std::sync::{Arc, PoisonError, RwLock};

use super::Event;

/// Sees every event the audit sink writes.
pub trait Observer: Send + Sync {
    fn observe(&self, event: &Event);
}

static OBSERVERS: RwLock<Vec<Arc<dyn Observer>>> = RwLock::new(Vec::new());

/// Adds an observer for the rest of the process's life.
pub fn install(observer: Arc<dyn Observer>) {
    OBSERVERS
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .push(observer);
}

/// Shows `event` to every installed observer (called by the sink, once per event written).
pub(crate) fn notify(event: &Event) {
    let observers = OBSERVERS.read().unwrap_or_else(PoisonError::into_inner);
    for o in observers.iter() {
        o.observe(event);
    }
}
