//! What the resolver keeps open for the processes it identified: beside each one's
//! `/proc/<pid>`, the files later checks read (`stat`, ...) for at most 16 processes at once,
//! and nothing once the identities read from a process are gone, but for the four processes
//! identified last (real python3 clients).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::PathBuf;

mod common;

use common::*;

/// This process's descriptors open on `/proc/<pid>/stat` for any of `pids`.
fn stat_files_of(pids: &[u32]) -> usize {
    let wanted: Vec<PathBuf> = pids
        .iter()
        .map(|pid| PathBuf::from(format!("/proc/{pid}/stat")))
        .collect();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| std::fs::read_link(entry.path()).is_ok_and(|t| wanted.contains(&t)))
        .count()
}

/// Twenty clients, each identified and kept: the files kept beside their `/proc/<pid>` are
/// bounded (16 processes), each later check still works, and all of them close with the
/// identities.
#[test]
fn files_kept_with_identified_processes_are_bounded_and_go_with_them() {
    let (listener, _) = listener("127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    let resolver = resolver();
    let mut clients = Vec::new();
    let mut identities = Vec::new();
    for _ in 0..20 {
        let mut client = Client::python(&connect_script("127.0.0.1"), port);
        let (stream, peer, local) = accept(&listener);
        assert_eq!(client.line()[0], "ready");
        let identity = resolver.lookup(peer, local).unwrap();
        assert_eq!(identity.pid, client.pid());
        clients.push((client, stream));
        identities.push(identity);
    }
    let pids: Vec<u32> = clients.iter().map(|(client, _)| client.pid()).collect();
    let kept = stat_files_of(&pids);
    assert!((1..=16).contains(&kept), "{kept} stat files kept");
    for identity in &identities {
        resolver.confirm(identity).unwrap();
        resolver.recheck(identity).unwrap();
    }
    drop(identities);
    // The four identified last stay open (for their next connections); the others close.
    assert_eq!(stat_files_of(&pids[..16]), 0);
    assert!(stat_files_of(&pids) <= 4);
    drop(resolver);
    assert_eq!(stat_files_of(&pids), 0);
}

/// A client that closes each connection before it opens the next is read at its next
/// lookup through the files kept with it: its `stat` stays open between its connections,
/// and a later check of each connection works as before.
#[test]
fn the_files_of_a_client_identified_last_stay_open_after_its_connection() {
    let (listener, _) = listener("127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    let resolver = resolver();
    let mut client = Client::python(&connect_script("127.0.0.1"), port);
    let (stream, peer, local) = accept(&listener);
    assert_eq!(client.line()[0], "ready");
    let identity = resolver.lookup(peer, local).unwrap();
    assert_eq!(identity.pid, client.pid());
    drop((identity, stream));
    assert_eq!(stat_files_of(&[client.pid()]), 1);
}
