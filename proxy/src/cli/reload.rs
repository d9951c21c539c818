//! Hot reload for `sluice run`: on SIGHUP, and when a watched file's content changes, the
//! policy files, provider profiles and secrets are read and validated whole
//! (`config::load`), then swapped in; a failed load keeps the last good configuration. Both
//! outcomes are audited (Device Config State Change, with every error's file, line and field)
//! and printed.
//!
//! File changes are found by polling, not inotify: every `--watch-interval` each file's
//! resolved target (symlinks followed, as a Kubernetes ConfigMap's `..data` swap changes it)
//! and a SHA-256 of its content are compared with the last load's. Every read, here and in
//! the load, goes through `config_file` (a regular file, bounded, read within a deadline) on
//! the watcher's own thread: a path swapped for a FIFO, a device or a huge file is a failed
//! reload, and the proxy serves on. Polling sees an atomic
//! rename, a symlink swap, an in-place write and an edit through a bind mount alike, costs
//! a few small reads a second, and needs no crate (the `notify` crate pulls in a watcher
//! per platform and still misses changes behind symlinks it does not watch). A change is
//! loaded once the content has stopped changing for one `DEBOUNCE` (an editor's
//! write-then-rename, or a half-copied file, is not loaded).
//!
//! The swap: credentials first, then the policy. A request between the two sees the new
//! secrets with the old policy; both orders fail closed (a new provider's host is still
//! denied by the old policy, a removed one's placeholder no longer resolves).
//!
//! An operator's CA (`--ca-cert`, `--ca-key`) is read with the rest: a new one (rotation)
//! signs every leaf issued after the swap, `GET /ca.pem` serves it, and `--ca-dir`'s files
//! are written again. Connections already established keep the leaf they were given. The
//! TLS hop's certificate, key and client CAs (`--tls-cert`, `--tls-key`, `--client-ca`) are
//! read with the rest too: new handshakes present a renewed certificate.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use super::config::{self, Sources};
use crate::audit::AuditSink;
use crate::config_file::{self, Kind};
use crate::credentials::ScrubSet;
use crate::pipeline::Shared;

/// How long a changed file must stay unchanged before it is loaded.
const DEBOUNCE: Duration = Duration::from_millis(300);

/// At most this many debounce rounds for a file that keeps changing; then it is loaded as it is.
const MAX_DEBOUNCE_ROUNDS: usize = 20;

/// What started a reload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Signal,
    FileChange,
}

impl Trigger {
    fn label(self) -> &'static str {
        match self {
            Trigger::Signal => "SIGHUP",
            Trigger::FileChange => "file change",
        }
    }
}

/// The outcome of one reload, for whoever counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReloadOutcome {
    pub trigger: Trigger,
    pub ok: bool,
}

/// Reloads one running proxy's configuration.
pub struct Reloader {
    shared: Arc<Shared>,
    audit: Arc<AuditSink>,
    sources: Sources,
    /// Every secret value loaded since start: a rotated-out value stays redacted (it may
    /// still be in flight in an answer).
    redactor: Mutex<ScrubSet>,
    /// `--ca-dir`: written again when the operator's CA changes.
    ca_dir: Option<PathBuf>,
    /// The running TLS hop, which a reload hands its files loaded again.
    hop: Option<Arc<crate::listen::hop::Hop>>,
    /// Held while bindings are swapped (a reload, a token refresh), so neither swaps in
    /// bindings made from what the other replaced.
    swapping: Mutex<()>,
}

impl Reloader {
    pub fn new(
        shared: Arc<Shared>,
        audit: Arc<AuditSink>,
        sources: Sources,
        redactor: ScrubSet,
    ) -> Reloader {
        Reloader {
            shared,
            audit,
            sources,
            redactor: Mutex::new(redactor),
            ca_dir: None,
            hop: None,
            swapping: Mutex::new(()),
        }
    }

    /// Hands `hop` what every reload loads of its files (`Sources::hop`).
    pub fn with_hop(mut self, hop: Option<Arc<crate::listen::hop::Hop>>) -> Reloader {
        self.hop = hop;
        self
    }

