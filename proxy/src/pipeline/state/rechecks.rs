//! The thread that runs the periodic re-checks of every connection's caller (`holder.rs`),
//! one after another.
//!
//! They are background work that reads /proc at a steady rate (every idle connection, each
//! interval). Run on the runtime's workers with `block_in_place`, each one handed its worker
//! to another thread, and the pool of such threads never shrank, since a steady stream of
//! hand-offs keeps every idle thread in use before its keep-alive ends (a thousand idle
//! connections kept 180 to 500 threads alive, each with its stack).

use std::sync::mpsc;
use std::sync::{Arc, OnceLock};

use sluice_identity::{Identity, IdentityError, IdentityResolver};
use tokio::sync::oneshot;

/// A re-check for the thread to run, and where its answer goes.
struct Job {
    identity: Arc<Identity>,
    answer: oneshot::Sender<Result<(), IdentityError>>,
}

/// The thread that runs every periodic re-check of a running proxy, started at the first one
/// and ended when the proxy's shared state is dropped. A re-check is never skipped while its
/// connection lasts: when they take longer than the interval allows, they run back to back,
/// and a connection waits for its own.
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
    ) -> Result<(), IdentityError> {
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
        let check = move || resolver.recheck(&identity);
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
                // Its connection ended while it waited (the watcher was dropped): nobody
                // needs the answer, and a re-check of a closed socket reads the client's
                // whole table and then scans every process.
                if job.answer.is_closed() {
                    continue;
                }
                let answer = resolver.recheck(&job.identity);
                let _ = job.answer.send(answer);
            }
        })
        .ok()
        .map(|_| jobs)
}
