//! What a caller is: the identity types, and reading one owner's identity from `/proc`.
//!
//! Everything here is read fresh for each lookup: `exe` changes with execve and the parent
//! with reparenting, under the same pid. The ancestor walk checks each hop (see
//! `next_ancestor`) so a parent that exits mid-walk never leaves an unrelated process, which
//! inherited its pid number, in the chain.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::IdentityError;
use crate::procfs::{Parents, Pinned, ProcDir, ProcFs, SocketLink, is_gone, strip_deleted};
use crate::reads::Reads;
use crate::vouch::Vouch;

/// Ancestor hops walked at most (the reference's bound).
pub(crate) const MAX_ANCESTORS: usize = 64;
/// Times one hop is retried when the parent changes under the walk (reparenting).
const HOP_RETRIES: usize = 4;

/// The program on the other end of a connection, as policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The owning process (the lowest pid when several processes with one identity share the
    /// socket).
    pub pid: u32,
    /// The kernel-resolved executable path (`readlink /proc/<pid>/exe`), without the kernel's
    /// ` (deleted)` suffix when the binary was unlinked (then `exe_deleted` is set).
    pub exe: String,
    /// The executable was unlinked (replaced or removed) after the process started it.
    pub exe_deleted: bool,
    /// The real uid of the process.
    pub uid: u32,
    /// The process's argv.
    pub cmdline: Vec<String>,
    /// Parent first, up to and including pid 1 (or the last process visible in this pid
    /// namespace), at most 64.
    pub ancestors: Vec<Ancestor>,
    /// Absolute argv entries of the process and its ancestors, first occurrence first, without
    /// duplicates and without the exe paths themselves. Shown in deny reasons; not matched.
    pub cmdline_paths: Vec<String>,
    /// When the process started (clock ticks after boot, field 22 of `/proc/<pid>/stat`): with
    /// the pid it names one process, never a later one that reused the pid number.
    pub start_time: u64,
    /// The client's socket this identity was read from.
    pub socket: ClientSocket,
    /// The identified process, kept open for the later checks of this connection.
    pub(crate) holder: Holder,
}

/// Where a connection's later checks look: the identified process kept open (shared by the
/// connections of that process) and the descriptor it last held the socket under. Not part
/// of what an identity *is*: two identities read from one socket compare equal whichever
/// handle each keeps.
#[derive(Debug, Clone, Default)]
pub(crate) struct Holder(Option<Arc<HolderState>>);

#[derive(Debug)]
struct HolderState {
    pinned: Arc<Pinned>,
    link: SocketLink,
    /// The descriptor under which the process last held the socket (`NO_FD` when unknown).
    fd: AtomicU32,
}

const NO_FD: u32 = u32::MAX;

impl Holder {
    pub(crate) fn new(pinned: Arc<Pinned>, inode: u64, fd: Option<u32>) -> Self {
        Self(Some(Arc::new(HolderState {
            pinned,
            link: SocketLink::new(inode),
            fd: AtomicU32::new(fd.unwrap_or(NO_FD)),
        })))
    }

    /// Whether the kept process still holds the socket and runs `exe` (`None` when no process
    /// is kept). One `readlink` of the descriptor it last held the socket under and one of its
    /// `exe`; a socket moved to another descriptor of the same process costs a read of its fd
    /// table, counted in `reads` (and cut short when they are spent: then a `false` says
    /// nothing), and is then looked for under the new number.
    pub(crate) fn still_holds(
        &self,
        exe: &str,
        exe_deleted: bool,
        reads: &mut Reads,
    ) -> Option<bool> {
        let state = self.0.as_ref()?;
        let pinned = &state.pinned;
        let last = state.fd.load(Ordering::Relaxed);
        let holds = (last != NO_FD && pinned.fd_is(last, &state.link))
            || match pinned.holding_fd(&state.link, reads) {
                Ok(Some(fd)) => {
                    state.fd.store(fd, Ordering::Relaxed);
                    true
                }
                _ => false,
            };
        Some(
            holds
                && pinned.exe_raw().is_ok_and(|raw| {
                    let (now, deleted) = strip_deleted(raw, exists);
                    now == exe && deleted == exe_deleted
                }),
        )
    }
}

impl Holder {
    /// The kept process, if any.
    pub(crate) fn pinned(&self) -> Option<&Arc<Pinned>> {
        self.0.as_ref().map(|state| &state.pinned)
    }
}

