//! Lookups against real processes and real sockets: a listener in the test, clients spawned as
//! real programs (python3, sleep, bash). Clients in network namespaces: `netns_lookup.rs`.
//!
//! Tests that need root say so; they fail instead of skipping when
//! `SLUICE_REQUIRE_PRIVILEGED=1` (CI).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_identity::{IdentityError, full_scan_owners};

mod common;

use common::*;

#[test]
fn ipv4_client_is_identified_with_its_ancestors() {
    let (listener, _) = listener("127.0.0.1:0");
    let mut client = Client::python(
        &connect_script("127.0.0.1"),
        listener.local_addr().unwrap().port(),
    );
    let (_stream, peer, local) = accept(&listener);
    assert_eq!(client.line()[0], "ready");

    let identity = resolver().lookup(peer, local).unwrap();
    assert_eq!(identity.pid, client.pid());
    assert_eq!(identity.exe, real_path(PYTHON));
    assert!(!identity.exe_deleted);
    assert_eq!(identity.uid, own_real_uid());
    assert_eq!(identity.cmdline[0], PYTHON);
    assert_eq!(identity.cmdline[1], "-c");
    assert_eq!(
        identity.cmdline.last().map(String::as_str),
        Some(local.port().to_string().as_str())
    );
    assert_eq!(identity.ancestors[0].pid, std::process::id());
    assert_eq!(identity.ancestors[0].exe, own_exe());
    assert!(identity.ancestor_exes().contains(&own_exe()));
    assert_eq!(
        identity.ancestors.last().map(|a| a.pid),
        Some(1),
        "{:?}",
        identity.ancestors
    );
    // `/usr/bin/python3` is a symlink: an absolute argv entry that is not the exe itself.
    assert!(
        identity.cmdline_paths.contains(&PYTHON.to_owned()),
        "{:?}",
        identity.cmdline_paths
    );
    assert!(!identity.cmdline_paths.contains(&identity.exe));
}

#[test]
fn ipv6_client_is_identified() {
    let (listener, _) = listener("[::1]:0");
    let mut client = Client::python(
        &connect_script("::1"),
        listener.local_addr().unwrap().port(),
    );
    let (_stream, peer, local) = accept(&listener);
    assert_eq!(client.line()[0], "ready");
    assert!(peer.is_ipv6());

    let identity = resolver().lookup(peer, local).unwrap();
    assert_eq!(identity.pid, client.pid());
    assert_eq!(identity.exe, real_path(PYTHON));
    assert_eq!(identity.ancestors[0].pid, std::process::id());
}

#[test]
fn ipv4_and_v4_mapped_clients_of_a_dual_stack_listener() {
    let (listener, _) = listener("[::]:0");
    let port = listener.local_addr().unwrap().port();
    // An AF_INET client, and an AF_INET6 client talking to a v4-mapped address.
    let script = "import os, socket, sys\n\
                  def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
                  fam, host = (socket.AF_INET, '127.0.0.1') if sys.argv[2] == '4' else (socket.AF_INET6, '::ffff:127.0.0.1')\n\
                  c = socket.socket(fam); c.connect((host, int(sys.argv[1])))\n\
                  say('ready', os.getpid())\n\
                  sys.stdin.read()\n";
    let resolver = resolver();
    for family in ["4", "6"] {
        let mut client = Client::spawn(
            Command::new(PYTHON)
                .arg("-c")
                .arg(script)
                .arg(port.to_string())
                .arg(family),
        );
        let (_stream, peer, local) = accept(&listener);
        assert_eq!(client.line()[0], "ready");
        assert_eq!(
            peer.ip().to_canonical().to_string(),
            "127.0.0.1",
            "peer {peer}"
        );
        assert!(
            peer.is_ipv6(),
            "a dual-stack listener reports v4-mapped peers: {peer}"
        );
        let identity = resolver
            .lookup(peer, local)
            .unwrap_or_else(|err| panic!("family {family}: {err}"));
        assert_eq!(identity.pid, client.pid());
    }
}

