//! The verdict on a process's executable path kept from one lookup to the next (`vouch`'s
//! `Remembered`) is never the reason a changed process passes: a process that moves into a
//! user namespace of its own after its verdict was kept (`unshare(CLONE_NEWUSER)`, where it
//! could point its `exe` link anywhere) is judged as such at the next lookup, whether it is
//! the caller or one of its ancestors (real python3 processes, real sockets).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use sluice_identity::IdentityError;

mod common;

use common::*;

/// Moves the calling (single-threaded) python3 process into a new user namespace.
const UNSHARE_USER: &str = "import ctypes, os\n\
    def unshare_user():\n\
    \x20   libc = ctypes.CDLL(None, use_errno=True)\n\
    \x20   if libc.unshare(0x10000000) != 0:\n\
    \x20       raise OSError(ctypes.get_errno(), 'unshare(CLONE_NEWUSER)')\n";

/// The identified process itself: looked up once (its files and its verdict kept with the
/// identity), then moved into its own user namespace, then looked up for a new connection.
#[test]
fn a_caller_that_moves_into_its_own_user_namespace_after_its_verdict_was_kept_is_refused() {
    if !privileged(
        "a_caller_that_moves_into_its_own_user_namespace_after_its_verdict_was_kept_is_refused",
    ) {
        return;
    }
    let (listener, _) = listener("127.0.0.1:0");
    let script = format!(
        "{UNSHARE_USER}\
         import socket, sys\n\
         def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
         port = int(sys.argv[1]); kept = []\n\
         kept.append(socket.create_connection(('127.0.0.1', port))); say('ready')\n\
         sys.stdin.readline(); unshare_user()\n\
         kept.append(socket.create_connection(('127.0.0.1', port))); say('again')\n\
         sys.stdin.read()\n"
    );
    let mut client = Client::python(&script, listener.local_addr().unwrap().port());
    let (_first, peer, local) = accept(&listener);
    assert_eq!(client.line(), ["ready"]);
    let resolver = resolver();
    // Held: the process stays kept, with its verdict, for the next lookup.
    let before = resolver.lookup(peer, local).unwrap();
    assert_eq!(before.pid, client.pid());
    assert_eq!(before.exe, real_path(PYTHON));
    let again = resolver.lookup(peer, local).unwrap();
    assert_eq!(again.pid, client.pid());

    client.send_line("unshare");
    let (_second, peer2, local2) = accept(&listener);
    assert_eq!(client.line(), ["again"]);
    for (peer, local) in [(peer2, local2), (peer, local)] {
        let err = resolver.lookup(peer, local).unwrap_err();
        assert!(
            matches!(&err, IdentityError::OtherUserNamespace { pid, .. } if *pid == client.pid()),
            "{err:?}"
        );
    }
    drop(before);
}

/// An ancestor: kept by the lookups of its child's connections (with its verdict), then
/// moved into its own user namespace; the child, left in sluice's namespace, connects again
/// and is identified, but not through a parent it can no longer be credited with.
#[test]
fn an_ancestor_that_moves_into_its_own_user_namespace_after_its_verdict_was_kept_is_not_believed() {
    if !privileged(
        "an_ancestor_that_moves_into_its_own_user_namespace_after_its_verdict_was_kept_is_not_believed",
    ) {
        return;
    }
    let (listener, _) = listener("127.0.0.1:0");
    let child = "import socket, sys\n\
        port = int(sys.argv[1]); kept = []\n\
        for line in sys.stdin:\n\
        \x20   kept.append(socket.create_connection(('127.0.0.1', port)))\n";
    let script = format!(
        "{UNSHARE_USER}\
         import subprocess, sys\n\
         c = subprocess.Popen([sys.executable, '-c', {child:?}, sys.argv[1]], stdin=subprocess.PIPE)\n\
         c.stdin.write(b'go\\n'); c.stdin.flush()\n\
         sys.stdin.readline(); unshare_user(); os.write(1, b'unshared\\n')\n\
         c.stdin.write(b'go\\n'); c.stdin.flush()\n\
         sys.stdin.read()\n"
    );
    let mut parent = Client::python(&script, listener.local_addr().unwrap().port());
    let (_first, peer, local) = accept(&listener);
    let resolver = resolver();
    let before = resolver.lookup(peer, local).unwrap();
    assert_eq!(before.ancestors[0].pid, parent.pid());
    assert_eq!(before.ancestors[0].exe, real_path(PYTHON));
    // A second lookup reads the parent through its kept files and verdict.
    let again = resolver.lookup(peer, local).unwrap();
    assert_eq!(again.ancestors[0].exe, real_path(PYTHON));

    parent.send_line("unshare");
    assert_eq!(parent.line(), ["unshared"]);
    let (_second, peer2, local2) = accept(&listener);
    for (peer, local) in [(peer2, local2), (peer, local)] {
        let now = resolver.lookup(peer, local).unwrap();
        assert_eq!(now.pid, before.pid);
        assert_eq!(now.exe, real_path(PYTHON));
        let ancestor = &now.ancestors[0];
        assert_eq!((ancestor.pid, ancestor.exe.as_str()), (parent.pid(), ""));
        assert!(!now.ancestor_exes().contains(&real_path(PYTHON)));
    }
}
