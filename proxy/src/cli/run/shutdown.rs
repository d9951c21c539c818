//! The end of `sluice run`: SIGTERM's and SIGINT's streams (`Shutdown`) and the drain they
//! start (`drain`: every connection given `--drain-timeout` to finish, the rest stopped with
//! a reason their close events carry), and how it ended (`Drained`).

use std::time::Duration;

use crate::pipeline::Shared;

/// How a drain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Drained {
    /// Everything in flight finished in time.
    Finished,
    /// The time ran out: this many connections were stopped.
    Stopped(usize),
    /// A second signal ended the drain early.
    Interrupted,
}

impl std::fmt::Display for Drained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Drained::Finished => {
                f.write_str("drained: every request and tunnel in flight finished")
            }
            Drained::Stopped(n) => write!(
                f,
                "drain timeout: {n} connection(s) still open were closed (each close audited with why)"
            ),
            Drained::Interrupted => f.write_str("drain cut short by a second signal"),
        }
    }
}

/// Waits until every connection has ended (each holds one of `slots` while it lasts), at
/// most `timeout`; then stops the live ones that remain, with a reason their close events
/// carry, and waits briefly for those events. A second SIGTERM or SIGINT ends the wait.
pub(super) async fn drain(
    shared: &Shared,
    slots: &tokio::sync::Semaphore,
    timeout: Duration,
    shutdown: &mut Shutdown,
) -> Drained {
    let all = u32::try_from(shared.limits.max_connections).unwrap_or(u32::MAX);
    let finished = async {
        if tokio::time::timeout(timeout, slots.acquire_many(all))
            .await
            .is_ok()
        {
            return Drained::Finished;
        }
        let why = format!(
            "sluice is shutting down: the drain timeout ({} s) passed",
            timeout.as_secs_f64()
        );
        let stopped = shared.stop_all(&why);
        // Their close events are written as they end.
        let _ = tokio::time::timeout(Duration::from_secs(5), slots.acquire_many(all)).await;
        Drained::Stopped(stopped)
    };
    tokio::select! {
        drained = finished => drained,
        _ = shutdown.next() => Drained::Interrupted,
    }
}

/// SIGTERM's and SIGINT's streams, registered before the listeners announce themselves (a
/// signal before that would end the process undrained).
pub(super) struct Shutdown {
    streams: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Shutdown {
    pub(super) fn register() -> Shutdown {
        use tokio::signal::unix::{SignalKind, signal};
        let streams = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some((term, int)),
            _ => {
                eprintln!("sluice: warning: SIGTERM and SIGINT will end sluice without a drain");
                None
            }
        };
        Shutdown { streams }
    }

    /// The next SIGTERM or SIGINT.
    pub(super) async fn next(&mut self) -> &'static str {
        let Some((term, int)) = &mut self.streams else {
            // Without signal handlers, run until killed.
            std::future::pending::<()>().await;
            return "killed";
        };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    }
}
