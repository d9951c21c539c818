//! The `procfs` crate against sluice's hand-written `/proc` reads, call for call, on the reads a
//! lookup makes of each process it meets (a real python3 client holding a TCP connection, and
//! a dozen other descriptors).
//!
//! Run: `cargo run --release -p sluice-identity --example procfs_compare [-- ROUNDS]`.
//! Prints, for each read, the measuring thread's CPU time per call (median of ROUNDS
//! alternating rounds, 2,000 calls each) and the system calls each makes. The hand-written
//! side makes the calls `identity/src/procfs.rs` makes (`strace` of a lookup shows them): a
//! process's files opened once and read with `pread`, its fd directory kept open and rewound,
//! one `readlinkat` per descriptor, parsers that read only the fields identity needs. The
//! crate side is its public API as a lookup would use it (`Process::new`, then `stat`, `fd`,
//! `exe`, `cmdline`, `status`), and its parsers alone on the same bytes (`procfs-core`).
#![allow(clippy::print_stdout)] // the table is the output

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::Duration;

use procfs::FromRead;
use procfs::process::{FDTarget, Process, Stat, Status};
use rustix::fs::{Dir, Mode, OFlags};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const CALLS: u32 = 2_000;

/// Connects to `sys.argv[1]`, opens a dozen more descriptors, says its socket's inode.
const CLIENT: &str = "import os, socket, sys\n\
    c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    more = [open('/dev/null') for _ in range(12)]\n\
    print(os.fstat(c.fileno()).st_ino, flush=True)\n\
    sys.stdin.read()\n";