#[test]
fn double_forked_client_loses_its_original_parent() {
    let (listener, _) = listener("127.0.0.1:0");
    let script = "import os, socket, sys\n\
                  def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
                  if os.fork() == 0:\n\
                  \x20   if os.fork() == 0:\n\
                  \x20       c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
                  \x20       say('grandchild', os.getpid(), os.getppid())\n\
                  \x20       sys.stdin.read()\n\
                  \x20   os._exit(0)\n\
                  os.wait()\n\
                  say('parent', os.getpid())\n\
                  sys.stdin.read()\n";
    let mut client = Client::python(script, listener.local_addr().unwrap().port());
    let (_stream, peer, local) = accept(&listener);
    let mut grandchild = 0;
    for _ in 0..2 {
        let line = client.line();
        if line[0] == "grandchild" {
            grandchild = line[1].parse().unwrap();
        }
    }
    // By now the middle process has exited (the parent waited for it): the grandchild has been
    // reparented away from the original chain.
    let identity = resolver().lookup(peer, local).unwrap();
    assert_eq!(identity.pid, grandchild);
    let chain: Vec<u32> = identity.ancestors.iter().map(|a| a.pid).collect();
    assert!(
        !chain.contains(&client.pid()),
        "original parent still in {chain:?}"
    );
    assert!(
        !chain.contains(&std::process::id()),
        "test process still in {chain:?}"
    );
    assert_eq!(chain.last(), Some(&1));
}