impl PartialEq for Holder {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Holder {}

/// The client's end of a connection, as the kernel names it. One TCP connection keeps one
/// socket for its whole life, so later checks of the same connection start from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientSocket {
    /// The socket's inode (`socket:[<inode>]` in the holders' fd tables).
    pub inode: u64,
    /// The uid that created the socket.
    pub uid: u32,
    /// The descriptor number under which the identified process held it (where a later check
    /// looks first).
    pub fd: Option<u32>,
}

/// One process on the ancestor chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ancestor {
    /// The ancestor's pid.
    pub pid: u32,
    /// Its executable path; empty when the kernel would not show it (a process of another user
    /// without CAP_SYS_PTRACE, or one without an executable). An empty exe matches no policy.
    pub exe: String,
    /// Its argv.
    pub cmdline: Vec<String>,
}

impl Identity {
    /// This identity without the raw command lines of the process and its ancestors: what
    /// [`crate::IdentityResolver::confirm`] and [`crate::IdentityResolver::recheck`] need
    /// (pids, start time, executables, `cmdline_paths`, the socket and the kept handle), for a
    /// caller that keeps the command lines in a form of its own and holds this identity for
    /// the life of a connection. `cmdline` and each ancestor's `cmdline` are empty afterwards.
    #[must_use]
    pub fn without_cmdlines(mut self) -> Identity {
        self.cmdline = Vec::new();
        for ancestor in &mut self.ancestors {
            ancestor.cmdline = Vec::new();
        }
        self
    }

    /// The ancestors' executables, parent first, leaving out those that could not be read.
    pub fn ancestor_exes(&self) -> Vec<String> {
        self.ancestors
            .iter()
            .filter(|ancestor| !ancestor.exe.is_empty())
            .map(|ancestor| ancestor.exe.clone())
            .collect()
    }

    /// Whether two owners of one socket would be judged alike: same exe, same ancestor exes,
    /// same cmdline paths (the reference's comparison, minus its binary hash).
    pub(crate) fn same_policy_identity(&self, other: &Self) -> bool {
        self.exe == other.exe
            && self.exe_deleted == other.exe_deleted
            && self.cmdline_paths == other.cmdline_paths
            && self.ancestors.len() == other.ancestors.len()
            && self
                .ancestors
                .iter()
                .zip(&other.ancestors)
                .all(|(a, b)| a.exe == b.exe)
    }
}

/// Reads the identity of an owner of `socket` found by the search. The handle pins the
/// process, so a read that fails because it is gone means it exited.
pub(crate) fn read_identity(
    proc: &ProcFs,
    parents: &Parents,
    owner: &ProcDir,
    socket: ClientSocket,
) -> Result<Identity, IdentityError> {
    let pid = owner.pid();
    let failed = gone_or_unreadable(pid);
    let stat = owner.stat().map_err(failed)?;
    let (exe, exe_deleted) = read_exe(owner)?;
    // A path that may not name the file the process runs is not judged at all (`vouch`).
    match owner.vouch(&exe, exe_deleted).map_err(failed)? {
        Vouch::Believed => {}
        Vouch::OtherUserNamespace => return Err(IdentityError::OtherUserNamespace { pid, exe }),
        Vouch::OtherFile => return Err(IdentityError::OtherFile { pid, exe }),
    }
    let uid = owner.real_uid().map_err(failed)?;
    let cmdline = owner.cmdline().map_err(failed)?;
    let ancestors = read_ancestors(proc, parents, owner)?;
    let cmdline_paths = cmdline_paths(&exe, &cmdline, &ancestors);
    Ok(Identity {
        pid,
        exe,
        exe_deleted,
        uid,
        cmdline,
        ancestors,
        cmdline_paths,
        start_time: stat.start_time,
        socket,
        holder: Holder::default(),
    })
}

/// An owner's executable, without ` (deleted)` (and whether it had it): what tells the program
/// a process runs now from the one it ran before an execve.
pub(crate) fn read_exe(owner: &ProcDir) -> Result<(String, bool), IdentityError> {
    let raw = owner.exe_raw().map_err(gone_or_unreadable(owner.pid()))?;
    Ok(strip_deleted(raw, exists))
}

fn gone_or_unreadable(pid: u32) -> impl Fn(std::io::Error) -> IdentityError + Copy {
    move |source| {
        if is_gone(&source) {
            IdentityError::ProcessExited { pid }
        } else {
            IdentityError::ProcUnreadable { pid, source }
        }
    }
}

