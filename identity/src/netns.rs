//! Which network namespaces are searched for the client's socket, and one diag socket per
//! namespace.
//!
//! The proxy's own namespace is searched first, through a small pool of sockets (lookups run
//! on several blocking threads at once). A process registered with
//! [`add_namespace_pid`](crate::IdentityResolver::add_namespace_pid) contributes its namespace:
//! a short-lived helper thread enters it with `setns(CLONE_NEWNET)`, opens a netlink socket
//! there and exits; the socket stays bound to that namespace (and keeps it alive) for the life
//! of the resolver. Namespaces are keyed by the (device, inode) of `/proc/<pid>/ns/net`, so two
//! processes in one namespace share one socket. A registration that cannot be entered yet is
//! retried when a lookup would otherwise fail, and a lookup that could not search it says so.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rustix::thread::LinkNameSpaceType;

use crate::diag::{DiagSocket, SocketInfo};
use crate::error::IdentityError;
use crate::procfs::is_gone;

/// Idle own-namespace sockets kept for reuse; more are opened under load and closed after.
pub(crate) const POOL_SIZE: usize = 8;

/// (st_dev, st_ino) of a `ns/net` file: the namespace's identity.
type NsKey = (u64, u64);

/// The namespaces sluice searches and their sockets.
#[derive(Debug)]
pub(crate) struct Namespaces {
    proc_root: PathBuf,
    own_key: Option<NsKey>,
    own_pool: Mutex<Vec<DiagSocket>>,
    registered: Mutex<Registered>,
}

#[derive(Debug, Default)]
struct Registered {
    entries: Vec<Entry>,
    /// Registered pids whose namespace could not be entered yet.
    pending: Vec<u32>,
}

#[derive(Debug)]
struct Entry {
    key: NsKey,
    socket: Arc<Mutex<DiagSocket>>,
}

impl Namespaces {
    pub(crate) fn new(proc_root: &Path) -> Self {
        let own_key = ns_key_of_path(&proc_root.join("self/ns/net")).ok();
        Self {
            proc_root: proc_root.to_path_buf(),
            own_key,
            own_pool: Mutex::new(Vec::new()),
            registered: Mutex::new(Registered::default()),
        }
    }

    /// Registers `pid`'s namespace. Failures are kept and retried by [`Self::find`].
    pub(crate) fn add_pid(&self, pid: u32) {
        if self.try_add(pid).is_err() {
            let mut registered = lock(&self.registered);
            if !registered.pending.contains(&pid) {
                registered.pending.push(pid);
            }
        }
    }

