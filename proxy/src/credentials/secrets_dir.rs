//! `--secrets-dir DIR`: secret values as a Kubernetes Secret volume or a Vault agent renders
//! them, one file per key (the file's name is the env var, its content the value, one final
//! newline dropped), so that no secret has to pass through an environment variable. Each file
//! passes the checks of `--secrets-file` (a regular file within its limit, owned by sluice's
//! uid, no group or other permission bits: `secrets::check_file`); names that are not env var
//! names (and dot files) are skipped. A link may not lead out of the directory.
//!
//! Kubernetes updates such a volume by writing a new timestamped directory and swapping the
//! `..data` link to it: when `..data` is there, the keys are read from where it leads, once,
//! so a load sees one whole version, never half of each. The reload watcher looks at every
//! key's file and at `..data` (`watched`): a swap changes where each leads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use zeroize::Zeroize;

use super::placeholder;
use super::secrets::{FileValues, LineProblem, SecretsError, check_file};

/// The link Kubernetes swaps to publish a new version of the volume.
const DATA_LINK: &str = "..data";

/// The values of `dir`: key → (value, 1).
pub(crate) fn read(dir: &Path) -> Result<FileValues, Vec<SecretsError>> {
    let unusable = |source| {
        vec![SecretsError::DirUnusable {
            path: dir.to_path_buf(),
            source,
        }]
    };
    let root = std::fs::canonicalize(dir).map_err(unusable)?;
    // One version of a Kubernetes volume: where `..data` leads now.
    let data = dir.join(DATA_LINK);
    let from = match std::fs::canonicalize(&data) {
        Ok(target) if target.is_dir() => target,
        _ => root.clone(),
    };
    let mut values: FileValues = HashMap::new();
    let mut errors = Vec::new();
    for (key, path) in keys(&from).map_err(unusable)? {
        match read_key(&root, &path) {
            Ok(value) => {
                values.insert(key, (value, 1));
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(values)
    } else {
        for (_, (value, _)) in values.iter_mut() {
            value.zeroize();
        }
        Err(errors)
    }
}

/// What the reload watcher looks at: every key's file, and `..data` when it is there.
pub(crate) fn watched(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = keys(dir)
        .map(|k| k.into_iter().map(|(_, p)| p).collect())
        .unwrap_or_default();
    let data = dir.join(DATA_LINK);
    if std::fs::symlink_metadata(&data).is_ok() {
        out.push(data);
    }
    out
}

/// The entries of `dir` named as env vars (no dot files, no directories), sorted.
fn keys(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if name.starts_with('.') || !placeholder::is_valid_key(&name) {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            continue;
        }
        out.push((name, path));
    }
    out.sort();
    Ok(out)
}

/// One key's value: the file checked as a secrets file, inside `root`, one final newline
/// dropped.
fn read_key(root: &Path, path: &Path) -> Result<String, SecretsError> {
    let inside = std::fs::canonicalize(path).is_ok_and(|t| t.starts_with(root));
    if !inside {
        return Err(SecretsError::OutsideDir {
            path: path.to_path_buf(),
        });
    }
    let contents =
        crate::config_file::read(path, crate::config_file::Kind::Secrets).map_err(|source| {
            SecretsError::Unusable {
                path: path.to_path_buf(),
                source,
            }
        })?;
    check_file(path, &contents.meta)?;
    let bytes = &contents.bytes[..];
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    match std::str::from_utf8(bytes) {
        Ok(value) => Ok(value.to_string()),
        Err(_) => Err(SecretsError::Malformed {
            path: path.to_path_buf(),
            line: 1,
            problem: LineProblem::NotUtf8,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(tag: &str) -> Dir {
        let d =
            std::env::temp_dir().join(format!("sluice-secrets-dir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn value(values: &FileValues, key: &str) -> Option<String> {
        values.get(key).map(|(v, _)| v.clone())
    }

    #[test]
    fn one_file_per_key_with_its_final_newline_dropped() {
        let d = dir("plain");
        write(&d.0.join("API_KEY"), "abc-123\n", 0o600);
        write(&d.0.join("OTHER"), "no newline", 0o400);
        write(&d.0.join(".hidden"), "x", 0o600);
        write(&d.0.join("not-a-key.txt"), "x", 0o600);
        let values = read(&d.0).unwrap();
        assert_eq!(value(&values, "API_KEY").as_deref(), Some("abc-123"));
        assert_eq!(value(&values, "OTHER").as_deref(), Some("no newline"));
        assert_eq!(values.len(), 2);
    }

    #[test]
    fn a_readable_file_or_a_link_out_is_refused_without_its_value() {
        let d = dir("mode");
        write(&d.0.join("API_KEY"), "abc-123", 0o640);
        let errors = read(&d.0).unwrap_err();
        let text = errors[0].to_string();
        assert!(text.contains("has mode 0640"), "{text}");
        assert!(!text.contains("abc-123"), "{text}");
        let d = dir("out");
        let outside = dir("outside");
        write(&outside.0.join("X"), "elsewhere", 0o600);
        symlink(outside.0.join("X"), d.0.join("API_KEY")).unwrap();
        let text = read(&d.0).unwrap_err()[0].to_string();
        assert!(text.contains("leads outside the directory"), "{text}");
    }

    #[test]
    fn a_kubernetes_volume_is_read_from_where_data_leads() {
        let d = dir("k8s");
        let v1 = d.0.join("..2026_12_07_v1");
        std::fs::create_dir(&v1).unwrap();
        write(&v1.join("API_KEY"), "first-value", 0o400);
        symlink("..2026_12_07_v1", d.0.join("..data")).unwrap();
        symlink("..data/API_KEY", d.0.join("API_KEY")).unwrap();
        assert_eq!(
            value(&read(&d.0).unwrap(), "API_KEY").as_deref(),
            Some("first-value")
        );
        let watched = watched(&d.0);
        assert!(watched.contains(&d.0.join("..data")), "{watched:?}");
        assert!(watched.contains(&d.0.join("API_KEY")), "{watched:?}");
        // The swap: a new version, `..data` replaced by a rename.
        let v2 = d.0.join("..2026_12_07_v2");
        std::fs::create_dir(&v2).unwrap();
        write(&v2.join("API_KEY"), "second-value", 0o400);
        symlink("..2026_12_07_v2", d.0.join("..data_tmp")).unwrap();
        std::fs::rename(d.0.join("..data_tmp"), d.0.join("..data")).unwrap();
        assert_eq!(
            value(&read(&d.0).unwrap(), "API_KEY").as_deref(),
            Some("second-value")
        );
    }
}
