//! The launch sequence of spec §1.4, in its normative order, one call per step.
//!
//! Owns the order and the mapping of failures to exit codes (125 setup, 126 cannot execute,
//! 127 not found). Each step's mechanics live in its module; this file should read like the
//! spec's numbered list. Why this order (spec §1.4):
//! * PathFds are opened as root (step 5) before the drop (step 9);
//! * PDEATHSIG (10) follows the credential change, which clears it;
//! * no_new_privs (12) precedes Landlock (14) and seccomp (15), which need it unprivileged;
//! * seccomp comes last, so it never blocks a syscall the shim itself still needs.

use std::convert::Infallible;
use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::cli::{self, CliError, Parsed, Policy};
use crate::degradation::Degradation;
use crate::env::{self, EnvSpec};
use crate::exec::{self, InterpGrant, ResolveError};
use crate::landlock::{self, AccessClass, Grant, LandlockError, PlanRequest};
use crate::privilege::{self, PrivilegeError};
use crate::process::{self, Netns, ProcessError};
use crate::seccomp::{self, SeccompError};
use crate::status::{self, Report, StatusSink};

/// Exit status for any shim or policy failure before exec.
pub const EXIT_SETUP: u8 = 125;

/// Environment variable of the test-only ABI cap (honoured only with `test-hooks`).
pub const TEST_MAX_ABI_VAR: &str = "SLUICE_SHIM_TEST_MAX_ABI";

/// Why the shim did not become the command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// Bad command line.
    #[error("{0}")]
    Cli(#[from] CliError),
    /// Process step failed.
    #[error("{0}")]
    Process(#[from] ProcessError),
    /// Privilege drop failed.
    #[error("{0}")]
    Privilege(#[from] PrivilegeError),
    /// Landlock unavailable or refused.
    #[error("{0}")]
    Landlock(#[from] LandlockError),
    /// seccomp build or install failed.
    #[error("{0}")]
    Seccomp(#[from] SeccompError),
    /// The command does not resolve to an executable file.
    #[error("{0}")]
    Resolve(#[from] ResolveError),
    /// The status descriptor is unusable.
    #[error("--status-fd: {0}")]
    StatusFd(io::Error),
    /// `execve` failed after confinement.
    #[error("exec {}: {source}", path.display())]
    Exec {
        /// The resolved command.
        path: PathBuf,
        /// The kernel's error.
        source: io::Error,
    },
}

impl LaunchError {
    /// The process exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            LaunchError::Resolve(e) => e.exit_code(),
            LaunchError::Exec { source, .. } => exec::exit_code(source),
            _ => EXIT_SETUP,
        }
    }

    /// Which step failed, for the status line.
    pub fn stage(&self) -> &'static str {
        match self {
            LaunchError::Cli(_) => "cli",
            LaunchError::Process(_) => "process",
            LaunchError::Privilege(_) => "privilege",
            LaunchError::Landlock(_) => "landlock",
            LaunchError::Seccomp(_) => "seccomp",
            LaunchError::Resolve(_) => "resolve",
            LaunchError::StatusFd(_) => "status",
            LaunchError::Exec { .. } => "exec",
        }
    }

    fn status_line(&self) -> serde_json::Value {
        match self {
            LaunchError::Exec { path, source } => {
                status::exec_failure(path, source, self.exit_code())
            }
            other => status::failure(other.stage(), &other.to_string(), other.exit_code()),
        }
    }
}

/// Runs the shim with the arguments after the program name. Returns only on failure (or for
/// `--help`/`--version`); on success the process has become the command.
pub fn run<I>(args: I) -> ExitCode
where
    I: IntoIterator<Item = OsString>,
{
    let policy = match cli::parse(args, std::env::var_os(TEST_MAX_ABI_VAR)) {
        Ok(Parsed::Run(policy)) => policy,
        Ok(Parsed::Help) => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            println!("sluice-shim {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            eprintln!("sluice-shim: {err}\n\n{}", cli::USAGE);
            return ExitCode::from(EXIT_SETUP);
        }
    };
    // Adopt the status descriptor first, so every later failure is reported on it.
    let mut sink = match StatusSink::adopt(policy.status_fd) {
        Ok(sink) => sink,
        Err(err) => {
            eprintln!("sluice-shim: --status-fd: {err}");
            return ExitCode::from(EXIT_SETUP);
        }
    };
    let err = match launch(&policy, &mut sink) {
        Ok(never) => match never {},
        Err(err) => err,
    };
    eprintln!("sluice-shim: {err}");
    // Best effort: the supervisor may have closed its end.
    let _ = sink.write(&err.status_line());
    ExitCode::from(err.exit_code())
}

fn grants(policy: &Policy, interp: &InterpGrant) -> Vec<Grant> {
    let classed = |paths: &[cli::AbsPath], class| {
        paths
            .iter()
            .map(move |p| Grant {
                path: p.as_path().to_path_buf(),
                class,
            })
            .collect::<Vec<_>>()
    };
    let mut all = classed(&policy.fs.ro, AccessClass::ReadOnly);
    all.extend(classed(&policy.fs.rw, AccessClass::ReadWrite));
    all.extend(classed(&policy.fs.exec, AccessClass::Execute));
    // The CA files the environment points at must be readable.
    for ca in policy.ca_bundle.iter().chain(&policy.ca_cert) {
        all.push(Grant {
            path: ca.as_path().to_path_buf(),
            class: AccessClass::ReadOnly,
        });
    }
    if let InterpGrant::Grant(path) = interp {
        all.push(Grant {
            path: path.clone(),
            class: AccessClass::Execute,
        });
    }
    all
}

fn user_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| env::user_name(&passwd, uid))
        .unwrap_or_else(|| "sandbox".to_owned())
}

