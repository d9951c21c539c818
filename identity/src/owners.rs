//! Inode → owning processes, without reading every process's fd table on the common path.
//!
//! Order of search (`first`), stopping at the first process that holds the socket:
//! 1. recently identified clients (start time checked, so a reused pid is skipped) and their
//!    newest children, within a budget of descriptors read: an agent's next connection
//!    usually comes from one of them;
//! 2. the processes forked last that have not exited, newest first, as the process connector
//!    told them (`siblings`; none without it): a fresh client is found without listing `/proc`;
//! 3. every process, newest (highest pid) first, listed in windows that grow downwards from the
//!    last pid handed out, so a fresh client is found without listing all of `/proc`; processes
//!    whose `/proc/<pid>` belongs to the socket's uid are read first;
//! 4. a plain full listing, so the answer never depends on how procfs numbers its positions.
//!
//! The first owner's fork family then completes the owner set: every ancestor below init
//! (holding the socket or not), the children of every ancestor (the first owner's siblings,
//! its parent's siblings, and so on up), and the descendants of every owner found. Fork is the
//! only way a socket reaches another process that this search follows; see the crate
//! documentation for what it does not. The cost of that completion grows with the number of
//! children of the client's ancestors: each ancestor's `children` are listed at every lookup,
//! and a sibling's fd table is read when no earlier lookup kept it (`siblings`; without the
//! process connector, at every lookup).

mod first;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use std::sync::Arc;

use crate::kept::KeptFiles;
use crate::procfs::{Parents, Pinned, ProcDir, ProcFs, SocketLink};
use crate::quiet::Counts;
use crate::reads::Reads;
use crate::recent::RecentPid;
use crate::siblings::Siblings;

/// Ancestors climbed (the ancestor walk's bound; init ends it sooner).
const MAX_CLIMB: usize = 64;

/// What a search found: the owners (ascending by pid) and recent entries that proved stale.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) owners: Vec<ProcDir>,
    /// The descriptor number under which each owner holds the socket (by pid).
    pub(crate) fds: BTreeMap<u32, u32>,
    pub(crate) stale: Vec<RecentPid>,
    /// The ancestors the climb opened that do not hold the socket, for reading identities.
    pub(crate) parents: Parents,
    /// Every ancestor below init with the counts it was found quiet under, when the climb
    /// reached init and found each one quiet and not holding the socket (what a family
    /// snapshot is taken from: `procfs::family`); `None` otherwise.
    pub(crate) ancestry: Option<Vec<(Arc<KeptFiles>, Counts)>>,
    /// Descriptors looked at (each one `readlink`) until the first owner was found: what the
    /// tests measure the search order by (the family completion after it reads the tables
    /// of whatever else runs beside the test).
    #[cfg(test)]
    pub(crate) fds_read: usize,
    /// Descriptors looked at in the recent pass alone.
    #[cfg(test)]
    pub(crate) recent_fds_read: usize,
}

/// One search for the holders of one socket.
#[derive(Debug)]
pub(crate) struct OwnerSearch<'a> {
    proc: &'a ProcFs,
    link: SocketLink,
    checked: HashSet<u32>,
    owners: BTreeMap<u32, ProcDir>,
    fds: BTreeMap<u32, u32>,
    /// What it has read so far, and how much it may.
    reads: Reads,
    /// Whether the recent phase reads a recent process's whole fd table only when it fits in
    /// what remains of [`RECENT_FD_BUDGET`] (a lookup, where recent clients are guesses);
    /// else always (a recheck, whose one hint is the process identified before).
    capped_recent_tables: bool,
    /// Whether the children of ancestors that do not hold the socket are read.
    siblings: bool,
    parents: Parents,
    /// Processes identified before and still kept for their connections: a recent client
    /// among them is read through the files kept with it.
    pinned: Vec<Arc<Pinned>>,
    /// The socket's inode.
    inode: u64,
    /// The sibling tables kept across lookups, when this search may use them.
    kept_siblings: Option<&'a Siblings>,
    /// What the climb found of the ancestors (see [`Found::ancestry`]).
    ancestry: Option<Vec<(Arc<KeptFiles>, Counts)>>,
    /// The process never read (sluice).
    skip: u32,
}

