//! Lookup latency on a busy host: thousands of idle processes, real clients, real sockets.
//!
//! Run: `cargo run --release -p sluice-identity --example identity_bench [-- --idle 2000
//! --repeat 500 --fresh 200 --siblings 1 --full 1 --floor 1]`. Prints one table: (a) one client process making many
//! connections (the recent-pid list finds it), and the later check that it still holds the
//! socket (`confirm`: that process only; `recheck`: its fork family too), (b) a fresh client
//! process per connection (the
//! descending scan finds it), (c) the naive full `/proc` scan on the same sockets as (b); then
//! the same (a) and (b) with the idle processes as siblings of the clients (the owner-set
//! completion reads every sibling's fd table, so this is the worst case for it), and (d) the
//! floor under (b): reading only a fresh client's own `/proc` files once (its fd table up to the
//! socket, `stat`, `children`, `exe`, `status`, `cmdline`), which any identification of a fresh
//! process needs. Each row gives wall time and the measuring thread's CPU time (what a loaded
//! machine's scheduler does not add).
#![allow(clippy::print_stdout)] // the table is the output

use std::error::Error;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_identity::{IdentityConfig, IdentityResolver, full_scan_owners};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const PYTHON: &str = "/usr/bin/python3";

/// Makes `sys.argv[2]` connections to port `sys.argv[1]`, one after another; each waits for one
/// byte (the bench's "identified") before closing.
const REPEAT_CLIENT: &str = "import socket, sys\n\
    for _ in range(int(sys.argv[2])):\n\
    \x20   c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    \x20   c.recv(1); c.close()\n";

/// One connection; prints its socket inode (for the full scan), waits for one byte.
const FRESH_CLIENT: &str = "import os, socket, sys\n\
    c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
    print(os.fstat(c.fileno()).st_ino, flush=True)\n\
    c.recv(1)\n";

struct Options {
    idle: usize,
    repeat: usize,
    fresh: usize,
    /// 0 skips the (a') and (b') rows.
    siblings: usize,
    /// 0 skips the (c) row.
    full: usize,
    /// 0 skips the (d) row.
    floor: usize,
}

fn main() -> Result<()> {
    let options = parse_options()?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let mut rows = Vec::new();

    let group = IdleGroup::spawn(options.idle)?;
    settle();
    let processes = count_processes();
    let resolver = IdentityResolver::new(IdentityConfig::default());
    let (lookups, confirms, rechecks) = repeat_client(&resolver, &listener, port, options.repeat)?;
    rows.push(("(a) one client, repeat connections", lookups));
    rows.push(("(a) confirm(): the same client still holds it", confirms));
    rows.push(("(a) recheck(): and its fork family", rechecks));
    let (fresh, full) = fresh_clients(&resolver, &listener, port, options.fresh, options.full > 0)?;
    rows.push(("(b) fresh client per connection", fresh));
    if options.full > 0 {
        rows.push(("(c) full /proc scan, same sockets as (b)", full));
    }
    if options.floor > 0 {
        let floor = fresh_floor(&listener, port, options.fresh)?;
        rows.push(("(d) floor: a fresh client's own /proc files", floor));
    }
    drop(group);

    if options.siblings > 0 {
        let siblings = IdleSiblings::spawn(options.idle)?;
        settle();
        let resolver = IdentityResolver::new(IdentityConfig::default());
        let (lookups, confirms, rechecks) =
            repeat_client(&resolver, &listener, port, options.repeat)?;
        rows.push(("(a') as (a), idle processes are siblings", lookups));
        rows.push(("(a') confirm(), idle processes are siblings", confirms));
        rows.push(("(a') recheck(), idle processes are siblings", rechecks));
        let (fresh, _) = fresh_clients(&resolver, &listener, port, options.fresh, false)?;
        rows.push(("(b') as (b), idle processes are siblings", fresh));
        drop(siblings);
    }

    print_table(&rows, processes, &options);
    Ok(())
}

