//! The network fence of a sandboxed network namespace or pod: the nftables ruleset that
//! leaves the sandboxed programs no way out but sluice.
//!
//! [`ruleset`] is the rule, a pure function of a [`Fence`]; [`apply`] is the thin runner
//! (`nft -f -` in the caller's network namespace). In the namespace the fence is applied to:
//!
//! - sluice's own traffic (its uid, `meta skuid`) is neither redirected nor filtered, so its
//!   upstream connections and DNS lookups are not sent back into itself;
//! - loopback reaches only what the fence names: sluice's own traffic, what it redirected,
//!   and the loopback ports listed in `loopback_ports` (sluice's explicit listener when
//!   clients use proxy variables, a service of the pod meant to be reached); every other
//!   loopback connection is refused, because in a pod loopback is shared by every container,
//!   and a collector or mesh proxy listening there would otherwise be a way out around
//!   sluice. `open_loopback` keeps loopback open where the namespace is private to the
//!   sandboxed command (`sluice exec`), so that its own local servers keep working;
//! - DNS (UDP and TCP port 53) is redirected to the policy DNS;
//! - every other TCP connection is redirected to the transparent listener (which reads the
//!   original destination back with `SO_ORIGINAL_DST`);
//! - everything else leaving the namespace is rejected: all other UDP (QUIC on 443 too, so
//!   clients fall back to TCP) with ICMP port unreachable, TCP that escaped the redirect with a
//!   reset, anything else administratively prohibited.
//!
//! One `inet` table covers IPv4 and IPv6 alike. Applying is atomic and idempotent: the table is
//! created, deleted and defined again in one `nft` transaction.

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// The name of the fence's table (`nft list table inet sluice_fence`).
pub const TABLE: &str = "sluice_fence";

/// What the fence needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The port of `sluice run --transparent-listen` (listening on 127.0.0.1 and ::1, or on
    /// the unspecified addresses: nftables redirects local traffic to loopback).
    pub transparent_port: u16,
    /// The port of `sluice run --dns-listen` (UDP and TCP).
    pub dns_port: u16,
    /// The uid sluice runs as; no sandboxed program may run as it.
    pub proxy_uid: u32,
    /// TCP ports on loopback every program may connect to (the rest of loopback is refused,
    /// unless `open_loopback`).
    pub loopback_ports: Vec<u16>,
    /// Leave loopback open to every program: only for a network namespace nothing else
    /// shares (`sluice exec`).
    pub open_loopback: bool,
}

/// Why a fence cannot be built.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    #[error("{0} must not be 0")]
    ZeroPort(&'static str),
    #[error("the transparent port and the DNS port must differ (both {0})")]
    SamePort(u16),
    #[error(
        "the proxy uid must not be 0: every root process would bypass the fence (run sluice as its own non-root uid)"
    )]
    RootUid,
}