#[test]
fn socket_shared_with_another_program_is_ambiguous() {
    let (listener, _) = listener("127.0.0.1:0");
    let script = "import os, socket, subprocess, sys\n\
                  def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
                  c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
                  c.set_inheritable(True)\n\
                  p = subprocess.Popen(['/usr/bin/sleep', '600'], pass_fds=[c.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n\
                  say('ready', os.getpid(), p.pid)\n\
                  sys.stdin.read()\n\
                  p.kill()\n";
    let mut client = Client::python(script, listener.local_addr().unwrap().port());
    let (_stream, peer, local) = accept(&listener);
    let line = client.line();
    let sleeper: u32 = line[2].parse().unwrap();
    let _sleeper = KillOnDrop(sleeper);
    wait_for_exe(sleeper, "/usr/bin/sleep");

    let err = resolver().lookup(peer, local).unwrap_err();
    let mut pids = vec![client.pid(), sleeper];
    pids.sort_unstable();
    match &err {
        IdentityError::AmbiguousOwners { pids: found, .. } => assert_eq!(found, &pids),
        other => panic!("expected ambiguity, got {other}"),
    }
    assert!(
        err.to_string().contains(&format!(
            "is held by PIDs [{}, {}] with different policy identities",
            pids[0], pids[1]
        )),
        "{err}"
    );
    // The naive scan agrees on who holds it.
    let IdentityError::AmbiguousOwners { inode, .. } = err else {
        unreachable!()
    };
    assert_eq!(full_scan_owners(Path::new("/proc"), inode), pids);
}

#[test]
fn siblings_running_one_program_share_an_identity() {
    let (listener, _) = listener("127.0.0.1:0");
    // The parent connects, forks two children that keep the socket, then closes its own copy:
    // only the siblings hold it, and they are the same program with the same ancestors.
    let script = "import os, socket, sys\n\
                  def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
                  c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
                  kids = []\n\
                  for _ in range(2):\n\
                  \x20   pid = os.fork()\n\
                  \x20   if pid == 0:\n\
                  \x20       sys.stdin.read(); os._exit(0)\n\
                  \x20   kids.append(pid)\n\
                  c.close()\n\
                  say('ready', *kids)\n\
                  sys.stdin.read()\n";
    let mut client = Client::python(script, listener.local_addr().unwrap().port());
    let (_stream, peer, local) = accept(&listener);
    let line = client.line();
    let kids: Vec<u32> = line[1..].iter().map(|pid| pid.parse().unwrap()).collect();

    let identity = resolver().lookup(peer, local).unwrap();
    assert_eq!(identity.pid, *kids.iter().min().unwrap());
    assert_eq!(identity.ancestors[0].pid, client.pid());
}

#[test]
fn tuple_without_connection_is_not_found() {
    let (listener, local) = listener("127.0.0.1:0");
    let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let err = resolver().lookup(peer, local).unwrap_err();
    assert!(
        matches!(err, IdentityError::SocketNotFound { .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "failed to resolve peer binary: No ESTABLISHED TCP connection found for {peer} -> {local}"
        )
    );
    drop(listener);
}

#[test]
fn a_closed_connection_is_not_found() {
    let (listener, _) = listener("127.0.0.1:0");
    let client = Client::python(
        &connect_script("127.0.0.1"),
        listener.local_addr().unwrap().port(),
    );
    let (_stream, peer, local) = accept(&listener);
    drop(client);
    // The client's side is in FIN_WAIT or gone: not ESTABLISHED.
    let err = resolver().lookup(peer, local).unwrap_err();
    assert!(
        matches!(err, IdentityError::SocketNotFound { .. }),
        "{err:?}"
    );
}

#[test]
fn the_proxys_own_connection_has_no_owner() {
    // The resolver never reads its own process (a client's socket cannot be there), so a
    // connection the test process makes to itself is owned by nobody it may name. (No other
    // test may fork meanwhile: its child would hold a copy until it execs.)
    let _forking = forking();
    let (listener, local) = listener("127.0.0.1:0");
    let _client = TcpStream::connect(local).unwrap();
    let (_stream, peer, local) = accept(&listener);
    let err = resolver().lookup(peer, local).unwrap_err();
    assert!(matches!(err, IdentityError::NoOwner { .. }), "{err:?}");
    assert!(err.to_string().ends_with(
        "has no owning process (the caller's binary is not visible to sluice: it runs in another \
         PID namespace, e.g. a sidecar without shareProcessNamespace, or sluice lacks \
         CAP_SYS_PTRACE or root to read other processes' file descriptors)"
    ));
}

#[test]
fn a_repeat_client_is_found_again_and_exec_is_not_cached() {
    let (listener, _) = listener("127.0.0.1:0");
    // Connects, then on request execs `sleep` keeping the socket: same pid, another program.
    let script = "import os, socket, sys\n\
                  def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
                  c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
                  c.set_inheritable(True)\n\
                  say('ready')\n\
                  sys.stdin.readline()\n\
                  os.execv('/usr/bin/sleep', ['/usr/bin/sleep', '600'])\n";
    let mut client = Client::python(script, listener.local_addr().unwrap().port());
    let (_stream, peer, local) = accept(&listener);
    client.line();
    let resolver = resolver();
    let before = resolver.lookup(peer, local).unwrap();
    assert_eq!(before.exe, real_path(PYTHON));
    let again = resolver.lookup(peer, local).unwrap();
    assert_eq!(again, before);
    resolver.confirm(&before).unwrap();
    resolver.recheck(&before).unwrap();

    client.send_line("exec");
    wait_for_exe(client.pid(), "/usr/bin/sleep");
    // Same pid, same start time, another program: not the caller identified before.
    let err = resolver.confirm(&before).unwrap_err();
    assert!(
        matches!(err, IdentityError::HolderChanged { .. }),
        "{err:?}"
    );
    let err = resolver.recheck(&before).unwrap_err();
    assert!(
        matches!(&err, IdentityError::HolderChanged { pid, now, .. }
            if *pid == client.pid() && *now == [(client.pid(), real_path("/usr/bin/sleep"))]),
        "{err:?}"
    );
    let after = resolver.lookup(peer, local).unwrap();
    assert_eq!(after.pid, client.pid());
    assert_eq!(after.exe, real_path("/usr/bin/sleep"));
    assert_eq!(after.cmdline, ["/usr/bin/sleep", "600"]);
}

/// Connects, then hands the socket over `SCM_RIGHTS` to a child running another program (a
/// copy of python3 at another path) and closes its own copy: first the socket is only in
/// flight (held by no process), then the child takes it. It says `ready` once the child runs
/// the other program (and so no longer holds the copy it had from the fork).
const HAND_OVER: &str = "import os, socket, sys\n\
    def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
    c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    mine, theirs = socket.socketpair()\n\
    go_r, go_w = os.pipe()\n\
    receiver = 'import os, socket, sys\\n' \\\n\
      'u = socket.socket(fileno=int(sys.argv[1])); u.send(b\"r\"); os.read(int(sys.argv[2]), 1)\\n' \\\n\
      'msg, fds, _, _ = socket.recv_fds(u, 1, 1)\\n' \\\n\
      'os.write(1, b\"taken %d\\\\n\" % os.getpid()); sys.stdin.read()\\n'\n\
    pid = os.fork()\n\
    if pid == 0:\n\
    \x20   mine.close(); c.close(); os.set_inheritable(theirs.fileno(), True); os.set_inheritable(go_r, True)\n\
    \x20   os.execv(sys.argv[2], [sys.argv[2], '-c', receiver, str(theirs.fileno()), str(go_r)])\n\
    theirs.close()\n\
    mine.recv(1)\n\
    say('ready', os.getpid())\n\
    sys.stdin.readline()\n\
    socket.send_fds(mine, [b'x'], [c.fileno()]); c.close()\n\
    say('sent')\n\
    sys.stdin.readline()\n\
    os.write(go_w, b'g')\n\
    sys.stdin.read()\n";

#[test]
fn a_socket_handed_over_with_scm_rights_is_a_changed_caller() {
    let dir = TempDir::new("hand-over");
    let copy = dir.path().join("listed-python3");
    std::fs::copy(PYTHON, &copy).unwrap();
    let (listener, _) = listener("127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    let mut client = Client::spawn(
        Command::new(PYTHON)
            .arg("-c")
            .arg(HAND_OVER)
            .arg(port.to_string())
            .arg(&copy),
    );
    let (_stream, peer, local) = accept(&listener);
    assert_eq!(client.line()[0], "ready");
    let resolver = resolver();
    let before = resolver.lookup(peer, local).unwrap();
    assert_eq!(
        (before.pid, before.exe.as_str()),
        (client.pid(), real_path(PYTHON).as_str())
    );
    assert!(before.socket.fd.is_some());
    resolver.confirm(&before).unwrap();
    resolver.recheck(&before).unwrap();

    client.send_line("send");
    assert_eq!(client.line(), ["sent"]);
    // In flight: no process holds it.
    let err = resolver.confirm(&before).unwrap_err();
    assert!(
        matches!(&err, IdentityError::HolderChanged { now, .. } if now.is_empty()),
        "{err:?}"
    );
    assert!(matches!(
        resolver.lookup(peer, local),
        Err(IdentityError::NoOwner { .. })
    ));

    client.send_line("take");
    let taken = client.line();
    assert_eq!(taken[0], "taken");
    let receiver: u32 = taken[1].parse().unwrap();
    let copy = copy.to_string_lossy().into_owned();
    let err = resolver.confirm(&before).unwrap_err();
    assert!(
        matches!(&err, IdentityError::HolderChanged { pid, now, .. }
            if *pid == client.pid() && *now == [(receiver, copy.clone())]),
        "{err:?}"
    );
    let after = resolver.lookup(peer, local).unwrap();
    assert_eq!((after.pid, after.exe.as_str()), (receiver, copy.as_str()));
    assert_ne!(after.start_time, 0);
}

/// The shape of a borrowed identity: this process connects, forks a helper that forks the
/// listed program with the socket and then closes its own copy, and keeps the socket itself.
/// The listed program is the newest holder (found first); its parent does not hold the
/// socket; the creator is its grandparent. `sys.argv[2]` is the listed program, run with
/// `sys.argv[3:]`. The helper says `ready <creator> <helper> <listed>`.
const BORROW: &str = "import os, socket, sys\n\
    def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
    c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    c.set_inheritable(True)\n\
    if os.fork() == 0:\n\
    \x20   listed = os.fork()\n\
    \x20   if listed == 0:\n\
    \x20       os.execv(sys.argv[2], sys.argv[2:])\n\
    \x20   c.close()\n\
    \x20   say('ready', os.getppid(), os.getpid(), listed)\n\
    \x20   os.waitpid(listed, 0); os._exit(0)\n\
    sys.stdin.read()\n";

#[test]
fn a_socket_also_held_by_the_grandparent_that_created_it_is_ambiguous() {
    let (listener, _) = listener("127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    let mut client = Client::spawn(
        Command::new(PYTHON)
            .arg("-c")
            .arg(BORROW)
            .arg(port.to_string())
            .args(["/usr/bin/sleep", "600"]),
    );
    let (_stream, peer, local) = accept(&listener);
    let line = client.line();
    assert_eq!(line[0], "ready");
    let creator: u32 = line[1].parse().unwrap();
    let helper: u32 = line[2].parse().unwrap();
    let listed: u32 = line[3].parse().unwrap();
    let _listed = KillOnDrop(listed);
    assert_eq!(creator, client.pid());
    wait_for_exe(listed, "/usr/bin/sleep");

    let err = resolver().lookup(peer, local).unwrap_err();
    match &err {
        IdentityError::AmbiguousOwners { pids, inode } => {
            assert_eq!(pids, &[creator, listed], "helper {helper}");
            assert_eq!(full_scan_owners(Path::new("/proc"), *inode), *pids);
        }
        other => panic!("expected the creator and the listed program, got {other}"),
    }
}

/// Like [`BORROW`], but the creator closes its copy too, so the listed program (a copy of
/// python3 at another path, running `LISTED`) is the only holder when identified; on `take`
/// the listed program sends the socket back to its grandparent over `SCM_RIGHTS` and keeps its
/// own copy. The helper says `ready` once the creator has closed its copy.
const BORROW_BACK: &str = "import os, socket, sys\n\
    def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
    c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    mine, theirs = socket.socketpair()\n\
    c.set_inheritable(True); theirs.set_inheritable(True)\n\
    closed_r, closed_w = os.pipe()\n\
    listed_script = 'import os, socket, sys, time\\n' \\\n\
      'u = socket.socket(fileno=int(sys.argv[2])); u.recv(1)\\n' \\\n\
      'socket.send_fds(u, [b\"x\"], [int(sys.argv[1])]); time.sleep(600)\\n'\n\
    if os.fork() == 0:\n\
    \x20   listed = os.fork()\n\
    \x20   if listed == 0:\n\
    \x20       os.execv(sys.argv[2], [sys.argv[2], '-c', listed_script, str(c.fileno()), str(theirs.fileno())])\n\
    \x20   c.close(); theirs.close(); os.read(closed_r, 1)\n\
    \x20   say('ready', os.getppid(), os.getpid(), listed)\n\
    \x20   os.waitpid(listed, 0); os._exit(0)\n\
    c.close(); theirs.close(); os.write(closed_w, b'c')\n\
    sys.stdin.readline()\n\
    mine.send(b'g')\n\
    msg, fds, _, _ = socket.recv_fds(mine, 1, 1)\n\
    say('taken', os.getpid())\n\
    sys.stdin.read()\n";

#[test]
fn recheck_finds_a_grandparent_that_holds_the_socket_too() {
    let dir = TempDir::new("borrow-back");
    let copy = dir.path().join("listed-python3");
    std::fs::copy(PYTHON, &copy).unwrap();
    let (listener, _) = listener("127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    let mut client = Client::spawn(
        Command::new(PYTHON)
            .arg("-c")
            .arg(BORROW_BACK)
            .arg(port.to_string())
            .arg(&copy),
    );
    let (_stream, peer, local) = accept(&listener);
    let line = client.line();
    assert_eq!(line[0], "ready");
    let listed: u32 = line[3].parse().unwrap();
    let _listed = KillOnDrop(listed);
    let copy = copy.to_string_lossy().into_owned();
    wait_for_exe(listed, &copy);

    let resolver = resolver();
    let before = resolver.lookup(peer, local).unwrap();
    assert_eq!((before.pid, before.exe.as_str()), (listed, copy.as_str()));
    resolver.recheck(&before).unwrap();

    client.send_line("take");
    assert_eq!(client.line(), ["taken", &client.pid().to_string()]);
    let err = resolver.recheck(&before).unwrap_err();
    let python = real_path(PYTHON);
    assert!(
        matches!(&err, IdentityError::HolderChanged { pid, now, .. }
            if *pid == listed
                && now.contains(&(client.pid(), python.clone()))
                && now.contains(&(listed, copy.clone()))),
        "{err:?}"
    );
    assert!(matches!(
        resolver.lookup(peer, local),
        Err(IdentityError::AmbiguousOwners { .. })
    ));
}

#[test]
fn an_unlinked_executable_is_reported_as_deleted() {
    let dir = TempDir::new("deleted-exe");
    let bash = dir.path().join("bash-copy");
    std::fs::copy("/usr/bin/bash", &bash).unwrap();
    let (listener, _) = listener("127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    let mut client = Client::spawn(Command::new(&bash).arg("-c").arg(format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port}; echo ready; read line"
    )));
    let (_stream, peer, local) = accept(&listener);
    client.line();
    std::fs::remove_file(&bash).unwrap();

    let identity = resolver().lookup(peer, local).unwrap();
    assert_eq!(identity.pid, client.pid());
    assert_eq!(PathBuf::from(&identity.exe), bash);
    assert!(identity.exe_deleted);
}

/// Connects, says `ready <fd>`, then on each `move N` line moves the socket to descriptor `N`
/// (closing the one it had, and putting another socket at the old number) and says `moved N`;
/// a line `exit` ends it.
const MOVER: &str = "import os, socket, sys\n\
    def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
    c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    fd = c.detach(); other = socket.socket()\n\
    say('ready', fd)\n\
    for line in sys.stdin:\n\
    \x20   words = line.split()\n\
    \x20   if words[0] == 'exit': os._exit(0)\n\
    \x20   new = int(words[1]); os.dup2(fd, new); os.dup2(other.fileno(), fd); fd = new\n\
    \x20   say('moved', fd)\n";

#[test]
fn a_socket_moved_to_another_descriptor_of_the_same_process_is_still_confirmed() {
    let (listener, _) = listener("127.0.0.1:0");
    let mut client = Client::python(MOVER, listener.local_addr().unwrap().port());
    let (_stream, peer, local) = accept(&listener);
    let ready = client.line();
    assert_eq!(ready[0], "ready");
    let resolver = resolver();
    let before = resolver.lookup(peer, local).unwrap();
    assert_eq!(before.pid, client.pid());
    assert_eq!(before.socket.fd, Some(ready[1].parse().unwrap()));
    resolver.confirm(&before).unwrap();

    // The descriptor the lookup saw now holds another socket; the caller's is at 77, then 90.
    for fd in ["77", "90"] {
        client.send_line(&format!("move {fd}"));
        assert_eq!(client.line(), ["moved", fd]);
        resolver.confirm(&before).unwrap();
        resolver.confirm(&before).unwrap();
        resolver.recheck(&before).unwrap();
    }

    client.send_line("exit");
    let _ = client.child.wait();
    let err = resolver.confirm(&before).unwrap_err();
    assert!(
        matches!(&err, IdentityError::HolderChanged { pid, now, .. }
            if *pid == client.pid() && now.is_empty()),
        "{err:?}"
    );
}

/// How many descriptors of this process are `/proc/<pid>` of `pid`.
fn handles_on(pid: u32) -> usize {
    let want = PathBuf::from(format!("/proc/{pid}"));
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| std::fs::read_link(entry.path()).is_ok_and(|target| target == want))
        .count()
}

