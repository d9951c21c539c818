//! The lookup itself: socket → inode → owners → one identity, and the caches it keeps.
//!
//! Caches are only *where to look*: diag sockets per network namespace, the recent client
//! pids, the identified processes' `/proc/<pid>` handles (one per process, shared by its
//! connections, closed with the last identity read from it), and the ancestors' `/proc` files
//! (`kept`). Identities are never cached.
//!
//! A connection is identified once with [`IdentityResolver::lookup`] and then re-checked with
//! [`IdentityResolver::confirm`] (when its request arrives, per inspected request, and
//! periodically for long-lived tunnels): a socket can move between processes (`SCM_RIGHTS`,
//! `pidfd_getfd`) after any one look, so one look proves only who held it at that moment.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use crate::error::IdentityError;
use crate::exhaust;
use crate::identity::{ClientSocket, Holder, Identity, read_exe, read_identity};
use crate::netns::Namespaces;
use crate::owners::OwnerSearch;
use crate::procfs::{Pinned, ProcDir, ProcFs, Snapshot, SocketLink};
use crate::reads::Reads;
use crate::recent::{RecentPid, RecentPids};
use crate::siblings::Siblings;

/// How the resolver finds processes and sockets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityConfig {
    /// The procfs mount to read (`/proc`).
    pub proc_root: PathBuf,
    /// Processes whose network namespaces are searched too (see
    /// [`IdentityResolver::add_namespace_pid`]).
    pub namespace_pids: Vec<u32>,
    /// How many recently identified client processes are searched first (0 disables it).
    pub recent_capacity: usize,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            proc_root: PathBuf::from("/proc"),
            namespace_pids: Vec::new(),
            recent_capacity: 16,
        }
    }
}

/// Resolves the program behind an accepted connection. Blocking (it reads `/proc`); call it
/// from a blocking thread. `Send + Sync`: share one per proxy.
#[derive(Debug)]
pub struct IdentityResolver {
    proc_root: PathBuf,
    /// Opened on first use and kept: lookups open `/proc/<pid>` relative to it.
    proc: OnceLock<ProcFs>,
    namespaces: Namespaces,
    recent: Mutex<RecentPids>,
    /// Identified processes kept open for their connections' later checks.
    pins: Mutex<Pins>,
    /// The sockets each sibling of a caller held when last read (`siblings`).
    siblings: Siblings,
    own_pid: u32,
    /// Passed rechecks, by how the family was read.
    by_snapshot: AtomicU64,
    walked: AtomicU64,
}

/// How many rechecks have passed since the resolver was made, by how they read the caller's
/// fork family: from the snapshot of it kept with the process (`procfs::family`: a few
/// reads), or walking it (every ancestor and descendant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rechecks {
    /// Passed on the snapshot of the family.
    pub by_snapshot: u64,
    /// Passed after walking the family.
    pub walked: u64,
}

impl IdentityResolver {
    /// Creates a resolver. Nothing here fails: namespaces that cannot be entered yet are retried
    /// by lookups, which report them if the socket is found nowhere else.
    pub fn new(config: IdentityConfig) -> Self {
        let namespaces = Namespaces::new(&config.proc_root);
        for pid in &config.namespace_pids {
            namespaces.add_pid(*pid);
        }
        Self {
            proc_root: config.proc_root,
            proc: OnceLock::new(),
            namespaces,
            recent: Mutex::new(RecentPids::new(config.recent_capacity)),
            pins: Mutex::new(Pins {
                by_pid: HashMap::new(),
                sweep_at: PINS_SWEEP_MIN,
                latest: std::collections::VecDeque::with_capacity(LATEST_PINS),
            }),
            siblings: Siblings::default(),
            own_pid: std::process::id(),
            by_snapshot: AtomicU64::new(0),
            walked: AtomicU64::new(0),
        }
    }

