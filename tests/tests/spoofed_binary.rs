//! A spoofed binary: a program the policy does not list makes a user and mount namespace of
//! its own (`unshare -Urm`, open to any user where unprivileged user namespaces are), mounts
//! itself over the path of a program the policy lists, and runs under that path. `/proc`
//! then shows the listed path as its executable. A process in a user namespace other than
//! sluice's is never matched by its path: it is refused, and no audit event credits the listed
//! program. Nor can it lend that identity to a child it left in sluice's namespace (the
//! child's ancestor is not believed either), nor can a process that stays in sluice's
//! namespace run the mounted-over file through the other namespace's root and pass for the
//! listed program: its path must lead, in its own root, to the file it runs. (Under
//! `sluice exec` the shim refuses `unshare` itself.)
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_e2e::ocsf::{action, is_open};
use sluice_e2e::origin::HttpOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, privileged, run};

/// A copy of curl at a path only the policy names.
fn listed_curl(dir: &TempDir) -> PathBuf {
    let copy = dir.path().join("listed-curl");
    std::fs::copy("/usr/bin/curl", &copy).expect("copy curl");
    copy
}

/// A request through sluice as plain HTTP, in Python: prints the status.
const FETCH: &str = r#"
import sys, urllib.request, urllib.error
proxy, url = sys.argv[1], sys.argv[2]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({'http': proxy}))
try:
    r = opener.open(url, timeout=10); print(r.status, r.read().decode(errors='replace'))
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(errors='replace'))
"#;

fn curl_status(cmd: &mut Command) -> (String, String) {
    let (code, out, err) = run(cmd);
    assert_eq!(code, 0, "{err}");
    (out.get(..3).unwrap_or_default().to_string(), out)
}

/// sluice allowing only `listed` to reach `origin` (loopback).
fn listed_only(listed: &Path, origin: &HttpOrigin) -> Sluice {
    let policy = format!(
        "version: 1\nnetwork_policies:\n  listed:\n    endpoints:\n      - {{host: 127.0.0.1, port: {}}}\n    binaries:\n      - path: {}\n",
        origin.port(),
        listed.display()
    );
    Sluice::start(&policy, &["--allow-loopback-upstream"])
}

fn setup(tag: &str) -> (TempDir, PathBuf, HttpOrigin, Sluice) {
    let dir = TempDir::new(tag);
    let listed = listed_curl(&dir);
    let origin = HttpOrigin::start();
    let sluice = listed_only(&listed, &origin);
    (dir, listed, origin, sluice)
}

fn curl_args(listed: &Path, sluice: &Sluice, origin: &HttpOrigin) -> Vec<String> {
    vec![
        listed.display().to_string(),
        "-s".into(),
        "-w".into(),
        "%{http_code}".into(),
        "-o".into(),
        "/dev/null".into(),
        "-x".into(),
        sluice.proxy_url(),
        format!("http://127.0.0.1:{}/spoof", origin.port()),
    ]
}