/// Opens two connections, says `ready`, waits for stdin to close.
const TWO_CONNECTIONS: &str = "import socket, sys\n\
    a = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    b = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    print('ready', flush=True)\n\
    sys.stdin.read()\n";

#[test]
fn the_connections_of_one_process_keep_one_handle_on_it_while_they_last() {
    let (listener, _) = listener("127.0.0.1:0");
    let mut client = Client::python(TWO_CONNECTIONS, listener.local_addr().unwrap().port());
    let (_a, peer_a, local_a) = accept(&listener);
    let (_b, peer_b, local_b) = accept(&listener);
    assert_eq!(client.line(), ["ready"]);
    let resolver = resolver();
    let a = resolver.lookup(peer_a, local_a).unwrap();
    let b = resolver.lookup(peer_b, local_b).unwrap();
    assert_ne!(a.socket.inode, b.socket.inode);
    assert_eq!((a.pid, b.pid), (client.pid(), client.pid()));
    assert_eq!(handles_on(client.pid()), 1);
    resolver.confirm(&a).unwrap();
    resolver.confirm(&b).unwrap();
    drop(a);
    assert_eq!(handles_on(client.pid()), 1);
    drop(b);
    // Kept after them, as one of the processes identified last, until the resolver goes.
    assert_eq!(handles_on(client.pid()), 1);
    drop(resolver);
    assert_eq!(handles_on(client.pid()), 0);
}

