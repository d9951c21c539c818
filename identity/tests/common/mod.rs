//! Fixtures shared by the identity tests: real programs spawned as clients, listeners, and the
//! privilege check.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)] // not every test file uses every fixture

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sluice_identity::{IdentityConfig, IdentityResolver};

pub(crate) const PYTHON: &str = "/usr/bin/python3";

/// Held while the test process forks: between fork and exec a child holds copies of every
/// descriptor of the test process, which would make it an owner of the test's own sockets.
pub(crate) static FORKING: Mutex<()> = Mutex::new(());

pub(crate) fn forking() -> MutexGuard<'static, ()> {
    FORKING.lock().unwrap_or_else(PoisonError::into_inner)
}

// === fixtures ===

/// A spawned program that reports on stdout and exits when its stdin closes (as do the
/// processes it forks, which inherit that stdin).
pub(crate) struct Client {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) stdout: BufReader<ChildStdout>,
}

impl Client {
    pub(crate) fn spawn(command: &mut Command) -> Self {
        let forking = forking();
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|err| panic!("spawn {command:?}: {err}"));
        drop(forking);
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// `python3 -c SCRIPT PORT`, with `PORT` as `sys.argv[1]`.
    pub(crate) fn python(script: &str, port: u16) -> Self {
        Self::spawn(
            Command::new(PYTHON)
                .arg("-c")
                .arg(script)
                .arg(port.to_string()),
        )
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line the program printed, split on whitespace.
    pub(crate) fn line(&mut self) -> Vec<String> {
        let mut line = String::new();
        let read = self.stdout.read_line(&mut line).unwrap();
        assert!(read > 0, "client exited before reporting");
        line.split_whitespace().map(str::to_owned).collect()
    }

    pub(crate) fn send_line(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{text}").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Kills a process the test did not spawn itself (a grandchild, a detached process) when the
/// test ends.
pub(crate) struct KillOnDrop(pub(crate) u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _forking = forking();
        let _ = Command::new("kill")
            .arg("-KILL")
            .arg(self.0.to_string())
            .status();
    }
}

/// A directory under the system's temporary one, removed with everything in it when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// A new directory for each call: tests run in parallel threads of one process, and one
    /// test's drop must not remove another's files (a program whose file is removed while it
    /// runs reads as a deleted executable, which a recheck rightly refuses).
    pub(crate) fn new(name: &str) -> Self {
        static MADE: AtomicU32 = AtomicU32::new(0);
        let nth = MADE.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "sluice-identity-{name}-{}-{nth}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn listener(addr: &str) -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind(addr).unwrap();
    let local = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    (listener, local)
}

/// Accepts one connection within 20 s; returns the accepted socket's (peer, local).
pub(crate) fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr, SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                let local = stream.local_addr().unwrap();
                return (stream, peer, local);
            }
            Err(err)
                if err.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(err) => panic!("no client connected: {err}"),
        }
    }
}

pub(crate) fn resolver() -> IdentityResolver {
    IdentityResolver::new(IdentityConfig::default())
}

pub(crate) fn real_path(path: &str) -> String {
    std::fs::canonicalize(path)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn own_exe() -> String {
    std::env::current_exe()
        .unwrap()
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn own_real_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .unwrap();
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// True when the test may do root-only things; panics instead of skipping in privileged CI.
pub(crate) fn privileged(test: &str) -> bool {
    if own_real_uid() == 0 {
        return true;
    }
    assert!(
        std::env::var("SLUICE_REQUIRE_PRIVILEGED").as_deref() != Ok("1"),
        "{test} needs root and SLUICE_REQUIRE_PRIVILEGED=1 is set"
    );
    // Straight to fd 2: the test harness swallows `eprintln!` of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "!!! SKIPPED {test}: needs root (set SLUICE_REQUIRE_PRIVILEGED=1 to make this fatal)"
    );
    false
}

/// Connects to `sys.argv[1]` on `HOST`, says `ready <pid>`, waits for stdin to close.
pub(crate) fn connect_script(host: &str) -> String {
    format!(
        "import os, socket, sys\n\
         def say(*words): os.write(1, (' '.join(map(str, words)) + '\\n').encode())\n\
         c = socket.create_connection(('{host}', int(sys.argv[1])))\n\
         say('ready', os.getpid())\n\
         sys.stdin.read()\n"
    )
}

// === tests ===

/// Waits until `pid` has finished an `execve` of `exe` (as written or its real path). The
/// `exe` link switches before the new program's arguments are in place (the kernel maps the
/// new image, then writes argv), and meanwhile `cmdline` reads empty: a lookup in that window
/// sees the new program with no command line, so the wait is for both.
pub(crate) fn wait_for_exe(pid: u32, exe: &str) {
    let want = real_path(exe);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let switched = std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|path| path.to_string_lossy() == want);
        let argued =
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|argv| !argv.is_empty());
        if switched && argued {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("pid {pid} never became {exe}");
}
