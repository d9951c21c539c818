//! Tests of `owners.rs`: the search order against real processes holding thousands of
//! descriptors.

use super::first::RECENT_FD_BUDGET;
use super::*;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

/// A python3 process that holds `sys.argv[1]` socket pairs (twice as many descriptors),
/// then opens one socket per line read and says `<fd> <inode>` for each. The sockets are
/// unix ones: the search only reads fd tables, any socket inode will do.
const HOARDER: &str = "import os, resource, socket, sys\n\
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n\
    want = 2 * int(sys.argv[1]) + 64\n\
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))\n\
    pairs = [socket.socketpair() for _ in range(int(sys.argv[1]))]\n\
    kept = []\n\
    for line in sys.stdin:\n\
    \x20   words = line.split()\n\
    \x20   s = socket.socket(socket.AF_UNIX)\n\
    \x20   if words and words[0] == 'at':\n\
    \x20       os.dup2(s.fileno(), int(words[1])); s.close(); s = socket.socket(fileno=int(words[1]))\n\
    \x20   kept.append(s)\n\
    \x20   os.write(1, b'%d %d\\n' % (s.fileno(), os.fstat(s.fileno()).st_ino))\n";

/// Held by every test that spawns a hoarder when they share a process (`cargo test`;
/// nextest runs each in its own): one hoarder's thousands of descriptors, newer than
/// another test's client, would be read by that test's scan.
static HOARDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The hoarders' lock, held for the test, and `/proc`.
fn hoarding() -> (std::sync::MutexGuard<'static, ()>, ProcFs) {
    let guard = HOARDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    (guard, ProcFs::open(Path::new("/proc")).unwrap())
}