    /// The rechecks passed so far, by how they read the family (see [`Rechecks`]).
    pub fn rechecks(&self) -> Rechecks {
        Rechecks {
            by_snapshot: self.by_snapshot.load(Ordering::Relaxed),
            walked: self.walked.load(Ordering::Relaxed),
        }
    }

    /// Registers a process whose network namespace sluice should also search (clients in
    /// another netns, e.g. `sluice exec --netns`). The proxy's own namespace and namespaces
    /// already registered are ignored. Needs CAP_SYS_ADMIN.
    pub fn add_namespace_pid(&self, pid: u32) {
        self.namespaces.add_pid(pid);
    }

    /// Identifies the program on the other end of an accepted connection.
    ///
    /// `peer` is the accepted socket's peer address (the client's local address); `local` is
    /// the accepted socket's local address, i.e. the proxy's address as the client sees it (for
    /// redirected connections, the original destination).
    ///
    /// Fails with [`IdentityError::DescriptorsExhausted`] when sluice ran out of file
    /// descriptors on the way, whatever else it found.
    pub fn lookup(&self, peer: SocketAddr, local: SocketAddr) -> Result<Identity, IdentityError> {
        match self.lookup_within(peer, local, usize::MAX)? {
            Some(identity) => Ok(identity),
            // No search reads usize::MAX descriptors' worth; were one to, it found nobody.
            None => Err(IdentityError::SocketNotFound { peer, local }),
        }
    }

    /// Like [`Self::lookup`], but stops once the search for the socket's holders has read
    /// `limit` descriptors' worth of `/proc` (one `readlink` each; a thread's `children` file
    /// or a `stat` of a `/proc/<pid>` counts one, opening and listing a process sixteen), and
    /// then answers `Ok(None)`: not an identity, not a failure, only "this would take
    /// longer". A caller that runs lookups where a long one would hold up other work runs
    /// this there, and [`Self::lookup`] elsewhere when it answers `None`. Everything the
    /// unfinished search found is discarded, the processes it saw gone included.
    pub fn lookup_within(
        &self,
        peer: SocketAddr,
        local: SocketAddr,
        limit: usize,
    ) -> Result<Option<Identity>, IdentityError> {
        exhaust::guarded(|| self.lookup_now(peer, local, limit))
    }

    fn lookup_now(
        &self,
        peer: SocketAddr,
        local: SocketAddr,
        limit: usize,
    ) -> Result<Option<Identity>, IdentityError> {
        let socket = self
            .namespaces
            .find(peer, local)?
            .ok_or(IdentityError::SocketNotFound { peer, local })?;
        let proc = self.procfs()?;

        let recent = lock(&self.recent).snapshot();
        let pinned = self.pinned(&recent);
        let Some(found) = OwnerSearch::new(proc, socket.inode, self.own_pid)
            .with_pinned(pinned)
            .with_kept_siblings(&self.siblings)
            .capping_recent_tables()
            .within(limit)
            .run(&recent, socket.uid)
        else {
            return Ok(None);
        };
        if !found.stale.is_empty() {
            let mut recent = lock(&self.recent);
            for entry in &found.stale {
                recent.forget(*entry);
            }
        }
        if found.owners.is_empty() {
            return Err(IdentityError::NoOwner {
                inode: socket.inode,
            });
        }

        let client = ClientSocket {
            inode: socket.inode,
            uid: socket.uid,
            fd: None,
        };
        let resolved = found
            .owners
            .iter()
            .map(|owner| read_identity(proc, &found.parents, owner, client))
            .collect::<Result<Vec<_>, _>>()?;
        let mut resolved = resolved.into_iter();
        let Some(mut first) = resolved.next() else {
            return Err(IdentityError::NoOwner {
                inode: socket.inode,
            });
        };
        let rest: Vec<_> = resolved.collect();
        if rest.iter().any(|other| !other.same_policy_identity(&first)) {
            let pids = found.owners.iter().map(|owner| owner.pid()).collect();
            return Err(IdentityError::AmbiguousOwners {
                inode: socket.inode,
                pids,
            });
        }
        first.socket.fd = found.fds.get(&first.pid).copied();
        if let Some(owner) = found.owners.into_iter().next() {
            let pinned = self.pin(owner, first.start_time);
            first.holder = Holder::new(pinned, socket.inode, first.socket.fd);
        }
        lock(&self.recent).touch(RecentPid {
            pid: first.pid,
            start_time: first.start_time,
            fd: first.socket.fd,
            elsewhere: None,
        });
        Ok(Some(first))
    }