impl<'a> OwnerSearch<'a> {
    /// `skip` is never read: the proxy itself, which cannot hold a client's socket (a socket
    /// only moves down a fork, or through SCM_RIGHTS, which sluice never receives) and whose own
    /// fd table is the largest on the host.
    pub(crate) fn new(proc: &'a ProcFs, inode: u64, skip: u32) -> Self {
        Self {
            proc,
            link: SocketLink::new(inode),
            checked: HashSet::from([skip]),
            owners: BTreeMap::new(),
            fds: BTreeMap::new(),
            reads: Reads::unlimited(),
            capped_recent_tables: false,
            siblings: true,
            parents: Parents::default(),
            pinned: Vec::new(),
            inode,
            kept_siblings: None,
            ancestry: None,
            skip,
        }
    }

    /// Reads siblings through the tables `kept` keeps across lookups (see `siblings`).
    pub(crate) fn with_kept_siblings(mut self, kept: &'a Siblings) -> Self {
        self.kept_siblings = Some(kept);
        self
    }

    /// Reads the recent clients among `pinned` through the files kept with them.
    pub(crate) fn with_pinned(mut self, pinned: Vec<Arc<Pinned>>) -> Self {
        self.pinned = pinned;
        self
    }

    /// A search that stops, unfinished, once it has read `limit` descriptors' worth of
    /// `/proc` (see [`Reads`]): for running where a long search would hold up other work, and
    /// again unbounded elsewhere when it does not finish. An unfinished search answers
    /// nothing (see [`Self::run`]).
    pub(crate) fn within(mut self, limit: usize) -> Self {
        self.reads = Reads::within(limit);
        self
    }

    /// A lookup's search: a recent process (or a recent client's child) whose fd table is
    /// larger than what remains of [`RECENT_FD_BUDGET`] is not read whole in the recent phase,
    /// only around its hints, and is left for the scan. A client holding thousands of
    /// connections then costs other callers' lookups a few hundred reads, not all of its
    /// table. Where the kernel does not give the table's size, the table is read whole.
    pub(crate) fn capping_recent_tables(mut self) -> Self {
        self.capped_recent_tables = true;
        self
    }

    /// A search for a socket already identified, where only new holders matter. Every
    /// ancestor is still checked, but the children of the ones that do not hold the socket are
    /// not read: such a child could only have got the socket by fork from a holder (then it is
    /// a holder's descendant, which the search reads) or over `SCM_RIGHTS` (which no fork-family
    /// step finds), so it holds it now only if it did when the lookup read it. This keeps a
    /// recheck as cheap for a client with thousands of siblings as for any other.
    pub(crate) fn without_siblings(mut self) -> Self {
        self.siblings = false;
        self
    }

    /// The owners of the socket, or `None` when the search reached its limit (see
    /// [`Self::within`]) before it could say.
    pub(crate) fn run(mut self, recent: &[RecentPid], socket_uid: u32) -> Option<Found> {
        let mut stale = Vec::new();
        let first = self.search_recent(recent, &mut stale);
        #[cfg(test)]
        let recent_fds_read = self.reads.descriptors;
        let first = first.or_else(|| self.scan(socket_uid));
        #[cfg(test)]
        let fds_read = self.reads.descriptors;
        if let Some(first) = first {
            self.complete(first);
        }
        if self.reads.spent() {
            return None;
        }
        Some(Found {
            owners: self.owners.into_values().collect(),
            fds: self.fds,
            stale,
            parents: self.parents,
            ancestry: self.ancestry,
            #[cfg(test)]
            fds_read,
            #[cfg(test)]
            recent_fds_read,
        })
    }