struct Hoarder {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Hoarder {
    fn spawn(pairs: usize) -> Self {
        let mut child = Command::new("/usr/bin/python3")
            .args(["-c", HOARDER, &pairs.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// A new socket (at descriptor `at` if given): its (fd, inode).
    fn socket(&mut self, at: Option<u32>) -> (u32, u64) {
        let line = at.map_or_else(|| "new\n".to_owned(), |fd| format!("at {fd}\n"));
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        let mut words = answer.split_whitespace().map(|w| w.parse::<u64>().unwrap());
        let fd = u32::try_from(words.next().unwrap()).unwrap();
        (fd, words.next().unwrap())
    }

    fn recent(&self, proc: &ProcFs, fd: u32) -> RecentPid {
        let pid = self.child.id();
        let start_time = proc.pid_dir(pid).unwrap().stat().unwrap().start_time;
        RecentPid {
            pid,
            start_time,
            fd: Some(fd),
            elsewhere: None,
        }
    }
}

impl Drop for Hoarder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn search(proc: &ProcFs, inode: u64, recent: RecentPid) -> Found {
    search_within(proc, inode, recent, usize::MAX).unwrap()
}

fn search_within(proc: &ProcFs, inode: u64, recent: RecentPid, limit: usize) -> Option<Found> {
    let uid = rustix::process::getuid().as_raw();
    OwnerSearch::new(proc, inode, std::process::id())
        .within(limit)
        .run(&[recent], uid)
}

/// A lookup's search (recent tables capped).
fn lookup_search(proc: &ProcFs, inode: u64, recent: RecentPid) -> Found {
    let uid = rustix::process::getuid().as_raw();
    OwnerSearch::new(proc, inode, std::process::id())
        .capping_recent_tables()
        .run(&[recent], uid)
        .unwrap()
}

/// A recent client holding thousands of descriptors, and a new socket of another
/// process: a lookup reads the recent client's table around its hint only, not whole,
/// and finds the other process by the scan. A recheck (uncapped) reads it whole.
#[test]
fn a_lookup_does_not_read_a_large_recent_table_whole() {
    let (_hoarding, proc) = hoarding();
    if proc
        .pid_dir(std::process::id())
        .unwrap()
        .fd_count()
        .is_none()
    {
        // Before Linux 6.2 the kernel gives no table size: every table is read whole.
        return;
    }
    let mut hoarder = Hoarder::spawn(1500);
    let (last, _) = hoarder.socket(None);
    let recent = hoarder.recent(&proc, last);
    let mut other = Hoarder::spawn(1);
    let (fd, inode) = other.socket(None);

    let found = lookup_search(&proc, inode, recent);
    let pids: Vec<u32> = found.owners.iter().map(ProcDir::pid).collect();
    assert_eq!(pids, [other.child.id()]);
    assert_eq!(found.fds.get(&other.child.id()), Some(&fd));
    // The recent pass probes at most its own budget around the hint (its window is 512
    // there) and does not read the table.
    assert_eq!(found.recent_fds_read, RECENT_FD_BUDGET);
    // Against the same search uncapped, run next (so that whatever else the scan read,
    // other tests' processes included, it read in both): the recent table's 3,000.
    let uncapped = search(&proc, inode, recent);
    assert_eq!(uncapped.fds, found.fds);
    assert!(
        found.fds_read + 2_500 < uncapped.fds_read,
        "capped {}, uncapped {}",
        found.fds_read,
        uncapped.fds_read
    );
    assert!(
        uncapped.recent_fds_read > 3_000,
        "{}",
        uncapped.recent_fds_read
    );
}

/// A client holding thousands of sockets: its next one gets the lowest free descriptor,
/// next to the last one identified, and is found there without reading the whole table.
#[test]
fn a_new_socket_of_a_client_with_thousands_is_found_near_its_last_descriptor() {
    let (_hoarding, proc) = hoarding();
    let mut client = Hoarder::spawn(1500);
    let (last, _) = client.socket(None);
    let (fd, inode) = client.socket(None);
    assert!(fd > 3000, "{fd}");
    let found = search(&proc, inode, client.recent(&proc, last));
    let pids: Vec<u32> = found.owners.iter().map(ProcDir::pid).collect();
    assert_eq!(pids, [client.child.id()]);
    assert_eq!(found.fds.get(&client.child.id()), Some(&fd));
    // The table holds over 3000 descriptors.
    assert!(found.fds_read < 100, "read {} descriptors", found.fds_read);
}

/// A client whose new socket fills a gap far below its last one, next to where an
/// earlier one was found: found there, without reading the whole table.
#[test]
fn a_socket_in_a_gap_next_to_an_earlier_one_is_found_there() {
    let (_hoarding, proc) = hoarding();
    let mut client = Hoarder::spawn(1500);
    let (last, _) = client.socket(None);
    let (fd, inode) = client.socket(Some(1500));
    let recent = RecentPid {
        elsewhere: Some(1498),
        ..client.recent(&proc, last)
    };
    let found = search(&proc, inode, recent);
    assert_eq!(found.fds.get(&client.child.id()), Some(&fd));
    assert!(found.fds_read < 560, "read {} descriptors", found.fds_read);
}

/// The same client holding the socket far from where it held the last: found by its
/// whole table, at the descriptor where it is.
#[test]
fn a_socket_far_from_the_hint_is_found_by_the_whole_table() {
    let (_hoarding, proc) = hoarding();
    let mut client = Hoarder::spawn(1500);
    let (last, _) = client.socket(None);
    let (fd, inode) = client.socket(Some(20));
    assert_eq!(fd, 20);
    let found = search(&proc, inode, client.recent(&proc, last));
    let pids: Vec<u32> = found.owners.iter().map(ProcDir::pid).collect();
    assert_eq!(pids, [client.child.id()]);
    assert_eq!(found.fds.get(&client.child.id()), Some(&20));
}

/// A search with a limit stops unfinished in the middle of one large table, and answers
/// nothing: not the owner it had not reached, and no "nobody" either. The same search
/// finishes under a limit above what the table costs, and then answers what the
/// unbounded one does.
#[test]
fn a_search_that_reaches_its_limit_answers_nothing() {
    let (_hoarding, proc) = hoarding();
    let mut client = Hoarder::spawn(1500);
    let (last, _) = client.socket(None);
    let (fd, inode) = client.socket(Some(20));
    let recent = client.recent(&proc, last);
    // The descriptors around the hint (512 of them) alone cost more than 300 reads: the
    // search stops before it reads the whole table, where the socket is.
    assert!(search_within(&proc, inode, recent, 300).is_none());
    let found = search_within(&proc, inode, recent, 100_000).unwrap();
    assert_eq!(found.fds.get(&client.child.id()), Some(&fd));
    let unbounded = search(&proc, inode, recent);
    assert_eq!(found.fds, unbounded.fds);
}