/// Starts a client child (which says `ready <pid>` once connected and exits with its parent),
/// then on request execs `sh`, which starts a second one: the same parent process (pid, start
/// time) running another program between two lookups.
const PARENT_EXECS: &str = "import os, subprocess, sys\n\
    client = 'import os, socket, sys, time\\n' \\\n\
      'c = socket.create_connection((\"127.0.0.1\", int(sys.argv[1])))\\n' \\\n\
      'os.write(1, b\"ready %d\\\\n\" % os.getpid())\\n' \\\n\
      'p = os.getppid()\\n' \\\n\
      'while os.getppid() == p: time.sleep(0.05)\\n'\n\
    subprocess.Popen([sys.executable, '-c', client, sys.argv[1]], stdin=subprocess.DEVNULL)\n\
    sys.stdin.readline()\n\
    os.execv('/bin/sh', ['sh', '-c', '\"$0\" -c \"$1\" \"$2\" </dev/null & read x', sys.executable, client, sys.argv[1]])\n";

#[test]
fn an_ancestor_that_execs_between_lookups_is_read_as_it_is_now() {
    let (listener, _) = listener("127.0.0.1:0");
    let mut parent = Client::python(PARENT_EXECS, listener.local_addr().unwrap().port());
    let (_first, peer, local) = accept(&listener);
    assert_eq!(parent.line()[0], "ready");
    let resolver = resolver();
    let before = resolver.lookup(peer, local).unwrap();
    assert_eq!(before.ancestors[0].pid, parent.pid());
    assert_eq!(before.ancestors[0].exe, real_path(PYTHON));

    // The parent's files are kept by the lookups now; it execs, then starts another client.
    parent.send_line("exec");
    let (_second, peer2, local2) = accept(&listener);
    assert_eq!(parent.line()[0], "ready");
    let shell = real_path("/bin/sh");
    for (peer, local) in [(peer2, local2), (peer, local)] {
        let now = resolver.lookup(peer, local).unwrap();
        let ancestor = &now.ancestors[0];
        assert_eq!(
            (ancestor.pid, ancestor.exe.as_str()),
            (parent.pid(), shell.as_str())
        );
        assert_eq!(ancestor.cmdline[..2], ["sh", "-c"]);
        assert_eq!(now.ancestors[1..], before.ancestors[1..]);
    }
}

