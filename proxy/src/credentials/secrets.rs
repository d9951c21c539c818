//! Secret values: where they come from, how they are held, and how they are never shown.
//!
//! Owns `Secret` (the value, zeroized on drop, redacted in `Debug`, no `Display`), the
//! `--secrets-file` reader (a regular file owned by sluice's uid with no group or other
//! permission bits, `KEY=VALUE` lines; errors name the file, the line and the mode, never a
//! value or a line's text) and `SecretStore`, which gives each env var of each profile
//! credential its value: from the secrets file, else from sluice's own environment, else the
//! credential's first value under another of its env var names. A value with CR, LF or NUL
//! is refused (it could split an HTTP message). It knows nothing about requests or bindings
//! (`binding.rs`).

use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use zeroize::Zeroize;

use super::placeholder;
use super::profile::{CredentialRef, EnvKey, ProviderProfile};

/// Values shorter than this are warned about: the response scrub and the log redactor
/// replace every occurrence of a value, so a short one also replaces unrelated text.
const SHORT_SECRET_LEN: usize = 8;

// === Secret ===

/// A secret value. Its bytes are overwritten when it is dropped; `Debug` shows
/// `Secret(<redacted>)`; there is no `Display` and no `Clone`, so a secret is only ever
/// read through `expose`, where it is written upstream.
pub struct Secret(String);

impl Secret {
    /// Refuses an empty value and one with CR, LF or NUL; the refused value is zeroized.
    pub(crate) fn new(value: String) -> Result<Secret, Unavailability> {
        let mut value = value;
        let problem = if value.is_empty() {
            Some(Unavailability::Unset)
        } else if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | b'\0')) {
            Some(Unavailability::ForbiddenCharacters)
        } else {
            None
        };
        match problem {
            Some(p) => {
                value.zeroize();
                Err(p)
            }
            None => Ok(Secret(value)),
        }
    }

    /// The value, for writing upstream and nowhere else.
    pub(super) fn expose(&self) -> &str {
        &self.0
    }

    /// A second copy, for the bindings that keep scrubbing a value a reload took out of
    /// service (`Bindings::retire_from`); zeroized on drop like the first.
    pub(super) fn copy(&self) -> Secret {
        Secret(self.0.clone())
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Why an env var has no usable value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unavailability {
    /// Set nowhere, or set to the empty string.
    Unset,
    /// The value contains CR, LF or NUL.
    ForbiddenCharacters,
    /// A refreshed credential without a valid token: the refresh is failing (`503`).
    NotRefreshed,
}

impl fmt::Display for Unavailability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unavailability::Unset => "no value is set",
            Unavailability::ForbiddenCharacters => "its value contains CR, LF or NUL",
            Unavailability::NotRefreshed => {
                "its token could not be refreshed (the last one has expired)"
            }
        })
    }
}

/// Where a value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SecretSource {
    SecretsFile,
    Environment,
}

/// Where an env var's value came from, and under which name (another env var of the same
/// credential when its own is unset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretOrigin {
    pub source: SecretSource,
    pub key: EnvKey,
}

// === Errors ===

/// A problem with one secret or the secrets file. No variant holds a value or a line's text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretsError {
    /// It cannot be read, or is not a regular file within the size limit
    /// (`config_file::read`).
    #[error("secrets file {}: {source}", path.display())]
    Unusable {
        path: PathBuf,
        #[source]
        source: crate::config_file::FileError,
    },
    #[error(
        "secrets file {} has mode {mode:04o}; it must not be readable or writable by group or others (chmod 600 {})",
        path.display(),
        path.display()
    )]
    InsecureMode { path: PathBuf, mode: u32 },
    #[error(
        "secrets file {} is owned by uid {owner}, not by the uid sluice runs as ({uid})",
        path.display()
    )]
    WrongOwner { path: PathBuf, owner: u32, uid: u32 },
    #[error(
        "cannot tell which uid sluice runs as (/proc/self/status), so secrets file {} cannot be checked",
        path.display()
    )]
    UnknownUid { path: PathBuf },
    /// `--secrets-dir` cannot be listed.
    #[error("secrets directory {}: {source}", path.display())]
    DirUnusable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An entry of `--secrets-dir` that leads (by a link) out of it.
    #[error(
        "secrets directory entry {} leads outside the directory; refused",
        path.display()
    )]
    OutsideDir { path: PathBuf },
    #[error("{}:{line}: {problem}", path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        problem: LineProblem,
    },
    #[error("{}:{line}: `{key}` is already set at line {first}", path.display())]
    DuplicateKey {
        path: PathBuf,
        line: usize,
        key: String,
        first: usize,
    },
    #[error(
        "credential `{credential}` is required, but none of its env vars ({}) is set in {searched}",
        join_keys(env_vars)
    )]
    RequiredMissing {
        credential: CredentialRef,
        env_vars: Vec<EnvKey>,
        searched: String,
    },
    #[error(
        "credential `{credential}` is required, but the value of `{key}` contains CR, LF or NUL, which could split an HTTP message"
    )]
    RequiredInvalid {
        credential: CredentialRef,
        key: EnvKey,
    },
}

