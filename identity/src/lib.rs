//! sluice-identity: finds which program is on the other end of an accepted socket.
//!
//! It owns the walk socket → inode (NETLINK_SOCK_DIAG) → owning processes → real exe path,
//! ancestor chain and cmdline. It does not judge the identity against policy; the `sluice`
//! crate does that. The library is synchronous and reads `/proc`: the proxy calls
//! [`IdentityResolver::lookup_within`] on its async workers, which stops unfinished once the
//! search has read a given amount, and then [`IdentityResolver::lookup`] from a thread where
//! blocking holds up nothing else.
//!
//! # How a lookup works
//!
//! 1. **Socket → inode.** One exact `inet_diag` query for the client's socket (source = the
//!    accepted socket's peer, destination = the proxy's address as the client saw it), in the
//!    proxy's network namespace first, then in each registered one. IPv4, IPv6 and v4-mapped
//!    addresses are handled. The reply also carries the socket's uid.
//! 2. **Inode → owners.** Recently identified clients and their children first (a recent
//!    client's descriptors next to the one where it held its last socket before its whole
//!    table: the kernel gives a new socket the lowest free number; a lookup reads the whole
//!    table there only if it is small enough, else the scan reads it in its turn), then the
//!    processes forked last as the process connector announced them, then every process
//!    newest first (preferring the socket's uid), stopping at the first process whose
//!    fd table holds `socket:[<inode>]`. That owner's ancestors (every one below init,
//!    holding the socket or not), each ancestor's children, and the descendants of every
//!    holder found (through children that hold it too) complete the owner set.
//! 3. **Owners → identity.** For each owner: exe, real uid, argv, the ancestor chain (parent
//!    first, to pid 1, at most 64 hops) and the absolute paths in the chain's argv. Owners that
//!    differ in exe, ancestor exes or cmdline paths make the lookup fail as ambiguous; owners
//!    that agree are reported as the lowest pid.
//!
//! Only where to look is cached (one netlink socket per network namespace, a bounded list of
//! recent client pids checked against their start time, each identified process's
//! `/proc/<pid>` kept open while identities read from it last, and for the four identified
//! last after that (and, for 16 of them, the files its re-checks read), and the `/proc`
//! files of the
//! last 16 ancestors met, used only after a read through them succeeds); what a process is, is
//! read again for every lookup because execve and reparenting change it under the same pid.
//! Three things are kept beside it, each used only while what it was reached from is
//! unchanged: the verdict on a kept process's executable path (module `vouch`: same path,
//! same file, read again with its user namespace at every lookup), the sockets each sibling
//! held when its fd table was last read (module `siblings`: while the process connector says
//! its pid still names that process, and only for the sockets it could hold by fork), and
//! the sockets a kept process of up to six threads held when its fd table was read while
//! each was blocked, with the path it was credited with as an ancestor (module `quiet`:
//! while its threads' scheduling counts say it has not run since).
//! [`IdentityResolver::confirm`] reads through the kept handle, which the kernel ties to the
//! process it was opened for (a pid reused since is not it): one `readlink` of the descriptor
//! the process last held the socket under and one of its `exe`.
//!
//! # Limits
//!
//! - Owners are searched along fork relations: every ancestor of the first owner below init
//!   (so a creator that handed the socket down through a helper that closed its copy is
//!   found), the children of each ancestor, and every holder's descendants. A socket passed
//!   with SCM_RIGHTS (or `pidfd_getfd`) to an unrelated process that keeps its own copy is not
//!   searched for, nor one passed to a sibling (a child of an ancestor that does not hold it)
//!   whose fd table an earlier lookup read and kept (module `siblings`), nor one that reached
//!   a cousin through an ancestor and an uncle that have both since closed their copies, nor
//!   one whose holders were reparented to init (the reference's full scan would see them).
//! - A lookup says who held the socket at that moment. A socket can be handed to another
//!   process and back between two moments (while it is in flight in an SCM_RIGHTS message no
//!   process holds it), so the proxy identifies a connection when it is accepted and re-checks
//!   the holder with [`IdentityResolver::confirm`] (same pid, start time and executable) when
//!   requests arrive and while a tunnel lasts. What no check from `/proc` can see: code
//!   running inside the identified process (`LD_PRELOAD`, ptrace), and a socket that an
//!   unrelated process holds as well at every check.
//! - Completing the owner set reads the `children` of every ancestor, and the fd table of
//!   every sibling that no earlier lookup kept (module `siblings`): where sluice cannot
//!   subscribe to the process connector (no `CAP_NET_ADMIN`, or not in the initial PID and
//!   network namespaces), every sibling's table at every lookup, so that a client whose
//!   parent has thousands of children then costs about as much as a full scan.
//! - The proxy's own process is never searched: a client's socket cannot reach it.
//! - A lookup, confirmation or re-check during which a `/proc` file or the netlink socket
//!   could not be opened for want of descriptors (`EMFILE`, `ENFILE`) fails with
//!   [`IdentityError::DescriptorsExhausted`], whatever it found: a search that could not
//!   read everything it meant to may have missed a holder.
//! - A socket held only by a thread that unshared its fd table (`clone` without `CLONE_FILES`)
//!   is found only through the thread group leader's table.
//! - Reading another user's fd table needs CAP_SYS_PTRACE (or root); entering another network
//!   namespace needs CAP_SYS_ADMIN. An ancestor whose exe cannot be read keeps an empty exe.
//! - Paths are as the owning process's mount namespace shows them, and are believed only
//!   when they name the file the process runs (module `vouch`): an owner in a user namespace
//!   other than sluice's ([`IdentityError::OtherUserNamespace`]), or whose path leads to
//!   another file in sluice's view and in its own root ([`IdentityError::OtherFile`]), fails
//!   the lookup; such an
//!   ancestor keeps its place with an empty exe. A process identified as one program that
//!   moves into a user namespace of its own afterwards and re-executes a file mounted over
//!   its own path keeps its identity until its next lookup: only a program the policy lists,
//!   doing so itself.
//! - The exact socket query names no interface, so a client socket bound to one with
//!   `SO_BINDTODEVICE` is not found (the lookup fails closed).
//! - For redirected (transparent) connections, `local` must be the original destination the
//!   client dialled, not the redirect target the proxy accepted on.
#![forbid(unsafe_code)]

mod connector;
mod conntrack;
mod diag;
mod error;
mod exhaust;
mod identity;
mod kept;
mod netns;
mod order;
mod owners;
mod procfs;
mod quiet;
mod reads;
mod recent;
mod resolver;
mod siblings;
mod vouch;

pub use error::IdentityError;

/// The most file descriptors an [`IdentityResolver`] keeps open across lookups under an
/// open-file limit of `open_file_limit`: the `/proc` files of the ancestors it keeps (a tenth
/// of the limit at most, see the crate documentation), under a limit of 2048 or more the
/// other `/proc` files of the 16 identified processes it keeps them for (under 8192 or more,
/// with a snapshot of each one's fork family: module `procfs::family`), its netlink
/// sockets (the diag pool, and the process connector's), and the `/proc/<pid>` of the four
/// processes identified last. Besides these, it keeps one per identified process while
/// connections it identified last (its `/proc/<pid>`), and a lookup opens a few while it
/// runs.
pub fn descriptors_kept(open_file_limit: u64) -> u64 {
    kept::most_descriptors(open_file_limit)
        + netns::POOL_SIZE as u64
        + 1
        + resolver::LATEST_PINS as u64
}
pub use identity::{Ancestor, ClientSocket, Identity};
pub use owners::full_scan_owners;
pub use resolver::{IdentityConfig, IdentityResolver, Rechecks};
