//! The snapshot of a caller's fork family that a passed recheck keeps (`procfs::family`): the
//! rechecks after it read a few files instead of walking the family, and anything that could
//! give the socket to another program since (a child forked by the caller or by a thread it
//! started since, an ancestor that ran) makes the next recheck walk the family again and find
//! the new holder. Real python3 processes and real sockets; each family is detached from the
//! test runner (its ancestors are only its own processes), so that it is quiet whenever its
//! processes are blocked.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::process::Command;

use sluice_identity::{IdentityError, Rechecks};

mod common;

use common::*;

/// Runs `SCRIPT ARGS...` in a python3 process detached from the test: a first python3 forks
/// it and exits, so that its parent becomes init and the test runner is no ancestor of it.
/// Its stdin and stdout stay the spawned process's pipes.
fn detached(script: &str, args: &[String]) -> Client {
    const DETACH: &str = "import os, sys\n\
        if os.fork() == 0:\n\
        \x20   os.execv(sys.executable, [sys.executable, '-c'] + sys.argv[1:])\n\
        os._exit(0)\n";
    raise_open_files();
    let mut command = Command::new(PYTHON);
    command.arg("-c").arg(DETACH).arg(script).args(args);
    let mut client = Client::spawn(&mut command);
    // Once the first python3 has exited, the script's parent is init.
    client.child.wait().unwrap();
    client
}

/// Snapshots are kept under an open-file limit of 8192 or more (the descriptors they keep
/// are counted against it): the test runs under one, as sluice does (it raises its own).
fn raise_open_files() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    const WANT: u64 = 8192;
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|n| n < WANT) {
        let raised = Rlimit {
            current: Some(WANT),
            maximum: limit.maximum.map(|max| max.max(WANT)),
        };
        setrlimit(Resource::Nofile, raised).expect("raise the open-file limit to 8192");
    }
}

/// Connects to port `sys.argv[1]`, says `ready <pid>`, then for each line: `fork` forks a
/// child that executes `sys.argv[2]` (a copy of python3 at another path) holding the socket
/// and says `forked <pid>`; `tfork` does the same from a thread started for it.
const FORKER: &str = "import os, socket, sys, threading\n\
    def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
    c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    c.set_inheritable(True)\n\
    def fork():\n\
    \x20   child = os.fork()\n\
    \x20   if child == 0:\n\
    \x20       os.execv(sys.argv[2], [sys.argv[2], '-c', 'import time; time.sleep(600)'])\n\
    \x20   say('forked', child)\n\
    say('ready', os.getpid())\n\
    for line in sys.stdin:\n\
    \x20   if line.strip() == 'fork': fork()\n\
    \x20   elif line.strip() == 'tfork':\n\
    \x20       t = threading.Thread(target=fork); t.start(); t.join()\n";

/// A copy of python3 at a path of its own in `dir`: another executable to a recheck.
fn other_python(dir: &TempDir) -> String {
    let copy = dir.path().join("other-python3");
    std::fs::copy(PYTHON, &copy).unwrap();
    copy.to_string_lossy().into_owned()
}

fn forked_child_is_found(how: &str) {
    let dir = TempDir::new("family-fork");
    let other = other_python(&dir);
    let (listener, _) = listener("127.0.0.1:0");
    let port = listener.local_addr().unwrap().port().to_string();
    let mut client = detached(FORKER, &[port, other.clone()]);
    let (_stream, peer, local) = accept(&listener);
    let line = client.line();
    assert_eq!(line[0], "ready");
    let pid: u32 = line[1].parse().unwrap();
    let _client = KillOnDrop(pid);

    let resolver = resolver();
    let identity = resolver.lookup(peer, local).unwrap();
    assert_eq!(identity.pid, pid);
    for _ in 0..3 {
        resolver.recheck(&identity).unwrap();
    }
    assert_eq!(
        resolver.rechecks(),
        Rechecks {
            by_snapshot: 2,
            walked: 1
        },
        "the first recheck walks the family and keeps it, the next two read the snapshot"
    );

    client.send_line(how);
    let line = client.line();
    assert_eq!(line[0], "forked");
    let child: u32 = line[1].parse().unwrap();
    let _child = KillOnDrop(child);
    wait_for_exe(child, &other);
    let err = resolver.recheck(&identity).unwrap_err();
    assert!(
        matches!(&err, IdentityError::HolderChanged { now, .. }
            if now.contains(&(child, real_path(&other))) && now.contains(&(pid, real_path(PYTHON)))),
        "{err:?}"
    );
    assert_eq!(
        resolver.rechecks().by_snapshot,
        2,
        "the snapshot was not used"
    );
}