    fn complete(&mut self, first: u32) {
        let mut to_expand = vec![first];
        let mut children_unreadable = false;

        // Up: every ancestor below init, whether or not it holds the socket. A socket reaches
        // a process by fork from any ancestor (the creator may have forked a helper that closed
        // its copy before forking the holder found first), so the climb does not stop at the
        // first ancestor without it. Each ancestor that holds it is expanded below; the
        // children of each one that does not are read (it may have forked others with the
        // socket, then closed its own copy). Init's children are every orphan on the host (or
        // in its pid namespace): the climb stops there.
        let first_stat = self.owners.get(&first).and_then(|dir| dir.stat().ok());
        let mut ppid = first_stat.map(|stat| stat.ppid);
        // The process whose parent is opened next: (pid, start time).
        let mut child = first_stat.map(|stat| (first, stat.start_time));
        // The ancestors found quiet, while every one so far was; `None` once one was not.
        let mut quiet_climb = first_stat.map(|_| Vec::new());
        for _ in 0..MAX_CLIMB {
            let Some(parent) = ppid.filter(|parent| *parent > 1) else {
                self.ancestry = quiet_climb.take();
                break;
            };
            if self.reads.spent() {
                return;
            }
            let Ok(dir) = self.proc.pid_dir_kept(parent) else {
                break;
            };
            let init = self.proc.is_namespace_init(&dir);
            let stat = dir.stat().ok();
            ppid = stat.map(|stat| stat.ppid);
            let opened_for = std::mem::replace(&mut child, stat.map(|s| (parent, s.start_time)));
            let checked = self.check_dir(dir);
            // sluice itself (an ancestor under `sluice exec`) is never read, and never holds a
            // client's socket (see [`Self::new`]).
            quiet_climb = quiet_climb.and_then(|mut climb| {
                if parent != self.skip {
                    climb.push(checked.as_ref().err()?.quiet_proof()?);
                }
                Some(climb)
            });
            match checked {
                Ok(()) if !init => to_expand.push(parent),
                Ok(()) => {}
                Err(dir) => {
                    if !init && self.siblings {
                        if !self.may_list_children(thread_count(&dir)) {
                            return;
                        }
                        match dir.children() {
                            Ok(children) => {
                                let holding = self.holding_children(children);
                                to_expand.extend(holding);
                            }
                            Err(_) => children_unreadable = true,
                        }
                    }
                    if let Some((pid, start_time)) = opened_for {
                        self.parents.keep(pid, start_time, dir);
                    }
                }
            }
            if init {
                self.ancestry = quiet_climb.take();
                break;
            }
        }

        // Down: anything an owner forked after creating or inheriting the socket.
        let mut expanded = HashSet::new();
        while let Some(pid) = to_expand.pop() {
            if !expanded.insert(pid) {
                continue;
            }
            let Some(threads) = self.owners.get(&pid).map(thread_count) else {
                continue;
            };
            if !self.may_list_children(threads) {
                return;
            }
            let Some(dir) = self.owners.get(&pid) else {
                continue;
            };
            let children = dir.children();
            // A family snapshot is of a first holder with no child but sluice, and few
            // enough threads to keep each one's `children` file (`procfs::family`).
            if pid == first
                && (threads > crate::kept::FAMILY_THREADS
                    || children
                        .as_ref()
                        .map_or(true, |children| children.iter().any(|c| *c != self.skip)))
            {
                self.ancestry = None;
            }
            match children {
                Ok(children) => {
                    for child in children {
                        if self.check(child) {
                            to_expand.push(child);
                        }
                    }
                }
                // An owner that exited has no children to search; one that is alive but whose
                // children cannot be listed (no CONFIG_PROC_CHILDREN) needs the full scan.
                Err(_) if dir.stat_fresh().is_ok() => children_unreadable = true,
                Err(_) => {}
            }
        }

        if children_unreadable && !self.reads.spent() {
            for pid in self.proc.all_pids().unwrap_or_default() {
                self.check(pid);
            }
        }
    }

    /// Charges the reads of a process's children (one `children` file for each of its
    /// `threads`) and says whether the search may still make them.
    fn may_list_children(&mut self, threads: usize) -> bool {
        self.reads.small(threads);
        !self.reads.spent()
    }

    /// Whether `pid` holds the socket; each pid is read at most once per search.
    fn check(&mut self, pid: u32) -> bool {
        if self.checked.contains(&pid) {
            return self.owners.contains_key(&pid);
        }
        if self.reads.spent() {
            return false;
        }
        self.checked.insert(pid);
        self.reads.process();
        let Ok(Some(fd)) = self.proc.table_holding(pid, &self.link, &mut self.reads) else {
            return false;
        };
        self.own_if_holding(pid, fd)
    }

    /// [`Self::check`] of a sibling (a child of an ancestor that does not hold the socket):
    /// whether it holds it, and the inodes of the sockets its table holds when it was read in
    /// full without it (for `siblings` to keep).
    fn check_sibling(&mut self, pid: u32) -> (bool, Option<Vec<u64>>) {
        if self.checked.contains(&pid) {
            return (self.owners.contains_key(&pid), None);
        }
        if self.reads.spent() {
            return (false, None);
        }
        self.checked.insert(pid);
        self.reads.process();
        match self.proc.table_sockets(pid, &self.link, &mut self.reads) {
            Ok((Some(fd), _)) => (self.own_if_holding(pid, fd), None),
            Ok((None, sockets)) => (false, sockets),
            Err(_) => (false, None),
        }
    }

