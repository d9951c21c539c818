//! The command line: subcommands, their flags, and exit codes.
//!
//! Owns the translation from what the user typed to calls into the library, and the exit
//! codes: 0 success; 1 the input was refused (a policy with errors, a malformed batch line);
//! 2 usage errors (unknown flags, missing arguments).

mod audit;
mod config;
mod demo;
mod doctor;
mod exec;
mod netfence;
mod policy;
mod reload;
mod run;
mod tenant_refresh;

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::policy::Compat;

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Egress proxy for untrusted workloads: identity, policy, TLS inspection, credential injection, OCSF audit"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy.
    Run(run::RunArgs),
    /// Run a command confined by sluice-shim, with sluice as its only way out.
    Exec(exec::ExecArgs),
    /// An offline tour: a local origin, a placeholder swapped for a secret, two refusals.
    Demo,
    /// Check that curl, Python, git, pip, npm and Node reach the network through sluice.
    Doctor,
    /// Check, explain and show policies.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// The nftables fence of a sandboxed network namespace or pod: print or apply it.
    #[command(subcommand)]
    Netfence(netfence::NetfenceCommand),
    /// Read an audit log: filtered readable lines, a summary, or follow it.
    Audit(audit::AuditArgs),
}

/// `--compat`: how to read constructs the reference accepts but silently misreads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
enum CompatArg {
    /// Refuse them, explaining what the reference would do (default).
    #[default]
    Strict,
    /// Accept them as NVIDIA OpenShell does, with a warning for each.
    Openshell,
}

impl From<CompatArg> for Compat {
    fn from(c: CompatArg) -> Compat {
        match c {
            CompatArg::Strict => Compat::Strict,
            CompatArg::Openshell => Compat::OpenShell,
        }
    }
}

/// The hidden first argument under which `sluice` runs as its own confinement launcher
/// (`sluice exec` re-executes itself with it, so one binary is enough).
pub const SHIM_SUBCOMMAND: &str = "__shim";

pub fn main() -> ExitCode {
    // Before anything else: the shim must start single-threaded, with nothing opened.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == SHIM_SUBCOMMAND)
    {
        return sluice_shim::run(std::env::args_os().skip(2));
    }
    let args: Vec<String> = std::env::args().collect();
    if demo::is_client_invocation(&args) {
        return demo::client(&args[2..]);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Exec(args) => exec::exec(args),
        Command::Demo => demo::demo(),
        Command::Doctor => doctor::doctor(),
        Command::Policy(cmd) => policy::run(cmd),
        Command::Netfence(cmd) => netfence::run(cmd),
        Command::Audit(args) => audit::run(args),
    }
}