fn main() -> Result<()> {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(5);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut client = Command::new("/usr/bin/python3")
        .args(["-c", CLIENT, &listener.local_addr()?.port().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let _accepted = listener.accept()?;
    let mut line = String::new();
    BufReader::new(client.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let inode: u64 = line.trim().parse()?;
    let pid = client.id();
    let kept = Kept::open(pid)?;
    let link = format!("socket:[{inode}]").into_bytes();
    let process = Process::new(i32::try_from(pid)?)?;
    let stat_bytes = pread_all(kept.stat.as_fd())?;
    let status_bytes = pread_all(kept.status.as_fd())?;

    // (read, system calls by hand, by the crate, hand-written, crate)
    type Call<'a> = Box<dyn FnMut() -> bool + 'a>;
    let mut rows: Vec<(&str, &str, &str, Call<'_>, Call<'_>)> = vec![
        (
            "stat: ppid, threads, start time",
            "1 pread",
            "open, read x2, close",
            Box::new(|| pread_all(kept.stat.as_fd()).is_ok_and(|b| parse_stat(&b).is_some())),
            Box::new(|| process.stat().is_ok_and(|s| s.starttime > 0)),
        ),
        (
            "fd table: the socket's descriptor",
            "lseek, getdents x2, 1 readlinkat per fd",
            "open, getdents x2, close; open, readlinkat, fstatat, close per fd",
            Box::new(|| kept.holding(&link).is_some()),
            Box::new(|| {
                process.fd().is_ok_and(|mut fds| {
                    fds.any(|fd| {
                        fd.is_ok_and(|fd| matches!(fd.target, FDTarget::Socket(i) if i == inode))
                    })
                })
            }),
        ),
        (
            "exe link",
            "1 readlinkat",
            "1 readlinkat",
            Box::new(|| rustix::fs::readlinkat(kept.dir.as_fd(), "exe", Vec::new()).is_ok()),
            Box::new(|| process.exe().is_ok()),
        ),
        (
            "cmdline",
            "1 pread",
            "open, read x2, close",
            Box::new(|| pread_all(kept.cmdline.as_fd()).is_ok_and(|b| !b.is_empty())),
            Box::new(|| process.cmdline().is_ok_and(|c| !c.is_empty())),
        ),
        (
            "status: real uid",
            "1 pread",
            "open, read x2, close",
            Box::new(|| pread_all(kept.status.as_fd()).is_ok_and(|b| real_uid(&b).is_some())),
            Box::new(|| process.status().is_ok_and(|s| s.ruid < u32::MAX)),
        ),
        (
            "opening a process (/proc/<pid>)",
            "openat from the kept /proc fd, close",
            "Process::new: openat of the path, close",
            Box::new(|| kept.reopen(pid).is_ok()),
            Box::new(|| Process::new(i32::try_from(pid).unwrap_or(-1)).is_ok()),
        ),
        (
            "parse stat (bytes in memory)",
            "-",
            "-",
            Box::new(|| parse_stat(&stat_bytes).is_some()),
            Box::new(|| Stat::from_read(&stat_bytes[..]).is_ok()),
        ),
        (
            "parse status (bytes in memory)",
            "-",
            "-",
            Box::new(|| real_uid(&status_bytes).is_some()),
            Box::new(|| Status::from_read(&status_bytes[..]).is_ok()),
        ),
    ];

    println!(
        "procfs 0.18 against the hand-written reads: CPU µs per call, median of {rounds} rounds of {CALLS} calls"
    );
    println!(
        "{:<36} {:>10} {:>10} {:>7}  system calls (hand-written / crate)",
        "read", "hand µs", "crate µs", "ratio"
    );
    for (name, hand_calls, crate_calls, hand, krate) in &mut rows {
        let mut hand_times = Vec::new();
        let mut crate_times = Vec::new();
        for _ in 0..rounds {
            hand_times.push(per_call(hand)?);
            crate_times.push(per_call(krate)?);
        }
        let (h, c) = (median(&mut hand_times), median(&mut crate_times));
        println!(
            "{name:<36} {h:>10.2} {c:>10.2} {:>7.2}  {hand_calls} / {crate_calls}",
            c / h
        );
    }
    drop(client.stdin.take());
    client.kill()?;
    client.wait()?;
    Ok(())
}

/// The files of one process as sluice keeps them (`kept.rs`).
struct Kept {
    proc_root: OwnedFd,
    dir: OwnedFd,
    stat: OwnedFd,
    cmdline: OwnedFd,
    status: OwnedFd,
    fd_dir: std::cell::RefCell<Dir>,
}

impl Kept {
    fn open(pid: u32) -> Result<Self> {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let proc_root = rustix::fs::open("/proc", flags | OFlags::DIRECTORY, Mode::empty())?;
        let dir = rustix::fs::openat(
            &proc_root,
            pid.to_string().as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let at = |name: &str, extra: OFlags| {
            rustix::fs::openat(&dir, name, flags | extra, Mode::empty())
        };
        let (stat, cmdline, status) = (
            at("stat", OFlags::empty())?,
            at("cmdline", OFlags::empty())?,
            at("status", OFlags::empty())?,
        );
        let fd_dir = std::cell::RefCell::new(Dir::new(at("fd", OFlags::DIRECTORY)?)?);
        Ok(Self {
            proc_root,
            dir,
            stat,
            cmdline,
            status,
            fd_dir,
        })
    }

    /// The descriptor whose link reads `link`, reading the kept fd directory from its start.
    fn holding(&self, link: &[u8]) -> Option<u32> {
        let mut dir = self.fd_dir.borrow_mut();
        dir.rewind();
        while let Some(Ok(entry)) = dir.read() {
            let name = entry.file_name();
            if name.to_bytes().first() == Some(&b'.') {
                continue;
            }
            let fd = dir.fd().ok()?;
            if rustix::fs::readlinkat(fd, name, Vec::with_capacity(64))
                .is_ok_and(|target| target.as_bytes() == link)
            {
                return std::str::from_utf8(name.to_bytes()).ok()?.parse().ok();
            }
        }
        None
    }

    fn reopen(&self, pid: u32) -> rustix::io::Result<OwnedFd> {
        rustix::fs::openat(
            &self.proc_root,
            rustix::path::DecInt::new(pid),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
    }
}

fn pread_all(fd: std::os::fd::BorrowedFd<'_>) -> rustix::io::Result<Vec<u8>> {
    let mut buffer = vec![0; 4096];
    let n = rustix::io::pread(fd, &mut buffer, 0)?;
    buffer.truncate(n);
    Ok(buffer)
}

/// `procfs.rs`'s `parse_stat`: fields 4, 20 and 22, counted from the last `)`.
fn parse_stat(contents: &[u8]) -> Option<(u32, u32, u64)> {
    let close = contents.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(contents.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let ppid = fields.nth(1)?.parse().ok()?;
    let threads = fields.nth(15)?.parse().ok()?;
    let start = fields.nth(1)?.parse().ok()?;
    Some((ppid, threads, start))
}

/// `procfs.rs`'s `parse_status_real_uid`.
fn real_uid(contents: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(contents).ok()?;
    let line = text.lines().find_map(|line| line.strip_prefix("Uid:"))?;
    line.split_ascii_whitespace().next()?.parse().ok()
}

/// CPU time per call of `call`, over [`CALLS`] calls.
fn per_call(call: &mut dyn FnMut() -> bool) -> Result<f64> {
    let cpu = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(t.tv_sec.unsigned_abs(), t.tv_nsec.try_into().unwrap_or(0))
    };
    let start = cpu();
    for _ in 0..CALLS {
        if !call() {
            return Err("a read failed".into());
        }
    }
    Ok(cpu().saturating_sub(start).as_secs_f64() * 1e6 / f64::from(CALLS))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}
