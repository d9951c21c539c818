//! Inode → owning processes, without reading every process's fd table on the common path.
//!
//! Order of search, stopping at the first process that holds the socket:
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

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use std::sync::Arc;

use crate::procfs::{Parents, Pinned, ProcDir, ProcFs, SocketLink};
use crate::reads::Reads;
use crate::recent::RecentPid;
use crate::siblings::Siblings;

/// Newest children of each recent client checked before the scan (the scan covers the rest).
const RECENT_CHILDREN_LIMIT: usize = 8;
/// Descriptors the recent-client phase may read before it gives way to the scan: recent
/// clients can be long-lived programs with large fd tables, and a connection from an unrelated
/// fresh process must not pay for reading all of them.
const RECENT_FD_BUDGET: usize = 256;
/// The first window of the descending scan; each next window is four times larger.
const FIRST_WINDOW: u32 = 8;
/// Descriptors looked at around a hint before a whole table is read, at least and at most
/// (see [`near`]).
const NEAR_MIN: u32 = 3;
const NEAR_MAX: u32 = 512;
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
            #[cfg(test)]
            fds_read,
            #[cfg(test)]
            recent_fds_read,
        })
    }

    fn search_recent(&mut self, recent: &[RecentPid], stale: &mut Vec<RecentPid>) -> Option<u32> {
        for entry in recent {
            if self.reads.descriptors >= RECENT_FD_BUDGET || self.reads.spent() {
                break;
            }
            let kept = self
                .pinned
                .iter()
                .find(|pinned| pinned.pid() == entry.pid && pinned.start_time() == entry.start_time)
                .and_then(|pinned| pinned.proc_dir());
            let dir = match kept.map_or_else(|| self.proc.pid_dir(entry.pid), Ok) {
                Ok(dir)
                    if dir
                        .stat()
                        .is_ok_and(|stat| stat.start_time == entry.start_time) =>
                {
                    dir
                }
                _ => {
                    stale.push(*entry);
                    continue;
                }
            };
            let Err(dir) = self.check_dir_near(dir, entry.fd, entry.elsewhere) else {
                return Some(entry.pid);
            };
            let Err(dir) = self.check_dir_if_it_fits(dir) else {
                return Some(entry.pid);
            };
            if !self.may_list_children(thread_count(&dir)) {
                return None;
            }
            let children = dir.children().unwrap_or_default();
            for child in children.into_iter().rev().take(RECENT_CHILDREN_LIMIT) {
                if self.reads.descriptors >= RECENT_FD_BUDGET {
                    return None;
                }
                if self.check_by(child, Self::check_dir_if_it_fits) {
                    return Some(child);
                }
            }
        }
        None
    }

    fn scan(&mut self, socket_uid: u32) -> Option<u32> {
        if self.reads.spent() {
            return None;
        }
        // The processes forked last first, as the process connector told them: a fresh
        // client is one of them, found without listing `/proc`.
        let forks = self
            .kept_siblings
            .map(Siblings::newest_forks)
            .unwrap_or_default();
        for pid in forks {
            if self.checked.contains(&pid) {
                continue;
            }
            if self.reads.spent() {
                return None;
            }
            self.reads.small(1);
            // Another uid's process is left for the scan, which reads those last.
            if self.proc.dir_uid(pid).is_ok_and(|uid| uid == socket_uid) && self.check(pid) {
                return Some(pid);
            }
        }
        let mut other_uids = Vec::new();
        let last = self.proc.last_pid().ok();
        for (lo, hi) in scan_windows(last) {
            let Ok(pids) = self.proc.pids_in(lo, hi) else {
                continue;
            };
            for pid in pids.into_iter().rev() {
                if self.checked.contains(&pid) {
                    continue;
                }
                if self.reads.spent() {
                    return None;
                }
                self.reads.small(1);
                match self.proc.dir_uid(pid) {
                    Ok(uid) if uid == socket_uid => {
                        if self.check(pid) {
                            return Some(pid);
                        }
                    }
                    Ok(_) => other_uids.push(pid),
                    Err(_) => {}
                }
            }
        }
        if let Some(pid) = other_uids.into_iter().find(|pid| self.check(*pid)) {
            return Some(pid);
        }
        if self.reads.spent() {
            return None;
        }
        let all = self.proc.all_pids().unwrap_or_default();
        all.into_iter().rev().find(|pid| self.check(*pid))
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
        for _ in 0..MAX_CLIMB {
            let Some(parent) = ppid.filter(|parent| *parent > 1) else {
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
            match self.check_dir(dir) {
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
            match dir.children() {
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

    /// [`Self::check_dir`], unless this is a lookup (see [`Self::capping_recent_tables`])
    /// and the process's table is larger than what remains of [`RECENT_FD_BUDGET`]: then it
    /// is not read, nor marked as checked (the scan reads it in its turn).
    fn check_dir_if_it_fits(&mut self, dir: ProcDir) -> Result<(), ProcDir> {
        if self.capped_recent_tables && !self.checked.contains(&dir.pid()) {
            self.reads.small(1);
            let left = RECENT_FD_BUDGET.saturating_sub(self.reads.descriptors);
            if dir
                .fd_count()
                .is_some_and(|n| n > u64::try_from(left).unwrap_or(u64::MAX))
            {
                return Err(dir);
            }
        }
        self.check_dir(dir)
    }

    /// Looks at descriptor `fd` and the ones next to it, then next to `elsewhere` (see
    /// [`near`]; one `readlink` each; in a lookup, until [`RECENT_FD_BUDGET`] descriptors
    /// have been read): where a recent client held its last socket (and an earlier one far
    /// from it), or where an identified one held this socket. Only a process
    /// that holds the socket at one of them now is an owner by it; else (`Err`) the caller
    /// reads its whole table or leaves it for later. A process already checked is answered
    /// from that check.
    fn check_dir_near(
        &mut self,
        dir: ProcDir,
        fd: Option<u32>,
        elsewhere: Option<u32>,
    ) -> Result<(), ProcDir> {
        let pid = dir.pid();
        if self.checked.contains(&pid) {
            return self.check_dir(dir);
        }
        // `near` covers one run of numbers: the second hint skips what the first read.
        let first: Vec<u32> = fd.map(near).into_iter().flatten().collect();
        let (lo, hi) = (first.iter().min().copied(), first.iter().max().copied());
        let read_already =
            |fd: &u32| lo.is_some_and(|lo| lo <= *fd) && hi.is_some_and(|hi| *fd <= hi);
        let second = elsewhere.map(near).into_iter().flatten();
        for fd in first
            .iter()
            .copied()
            .chain(second.filter(|fd| !read_already(fd)))
        {
            // A lookup's recent pass probes no more than its own budget: another caller's
            // lookup must not spend hundreds of reads around a busy client's hint.
            if self.reads.spent()
                || (self.capped_recent_tables && self.reads.descriptors >= RECENT_FD_BUDGET)
            {
                return Err(dir);
            }
            self.reads.descriptor();
            if dir.fd_is(fd, &self.link) {
                self.checked.insert(pid);
                self.fds.insert(pid, fd);
                self.owners.insert(pid, dir);
                return Ok(());
            }
        }
        Err(dir)
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

/// The descriptors looked at around `hint` before a whole fd table is read: `hint`, then
/// alternately above and below it (`hint + 1`, `hint - 1`, `hint + 2`, ...). The kernel gives
/// a new descriptor the lowest free number, so a client's next socket lands next to its last
/// one when it keeps its connections open (above it), or in a gap it just closed (below it);
/// and since the numbers in use are about as many as the highest one, a quarter of `hint`
/// (at least [`NEAR_MIN`], at most [`NEAR_MAX`]) costs a small part of reading the table
/// that a miss reads anyway. A client holding thousands of connections is then found in a
/// few reads instead of one per connection it holds.
pub(crate) fn near(hint: u32) -> impl Iterator<Item = u32> {
    let probes = (hint / 4).clamp(NEAR_MIN, NEAR_MAX);
    (0..probes).filter_map(move |i| {
        let step = i.div_ceil(2);
        if i % 2 == 1 {
            hint.checked_add(step)
        } else {
            hint.checked_sub(step)
        }
    })
}

/// The pid ranges of the descending scan: growing windows from `last` down to 1, then
/// everything above `last` (pids handed out before a wrap-around, or since `last` was read).
/// Without `last`, one range covering every pid.
pub(crate) fn scan_windows(last: Option<u32>) -> Vec<(u32, u32)> {
    let Some(last) = last.filter(|last| *last > 0) else {
        return vec![(1, u32::MAX)];
    };
    let mut windows = Vec::new();
    let mut hi = last;
    let mut size = FIRST_WINDOW;
    loop {
        let lo = hi.saturating_sub(size - 1).max(1);
        windows.push((lo, hi));
        if lo == 1 {
            break;
        }
        hi = lo - 1;
        size = size.saturating_mul(4);
    }
    if last < u32::MAX {
        windows.push((last + 1, u32::MAX));
    }
    windows
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
mod tests {
    use super::*;

    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, ChildStdin, Command, Stdio};

    /// A python3 process that holds `sys.argv[1]` socket pairs (twice as many descriptors),
    /// then opens one socket per line read and says `<fd> <inode>` for each. The sockets are
    /// unix ones: the search only reads fd tables, any socket inode will do.
    const HOARDER: &str = "import os, resource, socket, sys\n\
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n\
        want = 2 * int(sys.argv[1]) + 64\n\
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))\n\
        pairs = [socket.socketpair() for _ in range(int(sys.argv[1]))]\n\
        kept = []\n\
        for line in sys.stdin:\n\
        \x20   words = line.split()\n\
        \x20   s = socket.socket(socket.AF_UNIX)\n\
        \x20   if words and words[0] == 'at':\n\
        \x20       os.dup2(s.fileno(), int(words[1])); s.close(); s = socket.socket(fileno=int(words[1]))\n\
        \x20   kept.append(s)\n\
        \x20   os.write(1, b'%d %d\\n' % (s.fileno(), os.fstat(s.fileno()).st_ino))\n";

    /// Held by every test that spawns a hoarder when they share a process (`cargo test`;
    /// nextest runs each in its own): one hoarder's thousands of descriptors, newer than
    /// another test's client, would be read by that test's scan.
    static HOARDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The hoarders' lock, held for the test, and `/proc`.
    fn hoarding() -> (std::sync::MutexGuard<'static, ()>, ProcFs) {
        let guard = HOARDING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (guard, ProcFs::open(Path::new("/proc")).unwrap())
    }

    struct Hoarder {
        child: Child,
        stdin: ChildStdin,
        stdout: BufReader<std::process::ChildStdout>,
    }

    impl Hoarder {
        fn spawn(pairs: usize) -> Self {
            let mut child = Command::new("/usr/bin/python3")
                .args(["-c", HOARDER, &pairs.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let stdin = child.stdin.take().unwrap();
            let stdout = BufReader::new(child.stdout.take().unwrap());
            Self {
                child,
                stdin,
                stdout,
            }
        }

        /// A new socket (at descriptor `at` if given): its (fd, inode).
        fn socket(&mut self, at: Option<u32>) -> (u32, u64) {
            let line = at.map_or_else(|| "new\n".to_owned(), |fd| format!("at {fd}\n"));
            self.stdin.write_all(line.as_bytes()).unwrap();
            self.stdin.flush().unwrap();
            let mut answer = String::new();
            self.stdout.read_line(&mut answer).unwrap();
            let mut words = answer.split_whitespace().map(|w| w.parse::<u64>().unwrap());
            let fd = u32::try_from(words.next().unwrap()).unwrap();
            (fd, words.next().unwrap())
        }

        fn recent(&self, proc: &ProcFs, fd: u32) -> RecentPid {
            let pid = self.child.id();
            let start_time = proc.pid_dir(pid).unwrap().stat().unwrap().start_time;
            RecentPid {
                pid,
                start_time,
                fd: Some(fd),
                elsewhere: None,
            }
        }
    }

    impl Drop for Hoarder {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn search(proc: &ProcFs, inode: u64, recent: RecentPid) -> Found {
        search_within(proc, inode, recent, usize::MAX).unwrap()
    }

    fn search_within(proc: &ProcFs, inode: u64, recent: RecentPid, limit: usize) -> Option<Found> {
        let uid = rustix::process::getuid().as_raw();
        OwnerSearch::new(proc, inode, std::process::id())
            .within(limit)
            .run(&[recent], uid)
    }

    /// A lookup's search (recent tables capped).
    fn lookup_search(proc: &ProcFs, inode: u64, recent: RecentPid) -> Found {
        let uid = rustix::process::getuid().as_raw();
        OwnerSearch::new(proc, inode, std::process::id())
            .capping_recent_tables()
            .run(&[recent], uid)
            .unwrap()
    }

    /// A recent client holding thousands of descriptors, and a new socket of another
    /// process: a lookup reads the recent client's table around its hint only, not whole,
    /// and finds the other process by the scan. A recheck (uncapped) reads it whole.
    #[test]
    fn a_lookup_does_not_read_a_large_recent_table_whole() {
        let (_hoarding, proc) = hoarding();
        if proc
            .pid_dir(std::process::id())
            .unwrap()
            .fd_count()
            .is_none()
        {
            // Before Linux 6.2 the kernel gives no table size: every table is read whole.
            return;
        }
        let mut hoarder = Hoarder::spawn(1500);
        let (last, _) = hoarder.socket(None);
        let recent = hoarder.recent(&proc, last);
        let mut other = Hoarder::spawn(1);
        let (fd, inode) = other.socket(None);

        let found = lookup_search(&proc, inode, recent);
        let pids: Vec<u32> = found.owners.iter().map(ProcDir::pid).collect();
        assert_eq!(pids, [other.child.id()]);
        assert_eq!(found.fds.get(&other.child.id()), Some(&fd));
        // The recent pass probes at most its own budget around the hint (its window is 512
        // there) and does not read the table.
        assert_eq!(found.recent_fds_read, RECENT_FD_BUDGET);
        // Against the same search uncapped, run next (so that whatever else the scan read,
        // other tests' processes included, it read in both): the recent table's 3,000.
        let uncapped = search(&proc, inode, recent);
        assert_eq!(uncapped.fds, found.fds);
        assert!(
            found.fds_read + 2_500 < uncapped.fds_read,
            "capped {}, uncapped {}",
            found.fds_read,
            uncapped.fds_read
        );
        assert!(
            uncapped.recent_fds_read > 3_000,
            "{}",
            uncapped.recent_fds_read
        );
    }

    /// A client holding thousands of sockets: its next one gets the lowest free descriptor,
    /// next to the last one identified, and is found there without reading the whole table.
    #[test]
    fn a_new_socket_of_a_client_with_thousands_is_found_near_its_last_descriptor() {
        let (_hoarding, proc) = hoarding();
        let mut client = Hoarder::spawn(1500);
        let (last, _) = client.socket(None);
        let (fd, inode) = client.socket(None);
        assert!(fd > 3000, "{fd}");
        let found = search(&proc, inode, client.recent(&proc, last));
        let pids: Vec<u32> = found.owners.iter().map(ProcDir::pid).collect();
        assert_eq!(pids, [client.child.id()]);
        assert_eq!(found.fds.get(&client.child.id()), Some(&fd));
        // The table holds over 3000 descriptors.
        assert!(found.fds_read < 100, "read {} descriptors", found.fds_read);
    }

    /// A client whose new socket fills a gap far below its last one, next to where an
    /// earlier one was found: found there, without reading the whole table.
    #[test]
    fn a_socket_in_a_gap_next_to_an_earlier_one_is_found_there() {
        let (_hoarding, proc) = hoarding();
        let mut client = Hoarder::spawn(1500);
        let (last, _) = client.socket(None);
        let (fd, inode) = client.socket(Some(1500));
        let recent = RecentPid {
            elsewhere: Some(1498),
            ..client.recent(&proc, last)
        };
        let found = search(&proc, inode, recent);
        assert_eq!(found.fds.get(&client.child.id()), Some(&fd));
        assert!(found.fds_read < 560, "read {} descriptors", found.fds_read);
    }

    /// The same client holding the socket far from where it held the last: found by its
    /// whole table, at the descriptor where it is.
    #[test]
    fn a_socket_far_from_the_hint_is_found_by_the_whole_table() {
        let (_hoarding, proc) = hoarding();
        let mut client = Hoarder::spawn(1500);
        let (last, _) = client.socket(None);
        let (fd, inode) = client.socket(Some(20));
        assert_eq!(fd, 20);
        let found = search(&proc, inode, client.recent(&proc, last));
        let pids: Vec<u32> = found.owners.iter().map(ProcDir::pid).collect();
        assert_eq!(pids, [client.child.id()]);
        assert_eq!(found.fds.get(&client.child.id()), Some(&20));
    }

    /// A search with a limit stops unfinished in the middle of one large table, and answers
    /// nothing: not the owner it had not reached, and no "nobody" either. The same search
    /// finishes under a limit above what the table costs, and then answers what the
    /// unbounded one does.
    #[test]
    fn a_search_that_reaches_its_limit_answers_nothing() {
        let (_hoarding, proc) = hoarding();
        let mut client = Hoarder::spawn(1500);
        let (last, _) = client.socket(None);
        let (fd, inode) = client.socket(Some(20));
        let recent = client.recent(&proc, last);
        // The descriptors around the hint (512 of them) alone cost more than 300 reads: the
        // search stops before it reads the whole table, where the socket is.
        assert!(search_within(&proc, inode, recent, 300).is_none());
        let found = search_within(&proc, inode, recent, 100_000).unwrap();
        assert_eq!(found.fds.get(&client.child.id()), Some(&fd));
        let unbounded = search(&proc, inode, recent);
        assert_eq!(found.fds, unbounded.fds);
    }

    #[test]
    fn windows_cover_every_pid_once_newest_first() {
        let windows = scan_windows(Some(1000));
        assert_eq!(windows[0], (993, 1000));
        assert_eq!(windows[1], (961, 992));
        assert_eq!(windows.last(), Some(&(1001, u32::MAX)));
        let mut covered: Vec<(u32, u32)> = windows.clone();
        covered.sort_unstable();
        assert_eq!(covered[0].0, 1);
        for pair in covered.windows(2) {
            assert_eq!(pair[0].1 + 1, pair[1].0, "gap or overlap in {windows:?}");
        }
        assert_eq!(covered.last().map(|w| w.1), Some(u32::MAX));
    }

    #[test]
    fn descriptors_near_a_hint_alternate_outwards() {
        assert_eq!(near(5).collect::<Vec<_>>(), [5, 6, 4]);
        assert_eq!(near(0).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(
            near(40).collect::<Vec<_>>(),
            [40, 41, 39, 42, 38, 43, 37, 44, 36, 45]
        );
        assert_eq!(near(10_000).count(), 512);
        assert_eq!(near(10_000).max(), Some(10_256));
        assert_eq!(near(10_000).min(), Some(9_745));
        assert_eq!(near(u32::MAX).max(), Some(u32::MAX));
    }

    #[test]
    fn small_and_missing_last_pid() {
        assert_eq!(scan_windows(Some(1)), [(1, 1), (2, u32::MAX)]);
        assert_eq!(scan_windows(Some(10)), [(3, 10), (1, 2), (11, u32::MAX)]);
        assert_eq!(scan_windows(None), [(1, u32::MAX)]);
        assert_eq!(scan_windows(Some(0)), [(1, u32::MAX)]);
        let top = scan_windows(Some(u32::MAX));
        assert_eq!(top.first().map(|w| w.1), Some(u32::MAX));
        assert_eq!(top.last().map(|w| w.0), Some(1));
    }
}
