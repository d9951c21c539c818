//! The sibling tables kept from one lookup to the next (`siblings`) never hide a sibling that
//! holds the socket by fork: not one whose pid was reused since its table was kept (a new
//! process, forked with the socket, under the pid of one read before), not one whose kept
//! table held the socket before it was connected, not one forked after the tables were kept.
//! Each sibling is a real program (`sleep`) beside a real python3 client.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use sluice_identity::IdentityError;

mod common;

use common::*;

/// The start of every parent below: `say`, the port, and `sleeper(fds)`, a child running
/// `sleep` that keeps the descriptors `fds`.
const PARENT: &str = "import os, socket, subprocess, sys\n\
    def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
    port = int(sys.argv[1])\n\
    def sleeper(fds=()):\n\
    \x20   return subprocess.Popen(['/usr/bin/sleep', '600'], pass_fds=list(fds), stdin=subprocess.DEVNULL)\n\
    def python(code, fds=()):\n\
    \x20   return subprocess.Popen([sys.executable, '-c', code, str(port)], pass_fds=list(fds), stdin=subprocess.DEVNULL)\n\
    CONNECT = 'import socket, sys, time; c = socket.create_connection((\"127.0.0.1\", int(sys.argv[1]))); time.sleep(600)'\n\
    WAIT = 'import time; time.sleep(600)'\n\
    def running_sleep(pid):\n\
    \x20   import time\n\
    \x20   while os.readlink('/proc/%d/exe' % pid) != os.path.realpath('/usr/bin/sleep'): time.sleep(0.01)\n";

/// Looks up the first client's connection (which reads, and keeps, the table of its sibling),
/// then tells the parent to go on, and returns the lookup of the next connection.
fn second_lookup(script: &str) -> (Family, Vec<String>, Result<u32, IdentityError>) {
    let (listener, _) = listener("127.0.0.1:0");
    let mut parent = Client::python(
        &format!("{PARENT}{script}"),
        listener.local_addr().unwrap().port(),
    );
    let ready = parent.line();
    assert_eq!(ready[0], "ready", "{ready:?}");
    let (_first, peer, local) = accept(&listener);
    let resolver = resolver();
    let first = resolver.lookup(peer, local).unwrap();
    assert_eq!(first.ancestors[0].pid, parent.pid());
    // Again, once the resolver has subscribed to the process connector (a thread the first
    // lookup starts does it): this one keeps the sibling's table.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(resolver.lookup(peer, local).unwrap().pid, first.pid);
    parent.send_line("go");
    let (_second, peer2, local2) = accept(&listener);
    let done = parent.line();
    let found = resolver.lookup(peer2, local2).map(|identity| identity.pid);
    (Family(parent), done, found)
}

/// The parent and every child it started, killed when the test ends (the children would
/// outlive a parent whose stdin closes).
struct Family(Client);

impl Drop for Family {
    fn drop(&mut self) {
        let pid = self.0.pid();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        let _forking = forking();
        for child in children.split_whitespace() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", child])
                .status();
        }
    }
}

fn assert_ambiguous(found: Result<u32, IdentityError>, holders: &[u32]) {
    let mut holders = holders.to_vec();
    holders.sort_unstable();
    match found {
        Err(IdentityError::AmbiguousOwners { pids, .. }) => assert_eq!(pids, holders),
        other => panic!("expected {holders:?} to hold the socket, got {other:?}"),
    }
}

/// A sibling read (and kept) by the first lookups exits; a new process gets its pid (the
/// parent sets `ns_last_pid`, as root), inheriting the next connection, and runs `sleep`
/// beside a python3 child holding it too. The kept table is not this process's.
#[test]
fn a_sibling_whose_pid_was_reused_since_its_table_was_kept_is_read_again() {
    if !privileged("a_sibling_whose_pid_was_reused_since_its_table_was_kept_is_read_again") {
        return;
    }
    let script = "s = sleeper(); c1 = python(CONNECT)\n\
        say('ready', s.pid, c1.pid)\n\
        sys.stdin.readline()\n\
        target = s.pid; s.kill(); s.wait()\n\
        x = socket.create_connection(('127.0.0.1', port)); x.set_inheritable(True)\n\
        for attempt in range(200):\n\
        \x20   with open('/proc/sys/kernel/ns_last_pid', 'w') as f: f.write(str(target - 1))\n\
        \x20   pid = os.fork()\n\
        \x20   if pid == 0:\n\
        \x20       if os.getpid() != target: os._exit(0)\n\
        \x20       os.execv('/usr/bin/sleep', ['sleep', '600'])\n\
        \x20   if pid == target: break\n\
        \x20   os.waitpid(pid, 0)\n\
        else:\n\
        \x20   say('no-reuse'); sys.exit(1)\n\
        c2 = python(WAIT, [x.fileno()]); x.close()\n\
        say('reused', target, c2.pid)\n\
        sys.stdin.read()\n";
    let (_parent, done, found) = second_lookup(script);
    assert_eq!(done[0], "reused", "{done:?}");
    let (reused, other): (u32, u32) = (done[1].parse().unwrap(), done[2].parse().unwrap());
    assert_ambiguous(found, &[reused, other]);
}

/// A sibling that inherited a socket before it was connected: the first lookups keep its
/// table with that socket in it; the parent then connects the socket, hands it to a python3
/// child and closes its own copy. The kept table says the sibling may hold it: it is read.
#[test]
fn a_sibling_whose_kept_table_holds_the_socket_is_read_again() {
    let script = "y = socket.socket(); y.set_inheritable(True)\n\
        s = sleeper([y.fileno()]); c1 = python(CONNECT)\n\
        say('ready', s.pid, c1.pid)\n\
        sys.stdin.readline()\n\
        y.connect(('127.0.0.1', port))\n\
        c2 = python(WAIT, [y.fileno()]); y.close()\n\
        say('connected', s.pid, c2.pid)\n\
        sys.stdin.read()\n";
    let (_parent, done, found) = second_lookup(script);
    assert_eq!(done[0], "connected", "{done:?}");
    let holders: Vec<u32> = done[1..].iter().map(|pid| pid.parse().unwrap()).collect();
    assert_ambiguous(found, &holders);
}

/// A sibling forked after the tables were kept, with the socket: read (nothing was kept for
/// it), and the socket found shared.
#[test]
fn a_sibling_forked_with_the_socket_after_the_tables_were_kept_is_read() {
    let script = "s = sleeper(); c1 = python(CONNECT)\n\
        say('ready', s.pid, c1.pid)\n\
        sys.stdin.readline()\n\
        x = socket.create_connection(('127.0.0.1', port)); x.set_inheritable(True)\n\
        late = sleeper([x.fileno()]); c2 = python(WAIT, [x.fileno()]); x.close()\n\
        say('forked', late.pid, c2.pid)\n\
        sys.stdin.read()\n";
    let (_parent, done, found) = second_lookup(script);
    assert_eq!(done[0], "forked", "{done:?}");
    let holders: Vec<u32> = done[1..].iter().map(|pid| pid.parse().unwrap()).collect();
    assert_ambiguous(found, &holders);
}
