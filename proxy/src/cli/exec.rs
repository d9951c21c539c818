//! `sluice exec [run flags] [--rw PATH]... [--ro PATH]... [--netns|--no-netns] [--allow-udp]
//! -- CMD ARGS...`: the proxy and a confined command together, in one process tree.
//!
//! Owns the order of the steps and the translation of the policy's static sections
//! (`filesystem_policy`, `landlock`, `process`) and the exec flags into shim flags
//! (`shim_args`, pure): a private directory for the CA files and the command's `TMPDIR`
//! (`sandbox_dir`), the proxy started in-process, who the command runs as (`invoker`), its
//! `HOME` and the start-up lines saying so (`home`), what it may touch (`grants`,
//! `toolchain`) and the refusal when that covers the secrets file or
//! the audit log (`reach`), its network (`fence`), the shim (this binary, re-executed with a
//! hidden first argument, unless `--shim` names another), the working directory pinned from
//! start to the shim's `chdir` (`workdir`), forwarding signals to the child,
//! and exiting with its status. Audit goes to sluice's state directory by default, never to
//! the working directory the command may write.

mod fence;
mod grants;
mod home;
mod invoker;
mod reach;
mod sandbox_dir;
mod toolchain;
mod workdir;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::sync::Arc;
use std::time::SystemTime;

use clap::Args;

use super::run::{Prepared, RunArgs, announce, prepare};
use crate::audit;
use crate::listen;
use crate::policy::model::{LandlockCompat, Sandbox};
use grants::{Grant, GrantInputs};
use sandbox_dir::SandboxDir;

/// sluice exec's exit status when it refuses to start the command.
pub const EXIT_REFUSED: u8 = 125;

#[derive(Debug, Args)]
pub(super) struct ExecArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Grant the command read-write access to PATH (repeat).
    #[arg(long = "rw", value_name = "PATH")]
    pub rw: Vec<PathBuf>,
    /// Grant the command read-only access to PATH (repeat).
    #[arg(long = "ro", value_name = "PATH")]
    pub ro: Vec<PathBuf>,
    /// Require the network fence: a fresh network namespace whose only reachable address is
    /// sluice (the default whenever sluice runs as root; this makes failing to build it fatal).
    #[arg(long, conflicts_with = "no_netns")]
    pub netns: bool,
    /// Run the command in the host's network namespace (UDP is still refused by the shim).
    #[arg(long)]
    pub no_netns: bool,
    /// Let the command use UDP even without the network fence, where it reaches any address.
    #[arg(long)]
    pub allow_udp: bool,
    /// Run the command as USER (a name or a uid; never root). Default: the policy's
    /// `process.run_as_user`; else sluice's own user, or `sudo`'s caller; as plain root, the
    /// owner of the working directory.
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Another confinement launcher (default: this binary, which contains sluice-shim).
    #[arg(long, value_name = "PATH")]
    pub shim: Option<PathBuf>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// What the shim needs to know from sluice.
#[derive(Debug)]
pub struct ShimInputs<'a> {
    pub proxy: SocketAddr,
    pub ca_bundle: &'a Path,
    pub ca_cert: &'a Path,
    pub sandbox: &'a Sandbox,
    pub grants: &'a [Grant],
    pub uid: u32,
    pub gid: u32,
    pub workdir: &'a Path,
    pub netns_path: Option<PathBuf>,
    pub allow_udp: bool,
    /// Behind the fence: the ports the command may dial directly (the fence redirects them
    /// to sluice), besides the proxy's.
    pub transparent_ports: Vec<u16>,
    pub env: Vec<(String, String)>,
    pub command: &'a [String],
}

