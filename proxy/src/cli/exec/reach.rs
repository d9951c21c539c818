//! The refusal to start when a secret or the audit log lies within the command's reach.
//!
//! Owns the comparison: the canonical path of the secrets file and of the audit log (its
//! directory, when the file does not exist yet) against the canonical path of every grant,
//! whatever its access: a readable secrets file leaks the secrets, a readable audit log
//! leaks what others did, a writable one can be forged.

use std::path::{Path, PathBuf};

use super::grants::Grant;

/// A file sluice keeps from the command, and the grant that would expose it.
#[derive(Debug, thiserror::Error)]
#[error(
    "refusing to start: the {what} {} lies inside {}, which the command may {} ({}). Move the {what} outside every path the command is granted (or pass --{flag} PATH elsewhere), or remove that grant",
    file.display(), grant.path.display(), grant.access.as_str(), grant.why
)]
pub struct InReach {
    pub what: &'static str,
    pub flag: &'static str,
    pub file: PathBuf,
    pub grant: Grant,
}

/// The canonical path of `file` (a regular file or a directory: `--secrets-dir`), or of its
/// directory joined with its name when it does not exist yet. None for a path that is
/// neither (a terminal, `/dev/null`).
fn canonical(file: &Path) -> Option<PathBuf> {
    match std::fs::metadata(file) {
        Ok(m) if m.is_file() || m.is_dir() => std::fs::canonicalize(file).ok(),
        Ok(_) => None,
        Err(_) => {
            let dir = match file.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            Some(std::fs::canonicalize(dir).ok()?.join(file.file_name()?))
        }
    }
}

/// The first grant that covers `file`.
pub fn covering<'a>(file: &Path, grants: &'a [Grant]) -> Option<(PathBuf, &'a Grant)> {
    let file = canonical(file)?;
    grants.iter().find_map(|g| {
        let root = std::fs::canonicalize(&g.path).ok()?;
        file.starts_with(&root).then(|| (file.clone(), g))
    })
}

/// Refuses when the secrets file or directory or the audit log lies within a grant.
pub fn check(
    secrets: [Option<&Path>; 2],
    audit_log: Option<&Path>,
    grants: &[Grant],
) -> Result<(), Box<InReach>> {
    let [secrets_file, secrets_dir] = secrets;
    // A grant inside the secrets directory exposes what it holds there.
    if let Some(dir) = secrets_dir.and_then(canonical)
        && let Some(grant) = grants
            .iter()
            .find(|g| std::fs::canonicalize(&g.path).is_ok_and(|root| root.starts_with(&dir)))
    {
        return Err(Box::new(InReach {
            what: "secrets directory",
            flag: "secrets-dir",
            file: dir,
            grant: grant.clone(),
        }));
    }
    for (what, flag, file) in [
        ("secrets file", "secrets-file", secrets_file),
        ("secrets directory", "secrets-dir", secrets_dir),
        ("audit log", "audit-log", audit_log),
    ] {
        if let Some((file, grant)) = file.and_then(|f| covering(f, grants)) {
            return Err(Box::new(InReach {
                what,
                flag,
                file,
                grant: grant.clone(),
            }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::grants::Access;
    use super::*;

    #[test]
    fn a_file_under_a_grant_through_a_link_is_found() {
        let base = std::env::temp_dir().join(format!("sluice-reach-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("work")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::os::unix::fs::symlink(base.join("work"), base.join("link")).unwrap();
        std::fs::write(base.join("work/secrets.env"), "K=V").unwrap();
        let grants = [Grant {
            path: base.join("link"),
            access: Access::ReadWrite,
            why: "the working directory".into(),
        }];
        let err = check([Some(&base.join("work/secrets.env")), None], None, &grants).unwrap_err();
        assert!(err.to_string().contains("secrets file"), "{err}");
        assert!(err.to_string().contains("read and write"), "{err}");
        // An audit log that does not exist yet, in a granted directory.
        let err = check([None, None], Some(&base.join("link/audit.jsonl")), &grants).unwrap_err();
        assert_eq!(err.flag, "audit-log");
        // A secrets directory the command could read.
        let err = check([None, Some(&base.join("work"))], None, &grants).unwrap_err();
        assert_eq!(err.flag, "secrets-dir");
        assert!(check([None, Some(&base.join("outside"))], None, &grants).is_ok());
        // A grant inside it.
        let err = check([None, Some(&base)], None, &grants).unwrap_err();
        assert_eq!(err.flag, "secrets-dir");
        assert!(check([None, None], Some(&base.join("outside/a.jsonl")), &grants).is_ok());
        assert!(check([None, None], Some(Path::new("/dev/null")), &grants).is_ok());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
