//! The one way sluice reads a file it is configured with: the policy files, provider profiles,
//! the secrets file, the tenants file, `--upstream-ca` files, the system trust bundle, the
//! operator CA (`--ca-cert`, `--ca-key`) and the TLS hop's files (`--tls-cert`, `--tls-key`,
//! `--client-ca`), at
//! start, on every reload, in the reload watcher's change check, and in the one-shot commands
//! (`policy check`, `policy explain`).
//!
//! Such a path may be swapped for something that is not a file: a FIFO (opening it waits for
//! a writer, forever), a link to `/dev/zero` (reading it never ends), a directory, a socket,
//! or a file of gigabytes. Each is refused with an error that says what the path is, and
//! nothing is swapped in:
//!
//! 1. the path is looked up (links followed) and must be a regular file no larger than the
//!    limit of its [`Kind`]; nothing else is opened;
//! 2. it is opened non-blocking (a FIFO put there since step 1 opens at once instead of
//!    waiting for a writer) and the opened file is checked again, since it is what is read;
//! 3. at most the limit and one byte are read (a file that grows meanwhile is refused);
//! 4. all of it on a thread of its own, which the caller waits for at most [`DEADLINE`]: a
//!    file system that stops answering (a hung network mount) costs the caller that long and
//!    a parked thread, never a worker of the proxy. At most [`MAX_STALLED`] such threads wait
//!    at once; past that a read is refused at once.
//!
//! A private key ([`Kind::PrivateKey`]) must also not be a symbolic link at its path (it is
//! refused, never followed: opened with `O_NOFOLLOW`), be owned by sluice's effective user and
//! grant nothing to group or others; checked on the opened descriptor.
//!
//! It does not parse anything (each loader does) and does not decide what a file may contain
//! beyond its size; the secrets file's mode and owner are checked by `credentials::secrets`
//! on the metadata returned here, which is that of the file actually read.

use std::fmt;
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use rustix::fs::{Mode, OFlags};
use zeroize::Zeroizing;

/// Longest a caller waits for one file to be read.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// Reads that may be waiting on a file system that stopped answering at once; a read past
/// it is refused without trying (each holds a parked thread until the file system answers).
pub const MAX_STALLED: usize = 8;

/// Largest policy file, provider profile file or tenants file (YAML): a policy of tens of
/// thousands of entries fits; a log or a disk image pointed at by mistake does not.
pub const YAML_LIMIT: u64 = 8 * 1024 * 1024;
/// Largest `--secrets-file` (KEY=VALUE lines).
pub const SECRETS_LIMIT: u64 = 1024 * 1024;
/// Largest PEM file of trust roots or certificates (`--upstream-ca`, the system bundle: about
/// 200 KiB; `--ca-cert`, `--tls-cert`, `--client-ca`).
pub const PEM_LIMIT: u64 = 4 * 1024 * 1024;
/// Largest private key file (`--ca-key`, `--tls-key`: an RSA-4096 key in PEM is 3.3 KiB).
pub const KEY_LIMIT: u64 = 64 * 1024;

/// What a file is for, which sets its size limit and names it in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    Policy,
    Profiles,
    Secrets,
    Tenants,
    Pem,
    /// A private key: private as well as regular and bounded (see the module).
    PrivateKey,
}

impl Kind {
    /// The most bytes a file of this kind may hold.
    pub fn limit(self) -> u64 {
        match self {
            Kind::Policy | Kind::Profiles | Kind::Tenants => YAML_LIMIT,
            Kind::Secrets => SECRETS_LIMIT,
            Kind::Pem => PEM_LIMIT,
            Kind::PrivateKey => KEY_LIMIT,
        }
    }

    fn private(self) -> bool {
        self == Kind::PrivateKey
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::Policy => "a policy file",
            Kind::Profiles => "a provider profile file",
            Kind::Secrets => "a secrets file",
            Kind::Tenants => "a tenants file",
            Kind::Pem => "a PEM file",
            Kind::PrivateKey => "a private key file",
        }
    }
}