/// The shim's command line (pure, so it can be tested without running anything).
pub fn shim_args(i: &ShimInputs<'_>) -> Vec<String> {
    let mut a = vec!["--proxy".to_string(), i.proxy.to_string()];
    a.extend(["--ca-bundle".to_string(), i.ca_bundle.display().to_string()]);
    a.extend(["--ca-cert".to_string(), i.ca_cert.display().to_string()]);
    a.extend(grants::shim_flags(i.grants));
    a.extend(["--uid".to_string(), i.uid.to_string()]);
    a.extend(["--gid".to_string(), i.gid.to_string()]);
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
    if i.allow_udp {
        a.push("--allow-udp".to_string());
    }
    for port in &i.transparent_ports {
        a.extend(["--transparent-port".to_string(), port.to_string()]);
    }
    for (k, v) in &i.env {
        a.extend(["--env".to_string(), format!("{k}={v}")]);
    }
    a.push("--".to_string());
    a.extend(i.command.iter().cloned());
    a
}

/// Serves the fence's listeners in the command's namespace: the transparent listener (one
/// more entry into the same pipeline) and the policy DNS.
fn serve_fenced(
    fenced: fence::Fenced,
    proxy_addr: SocketAddr,
    dns_rate: u32,
    shared: &Arc<crate::pipeline::Shared>,
    sink: &Arc<audit::AuditSink>,
) -> Result<(), String> {
    let fence::Fenced {
        transparent,
        dns: (udp, tcp),
    } = fenced;
    let tokio_listener = |l: std::net::TcpListener| {
        l.set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(l))
    };
    let transparent = tokio_listener(transparent).map_err(|e| format!("listener: {e}"))?;
    let tcp = tokio_listener(tcp).map_err(|e| format!("policy DNS: {e}"))?;
    let udp = udp
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UdpSocket::from_std(udp))
        .map_err(|e| format!("policy DNS: {e}"))?;
    let mut own_listeners = vec![proxy_addr];
    own_listeners.extend(transparent.local_addr().ok());
    own_listeners.extend(udp.local_addr().ok());
    announce(
        &transparent,
        "transparent, behind the command's network fence",
    );
    let table = super::run::serve_policy_dns(vec![(udp, tcp)], dns_rate, shared, sink);
    let context = Arc::new(crate::transparent::listener::Context {
        dns_table: Some(table),
        own_listeners,
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(shared.limits.max_connections));
    tokio::spawn(listen::accept_entry(
        transparent,
        Arc::clone(shared),
        slots,
        listen::Overload::Close,
        move |shared, stream, peer, local| {
            crate::transparent::listener::serve(shared, Arc::clone(&context), stream, peer, local)
        },
    ));
    Ok(())
}

/// Every port a policy endpoint names: what a command behind the fence may dial directly.
fn policy_ports(policy: &crate::policy::Policy) -> Vec<u16> {
    let mut ports: Vec<u16> = policy
        .entries()
        .iter()
        .flat_map(|e| e.endpoints.iter())
        .flat_map(|ep| ep.ports.iter().copied())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
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

/// The launcher: `--shim PATH` as given, else this very binary in its shim role.
fn shim_command(explicit: Option<&PathBuf>) -> (Command, String) {
    match explicit {
        Some(p) => (Command::new(p), p.display().to_string()),
        None => {
            // /proc/self/exe is the running binary even if its file was replaced since.
            let mut c = Command::new("/proc/self/exe");
            c.arg(super::SHIM_SUBCOMMAND);
            (c, "sluice's built-in sluice-shim".to_string())
        }
    }
}

/// `$XDG_STATE_HOME/sluice/exec-audit.jsonl` (or under `~/.local/state`), created if needed:
/// never the working directory, which the command may usually write.
fn default_audit_log() -> String {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
        .join("sluice");
    let _ = std::fs::create_dir_all(&state);
    state.join("exec-audit.jsonl").display().to_string()
}

pub fn exec(args: ExecArgs) -> ExitCode {
    if args.run.tenants.is_some() {
        eprintln!(
            "sluice: --tenants is for `sluice run` (a shared gateway); `sluice exec` serves the one command it runs: give it --policy"
        );
        return ExitCode::from(2);
    }
    if !args.run.tls_listen.is_empty() {
        eprintln!(
            "sluice: --tls-listen is for `sluice run` (a proxy other hosts reach); `sluice exec` serves the one command it runs on loopback"
        );
        return ExitCode::from(2);
    }
    let runtime = match super::run::runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    runtime.block_on(exec_async(args))
}

/// The command's user (`invoker`), from the policy, `--user`, sluice's own ids and the
/// working directory's owner.
fn choose_user(
    args: &ExecArgs,
    sandbox: &Sandbox,
    workdir: &workdir::Pinned,
    accounts: &[invoker::Account],
) -> Result<invoker::Chosen, String> {
    let login_defs = std::fs::read_to_string("/etc/login.defs").unwrap_or_default();
    invoker::choose(&invoker::Inputs {
        sandbox,
        invocation: &invoker::Invocation::current(),
        flag: args.user.as_deref(),
        workdir: &workdir.path,
        workdir_owner: workdir.uid,
        uid_min: invoker::uid_min(&login_defs),
        accounts,
    })
    .map_err(|e| e.to_string())
}

/// Where the command's grants come from besides the exec flags.
struct GrantSources<'a> {
    sandbox: &'a Sandbox,
    workdir: &'a Path,
    ca_dir: &'a Path,
    tmp: &'a Path,
    /// The command's PATH.
    path: Option<&'a std::ffi::OsStr>,
}