    /// Checks that the process `previous` names (pid and start time) still holds its socket
    /// and still runs the same executable: a handful of reads of that one process, for a check
    /// per request. It does not look for other holders; [`Self::recheck`] does. When the check
    /// fails, the recheck says who holds the socket now ([`IdentityError::HolderChanged`]).
    pub fn confirm(&self, previous: &Identity) -> Result<(), IdentityError> {
        self.confirm_within(previous, usize::MAX)?
            .ok_or_else(|| never_spent(previous))
    }

    /// Like [`Self::confirm`], but answers `Ok(None)` once it has read `limit` descriptors'
    /// worth of `/proc`, as [`Self::recheck_within`] does: looking for a socket moved to
    /// another descriptor reads the process's table, and the recheck after a failed
    /// confirmation reads its family.
    pub fn confirm_within(
        &self,
        previous: &Identity,
        limit: usize,
    ) -> Result<Option<()>, IdentityError> {
        exhaust::guarded(|| {
            let proc = self.procfs()?;
            let mut reads = Reads::within(limit);
            if still_held(proc, previous, &mut reads) {
                return Ok(Some(()));
            }
            if reads.spent() {
                return Ok(None);
            }
            self.recheck_now(previous, limit)
        })
    }

    /// Checks that the socket `previous` was read from is still held by that same process
    /// (pid and start time) running the same executable, and by no process of another policy
    /// identity in its fork family (every ancestor below init and every holder's descendants;
    /// see `OwnerSearch::without_siblings` for why the other children of ancestors are not
    /// read again). Fails with
    /// [`IdentityError::HolderChanged`] otherwise, including when no process holds it (a
    /// socket in flight in an `SCM_RIGHTS` message).
    ///
    /// Cheaper than a lookup: no netlink query (the connection's socket is known), no reading
    /// of the siblings' fd tables, and the identified process is where the search starts.
    pub fn recheck(&self, previous: &Identity) -> Result<(), IdentityError> {
        exhaust::guarded(|| self.recheck_unbounded(previous))
    }

    /// Like [`Self::recheck`], but answers `Ok(None)` once its search has read `limit`
    /// descriptors' worth of `/proc`, as [`Self::lookup_within`] does; `Ok(Some(()))` is a
    /// passed check.
    pub fn recheck_within(
        &self,
        previous: &Identity,
        limit: usize,
    ) -> Result<Option<()>, IdentityError> {
        exhaust::guarded(|| self.recheck_now(previous, limit))
    }

    fn recheck_unbounded(&self, previous: &Identity) -> Result<(), IdentityError> {
        self.recheck_now(previous, usize::MAX)?
            .ok_or_else(|| never_spent(previous))
    }

