//! Files written where someone else may have planted links: the CA files of `--ca-dir` and
//! `sluice exec`'s private directory.
//!
//! Owns the only way sluice writes such files: a directory opened without following a link
//! as its last component, a fresh file made in it with `O_CREAT|O_EXCL|O_NOFOLLOW`, then
//! renamed over the final name (a link there is replaced, never followed), and directories
//! with unpredictable names created exclusively with mode 0700. Every later operation goes
//! through the directory's descriptor, never its path again.

use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

/// Random bytes in an unpredictable name (128 bits).
const NAME_BYTES: usize = 16;

/// An open directory and the path it was opened at (for messages and for the child).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn random_hex() -> io::Result<String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; NAME_BYTES];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| io::Error::other("no random bytes from the system"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

impl Dir {
    /// Opens an existing directory; a symbolic link as its last component is refused
    /// (`ELOOP`/`ENOTDIR`), so a planted link cannot redirect what is written into it.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = rustix::fs::openat(rustix::fs::CWD, path, dir_flags(), Mode::empty())?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Creates `parent/<prefix><32 random hex digits>` with mode 0700; fails rather than
    /// reuse anything already there.
    pub fn create_unique(parent: &Path, prefix: &str) -> io::Result<Dir> {
        let path = parent.join(format!("{prefix}{}", random_hex()?));
        rustix::fs::mkdirat(rustix::fs::CWD, &path, Mode::from_raw_mode(0o700))?;
        let dir = Dir::open(&path)?;
        dir.check_owned()?;
        Ok(dir)
    }

    /// Creates the subdirectory `name` (mode 0700, exclusive) and opens it.
    pub fn create_child(&self, name: &str) -> io::Result<Dir> {
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o700))?;
        let fd = rustix::fs::openat(&self.fd, name, dir_flags(), Mode::empty())?;
        let dir = Dir {
            fd,
            path: self.path.join(name),
        };
        dir.check_owned()?;
        Ok(dir)
    }

    /// The directory was made by this process's user (not someone else's, swapped in).
    fn check_owned(&self) -> io::Result<()> {
        let st = rustix::fs::fstat(&self.fd)?;
        if st.st_uid != rustix::process::geteuid().as_raw() {
            return Err(io::Error::other(format!(
                "{} is owned by uid {}, not by sluice's user",
                self.path.display(),
                st.st_uid
            )));
        }
        Ok(())
    }

    /// Replaces the file `name` with `contents`, mode `mode` (exactly, whatever the umask):
    /// a fresh file created exclusively and without following links, then renamed into place.
    pub fn replace_file(&self, name: &str, contents: &[u8], mode: u32) -> io::Result<PathBuf> {
        let tmp = format!(".{name}.{}.tmp", random_hex()?);
        let fd = rustix::fs::openat(
            &self.fd,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let written = (|| {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
            let mut file = std::fs::File::from(fd);
            file.write_all(contents)?;
            file.sync_all()?;
            rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name)?;
            Ok::<(), io::Error>(())
        })();
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), rustix::fs::AtFlags::empty());
            return Err(e);
        }
        Ok(self.path.join(name))
    }

    /// Sets the directory's mode through its descriptor.
    pub fn chmod(&self, mode: u32) -> io::Result<()> {
        Ok(rustix::fs::fchmod(&self.fd, Mode::from_raw_mode(mode))?)
    }

    /// Gives the directory to `uid`/`gid` through its descriptor.
    pub fn chown(&self, uid: u32, gid: u32) -> io::Result<()> {
        Ok(rustix::fs::fchown(
            &self.fd,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )?)
    }

    /// Where it was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch() -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("sluice-nofollow-test-{}", random_hex().unwrap()));
        std::fs::create_dir(&p).unwrap();
        p
    }

    #[test]
    fn a_planted_link_is_replaced_not_followed() {
        let base = scratch();
        let victim = base.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let dir = base.join("d");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("ca.pem")).unwrap();
        let d = Dir::open(&dir).unwrap();
        let written = d.replace_file("ca.pem", b"CERT", 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let meta = std::fs::symlink_metadata(&written).unwrap();
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        assert_eq!(std::fs::read_to_string(&written).unwrap(), "CERT");
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_linked_directory_is_refused() {
        let base = scratch();
        std::fs::create_dir(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        assert!(Dir::open(&base.join("link")).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn unique_directories_are_private_and_never_reused() {
        let base = scratch();
        let a = Dir::create_unique(&base, "x-").unwrap();
        let b = Dir::create_unique(&base, "x-").unwrap();
        assert_ne!(a.path(), b.path());
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(name.len(), 2 + 2 * NAME_BYTES);
        let child = a.create_child("tmp").unwrap();
        assert!(
            a.create_child("tmp").is_err(),
            "an existing child is reused"
        );
        assert!(child.path().ends_with("tmp"));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
