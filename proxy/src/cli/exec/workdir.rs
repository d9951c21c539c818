//! The working directory, pinned at the very start of `sluice exec`: the directory itself
//! (opened, not its path) gives the owner the command's user is chosen from and its
//! (device, inode); right before the command starts, the path the shim will enter must
//! still resolve to that same directory, and the shim checks it again after its `chdir`
//! (through [`SHIM_ENV`]). Whoever owns the parent directory could otherwise swap the path
//! for a link to another user's directory in between, and the command would run as that
//! user, in that user's files.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// The environment variable telling the built-in shim which directory (`DEV:INO`) its
/// `--workdir` must be once entered.
pub const SHIM_ENV: &str = sluice_shim::process::WORKDIR_ID_ENV;

/// The working directory: its path, owner and identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pinned {
    pub path: PathBuf,
    pub uid: u32,
    /// (device, inode) of the directory opened at start.
    pub id: (u64, u64),
}

/// Why the working directory cannot be trusted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkdirError {
    #[error("the working directory: {0}")]
    Open(std::io::Error),
    #[error("the working directory {path}: {source}")]
    Stat {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "the working directory {path} was replaced while sluice was starting (it is no longer the directory sluice was started in): refusing to run the command"
    )]
    Moved { path: String },
}

// The conversions widen: st_dev and st_ino are u64 or narrower on every Linux target.
#[allow(clippy::useless_conversion)]
fn identity(st: &rustix::fs::Stat) -> (u64, u64) {
    (u64::from(st.st_dev), u64::from(st.st_ino))
}

impl Pinned {
    /// Opens `dir` itself (`"."` for the current directory) and names it `path`.
    pub fn open(dir: &Path, path: PathBuf) -> Result<Pinned, WorkdirError> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(dir, flags, Mode::empty())
            .map_err(|e| WorkdirError::Open(e.into()))?;
        let st = rustix::fs::fstat(fd.as_fd()).map_err(|e| WorkdirError::Open(e.into()))?;
        let pinned = Pinned {
            path,
            uid: st.st_uid,
            id: identity(&st),
        };
        pinned.check()?;
        Ok(pinned)
    }

    /// The current directory, opened before anything else.
    pub fn current() -> Result<Pinned, WorkdirError> {
        let path = std::env::current_dir().map_err(WorkdirError::Open)?;
        Pinned::open(Path::new("."), path)
    }

    /// Whether the path still resolves (following links) to the directory opened at start.
    pub fn check(&self) -> Result<(), WorkdirError> {
        let path = self.path.display().to_string();
        let st = rustix::fs::stat(&self.path).map_err(|e| WorkdirError::Stat {
            path: path.clone(),
            source: e.into(),
        })?;
        if identity(&st) != self.id {
            return Err(WorkdirError::Moved { path });
        }
        Ok(())
    }

    /// [`SHIM_ENV`]'s value.
    pub fn shim_env(&self) -> String {
        format!("{}:{}", self.id.0, self.id.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_swapped_for_a_link_is_refused() {
        let base = std::env::temp_dir().join(format!("sluice-workdir-{}", std::process::id()));
        let (work, other) = (base.join("work"), base.join("other"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let pinned = Pinned::open(&work, work.clone()).unwrap();
        assert!(pinned.check().is_ok());
        assert_eq!(pinned.uid, rustix::process::geteuid().as_raw());
        let (dev, ino) = pinned.id;
        assert_eq!(pinned.shim_env(), format!("{dev}:{ino}"));
        // The parent's owner swaps the directory for a link to another's.
        std::fs::rename(&work, base.join("work.old")).unwrap();
        std::os::unix::fs::symlink(&other, &work).unwrap();
        let moved = pinned.check().unwrap_err();
        assert!(matches!(moved, WorkdirError::Moved { .. }), "{moved}");
        assert!(moved.to_string().contains("was replaced"), "{moved}");
        // Gone altogether: refused too.
        std::fs::remove_file(&work).unwrap();
        assert!(matches!(
            pinned.check().unwrap_err(),
            WorkdirError::Stat { .. }
        ));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
