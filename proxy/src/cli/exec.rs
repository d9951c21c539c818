//! `sluice exec [run flags] [--rw PATH]... [--ro PATH]... [--netns] -- CMD ARGS...`: the
//! proxy and a confined command together, in one process tree.
//!
//! Owns the translation of the policy's static sections (`filesystem_policy`, `landlock`,
//! `process`) and the exec flags into `sluice-shim` flags (`shim_args`, pure), the child's
//! network (the host's, or with `--netns` a fresh namespace whose only reachable address is
//! sluice's listener inside it), starting the proxy in-process, forwarding signals to the
//! child, and exiting with the child's status. Audit goes to `./sluice-audit.jsonl` by
//! default; denials are also printed on stderr.

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::SystemTime;

use clap::Args;

use super::run::{Prepared, RunArgs, announce, prepare};
use crate::audit;
use crate::listen;
use crate::policy::model::{LandlockCompat, RunAs, Sandbox};

#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Grant the command read-write access to PATH (repeat).
    #[arg(long = "rw", value_name = "PATH")]
    pub rw: Vec<PathBuf>,
    /// Grant the command read-only access to PATH (repeat).
    #[arg(long = "ro", value_name = "PATH")]
    pub ro: Vec<PathBuf>,
    /// Run the command in a fresh network namespace whose only reachable address is sluice.
    #[arg(long)]
    pub netns: bool,
    /// The sluice-shim binary (default: next to sluice, else on PATH).
    #[arg(long, value_name = "PATH")]
    pub shim: Option<PathBuf>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Directories whose programs the command may execute, when they exist.
const EXEC_DIRS: &[&str] = &[
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/lib/git-core",
    "/usr/local/libexec/git-core",
    "/usr/lib/node_modules",
    "/usr/libexec",
];

/// Read-only paths every command needs (runtimes read /proc, /sys, CA and resolver files).
const BASE_RO: &[&str] = &[
    "/usr",
    "/etc",
    "/proc",
    "/sys",
    "/dev/urandom",
    "/dev/random",
    "/lib",
    "/lib64",
    "/opt",
];

/// Read-write paths every command needs.
const BASE_RW: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/tmp"];

/// What the shim needs to know from sluice.
#[derive(Debug)]
pub struct ShimInputs<'a> {
    pub proxy: SocketAddr,
    pub ca_bundle: &'a Path,
    pub ca_cert: &'a Path,
    pub sandbox: &'a Sandbox,
    pub workdir: &'a Path,
    pub extra_rw: &'a [PathBuf],
    pub extra_ro: &'a [PathBuf],
    pub netns_path: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub command: &'a [String],
}

fn exists(p: &str) -> bool {
    Path::new(p).exists()
}

