//! The command's network: a fresh network namespace whose only reachable address is
//! sluice's listener inside it (the fence), or, where that cannot be built, the host's
//! network with every INET socket but TCP refused by the shim and a loud warning.
//!
//! Owns the choice (`--netns` requires the fence, `--no-netns` declines it, the default
//! builds it when sluice runs as root and says loudly when it cannot) and the namespace's
//! construction: a placeholder process holds it, loopback is brought up, and the listener is
//! bound from a thread that entered it, so sluice's upstream connections stay in the host's.
//! In the namespace, the same network fence as a pod's (`netfence`) sends every other TCP
//! connection to a transparent listener and DNS to a policy DNS bound there too, so a client
//! that ignores the proxy variables still goes through sluice (and nowhere else).

use std::fs::File;
use std::net::{SocketAddr, TcpListener, UdpSocket};
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
    /// Inside the namespace: the listeners the fence redirects to.
    pub fenced: Option<Fenced>,
}

/// The fence's listeners inside the command's namespace.
#[derive(Debug)]
pub struct Fenced {
    /// Where every other TCP connection is redirected (`--transparent-listen`'s role).
    pub transparent: TcpListener,
    /// The policy DNS (UDP and TCP), where DNS is redirected.
    pub dns: (UdpSocket, TcpListener),
}

/// The uid the fence exempts. sluice's own sockets live in the host's namespace, outside the
/// fence, so no process in the namespace needs the exemption: it is a uid no account uses
/// (`(uid_t)-2`), never the command's.
pub const FENCE_EXEMPT_UID: u32 = u32::MAX - 1;

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
                fenced: None,
            })
            .map_err(|e| format!("cannot listen on {host_listen}: {e}"))
    };
    match choice {
        Choice::Required => netns_listener().map(|(n, (listener, fenced))| Network {
            netns: Some(n),
            listener,
            fenced,
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
            Ok((n, (listener, fenced))) => Ok(Network {
                netns: Some(n),
                listener,
                fenced,
            }),
            Err(e) => {
                warn_unfenced(&e);
                host()
            }
        },
    }
}

/// Makes a fresh network namespace (loopback up, a route for every address, nothing else),
/// binds 127.0.0.1:0 in it from a thread that entered it, with the fence's listeners, and
/// applies the fence there.
#[allow(clippy::type_complexity)] // (namespace, (listener, the fence's listeners))
fn netns_listener() -> Result<(Netns, (TcpListener, Option<Fenced>)), String> {
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
    let bound = std::thread::spawn(move || -> Result<(TcpListener, Option<Fenced>), String> {
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
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("listen in the namespace: {e}"))?;
        // Without the fence the namespace still has only loopback: the command reaches
        // sluice's listener and nothing else, but a client ignoring the proxy variables fails.
        let fenced = fence_here()
            .map_err(|e| {
                eprintln!(
                    "sluice: WARNING: no transparent interception in the command's network namespace ({e}); clients that ignore the proxy variables cannot connect"
                );
            })
            .ok();
        Ok((listener, fenced))
    })
    .join()
    .map_err(|_| "the namespace thread panicked".to_string())??;
    Ok((netns, bound))
}

/// In the calling thread's (fresh) namespace: a route for every address (a veth pair with
/// both ends here: nothing leaves, but a connection is routed, so the fence sees it), the
/// transparent listener and the policy DNS on loopback, and the fence sending TCP and DNS to
/// them and refusing the rest.
fn fence_here() -> Result<Fenced, String> {
    let ip = |args: &[&str]| {
        let ok = Command::new("ip")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            Ok(())
        } else {
            Err(format!(
                "cannot route in the namespace (ip {})",
                args.join(" ")
            ))
        }
    };
    let transparent = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("transparent listener in the namespace: {e}"))?;
    let udp =
        UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("policy DNS in the namespace: {e}"))?;
    let dns_port = udp
        .local_addr()
        .map_err(|e| format!("policy DNS in the namespace: {e}"))?
        .port();
    let tcp = TcpListener::bind(("127.0.0.1", dns_port))
        .map_err(|e| format!("policy DNS (TCP) in the namespace: {e}"))?;
    let transparent_port = transparent
        .local_addr()
        .map_err(|e| format!("transparent listener in the namespace: {e}"))?
        .port();
    crate::netfence::apply(&crate::netfence::Fence {
        transparent_port,
        dns_port,
        proxy_uid: FENCE_EXEMPT_UID,
        // The namespace is the command's alone: its loopback holds only sluice's listeners
        // and the command's own servers (a test suite's), which must keep working.
        loopback_ports: Vec::new(),
        open_loopback: true,
    })
    .map_err(|e| format!("the network fence: {e}"))?;
    // Routes only once the fence stands: without them, a connection to anything but
    // loopback fails at once (no route), which is what a namespace without a fence gives.
    ip(&[
        "link", "add", "fence0", "type", "veth", "peer", "name", "fence1",
    ])?;
    ip(&["link", "set", "fence0", "up"])?;
    ip(&["link", "set", "fence1", "up"])?;
    ip(&["addr", "add", "198.51.100.254/32", "dev", "fence0"])?;
    ip(&["route", "add", "default", "dev", "fence0"])?;
    ip(&[
        "-6",
        "addr",
        "add",
        "2001:db8:ffff::fe/128",
        "dev",
        "fence0",
        "nodad",
    ])?;
    ip(&["-6", "route", "add", "default", "dev", "fence0"])?;
    Ok(Fenced {
        transparent,
        dns: (udp, tcp),
    })
}