    /// The children of a non-holding ancestor that hold the socket, newest first: each is
    /// read, except those whose table `siblings` kept from an earlier lookup without the
    /// socket (see `siblings` for why they need not be).
    fn holding_children(&mut self, children: Vec<u32>) -> Vec<u32> {
        let mut holding = Vec::new();
        let mut unread = Vec::new();
        for child in children.into_iter().rev() {
            if self.checked.contains(&child) {
                if self.owners.contains_key(&child) {
                    holding.push(child);
                }
            } else {
                unread.push(child);
            }
        }
        let Some(kept) = self.kept_siblings else {
            holding.extend(unread.into_iter().filter(|child| self.check(*child)));
            return holding;
        };
        if unread.is_empty() {
            // No table to read or to answer from: the process connector need not be read.
            return holding;
        }
        let plan = kept.plan(unread, self.inode);
        let mut read = Vec::with_capacity(plan.read.len());
        for child in &plan.read {
            let (holds, sockets) = self.check_sibling(*child);
            if holds {
                holding.push(*child);
            }
            read.push((*child, sockets));
        }
        kept.record(plan, read);
        holding
    }

    /// Makes `pid` an owner if the process that has it now holds the socket (at `fd`, where
    /// a read of its table found it, or, moved, anywhere in its table).
    fn own_if_holding(&mut self, pid: u32, fd: u32) -> bool {
        // Most processes read do not hold the socket: their table is read without opening
        // the process first. One that does is opened now, and is an owner only if the
        // process that has the pid now holds the socket: whoever had the pid during the
        // first read, the owner kept is one that holds it.
        let Ok(dir) = self.proc.pid_dir(pid) else {
            return false;
        };
        let fd = if dir.fd_is(fd, &self.link) {
            fd
        } else {
            match dir.holding_fd(&self.link, &mut self.reads) {
                Ok(Some(fd)) => fd,
                _ => return false,
            }
        };
        self.fds.insert(pid, fd);
        self.owners.insert(pid, dir);
        true
    }

    /// [`Self::check`], reading the process opened with `how` ([`Self::check_dir`] or
    /// [`Self::check_dir_if_it_fits`]).
    fn check_by(&mut self, pid: u32, how: fn(&mut Self, ProcDir) -> Result<(), ProcDir>) -> bool {
        if self.checked.contains(&pid) {
            return self.owners.contains_key(&pid);
        }
        if self.reads.spent() {
            return false;
        }
        match self.proc.pid_dir(pid) {
            Ok(dir) => how(self, dir).is_ok(),
            Err(_) => {
                self.checked.insert(pid);
                false
            }
        }
    }

    /// Like [`Self::check`] for an already opened process: `Ok` if it holds the socket (the
    /// handle is kept as an owner), else the handle back.
    fn check_dir(&mut self, dir: ProcDir) -> Result<(), ProcDir> {
        let pid = dir.pid();
        if self.checked.contains(&pid) {
            return if self.owners.contains_key(&pid) {
                Ok(())
            } else {
                Err(dir)
            };
        }
        if self.reads.spent() {
            return Err(dir);
        }
        self.checked.insert(pid);
        self.reads.process();
        // Permission errors and vanished processes are "not an owner", never fatal. A table
        // read only in part (the search's limit reached) says nothing either way: the search
        // is then unfinished and answers nothing.
        match dir.holding_fd(&self.link, &mut self.reads) {
            Ok(Some(fd)) => {
                self.fds.insert(pid, fd);
                self.owners.insert(pid, dir);
                Ok(())
            }
            _ => Err(dir),
        }
    }
}

/// The threads whose `children` files listing `dir`'s children reads (one when its `stat`
/// cannot be read: the read then fails on its own).
fn thread_count(dir: &ProcDir) -> usize {
    dir.stat().map_or(1, |stat| {
        usize::try_from(stat.num_threads)
            .unwrap_or(usize::MAX)
            .max(1)
    })
}
/// Every process holding the inode, found by reading every process's fd table (the reference's
/// approach, kept for comparison in the benchmark). Unreadable processes are skipped.
pub fn full_scan_owners(proc_root: &Path, inode: u64) -> Vec<u32> {
    let Ok(proc) = ProcFs::open(proc_root) else {
        return Vec::new();
    };
    let link = SocketLink::new(inode);
    proc.all_pids()
        .unwrap_or_default()
        .into_iter()
        .filter(|pid| {
            proc.pid_dir(*pid)
                .and_then(|dir| dir.holds(&link))
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests;