/// The shim's command line (pure, so it can be tested without running anything).
pub fn shim_args(i: &ShimInputs<'_>) -> Vec<String> {
    let mut a = vec!["--proxy".to_string(), i.proxy.to_string()];
    a.extend(["--ca-bundle".to_string(), i.ca_bundle.display().to_string()]);
    a.extend(["--ca-cert".to_string(), i.ca_cert.display().to_string()]);
    let mut ro: Vec<String> = BASE_RO
        .iter()
        .filter(|p| exists(p))
        .map(ToString::to_string)
        .collect();
    ro.extend(i.sandbox.read_only.iter().filter(|p| exists(p)).cloned());
    ro.extend(i.extra_ro.iter().map(|p| p.display().to_string()));
    let mut rw: Vec<String> = BASE_RW
        .iter()
        .filter(|p| exists(p))
        .map(ToString::to_string)
        .collect();
    rw.extend(i.sandbox.read_write.iter().filter(|p| exists(p)).cloned());
    if i.sandbox.include_workdir.unwrap_or(true) {
        rw.push(i.workdir.display().to_string());
    }
    rw.extend(i.extra_rw.iter().map(|p| p.display().to_string()));
    ro.sort();
    ro.dedup();
    rw.sort();
    rw.dedup();
    // A path both read-only and read-write is read-write.
    ro.retain(|p| !rw.contains(p));
    for p in &ro {
        a.extend(["--ro".to_string(), p.clone()]);
    }
    for p in &rw {
        a.extend(["--rw".to_string(), p.clone()]);
    }
    let mut exec: Vec<String> = EXEC_DIRS
        .iter()
        .filter(|p| exists(p))
        .map(ToString::to_string)
        .collect();
    // The command's own directory (and that of its real path) may hold its helpers.
    if let Some(resolved) = i.command.first().and_then(|c| resolve_command(c)) {
        let real = std::fs::canonicalize(&resolved).unwrap_or_else(|_| resolved.clone());
        for p in [resolved, real] {
            if let Some(dir) = p.parent() {
                exec.push(dir.display().to_string());
            }
        }
    }
    exec.sort();
    exec.dedup();
    for p in &exec {
        a.extend(["--exec".to_string(), p.clone()]);
    }
    let id = |r: Option<RunAs>| match r {
        Some(RunAs::Id(n)) => n,
        Some(RunAs::Sandbox) | None => 65534,
    };
    a.extend(["--uid".to_string(), id(i.sandbox.run_as_user).to_string()]);
    a.extend(["--gid".to_string(), id(i.sandbox.run_as_group).to_string()]);
    let compat = match i.sandbox.landlock {
        Some(LandlockCompat::BestEffort) => "best-effort",
        Some(LandlockCompat::HardRequirement) | None => "strict",
    };
    a.extend(["--compat".to_string(), compat.to_string()]);
    a.extend(["--workdir".to_string(), i.workdir.display().to_string()]);
    match &i.netns_path {
        Some(p) => a.extend(["--netns-path".to_string(), p.display().to_string()]),
        None => a.push("--allow-host-netns".to_string()),
    }
    for (k, v) in &i.env {
        a.extend(["--env".to_string(), format!("{k}={v}")]);
    }
    a.push("--".to_string());
    a.extend(i.command.iter().cloned());
    a
}

/// npm reads its own settings: without these it ignores the proxy variables and
/// NODE_EXTRA_CA_CERTS (measured with npm 11).
pub fn npm_env(proxy_url: &str, bundle: &Path) -> Vec<(String, String)> {
    vec![
        ("npm_config_proxy".to_string(), proxy_url.to_string()),
        ("npm_config_https_proxy".to_string(), proxy_url.to_string()),
        (
            "npm_config_cafile".to_string(),
            bundle.display().to_string(),
        ),
    ]
}

/// `cmd` as an absolute path: itself if it has a `/`, else the first match on PATH.
fn resolve_command(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        return Some(PathBuf::from(cmd));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(cmd))
            .find(|p| p.is_file())
    })
}

fn shim_binary(explicit: Option<&PathBuf>) -> PathBuf {
    if let Some(p) = explicit {
        return p.clone();
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("sluice-shim")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("sluice-shim"))
}

/// A network namespace held open by a placeholder process, with sluice's listener inside it.
struct Netns {
    holder: Child,
    path: PathBuf,
}

/// Makes a fresh network namespace (loopback up, nothing else), and binds `port` on its
/// 127.0.0.1 from a thread that entered it: the listener lives in the namespace, sluice's
/// upstream connections stay in the host's.
fn netns_listener() -> Result<(Netns, std::net::TcpListener), String> {
    let holder = Command::new("unshare")
        .args(["--net", "sleep", "infinity"])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot create a network namespace (unshare --net): {e}"))?;
    let path = PathBuf::from(format!("/proc/{}/ns/net", holder.id()));
    let mut holder = holder;
    let own = std::fs::metadata("/proc/self/ns/net").ok();
    // Wait until the holder is in its own namespace.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let theirs = std::fs::metadata(&path).ok();
        use std::os::unix::fs::MetadataExt;
        match (&own, &theirs) {
            (Some(o), Some(t)) if o.ino() != t.ino() => break,
            _ if std::time::Instant::now() > deadline => {
                let _ = holder.kill();
                return Err("the network namespace did not appear".to_string());
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(5)),
        }
    }
    let ns_path = path.clone();
    let bound = std::thread::spawn(move || -> Result<std::net::TcpListener, String> {
        let ns = File::open(&ns_path).map_err(|e| format!("open {}: {e}", ns_path.display()))?;
        rustix::thread::move_into_link_name_space(
            ns.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| format!("enter the network namespace: {e}"))?;
        // Children of this thread start in the namespace: bring its loopback up.
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status();
        if !up.is_ok_and(|s| s.success()) {
            return Err(
                "cannot bring up loopback in the namespace (ip link set lo up)".to_string(),
            );
        }
        std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("listen in the namespace: {e}"))
    })
    .join()
    .map_err(|_| "the namespace thread panicked".to_string())?;
    match bound {
        Ok(l) => Ok((Netns { holder, path }, l)),
        Err(e) => {
            let _ = holder.kill();
            let _ = holder.wait();
            Err(e)
        }
    }
}