/// Starts a client child that connects and says `ready`; on request the child passes its
/// socket to this parent over `SCM_RIGHTS` and keeps its own copy, and the parent says `got`.
const PARENT_TAKES_A_COPY: &str = "import os, socket, subprocess, sys\n\
    mine, theirs = socket.socketpair()\n\
    child = 'import os, socket, sys\\n' \\\n\
      'u = socket.socket(fileno=int(sys.argv[2]))\\n' \\\n\
      'c = socket.create_connection((\"127.0.0.1\", int(sys.argv[1])))\\n' \\\n\
      'os.write(1, b\"ready\\\\n\")\\n' \\\n\
      'u.recv(1); socket.send_fds(u, [b\"x\"], [c.fileno()]); u.recv(1)\\n'\n\
    subprocess.Popen([sys.executable, '-c', child, sys.argv[1], str(theirs.fileno())],\n\
    \x20   pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)\n\
    theirs.close()\n\
    sys.stdin.readline()\n\
    mine.send(b'g')\n\
    msg, fds, _, _ = socket.recv_fds(mine, 1, 1)\n\
    os.write(1, b'got\\n')\n\
    sys.stdin.read()\n";

#[test]
fn an_ancestor_read_before_that_takes_a_copy_of_the_socket_is_found() {
    let (listener, _) = listener("127.0.0.1:0");
    let mut parent = Client::python(PARENT_TAKES_A_COPY, listener.local_addr().unwrap().port());
    let (_stream, peer, local) = accept(&listener);
    assert_eq!(parent.line(), ["ready"]);
    let resolver = resolver();
    let identity = resolver.lookup(peer, local).unwrap();
    assert_eq!(identity.ancestors[0].pid, parent.pid());
    // The parent's fd table has been read (and its files kept) twice without the socket.
    resolver.recheck(&identity).unwrap();

    parent.send_line("take");
    assert_eq!(parent.line(), ["got"]);
    let err = resolver.recheck(&identity).unwrap_err();
    assert!(
        matches!(&err, IdentityError::HolderChanged { now, .. }
            if now.iter().any(|(pid, _)| *pid == parent.pid())),
        "{err:?}"
    );
    let err = resolver.lookup(peer, local).unwrap_err();
    assert!(
        matches!(&err, IdentityError::AmbiguousOwners { pids, .. }
            if pids.contains(&parent.pid()) && pids.contains(&identity.pid)),
        "{err:?}"
    );
}

