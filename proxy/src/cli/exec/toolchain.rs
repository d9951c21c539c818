//! What the command's toolchain needs: the user's `PATH` is kept, so each of its directories
//! may be executed from, and the program the command names (a Python or Node installed under
//! the user's home, say) gets its own directory, its installation prefix read-only (its
//! standard library), and, for a script, the same for its interpreter. Nothing more.
//! Directories the command's user cannot enter (root's `~/.cargo/bin` for `nobody`) are
//! dropped from its `PATH`: they would only shadow the programs it can run.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::grants::{Access, Grant};

/// How many bytes of a script are read for its `#!` line.
const SHEBANG_BYTES: usize = 256;

fn grant(path: PathBuf, access: Access, why: &str) -> Grant {
    Grant {
        path,
        access,
        why: why.to_string(),
    }
}

/// `cmd` as an absolute path: itself if it has a `/` (relative to `cwd`), else the first
/// executable file of that name on `path`.
pub fn resolve(cmd: &str, path: Option<&OsStr>, cwd: &Path) -> Option<PathBuf> {
    if cmd.contains('/') {
        return Some(cwd.join(cmd));
    }
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(cmd))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Whether `uid`/`gid` may search `dir` and every directory above it (owner, group or
/// other execute bit; the sandbox has no supplementary groups).
fn enterable(dir: &Path, uid: u32, gid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    if uid == 0 {
        return true;
    }
    dir.ancestors().all(|d| {
        std::fs::metadata(d).is_ok_and(|m| {
            let bit = if m.uid() == uid {
                0o100
            } else if m.gid() == gid {
                0o010
            } else {
                0o001
            };
            m.is_dir() && m.mode() & bit != 0
        })
    })
}

/// The `PATH` the command gets: sluice's own, without relative entries, `/`, and directories
/// its user cannot enter.
pub fn command_path(path: Option<&OsStr>, uid: u32, gid: u32) -> Option<std::ffi::OsString> {
    let kept: Vec<PathBuf> = std::env::split_paths(path?)
        .filter(|d| d.is_absolute() && d != Path::new("/") && enterable(d, uid, gid))
        .collect();
    std::env::join_paths(kept).ok()
}

/// The interpreter a script names on its `#!` line; through `env`, the program `env` would
/// find on `path`.
fn script_interpreter(file: &Path, path: Option<&OsStr>, cwd: &Path) -> Option<PathBuf> {
    let mut head = [0u8; SHEBANG_BYTES];
    let n = std::fs::File::open(file).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    let mut words = text.split_whitespace();
    let interp = PathBuf::from(words.next()?);
    if interp.file_name() == Some(OsStr::new("env")) {
        let program = words.find(|w| !w.starts_with('-'))?;
        return resolve(program, path, cwd);
    }
    Some(interp)
}

/// Grants for one program: its directory (execute), the directory of its real file
/// (execute), and when that is a `bin/`, the installation prefix above it (read-only).
fn program_grants(program: &Path, out: &mut Vec<Grant>) {
    let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    for p in [program, real.as_path()] {
        if let Some(dir) = p.parent() {
            out.push(grant(
                dir.to_path_buf(),
                Access::Execute,
                "the command's directory",
            ));
        }
    }
    if let Some(bin) = real.parent()
        && bin.file_name() == Some(OsStr::new("bin"))
        && let Some(prefix) = bin.parent()
        && prefix != Path::new("/")
    {
        out.push(grant(
            prefix.to_path_buf(),
            Access::ReadOnly,
            "the installation of the command's program",
        ));
    }
}

/// The grants the command's `PATH` (as [`command_path`] made it) and program need.
pub fn grants(command: &str, path: Option<&OsStr>, cwd: &Path) -> Vec<Grant> {
    let mut out = Vec::new();
    if let Some(path) = path {
        for dir in std::env::split_paths(path) {
            if dir.is_absolute() && dir.is_dir() && dir != Path::new("/") {
                out.push(grant(
                    dir,
                    Access::Execute,
                    "a directory on the command's PATH",
                ));
            }
        }
    }
    if let Some(program) = resolve(command, path, cwd) {
        program_grants(&program, &mut out);
        if let Some(interp) = script_interpreter(&program, path, cwd) {
            program_grants(&interp, &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_script_under_a_home_installation_gets_its_interpreter_and_prefix() {
        let base = std::env::temp_dir().join(format!("sluice-toolchain-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let bin = base.join("opt/node/bin");
        let tools = base.join("tools");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&tools).unwrap();
        let exe = |p: &Path, text: &str| {
            std::fs::write(p, text).unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        exe(&bin.join("node"), "binary");
        exe(
            &tools.join("agent"),
            "#!/usr/bin/env node\nconsole.log(1)\n",
        );
        let path = std::env::join_paths([tools.clone(), bin.clone(), "relative".into()]).unwrap();
        let g = grants("agent", Some(&path), Path::new("/"));
        let has = |p: &Path, a: Access| g.iter().any(|x| x.path == p && x.access == a);
        assert!(has(&tools, Access::Execute), "{g:?}");
        assert!(has(&bin, Access::Execute), "{g:?}");
        assert!(has(&base.join("opt/node"), Access::ReadOnly), "{g:?}");
        assert!(!g.iter().any(|x| x.path == Path::new("relative")));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_path_keeps_only_what_the_user_can_enter() {
        let base = std::env::temp_dir().join(format!("sluice-path-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let closed = base.join("closed/bin");
        let open = base.join("open/bin");
        std::fs::create_dir_all(&closed).unwrap();
        std::fs::create_dir_all(&open).unwrap();
        for d in [&base, &base.join("open"), &open] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::set_permissions(base.join("closed"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        let path = std::env::join_paths([&closed, &open, &PathBuf::from("rel")]).unwrap();
        // A uid and gid that own nothing here, unless this runs as them.
        let kept = command_path(Some(&path), 65534, 65534).unwrap();
        if rustix::process::geteuid().as_raw() != 65534 {
            assert_eq!(kept, open.as_os_str(), "{kept:?}");
        }
        let own = command_path(Some(&path), 0, 0).unwrap();
        assert_eq!(
            own,
            std::env::join_paths([&closed, &open]).unwrap(),
            "{own:?}"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn root_on_path_is_never_granted() {
        let g = grants("sh", Some(OsStr::new("/:/usr/bin")), Path::new("/"));
        assert!(!g.iter().any(|x| x.path == Path::new("/")), "{g:?}");
    }
}
