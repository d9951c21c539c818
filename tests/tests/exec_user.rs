//! Whom `sluice exec` runs the command as when sluice is root, and whether the command can
//! save its work: the README's headline (`sluice exec --policy ... --providers ... -- CMD`,
//! as root, from a directory a normal user owns) clones a repository, commits a fix and
//! writes under `HOME`; a working directory root owns is refused unless `--user` says whom;
//! a user who can write neither its home nor the working directory gets a private `HOME`;
//! `sluice doctor` blames an unwritable `HOME`, not the network settings, for `EACCES`.
//! Real processes throughout; needs root.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_e2e::proxy::{TempDir, privileged, run};
use sluice_e2e::{sluice_bin, workspace_dir};

/// A uid with no account: a normal user, as far as the kernel is concerned.
const USER: u32 = 4321;

/// A directory tree the user may enter: `dir` 0755, and `work/` owned by `owner`.
fn setup(tag: &str, owner: u32) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&work, Some(owner), Some(owner)).unwrap();
    (dir, work)
}

/// `sluice exec ARGS` in `cwd` (sluice's environment: `env` added), with its exit code,
/// stdout and stderr.
fn exec(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new(sluice_bin());
    c.arg("exec").args(args).current_dir(cwd);
    for (k, v) in env {
        c.env(k, v);
    }
    run(&mut c)
}

fn minimal_policy(dir: &TempDir) -> String {
    dir.write("policy.yaml", "version: 1\nnetwork_policies: {}\n")
        .display()
        .to_string()
}