    /// Writes the CA's certificates to `dir` again whenever a reload rotates the CA.
    pub fn with_ca_dir(mut self, dir: Option<PathBuf>) -> Reloader {
        self.ca_dir = dir;
        self
    }

    /// Signs later leaves with `ca` when it is not the CA in use (a rotation).
    fn rotate_ca(&self, ca: Arc<crate::tls::ca::Ca>) {
        let Some(tls) = &self.shared.tls else {
            return;
        };
        if tls.terminator.ca().cert_pem() == ca.cert_pem() {
            return;
        }
        if let Some(dir) = &self.ca_dir
            && let Err(e) = ca.write_files(dir)
        {
            eprintln!("sluice: warning: the rotated CA's certificates were not written: {e}");
        }
        tls.terminator.rotate(ca);
        eprintln!(
            "sluice: CA rotated: every leaf from now on is signed by the new CA (GET /ca.pem serves it); connections already open keep theirs"
        );
    }

    /// A refreshed credential's token changed (or expired unreplaced): only the credentials
    /// in force take the current tokens. No file is read again and no configuration change
    /// is audited; the redactor learns the new token before any request can use it, and the
    /// one it replaces is still scrubbed from what comes back from where it was bound.
    pub fn take_tokens(&self) {
        let _swapping = self.swapping.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(refresher) = &self.sources.refresh {
            let current = self.shared.credentials.load();
            let mut next = current.copy();
            next.take_tokens(&|k| refresher.tokens.current(k));
            self.learn(&next.redactor());
            next.retire_from(&current);
            self.shared.credentials.store(Arc::new(next));
        }
        if let Some(registry) = &self.sources.tenant_refresh {
            // Each tenant's credentials take its own refresher's tokens, none other's.
            let tokens = registry.in_force();
            let current = self.shared.tenants.load();
            let next = current.with_credentials(&|t| {
                let (_, mine) = tokens.iter().find(|(name, _)| *name == t.name)?;
                let mut next = t.credentials.copy();
                next.take_tokens(&|k| mine.current(k));
                self.learn(&next.redactor());
                next.retire_from(&t.credentials);
                Some(next)
            });
            self.shared.tenants.store(Arc::new(next));
        }
    }

    /// The redactor learns `values` (before any request can use them).
    fn learn(&self, values: &ScrubSet) {
        let mut known = self.redactor.lock().unwrap_or_else(PoisonError::into_inner);
        known.merge(values);
        self.audit.set_redactor(Arc::new(known.clone()));
    }