/// Why a file was not read. `Display` says what is wrong with it, without its path (every
/// caller's message names the path already, as `FILE:LINE:COL:` or `the secrets file PATH`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// It cannot be looked up, opened or read (missing, no permission, an I/O error).
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    /// It is not a regular file (a FIFO, a device, a directory, a socket); `via` is where a
    /// link at the path leads.
    #[error("{} is {kind}, not a regular file; sluice reads only regular files", match via { Some(t) => format!("it leads to {} (through a link), which", t.display()), None => "it".to_string() })]
    NotRegular {
        kind: FileType,
        via: Option<PathBuf>,
    },
    /// It holds more than its kind's limit.
    #[error("it is larger than {} MiB ({limit} bytes), the most {noun} may hold", limit / (1024 * 1024))]
    TooLarge { limit: u64, noun: &'static str },
    /// Its file system did not answer within the deadline.
    #[error("it could not be read within {} s (its file system does not answer); nothing of it was used", .0.as_secs())]
    TimedOut(Duration),
    /// A private key's path is a symbolic link.
    #[error(
        "it is a symbolic link; give the key file itself (a private key is never read through a link)"
    )]
    Link,
    /// A private key that group or others may read or write.
    #[error("its mode {mode:04o} lets group or others at it; make it 0600 or stricter (chmod 600)")]
    InsecureMode { mode: u32 },
    /// A private key owned by another user than sluice's.
    #[error("it is owned by uid {owner}, not by sluice's uid {uid}")]
    WrongOwner { owner: u32, uid: u32 },
    /// Too many earlier reads are still waiting on their file systems.
    #[error(
        "not read: {0} earlier file reads are still waiting on a file system that does not answer"
    )]
    Stalled(usize),
}

/// What a path was found to be, when it is not a regular file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileType {
    Fifo,
    CharDevice,
    BlockDevice,
    Directory,
    Socket,
    Other,
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileType::Fifo => "a FIFO (named pipe)",
            FileType::CharDevice => "a character device",
            FileType::BlockDevice => "a block device",
            FileType::Directory => "a directory",
            FileType::Socket => "a socket",
            FileType::Other => "not a file",
        })
    }
}

/// A file's content (wiped from memory when dropped: it may be the secrets file) and the
/// metadata of the file it was read from.
pub struct Contents {
    pub bytes: Zeroizing<Vec<u8>>,
    pub meta: Metadata,
}

impl fmt::Debug for Contents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Contents")
            .field("len", &self.bytes.len())
            .finish_non_exhaustive()
    }
}

/// Reads the file at `path` as a file of `kind`: a regular file within its limit, read within
/// [`DEADLINE`] (see the module's steps).
pub fn read(path: &Path, kind: Kind) -> Result<Contents, FileError> {
    read_within(path, kind, DEADLINE)
}

/// [`read`] of a file that must be UTF-8 text; `Err` is the one line a diagnostic shows.
pub fn read_text(path: &Path, kind: Kind) -> Result<String, String> {
    let contents = read(path, kind).map_err(|e| e.to_string())?;
    match String::from_utf8(contents.bytes.to_vec()) {
        Ok(text) => Ok(text),
        Err(e) => Err(format!(
            "not valid UTF-8 (byte {})",
            e.utf8_error().valid_up_to()
        )),
    }
}

/// [`read_text`] of a policy file named as the policy loader names it
/// (`policy::ReadText`).
pub fn read_policy(path: &str) -> Result<String, String> {
    read_text(Path::new(path), Kind::Policy)
}

/// Reads now started and not yet returned (each on its own thread).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

fn read_within(path: &Path, kind: Kind, deadline: Duration) -> Result<Contents, FileError> {
    let owned = path.to_path_buf();
    within(&IN_FLIGHT, deadline, move || read_now(&owned, kind))
}

/// Runs `work` on a thread of its own and waits for it at most `deadline`; `in_flight`
/// counts such threads not yet returned, and none is started while [`MAX_STALLED`] are.
fn within<T: Send + 'static>(
    in_flight: &'static AtomicUsize,
    deadline: Duration,
    work: impl FnOnce() -> Result<T, FileError> + Send + 'static,
) -> Result<T, FileError> {
    let waiting = in_flight.fetch_add(1, Ordering::AcqRel);
    if waiting >= MAX_STALLED {
        in_flight.fetch_sub(1, Ordering::AcqRel);
        return Err(FileError::Stalled(waiting));
    }
    let (tx, rx) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("sluice-read".into())
        .spawn(move || {
            let result = work();
            in_flight.fetch_sub(1, Ordering::AcqRel);
            // The caller may have stopped waiting: the result is then dropped (wiped) here.
            let _ = tx.send(result);
        });
    if let Err(e) = spawned {
        in_flight.fetch_sub(1, Ordering::AcqRel);
        return Err(FileError::Io(e));
    }
    match rx.recv_timeout(deadline) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(FileError::TimedOut(deadline)),
        // The thread ended without an answer: it panicked.
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(FileError::Io(std::io::Error::other(
            "the reading thread failed",
        ))),
    }
}