fn exists(path: &str) -> bool {
    Path::new(path).symlink_metadata().is_ok()
}

fn read_ancestors(
    proc: &ProcFs,
    parents: &Parents,
    owner: &ProcDir,
) -> Result<Vec<Ancestor>, IdentityError> {
    let mut ancestors = Vec::new();
    let mut child_dir: Option<Hop<'_>> = None;
    while ancestors.len() < MAX_ANCESTORS {
        let child = child_dir.as_ref().map_or(owner, Hop::dir);
        let Some((dir, ancestor)) = next_ancestor(proc, parents, child)? else {
            break;
        };
        let reached_init = ancestor.pid == 1;
        ancestors.push(ancestor);
        if reached_init {
            break;
        }
        child_dir = Some(dir);
    }
    Ok(ancestors)
}

/// A parent's handle on the ancestor walk: kept from the search, or opened by the walk.
enum Hop<'a> {
    Kept(&'a ProcDir),
    Opened(ProcDir),
}

impl Hop<'_> {
    fn dir(&self) -> &ProcDir {
        match self {
            Hop::Kept(dir) => dir,
            Hop::Opened(dir) => dir,
        }
    }
}

/// Reads `child`'s parent (`None` when it has none in this pid namespace).
///
/// The parent pid was read from the child's `stat`; the process opened under that pid
/// afterwards is the parent unless the parent exited in between and the pid was reused. A
/// reused pid belongs to a process started after the child (the child existed before its
/// parent exited), so a process that started in an earlier clock tick than the child is the
/// parent. When the ticks are equal, the child's parent pid is read again after opening: if it
/// is unchanged, the opened process is the parent, because a pid is freed only after the
/// exiting process's children were reparented. A parent that exits during the reads leaves the
/// child with another parent, and the hop is read again from there.
///
/// The search's handle on the parent is used when it was opened for this child (same pid and
/// start time) under the pid read here: it was opened after a read of this child's `stat`
/// named that parent, as a handle opened now would be. A handle kept from an earlier lookup
/// whose process held the pid from before the child's first `stat` read until after it (see
/// `ProcDir::held_its_pid_when_read`) needs no second read of the child's parent pid.
fn next_ancestor<'a>(
    proc: &ProcFs,
    parents: &'a Parents,
    child: &ProcDir,
) -> Result<Option<(Hop<'a>, Ancestor)>, IdentityError> {
    let child_gone = |_| IdentityError::ProcessExited { pid: child.pid() };
    let child_stat = child.stat().map_err(child_gone)?;
    let mut ppid = child_stat.ppid;
    for _ in 0..HOP_RETRIES {
        if ppid == 0 {
            return Ok(None);
        }
        let kept = parents.of(child.pid(), child_stat.start_time, ppid);
        let opened = match kept {
            Some(dir) => Ok(Hop::Kept(dir)),
            None => proc.pid_dir_kept(ppid).map(Hop::Opened),
        };
        let hop = match opened {
            Ok(hop) => hop,
            // The parent exited after the first read: the child is being reparented.
            Err(source) if is_gone(&source) => {
                ppid = child.stat_fresh().map_err(child_gone)?.ppid;
                continue;
            }
            Err(source) => return Err(IdentityError::ProcUnreadable { pid: ppid, source }),
        };
        let dir = hop.dir();
        let Ok(stat) = dir.stat() else {
            ppid = child.stat_fresh().map_err(child_gone)?.ppid;
            continue;
        };
        // A kept handle that named one process from before the child's first `stat` read to
        // after it is the process the pid that read named: the parent, with no second read.
        let named_by_first_read = ppid == child_stat.ppid && dir.held_its_pid_when_read(child);
        if stat.start_time >= child_stat.start_time && !named_by_first_read {
            let now = child.stat_fresh().map_err(child_gone)?.ppid;
            if now != ppid {
                ppid = now;
                continue;
            }
        }
        // Another user's process without CAP_SYS_PTRACE, or one with no executable, keeps its
        // place in the chain with an empty exe; a failure because it exited re-reads the hop.
        // So does one whose path may not name the file it runs (`vouch`): it matches no
        // entry's binaries.
        // One that has not run since this lookup found it quiet is credited with the path
        // it had when it was last read so (see `quiet::Quiet::exe`).
        let exe = match dir.quiet_exe() {
            Some(exe) => Ok(exe),
            None => dir.exe_raw().map(|raw| {
                let (exe, deleted) = strip_deleted(raw, exists);
                let believed = match dir.vouch(&exe, deleted) {
                    Ok(Vouch::Believed) => exe,
                    Ok(_) => String::new(),
                    Err(_) => return String::new(),
                };
                dir.keep_quiet_exe(&believed);
                believed
            }),
        };
        let cmdline = dir.cmdline();
        if (exe.is_err() || cmdline.is_err()) && dir.stat_fresh().is_err() {
            ppid = child.stat_fresh().map_err(child_gone)?.ppid;
            continue;
        }
        let (exe, cmdline) = (exe.unwrap_or_default(), cmdline.unwrap_or_default());
        return Ok(Some((
            hop,
            Ancestor {
                pid: ppid,
                exe,
                cmdline,
            },
        )));
    }
    Err(IdentityError::ProcessExited { pid: ppid })
}

