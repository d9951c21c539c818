//! The drain of a stopping proxy: one signal, raised once on SIGTERM (or SIGINT), that every
//! part of sluice that waits for new work watches.
//!
//! Owns the signal only: the accept loops stop accepting when it is raised (`listen`), a
//! kept-alive connection waiting for its next request closes instead of waiting
//! (`pipeline::transports::http1`), `/readyz` answers 503 (`metrics`), and `cli::run` waits for the work
//! in flight up to `--drain-timeout`, then stops the rest. It imports nothing of sluice, so
//! that every layer can hold it.

use tokio::sync::watch;

/// Whether sluice is draining; cheap to clone, raised once.
#[derive(Clone, Debug)]
pub struct Drain {
    tx: std::sync::Arc<watch::Sender<bool>>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            tx: std::sync::Arc::new(watch::channel(false).0),
        }
    }
}

impl Drain {
    /// Starts the drain (again: no effect).
    pub fn begin(&self) {
        self.tx.send_replace(true);
    }

    /// Whether the drain has started.
    pub fn is_draining(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once the drain has started (at once, if it has).
    pub async fn started(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`: `wait_for` ends only when the drain begins.
        let _ = rx.wait_for(|draining| *draining).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_waiter_sees_the_drain_begin_once() {
        let drain = Drain::default();
        assert!(!drain.is_draining());
        let waiter = tokio::spawn({
            let d = drain.clone();
            async move { d.started().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drain.begin();
        waiter.await.unwrap();
        assert!(drain.is_draining());
        // Begun already: a later waiter returns at once.
        tokio::time::timeout(std::time::Duration::from_secs(1), drain.started())
            .await
            .unwrap();
        drain.begin();
        assert!(drain.is_draining());
    }
}