/// Steps 1 to 3, on the calling thread.
fn read_now(path: &Path, kind: Kind) -> Result<Contents, FileError> {
    let (limit, noun) = (kind.limit(), kind.noun());
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let found = if kind.private() {
        flags |= OFlags::NOFOLLOW;
        std::fs::symlink_metadata(path)?
    } else {
        std::fs::metadata(path)?
    };
    if found.file_type().is_symlink() {
        return Err(FileError::Link);
    }
    check(path, &found, limit, noun)?;
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP => FileError::Link,
        e => FileError::Io(e.into()),
    })?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    check(path, &meta, limit, noun)?;
    if kind.private() {
        check_private(meta.mode(), meta.uid(), rustix::process::geteuid().as_raw())?;
    }
    // Room for all of it at once: a secret is not left behind in a buffer outgrown and freed.
    let room = usize::try_from(meta.len().min(limit).saturating_add(1)).unwrap_or(0);
    let mut bytes = Zeroizing::new(Vec::with_capacity(room));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge { limit, noun });
    }
    Ok(Contents { bytes, meta })
}

/// A private key's mode and owner, or what is wrong with them.
fn check_private(mode: u32, owner: u32, uid: u32) -> Result<(), FileError> {
    if mode & 0o077 != 0 {
        return Err(FileError::InsecureMode {
            mode: mode & 0o7777,
        });
    }
    if owner != uid {
        return Err(FileError::WrongOwner { owner, uid });
    }
    Ok(())
}