    fn recheck_now(&self, previous: &Identity, limit: usize) -> Result<Option<()>, IdentityError> {
        let proc = self.procfs()?;
        let inode = previous.socket.inode;
        let pinned = previous.holder.pinned();
        if let Some(pinned) = pinned
            && let Some(snapshot) = pinned.family()
        {
            // The family as the last full recheck read it (see `procfs::family`): then only the
            // process itself is read, as a confirmation reads it.
            let mut reads = Reads::within(limit);
            if snapshot.unchanged_for(inode, &mut reads) {
                if still_held(proc, previous, &mut reads) {
                    self.by_snapshot.fetch_add(1, Ordering::Relaxed);
                    return Ok(Some(()));
                }
            } else if !reads.spent() {
                pinned.keep_family(None);
            }
        }
        let hint = [RecentPid {
            pid: previous.pid,
            start_time: previous.start_time,
            fd: previous.socket.fd,
            elsewhere: None,
        }];
        let Some(found) = OwnerSearch::new(proc, inode, self.own_pid)
            .without_siblings()
            .with_pinned(previous.holder.pinned().cloned().into_iter().collect())
            .within(limit)
            .run(&hint, previous.socket.uid)
        else {
            return Ok(None);
        };
        let mut same_holder = false;
        let mut others_agree = true;
        for owner in &found.owners {
            if owner.pid() == previous.pid {
                let started = owner
                    .stat()
                    .map_err(|_| IdentityError::ProcessExited { pid: owner.pid() })?
                    .start_time;
                let (exe, deleted) = read_exe(owner)?;
                same_holder = started == previous.start_time
                    && exe == previous.exe
                    && deleted == previous.exe_deleted;
            } else {
                let other = read_identity(proc, &found.parents, owner, previous.socket)?;
                others_agree &= other.same_policy_identity(previous);
            }
        }
        if same_holder && others_agree {
            if let ([_], Some(pinned), Some(ancestry)) =
                (found.owners.as_slice(), pinned, found.ancestry)
            {
                let snapshot = Snapshot::take(pinned, ancestry, self.own_pid);
                pinned.keep_family(snapshot.map(Arc::new));
            }
            self.walked.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(()));
        }
        let now = found
            .owners
            .iter()
            .map(|owner| {
                let exe = read_exe(owner).map(|(exe, _)| exe).unwrap_or_default();
                (owner.pid(), exe)
            })
            .collect();
        Err(IdentityError::HolderChanged {
            inode,
            pid: previous.pid,
            exe: previous.exe.clone(),
            now,
        })
    }
}

impl IdentityResolver {
    /// The kept handle of the process `owner` names: the one its earlier connections keep, if
    /// any still does, else `owner` itself.
    fn pin(&self, owner: ProcDir, start_time: u64) -> Arc<Pinned> {
        let mut pins = lock(&self.pins);
        if let Some(kept) = pins.by_pid.get(&owner.pid()).and_then(Weak::upgrade)
            && kept.start_time() == start_time
        {
            pins.hold_latest(&kept);
            return kept;
        }
        let pinned = Arc::new(owner.pin(start_time));
        pins.hold_latest(&pinned);
        if pins.by_pid.len() >= pins.sweep_at {
            pins.by_pid.retain(|_, kept| kept.strong_count() > 0);
            pins.sweep_at = (pins.by_pid.len() * 2).max(PINS_SWEEP_MIN);
        }
        pins.by_pid.insert(pinned.pid(), Arc::downgrade(&pinned));
        pinned
    }

    /// The kept handles of the processes in `recent` that still have connections.
    fn pinned(&self, recent: &[RecentPid]) -> Vec<Arc<Pinned>> {
        let pins = lock(&self.pins);
        recent
            .iter()
            .filter_map(|entry| {
                pins.by_pid
                    .get(&entry.pid)
                    .and_then(Weak::upgrade)
                    .filter(|pinned| pinned.start_time() == entry.start_time)
            })
            .collect()
    }

    fn procfs(&self) -> Result<&ProcFs, IdentityError> {
        if let Some(proc) = self.proc.get() {
            return Ok(proc);
        }
        let opened = ProcFs::open(&self.proc_root).map_err(|source| IdentityError::ProcRoot {
            path: self.proc_root.clone(),
            source,
        })?;
        Ok(self.proc.get_or_init(|| opened))
    }
}