fn launch(policy: &Policy, sink: &mut StatusSink) -> Result<Infallible, LaunchError> {
    // 1. Preconditions: single-threaded, root or already the target uid.
    let launcher = std::os::unix::process::parent_id();
    process::check_single_threaded()?;
    let mode = privilege::mode(policy.uid)?;

    // 2. FD hygiene: only 0-2 and the status descriptor survive.
    process::sanitize_fds(policy.status_fd)?;

    // 3. Probe Landlock and decide per compat mode; strict mode fails here.
    let plan = landlock::plan(
        landlock::probe(),
        &PlanRequest {
            compat: policy.compat,
            min_abi: policy.min_abi,
            audit_denials: policy.audit_denials,
            allow_unconfined: policy.allow_unconfined,
            test_max_abi: policy.test_max_abi,
            disabled: policy.disabled,
        },
    )?;
    let mut degraded: Vec<Degradation> = plan.degraded.clone();

    // 4. Network namespace: enter it while still root, then refuse the host's (strict).
    if let Some(path) = &policy.netns_path {
        process::enter_netns(path.as_path())?;
    }
    let netns = process::check_netns(policy.compat, policy.allow_host_netns)?;
    match netns {
        Netns::Host => degraded.push(Degradation {
            feature: "netns",
            detail: "running in the host network namespace".into(),
        }),
        Netns::Unknown => degraded.push(Degradation {
            feature: "netns",
            detail: "cannot tell whether this is the host network namespace".into(),
        }),
        Netns::Isolated | Netns::HostAllowed => {}
    }
    // UDP reaches any address unless a fence stops it (Landlock before ABI 10 does not cover
    // it). The shim cannot see a fence, only a namespace: a container's namespace is not the
    // host's yet reaches the world. So only the supervisor's namespace (`--netns-path`, made
    // with nothing but sluice in it) or an explicit --allow-udp lets the command have UDP.
    let udp = (policy.netns_path.is_some() && netns == Netns::Isolated) || policy.allow_udp;
    if policy.allow_udp && netns != Netns::Isolated {
        degraded.push(Degradation {
            feature: "udp",
            detail: "UDP sockets allowed outside a network namespace (--allow-udp)".into(),
        });
    }

    // 5. The Landlock ruleset, as root. The interpreter grant needs the resolved command and
    //    the resolution needs the child's PATH, so the (pure) environment of step 7 is built
    //    here; nothing about it depends on the steps in between.
    let env = env::build(
        std::env::vars_os(),
        &EnvSpec {
            proxy: policy.proxy,
            ca_bundle: policy.ca_bundle.as_ref(),
            ca_cert: policy.ca_cert.as_ref(),
            rw: &policy.fs.rw,
            workdir: policy.workdir.as_ref(),
            user: &user_name(policy.uid),
            overrides: &policy.env,
        },
    );
    let cwd = match &policy.workdir {
        Some(dir) => dir.as_path().to_path_buf(),
        None => {
            std::env::current_dir().map_err(|e| LaunchError::Process(process_io("getcwd", e)))?
        }
    };
    let program = exec::resolve(&policy.command.program, env.get("PATH"), &cwd)?;
    let interp = if policy.interp_grant {
        exec::interpreter_grant(&program, &policy.fs)
    } else {
        InterpGrant::None
    };
    let connect_ports = policy.connect_ports();
    let prepared = landlock::prepare(&plan, &grants(policy, &interp), &connect_ports)?;

    // 6. Compile the seccomp programs now, so filter errors surface before any state changes.
    let programs = seccomp::compile(seccomp::Request {
        disabled: policy.disabled.seccomp,
        datagram: udp,
    })?;

    // 7. The child environment was built from scratch in step 5.

    // 8. A new session: no controlling terminal for TIOCSTI.
    let session = process::new_session()?;

    // 9. Drop privileges (bounding set, groups, gid, uid) and verify.
    let dropped = privilege::drop_and_verify(policy.uid, policy.gid, mode)?;
    degraded.extend(dropped.degraded.iter().cloned());

    // 10. Parent-death signal, after the uid change that would clear it.
    let pdeathsig = process::set_parent_death_signal(launcher)?;

    // 11. No core dumps (survives exec).
    let core_limit = process::disable_core_dumps()?;

    // 12. no_new_privs, read back.
    let no_new_privs = process::set_no_new_privs()?;

    // 13. Working directory, as the target uid.
    if let Some(dir) = &policy.workdir {
        process::change_dir(dir.as_path())?;
        let pinned = std::env::var(process::WORKDIR_ID_ENV).ok();
        process::verify_workdir(pinned.as_deref())?;
    }

    // 14. Landlock.
    let path_rules = prepared.path_rules;
    let missing_paths = prepared.missing.clone();
    let enforced = landlock::enforce(prepared, policy.compat)?;
    degraded.extend(enforced.degraded.iter().cloned());

    // 15. seccomp: x32 guard, clone3 → ENOSYS, main filter.
    seccomp::install(&programs)?;

    // 16. The status line.
    let report = Report {
        compat: policy.compat,
        plan: &plan,
        enforced: &enforced,
        connect_ports: &connect_ports,
        path_rules,
        missing_paths: &missing_paths,
        interpreter: &interp,
        seccomp: &programs,
        udp,
        dropped: &dropped,
        no_new_privs,
        pdeathsig,
        core_limit,
        session,
        netns,
        degraded: &degraded,
        exec: &program,
        disabled: policy.disabled,
    };
    sink.write(&report.to_json())
        .map_err(LaunchError::StatusFd)?;

    // 17. Become the command.
    let source = exec::exec(&program, &policy.command, &env);
    Err(LaunchError::Exec {
        path: program,
        source,
    })
}

fn process_io(call: &'static str, source: io::Error) -> ProcessError {
    ProcessError::Syscall { call, source }
}