/// The grants, given the policy's sandbox section and the private directory.
fn all_grants(args: &ExecArgs, s: &GrantSources<'_>) -> Vec<Grant> {
    let toolchain = args
        .command
        .first()
        .map(|c| toolchain::grants(c, s.path, s.workdir))
        .unwrap_or_default();
    let (sandbox, workdir, ca_dir, tmp) = (s.sandbox, s.workdir, s.ca_dir, Some(s.tmp));
    grants::collect(&GrantInputs {
        sandbox,
        workdir,
        extra_ro: &args.ro,
        extra_rw: &args.rw,
        ca_dir,
        tmp,
        toolchain: &toolchain,
    })
}

async fn exec_async(mut args: ExecArgs) -> ExitCode {
    // Before anything else: the directory itself, not its path (see `workdir`).
    let pinned = match workdir::Pinned::current() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let workdir = pinned.path.clone();
    if !args.run.dns_listen.is_empty() {
        eprintln!(
            "sluice: --dns-listen is for `sluice run` (a sidecar or a pod); exec does not serve DNS"
        );
        return ExitCode::from(EXIT_REFUSED);
    }
    // The CA files and the command's TMPDIR live in a private directory of unpredictable name.
    let mut private = match SandboxDir::create(&std::env::temp_dir()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("sluice: cannot create the command's private directory: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let ca_dir = args
        .run
        .ca_dir
        .clone()
        .unwrap_or_else(|| private.ca_dir().to_path_buf());
    args.run.ca_dir = Some(ca_dir.clone());
    if args.run.audit_log.is_none() {
        let log = default_audit_log();
        eprintln!("sluice: audit log: {log}");
        args.run.audit_log = Some(log);
    }
    let Prepared {
        shared,
        audit: sink,
        ca_files,
        sources,
        redactor,
        first: _,
    } = match prepare(&args.run).await {
        Ok(p) => p,
        // Whatever stopped the proxy from starting (its own message is out), the command was
        // not started.
        Err(_) => return ExitCode::from(EXIT_REFUSED),
    };
    // Refreshed credentials stay fresh for as long as the command runs.
    let refresher = sources.refresh.clone();
    let reloader = Arc::new(super::reload::Reloader::new(
        Arc::clone(&shared),
        Arc::clone(&sink),
        sources,
        redactor,
    ));
    super::run::keep_refreshed(&reloader, refresher.as_deref(), None);
    let Some((ca_cert, ca_bundle)) = ca_files else {
        eprintln!(
            "sluice: TLS is unavailable, so the command could not trust sluice; refusing to run it"
        );
        return ExitCode::from(EXIT_REFUSED);
    };
    let policy = shared.policy.load_full();
    let accounts = invoker::accounts(&std::fs::read_to_string("/etc/passwd").unwrap_or_default());
    let chosen = match choose_user(&args, policy.sandbox(), &pinned, &accounts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let (uid, gid) = (chosen.uid, chosen.gid);
    let tmp = match private.hand_over(uid, gid) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sluice: cannot prepare the command's private directory: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let path = toolchain::command_path(std::env::var_os("PATH").as_deref(), uid, gid);
    let mut grants = all_grants(
        &args,
        &GrantSources {
            sandbox: policy.sandbox(),
            workdir: &workdir,
            ca_dir: &ca_dir,
            tmp: &tmp,
            path: path.as_deref(),
        },
    );
    let account_home = accounts
        .iter()
        .find(|a| a.uid == uid)
        .map(|a| PathBuf::from(&a.home));
    let home = match home::choose(account_home.as_deref(), &workdir, &grants, (uid, gid)) {
        Some(h) => h,
        None => match private.make_home(uid, gid) {
            Ok(path) => {
                grants.push(Grant {
                    path: path.clone(),
                    access: grants::Access::ReadWrite,
                    why: "the command's private HOME".to_string(),
                });
                home::Home {
                    path,
                    why: "private, removed at exit: neither the user's home nor the working directory is one it may write",
                }
            }
            Err(e) => {
                eprintln!("sluice: cannot prepare the command's private HOME: {e}");
                return ExitCode::from(EXIT_REFUSED);
            }
        },
    };
    let audit_path = args
        .run
        .audit_log
        .as_deref()
        .filter(|l| *l != "-")
        .map(PathBuf::from);
    if let Err(e) = reach::check(
        [
            args.run.secrets_file.as_deref(),
            args.run.secrets_dir.as_deref(),
        ],
        audit_path.as_deref(),
        &grants,
    ) {
        eprintln!("sluice: {e}");
        return ExitCode::from(EXIT_REFUSED);
    }

    let choice = match (args.netns, args.no_netns) {
        (true, _) => fence::Choice::Required,
        (false, true) => fence::Choice::Declined,
        (false, false) => fence::Choice::Auto,
    };
    let host_listen = args
        .run
        .listen
        .first()
        .copied()
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let network = match fence::build(choice, host_listen) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("sluice: --netns: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    if args.allow_udp && network.netns.is_none() {
        eprintln!(
            "sluice: WARNING: --allow-udp: the command may send UDP to any address, around sluice"
        );
    }
    let std_listener = network.listener;
    let listener = match std_listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpListener::from_std(std_listener))
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("sluice: listener: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let netns = network.netns;
    announce(
        &listener,
        if netns.is_some() {
            "inside the command's network namespace"
        } else {
            "for the command"
        },
    );
    let Ok(proxy_addr) = listener.local_addr() else {
        return ExitCode::from(EXIT_REFUSED);
    };
    if let Some(n) = &netns {
        shared.identity.add_namespace_pid(n.pid());
    }
    let fenced = match network.fenced.map(|f| {
        let rate = args.run.max_dns_queries_per_client_per_sec;
        serve_fenced(f, proxy_addr, rate, &shared, &sink)
    }) {
        Some(Ok(ports)) => Some(ports),
        Some(Err(e)) => {
            eprintln!("sluice: --netns: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
        None => None,
    };
    tokio::spawn(listen::accept_loop(listener, Arc::clone(&shared)));
    crate::metrics::set_ready(true);
    sink.emit(&audit::Event::Lifecycle(audit::Lifecycle {
        time: SystemTime::now(),
        started: true,
        version: env!("CARGO_PKG_VERSION"),
        message: format!(
            "sluice exec started: proxy on {proxy_addr} for `{}`",
            args.command.join(" ")
        ),
    }));

    home::announce(
        &invoker::describe(uid, gid, &accounts),
        chosen.source.as_str(),
        &home,
        &grants,
        (uid, gid),
    );
    let mut env = shared.credentials.load().child_env();
    env.push(("HOME".to_string(), home.path.display().to_string()));
    env.push((
        "XDG_CACHE_HOME".to_string(),
        home.path.join(".cache").display().to_string(),
    ));
    env.extend(npm_env(&format!("http://{proxy_addr}"), &ca_bundle));
    env.push(("TMPDIR".to_string(), tmp.display().to_string()));
    // The user's PATH, whose directories the grants let the command execute from.
    if let Some(path) = path.and_then(|p| p.into_string().ok()) {
        env.push(("PATH".to_string(), path));
    }
    let inputs = ShimInputs {
        proxy: proxy_addr,
        ca_bundle: &ca_bundle,
        ca_cert: &ca_cert,
        sandbox: policy.sandbox(),
        grants: &grants,
        uid,
        gid,
        workdir: &workdir,
        netns_path: netns.as_ref().map(|n| n.path.clone()),
        allow_udp: args.allow_udp,
        transparent_ports: fenced.map(|()| policy_ports(&policy)).unwrap_or_default(),
        env,
        command: &args.command,
    };
    let (mut shim, shim_name) = shim_command(args.shim.as_ref());
    // The path the shim enters is still the directory the user was chosen from.
    if let Err(e) = pinned.check() {
        eprintln!("sluice: {e}");
        return ExitCode::from(EXIT_REFUSED);
    }
    let child = match shim
        .env(workdir::SHIM_ENV, pinned.shim_env())
        .args(shim_args(&inputs).into_iter().map(OsString::from))
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: cannot start {shim_name}: {e}");
            return ExitCode::from(EXIT_REFUSED);
        }
    };
    let status = wait_forwarding_signals(child).await;
    drop(netns);
    drop(private);
    let code = status.unwrap_or(1);
    sink.emit(&audit::Event::Lifecycle(audit::Lifecycle {
        time: SystemTime::now(),
        started: false,
        version: env!("CARGO_PKG_VERSION"),
        message: format!("sluice exec stopped: the command exited with {code}"),
    }));
    crate::otlp::flush(std::time::Duration::from_secs(5));
    // Everything audited is on disk before the process exits (or, when the audit log cannot
    // take it in time, on stderr, counted as lost).
    sink.close(audit::sink::CLOSE_WAIT);
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
    use grants::Access;

    #[test]
    fn shim_args_translate_the_policy() {
        let sandbox = Sandbox {
            landlock: Some(LandlockCompat::HardRequirement),
            ..Sandbox::default()
        };
        let grants = [Grant {
            path: PathBuf::from("/work"),
            access: Access::ReadWrite,
            why: "the working directory".into(),
        }];
        let cmd = vec!["curl".to_string(), "https://example.com".to_string()];
        let i = ShimInputs {
            proxy: "127.0.0.1:4567".parse().unwrap(),
            ca_bundle: Path::new("/run/ca-bundle.pem"),
            ca_cert: Path::new("/run/ca.pem"),
            sandbox: &sandbox,
            grants: &grants,
            uid: 1234,
            gid: 65534,
            workdir: Path::new("/work"),
            netns_path: None,
            allow_udp: false,
            transparent_ports: Vec::new(),
            env: vec![("TOKEN".into(), "openshell:resolve:env:TOKEN".into())],
            command: &cmd,
        };
        let joined = shim_args(&i).join(" ");
        assert!(
            joined.starts_with(
                "--proxy 127.0.0.1:4567 --ca-bundle /run/ca-bundle.pem --ca-cert /run/ca.pem --rw /work"
            ),
            "{joined}"
        );
        assert!(
            joined.contains("--uid 1234 --gid 65534 --compat strict"),
            "{joined}"
        );
        assert!(joined.contains("--allow-host-netns"), "{joined}");
        assert!(!joined.contains("--allow-udp"), "{joined}");
        assert!(
            joined.contains("--env TOKEN=openshell:resolve:env:TOKEN"),
            "{joined}"
        );
        assert!(joined.ends_with("-- curl https://example.com"), "{joined}");
    }
}
