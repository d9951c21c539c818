//! Fixtures for running the real shim around the probe, one process per assertion.
//!
//! Sandboxing is irreversible, so nothing here confines the test process itself: every
//! assertion spawns `sluice-shim ... -- sluice-shim-probe OP` and reads the probe's JSON line,
//! the shim's exit code and its `--status-fd` lines (spec §1.13).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const SHIM: &str = env!("CARGO_BIN_EXE_sluice-shim");
pub const PROBE: &str = env!("CARGO_BIN_EXE_sluice-shim-probe");
pub const NOBODY: u32 = 65534;

/// Landlock ABI strict mode (the default of every test) requires.
pub const STRICT_ABI: i64 = 6;

/// The running kernel's Landlock ABI (0 when unavailable).
#[allow(unsafe_code)]
pub fn kernel_abi() -> i64 {
    // SAFETY: the documented version query: NULL attribute, size 0, flag 1; no memory read.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    abi.max(0)
}

fn skip_or_fail(why: &str) -> bool {
    if std::env::var("SLUICE_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
        panic!("{why}, and SLUICE_REQUIRE_PRIVILEGED=1 forbids skipping this test");
    }
    loud(&format!(
        "SKIPPED: {why} (set SLUICE_REQUIRE_PRIVILEGED=1 to make this a failure)"
    ));
    false
}

/// Writes past libtest's output capture, so skips show even for passing tests.
pub fn loud(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// Confinement tests need root and a kernel with Landlock ABI >= 6 (strict mode). They fail
/// under `SLUICE_REQUIRE_PRIVILEGED=1` (CI), else skip loudly.
pub fn privileged() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    if !root {
        return skip_or_fail("this test needs root");
    }
    let abi = kernel_abi();
    if abi < STRICT_ABI {
        return skip_or_fail(&format!(
            "this kernel has Landlock ABI {abi}; strict mode needs ABI {STRICT_ABI} (Linux 6.12)"
        ));
    }
    true
}

/// Whether the host itself leaves a primitive open, so that a canary can show the shim's layer
/// is what closes it. `sysctl` is a path under /proc/sys; `blocking` lists values that close
/// the primitive host-wide.
pub fn host_allows(sysctl: &str, blocking: &[&str]) -> bool {
    match std::fs::read_to_string(Path::new("/proc/sys").join(sysctl)) {
        Ok(value) if blocking.contains(&value.trim()) => {
            loud(&format!(
                "canary skipped: {sysctl} = {} closes it host-wide",
                value.trim()
            ));
            false
        }
        _ => true,
    }
}

/// Skips (or fails, in CI) a test that needs root.
#[macro_export]
macro_rules! require_root {
    () => {
        if !$crate::harness::privileged() {
            return;
        }
    };
}

pub fn probe_dir() -> PathBuf {
    Path::new(PROBE)
        .parent()
        .expect("probe has a directory")
        .to_path_buf()
}

fn chown_nobody(path: &Path) {
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Temporary directories the probe works on.
///
/// * `rw`: granted read-write, owned by nobody;
/// * `ro`: granted read-only, holding `ro/file` (owned by nobody, so only Landlock stops writes);
/// * `outside`: granted nothing, owned by nobody, holding `outside/file` (world-readable).
pub struct Fixture {
    _root: tempfile::TempDir,
    pub rw: PathBuf,
    pub ro: PathBuf,
    pub outside: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        let root = tempfile::Builder::new()
            .prefix("sluice-shim-test")
            .tempdir()
            .unwrap();
        chmod(root.path(), 0o755);
        let make = |name: &str| {
            let dir = root.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            chmod(&dir, 0o755);
            chown_nobody(&dir);
            dir
        };
        let (rw, ro, outside) = (make("rw"), make("ro"), make("outside"));
        for dir in [&ro, &outside] {
            let file = dir.join("file");
            std::fs::write(&file, "fixture\n").unwrap();
            chmod(&file, 0o644);
            chown_nobody(&file);
        }
        Fixture {
            _root: root,
            rw,
            ro,
            outside,
        }
    }
}

/// A TCP listener on loopback that never accepts (the backlog completes handshakes).
pub fn listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// What one shim run produced.
#[derive(Debug)]
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The `--status-fd` lines.
    pub status: Vec<Value>,
}

