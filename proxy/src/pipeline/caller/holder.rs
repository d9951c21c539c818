//! Who holds an admitted connection's client socket, checked again while the connection
//! lasts.
//!
//! A socket can move between processes (`SCM_RIGHTS`) after any one look, so a tunnel
//! identified at its start could be handed to another program and used by it for hours. Owns
//! the periodic re-check of a connection's caller (`--caller-recheck-interval`), which raises
//! the connection's stop signal (`stop.rs`) when the holder changed: each long-lived path
//! (the L4 relay, an inspected tunnel, a forwarded connection) ends on that signal and
//! audits the reason. Per-request checks are made where the requests are read
//! (`forward.rs`, `h2.rs`), with `identify::recheck`.
//!
//! The periodic re-checks of all connections run on one thread of their own (`rechecks.rs`).

use std::sync::Arc;

use tokio::task::JoinHandle;

use super::identify::{CallerError, Known};
use crate::pipeline::client::stop::{Raise, StopReason};
use crate::pipeline::state::shared::Shared;

/// The periodic re-check of one connection; stopped when dropped.
#[derive(Debug)]
pub struct Watcher(JoinHandle<()>);

impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts re-checking, every `--caller-recheck-interval`, that `known`'s process still holds
/// the socket, and raises the signal (once) when it does not. The watcher keeps only what the
/// re-check reads (the identity, shared with the connection), not a copy of the caller.
pub fn watch(shared: Arc<Shared>, known: &Known, raise: Raise) -> Option<Watcher> {
    // A gateway tenant has no process to re-check.
    let identity = Arc::clone(known.identity.as_ref()?);
    let interval = shared.limits.caller_recheck_interval;
    Some(Watcher(tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            if let Err(e) = shared.rechecks.run(&shared.identity, &identity).await {
                let e = CallerError::from(e);
                raise.raise(StopReason::CallerChanged(e.to_string()));
                return;
            }
        }
    })))
}