/// A bare repository in `at`, owned by the user, made by git as that user.
fn user_repo(at: &Path) {
    let script = format!(
        "set -e; git init -q -b main {src}; cd {src}; echo 'the bug' > bug.txt; git add bug.txt; git -c user.name=u -c user.email=u@example.invalid commit -q -m first; git clone -q --bare {src} {bare}",
        src = at.join("src").display(),
        bare = at.join("upstream.git").display(),
    );
    let (code, out, err) = run(Command::new("setpriv")
        .args(["--reuid", &USER.to_string(), "--regid", &USER.to_string()])
        .args(["--clear-groups", "env", "HOME=/nonexistent", "sh", "-c"])
        .arg(&script)
        .current_dir(at));
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn the_readme_headline_as_root_clones_commits_and_writes_home() {
    if !privileged("the_readme_headline_as_root_clones_commits_and_writes_home") {
        return;
    }
    let (dir, work) = setup("exec-headline", USER);
    user_repo(&work);
    let repo = workspace_dir();
    let policy = repo.join("configs/policies/llm-provider.yaml");
    let providers = repo.join("configs/providers/anthropic.yaml");
    let state = dir.path().join("state");
    // The agent's work: clone, fix, commit; a runtime writing its settings under HOME.
    let agent = "set -e; id -u; git clone -q upstream.git clone; cd clone; echo 'the fix' > bug.txt; git -c user.name=agent -c user.email=a@example.invalid commit -q -am fix; git log --format=%s | tr '\\n' ' '; echo; python3 -c 'import os, pathlib; p = pathlib.Path(os.environ[\"HOME\"], \".agent\", \"settings.json\"); p.parent.mkdir(exist_ok=True); p.write_text(\"{}\"); print(\"wrote\", p)'";
    let (code, out, err) = exec(
        &work,
        &[
            "--policy",
            policy.to_str().unwrap(),
            "--providers",
            providers.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            agent,
        ],
        // The flags exactly as the README shows them; the default audit log goes under
        // sluice's XDG_STATE_HOME, here the test's.
        &[
            ("ANTHROPIC_API_KEY", "sk-ant-test-not-real"),
            ("XDG_STATE_HOME", state.to_str().unwrap()),
        ],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let w = work.display();
    for line in [
        format!(
            "sluice: the command runs as uid {USER} (gid 65534, no account in /etc/passwd): the owner of the working directory (--user chooses another)"
        ),
        format!("sluice: its HOME is {w} (the working directory"),
        format!("sluice: it may write: {w} (the working directory"),
    ] {
        assert!(
            err.lines().any(|l| l.starts_with(&line)),
            "no `{line}` at start:\n{err}"
        );
    }
    assert!(!err.contains("WARNING"), "{err}");
    assert!(out.starts_with(&format!("{USER}\nfix first \n")), "{out}");
    assert!(
        out.contains(&format!("wrote {w}/.agent/settings.json")),
        "{out}"
    );
    // The fix is saved, as the user's.
    let fixed = work.join("clone/bug.txt");
    assert_eq!(std::fs::read_to_string(&fixed).unwrap(), "the fix\n");
    assert_eq!(std::fs::metadata(&fixed).unwrap().uid(), USER);
    assert!(state.join("sluice/exec-audit.jsonl").is_file());
}

#[test]
fn a_working_directory_root_owns_is_refused_unless_user_says_whom() {
    if !privileged("a_working_directory_root_owns_is_refused_unless_user_says_whom") {
        return;
    }
    let (dir, work) = setup("exec-root-owned", 0);
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    let policy = minimal_policy(&dir);
    let audit = dir.path().join("audit.jsonl");
    let ran = work.join("ran");
    let touch = format!("touch {} && id -u", ran.display());
    let base = [
        "--policy",
        policy.as_str(),
        "--audit-log",
        audit.to_str().unwrap(),
    ];
    let with = |extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(extra);
        a.extend(["--", "sh", "-c", touch.as_str()]);
        exec(&work, &a, &[])
    };
    let (code, out, err) = with(&[]);
    assert_eq!(code, 125, "{out}{err}");
    assert!(
        err.contains(&format!(
            "sluice: the working directory {} is owned by root, and the command never runs as root: pass --user NAME",
            work.display()
        )),
        "{err}"
    );
    assert!(!ran.exists(), "the command ran");
    for root in ["root", "0"] {
        let (code, _, err) = with(&["--user", root]);
        assert_eq!(code, 125, "{err}");
        assert!(
            err.contains(&format!("--user {root}: the command never runs as root")),
            "{err}"
        );
        assert!(!ran.exists(), "the command ran");
    }
    let (code, _, err) = with(&["--user", "no-such-user-h25"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("no such user"), "{err}");
    // Named: that user.
    let (code, out, err) = with(&["--user", "65534"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), "65534", "{err}");
    assert!(
        err.contains("sluice: the command runs as nobody (uid 65534, gid 65534): chosen by --user"),
        "{err}"
    );
}

#[test]
fn a_user_who_cannot_write_home_or_working_directory_gets_a_private_home() {
    if !privileged("a_user_who_cannot_write_home_or_working_directory_gets_a_private_home") {
        return;
    }
    // The working directory is root's (0755): granted, but not writable by the user.
    let (dir, work) = setup("exec-private-home", 0);
    let policy = minimal_policy(&dir);
    let audit = dir.path().join("audit.jsonl");
    let user = USER.to_string();
    let script = "echo \"HOME=$HOME\"; python3 -c 'import os; open(os.path.join(os.environ[\"HOME\"], \"n\"), \"w\").write(\"x\"); print(\"home written\")'; touch here 2>/dev/null || echo 'workdir refused'";
    let (code, out, err) = exec(
        &work,
        &[
            "--policy",
            &policy,
            "--audit-log",
            audit.to_str().unwrap(),
            "--user",
            &user,
            "--",
            "sh",
            "-c",
            script,
        ],
        &[],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let home = err
        .lines()
        .find_map(|l| l.strip_prefix("sluice: its HOME is "))
        .unwrap_or_else(|| panic!("no HOME at start:\n{err}"));
    let (path, why) = home.split_once(' ').unwrap();
    assert!(why.starts_with("(private, removed at exit"), "{home}");
    assert!(
        path.contains("/sluice-exec-") && path.ends_with("/home"),
        "{path}"
    );
    assert!(out.contains(&format!("HOME={path}\n")), "{out}");
    assert!(out.contains("home written"), "{out}\n{err}");
    assert!(out.contains("workdir refused"), "{out}");
    assert!(
        !Path::new(path).exists(),
        "the private HOME was left behind"
    );
    // The grant the user's modes make useless is said at start.
    assert!(
        err.contains(&format!(
            "sluice: WARNING: {} is granted read-write (the working directory",
            work.display()
        )),
        "{err}"
    );
}

#[test]
fn doctor_blames_an_unwritable_home_for_eacces() {
    if !privileged("doctor_blames_an_unwritable_home_for_eacces") {
        return;
    }
    let npm = run(Command::new("sh").args(["-c", "command -v npm"])).0 == 0;
    if !npm {
        eprintln!("npm is not installed: its check cannot fail here");
        return;
    }
    // A HOME the user cannot write (root's, 0755), as under exec before it chose one.
    let (dir, work) = setup("doctor-home", 0);
    let user = USER.to_string();
    let (_, out, err) = run(Command::new("setpriv")
        .args(["--reuid", &user, "--regid", &user, "--clear-groups", "env"])
        .arg(format!("HOME={}", work.display()))
        .arg(sluice_bin())
        .arg("doctor")
        .current_dir(dir.path()));
    let npm_line = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("npm "))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        npm_line.contains("FAILED") && npm_line.contains("EACCES"),
        "{out}\n{err}"
    );
    assert!(
        npm_line.contains(&format!(
            "fix: it could not write a file, and HOME ({}) is not writable by uid {USER}",
            work.display()
        )),
        "{npm_line}"
    );
    assert!(!npm_line.contains(".npmrc"), "{npm_line}");
}

/// `sluice exec --policy P --audit-log A [extra] -- sh -c SCRIPT` in `work`, `wrap` (a command
/// and its arguments) before sluice when given.
fn exec_script(
    dir: &TempDir,
    work: &Path,
    extra: &[&str],
    script: &str,
    wrap: &[&str],
) -> (i32, String, String) {
    let policy = minimal_policy(dir);
    let audit = dir.path().join("audit.jsonl");
    let mut c = Command::new(wrap.first().copied().unwrap_or("env"));
    c.args(wrap.iter().skip(1)).arg(sluice_bin()).arg("exec");
    c.args(["--policy", &policy, "--audit-log", audit.to_str().unwrap()]);
    c.args(extra)
        .args(["--", "sh", "-c", script])
        .current_dir(work);
    run(&mut c)
}

#[test]
fn a_working_directory_s_group_is_never_the_command_s() {
    if !privileged("a_working_directory_s_group_is_never_the_command_s") {
        return;
    }
    // Owned by a uid without an account, in group 42 (`shadow` on Debian): whoever owns the
    // directory chose that group, so the command must not get it.
    let (dir, work) = setup("exec-dir-group", 4242);
    std::os::unix::fs::chown(&work, Some(4242), Some(42)).unwrap();
    let script = "id -g; id -G; cat /etc/shadow >/dev/null 2>&1 && echo 'shadow read' || echo 'shadow refused'";
    let (code, out, err) = exec_script(&dir, &work, &[], script, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "65534\n65534\nshadow refused\n", "{err}");
    assert!(
        err.contains("sluice: the command runs as uid 4242 (gid 65534, no account in /etc/passwd)"),
        "{err}"
    );
}

#[test]
fn a_system_account_s_working_directory_is_refused_unless_user_says_whom() {
    if !privileged("a_system_account_s_working_directory_is_refused_unless_user_says_whom") {
        return;
    }
    // Below UID_MIN (a service such as postgres, with or without an account) and nobody.
    for owner in [999, 100, 65534] {
        let (dir, work) = setup("exec-system-owned", owner);
        let ran = work.join("ran");
        let script = format!("touch {} && id -u", ran.display());
        let (code, out, err) = exec_script(&dir, &work, &[], &script, &[]);
        assert_eq!(code, 125, "{out}{err}");
        assert!(
            err.contains(&format!(
                "sluice: the working directory {} is owned by uid {owner}, not a normal user's (uid 1000 to 65533",
                work.display()
            )) && err.contains("pass --user NAME"),
            "{err}"
        );
        assert!(!ran.exists(), "the command ran as {owner}");
        // Named by the operator, a system account is allowed.
        let user = owner.to_string();
        let (code, out, err) = exec_script(&dir, &work, &["--user", &user], &script, &[]);
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(out.trim(), user, "{err}");
    }
}

#[test]
fn an_account_in_root_s_group_is_refused_by_sluice_not_the_shim() {
    if !privileged("an_account_in_root_s_group_is_refused_by_sluice_not_the_shim") {
        return;
    }
    // An account whose primary group is root's, in a passwd file bind-mounted over
    // /etc/passwd in a private mount namespace (the host's is untouched).
    let (dir, work) = setup("exec-root-group", 4400);
    let mut passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    passwd.push_str("h25op:x:4400:0::/nonexistent:/bin/sh\n");
    let fake = dir.write("passwd", &passwd);
    let fake = fake.to_str().unwrap();
    let wrap = [
        "unshare",
        "--mount",
        "sh",
        "-c",
        "mount --bind \"$0\" /etc/passwd && exec \"$@\"",
        fake,
    ];
    let ran = work.join("ran");
    let script = format!("touch {} && id", ran.display());
    for extra in [&[][..], &["--user", "h25op"][..], &["--user", "4400"][..]] {
        let (code, out, err) = exec_script(&dir, &work, extra, &script, &wrap);
        assert_eq!(code, 125, "{extra:?}: {out}{err}");
        assert!(
            err.contains(
                "its group is root's (gid 0), and the command never runs with root's group"
            ),
            "{extra:?}: {err}"
        );
        assert!(!err.contains("Usage"), "{err}");
        assert!(!ran.exists(), "the command ran: {out}");
    }
}

#[test]
fn the_shim_refuses_a_working_directory_other_than_the_one_sluice_pinned() {
    if !privileged("the_shim_refuses_a_working_directory_other_than_the_one_sluice_pinned") {
        return;
    }
    // Between sluice's last check and the shim's chdir, the path could be swapped for a link
    // to another user's directory: the shim compares what it entered with the pinned id.
    let (_dir, work) = setup("exec-pinned", USER);
    let other = TempDir::new("exec-pinned-other");
    let id = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        format!("{}:{}", m.dev(), m.ino())
    };
    let w = work.to_str().unwrap();
    for (pinned, code) in [(id(other.path()), 125), (id(&work), 0)] {
        let (got, out, err) = run(Command::new(sluice_bin())
            .args(["__shim", "--proxy", "127.0.0.1:9", "--uid", "4321", "--gid"])
            .args([
                "65534", "--ro", "/usr", "--ro", "/lib", "--ro", "/etc", "--exec",
            ])
            .args(["/usr/bin", "--ro", w, "--workdir", w, "--allow-host-netns"])
            .args(["--", "/usr/bin/pwd"])
            .env("SLUICE_SHIM_WORKDIR_ID", &pinned));
        assert_eq!(got, code, "{out}{err}");
        if code == 0 {
            assert_eq!(out.trim(), w, "{err}");
        } else {
            assert!(
                err.contains("the working directory is not the one the supervisor started in"),
                "{err}"
            );
            assert!(out.is_empty(), "the command ran: {out}");
        }
    }
}