/// What is wrong with a line of the secrets file (never what the line says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineProblem {
    NotUtf8,
    NoEquals,
    InvalidName,
}

impl fmt::Display for LineProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LineProblem::NotUtf8 => "the line is not valid UTF-8",
            LineProblem::NoEquals => "expected KEY=VALUE",
            LineProblem::InvalidName => {
                "the name before `=` is not a valid env var name (letters, digits and `_`)"
            }
        })
    }
}

/// Every problem found while loading secrets.
#[derive(Debug, thiserror::Error)]
#[error("provider secrets could not be loaded ({} problem(s))", errors.len())]
pub struct SecretsLoadError {
    pub errors: Vec<SecretsError>,
}

/// Worth telling the operator, not worth refusing to start for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretsWarning {
    #[error(
        "env var `{key}` of credential `{credential}` is unavailable ({reason}); its placeholder will be answered with credential_unavailable"
    )]
    Unavailable {
        credential: CredentialRef,
        key: EnvKey,
        reason: Unavailability,
    },
    #[error(
        "the value of env var `{key}` (credential `{credential}`) is only {len} characters long: sluice replaces every occurrence of it in responses and logs, so unrelated text that matches is replaced too"
    )]
    ShortValue {
        credential: CredentialRef,
        key: EnvKey,
        len: usize,
    },
    #[error("{}:{line}: `{key}` is not an env var of any provider credential; ignored", path.display())]
    UnusedFileKey {
        path: PathBuf,
        line: usize,
        key: String,
    },
}

