//! Reading a file sluice is handed by path (a CA key, a certificate chain): one function,
//! [`read`], that opens without blocking, checks what it opened, and reads a bounded amount.
//!
//! Owns the rules such a file must meet before a byte of it is used: it is a regular file
//! (a FIFO, a device or a directory is refused, and opening never waits on a FIFO's writer),
//! no larger than the caller's bound, and, for a private file ([`Rules::private`]), not a
//! symbolic link at its path (a link is refused, never followed), owned by sluice's
//! effective user, with no permission for group or others. The checks are made on the open
//! descriptor, which is what is read, not on the path again. The secrets file has its own
//! reader (`credentials/secrets.rs`); policy and profile files are read by their loaders.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use zeroize::Zeroizing;

/// What a file must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// Largest size accepted, in bytes.
    pub max_bytes: u64,
    /// A private file (a key): no link at its path, owned by sluice's effective user, no
    /// permission bit for group or others.
    pub private: bool,
}

impl Rules {
    /// A public file (a certificate chain) of at most `max_bytes`.
    pub const fn public(max_bytes: u64) -> Rules {
        Rules {
            max_bytes,
            private: false,
        }
    }

    /// A private file (a key) of at most `max_bytes`.
    pub const fn private(max_bytes: u64) -> Rules {
        Rules {
            max_bytes,
            private: true,
        }
    }
}

/// Why a file was refused. Every variant names the path, never the content.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// It could not be opened or read (missing, unreadable, a link where none may be).
    #[error("{path}: cannot read: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    /// It is a FIFO, a device, a socket or a directory.
    #[error("{path}: not a regular file")]
    NotRegular { path: PathBuf },
    /// It is larger than the bound.
    #[error("{path}: larger than {max} bytes")]
    TooLarge { path: PathBuf, max: u64 },
    /// A private file that group or others may read or write.
    #[error(
        "{path}: mode {mode:04o} lets group or others at it; make it 0600 or stricter (chmod 600)"
    )]
    InsecureMode { path: PathBuf, mode: u32 },
    /// A private file owned by another user than sluice's.
    #[error("{path}: owned by uid {owner}, not by sluice's uid {uid}")]
    WrongOwner { path: PathBuf, owner: u32, uid: u32 },
}

/// Reads the file at `path` under `rules`; the bytes are zeroized when dropped.
pub fn read(path: &Path, rules: Rules) -> Result<Zeroizing<Vec<u8>>, FileError> {
    let unreadable = |reason: String| FileError::Unreadable {
        path: path.to_path_buf(),
        reason,
    };
    // Non-blocking: opening a FIFO for reading would otherwise wait for a writer. A private
    // file is opened without following a link at its last component (`ELOOP`).
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    if rules.private {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| {
        if e == rustix::io::Errno::LOOP {
            unreadable("a symbolic link; give the file itself".to_string())
        } else {
            unreadable(std::io::Error::from(e).to_string())
        }
    })?;
    let mut file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| unreadable(e.to_string()))?;
    check(
        path,
        rules,
        &Seen {
            is_file: meta.file_type().is_file(),
            len: meta.len(),
            mode: meta.permissions().mode(),
            owner: meta.uid(),
        },
    )?;
    let mut bytes = Zeroizing::new(Vec::new());
    file.by_ref()
        .take(rules.max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| unreadable(e.to_string()))?;
    if bytes.len() as u64 > rules.max_bytes {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            max: rules.max_bytes,
        });
    }
    Ok(bytes)
}

/// What the open descriptor says about the file.
struct Seen {
    is_file: bool,
    len: u64,
    mode: u32,
    owner: u32,
}

/// The rules on what was opened, apart from the syscalls that feed them.
fn check(path: &Path, rules: Rules, seen: &Seen) -> Result<(), FileError> {
    let path = path.to_path_buf();
    if !seen.is_file {
        return Err(FileError::NotRegular { path });
    }
    if seen.len > rules.max_bytes {
        return Err(FileError::TooLarge {
            path,
            max: rules.max_bytes,
        });
    }
    if rules.private {
        if seen.mode & 0o077 != 0 {
            return Err(FileError::InsecureMode {
                path,
                mode: seen.mode & 0o7777,
            });
        }
        let uid = rustix::process::geteuid().as_raw();
        if seen.owner != uid {
            return Err(FileError::WrongOwner {
                path,
                owner: seen.owner,
                uid,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    fn dir() -> PathBuf {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "sluice-checked-file-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(path: &Path, mode: u32, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_private_file_is_read_only_when_it_is_private() {
        let d = dir();
        let key = d.join("key.pem");
        write(&key, 0o600, "KEY");
        assert_eq!(&read(&key, Rules::private(64)).unwrap()[..], b"KEY");
        for loose in [0o640, 0o604, 0o660] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(loose)).unwrap();
            let e = read(&key, Rules::private(64)).unwrap_err();
            assert!(
                matches!(e, FileError::InsecureMode { mode, .. } if mode == loose),
                "{e}"
            );
            // A public file need not be private.
            assert!(read(&key, Rules::public(64)).is_ok());
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_link_fifo_directory_or_oversized_file_is_refused() {
        let d = dir();
        let key = d.join("key.pem");
        write(&key, 0o600, "KEY");
        let link = d.join("link.pem");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        let e = read(&link, Rules::private(64)).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // A certificate may be reached through a link (a Kubernetes Secret volume's are).
        assert!(read(&link, Rules::public(64)).is_ok());
        let fifo = d.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Refused at once: nothing waits for a writer.
        let started = std::time::Instant::now();
        for rules in [Rules::private(64), Rules::public(64)] {
            let e = read(&fifo, rules).unwrap_err();
            assert!(matches!(e, FileError::NotRegular { .. }), "{e}");
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let e = read(&d, Rules::public(64)).unwrap_err();
        assert!(matches!(e, FileError::NotRegular { .. }), "{e}");
        let e = read(&key, Rules::private(2)).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { max: 2, .. }), "{e}");
        let e = read(&d.join("missing"), Rules::public(64)).unwrap_err();
        assert!(matches!(e, FileError::Unreadable { .. }), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_private_file_of_another_owner_is_refused() {
        let seen = Seen {
            is_file: true,
            len: 3,
            mode: 0o100600,
            owner: rustix::process::geteuid().as_raw().wrapping_add(1),
        };
        let e = check(Path::new("/k"), Rules::private(64), &seen).unwrap_err();
        assert!(matches!(e, FileError::WrongOwner { .. }), "{e}");
        assert!(check(Path::new("/k"), Rules::public(64), &seen).is_ok());
    }
}
