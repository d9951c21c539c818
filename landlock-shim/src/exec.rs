//! Finding, and finally executing, the command (spec §1.4 step 17).
//!
//! Owns PATH resolution (done before Landlock, with the child's PATH), the choice of the ELF
//! interpreter grant, the `execve` itself and the 126/127 exit codes. Does not build the
//! environment (`env`) or decide what is granted (`landlock`).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use crate::cli::{CommandLine, FsGrants};
use crate::elf::{self, Interpreter};
use crate::env::ChildEnv;

/// Exit status when the command cannot be executed (found, but EACCES, ENOEXEC...).
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// Exit status when the command does not exist.
pub const EXIT_NOT_FOUND: u8 = 127;

/// Why the command could not be resolved to a file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// No such file, or no PATH entry holds it.
    #[error("{program}: command not found")]
    NotFound {
        /// As given.
        program: String,
    },
    /// The file exists but is a directory or has no execute bit.
    #[error("{path}: not an executable file")]
    NotExecutable {
        /// The candidate found.
        path: PathBuf,
    },
}

impl ResolveError {
    /// The shell-compatible exit status: 127 not found, 126 not executable.
    pub fn exit_code(&self) -> u8 {
        match self {
            ResolveError::NotFound { .. } => EXIT_NOT_FOUND,
            ResolveError::NotExecutable { .. } => EXIT_CANNOT_EXECUTE,
        }
    }
}

enum Candidate {
    Missing,
    NotExecutable,
    Executable,
}

fn inspect(path: &Path) -> Candidate {
    match std::fs::metadata(path) {
        Err(_) => Candidate::Missing,
        Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
            Candidate::Executable
        }
        Ok(_) => Candidate::NotExecutable,
    }
}

/// Resolves `program` like `execvp` would in the child: a name with a slash is a path
/// (relative to `cwd`); a bare name is looked up in the absolute entries of `path_var`.
pub fn resolve(
    program: &OsStr,
    path_var: Option<&OsStr>,
    cwd: &Path,
) -> Result<PathBuf, ResolveError> {
    let not_found = || ResolveError::NotFound {
        program: program.to_string_lossy().into_owned(),
    };
    if program.is_empty() {
        return Err(not_found());
    }
    if program.as_bytes().contains(&b'/') {
        let path = cwd.join(program);
        return match inspect(&path) {
            Candidate::Executable => Ok(path),
            Candidate::NotExecutable => Err(ResolveError::NotExecutable { path }),
            Candidate::Missing => Err(not_found()),
        };
    }
    let mut denied = None;
    for dir in std::env::split_paths(path_var.unwrap_or_default()) {
        // Relative PATH entries would depend on the directory; the shim never uses them.
        if !dir.is_absolute() {
            continue;
        }
        let path = dir.join(program);
        match inspect(&path) {
            Candidate::Executable => return Ok(path),
            Candidate::NotExecutable => {
                denied.get_or_insert(path);
            }
            Candidate::Missing => {}
        }
    }
    Err(match denied {
        Some(path) => ResolveError::NotExecutable { path },
        None => not_found(),
    })
}

/// What the shim does about the command's ELF interpreter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InterpGrant {
    /// Grant execute on this file (canonical path).
    Grant(PathBuf),
    /// Found an interpreter but grant nothing, and why.
    Skip {
        /// The interpreter.
        path: PathBuf,
        /// Why not.
        reason: &'static str,
    },
    /// Static binary, unreadable file, or `--no-interp-grant`.
    None,
}

/// The ELF interpreter that must be executable for `program` to start: its own `PT_INTERP`,
/// or, for a `#!` script, the `PT_INTERP` of the script's interpreter.
pub fn elf_interpreter(program: &Path) -> io::Result<Option<PathBuf>> {
    match elf::read_interpreter(&File::open(program)?)? {
        Interpreter::Elf(path) => Ok(Some(path)),
        Interpreter::Script(script_interp) => match File::open(&script_interp) {
            Ok(file) => match elf::read_interpreter(&file)? {
                Interpreter::Elf(path) => Ok(Some(path)),
                _ => Ok(None),
            },
            Err(_) => Ok(None),
        },
        Interpreter::None => Ok(None),
    }
}

/// Decides the interpreter grant. The interpreter gets `Execute` only if it already lies
/// under a granted `--ro` or `--exec` root: the `PT_INTERP` string comes from a file the
/// sandbox may have written, so it must never widen *read* access.
pub fn interpreter_grant(program: &Path, fs: &FsGrants) -> InterpGrant {
    let Ok(Some(interp)) = elf_interpreter(program) else {
        return InterpGrant::None;
    };
    let Ok(canonical) = std::fs::canonicalize(&interp) else {
        return InterpGrant::Skip {
            path: interp,
            reason: "interpreter does not exist",
        };
    };
    let readable = fs
        .ro
        .iter()
        .chain(&fs.exec)
        .any(|root| std::fs::canonicalize(root).is_ok_and(|root| canonical.starts_with(root)));
    if readable {
        InterpGrant::Grant(canonical)
    } else {
        InterpGrant::Skip {
            path: canonical,
            reason: "interpreter is not under a granted --ro or --exec root",
        }
    }
}

/// Replaces this process with the command. Returns only on failure.
pub fn exec(program: &Path, command: &CommandLine, env: &ChildEnv) -> io::Error {
    std::process::Command::new(program)
        .arg0(&command.program)
        .args(&command.args)
        .env_clear()
        .envs(env.iter())
        .exec()
}

/// The exit status for a failed `execve`: 127 for ENOENT/ENOTDIR, else 126.
pub fn exit_code(err: &io::Error) -> u8 {
    match err.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => EXIT_NOT_FOUND,
        _ => EXIT_CANNOT_EXECUTE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn resolves_bare_names_in_absolute_path_entries() {
        let path = OsString::from("relative:/nonexistent:/usr/bin:/bin");
        let found = resolve(OsStr::new("true"), Some(&path), Path::new("/")).unwrap();
        assert_eq!(found, Path::new("/usr/bin/true"));
    }

    #[test]
    fn missing_and_non_executable() {
        let err = resolve(
            OsStr::new("no-such-tool-x"),
            Some(OsStr::new("/usr/bin")),
            Path::new("/"),
        )
        .unwrap_err();
        assert_eq!(err.exit_code(), EXIT_NOT_FOUND);
        let err = resolve(OsStr::new("/etc/passwd"), None, Path::new("/")).unwrap_err();
        assert_eq!(err.exit_code(), EXIT_CANNOT_EXECUTE);
        let err = resolve(OsStr::new("/usr"), None, Path::new("/")).unwrap_err();
        assert_eq!(err.exit_code(), EXIT_CANNOT_EXECUTE);
        let err = resolve(OsStr::new(""), None, Path::new("/")).unwrap_err();
        assert_eq!(err.exit_code(), EXIT_NOT_FOUND);
    }

    #[test]
    fn relative_paths_are_joined_to_the_directory() {
        let found = resolve(OsStr::new("./true"), None, Path::new("/usr/bin")).unwrap();
        assert_eq!(found, Path::new("/usr/bin/./true"));
    }

    #[test]
    fn exec_error_codes() {
        assert_eq!(exit_code(&io::Error::from_raw_os_error(libc::ENOENT)), 127);
        assert_eq!(exit_code(&io::Error::from_raw_os_error(libc::EACCES)), 126);
        assert_eq!(exit_code(&io::Error::from_raw_os_error(libc::ENOEXEC)), 126);
    }
}