/// Why the fence could not be applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    #[error(transparent)]
    Fence(#[from] FenceError),
    #[error("cannot run nft (is nftables installed?)")]
    Spawn(#[source] std::io::Error),
    #[error("nft refused the ruleset: {0}")]
    Nft(String),
}

impl Fence {
    fn check(&self) -> Result<(), FenceError> {
        if self.transparent_port == 0 {
            return Err(FenceError::ZeroPort("the transparent port"));
        }
        if self.dns_port == 0 {
            return Err(FenceError::ZeroPort("the DNS port"));
        }
        if self.transparent_port == self.dns_port {
            return Err(FenceError::SamePort(self.dns_port));
        }
        if self.proxy_uid == 0 {
            return Err(FenceError::RootUid);
        }
        Ok(())
    }
}

/// The ruleset text for `nft -f -`.
pub fn ruleset(fence: &Fence) -> Result<String, FenceError> {
    fence.check()?;
    let Fence {
        transparent_port,
        dns_port,
        proxy_uid,
        ref loopback_ports,
        open_loopback,
    } = *fence;
    let mut s = String::new();
    // `table` then `delete table`: replaces an earlier fence in the same transaction, and
    // works whether or not one exists.
    let _ = writeln!(s, "table inet {TABLE}");
    let _ = writeln!(s, "delete table inet {TABLE}");
    let _ = writeln!(s, "table inet {TABLE} {{");
    let _ = writeln!(s, "  chain intercept {{");
    let _ = writeln!(s, "    type nat hook output priority -100; policy accept;");
    let _ = writeln!(s, "    meta skuid {proxy_uid} return");
    let _ = writeln!(s, "    oifname \"lo\" return");
    let _ = writeln!(s, "    udp dport 53 redirect to :{dns_port}");
    let _ = writeln!(s, "    tcp dport 53 redirect to :{dns_port}");
    let _ = writeln!(s, "    meta l4proto tcp redirect to :{transparent_port}");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain outbound {{");
    let _ = writeln!(
        s,
        "    type filter hook output priority filter; policy drop;"
    );
    let _ = writeln!(s, "    meta skuid {proxy_uid} accept");
    if open_loopback {
        let _ = writeln!(s, "    oifname \"lo\" accept");
    } else if !loopback_ports.is_empty() {
        let ports: Vec<String> = loopback_ports.iter().map(u16::to_string).collect();
        let _ = writeln!(
            s,
            "    oifname \"lo\" tcp dport {{ {} }} accept",
            ports.join(", ")
        );
    }
    // What `intercept` redirected: this hook still sees the interface the packet was first
    // routed to, not loopback, so the redirect is recognised by its conntrack status.
    let _ = writeln!(s, "    ct status dnat accept");
    let _ = writeln!(s, "    ct state established,related accept");
    // The kernel's own neighbour discovery has no socket (and so no uid): without it sluice's
    // IPv6 upstream connections could not find their next hop.
    let _ = writeln!(
        s,
        "    icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit }} accept"
    );
    let _ = writeln!(s, "    meta l4proto udp reject");
    let _ = writeln!(s, "    meta l4proto tcp reject with tcp reset");
    let _ = writeln!(s, "    reject with icmpx type admin-prohibited");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "}}");
    Ok(s)
}

/// Loads the fence into the network namespace of the calling thread (`nft -f -`). Needs
/// `CAP_NET_ADMIN` there.
pub fn apply(fence: &Fence) -> Result<(), ApplyError> {
    let text = ruleset(fence)?;
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(ApplyError::Spawn)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .map_err(ApplyError::Spawn)?;
    }
    let out = child.wait_with_output().map_err(ApplyError::Spawn)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ApplyError::Nft(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FENCE: Fence = Fence {
        transparent_port: 15001,
        dns_port: 15053,
        proxy_uid: 1337,
        loopback_ports: Vec::new(),
        open_loopback: false,
    };

    fn lines(text: &str) -> Vec<&str> {
        text.lines().map(str::trim).collect()
    }

    /// Position of `line` in the chain that starts at `chain`.
    fn pos(text: &str, line: &str) -> usize {
        lines(text)
            .iter()
            .position(|l| *l == line)
            .unwrap_or_else(|| panic!("no line `{line}` in:\n{text}"))
    }

    #[test]
    fn tcp_goes_to_the_transparent_listener_and_dns_to_the_policy_dns() {
        let t = ruleset(&FENCE).unwrap();
        assert!(t.contains("table inet sluice_fence {"), "{t}");
        let intercept = pos(&t, "chain intercept {");
        assert!(pos(&t, "type nat hook output priority -100; policy accept;") == intercept + 1);
        let own = pos(&t, "meta skuid 1337 return");
        let lo = pos(&t, "oifname \"lo\" return");
        let udp53 = pos(&t, "udp dport 53 redirect to :15053");
        let tcp53 = pos(&t, "tcp dport 53 redirect to :15053");
        let tcp = pos(&t, "meta l4proto tcp redirect to :15001");
        // sluice's own traffic is exempt before anything is redirected (no loop); DNS before
        // the catch-all TCP redirect.
        assert!(intercept < own && own < lo && lo < udp53 && udp53 < tcp53 && tcp53 < tcp);
    }

    #[test]
    fn everything_else_is_rejected_with_a_default_drop() {
        let t = ruleset(&FENCE).unwrap();
        let outbound = pos(&t, "chain outbound {");
        assert_eq!(
            pos(&t, "type filter hook output priority filter; policy drop;"),
            outbound + 1
        );
        let own = pos(&t, "meta skuid 1337 accept");
        let redirected = pos(&t, "ct status dnat accept");
        let udp = pos(&t, "meta l4proto udp reject");
        let tcp = pos(&t, "meta l4proto tcp reject with tcp reset");
        let rest = pos(&t, "reject with icmpx type admin-prohibited");
        assert!(outbound < own && own < redirected && redirected < udp);
        assert!(udp < tcp && tcp < rest);
        // No rule accepts UDP (QUIC on 443 included) for the sandbox.
        assert!(!t.contains("udp dport 443"), "{t}");
        let accepts: Vec<&str> = lines(&t)
            .into_iter()
            .filter(|l| l.ends_with(" accept"))
            .collect();
        assert_eq!(
            accepts,
            [
                "meta skuid 1337 accept",
                "ct status dnat accept",
                "ct state established,related accept",
                "icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } accept",
            ],
            "the only ways out: sluice's uid, what was redirected to sluice"
        );
    }

    #[test]
    fn loopback_reaches_only_the_ports_named_unless_the_namespace_is_private() {
        let named = Fence {
            loopback_ports: vec![3128, 8080],
            ..FENCE
        };
        let t = ruleset(&named).unwrap();
        let own = pos(&t, "meta skuid 1337 accept");
        let lo = pos(&t, "oifname \"lo\" tcp dport { 3128, 8080 } accept");
        assert!(own < lo && lo < pos(&t, "ct status dnat accept"));
        assert!(!t.contains("oifname \"lo\" accept"), "{t}");
        let open = Fence {
            open_loopback: true,
            ..FENCE
        };
        let t = ruleset(&open).unwrap();
        assert!(pos(&t, "oifname \"lo\" accept") < pos(&t, "ct status dnat accept"));
    }

    #[test]
    fn one_inet_table_covers_ipv6_and_replaces_an_earlier_fence() {
        let t = ruleset(&FENCE).unwrap();
        assert!(!t.contains("table ip ") && !t.contains("table ip6 "), "{t}");
        assert!(t.starts_with("table inet sluice_fence\ndelete table inet sluice_fence\n"));
    }

    #[test]
    fn bad_fences_are_refused() {
        let f = |t, d, u| Fence {
            transparent_port: t,
            dns_port: d,
            proxy_uid: u,
            ..FENCE
        };
        assert_eq!(
            ruleset(&f(0, 53, 1)),
            Err(FenceError::ZeroPort("the transparent port"))
        );
        assert_eq!(
            ruleset(&f(1, 0, 1)),
            Err(FenceError::ZeroPort("the DNS port"))
        );
        assert_eq!(ruleset(&f(7, 7, 1)), Err(FenceError::SamePort(7)));
        assert_eq!(ruleset(&f(1, 2, 0)), Err(FenceError::RootUid));
    }
}