    /// Finds the client's socket: own namespace first, then registered ones in order.
    pub(crate) fn find(
        &self,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Result<Option<SocketInfo>, IdentityError> {
        match self.find_once(peer, local)? {
            Some(info) => Ok(Some(info)),
            // An accepted connection's client socket exists until the client closes it, yet a
            // look made while the client's other connections churn has been seen to miss it
            // (a refused client under load, about 1 connection in 100). One more look, at
            // once (this may run on an async worker: no sleep); nobody found then is still
            // nobody, and refused.
            None => {
                std::thread::yield_now();
                if let Some(info) = self.find_once(peer, local)? {
                    return Ok(Some(info));
                }
                // A redirected connection whose source port NAT changed (the client's same
                // port already in use towards the listener: `conntrack`): its socket has the
                // port the tracking entry's original tuple names. Only sluice's own namespace,
                // where the redirect happened, has the entry; a table that cannot be read is
                // no answer, and nobody found is still nobody.
                match crate::conntrack::original_source(peer, local) {
                    Ok(Some(source)) => self.find_once(source, local),
                    Ok(None) | Err(_) => Ok(None),
                }
            }
        }
    }

    fn find_once(
        &self,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Result<Option<SocketInfo>, IdentityError> {
        if let Some(info) = self.find_in_own(peer, local)? {
            return Ok(Some(info));
        }
        let sockets: Vec<_> = lock(&self.registered)
            .entries
            .iter()
            .map(|entry| Arc::clone(&entry.socket))
            .collect();
        let mut unavailable = None;
        for socket in &sockets {
            match lock(socket).find(peer, local) {
                Ok(Some(info)) => return Ok(Some(info)),
                Ok(None) => {}
                // A namespace that cannot answer is reported only if no other one has the socket.
                Err(source) => unavailable = Some(IdentityError::SockDiag { source }),
            }
        }
        for pid in self.retry_pending() {
            match self.try_add(pid) {
                Ok(Some(socket)) => {
                    if let Some(info) = lock(&socket)
                        .find(peer, local)
                        .map_err(|source| IdentityError::SockDiag { source })?
                    {
                        return Ok(Some(info));
                    }
                }
                Ok(None) => {}
                Err(source) if is_gone(&source) => {}
                Err(source) => {
                    lock(&self.registered).pending.push(pid);
                    unavailable = Some(IdentityError::NamespaceUnavailable { pid, source });
                }
            }
        }
        unavailable.map_or(Ok(None), Err)
    }

    fn find_in_own(
        &self,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Result<Option<SocketInfo>, IdentityError> {
        let pooled = lock(&self.own_pool).pop();
        let mut socket = match pooled {
            Some(socket) => socket,
            None => DiagSocket::open().map_err(|source| IdentityError::SockDiag { source })?,
        };
        let result = socket
            .find(peer, local)
            .map_err(|source| IdentityError::SockDiag { source });
        if result.is_ok() {
            let mut pool = lock(&self.own_pool);
            if pool.len() < POOL_SIZE {
                pool.push(socket);
            }
        }
        result
    }

    fn retry_pending(&self) -> Vec<u32> {
        std::mem::take(&mut lock(&self.registered).pending)
    }

    /// Opens a socket in `pid`'s namespace unless one is already open for it.
    /// `Ok(None)`: nothing new (the proxy's own namespace, or already registered).
    fn try_add(&self, pid: u32) -> io::Result<Option<Arc<Mutex<DiagSocket>>>> {
        // The key comes from the opened file, so a pid reused between the two steps cannot
        // register one namespace under another's key.
        let ns_file = File::open(self.proc_root.join(pid.to_string()).join("ns/net"))?;
        let metadata = ns_file.metadata()?;
        let key = (metadata.dev(), metadata.ino());
        if Some(key) == self.own_key
            || lock(&self.registered)
                .entries
                .iter()
                .any(|entry| entry.key == key)
        {
            return Ok(None);
        }
        let socket = Arc::new(Mutex::new(open_in_namespace(ns_file)?));
        let mut registered = lock(&self.registered);
        if registered.entries.iter().any(|entry| entry.key == key) {
            return Ok(None);
        }
        registered.entries.push(Entry {
            key,
            socket: Arc::clone(&socket),
        });
        Ok(Some(socket))
    }
}

/// Creates a diag socket inside the namespace `ns_file` refers to. `setns` changes only the
/// calling thread, so a throwaway thread does it and ends; the proxy's threads never move.
fn open_in_namespace(ns_file: File) -> io::Result<DiagSocket> {
    let helper = std::thread::Builder::new()
        .name("sluice-netns".into())
        .spawn(move || {
            rustix::thread::move_into_link_name_space(
                ns_file.as_fd(),
                Some(LinkNameSpaceType::Network),
            )?;
            DiagSocket::open()
        })?;
    helper
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("network namespace helper thread panicked")))
}

fn ns_key_of_path(path: &Path) -> io::Result<NsKey> {
    let metadata = std::fs::metadata(path)?;
    Ok((metadata.dev(), metadata.ino()))
}

/// The guarded data stays consistent even if a holder panicked (every critical section is a
/// push, pop or clone), so a poisoned lock is used as is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