#[test]
fn a_program_mounted_over_a_listed_path_in_its_own_namespaces_is_refused() {
    if !privileged("a_program_mounted_over_a_listed_path_in_its_own_namespaces_is_refused") {
        return;
    }
    let (dir, listed, origin, sluice) = setup("spoof");
    // The listed program itself, in sluice's namespaces: allowed.
    let args = curl_args(&listed, &sluice, &origin);
    let (status, _) = curl_status(Command::new(&args[0]).args(&args[1..]));
    assert_eq!(status, "200", "{}", sluice.stderr());
    assert_eq!(origin.received().len(), 1);

    // Python mounted over the listed path in a user and mount namespace of its own.
    let script = dir.write("fetch.py", FETCH);
    let spoof = format!(
        "mount --bind /usr/bin/python3 {listed} && exec {listed} {script} {proxy} http://127.0.0.1:{port}/spoof",
        listed = listed.display(),
        script = script.display(),
        proxy = sluice.proxy_url(),
        port = origin.port()
    );
    let (status, out) = curl_status(Command::new("unshare").args(["-Urm", "sh", "-c", &spoof]));
    assert_eq!(status, "403", "{out}\n{}", sluice.stderr());
    assert!(out.contains("user namespace other than sluice's"), "{out}");
    // The listed program itself, in a user namespace of its own: its path is not believed
    // either (it could have set its own `exe` link there).
    let mut own_userns = vec!["-Ur".to_string()];
    own_userns.extend(args);
    let (status, _) = curl_status(Command::new("unshare").args(&own_userns));
    assert_eq!(status, "403", "{}", sluice.stderr());
    assert_eq!(
        origin.received().len(),
        1,
        "nothing more reached the origin"
    );

    // Audited as refused; no event credits the listed program after the first request.
    let denied = |events: &[serde_json::Value]| {
        events
            .iter()
            .filter(|e| action(e) == 2 && e.to_string().contains("user namespace other than"))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while denied(&sluice.events()) < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let events = sluice.events();
    assert_eq!(denied(&events), 2, "{events:#?}");
    let allowed_opens = events
        .iter()
        .filter(|e| is_open(e) && action(e) == 1)
        .count();
    let allowed_requests = events
        .iter()
        .filter(|e| e["class_uid"] == 4002 && action(e) == 1)
        .count();
    assert!(
        allowed_opens + allowed_requests == 1,
        "only the honest request was allowed: {events:#?}"
    );
    assert_events_valid(&sluice);
}

/// A process in a user and mount namespace of its own, with python mounted over `listed`,
/// holding them open until dropped.
struct MountedOver(std::process::Child);

impl MountedOver {
    fn start(listed: &Path) -> MountedOver {
        MountedOver::run(&format!(
            "mount --bind /usr/bin/python3 {}",
            listed.display()
        ))
    }

    /// `setup` (shell) run in a user and mount namespace of its own, which it then holds.
    fn run(setup: &str) -> MountedOver {
        let child = Command::new("unshare")
            .args(["-Urm", "sh", "-c", &format!("{setup} && exec sleep 60")])
            .spawn()
            .expect("unshare");
        let pid = child.id();
        // Wait until the mount is in place (the sleep runs).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| !p.to_string_lossy().contains("sleep"))
            .unwrap_or(true)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the namespace never came up"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        MountedOver(child)
    }
}

impl Drop for MountedOver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_file_run_through_another_namespaces_root_or_a_spoofed_parent_is_not_the_listed_program() {
    if !privileged(
        "a_file_run_through_another_namespaces_root_or_a_spoofed_parent_is_not_the_listed_program",
    ) {
        return;
    }
    let (dir, listed, origin, sluice) = setup("spoof-root");
    let script = dir.write("fetch.py", FETCH);
    let url = format!("http://127.0.0.1:{}/spoof", origin.port());
    // In sluice's namespaces, python run through the other namespace's root: `/proc` prints
    // its path as the listed program's.
    let held = MountedOver::start(&listed);
    let through = format!("/proc/{}/root{}", held.0.id(), listed.display());
    let (status, out) = curl_status(
        Command::new(&through)
            .arg(&script)
            .arg(sluice.proxy_url())
            .arg(&url),
    );
    assert_eq!(status, "403", "{out}\n{}", sluice.stderr());
    assert!(out.contains("cannot be vouched for"), "{out}");
    drop(held);

    // A child left in sluice's namespaces by a parent that then made its own and runs as
    // the listed program: the child (python, unlisted) is not credited through it.
    let child = format!(
        "import time; time.sleep(1); exec(open('{}').read())",
        script.display()
    );
    let parent = format!(
        "python3 -c \"{child}\" {proxy} {url} & exec unshare -Urm sh -c 'mount --bind /usr/bin/python3 {listed} && exec {listed} -c \"import time; time.sleep(4)\"'",
        proxy = sluice.proxy_url(),
        listed = listed.display()
    );
    let (status, out) = curl_status(Command::new("sh").args(["-c", &parent]));
    assert_eq!(status, "403", "{out}\n{}", sluice.stderr());
    assert_eq!(origin.received().len(), 0, "nothing reached the origin");
    assert_events_valid(&sluice);
}

/// Unlinks the file given third (its own executable, through the other namespace's root),
/// then fetches as `FETCH` does.
const UNLINK_THEN_FETCH: &str = r#"
import os, sys
os.unlink(sys.argv[3])
sys.argv = sys.argv[:3]
exec(open(sys.argv[0].rsplit('/', 1)[0] + '/fetch.py').read())
"#;

#[test]
fn a_file_deleted_from_another_namespaces_mount_is_not_the_listed_program() {
    if !privileged("a_file_deleted_from_another_namespaces_mount_is_not_the_listed_program") {
        return;
    }
    let (dir, listed, origin, sluice) = setup("spoof-deleted");
    dir.write("fetch.py", FETCH);
    let script = dir.write("unlink_then_fetch.py", UNLINK_THEN_FETCH);
    // In its own namespaces: a tmpfs over the listed program's directory, python copied to
    // the listed path there. Run through that root from sluice's namespaces, the copy deletes
    // itself: `/proc` then shows the listed path, deleted.
    let parent = listed.parent().unwrap().display().to_string();
    let held = MountedOver::run(&format!(
        "mkdir -p /tmp/spoof-keep-$$ && cp {script} {parent}/fetch.py /tmp/spoof-keep-$$/ && mount -t tmpfs none {parent} && cp /usr/bin/python3 {listed} && cp /tmp/spoof-keep-$$/* {parent}/",
        script = script.display(),
        listed = listed.display()
    ));
    let through = format!("/proc/{}/root{}", held.0.id(), listed.display());
    let inner_script = format!("/proc/{}/root{parent}/unlink_then_fetch.py", held.0.id());
    let (status, out) = curl_status(
        Command::new(&through)
            .env("PYTHONHOME", "/usr")
            .arg(&inner_script)
            .arg(sluice.proxy_url())
            .arg(format!("http://127.0.0.1:{}/spoof", origin.port()))
            .arg(&through),
    );
    drop(held);
    assert_eq!(status, "403", "{out}\n{}", sluice.stderr());
    assert!(out.contains("cannot be vouched for"), "{out}");
    assert_eq!(origin.received().len(), 0, "nothing reached the origin");
    assert_events_valid(&sluice);
}

#[test]
fn a_chrooted_listed_program_is_still_itself() {
    if !privileged("a_chrooted_listed_program_is_still_itself") {
        return;
    }
    let dir = TempDir::new("chrooted");
    let root = dir.path().join("croot");
    std::fs::create_dir_all(root.join("usr")).unwrap();
    for link in ["lib", "lib64", "bin"] {
        std::os::unix::fs::symlink(format!("usr/{link}"), root.join(link)).unwrap();
    }
    let listed = root.join("listed-curl");
    std::fs::copy("/usr/bin/curl", &listed).unwrap();
    let origin = HttpOrigin::start();
    // The path `/proc` shows for the chrooted program is its full path in sluice's view.
    let sluice = listed_only(&listed, &origin);
    let inside = format!(
        "mount --bind /usr {root}/usr && exec chroot {root} /listed-curl -s -w %{{http_code}} -o /out -x {proxy} http://127.0.0.1:{port}/chroot",
        root = root.display(),
        proxy = sluice.proxy_url(),
        port = origin.port()
    );
    let (status, out) = curl_status(Command::new("unshare").args(["-m", "sh", "-c", &inside]));
    assert_eq!(status, "200", "{out}\n{}", sluice.stderr());
    assert_eq!(origin.received().len(), 1);
    assert_events_valid(&sluice);
}

#[test]
fn a_listed_program_whose_file_and_directory_were_removed_is_still_itself() {
    if !privileged("a_listed_program_whose_file_and_directory_were_removed_is_still_itself") {
        return;
    }
    let dir = TempDir::new("removed");
    let install = dir.path().join("v1");
    std::fs::create_dir_all(&install).unwrap();
    let listed = install.join("listed-python");
    std::fs::copy("/usr/bin/python3", &listed).unwrap();
    let origin = HttpOrigin::start();
    let sluice = listed_only(&listed, &origin);
    dir.write("fetch.py", FETCH);
    // As an upgrade that removes the old version's directory while it runs.
    let script = dir.write(
        "remove_then_fetch.py",
        "import os, shutil, sys\nshutil.rmtree(sys.argv[3])\nsys.argv = sys.argv[:3]\nexec(open(sys.argv[0].rsplit('/', 1)[0] + '/fetch.py').read())\n",
    );
    let (status, out) = curl_status(
        Command::new(&listed)
            .env("PYTHONHOME", "/usr")
            .arg(&script)
            .arg(sluice.proxy_url())
            .arg(format!("http://127.0.0.1:{}/removed", origin.port()))
            .arg(&install),
    );
    assert_eq!(status, "200", "{out}\n{}", sluice.stderr());
    assert!(!install.exists());
    assert_events_valid(&sluice);
}