fn join_keys(keys: &[EnvKey]) -> String {
    keys.iter()
        .map(EnvKey::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

// === SecretStore ===

/// The value (or why there is none) of every env var of every profile credential.
#[derive(Debug, Default)]
pub struct SecretStore {
    secrets: Vec<Secret>,
    keys: HashMap<EnvKey, Result<(usize, SecretOrigin), Unavailability>>,
    /// A refreshed credential's token stops serving at its expiry (it is still scrubbed and
    /// redacted: `get` still gives it).
    expires: HashMap<EnvKey, std::time::SystemTime>,
}

/// A successful load, and what the operator should hear about.
#[derive(Debug)]
pub struct LoadedSecrets {
    pub store: SecretStore,
    pub warnings: Vec<SecretsWarning>,
}

impl SecretStore {
    /// Gives every env var of every credential of `profiles` its value. `env` reads sluice's
    /// own environment (`|k| std::env::var(k).ok()`); `secrets_file`, when given, is checked
    /// (regular, owned by sluice's uid, no group/other bits) and read first.
    pub fn load(
        profiles: &[ProviderProfile],
        env: impl Fn(&str) -> Option<String>,
        secrets_file: Option<&Path>,
    ) -> Result<LoadedSecrets, SecretsLoadError> {
        let mut errors = Vec::new();
        let mut warnings = Vec::new();
        let mut file_values = match secrets_file {
            Some(path) => match read_secrets_file(path) {
                Ok(values) => values,
                Err(mut e) => {
                    errors.append(&mut e);
                    return Err(SecretsLoadError { errors });
                }
            },
            None => HashMap::new(),
        };
        let searched = match secrets_file {
            Some(p) => format!("{} or sluice's environment", p.display()),
            None => "sluice's environment".to_string(),
        };

        let mut store = SecretStore::default();
        for profile in profiles {
            for (i, credential) in profile.credentials.iter().enumerate() {
                let Some(cref) = profile.credential_ref(i) else {
                    continue;
                };
                // Each env var's own value: the secrets file first, then the environment.
                let mut own: Vec<Result<(usize, SecretOrigin), Unavailability>> = Vec::new();
                for key in &credential.env_vars {
                    let (value, source) = match file_values.remove(key.as_str()) {
                        // A refreshed value comes from its refresh alone (`env` holds the
                        // current token): never a file's, which may be stale or expired.
                        Some((mut value, _line)) if credential.is_refreshed() => {
                            value.zeroize();
                            (env(key.as_str()), SecretSource::Environment)
                        }
                        Some((value, _line)) => (Some(value), SecretSource::SecretsFile),
                        None => (env(key.as_str()), SecretSource::Environment),
                    };
                    let entry = match value.map(Secret::new) {
                        Some(Ok(secret)) => {
                            let len = secret.expose().chars().count();
                            if len < SHORT_SECRET_LEN {
                                warnings.push(SecretsWarning::ShortValue {
                                    credential: cref.clone(),
                                    key: key.clone(),
                                    len,
                                });
                            }
                            store.secrets.push(secret);
                            let origin = SecretOrigin {
                                source,
                                key: key.clone(),
                            };
                            Ok((store.secrets.len() - 1, origin))
                        }
                        Some(Err(reason)) => Err(reason),
                        // The refresh supplies it; none valid now: the refresh is failing.
                        None if credential.is_refreshed() => Err(Unavailability::NotRefreshed),
                        None => Err(Unavailability::Unset),
                    };
                    own.push(entry);
                }
                let first = own.iter().find_map(|e| e.as_ref().ok()).cloned();
                if credential.required && first.is_none() && !credential.is_refreshed() {
                    match own
                        .iter()
                        .zip(&credential.env_vars)
                        .find(|(e, _)| matches!(e, Err(Unavailability::ForbiddenCharacters)))
                    {
                        Some((_, key)) => errors.push(SecretsError::RequiredInvalid {
                            credential: cref.clone(),
                            key: key.clone(),
                        }),
                        None => errors.push(SecretsError::RequiredMissing {
                            credential: cref.clone(),
                            env_vars: credential.env_vars.clone(),
                            searched: searched.clone(),
                        }),
                    }
                }
                for (key, entry) in credential.env_vars.iter().zip(own) {
                    let entry = match (entry, &first) {
                        (Err(Unavailability::Unset), Some(shared)) => Ok(shared.clone()),
                        (entry, _) => entry,
                    };
                    if let Err(reason) = entry
                        && !credential.required
                        && !credential.is_refreshed()
                    {
                        warnings.push(SecretsWarning::Unavailable {
                            credential: cref.clone(),
                            key: key.clone(),
                            reason,
                        });
                    }
                    store.keys.insert(key.clone(), entry);
                }
            }
        }
        if let Some(path) = secrets_file {
            let mut unused: Vec<(String, usize)> = file_values
                .drain()
                .map(|(key, (mut value, line))| {
                    value.zeroize();
                    (key, line)
                })
                .collect();
            unused.sort_by_key(|(_, line)| *line);
            warnings.extend(
                unused
                    .into_iter()
                    .map(|(key, line)| SecretsWarning::UnusedFileKey {
                        path: path.to_path_buf(),
                        line,
                        key,
                    }),
            );
        }
        if errors.is_empty() {
            Ok(LoadedSecrets { store, warnings })
        } else {
            Err(SecretsLoadError { errors })
        }
    }

    /// The secret for an env var of a profile credential, or why there is none. `None`: not
    /// an env var of any credential.
    pub(super) fn get(&self, key: &str) -> Option<Result<&Secret, Unavailability>> {
        let entry = self.keys.get(key)?;
        Some(match entry {
            Ok((index, _)) => self.secrets.get(*index).ok_or(Unavailability::Unset),
            Err(reason) => Err(*reason),
        })
    }

    /// [`SecretStore::get`] for a request: a refreshed token past its expiry is not served.
    pub(super) fn serving(&self, key: &str) -> Option<Result<&Secret, Unavailability>> {
        let found = self.get(key)?;
        let expired = self
            .expires
            .get(key)
            .is_some_and(|at| std::time::SystemTime::now() >= *at);
        Some(if expired {
            Err(Unavailability::NotRefreshed)
        } else {
            found
        })
    }

    /// A refreshed credential's env var takes `token` (its value and expiry) in place of
    /// what it held; `None` (no token yet): what it held, if anything, is no longer served.
    pub(super) fn set_refreshed(
        &mut self,
        key: &EnvKey,
        token: Option<(Secret, std::time::SystemTime)>,
    ) {
        let Some((secret, expires)) = token else {
            self.expires.insert(key.clone(), std::time::UNIX_EPOCH);
            return;
        };
        self.expires.insert(key.clone(), expires);
        let origin = SecretOrigin {
            source: SecretSource::Environment,
            key: key.clone(),
        };
        match self.keys.get(key) {
            // Its own slot (another env var of the credential may share it: same token).
            Some(Ok((index, _))) => {
                if let Some(slot) = self.secrets.get_mut(*index) {
                    *slot = secret;
                }
            }
            _ => {
                self.secrets.push(secret);
                self.keys
                    .insert(key.clone(), Ok((self.secrets.len() - 1, origin)));
            }
        }
    }

    /// A second copy of every value (zeroized on drop like the first).
    pub(super) fn copy(&self) -> SecretStore {
        SecretStore {
            secrets: self.secrets.iter().map(Secret::copy).collect(),
            keys: self.keys.clone(),
            expires: self.expires.clone(),
        }
    }

    /// Where an env var's value came from (for a startup summary), or why there is none.
    pub fn origin(&self, key: &str) -> Option<Result<&SecretOrigin, Unavailability>> {
        let entry = self.keys.get(key)?;
        Some(match entry {
            Ok((_, origin)) => Ok(origin),
            Err(reason) => Err(*reason),
        })
    }

    /// Whether the env var has a usable value.
    pub fn is_available(&self, key: &str) -> bool {
        matches!(self.get(key), Some(Ok(_)))
    }
}

// === The secrets file ===

/// A parsed secrets file: name → (value, line). Values drop into `Secret`s or are zeroized.
pub(crate) type FileValues = HashMap<String, (String, usize)>;

pub(crate) fn read_secrets_file(path: &Path) -> Result<FileValues, Vec<SecretsError>> {
    // A regular file within its limit, read off the proxy's workers (`config_file`); the
    // owner and mode checked are those of the file that was read.
    let contents =
        crate::config_file::read(path, crate::config_file::Kind::Secrets).map_err(|source| {
            vec![SecretsError::Unusable {
                path: path.to_path_buf(),
                source,
            }]
        })?;
    check_file(path, &contents.meta).map_err(|e| vec![e])?;
    parse_secrets(path, &contents.bytes)
}

pub(super) fn check_file(path: &Path, meta: &std::fs::Metadata) -> Result<(), SecretsError> {
    let uid = current_uid().ok_or_else(|| SecretsError::UnknownUid {
        path: path.to_path_buf(),
    })?;
    check_metadata(path, meta.permissions().mode(), meta.uid(), uid)
}

/// The policy on the file's owner and mode, apart from the syscalls that feed it (that it is
/// a regular file is `config_file`'s to check).
fn check_metadata(path: &Path, mode: u32, owner: u32, uid: u32) -> Result<(), SecretsError> {
    if mode & 0o077 != 0 {
        return Err(SecretsError::InsecureMode {
            path: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    if owner != uid {
        return Err(SecretsError::WrongOwner {
            path: path.to_path_buf(),
            owner,
            uid,
        });
    }
    Ok(())
}

/// The effective uid, from `/proc/self/status` (`Uid: real effective saved fs`): the owner
/// of `/proc/self` would be root for a non-dumpable process.
fn current_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// `KEY=VALUE` lines; blank lines and `#` comments skipped; an optional `export ` before the
/// name; whitespace around name and value trimmed; one pair of matching quotes around the
/// value removed (no escapes). A CR before the LF is dropped.
fn parse_secrets(path: &Path, bytes: &[u8]) -> Result<FileValues, Vec<SecretsError>> {
    let mut values: FileValues = HashMap::new();
    let mut errors = Vec::new();
    let malformed = |line, problem| SecretsError::Malformed {
        path: path.to_path_buf(),
        line,
        problem,
    };
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line_no = i + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let Ok(line) = std::str::from_utf8(raw) else {
            errors.push(malformed(line_no, LineProblem::NotUtf8));
            continue;
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line
            .strip_prefix("export")
            .filter(|rest| rest.starts_with([' ', '\t']))
            .unwrap_or(line);
        let Some((name, value)) = line.split_once('=') else {
            errors.push(malformed(line_no, LineProblem::NoEquals));
            continue;
        };
        let name = name.trim();
        if !placeholder::is_valid_key(name) {
            errors.push(malformed(line_no, LineProblem::InvalidName));
            continue;
        }
        let value = value.trim();
        let value = [('"', '"'), ('\'', '\'')]
            .iter()
            .find_map(|&(open, close)| value.strip_prefix(open).and_then(|v| v.strip_suffix(close)))
            .unwrap_or(value);
        if let Some((_, first)) = values.get(name) {
            errors.push(SecretsError::DuplicateKey {
                path: path.to_path_buf(),
                line: line_no,
                key: name.to_string(),
                first: *first,
            });
            continue;
        }
        values.insert(name.to_string(), (value.to_string(), line_no));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::profile;
    use crate::policy::Source;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const PROFILES: &str = "\
id: github
credentials:
  - name: token
    env_vars: [GITHUB_TOKEN, GH_TOKEN]
    required: true
endpoints: [{host: api.github.com, port: 443}]
---
id: slack
credentials:
  - name: bot
    env_vars: [SLACK_BOT_TOKEN]
  - name: app
    env_vars: [SLACK_APP_TOKEN]
endpoints: [{host: slack.com, port: 443}]
";

    fn profiles() -> Vec<ProviderProfile> {
        profile::load(&[Source {
            name: "p.yaml".into(),
            text: PROFILES.into(),
        }])
        .unwrap()
        .profiles
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    struct TempFile(PathBuf);

    impl TempFile {
        fn new(contents: &str, mode: u32) -> TempFile {
            static N: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "sluice-secrets-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&path, contents).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn expose(store: &SecretStore, key: &str) -> Option<String> {
        match store.get(key) {
            Some(Ok(s)) => Some(s.expose().to_string()),
            _ => None,
        }
    }

    #[test]
    fn secret_is_redacted_and_refuses_control_characters() {
        let s = Secret::new("hunter2".into()).unwrap();
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(
            format!("{:#?}", Some(&s)),
            "Some(\n    Secret(<redacted>),\n)"
        );
        assert_eq!(s.expose(), "hunter2");
        for bad in ["a\rb", "a\nb", "a\0b"] {
            assert_eq!(
                Secret::new(bad.into()).unwrap_err(),
                Unavailability::ForbiddenCharacters
            );
        }
        assert_eq!(
            Secret::new(String::new()).unwrap_err(),
            Unavailability::Unset
        );
    }

    #[test]
    fn values_from_the_environment_with_alias_fallback() {
        let loaded = SecretStore::load(
            &profiles(),
            env(&[("GH_TOKEN", "gh-value"), ("SLACK_BOT_TOKEN", "xoxb-1")]),
            None,
        )
        .unwrap();
        let store = &loaded.store;
        // GITHUB_TOKEN is unset: it takes its credential's value under GH_TOKEN.
        assert_eq!(expose(store, "GITHUB_TOKEN").as_deref(), Some("gh-value"));
        assert_eq!(expose(store, "GH_TOKEN").as_deref(), Some("gh-value"));
        assert_eq!(
            store.origin("GITHUB_TOKEN").unwrap().unwrap().key.as_str(),
            "GH_TOKEN"
        );
        assert_eq!(expose(store, "SLACK_BOT_TOKEN").as_deref(), Some("xoxb-1"));
        assert_eq!(
            store.get("SLACK_APP_TOKEN").unwrap().unwrap_err(),
            Unavailability::Unset
        );
        assert!(store.get("NOT_A_PROFILE_KEY").is_none());
        let w: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            w,
            [
                "the value of env var `SLACK_BOT_TOKEN` (credential `slack/bot`) is only 6 characters long: sluice replaces every occurrence of it in responses and logs, so unrelated text that matches is replaced too",
                "env var `SLACK_APP_TOKEN` of credential `slack/app` is unavailable (no value is set); its placeholder will be answered with credential_unavailable"
            ]
        );
    }

    #[test]
    fn required_missing_is_an_error() {
        let err = SecretStore::load(&profiles(), env(&[]), None).unwrap_err();
        let msgs: Vec<String> = err.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            [
                "credential `github/token` is required, but none of its env vars (GITHUB_TOKEN, GH_TOKEN) is set in sluice's environment"
            ]
        );
        let err = SecretStore::load(&profiles(), env(&[("GH_TOKEN", "x\r\nInjected: 1")]), None)
            .unwrap_err();
        assert_eq!(
            err.errors[0].to_string(),
            "credential `github/token` is required, but the value of `GH_TOKEN` contains CR, LF or NUL, which could split an HTTP message"
        );
    }

    #[test]
    fn secrets_file_wins_over_the_environment() {
        let file = TempFile::new(
            "# comment\n\nGITHUB_TOKEN=from-file\nexport SLACK_BOT_TOKEN = \"quoted value\"\r\nUNUSED=1\n",
            0o600,
        );
        let loaded = SecretStore::load(
            &profiles(),
            env(&[("GITHUB_TOKEN", "from-env"), ("GH_TOKEN", "gh-env")]),
            Some(&file.0),
        )
        .unwrap();
        let store = &loaded.store;
        assert_eq!(expose(store, "GITHUB_TOKEN").as_deref(), Some("from-file"));
        assert_eq!(
            store.origin("GITHUB_TOKEN").unwrap().unwrap().source,
            SecretSource::SecretsFile
        );
        assert_eq!(expose(store, "GH_TOKEN").as_deref(), Some("gh-env"));
        assert_eq!(
            expose(store, "SLACK_BOT_TOKEN").as_deref(),
            Some("quoted value")
        );
        let w: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
        assert!(
            w.contains(&format!(
                "{}:5: `UNUSED` is not an env var of any provider credential; ignored",
                file.0.display()
            )),
            "{w:?}"
        );
    }

    #[test]
    fn secrets_file_mode_is_refused_with_exact_message() {
        let file = TempFile::new("GITHUB_TOKEN=the-secret-value\n", 0o644);
        let err = SecretStore::load(&profiles(), env(&[]), Some(&file.0)).unwrap_err();
        let p = file.0.display();
        assert_eq!(
            err.errors[0].to_string(),
            format!(
                "secrets file {p} has mode 0644; it must not be readable or writable by group or others (chmod 600 {p})"
            )
        );
        assert!(!format!("{err:?}").contains("the-secret-value"));
        let file = TempFile::new("GITHUB_TOKEN=x\n", 0o640);
        assert!(SecretStore::load(&profiles(), env(&[]), Some(&file.0)).is_err());
        let file = TempFile::new("GITHUB_TOKEN=x\n", 0o400);
        assert!(SecretStore::load(&profiles(), env(&[]), Some(&file.0)).is_ok());
    }

    #[test]
    fn secrets_file_must_be_a_regular_file_that_exists() {
        let dir = std::env::temp_dir();
        let err = SecretStore::load(&profiles(), env(&[]), Some(&dir)).unwrap_err();
        assert_eq!(
            err.errors[0].to_string(),
            format!(
                "secrets file {}: it is a directory, not a regular file; sluice reads only regular files",
                dir.display()
            )
        );
        let missing = Path::new("/nonexistent/sluice-secrets");
        let err = SecretStore::load(&profiles(), env(&[]), Some(missing)).unwrap_err();
        assert!(
            err.errors[0]
                .to_string()
                .starts_with("secrets file /nonexistent/sluice-secrets: cannot read: "),
            "{err}"
        );
    }

    #[test]
    fn owner_and_mode_policy() {
        let p = Path::new("/s");
        assert!(check_metadata(p, 0o100600, 1000, 1000).is_ok());
        assert!(check_metadata(p, 0o100400, 1000, 1000).is_ok());
        assert_eq!(
            check_metadata(p, 0o100600, 0, 1000)
                .unwrap_err()
                .to_string(),
            "secrets file /s is owned by uid 0, not by the uid sluice runs as (1000)"
        );
        assert_eq!(
            check_metadata(p, 0o100604, 1000, 1000)
                .unwrap_err()
                .to_string(),
            "secrets file /s has mode 0604; it must not be readable or writable by group or others (chmod 600 /s)"
        );
        assert!(current_uid().is_some());
    }

    #[test]
    fn malformed_lines_never_echo_their_text() {
        let file = TempFile::new(
            "sk-live-secret-in-a-bad-line\nbad name=x\nGH_TOKEN=a\nGH_TOKEN=b\n",
            0o600,
        );
        let err = SecretStore::load(&profiles(), env(&[]), Some(&file.0)).unwrap_err();
        let p = file.0.display();
        let msgs: Vec<String> = err.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            [
                format!("{p}:1: expected KEY=VALUE"),
                format!(
                    "{p}:2: the name before `=` is not a valid env var name (letters, digits and `_`)"
                ),
                format!("{p}:4: `GH_TOKEN` is already set at line 3"),
            ]
        );
        assert!(!format!("{err:?}").contains("sk-live-secret"));
    }

    #[test]
    fn store_debug_is_redacted() {
        let loaded = SecretStore::load(
            &profiles(),
            env(&[
                ("GH_TOKEN", "very-secret-gh"),
                ("SLACK_BOT_TOKEN", "very-secret-slack"),
            ]),
            None,
        )
        .unwrap();
        let debug = format!("{loaded:?}");
        assert!(!debug.contains("very-secret"), "{debug}");
        assert!(debug.contains("Secret(<redacted>)"));
    }
}