/// Whether the process `previous` names still holds its socket (at the descriptor it had, or
/// any other) and runs the same executable. The handle pins the process: a pid reused since
/// is another `/proc` entry, and its start time differs too.
/// What a check of `previous` answers should it ever read `usize::MAX` descriptors' worth of
/// `/proc` (none does): that it saw no holder.
fn never_spent(previous: &Identity) -> IdentityError {
    IdentityError::HolderChanged {
        inode: previous.socket.inode,
        pid: previous.pid,
        exe: previous.exe.clone(),
        now: Vec::new(),
    }
}

/// Whether the process `previous` names still holds its socket and runs its executable; a
/// read of its fd table (the socket moved) counts in `reads`, and a `false` after they are
/// spent says nothing.
fn still_held(proc: &ProcFs, previous: &Identity, reads: &mut Reads) -> bool {
    if let Some(held) = previous
        .holder
        .still_holds(&previous.exe, previous.exe_deleted, reads)
    {
        return held;
    }
    let Ok(dir) = proc.pid_dir(previous.pid) else {
        return false;
    };
    let link = SocketLink::new(previous.socket.inode);
    dir.stat()
        .is_ok_and(|stat| stat.start_time == previous.start_time)
        && (previous.socket.fd.is_some_and(|fd| dir.fd_is(fd, &link))
            || dir.holding_fd(&link, reads).is_ok_and(|fd| fd.is_some()))
        && read_exe(&dir)
            .is_ok_and(|(exe, deleted)| exe == previous.exe && deleted == previous.exe_deleted)
}

/// The kept process handles, by pid; an entry whose connections all ended is swept when the
/// map has doubled since the last sweep.
#[derive(Debug)]
struct Pins {
    by_pid: HashMap<u32, Weak<Pinned>>,
    sweep_at: usize,
    /// The [`LATEST_PINS`] processes identified last, kept after their connections end: a
    /// client that opens one connection after another (and closes each before the next)
    /// is read through the files kept with it, as one that keeps them open is.
    latest: std::collections::VecDeque<Arc<Pinned>>,
}

impl Pins {
    /// Makes `pinned` the latest process identified.
    fn hold_latest(&mut self, pinned: &Arc<Pinned>) {
        if self
            .latest
            .front()
            .is_some_and(|first| Arc::ptr_eq(first, pinned))
        {
            return;
        }
        self.latest.retain(|held| !Arc::ptr_eq(held, pinned));
        if self.latest.len() >= LATEST_PINS {
            self.latest.pop_back();
        }
        self.latest.push_front(Arc::clone(pinned));
    }
}

/// The size below which the kept handles are not swept.
const PINS_SWEEP_MIN: usize = 64;

/// Processes kept open after their last connection ended (see [`Pins::latest`]): each holds
/// its `/proc/<pid>`, and its other files within the places `kept::pinned_files_slot` gives.
pub(crate) const LATEST_PINS: usize = 4;

/// Both locked structures stay consistent under a panicking holder (each critical section is
/// one collection operation, or a sweep of dead entries), so a poisoned lock is used as is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resolver_is_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<IdentityResolver>();
    }

    #[test]
    fn the_default_searches_proc_and_remembers_recent_clients() {
        let config = IdentityConfig::default();
        assert_eq!(config.proc_root, PathBuf::from("/proc"));
        assert!(config.namespace_pids.is_empty());
        assert!(config.recent_capacity > 0);
    }

    #[test]
    fn a_missing_proc_root_is_an_error_not_a_panic() {
        let resolver = IdentityResolver::new(IdentityConfig {
            proc_root: PathBuf::from("/nonexistent-proc"),
            ..IdentityConfig::default()
        });
        // A connection that exists, so the lookup gets as far as /proc.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, peer) = listener.accept().unwrap();
        let err = resolver
            .lookup(peer, server.local_addr().unwrap())
            .unwrap_err();
        assert!(matches!(err, IdentityError::ProcRoot { .. }), "{err:?}");
    }
}
