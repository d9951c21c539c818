//! The stop signal of one client connection: raised once, from outside the connection's
//! own traffic, with a typed reason. Raised by the caller watcher (`holder.rs`) when the
//! caller no longer holds the socket, by the live registry (`live.rs`) when a reloaded
//! policy no longer allows the connection, and at the end of a drain whose time ran out;
//! every long-lived path waits on it.

use std::sync::Arc;

use tokio::sync::watch;

use crate::audit::Engine;
use crate::pipeline::authority::Authority;

/// Why a connection was stopped from outside its own traffic.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StopReason {
    /// The process identified as the caller no longer holds the socket.
    #[error("{0}")]
    CallerChanged(String),
    /// A reloaded policy no longer allows the connection admitted by `entry` to `dst`; `why`
    /// says what it no longer allows (`entry api no longer allows CONNECT host:port by EXE`).
    #[error("policy revoked by reload ({why})")]
    PolicyRevoked {
        entry: String,
        dst: Authority,
        why: String,
    },
    /// sluice is shutting down and the drain's time ran out (`why` says so).
    #[error("{0}")]
    Shutdown(String),
}

impl StopReason {
    /// The engine a close event names for this stop.
    pub fn engine(&self, running: Engine) -> Engine {
        match self {
            StopReason::CallerChanged(_) => Engine::Identity,
            StopReason::PolicyRevoked { .. } | StopReason::Shutdown(_) => running,
        }
    }

    /// The revoked connection's policy entry and destination (`None` for a caller change).
    pub fn revoked(&self) -> Option<(&str, &Authority)> {
        match self {
            StopReason::CallerChanged(_) | StopReason::Shutdown(_) => None,
            StopReason::PolicyRevoked { entry, dst, .. } => Some((entry, dst)),
        }
    }
}

/// The receiving side of a connection's stop signal.
#[derive(Clone, Debug)]
pub struct Stop {
    rx: watch::Receiver<Option<StopReason>>,
}

/// The raising side: held by the connection, its caller watcher and the live registry.
#[derive(Clone, Debug)]
pub struct Raise {
    tx: Arc<watch::Sender<Option<StopReason>>>,
}

/// A connection's signal, not raised yet.
pub fn signal() -> (Raise, Stop) {
    let (tx, rx) = watch::channel(None);
    (Raise { tx: Arc::new(tx) }, Stop { rx })
}

impl Raise {
    /// Raises the signal with `reason`, unless it was raised already (the first reason
    /// stands). Returns whether this call raised it.
    pub fn raise(&self, reason: StopReason) -> bool {
        self.tx.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason);
            true
        })
    }
}

impl Stop {
    /// Resolves with the reason once the signal is raised; never, if it is not.
    pub async fn wait(&self) -> StopReason {
        let mut rx = self.rx.clone();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                // Every raising side is gone (the connection ended): nothing to wait for.
                std::future::pending::<()>().await;
            }
        }
    }
}