fn parse_options() -> Result<Options> {
    let mut options = Options {
        idle: 2000,
        repeat: 500,
        fresh: 200,
        siblings: 1,
        full: 1,
        floor: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value: usize = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .parse()?;
        match flag.as_str() {
            "--idle" => options.idle = value,
            "--repeat" => options.repeat = value,
            "--fresh" => options.fresh = value,
            "--siblings" => options.siblings = value,
            "--full" => options.full = value,
            "--floor" => options.floor = value,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    Ok(options)
}

// === scenarios ===

/// Lookups, then `confirm` and `recheck` of the identity each found.
type Samples = (Vec<Sample>, Vec<Sample>, Vec<Sample>);

fn repeat_client(
    resolver: &IdentityResolver,
    listener: &TcpListener,
    port: u16,
    count: usize,
) -> Result<Samples> {
    let mut client = Command::new(PYTHON)
        .args(["-c", REPEAT_CLIENT, &port.to_string(), &count.to_string()])
        .stdin(Stdio::null())
        .spawn()?;
    let mut samples = Vec::with_capacity(count);
    let mut confirms = Vec::with_capacity(count);
    let mut rechecks = Vec::with_capacity(count);
    for _ in 0..count {
        let (mut stream, peer) = listener.accept()?;
        let local = stream.local_addr()?;
        let (elapsed, identity) = timed(|| resolver.lookup(peer, local));
        let identity = identity?;
        if identity.pid != client.id() {
            return Err(
                format!("identified pid {} instead of {}", identity.pid, client.id()).into(),
            );
        }
        samples.push(elapsed);
        let (elapsed, confirmed) = timed(|| resolver.confirm(&identity));
        confirmed?;
        confirms.push(elapsed);
        let (elapsed, rechecked) = timed(|| resolver.recheck(&identity));
        rechecked?;
        rechecks.push(elapsed);
        stream.write_all(b"k")?;
    }
    client.wait()?;
    Ok((samples, confirms, rechecks))
}

fn fresh_clients(
    resolver: &IdentityResolver,
    listener: &TcpListener,
    port: u16,
    count: usize,
    with_full_scan: bool,
) -> Result<(Vec<Sample>, Vec<Sample>)> {
    let mut lookups = Vec::with_capacity(count);
    let mut full_scans = Vec::new();
    for _ in 0..count {
        let mut client = Command::new(PYTHON)
            .args(["-c", FRESH_CLIENT, &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let (mut stream, peer) = listener.accept()?;
        let local = stream.local_addr()?;
        let inode: u64 = first_line(client.stdout.take())?.trim().parse()?;

        let (elapsed, identity) = timed(|| resolver.lookup(peer, local));
        let identity = identity?;
        if identity.pid != client.id() {
            return Err(
                format!("identified pid {} instead of {}", identity.pid, client.id()).into(),
            );
        }
        lookups.push(elapsed);
        if with_full_scan {
            let (elapsed, owners) = timed(|| full_scan_owners(Path::new("/proc"), inode));
            if owners != [client.id()] {
                return Err(
                    format!("full scan found {owners:?} instead of {}", client.id()).into(),
                );
            }
            full_scans.push(elapsed);
        }
        stream.write_all(b"k")?;
        client.wait()?;
    }
    Ok((lookups, full_scans))
}

/// For each of `count` fresh clients: the reads of its own `/proc` files that identifying it
/// takes at the least, each opened and read once, as the first reads of that process.
fn fresh_floor(listener: &TcpListener, port: u16, count: usize) -> Result<Vec<Sample>> {
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let mut client = Command::new(PYTHON)
            .args(["-c", FRESH_CLIENT, &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let (mut stream, _) = listener.accept()?;
        let inode: u64 = first_line(client.stdout.take())?.trim().parse()?;
        let pid = client.id();
        let (elapsed, found) = timed(|| own_files(pid, inode));
        if !found? {
            return Err(format!("pid {pid} does not hold socket {inode}").into());
        }
        samples.push(elapsed);
        stream.write_all(b"k")?;
        client.wait()?;
    }
    Ok(samples)
}

/// Reads `pid`'s fd table up to the socket `inode`, then its `stat`, `children`, `exe`,
/// `status` and `cmdline`, through one descriptor of `/proc/<pid>`.
fn own_files(pid: u32, inode: u64) -> Result<bool> {
    use rustix::fs::{Dir, Mode, OFlags, openat};
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    let dir = rustix::fs::open(
        format!("/proc/{pid}").as_str(),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let want = format!("socket:[{inode}]");
    let mut fds = Dir::new(openat(
        &dir,
        "fd",
        flags | OFlags::DIRECTORY,
        Mode::empty(),
    )?)?;
    let mut found = false;
    while let Some(entry) = fds.read() {
        let entry = entry?;
        if entry.file_name().to_bytes().first() == Some(&b'.') {
            continue;
        }
        let target = rustix::fs::readlinkat(fds.fd()?, entry.file_name(), Vec::new())?;
        if target.as_bytes() == want.as_bytes() {
            found = true;
            break;
        }
    }
    let mut buffer = vec![0u8; 4096];
    let children = format!("task/{pid}/children");
    for name in ["stat", children.as_str(), "status", "cmdline"] {
        let file = openat(&dir, name, flags, Mode::empty())?;
        rustix::io::pread(&file, &mut buffer, 0)?;
    }
    rustix::fs::readlinkat(&dir, "exe", Vec::new())?;
    Ok(found)
}

/// One measurement: wall time, and the CPU time of the measuring thread (user and system),
/// which leaves out the time other processes had the CPU: on a loaded machine the two differ
/// by whatever the scheduler took away.
#[derive(Clone, Copy)]
struct Sample {
    wall: Duration,
    cpu: Duration,
}

fn timed<T>(work: impl FnOnce() -> T) -> (Sample, T) {
    let cpu = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(t.tv_sec.unsigned_abs(), t.tv_nsec.try_into().unwrap_or(0))
    };
    let (start, cpu_start) = (Instant::now(), cpu());
    let value = work();
    let sample = Sample {
        wall: start.elapsed(),
        cpu: cpu().saturating_sub(cpu_start),
    };
    (sample, value)
}

fn first_line(stdout: Option<ChildStdout>) -> Result<String> {
    let mut line = String::new();
    BufReader::new(stdout.ok_or("client stdout not captured")?).read_line(&mut line)?;
    Ok(line)
}

// === idle processes ===

/// Idle `sleep`s under one `sh` of their own (a busy host: most processes are unrelated to the
/// client). Killed as a process group on drop.
struct IdleGroup {
    shell: Child,
}

impl IdleGroup {
    fn spawn(count: usize) -> Result<Self> {
        let script = format!(
            "i=0; while [ $i -lt {count} ]; do sleep 600 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo up; wait"
        );
        let mut shell = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()?;
        let mut up = [0u8; 3];
        shell
            .stdout
            .take()
            .ok_or("sh stdout not captured")?
            .read_exact(&mut up)?;
        Ok(Self { shell })
    }
}

impl Drop for IdleGroup {
    fn drop(&mut self) {
        let group = format!("-{}", self.shell.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.shell.wait();
    }
}

/// Idle `sleep`s as direct children of the bench, i.e. siblings of every client.
struct IdleSiblings {
    children: Vec<Child>,
}

impl IdleSiblings {
    fn spawn(count: usize) -> Result<Self> {
        let mut children = Vec::with_capacity(count);
        for _ in 0..count {
            children.push(
                Command::new("sleep")
                    .arg("600")
                    .stdin(Stdio::null())
                    .spawn()?,
            );
        }
        Ok(Self { children })
    }
}

impl Drop for IdleSiblings {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
    }
}

/// Waits (at most 30 s) until the idle processes have started and gone to sleep: while
/// thousands of `sleep`s are still exec'ing, they compete for the CPU with the lookups.
fn settle() {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut quiet = 0;
    while quiet < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        // The fourth field of /proc/loadavg is "runnable/total"; the bench itself is one.
        let runnable = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|text| {
                text.split_whitespace()
                    .nth(3)?
                    .split('/')
                    .next()?
                    .parse::<u32>()
                    .ok()
            })
            .unwrap_or(0);
        quiet = if runnable <= 2 { quiet + 1 } else { 0 };
    }
}

fn count_processes() -> usize {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|entry| entry.ok())
                .filter(|entry| {
                    entry
                        .file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .count()
        })
        .unwrap_or(0)
}

// === report ===

fn print_table(rows: &[(&str, Vec<Sample>)], processes: usize, options: &Options) {
    println!(
        "sluice-identity lookup latency: {} idle processes ({} processes in /proc), {} repeat connections, {} fresh clients",
        options.idle, processes, options.repeat, options.fresh
    );
    let wall =
        |samples: &[Sample]| percentiles(&samples.iter().map(|s| s.wall).collect::<Vec<_>>());
    let cpu = |samples: &[Sample]| percentiles(&samples.iter().map(|s| s.cpu).collect::<Vec<_>>());
    let full = rows
        .iter()
        .find(|(name, _)| name.starts_with("(c)"))
        .map(|(_, samples)| wall(samples));
    println!(
        "{:<44} {:>6} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12} {:>14}",
        "scenario",
        "n",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "max µs",
        "CPU p50 µs",
        "CPU p99 µs",
        "p99 vs (c) p99"
    );
    for (name, samples) in rows {
        let [p50, p90, p99, max] = wall(samples);
        let [cpu50, _, cpu99, _] = cpu(samples);
        let ratio = full.map_or(String::from("-"), |full| format!("{:.4}", p99 / full[2]));
        println!(
            "{name:<44} {:>6} {p50:>10.1} {p90:>10.1} {p99:>10.1} {max:>10.1} {cpu50:>12.1} {cpu99:>12.1} {ratio:>14}",
            samples.len()
        );
    }
}

/// p50, p90, p99 and max, in microseconds.
fn percentiles(samples: &[Duration]) -> [f64; 4] {
    let mut sorted: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if sorted.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    };
    [at(0.50), at(0.90), at(0.99), at(1.0)]
}