/// Connects, then on request: `again` closes the connection and connects anew (the lowest
/// free descriptor: the same one); `both` connects anew keeping the last connection open;
/// `swap` closes the connection, connects anew at descriptor 150 and puts another socket (a
/// socket pair's end) at the descriptor the connection had. Reports each new connection's
/// descriptor.
const RECONNECTER: &str = "import os, socket, sys\n\
    def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
    port = int(sys.argv[1])\n\
    c = socket.create_connection(('127.0.0.1', port))\n\
    say('conn', c.fileno())\n\
    keep = []\n\
    for line in sys.stdin:\n\
    \x20   op = line.split()[0]\n\
    \x20   if op == 'again':\n\
    \x20       c.close(); c = socket.create_connection(('127.0.0.1', port))\n\
    \x20   elif op == 'both':\n\
    \x20       keep.append(c); c = socket.create_connection(('127.0.0.1', port))\n\
    \x20   elif op == 'swap':\n\
    \x20       c.close(); new = socket.create_connection(('127.0.0.1', port))\n\
    \x20       os.dup2(new.fileno(), 150); new.close()\n\
    \x20       keep += list(socket.socketpair()); c = socket.socket(fileno=150)\n\
    \x20   else:\n\
    \x20       break\n\
    \x20   say('conn', c.fileno())\n";

