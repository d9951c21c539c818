//! The command's `HOME`, and what it can write: a `HOME` is useful only where both the
//! grants (Landlock) and the file modes (the command's uid) let the command write.
//!
//! Owns the choice of `HOME`: the user's own home (from /etc/passwd) when a read-write grant
//! covers it and the user can write it; else the working directory on the same terms; else
//! a private home sluice makes (`sandbox_dir`). Owns the check "can this uid write there"
//! (the modes of the path and the search bit of each directory above it; the command runs
//! without supplementary groups) and the start-up lines saying whom the command runs as,
//! its `HOME`, and each place it may write.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::grants::{Access, Grant};

/// Whether `uid`/`gid` (no supplementary groups, no capabilities) may create files in the
/// directory `path`: write and search on it, search on every directory above it.
pub fn writable_by(path: &Path, uid: u32, gid: u32) -> bool {
    let allows = |p: &Path, bits: u32| {
        std::fs::metadata(p).is_ok_and(|m| {
            let shift = if m.uid() == uid {
                6
            } else if m.gid() == gid {
                3
            } else {
                0
            };
            (m.mode() >> shift) & bits == bits
        })
    };
    path.ancestors().skip(1).all(|a| allows(a, 0o1)) && allows(path, 0o3)
}

/// Whether a read-write grant covers `path`.
fn granted(path: &Path, grants: &[Grant]) -> bool {
    grants
        .iter()
        .any(|g| g.access == Access::ReadWrite && path.starts_with(&g.path))
}

/// The `HOME` chosen, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    pub path: PathBuf,
    pub why: &'static str,
}

/// The user's home, else the working directory, where granted and writable; `None` when
/// neither is (the caller makes a private home).
pub fn choose(
    account_home: Option<&Path>,
    workdir: &Path,
    grants: &[Grant],
    ids: (u32, u32),
) -> Option<Home> {
    let usable = |p: &Path| granted(p, grants) && writable_by(p, ids.0, ids.1);
    if let Some(h) = account_home.filter(|h| h.is_absolute() && usable(h)) {
        return Some(Home {
            path: h.to_path_buf(),
            why: "the user's home",
        });
    }
    usable(workdir).then(|| Home {
        path: workdir.to_path_buf(),
        why: "the working directory: the user's own home is not granted or not writable",
    })
}

/// The start-up lines: whom the command runs as, its `HOME`, each read-write grant (with a
/// warning where the user's file modes forbid what the grant allows).
pub fn announce(user: &str, source: &str, home: &Home, grants: &[Grant], ids: (u32, u32)) {
    for line in lines(user, source, home, grants, ids) {
        eprintln!("sluice: {line}");
    }
}

fn lines(user: &str, source: &str, home: &Home, grants: &[Grant], ids: (u32, u32)) -> Vec<String> {
    let mut out = vec![
        format!("the command runs as {user}: {source}"),
        format!("its HOME is {} ({})", home.path.display(), home.why),
    ];
    let rw: Vec<&Grant> = grants
        .iter()
        .filter(|g| g.access == Access::ReadWrite && !g.path.starts_with("/dev"))
        .collect();
    let listed: Vec<String> = rw
        .iter()
        .map(|g| format!("{} ({})", g.path.display(), g.why))
        .collect();
    out.push(format!(
        "it may write: {}, and /dev/null, /dev/zero, /dev/full",
        listed.join(", ")
    ));
    for g in rw {
        if g.path.is_dir() && !writable_by(&g.path, ids.0, ids.1) {
            out.push(format!(
                "WARNING: {} is granted read-write ({}), but its owner and mode do not let {user} write it",
                g.path.display(),
                g.why
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-home-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    fn rw(p: &Path) -> Grant {
        Grant {
            path: p.to_path_buf(),
            access: Access::ReadWrite,
            why: "test".into(),
        }
    }

    #[test]
    fn writable_follows_the_modes_for_the_owner_and_others() {
        let d = scratch("modes");
        let me = rustix::process::geteuid().as_raw();
        let my_gid = rustix::process::getegid().as_raw();
        let other = me.wrapping_add(12345);
        assert!(writable_by(&d, me, my_gid));
        // Another uid in another group: only through the "other" bits.
        assert!(!writable_by(&d, other, other));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(writable_by(&d, other, other));
        // A directory above that cannot be searched stops it.
        let inner = d.join("inner");
        std::fs::create_dir(&inner).unwrap();
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(!writable_by(&inner, other, other));
        assert!(!writable_by(&d.join("missing"), me, my_gid));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn home_is_granted_and_writable_or_none() {
        let d = scratch("choice");
        let me = rustix::process::geteuid().as_raw();
        let ids = (me, rustix::process::getegid().as_raw());
        let home = d.join("home");
        let work = d.join("work");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        // Only the working directory granted: it.
        let h = choose(Some(&home), &work, &[rw(&work)], ids).unwrap();
        assert_eq!(h.path, work);
        // The user's home granted too: the home.
        let h = choose(Some(&home), &work, &[rw(&work), rw(&d)], ids).unwrap();
        assert_eq!(h.path, home);
        // Nothing granted, or granted but not writable by that uid: none.
        assert_eq!(choose(Some(&home), &work, &[], ids), None);
        let other = (me.wrapping_add(12345), me.wrapping_add(12345));
        assert_eq!(choose(Some(&home), &work, &[rw(&d)], other), None);
        let text = lines("alice (uid 1)", "chosen by --user", &h, &[rw(&work)], other).join("\n");
        assert!(
            text.contains("the command runs as alice (uid 1): chosen by --user"),
            "{text}"
        );
        assert!(
            text.contains(&format!("it may write: {} (test)", work.display())),
            "{text}"
        );
        assert!(text.contains("WARNING"), "{text}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
