//! Running out of file descriptors while identifying (`EMFILE`, `ENFILE`: "too many open
//! files"): a `/proc` file that cannot be opened for want of a descriptor says nothing about
//! the process, yet read as "gone" it would make a lookup report the caller exited or changed.
//!
//! Owns noting that condition where `/proc` files are opened ([`openat`]) and turning an
//! identification during which it happened into [`IdentityError::DescriptorsExhausted`]
//! ([`guarded`]), whatever the identification concluded: a search that could not open every
//! file it meant to may have missed a holder, so even an answer is not trusted (fail closed).
//! The note is per thread: an identification runs on one thread from start to end.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use crate::IdentityError;

thread_local! {
    /// Whether a descriptor ran out during the identification under way on this thread.
    static SEEN: Cell<bool> = const { Cell::new(false) };
}

/// Whether `e` says the process (`EMFILE`) or the system (`ENFILE`) is out of descriptors.
pub(crate) fn is_exhaustion(e: Errno) -> bool {
    e == Errno::MFILE || e == Errno::NFILE
}

/// Notes `e` when it is an exhaustion; returns it unchanged.
pub(crate) fn note(e: Errno) -> Errno {
    if is_exhaustion(e) {
        SEEN.with(|seen| seen.set(true));
    }
    e
}

/// Whether an exhaustion was noted so far in the identification under way.
pub(crate) fn seen() -> bool {
    SEEN.with(Cell::get)
}

/// An exhaustion noted since [`seen`] answered `before` was recovered from (descriptors were
/// freed and the open retried with success): the note goes back to `before`.
pub(crate) fn recovered(before: bool) {
    SEEN.with(|s| s.set(before));
}

/// `openat`, noting an exhaustion.
pub(crate) fn openat<Fd: AsFd, P: rustix::path::Arg>(
    dir: Fd,
    path: P,
    flags: OFlags,
    mode: Mode,
) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(dir, path, flags, mode).map_err(note)
}

/// Runs one identification (a lookup, a confirmation, a re-check): when descriptors ran out
/// during it, or its error comes from an exhaustion (the netlink socket, the `/proc` root),
/// the answer is [`IdentityError::DescriptorsExhausted`].
pub(crate) fn guarded<T>(
    identification: impl FnOnce() -> Result<T, IdentityError>,
) -> Result<T, IdentityError> {
    let outer = SEEN.with(|seen| seen.replace(false));
    let result = identification();
    let seen = SEEN.with(|s| s.replace(outer));
    let from_exhaustion = result.as_ref().err().is_some_and(caused_by_exhaustion);
    if seen || from_exhaustion {
        // An enclosing identification is not trusted either.
        SEEN.with(|s| s.set(outer || seen));
        return Err(IdentityError::DescriptorsExhausted);
    }
    result
}

/// Whether an I/O error in `e`'s chain of sources is an exhaustion.
fn caused_by_exhaustion(e: &IdentityError) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<io::Error>()
            && is_exhaustion(Errno::from_io_error(io).unwrap_or(Errno::INVAL))
        {
            return true;
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exhaustion_during_an_identification_is_its_answer() {
        // A failed open for want of descriptors, whatever the identification then concluded.
        let answer = guarded(|| {
            let _ = note(Errno::MFILE);
            Ok(7)
        });
        assert!(matches!(answer, Err(IdentityError::DescriptorsExhausted)));
        // The note does not outlive the identification.
        assert_eq!(guarded(|| Ok::<_, IdentityError>(7)).unwrap(), 7);
        // An error whose source is an exhaustion (ENFILE: the system's table is full).
        let answer: Result<(), _> = guarded(|| {
            Err(IdentityError::SockDiag {
                source: io::Error::from_raw_os_error(Errno::NFILE.raw_os_error()),
            })
        });
        assert!(matches!(answer, Err(IdentityError::DescriptorsExhausted)));
        // Other failures stay what they are.
        let answer: Result<(), _> = guarded(|| {
            let _ = note(Errno::NOENT);
            Err(IdentityError::ProcessExited { pid: 3 })
        });
        assert!(matches!(
            answer,
            Err(IdentityError::ProcessExited { pid: 3 })
        ));
        // A nested identification that saw one makes the enclosing one fail too.
        let answer = guarded(|| {
            let _ = guarded(|| {
                let _ = note(Errno::MFILE);
                Ok(())
            });
            Ok(())
        });
        assert!(matches!(answer, Err(IdentityError::DescriptorsExhausted)));
    }
}