impl Outcome {
    /// The probe's JSON line.
    pub fn json(&self) -> Value {
        let line = self.stdout.lines().next().unwrap_or_else(|| {
            panic!(
                "no probe output; shim exit {:?}, stderr: {}",
                self.code, self.stderr
            )
        });
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// The probe's errno (None on success).
    pub fn errno(&self) -> Option<String> {
        self.json()["errno"].as_str().map(str::to_owned)
    }

    #[track_caller]
    pub fn assert_errno(&self, expected: &str) -> &Self {
        assert_eq!(
            self.errno().as_deref(),
            Some(expected),
            "probe: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
        self
    }

    #[track_caller]
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(
            self.errno(),
            None,
            "probe: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
        assert_eq!(self.code, Some(0), "stderr: {}", self.stderr);
        self
    }

    /// Which layer refused the probe's operation: `seccomp` (`EPERM`) or `landlock`
    /// (`EACCES`). Fails the test when the operation succeeded or failed otherwise. Tests
    /// that need only the property (nothing left the sandbox) use this rather than assume
    /// which layer a given kernel puts first: a kernel whose Landlock learns to see an
    /// operation answers `EACCES` where an older one left it to seccomp's `EPERM`.
    #[track_caller]
    pub fn refused_by(&self) -> &'static str {
        match self.errno().as_deref() {
            Some("EPERM") => "seccomp",
            Some("EACCES") => "landlock",
            other => panic!(
                "expected a refusal (EPERM from seccomp or EACCES from Landlock), got {other:?}\nprobe: {}\nstderr: {}",
                self.stdout, self.stderr
            ),
        }
    }

    #[track_caller]
    pub fn assert_stage(&self, stage: &str) -> &Self {
        assert_eq!(self.json()["stage"], stage, "probe: {}", self.stdout);
        self
    }

    /// The `ready` status line.
    #[track_caller]
    pub fn ready(&self) -> &Value {
        self.status
            .iter()
            .find(|v| v["status"] == "ready")
            .unwrap_or_else(|| panic!("no ready line: {:?}\nstderr: {}", self.status, self.stderr))
    }
}

/// A shim invocation with the default test grants.
pub struct Shim {
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    wrapper: Vec<OsString>,
    extra_fd: Option<OwnedFd>,
}

impl Shim {
    /// `--proxy 127.0.0.1:PORT`, ro /usr /etc /proc, rw /dev/null and the fixture's rw dir,
    /// ro the fixture's ro dir, exec the probe's directory, host netns allowed.
    pub fn new(fx: &Fixture, proxy_port: u16) -> Self {
        let mut shim = Shim::bare(proxy_port);
        for ro in ["/usr", "/etc", "/proc"] {
            shim = shim.arg("--ro").arg(ro);
        }
        shim.arg("--ro")
            .arg(&fx.ro)
            .arg("--rw")
            .arg("/dev/null")
            .arg("--rw")
            .arg(&fx.rw)
            .arg("--exec")
            .arg(probe_dir())
            .arg("--allow-host-netns")
    }

    /// Only `--proxy`: the caller adds every grant.
    pub fn bare(proxy_port: u16) -> Self {
        Shim {
            args: vec!["--proxy".into(), format!("127.0.0.1:{proxy_port}").into()],
            envs: Vec::new(),
            wrapper: Vec::new(),
            extra_fd: None,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// `--test-disable-layer LAYER`.
    pub fn disable(self, layer: &str) -> Self {
        self.arg("--test-disable-layer").arg(layer)
    }

    /// An environment variable of the shim process itself.
    pub fn shim_env(mut self, key: &str, value: &str) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Runs the shim under another program (e.g. `unshare --net --`).
    pub fn wrapped_in(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(OsString::from).collect();
        self
    }

    /// Hands the shim one more inherited descriptor (as fd 7).
    pub fn leak_fd(mut self, fd: OwnedFd) -> Self {
        self.extra_fd = Some(fd);
        self
    }

    /// Runs the probe with one op.
    pub fn probe(self, op: &[&str]) -> Outcome {
        let mut cmd: Vec<OsString> = vec![PROBE.into()];
        cmd.extend(op.iter().map(OsString::from));
        self.run(&cmd)
    }

    /// Runs `sluice-shim ARGS --status-fd 3 -- CMD...`.
    pub fn run<S: AsRef<OsStr>>(self, command: &[S]) -> Outcome {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let status_fd: OwnedFd = writer.into();
        let (program, prefix) = match self.wrapper.split_first() {
            Some((first, rest)) => (first.clone(), {
                let mut p = rest.to_vec();
                p.push(SHIM.into());
                p
            }),
            None => (SHIM.into(), Vec::new()),
        };
        let mut cmd = Command::new(program);
        cmd.args(prefix)
            .args(&self.args)
            .arg("--status-fd")
            .arg("3")
            .arg("--")
            .args(command)
            .envs(self.envs)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let raw_status = status_fd.as_raw_fd();
        let raw_extra = self.extra_fd.as_ref().map(AsRawFd::as_raw_fd);
        // SAFETY: the closure only calls async-signal-safe dup2/fcntl on descriptors that stay
        // open in the parent until spawn returns.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || {
                place_fd(raw_status, 3)?;
                if let Some(extra) = raw_extra {
                    place_fd(extra, 7)?;
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        drop(status_fd);
        drop(self.extra_fd);
        let output = child.wait_with_output().unwrap();
        let mut status_text = String::new();
        reader.read_to_string(&mut status_text).unwrap();
        Outcome {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            status: status_text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect(),
        }
    }
}

/// dup2 `from` onto `to` without close-on-exec (in the forked child).
#[allow(unsafe_code)]
fn place_fd(from: RawFd, to: RawFd) -> std::io::Result<()> {
    // SAFETY: plain descriptor calls with integer arguments.
    let ret = unsafe {
        if from == to {
            libc::fcntl(to, libc::F_SETFD, 0)
        } else {
            libc::dup2(from, to)
        }
    };
    if ret < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A process outside the sandbox with the sandbox's uid, for signal and ptrace-rule checks.
pub struct Victim {
    child: Child,
}

pub const VICTIM_SECRET: &str = "VICTIM_SECRET=hunter2";

impl Victim {
    pub fn start() -> Self {
        let child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(PROBE)
            .args(["sleep", "30"])
            .env("VICTIM_SECRET", "hunter2")
            .stdout(Stdio::null())
            .spawn()
            .expect("setpriv (util-linux) is installed");
        let victim = Victim { child };
        // Wait until setpriv has dropped to nobody and exec'd the probe.
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = format!("/proc/{}/status", victim.pid());
        loop {
            let text = std::fs::read_to_string(&status).unwrap_or_default();
            if text.contains("Name:\tsluice-shim-pro") && text.contains("Uid:\t65534\t65534") {
                break;
            }
            assert!(Instant::now() < deadline, "victim did not start: {text}");
            std::thread::sleep(Duration::from_millis(5));
        }
        victim
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A unique abstract UNIX socket name for this test run.
pub fn abstract_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "sluice-shim-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
