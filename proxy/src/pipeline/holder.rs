//! Who holds an admitted connection's client socket, checked again while the connection
//! lasts.
//!
//! A socket can move between processes (`SCM_RIGHTS`) after any one look, so a tunnel
//! identified at its start could be handed to another program and used by it for hours. Owns
//! the periodic re-check of a connection's caller (`--caller-recheck-interval`) and the signal
//! it raises when the holder changed: each long-lived path (the L4 relay, an inspected tunnel,
//! a forwarded connection) ends on that signal and audits the reason. Per-request checks are
//! made where the requests are read (`forward.rs`, `h2.rs`), with `caller::confirm`.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::caller::{self, Known};
use super::shared::Shared;

/// The receiving side of a connection's "the caller changed" signal.
#[derive(Clone, Debug)]
pub struct Stop {
    rx: watch::Receiver<Option<String>>,
}

/// The raising side, handed to the watcher once the caller is known.
#[derive(Debug)]
pub struct Raise {
    tx: watch::Sender<Option<String>>,
}

/// A connection's signal, not raised yet.
pub fn signal() -> (Raise, Stop) {
    let (tx, rx) = watch::channel(None);
    (Raise { tx }, Stop { rx })
}

impl Stop {
    /// Resolves with the reason once the holder changed; never, if it does not.
    pub async fn wait(&self) -> String {
        let mut rx = self.rx.clone();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                // No watcher (an unidentified connection, or one that ended): nothing to wait for.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The periodic re-check of one connection; stopped when dropped.
#[derive(Debug)]
pub struct Watcher(JoinHandle<()>);

impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts re-checking, every `--caller-recheck-interval`, that `known`'s process still holds
/// the socket, and raises the signal (once) when it does not.
pub fn watch(shared: Arc<Shared>, known: Known, raise: Raise) -> Watcher {
    let interval = shared.limits.caller_recheck_interval;
    Watcher(tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            if let Err(e) = caller::recheck(&shared, &known).await {
                let _ = raise.tx.send(Some(e.to_string()));
                return;
            }
        }
    }))
}
