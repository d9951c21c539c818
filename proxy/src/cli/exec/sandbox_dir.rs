//! `sluice exec`'s private directory: the CA files the command trusts and its own `TMPDIR`.
//!
//! Owns the layout and the modes. `<tmp>/sluice-exec-<32 random hex>/` is created exclusively
//! with mode 0700 (a name nobody can predict, so nothing can be planted there beforehand),
//! `ca/` inside it receives `ca.pem` and `ca-bundle.pem` (written without following links),
//! and `tmp/` (and, when the command needs a private `HOME`, `home/`) is given to the
//! command's user. Only once both are in place do the modes open
//! up to what the command needs: the root 0711 (traverse only), `ca/` 0755 (read, never
//! write: it stays sluice's), `tmp/` 0700 owned by the command. The whole tree is removed
//! when sluice exits.

use std::io;
use std::path::{Path, PathBuf};

use crate::nofollow::Dir;

/// The private directory, removed on drop.
#[derive(Debug)]
pub struct SandboxDir {
    root: Dir,
    ca: Dir,
    tmp: Option<Dir>,
    home: Option<Dir>,
}

impl SandboxDir {
    /// Creates the root and its `ca/` under `parent`, both 0700 for now.
    pub fn create(parent: &Path) -> io::Result<SandboxDir> {
        let root = Dir::create_unique(parent, "sluice-exec-")?;
        let ca = root.create_child("ca")?;
        Ok(SandboxDir {
            root,
            ca,
            tmp: None,
            home: None,
        })
    }

    /// Where sluice writes the CA files.
    pub fn ca_dir(&self) -> &Path {
        self.ca.path()
    }

    /// Makes `tmp/` for the command's user and opens the tree to what the command needs.
    pub fn hand_over(&mut self, uid: u32, gid: u32) -> io::Result<PathBuf> {
        let tmp = self.root.create_child("tmp")?;
        tmp.chown(uid, gid)?;
        self.ca.chmod(0o755)?;
        self.root.chmod(0o711)?;
        let path = tmp.path().to_path_buf();
        self.tmp = Some(tmp);
        Ok(path)
    }

    /// Makes `home/`, 0700 and owned by the command's user: its `HOME` when neither its own
    /// home nor the working directory is one it may write. Call after [`Self::hand_over`].
    pub fn make_home(&mut self, uid: u32, gid: u32) -> io::Result<PathBuf> {
        let home = self.root.create_child("home")?;
        home.chown(uid, gid)?;
        let path = home.path().to_path_buf();
        self.home = Some(home);
        Ok(path)
    }
}

impl Drop for SandboxDir {
    fn drop(&mut self) {
        // std's remove_dir_all does not follow links the command may have left in tmp/.
        let _ = std::fs::remove_dir_all(self.root.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn the_layout_opens_only_after_hand_over_and_is_removed_on_drop() {
        let mut dir = SandboxDir::create(&std::env::temp_dir()).unwrap();
        let root = dir.root.path().to_path_buf();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(dir.ca_dir()), 0o700);
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let tmp = dir.hand_over(uid, gid).unwrap();
        assert_eq!(mode(&root), 0o711);
        assert_eq!(mode(dir.ca_dir()), 0o755);
        assert_eq!(mode(&tmp), 0o700);
        assert_eq!(std::fs::metadata(&tmp).unwrap().uid(), uid);
        std::fs::write(tmp.join("left-behind"), "x").unwrap();
        let home = dir.make_home(uid, gid).unwrap();
        assert_eq!(mode(&home), 0o700);
        assert_eq!(std::fs::metadata(&home).unwrap().uid(), uid);
        drop(dir);
        assert!(!root.exists());
    }
}
