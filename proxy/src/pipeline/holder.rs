//! Who holds an admitted connection's client socket, checked again while the connection
//! lasts.
//!
//! A socket can move between processes (`SCM_RIGHTS`) after any one look, so a tunnel
//! identified at its start could be handed to another program and used by it for hours. Owns
//! the periodic re-check of a connection's caller (`--caller-recheck-interval`), which raises
//! the connection's stop signal (`stop.rs`) when the holder changed: each long-lived path
//! (the L4 relay, an inspected tunnel, a forwarded connection) ends on that signal and
//! audits the reason. Per-request checks are made where the requests are read
//! (`forward.rs`, `h2.rs`), with `caller::confirm`.
//!
//! The periodic re-checks of all connections run on one thread of their own ([`Rechecks`]),
//! one after another. They are background work that reads /proc, at a steady rate (every idle
//! connection, each interval): run on the runtime's workers with `block_in_place`, each one
//! handed its worker to another thread, and the pool of such threads never shrank, since a
//! steady stream of hand-offs keeps every idle thread in use before its keep-alive ends (a
//! thousand idle connections kept 180 to 500 threads alive, each with its stack).

use std::sync::mpsc;
use std::sync::{Arc, OnceLock};

use sluice_identity::{Identity, IdentityResolver};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::caller::{CallerError, Known};
use super::shared::Shared;
use super::stop::{Raise, StopReason};

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
pub fn watch(shared: Arc<Shared>, known: &Known, raise: Raise) -> Watcher {
    let interval = shared.limits.caller_recheck_interval;
    let identity = Arc::clone(&known.identity);
    Watcher(tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            if let Err(e) = shared.rechecks.run(&shared.identity, &identity).await {
                raise.raise(StopReason::CallerChanged(e.to_string()));
                return;
            }
        }
    }))
}

/// A re-check for the thread to run, and where its answer goes.
struct Job {
    identity: Arc<Identity>,
    answer: oneshot::Sender<Result<(), CallerError>>,
}

/// The thread that runs every periodic re-check of a running proxy, started at the first one
/// and ended when the proxy's shared state is dropped. A re-check is never skipped: when they
/// take longer than the interval allows, they run back to back, and a connection waits for
/// its own.
#[derive(Debug, Default)]
pub struct Rechecks {
    /// `None` when the thread could not be started (then each re-check runs on the blocking
    /// pool instead).
    jobs: OnceLock<Option<mpsc::Sender<Job>>>,
}

impl Rechecks {
    /// Whether the process identified as `identity` still alone holds its socket
    /// (`IdentityResolver::recheck`).
    pub async fn run(
        &self,
        resolver: &Arc<IdentityResolver>,
        identity: &Arc<Identity>,
    ) -> Result<(), CallerError> {
        let jobs = self.jobs.get_or_init(|| start(Arc::clone(resolver)));
        if let Some(jobs) = jobs {
            let (answer, answered) = oneshot::channel();
            let job = Job {
                identity: Arc::clone(identity),
                answer,
            };
            if jobs.send(job).is_ok()
                && let Ok(answer) = answered.await
            {
                return answer;
            }
        }
        // No thread, or it ended without an answer: the check is still made, elsewhere.
        let resolver = Arc::clone(resolver);
        let identity = Arc::clone(identity);
        let check = move || resolver.recheck(&identity).map_err(CallerError::from);
        match tokio::task::spawn_blocking(check.clone()).await {
            Ok(answer) => answer,
            Err(_) => check(),
        }
    }
}

fn start(resolver: Arc<IdentityResolver>) -> Option<mpsc::Sender<Job>> {
    let (jobs, queue) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("sluice-recheck".into())
        .spawn(move || {
            // Ends when every sender is gone (the proxy's shared state was dropped).
            for job in queue {
                let answer = resolver.recheck(&job.identity).map_err(CallerError::from);
                let _ = job.answer.send(answer);
            }
        })
        .ok()
        .map(|_| jobs)
}
