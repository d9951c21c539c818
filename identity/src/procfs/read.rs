//! Reading one procfs file: from its start with `pread`, bounded, and knowing when it has
//! been read whole; and what a failed read means (the process gone, or no descriptor left).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::parse::{StatFields, parse_stat};

/// `/proc/<pid>/cmdline` can be as large as the argument area (ARG_MAX, usually 2 MiB); the
/// identity needs the program's arguments, not a whole generated command line.
pub(super) const CMDLINE_LIMIT: usize = 256 * 1024;
/// `stat`, `status` and `children` are a few KiB at most; the cap only bounds a hostile or
/// surprising procfs.
pub(super) const SMALL_FILE_LIMIT: usize = 64 * 1024;

/// Whether an error means "that process is gone" (as opposed to "not allowed" or "broken").
pub(crate) fn is_gone(err: &io::Error) -> bool {
    let code = err.raw_os_error();
    code == Some(Errno::NOENT.raw_os_error()) || code == Some(Errno::SRCH.raw_os_error())
}

/// Whether an error means "this process has no descriptor left" (`EMFILE`, `ENFILE`).
pub(super) fn is_out_of_descriptors(err: &io::Error) -> bool {
    Errno::from_io_error(err).is_some_and(crate::exhaust::is_exhaustion)
}

pub(super) fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed {what}"))
}

/// When a procfs file has been read in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Complete {
    /// A read shorter than asked is the end: true of files produced in one piece (`stat`,
    /// `status`, `cmdline`), and it saves the extra `read` that returns 0.
    OnShortRead,
    /// A `seq_file` with one small record per item (`children`): a read also stops short when
    /// the kernel's page-sized buffer is full, which leaves it within one record of a page. A
    /// read well short of that is the end; anything else reads on to a zero-length read.
    SmallRecords,
}

/// The page-sized `seq_file` buffer, and a margin larger than any `children` record (`%d `).
const SEQ_PAGE: usize = 4096;
const SEQ_RECORD_MARGIN: usize = 64;

/// `stat` read through a descriptor of its own.
pub(super) fn read_stat(fd: BorrowedFd<'_>) -> io::Result<StatFields> {
    parse_stat(&read_limited(fd, SMALL_FILE_LIMIT, Complete::OnShortRead)?)
        .ok_or_else(|| invalid("stat"))
}

/// Opens `name` relative to the `/proc/<pid>` descriptor `dir`, reads it and closes it.
pub(super) fn read_at(
    dir: BorrowedFd<'_>,
    name: &str,
    limit: usize,
    complete: Complete,
) -> io::Result<Vec<u8>> {
    let fd = crate::exhaust::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    read_limited(fd.as_fd(), limit, complete)
}

/// Reads a procfs file from its start with `pread`, so a descriptor kept open reads the file
/// as it is now (procfs produces it again for a read at offset 0), and one opened for this
/// read costs no more than `read`.
pub(super) fn read_limited(
    fd: BorrowedFd<'_>,
    limit: usize,
    complete: Complete,
) -> io::Result<Vec<u8>> {
    let mut contents = vec![0; limit.min(4096)];
    let mut len = 0;
    loop {
        if len == contents.len() {
            if len >= limit {
                break;
            }
            contents.resize((len * 2).min(limit), 0);
        }
        let offset = u64::try_from(len).map_err(|_| invalid("offset"))?;
        let read = match rustix::io::pread(fd, &mut contents[len..], offset) {
            Ok(read) => read,
            Err(Errno::INTR) => continue,
            Err(err) => return Err(err.into()),
        };
        len += read;
        let complete = match complete {
            Complete::OnShortRead => len < contents.len(),
            Complete::SmallRecords => read + SEQ_RECORD_MARGIN < SEQ_PAGE.min(contents.len()),
        };
        if read == 0 || complete {
            break;
        }
    }
    contents.truncate(len);
    Ok(contents)
}