/// A repeat client is looked at first where it held its last socket: found there when its
/// next socket got the same descriptor, and found by its whole table when it did not (that
/// descriptor now another connection of its own, or closed), never taken for the holder of a
/// socket it does not hold.
#[test]
fn a_repeat_client_is_found_at_its_last_descriptor_or_by_its_whole_table() {
    let (listener, _) = listener("127.0.0.1:0");
    let mut client = Client::python(RECONNECTER, listener.local_addr().unwrap().port());
    let resolver = resolver();
    let pid = client.pid();
    let lookup = |expect_fd: &str| {
        let (stream, peer, local) = accept(&listener);
        let found = resolver.lookup(peer, local).unwrap();
        assert_eq!(found.pid, pid);
        assert_eq!(found.socket.fd, Some(expect_fd.parse().unwrap()));
        resolver.confirm(&found).unwrap();
        resolver.recheck(&found).unwrap();
        (stream, found)
    };
    let first = client.line();
    let (_s1, one) = lookup(&first[1]);
    // Closed, then connected again: the same (lowest free) descriptor, found there.
    client.send_line("again");
    let again = client.line();
    assert_eq!(again[1], first[1]);
    let (_s2, two) = lookup(&again[1]);
    assert_eq!(two.pid, one.pid);
    // A second connection kept beside the last: the last descriptor holds the other one.
    client.send_line("both");
    let both = client.line();
    assert_ne!(both[1], again[1]);
    let (_s3, three) = lookup(&both[1]);
    assert_ne!(three.socket.inode, two.socket.inode);
    // The old connection still confirmed where it is.
    resolver.confirm(&two).unwrap();
    // Moved away: the descriptor the last lookup saw is closed or another socket now.
    client.send_line("swap");
    let swapped = client.line();
    assert_ne!(swapped[1], both[1]);
    let _ = lookup(&swapped[1]);
    client.send_line("exit");
}

/// A python3 client that runs `setup` (Python, at top level), then connects, says `ready`
/// and waits for stdin to close; and the accepted end: (client, stream, peer, local).
fn connected_after(setup: &str) -> (Client, TcpStream, SocketAddr, SocketAddr) {
    let (listener, _) = listener("127.0.0.1:0");
    let script = format!(
        "import os, socket, sys\n{setup}\
         c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
         os.write(1, b'ready\\n')\n\
         sys.stdin.read()\n"
    );
    let mut client = Client::python(&script, listener.local_addr().unwrap().port());
    let (stream, peer, local) = accept(&listener);
    assert_eq!(client.line()[0], "ready");
    (client, stream, peer, local)
}

/// A lookup or recheck given a limit answers what the unbounded one does, or nothing when
/// the search would read more: here the client has 200 children (each one's fd table is read,
/// as a holder's descendants are), which cost far more than 500 reads.
#[test]
fn a_bounded_lookup_answers_as_the_full_one_does_or_not_at_all() {
    // The children are forked before the connection is made: none ever holds the socket.
    let (client, _stream, peer, local) = connected_after(
        "for _ in range(200):\n\
         \x20   if os.fork() == 0:\n\
         \x20       sys.stdin.read(); os._exit(0)\n",
    );

    let resolver = resolver();
    assert!(resolver.lookup_within(peer, local, 500).unwrap().is_none());
    let full = resolver.lookup(peer, local).unwrap();
    assert_eq!(full.pid, client.pid());
    let bounded = resolver
        .lookup_within(peer, local, 1_000_000)
        .unwrap()
        .unwrap();
    assert_eq!(bounded, full);

    assert!(resolver.recheck_within(&full, 500).unwrap().is_none());
    assert_eq!(resolver.recheck_within(&full, 1_000_000).unwrap(), Some(()));
}

/// A client with hundreds of threads and a handful of descriptors: listing its children reads
/// one file per thread, which the limit counts, so the bounded lookup stops rather than read
/// them all in place.
#[test]
fn a_client_with_many_threads_is_not_looked_up_within_a_small_limit() {
    let (client, _stream, peer, local) = connected_after(
        "import threading\n\
         gate = threading.Event()\n\
         threads = [threading.Thread(target=gate.wait, daemon=True) for _ in range(600)]\n\
         for t in threads: t.start()\n",
    );

    let resolver = resolver();
    assert!(resolver.lookup_within(peer, local, 512).unwrap().is_none());
    let full = resolver.lookup(peer, local).unwrap();
    assert_eq!(full.pid, client.pid());
    assert!(resolver.recheck_within(&full, 512).unwrap().is_none());
    assert_eq!(resolver.confirm_within(&full, 512).unwrap(), Some(()));
    assert_eq!(
        resolver.lookup_within(peer, local, 100_000).unwrap(),
        Some(full)
    );
}