#[test]
fn a_child_forked_after_the_snapshot_is_found_holding_the_socket() {
    forked_child_is_found("fork");
}

#[test]
fn a_child_forked_by_a_thread_started_after_the_snapshot_is_found_holding_the_socket() {
    forked_child_is_found("tfork");
}

/// The creator (detached) connects and forks the listed program (`sys.argv[2]`), which holds
/// the socket and one end of a socketpair; the creator closes its copy of the socket and
/// says `ready <creator pid> <listed pid>`. On the line `take` the creator asks the listed
/// program for the socket, which sends it over `SCM_RIGHTS` and keeps its own copy; the
/// creator says `taken` once it holds it.
const TAKE_BACK: &str = "import os, socket, sys\n\
    def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
    c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    mine, theirs = socket.socketpair()\n\
    c.set_inheritable(True); theirs.set_inheritable(True)\n\
    listed_script = 'import os, socket, sys, time\\n' \\\n\
      'u = socket.socket(fileno=int(sys.argv[2])); u.recv(1)\\n' \\\n\
      'socket.send_fds(u, [b\"x\"], [int(sys.argv[1])]); time.sleep(600)\\n'\n\
    listed = os.fork()\n\
    if listed == 0:\n\
    \x20   os.execv(sys.argv[2], [sys.argv[2], '-c', listed_script, str(c.fileno()), str(theirs.fileno())])\n\
    c.close(); theirs.close()\n\
    say('ready', os.getpid(), listed)\n\
    sys.stdin.readline()\n\
    mine.send(b'g')\n\
    msg, fds, _, _ = socket.recv_fds(mine, 1, 1)\n\
    say('taken')\n\
    sys.stdin.read()\n";

#[test]
fn an_ancestor_that_takes_the_socket_after_the_snapshot_is_found_holding_it() {
    let dir = TempDir::new("family-take");
    let listed = other_python(&dir);
    let (listener, _) = listener("127.0.0.1:0");
    let port = listener.local_addr().unwrap().port().to_string();
    let mut client = detached(TAKE_BACK, &[port, listed.clone()]);
    let (_stream, peer, local) = accept(&listener);
    let line = client.line();
    assert_eq!(line[0], "ready");
    let (creator, listed_pid): (u32, u32) = (line[1].parse().unwrap(), line[2].parse().unwrap());
    let (_creator, _listed) = (KillOnDrop(creator), KillOnDrop(listed_pid));
    wait_for_exe(listed_pid, &listed);

    let resolver = resolver();
    let identity = resolver.lookup(peer, local).unwrap();
    assert_eq!(identity.pid, listed_pid);
    // The creator is blocked on its stdin: the family is quiet, and the snapshot is kept
    // once a recheck found it so (a recheck that caught a process on its way to blocking
    // walks again, and keeps it next time).
    let mut kept = false;
    for _ in 0..50 {
        resolver.recheck(&identity).unwrap();
        if resolver.rechecks().by_snapshot > 0 {
            kept = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        kept,
        "no recheck read the snapshot: {:?}",
        resolver.rechecks()
    );
    let used = resolver.rechecks().by_snapshot;

    client.send_line("take");
    assert_eq!(client.line(), ["taken"]);
    let err = resolver.recheck(&identity).unwrap_err();
    assert!(
        matches!(&err, IdentityError::HolderChanged { now, .. }
            if now.contains(&(creator, real_path(PYTHON)))
                && now.contains(&(listed_pid, real_path(&listed)))),
        "{err:?}"
    );
    assert_eq!(
        resolver.rechecks().by_snapshot,
        used,
        "the snapshot was not used"
    );
}