pub fn exec(args: ExecArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(exec_async(args))
}

async fn exec_async(mut args: ExecArgs) -> ExitCode {
    if args.run.audit_log.is_none() {
        args.run.audit_log = Some("./sluice-audit.jsonl".to_string());
    }
    // The child needs the CA files: a directory of certificates only (never the key).
    let ca_dir = args.run.ca_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("sluice-exec-{}", std::process::id()))
    });
    let owned_ca_dir = args.run.ca_dir.is_none();
    args.run.ca_dir = Some(ca_dir.clone());
    let Prepared {
        shared,
        audit: sink,
        ca_files,
    } = match prepare(&args.run).await {
        Ok(p) => p,
        Err(code) => return code,
    };
    let Some((ca_cert, ca_bundle)) = ca_files else {
        eprintln!(
            "sluice: TLS is unavailable, so the command could not trust sluice; refusing to run it"
        );
        return ExitCode::from(1);
    };
    // The confined command (another uid) must read the CA files.
    for p in [&ca_dir, &ca_cert, &ca_bundle] {
        use std::os::unix::fs::PermissionsExt;
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    }

    let (netns, std_listener) = if args.netns {
        match netns_listener() {
            Ok((n, l)) => (Some(n), l),
            Err(e) => {
                eprintln!("sluice: --netns: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        let addr = args
            .run
            .listen
            .first()
            .copied()
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        match listen::bind(addr).and_then(|l| l.into_std()) {
            Ok(l) => (None, l),
            Err(e) => {
                eprintln!("sluice: cannot listen on {addr}: {e}");
                return ExitCode::from(1);
            }
        }
    };
    let listener = match std_listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpListener::from_std(std_listener))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("sluice: listener: {e}");
            return ExitCode::from(1);
        }
    };
    announce(
        &listener,
        if args.netns {
            "inside the command's network namespace"
        } else {
            "for the command"
        },
    );
    let Ok(proxy_addr) = listener.local_addr() else {
        return ExitCode::from(1);
    };
    if let Some(n) = &netns {
        shared.identity.add_namespace_pid(n.holder.id());
    }
    tokio::spawn(listen::accept_loop(listener, Arc::clone(&shared)));
    sink.emit(&audit::Event::Lifecycle(audit::Lifecycle {
        time: SystemTime::now(),
        started: true,
        version: env!("CARGO_PKG_VERSION"),
        message: format!(
            "sluice exec started: proxy on {proxy_addr} for `{}`",
            args.command.join(" ")
        ),
    }));

    let workdir = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let policy = shared.policy.load_full();
    let inputs = ShimInputs {
        proxy: proxy_addr,
        ca_bundle: &ca_bundle,
        ca_cert: &ca_cert,
        sandbox: policy.sandbox(),
        workdir: &workdir,
        extra_rw: &args.rw,
        extra_ro: &args.ro,
        netns_path: netns.as_ref().map(|n| n.path.clone()),
        // Each provider credential's variable holds its placeholder, never the value.
        env: {
            let mut env = shared.credentials.child_env();
            env.extend(npm_env(&format!("http://{proxy_addr}"), &ca_bundle));
            env
        },
        command: &args.command,
    };
    let shim = shim_binary(args.shim.as_ref());
    let child = match Command::new(&shim).args(shim_args(&inputs)).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: cannot start {}: {e}", shim.display());
            return ExitCode::from(125);
        }
    };
    let status = wait_forwarding_signals(child).await;
    if let Some(mut n) = netns {
        let _ = n.holder.kill();
        let _ = n.holder.wait();
    }
    if owned_ca_dir {
        let _ = std::fs::remove_dir_all(&ca_dir);
    }
    let code = status.unwrap_or(1);
    sink.emit(&audit::Event::Lifecycle(audit::Lifecycle {
        time: SystemTime::now(),
        started: false,
        version: env!("CARGO_PKG_VERSION"),
        message: format!("sluice exec stopped: the command exited with {code}"),
    }));
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Waits for the child, passing SIGINT, SIGTERM and SIGHUP on to it. Returns its exit code
/// (128 + signal when a signal ended it).
async fn wait_forwarding_signals(mut child: Child) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    use tokio::signal::unix::{SignalKind, signal};
    let (mut int, mut term, mut hup) = (
        signal(SignalKind::interrupt()).ok()?,
        signal(SignalKind::terminate()).ok()?,
        signal(SignalKind::hangup()).ok()?,
    );
    let target = rustix::process::Pid::from_raw(i32::try_from(child.id()).ok()?)?;
    let mut waiter = tokio::task::spawn_blocking(move || child.wait());
    loop {
        let sig = tokio::select! {
            done = &mut waiter => {
                return match done {
                    Ok(Ok(status)) => Some(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(1))),
                    _ => None,
                };
            }
            _ = int.recv() => rustix::process::Signal::INT,
            _ = term.recv() => rustix::process::Signal::TERM,
            _ = hup.recv() => rustix::process::Signal::HUP,
        };
        let _ = rustix::process::kill_process(target, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_args_translate_the_policy() {
        let sandbox = Sandbox {
            include_workdir: Some(true),
            read_only: vec!["/usr".into(), "/does/not/exist".into()],
            read_write: vec!["/tmp".into()],
            landlock: Some(LandlockCompat::HardRequirement),
            run_as_user: Some(RunAs::Id(1234)),
            run_as_group: Some(RunAs::Sandbox),
        };
        let cmd = vec!["curl".to_string(), "https://example.com".to_string()];
        let i = ShimInputs {
            proxy: "127.0.0.1:4567".parse().unwrap(),
            ca_bundle: Path::new("/run/ca-bundle.pem"),
            ca_cert: Path::new("/run/ca.pem"),
            sandbox: &sandbox,
            workdir: Path::new("/work"),
            extra_rw: &[PathBuf::from("/data")],
            extra_ro: &[],
            netns_path: None,
            env: vec![("TOKEN".into(), "openshell:resolve:env:TOKEN".into())],
            command: &cmd,
        };
        let a = shim_args(&i);
        let joined = a.join(" ");
        assert!(
            joined.starts_with(
                "--proxy 127.0.0.1:4567 --ca-bundle /run/ca-bundle.pem --ca-cert /run/ca.pem"
            ),
            "{joined}"
        );
        assert!(
            joined.contains("--rw /work")
                && joined.contains("--rw /data")
                && joined.contains("--rw /tmp"),
            "{joined}"
        );
        assert!(
            joined.contains("--ro /usr") && !joined.contains("/does/not/exist"),
            "{joined}"
        );
        assert!(
            joined.contains("--uid 1234 --gid 65534 --compat strict"),
            "{joined}"
        );
        assert!(joined.contains("--allow-host-netns"), "{joined}");
        assert!(
            joined.contains("--env TOKEN=openshell:resolve:env:TOKEN"),
            "{joined}"
        );
        assert!(joined.ends_with("-- curl https://example.com"), "{joined}");
        assert!(joined.contains("--exec /usr/bin"), "{joined}");
    }
}