    /// Loads the configuration again and, when it is valid, swaps it in.
    pub fn reload(&self, trigger: Trigger) -> ReloadOutcome {
        let _swapping = self.swapping.lock().unwrap_or_else(PoisonError::into_inner);
        // The tenants' refreshers first (a new tenant's first tokens): the load reads them.
        let prepared = match (&self.sources.tenant_refresh, &self.sources.tenants) {
            (Some(registry), Some(path)) => tokio::runtime::Handle::current()
                .block_on(registry.prepare(path))
                .map_err(config::ConfigError::Tenants),
            _ => Ok(()),
        };
        let result = prepared.and_then(|()| config::load(&self.sources));
        if let Some(registry) = &self.sources.tenant_refresh
            && result.is_err()
        {
            registry.discard();
        }
        let event = config::change_event(&self.sources, &result);
        let ok = match result {
            Ok(config) => {
                for w in &config.policy_warnings {
                    eprintln!("{w}");
                }
                for w in &config.credential_warnings {
                    eprintln!("{w}");
                }
                // The redactor learns the new values before any request can use them.
                {
                    let mut known = self.redactor.lock().unwrap_or_else(PoisonError::into_inner);
                    known.merge(&config.redactor);
                    self.audit.set_redactor(Arc::new(known.clone()));
                }
                crate::metrics::policy_loaded(config.policies());
                // Values rotated out or withdrawn are still scrubbed from what comes back
                // from where they were bound: an upstream may have stored them.
                let mut bindings = config.bindings;
                bindings.retire_from(&self.shared.credentials.load());
                let mut tenants = config.tenants;
                tenants.retire_from(&self.shared.tenants.load());
                if let Some(ca) = config.ca {
                    self.rotate_ca(ca);
                }
                if let (Some(hop), Some(new)) = (&self.hop, config.hop)
                    && hop.replace(new)
                {
                    eprintln!(
                        "sluice: the TLS hop's certificate was replaced: new handshakes present it; connections already open keep theirs"
                    );
                }
                self.shared.credentials.store(Arc::new(bindings));
                self.shared.policy.store(Arc::new(config.policy));
                // Each tenant's policy and credentials at once.
                self.shared.tenants.store(Arc::new(tenants));
                // The tenants' refreshers the load read are in force; those it replaced stop.
                if let Some(registry) = &self.sources.tenant_refresh {
                    registry.commit();
                }
                // Every live connection is re-judged under the new policy; each it no longer
                // allows is closed, and its close event says why.
                let revoked = crate::pipeline::revoke_disallowed(&self.shared);
                eprintln!(
                    "sluice: configuration reloaded ({}): new requests are judged by it; {revoked} live connection(s) it no longer allows closed",
                    trigger.label()
                );
                true
            }
            Err(e) => {
                for line in e.lines() {
                    eprintln!("{line}");
                }
                eprintln!(
                    "sluice: reload ({}) refused, the last good configuration stays in force: {e}",
                    trigger.label()
                );
                false
            }
        };
        self.audit.emit(&event);
        let outcome = ReloadOutcome { trigger, ok };
        reload_outcome(outcome);
        outcome
    }
}

/// Where every reload's outcome goes: the reload metrics (`sluice_reloads_total{result}`).
fn reload_outcome(outcome: ReloadOutcome) {
    crate::metrics::reload(outcome.ok);
}

/// One file as last seen: where its path leads (symlinks followed), and the digest of its
/// content or what was wrong with it (`config_file`: not a regular file, too large, not
/// read in time). A change in any of these is a change.
type FileState = (Option<PathBuf>, Result<Vec<u8>, String>);

/// Each file read as its loader reads it (`config_file::read`: a FIFO, a device or a huge
/// file is an error here too, never a wait), and hashed.
fn fingerprint(files: &[(PathBuf, Kind)]) -> Vec<FileState> {
    files.iter().map(|(f, kind)| state_of(f, *kind)).collect()
}

/// One file's [`FileState`].
fn state_of(f: &std::path::Path, kind: Kind) -> FileState {
    let target = std::fs::canonicalize(f).ok();
    // The content (the secrets file's too) is wiped when it drops.
    let digest = config_file::read(f, kind)
        .map(|c| {
            ring::digest::digest(&ring::digest::SHA256, &c.bytes)
                .as_ref()
                .to_vec()
        })
        .map_err(|e| e.to_string());
    (target, digest)
}

/// The configuration files as they were just before the first load read them: the watcher
/// starts from these, so that a file changed between that load and the watcher's start (an
/// operator's swap right after start) is still a change.
#[derive(Debug)]
pub struct Seen(Vec<(PathBuf, FileState)>);

/// Takes [`Seen`]: call it right before the first load.
pub fn seen(sources: &Sources) -> Seen {
    Seen(
        sources
            .files()
            .into_iter()
            .map(|(f, kind)| {
                let state = state_of(&f, kind);
                (f, state)
            })
            .collect(),
    )
}

impl Seen {
    /// `files` as first seen: from before the first load where that saw them, else now
    /// (files only a later step adds, such as the TLS hop's).
    fn of(self, files: &[(PathBuf, Kind)]) -> Vec<FileState> {
        let mut before = self.0;
        files
            .iter()
            .map(|(f, kind)| match before.iter().position(|(p, _)| p == f) {
                Some(i) => before.swap_remove(i).1,
                None => state_of(f, *kind),
            })
            .collect()
    }
}

