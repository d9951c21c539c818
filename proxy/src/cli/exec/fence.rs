//! The command's network: a fresh network namespace whose only reachable address is
//! sluice's listener inside it (the fence), or, where that cannot be built, the host's
//! network with every INET socket but TCP refused by the shim and a loud warning.
//!
//! Owns the choice (`--netns` requires the fence, `--no-netns` declines it, the default
//! builds it when sluice runs as root and says loudly when it cannot) and the namespace's
//! construction: a placeholder process holds it, loopback is brought up, and the listener is
//! bound from a thread that entered it, so sluice's upstream connections stay in the host's.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the user asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// `--netns`: the fence or nothing.
    Required,
    /// The default: the fence when it can be built.
    Auto,
    /// `--no-netns`: the host's network.
    Declined,
}

/// A network namespace held open by a placeholder process.
#[derive(Debug)]
pub struct Netns {
    holder: Child,
    pub path: PathBuf,
}

impl Netns {
    /// The placeholder's pid (sluice identifies callers in the namespace through it).
    pub fn pid(&self) -> u32 {
        self.holder.id()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The command's network: the namespace (if any) and sluice's listener for the command.
#[derive(Debug)]
pub struct Network {
    pub netns: Option<Netns>,
    pub listener: TcpListener,
}

/// Printed when the command shares the host's network.
fn warn_unfenced(reason: &str) {
    eprintln!(
        "sluice: WARNING: no network fence for the command ({reason}). It shares this host's \
         network: UDP, raw and other non-TCP sockets are refused (seccomp) and TCP may only \
         connect to sluice's port number (Landlock), but on any address. Run sluice as root \
         (or with --netns) for a network namespace whose only way out is sluice."
    );
}

/// Builds the command's network for `choice`; `host_listen` is the listener address used
/// without the fence. Runs inside the tokio runtime (the host listener registers with it).
pub fn build(choice: Choice, host_listen: SocketAddr) -> Result<Network, String> {
    let host = || {
        crate::listen::bind(host_listen)
            .and_then(|l| l.into_std())
            .map(|listener| Network {
                netns: None,
                listener,
            })
            .map_err(|e| format!("cannot listen on {host_listen}: {e}"))
    };
    match choice {
        Choice::Required => netns_listener().map(|(n, listener)| Network {
            netns: Some(n),
            listener,
        }),
        Choice::Declined => {
            warn_unfenced("--no-netns");
            host()
        }
        Choice::Auto if !rustix::process::geteuid().is_root() => {
            warn_unfenced("sluice is not running as root, so it cannot make a network namespace");
            host()
        }
        Choice::Auto => match netns_listener() {
            Ok((n, listener)) => Ok(Network {
                netns: Some(n),
                listener,
            }),
            Err(e) => {
                warn_unfenced(&e);
                host()
            }
        },
    }
}

/// Makes a fresh network namespace (loopback up, nothing else), and binds 127.0.0.1:0 in it
/// from a thread that entered it.
fn netns_listener() -> Result<(Netns, TcpListener), String> {
    let holder = Command::new("unshare")
        .args(["--net", "sleep", "infinity"])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot create a network namespace (unshare --net): {e}"))?;
    let netns = Netns {
        path: PathBuf::from(format!("/proc/{}/ns/net", holder.id())),
        holder,
    };
    let own = std::fs::metadata("/proc/self/ns/net").ok();
    // Wait until the holder is in its own namespace.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        use std::os::unix::fs::MetadataExt;
        let theirs = std::fs::metadata(&netns.path).ok();
        match (&own, &theirs) {
            (Some(o), Some(t)) if o.ino() != t.ino() => break,
            _ if Instant::now() > deadline => {
                return Err("the network namespace did not appear".to_string());
            }
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let ns_path = netns.path.clone();
    let bound = std::thread::spawn(move || -> Result<TcpListener, String> {
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
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("listen in the namespace: {e}"))
    })
    .join()
    .map_err(|_| "the namespace thread panicked".to_string())??;
    Ok((netns, bound))
}
