//! The process-wide budget of text messages being assembled (spec §5.4: 32 at once, 64 more
//! waiting; past that the WebSocket closes with 1013, "try again later"). Each judged
//! WebSocket may hold up to 4 MiB of a message it is assembling; without a shared budget, many
//! sockets that each start a message and never finish it would hold all of that memory at
//! once. A socket takes a permit when its message begins and gives it back when the message
//! is judged (or the socket ends); one that cannot get a permit within the idle limit of an
//! assembly also closes with 1013.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Messages assembled at once, process-wide (the reference's figure).
pub(crate) const ASSEMBLING: usize = 32;
/// Messages that may wait for a permit (the reference's figure).
pub(crate) const QUEUED: usize = 64;

/// A budget of assemblies: `slots` at once, `queue` more waiting.
#[derive(Debug)]
pub(crate) struct Budget {
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    queue: usize,
}

/// Why no permit was given.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// Every slot taken and the queue full.
    QueueFull,
    /// Waited `wait` without a slot coming free.
    TimedOut,
}

impl Budget {
    pub(crate) fn new(slots: usize, queue: usize) -> Self {
        Budget {
            slots: Arc::new(Semaphore::new(slots)),
            waiting: AtomicUsize::new(0),
            queue,
        }
    }

    /// A permit for one assembly: at once if a slot is free, else after waiting in the queue
    /// (at most `wait`), else refused.
    pub(crate) async fn take(&self, wait: Duration) -> Result<OwnedSemaphorePermit, Full> {
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.queue {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(Full::QueueFull);
        }
        let got = tokio::time::timeout(wait, Arc::clone(&self.slots).acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        match got {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed; a closed one gives no permit either way.
            Ok(Err(_)) | Err(_) => Err(Full::TimedOut),
        }
    }
}

/// The one budget every judged WebSocket of this process shares.
pub(crate) static SHARED: LazyLock<Budget> = LazyLock::new(|| Budget::new(ASSEMBLING, QUEUED));

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn slots_then_queue_then_refused_and_a_freed_slot_goes_to_the_waiter() {
        let budget = Arc::new(Budget::new(2, 1));
        let wait = Duration::from_secs(30);
        let a = budget.take(wait).await.expect("first slot");
        let _b = budget.take(wait).await.expect("second slot");
        // The third waits in the queue.
        let waiter = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move { budget.take(wait).await.is_ok() })
        };
        tokio::task::yield_now().await;
        // The queue is full: the fourth is refused at once.
        assert_eq!(budget.take(wait).await.err(), Some(Full::QueueFull));
        drop(a);
        assert!(
            waiter.await.expect("waiter"),
            "a freed slot goes to the waiter"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gives_up_after_the_wait() {
        let budget = Budget::new(1, 4);
        let _held = budget.take(Duration::from_secs(1)).await.expect("slot");
        assert_eq!(
            budget.take(Duration::from_secs(30)).await.err(),
            Some(Full::TimedOut)
        );
        // Giving up left the queue: another may wait again.
        assert_eq!(budget.waiting.load(Ordering::Acquire), 0);
    }
}
