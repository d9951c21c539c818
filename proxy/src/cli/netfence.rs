//! `sluice netfence print|apply`: the nftables fence of a sandboxed network namespace or pod
//! (`crate::netfence`), printed for review or applied with `nft -f -` in the current
//! network namespace (an init container with `NET_ADMIN`, or `ip netns exec`).

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::netfence::{self, Fence};

#[derive(Debug, Subcommand)]
pub enum NetfenceCommand {
    /// Print the ruleset (`nft -f -` input) without applying it.
    Print(FenceArgs),
    /// Apply the ruleset in the current network namespace (needs NET_ADMIN there).
    Apply(FenceArgs),
}

#[derive(Debug, Args)]
pub struct FenceArgs {
    /// The port of `sluice run --transparent-listen` (TCP is redirected there).
    #[arg(long, value_name = "PORT")]
    pub transparent_port: u16,
    /// The port of `sluice run --dns-listen` (UDP and TCP port 53 are redirected there).
    #[arg(long, value_name = "PORT")]
    pub dns_port: u16,
    /// The uid sluice runs as: its own traffic is neither redirected nor filtered.
    #[arg(long, value_name = "UID")]
    pub proxy_uid: u32,
    /// A TCP port on loopback every program may connect to (repeat for more): sluice's
    /// explicit `--listen` port when clients use proxy variables, or a service of the pod
    /// meant to be reached. The rest of loopback is refused: in a pod it is shared by every
    /// container, and a collector or mesh proxy listening there would be a way around sluice.
    #[arg(long = "allow-loopback-port", value_name = "PORT")]
    pub loopback_ports: Vec<u16>,
    /// Leave all of loopback open (only where nothing else shares the network namespace).
    #[arg(long)]
    pub open_loopback: bool,
}

impl From<&FenceArgs> for Fence {
    fn from(a: &FenceArgs) -> Fence {
        Fence {
            transparent_port: a.transparent_port,
            dns_port: a.dns_port,
            proxy_uid: a.proxy_uid,
            loopback_ports: a.loopback_ports.clone(),
            open_loopback: a.open_loopback,
        }
    }
}

pub fn run(cmd: NetfenceCommand) -> ExitCode {
    match cmd {
        NetfenceCommand::Print(args) => match netfence::ruleset(&Fence::from(&args)) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sluice: netfence: {e}");
                ExitCode::from(2)
            }
        },
        NetfenceCommand::Apply(args) => match netfence::apply(&Fence::from(&args)) {
            Ok(()) => {
                eprintln!(
                    "sluice: network fence applied (table inet {})",
                    netfence::TABLE
                );
                ExitCode::SUCCESS
            }
            Err(netfence::ApplyError::Fence(e)) => {
                eprintln!("sluice: netfence: {e}");
                ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("sluice: netfence: {e}");
                ExitCode::from(1)
            }
        },
    }
}