/// Absolute argv entries of the process, then of each ancestor, deduplicated, leaving out the
/// exe paths of the chain (they are reported as exe and ancestors already).
pub(crate) fn cmdline_paths(exe: &str, cmdline: &[String], ancestors: &[Ancestor]) -> Vec<String> {
    let exes: HashSet<&str> = std::iter::once(exe)
        .chain(ancestors.iter().map(|ancestor| ancestor.exe.as_str()))
        .collect();
    let mut seen = HashSet::new();
    cmdline
        .iter()
        .chain(ancestors.iter().flat_map(|ancestor| &ancestor.cmdline))
        .filter(|arg| {
            arg.starts_with('/') && !exes.contains(arg.as_str()) && seen.insert(arg.as_str())
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| (*item).to_owned()).collect()
    }

    fn ancestor(pid: u32, exe: &str, cmdline: &[&str]) -> Ancestor {
        Ancestor {
            pid,
            exe: exe.into(),
            cmdline: strings(cmdline),
        }
    }

    fn identity(pid: u32, exe: &str, ancestors: Vec<Ancestor>) -> Identity {
        let cmdline = strings(&[exe]);
        let cmdline_paths = cmdline_paths(exe, &cmdline, &ancestors);
        Identity {
            pid,
            exe: exe.into(),
            exe_deleted: false,
            uid: 0,
            cmdline,
            ancestors,
            cmdline_paths,
            start_time: 1,
            socket: ClientSocket {
                inode: 9,
                uid: 0,
                fd: None,
            },
            holder: Holder::default(),
        }
    }

    #[test]
    fn cmdline_paths_are_absolute_deduplicated_and_exclude_exes() {
        let ancestors = vec![
            ancestor(10, "/usr/bin/bash", &["/bin/bash", "/work/build.sh", "-x"]),
            ancestor(1, "/sbin/init", &["/sbin/init", "/work/build.sh"]),
        ];
        let paths = cmdline_paths(
            "/usr/bin/python3.11",
            &strings(&[
                "/usr/bin/python3",
                "/work/tool.py",
                "rel/path",
                "/usr/bin/python3.11",
                "/usr/bin/bash",
            ]),
            &ancestors,
        );
        assert_eq!(
            paths,
            strings(&[
                "/usr/bin/python3",
                "/work/tool.py",
                "/bin/bash",
                "/work/build.sh"
            ])
        );
    }

    #[test]
    fn ancestor_exes_skip_unreadable_ones() {
        let id = identity(
            5,
            "/usr/bin/curl",
            vec![ancestor(4, "/usr/bin/bash", &[]), ancestor(1, "", &[])],
        );
        assert_eq!(id.ancestor_exes(), strings(&["/usr/bin/bash"]));
    }

    #[test]
    fn siblings_with_one_program_share_an_identity() {
        let parent = vec![
            ancestor(4, "/usr/bin/python3.11", &[]),
            ancestor(1, "/sbin/init", &[]),
        ];
        let a = identity(5, "/usr/bin/python3.11", parent.clone());
        let b = identity(6, "/usr/bin/python3.11", parent.clone());
        assert!(a.same_policy_identity(&b));
        let c = identity(7, "/usr/bin/sleep", parent.clone());
        assert!(!a.same_policy_identity(&c));
        let mut deeper = parent;
        deeper.insert(0, ancestor(5, "/usr/bin/python3.11", &[]));
        assert!(!a.same_policy_identity(&identity(8, "/usr/bin/python3.11", deeper)));
    }
}