/// A regular file within `limit` bytes, or what is wrong with it.
fn check(path: &Path, meta: &Metadata, limit: u64, noun: &'static str) -> Result<(), FileError> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if !t.is_file() {
        let kind = if t.is_fifo() {
            FileType::Fifo
        } else if t.is_char_device() {
            FileType::CharDevice
        } else if t.is_block_device() {
            FileType::BlockDevice
        } else if t.is_dir() {
            FileType::Directory
        } else if t.is_socket() {
            FileType::Socket
        } else {
            FileType::Other
        };
        let via = std::fs::symlink_metadata(path)
            .ok()
            .filter(|m| m.file_type().is_symlink())
            .and_then(|_| std::fs::canonicalize(path).ok());
        return Err(FileError::NotRegular { kind, via });
    }
    if meta.len() > limit {
        return Err(FileError::TooLarge { limit, noun });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn scratch(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!(
            "sluice-config-file-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn write_mode(path: &Path, mode: u32, text: &str) {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
    fn a_private_key_is_read_only_when_it_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("private");
        let key = dir.join("key.pem");
        write_mode(&key, 0o600, "KEY");
        assert_eq!(&read(&key, Kind::PrivateKey).unwrap().bytes[..], b"KEY");
        for loose in [0o640, 0o604, 0o660] {
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(loose)).unwrap();
            let e = read(&key, Kind::PrivateKey).unwrap_err();
            assert!(
                matches!(e, FileError::InsecureMode { mode } if mode == loose),
                "{e}"
            );
            // A certificate need not be private.
            assert!(read(&key, Kind::Pem).is_ok());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_private_key_behind_a_link_or_of_another_owner_is_refused() {
        let dir = scratch("keylink");
        let key = dir.join("key.pem");
        write_mode(&key, 0o600, "KEY");
        let link = dir.join("link.pem");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        let e = read(&link, Kind::PrivateKey).unwrap_err();
        assert!(matches!(e, FileError::Link), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // A certificate may be reached through a link (a Kubernetes Secret volume's are).
        assert!(read(&link, Kind::Pem).is_ok());
        let e = check_private(0o100600, 1001, 1000).unwrap_err();
        assert!(
            matches!(
                e,
                FileError::WrongOwner {
                    owner: 1001,
                    uid: 1000
                }
            ),
            "{e}"
        );
        assert!(check_private(0o100600, 1000, 1000).is_ok());
        let big = dir.join("big.pem");
        write_mode(&big, 0o600, &"k".repeat(KEY_LIMIT as usize + 1));
        let e = read(&big, Kind::PrivateKey).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_regular_file_is_read_whole() {
        let dir = scratch("regular");
        let f = dir.join("policy.yaml");
        std::fs::write(&f, "version: 1\n").unwrap();
        let c = read(&f, Kind::Policy).unwrap();
        assert_eq!(&c.bytes[..], b"version: 1\n");
        assert!(c.meta.file_type().is_file());
        assert_eq!(read_text(&f, Kind::Policy).unwrap(), "version: 1\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_fifo_is_refused_at_once_without_waiting_for_a_writer() {
        let dir = scratch("fifo");
        let f = dir.join("policy.yaml");
        rustix::fs::mkfifoat(rustix::fs::CWD, &f, Mode::from_raw_mode(0o600)).unwrap();
        let started = std::time::Instant::now();
        let e = read(&f, Kind::Policy).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(matches!(
            e,
            FileError::NotRegular {
                kind: FileType::Fifo,
                via: None
            }
        ));
        assert_eq!(
            e.to_string(),
            "it is a FIFO (named pipe), not a regular file; sluice reads only regular files"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_to_dev_zero_is_refused_naming_where_it_leads() {
        let dir = scratch("zero");
        let f = dir.join("secrets.env");
        std::os::unix::fs::symlink("/dev/zero", &f).unwrap();
        let e = read(&f, Kind::Secrets).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it leads to /dev/zero (through a link), which is a character device, not a \
             regular file; sluice reads only regular files"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_directory_and_a_socket_are_refused() {
        let dir = scratch("dir-sock");
        let d = dir.join("tenants.yaml");
        std::fs::create_dir(&d).unwrap();
        assert!(matches!(
            read(&d, Kind::Tenants),
            Err(FileError::NotRegular {
                kind: FileType::Directory,
                ..
            })
        ));
        let s = dir.join("profiles.yaml");
        let _listener = UnixListener::bind(&s).unwrap();
        assert!(matches!(
            read(&s, Kind::Profiles),
            Err(FileError::NotRegular {
                kind: FileType::Socket,
                ..
            })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_past_its_limit_is_refused_unread() {
        let dir = scratch("huge");
        let f = dir.join("policy.yaml");
        // Sparse: gigabytes claimed, nothing written.
        File::create(&f).unwrap().set_len(4 << 30).unwrap();
        let e = read(&f, Kind::Policy).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "it is larger than 8 MiB ({YAML_LIMIT} bytes), the most a policy file may hold"
            )
        );
        // Exactly at the limit is fine; one byte more is not.
        let f = dir.join("secrets.env");
        std::fs::write(&f, vec![b'a'; SECRETS_LIMIT as usize]).unwrap();
        assert_eq!(
            read(&f, Kind::Secrets).unwrap().bytes.len() as u64,
            SECRETS_LIMIT
        );
        std::fs::write(&f, vec![b'a'; SECRETS_LIMIT as usize + 1]).unwrap();
        assert!(matches!(
            read(&f, Kind::Secrets),
            Err(FileError::TooLarge { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_file_says_so() {
        let e = read(Path::new("/nonexistent/sluice/policy.yaml"), Kind::Policy).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot read: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn text_must_be_utf8() {
        let dir = scratch("utf8");
        let f = dir.join("policy.yaml");
        std::fs::write(&f, b"ab\xffcd").unwrap();
        assert_eq!(
            read_text(&f, Kind::Policy).unwrap_err(),
            "not valid UTF-8 (byte 2)"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A read that does not return within the deadline is given up on; the thread it left
    /// waiting counts until it returns, and while `MAX_STALLED` wait, a read is refused at
    /// once. (A blocked closure stands for a file system that does not answer.)
    #[test]
    fn a_read_that_does_not_return_in_time_is_given_up() {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let mut release = Vec::new();
        for _ in 0..MAX_STALLED {
            let (go, wait) = mpsc::channel::<()>();
            release.push(go);
            let started = std::time::Instant::now();
            let r = within(&COUNT, Duration::from_millis(50), move || {
                let _ = wait.recv();
                Ok(())
            });
            assert!(matches!(r, Err(FileError::TimedOut(_))));
            assert!(started.elapsed() >= Duration::from_millis(50));
        }
        assert_eq!(COUNT.load(Ordering::Acquire), MAX_STALLED);
        let r = within(&COUNT, Duration::from_secs(5), || Ok(()));
        assert!(
            matches!(r, Err(FileError::Stalled(n)) if n == MAX_STALLED),
            "{r:?}"
        );
        // The file systems answer: the threads return, and reads go on.
        drop(release);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while COUNT.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(within(&COUNT, Duration::from_secs(5), || Ok(7)).unwrap(), 7);
    }
}
