//! The lookup itself: socket → inode → owners → one identity, and the caches it keeps.
//!
//! Caches are only *where to look*: diag sockets per network namespace and the recent client
//! pids. Identities are never cached.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use crate::error::IdentityError;
use crate::identity::{Identity, read_identity};
use crate::netns::Namespaces;
use crate::owners::OwnerSearch;
use crate::procfs::ProcFs;
use crate::recent::{RecentPid, RecentPids};

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
    own_pid: u32,
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
            own_pid: std::process::id(),
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
    pub fn lookup(&self, peer: SocketAddr, local: SocketAddr) -> Result<Identity, IdentityError> {
        let socket = self
            .namespaces
            .find(peer, local)?
            .ok_or(IdentityError::SocketNotFound { peer, local })?;
        let proc = self.procfs()?;

        let recent = lock(&self.recent).snapshot();
        let found = OwnerSearch::new(proc, socket.inode, self.own_pid).run(&recent, socket.uid);
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

        let resolved = found
            .owners
            .iter()
            .map(|owner| read_identity(proc, owner))
            .collect::<Result<Vec<_>, _>>()?;
        let mut resolved = resolved.into_iter();
        let Some(first) = resolved.next() else {
            return Err(IdentityError::NoOwner {
                inode: socket.inode,
            });
        };
        let rest: Vec<_> = resolved.collect();
        if rest
            .iter()
            .any(|other| !other.identity.same_policy_identity(&first.identity))
        {
            let pids = found.owners.iter().map(|owner| owner.pid()).collect();
            return Err(IdentityError::AmbiguousOwners {
                inode: socket.inode,
                pids,
            });
        }
        lock(&self.recent).touch(RecentPid {
            pid: first.identity.pid,
            start_time: first.start_time,
        });
        Ok(first.identity)
    }
}

impl IdentityResolver {
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

/// The recent list stays consistent under a panicking holder (each critical section is one
/// `VecDeque` operation), so a poisoned lock is used as is.
fn lock(mutex: &Mutex<RecentPids>) -> MutexGuard<'_, RecentPids> {
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