/// SIGHUP's stream, registered before the listeners announce themselves (until then, SIGHUP
/// would end the process). `None`, with a warning, when it cannot be registered.
pub fn hangup() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("sluice: warning: SIGHUP will not reload the configuration: {e}");
            None
        }
    }
}

/// Reloads on SIGHUP (`hup`, from `hangup`) and when a watched file changes, until the
/// process ends. The checks and the reloads read files, which may take long (a file system
/// that stops answering): they run on a thread of their own, never on an async worker; a
/// small task hands each SIGHUP over. Must be called within the runtime (the reloads run
/// in its context).
pub fn watch(
    reloader: Arc<Reloader>,
    hup: Option<tokio::signal::unix::Signal>,
    interval: Duration,
    first: Seen,
) -> std::io::Result<()> {
    let (signals, hups) = mpsc::channel::<()>();
    // Without a SIGHUP stream, the sender stays with the thread: the channel never
    // disconnects, and the thread polls the files.
    let kept = match hup {
        Some(mut hup) => {
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    if signals.send(()).is_err() {
                        break;
                    }
                }
            });
            None
        }
        None => Some(signals),
    };
    let runtime = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name("sluice-reload".into())
        .spawn(move || {
            let _kept = kept;
            let _in = runtime.enter();
            watch_files(&reloader, &hups, interval, first);
        })?;
    Ok(())
}

/// The watcher thread's loop: every `interval`, or at a SIGHUP, until the signal task ends.
fn watch_files(reloader: &Reloader, hups: &mpsc::Receiver<()>, interval: Duration, first: Seen) {
    let mut files = reloader.sources.files();
    let mut seen = first.of(&files);
    let mut tick = Instant::now() + interval;
    loop {
        let trigger = match hups.recv_timeout(tick.saturating_duration_since(Instant::now())) {
            Ok(()) => Trigger::Signal,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // A late check is not made up for (as tokio's `MissedTickBehavior::Delay`).
                tick = Instant::now() + interval;
                if files.is_empty() || fingerprint(&files) == seen {
                    continue;
                }
                settle(&files);
                Trigger::FileChange
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        // What is loaded is what is seen from now on (a refused file is not retried until it
        // changes again). A tenants file may name other files now.
        files = reloader.sources.files();
        seen = fingerprint(&files);
        let reloaded =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reloader.reload(trigger)));
        if reloaded.is_err() {
            eprintln!("sluice: reload failed; the last good configuration stays in force");
        }
    }
}

/// Waits until the files have not changed for one `DEBOUNCE`.
fn settle(files: &[(PathBuf, Kind)]) {
    let mut last = fingerprint(files);
    for _ in 0..MAX_DEBOUNCE_ROUNDS {
        std::thread::sleep(DEBOUNCE);
        let now = fingerprint(files);
        if now == last {
            return;
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file changed after the first load read it, but before the watcher started, is a
    /// change to the watcher (it starts from what the load saw, not from what it finds).
    #[test]
    fn a_change_before_the_watcher_starts_is_still_a_change() {
        let dir = std::env::temp_dir().join(format!("sluice-seen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let policy = dir.join("policy.yaml");
        let hop = dir.join("hop.pem");
        std::fs::write(&policy, "version: 1\n").unwrap();
        std::fs::write(&hop, "hop\n").unwrap();
        let first = Seen(vec![(policy.clone(), state_of(&policy, Kind::Policy))]);
        // Swapped between the first load and the watcher's start.
        std::fs::write(&policy, "version: 1\nnetwork_policies: {}\n").unwrap();
        let files = vec![(policy.clone(), Kind::Policy), (hop.clone(), Kind::Pem)];
        let seen = first.of(&files);
        assert_ne!(seen, fingerprint(&files), "the swap went unseen");
        // A file the first load did not read (the TLS hop's) is taken as it is now.
        assert_eq!(seen[1], fingerprint(&files)[1]);
        let unchanged = Seen(vec![(policy.clone(), state_of(&policy, Kind::Policy))]);
        assert_eq!(unchanged.of(&files), fingerprint(&files));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
