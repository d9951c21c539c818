//! A caller whose process family is too large to look up in place on a worker (sluice reads
//! at most 512 descriptors' worth of `/proc` there, then looks again in full where it blocks
//! no other connection). Real processes: a python3 client that forks 300 idle children before
//! it connects. The full lookup must still decide, as it always did: the client is
//! identified, and a child of another program that shares the socket still makes it
//! ambiguous.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::process::Command;

use serde_json::Value;
use sluice_e2e::proxy::{Sluice, json_body, python, realpath, run, status_of};
use sluice_e2e::scrape;

/// Leaves its parent (so that its family is its own, whatever else the test runner runs beside
/// it: the climb through ancestors stops at init), forks `sys.argv[4]` children that wait on a
/// pipe until the client exits, connects to sluice, then
/// (with `share`) forks one more child that runs `/usr/bin/sleep` holding a copy of the
/// socket, and waits until it does. Asks for a tunnel to `sys.argv[1]` and prints sluice's
/// whole answer.
const CLIENT: &str = "import os, socket, sys, time\n\
    first = os.getpid()\n\
    if os.fork() != 0: os._exit(0)\n\
    while os.getppid() == first: time.sleep(0.005)\n\
    r, w = os.pipe()\n\
    for _ in range(int(sys.argv[4])):\n\
    \x20   if os.fork() == 0:\n\
    \x20       os.close(w); os.read(r, 1); os._exit(0)\n\
    c = socket.create_connection(('127.0.0.1', int(sys.argv[2])))\n\
    sleeper = None\n\
    if sys.argv[3] == 'share':\n\
    \x20   c.set_inheritable(True)\n\
    \x20   sleeper = os.fork()\n\
    \x20   if sleeper == 0:\n\
    \x20       os.execv('/usr/bin/sleep', ['/usr/bin/sleep', '60'])\n\
    \x20   deadline = time.time() + 10\n\
    \x20   while not (os.readlink('/proc/%d/exe' % sleeper) == os.path.realpath('/usr/bin/sleep') and open('/proc/%d/cmdline' % sleeper, 'rb').read()):\n\
    \x20       assert time.time() < deadline, 'the child never ran sleep'\n\
    \x20       time.sleep(0.01)\n\
    c.sendall(('CONNECT 127.0.0.1:%s HTTP/1.1\\r\\nHost: 127.0.0.1:%s\\r\\n\\r\\n' % (sys.argv[1], sys.argv[1])).encode())\n\
    c.settimeout(20)\n\
    answer = b''\n\
    while True:\n\
    \x20   piece = c.recv(65536)\n\
    \x20   answer += piece\n\
    \x20   if not piece or answer.startswith(b'HTTP/1.1 200') and b'\\r\\n\\r\\n' in answer: break\n\
    if sleeper: os.kill(sleeper, 9)\n\
    sys.stdout.write('parent %d\\n' % os.getppid() + answer.decode())\n";

/// What sluice answered the client, with `children` forked before it connected, and
/// whether the client's parent (once it left its own) was init.
fn ask(sluice: &Sluice, target: u16, mode: &str, children: u32) -> (String, bool) {
    let (code, out, err) = run(Command::new(python())
        .arg("-c")
        .arg(CLIENT)
        .arg(target.to_string())
        .arg(sluice.addr().port().to_string())
        .arg(mode)
        .arg(children.to_string()));
    assert_eq!(
        code,
        0,
        "client failed: {err}\n{out}\nsluice: {}",
        sluice.stderr()
    );
    let (first, answer) = out.split_once('\n').unwrap_or_default();
    (answer.to_string(), first == "parent 1")
}

#[test]
fn a_caller_with_a_large_family_is_identified_in_full() {
    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = origin.local_addr().unwrap().port();
    let policy = format!(
        "version: 1\nnetwork_policies:\n  plain:\n    endpoints:\n      - {{host: 127.0.0.1, port: {port}}}\n    binaries:\n      - path: {}\n",
        realpath(&python())
    );
    let sluice = Sluice::start(
        &policy,
        &[
            "--allow-loopback-upstream",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let metrics = scrape::metrics_addr(&sluice);
    let off_worker = || {
        let (_, text) = scrape::openmetrics(metrics);
        scrape::value(
            &scrape::parse(&text),
            "sluice_identity_lookups_off_worker_total",
            &[],
        )
    };

    // A client with a few children is looked up in place. (Processes that other tests start
    // meanwhile are read too, newest first, until the client is found: of three tries, one
    // must stay in place. Where the client is taken in by a subreaper instead of init, that
    // one's other children are its siblings, and are read too: not asserted there.)
    let mut in_place = false;
    let mut under_init = true;
    for _ in 0..3 {
        let before = off_worker();
        let (small, by_init) = ask(&sluice, port, "alone", 3);
        assert_eq!(status_of(&small), 200, "{small}\n{}", sluice.stderr());
        under_init &= by_init;
        if off_worker() == before {
            in_place = true;
            break;
        }
    }
    assert!(
        in_place || !under_init,
        "every lookup of a small client went off the worker"
    );

    let before = off_worker();
    let (alone, _) = ask(&sluice, port, "alone", 300);
    assert_eq!(status_of(&alone), 200, "{alone}\n{}", sluice.stderr());
    assert!(off_worker() > before);

    let (shared, _) = ask(&sluice, port, "share", 300);
    assert_eq!(status_of(&shared), 403, "{shared}");
    let body: Value = json_body(&shared);
    assert_eq!(body["stage"], "identity", "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .starts_with("ambiguous shared socket ownership"),
        "{body}"
    );
}
