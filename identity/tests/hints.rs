//! Where a lookup looks first (the descriptors next to where a repeat client held its last
//! socket) decides only how soon a holder is found, never who it is: a socket held far from
//! the hint, a descriptor reused for another socket, a forked child sharing the socket near
//! the hint, each attributed as a search without hints would (real python3 clients, real
//! sockets).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use sluice_identity::{IdentityError, IdentityResolver, full_scan_owners};

mod common;

use common::*;

/// A repeat client driven line by line; `sys.argv[2]` is another program (a copy of python3)
/// for the processes it forks. Each command answers one line:
/// - `connect`: a new connection, kept; says `fd <n>`.
/// - `reuse <n>`: closes the connection at descriptor `n` and opens a unix socket, which gets
///   that (lowest free) number; says `fd <n>`.
/// - `filler <k>`: opens `k` unix sockets (the descriptors next to the last connection).
/// - `fork <keep|drop> [fd]`: a new connection, moved to descriptor `fd` if given, inherited
///   by a child that runs the other program; the client keeps its copy or closes it. Says
///   `child <pid> <fd>`.
const DRIVEN: &str = "import os, socket, sys\n\
    def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
    port = int(sys.argv[1]); other = sys.argv[2]\n\
    kept = []\n\
    for line in sys.stdin:\n\
    \x20   cmd = line.split()\n\
    \x20   if cmd[0] == 'connect':\n\
    \x20       c = socket.create_connection(('127.0.0.1', port)); kept.append(c); say('fd', c.fileno())\n\
    \x20   elif cmd[0] == 'reuse':\n\
    \x20       old = [c for c in kept if c.fileno() == int(cmd[1])][0]; kept.remove(old); old.close()\n\
    \x20       s = socket.socket(socket.AF_UNIX); kept.append(s); say('fd', s.fileno())\n\
    \x20   elif cmd[0] == 'filler':\n\
    \x20       kept.extend(socket.socket(socket.AF_UNIX) for _ in range(int(cmd[1]))); say('ok')\n\
    \x20   elif cmd[0] == 'fork':\n\
    \x20       c = socket.create_connection(('127.0.0.1', port)); fd = c.fileno()\n\
    \x20       if len(cmd) > 2:\n\
    \x20           fd = int(cmd[2]); os.dup2(c.fileno(), fd); c.close()\n\
    \x20       else:\n\
    \x20           c.set_inheritable(True); kept.append(c)\n\
    \x20       pid = os.fork()\n\
    \x20       if pid == 0:\n\
    \x20           os.execv(other, [other, '-c', 'import sys; sys.stdin.read()'])\n\
    \x20       if cmd[1] == 'drop':\n\
    \x20           if len(cmd) > 2: os.close(fd)\n\
    \x20           else: kept.remove(c); c.close()\n\
    \x20       say('child', pid, fd)\n";

struct Driven {
    client: Client,
    listener: TcpListener,
    resolver: IdentityResolver,
    other: String,
    _dir: TempDir,
}

impl Driven {
    fn start() -> Self {
        let dir = TempDir::new("hints");
        let other = dir.path().join("other-python3");
        std::fs::copy(PYTHON, &other).unwrap();
        let (listener, _) = listener("127.0.0.1:0");
        let client = Client::spawn(
            Command::new(PYTHON)
                .arg("-c")
                .arg(DRIVEN)
                .arg(listener.local_addr().unwrap().port().to_string())
                .arg(&other),
        );
        Self {
            client,
            listener,
            resolver: resolver(),
            other: other.to_string_lossy().into_owned(),
            _dir: dir,
        }
    }

    fn ask(&mut self, command: &str) -> Vec<String> {
        self.client.send_line(command);
        self.client.line()
    }

    /// A connection the client made and identified: its socket is where the next lookup
    /// looks first.
    fn identified_connection(&mut self) -> (std::net::TcpStream, u32) {
        let fd: u32 = self.ask("connect")[1].parse().unwrap();
        let (stream, peer, local) = accept(&self.listener);
        let found = self.resolver.lookup(peer, local).unwrap();
        assert_eq!((found.pid, found.socket.fd), (self.client.pid(), Some(fd)));
        (stream, fd)
    }

    /// `fork ...`: the child's pid and the descriptor it holds the connection under, once it
    /// runs the other program.
    fn fork(&mut self, command: &str) -> (u32, u32) {
        let answer = self.ask(command);
        let (pid, fd) = (answer[1].parse().unwrap(), answer[2].parse().unwrap());
        wait_for_exe(pid, &self.other);
        (pid, fd)
    }
}

fn wait_for_exe(pid: u32, exe: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|path| path.to_string_lossy() == exe)
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("pid {pid} never became {exe}");
}

/// The client's neighbours of its last socket are other sockets of its own, and the new
/// connection is held only by a child running another program, far above: the child is the
/// caller, at the descriptor where it holds the socket.
#[test]
fn a_holder_far_from_the_hint_is_the_caller_not_the_hinted_client() {
    let mut driven = Driven::start();
    let (_first, _) = driven.identified_connection();
    assert_eq!(driven.ask("filler 40"), ["ok"]);
    let (child, fd) = driven.fork("fork drop 900");
    assert_eq!(fd, 900);
    let (_stream, peer, local) = accept(&driven.listener);
    let found = driven.resolver.lookup(peer, local).unwrap();
    assert_eq!(
        (found.pid, found.exe.as_str(), found.socket.fd),
        (child, driven.other.as_str(), Some(900))
    );
    assert_eq!(
        full_scan_owners(Path::new("/proc"), found.socket.inode),
        [child]
    );
    driven.resolver.confirm(&found).unwrap();
    driven.resolver.recheck(&found).unwrap();
}

/// The descriptor where the client held its last connection now holds another socket of
/// its own, and the new connection comes from an unrelated process: that process is the
/// caller.
#[test]
fn a_reused_descriptor_does_not_make_the_hinted_client_the_caller() {
    let mut driven = Driven::start();
    let (_first, fd) = driven.identified_connection();
    assert_eq!(driven.ask(&format!("reuse {fd}")), ["fd", &fd.to_string()]);
    let port = driven.listener.local_addr().unwrap().port();
    let mut stranger = Client::python(&connect_script("127.0.0.1"), port);
    let (_stream, peer, local) = accept(&driven.listener);
    assert_eq!(stranger.line()[0], "ready");
    let found = driven.resolver.lookup(peer, local).unwrap();
    assert_eq!(found.pid, stranger.pid());
}

/// The new connection lands next to the last one (found there at once), and a child running
/// another program shares it: the family is still searched, and the lookup refuses to pick.
#[test]
fn a_child_sharing_a_socket_found_near_the_hint_is_still_ambiguous() {
    let mut driven = Driven::start();
    let (_first, last) = driven.identified_connection();
    let (child, fd) = driven.fork("fork keep");
    assert!(fd.abs_diff(last) <= 2, "{fd} is not next to {last}");
    let (_stream, peer, local) = accept(&driven.listener);
    let err = driven.resolver.lookup(peer, local).unwrap_err();
    let mut pids = vec![driven.client.pid(), child];
    pids.sort_unstable();
    match &err {
        IdentityError::AmbiguousOwners { pids: found, inode } => {
            assert_eq!(found, &pids);
            assert_eq!(full_scan_owners(Path::new("/proc"), *inode), pids);
        }
        other => panic!("expected ambiguity, got {other}"),
    }
}
