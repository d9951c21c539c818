//! Which host a redirected connection is for, and whether the client may claim it.
//!
//! [`decide_target`] is the rule, pure: the loop guard (a connection whose original
//! destination is one of sluice's own listeners is refused), then the anti-forgery rule. A
//! name that comes only from the client (SNI, `Host`) stands only when the original
//! destination is an address that name resolves to, or one the policy DNS handed out for it;
//! otherwise the connection is refused with the reason, so a forged SNI cannot carry an
//! allowed name to another host's address. A ClientHello without SNI, where the policy needs
//! a name, is refused and says so. Without any claim, the name is the one the policy DNS
//! handed the address out for (raw `protocol: tcp` relays), else the address itself.
//!
//! [`corroborate`] gathers the evidence the rule needs (the only I/O: one lookup through
//! `sluice_resolver`, skipped when the policy DNS already vouches for the name).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use sluice_resolver::Resolver;

use super::sniff::Hello;
use crate::dns::table::HandedOut;
use crate::pipeline::authority::Authority;
use crate::refusal_code::Code;

/// Where a client's claimed name came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameSource {
    Sni,
    Host,
}

impl fmt::Display for NameSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameSource::Sni => "TLS SNI",
            NameSource::Host => "HTTP Host",
        })
    }
}

/// Why the host of a redirected connection is what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameBasis {
    /// Claimed by the client and the original destination is one of the name's addresses.
    Resolves(NameSource),
    /// Claimed by the client and the policy DNS handed the original destination out for it.
    PolicyDns(NameSource),
    /// Not claimed; the policy DNS handed the original destination out for this name.
    PolicyDnsOnly,
    /// No name at all: the host is the original destination's address.
    Address,
}

/// The destination the pipeline's phases judge and dial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransparentTarget {
    /// A policy host name (lower-case, no trailing dot) or the original address as text, and
    /// always the original destination's port (a port in `Host` is ignored).
    pub dst: Authority,
    /// The only address that may be dialled for this connection.
    pub original: SocketAddr,
    pub basis: NameBasis,
}

/// Why a redirected connection is refused before policy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetRefusal {
    /// The original destination is sluice itself.
    #[error("the original destination {original} is one of sluice's own listeners (a loop)")]
    Loop { original: SocketAddr },
    /// TLS without SNI where the policy needs a name.
    #[error(
        "the TLS ClientHello to {original} has no SNI, and no policy endpoint allows that address without a name"
    )]
    NoSni { original: SocketAddr },
    /// Nothing named the host, and the policy allows no bare address there.
    #[error(
        "no host name for {original}: no TLS SNI, no HTTP Host, and the policy DNS handed this address out for no name"
    )]
    NoName { original: SocketAddr },
    /// The claimed name does not stand for the original destination.
    #[error(
        "{claimed_by} names `{name}`, but {original} is not an address of `{name}` ({why}); refused so a forged name cannot reach another host"
    )]
    Forged {
        name: String,
        claimed_by: NameSource,
        original: SocketAddr,
        why: String,
    },
}

impl TargetRefusal {
    /// The reason code for refusals and audit events (its status is the code's).
    pub fn code(&self) -> Code {
        match self {
            TargetRefusal::Loop { .. } => Code::TransparentLoop,
            TargetRefusal::NoSni { .. } => Code::TlsSniRequired,
            TargetRefusal::NoName { .. } => Code::HostNameRequired,
            TargetRefusal::Forged { .. } => Code::HostNameMismatch,
        }
    }
}

/// What the rule looks at.
#[derive(Clone, Copy, Debug)]
pub struct TargetInput<'a> {
    /// The original destination (`origdst::original_destination`).
    pub original: SocketAddr,
    /// Every address sluice listens on (explicit, transparent, DNS, metrics).
    pub own_listeners: &'a [SocketAddr],
    /// What the client's first bytes claimed (`sniff::sniff`).
    pub hello: &'a Hello,
    /// True when no policy endpoint allows the bare original address at its port (see
    /// [`needs_name`]): then a connection without a name is refused here, with its reason.
    pub needs_name: bool,
    /// The addresses the claimed name resolves to (empty when there is no claim, the
    /// lookup failed, or the policy DNS already vouched).
    pub resolved: &'a [IpAddr],
    /// The names the policy DNS handed the original address out for, most recent first.
    pub dns_names: &'a [String],
}

/// The rule (see the module documentation).
pub fn decide_target(input: &TargetInput<'_>) -> Result<TransparentTarget, TargetRefusal> {
    let original = input.original;
    if is_own_listener(original, input.own_listeners) {
        return Err(TargetRefusal::Loop { original });
    }
    let claim = match input.hello {
        Hello::Tls { sni: Some(n) } => Some((n, NameSource::Sni)),
        Hello::Http { host: Some(n) } => Some((n, NameSource::Host)),
        Hello::Tls { sni: None } if input.needs_name => {
            return Err(TargetRefusal::NoSni { original });
        }
        Hello::Tls { sni: None } | Hello::Http { host: None } | Hello::Opaque => None,
    };
    let target = |host: String, basis| TransparentTarget {
        dst: Authority::new(host, original.port()),
        original,
        basis,
    };
    let Some((name, source)) = claim else {
        return match input.dns_names.first() {
            Some(name) => Ok(target(name.clone(), NameBasis::PolicyDnsOnly)),
            None if input.needs_name => Err(TargetRefusal::NoName { original }),
            None => Ok(target(original.ip().to_string(), NameBasis::Address)),
        };
    };
    if input.dns_names.iter().any(|n| n == name) {
        return Ok(target(name.clone(), NameBasis::PolicyDns(source)));
    }
    if input.resolved.iter().any(|ip| same_ip(*ip, original.ip())) {
        return Ok(target(name.clone(), NameBasis::Resolves(source)));
    }
    let why = if input.resolved.is_empty() {
        "the name has no addresses here and the policy DNS did not hand this one out".to_string()
    } else {
        let list: Vec<String> = input.resolved.iter().map(IpAddr::to_string).collect();
        format!("it resolves to {}", list.join(", "))
    };
    Err(TargetRefusal::Forged {
        name: name.clone(),
        claimed_by: source,
        original,
        why,
    })
}

/// Orders the names the policy DNS handed an address out for so that those `has_endpoint`
/// (a policy endpoint at the connection's port) come first, each group most recent first: a
/// connection that names no host is judged under the most recent name that can allow it, not
/// under whatever name another client resolved to the same address last.
pub fn names_with_endpoints_first(names: &mut [String], has_endpoint: impl Fn(&str) -> bool) {
    names.sort_by_key(|name| !has_endpoint(name));
}

/// Whether every policy endpoint that could judge a connection without a claimed name is
/// `protocol: tcp`: `names` (the names the policy DNS handed the address out for) include
/// at least one with an endpoint at `port`, and every endpoint of every such name at `port`
/// is raw TCP. Then the first bytes cannot matter (without a claim the target is one of
/// these names, `decide_target`; a claim the policy DNS vouches for is one of them too), so
/// the listener need not wait for them.
pub fn raw_tcp_only(policy: &crate::policy::Policy, names: &[String], port: u16) -> bool {
    let mut any = false;
    for name in names {
        for r in policy.endpoints_for(name, port) {
            if policy.endpoint(r).protocol != crate::policy::model::Protocol::Tcp {
                return false;
            }
            any = true;
        }
    }
    any
}

/// Whether the policy needs a name at `original`: no endpoint allows the bare address at its
/// port (for any binary; the L4 decision judges the binary later).
pub fn needs_name(policy: &crate::policy::Policy, original: SocketAddr) -> bool {
    policy
        .endpoints_for(&original.ip().to_string(), original.port())
        .is_empty()
}

/// True when `addr` reaches one of `listeners`: same port, and the same address, or a
/// listener on the unspecified address of the family, or a loopback address (a loopback
/// listener is reachable only from here).
pub fn is_own_listener(addr: SocketAddr, listeners: &[SocketAddr]) -> bool {
    let ip = canonical_ip(addr.ip());
    listeners.iter().any(|l| {
        let lip = canonical_ip(l.ip());
        l.port() == addr.port()
            && (lip == ip
                || (lip.is_unspecified() && lip.is_ipv4() == ip.is_ipv4())
                || (lip.is_loopback() && ip.is_loopback()))
    })
}

fn canonical_ip(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canonical_ip(a) == canonical_ip(b)
}

/// The evidence [`decide_target`] needs beyond the sniff: the names the policy DNS handed
/// `original` out for, and (only when those do not include the claimed name) the claimed
/// name's addresses. A failed lookup is no addresses: the rule then refuses the claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Evidence {
    pub resolved: Vec<IpAddr>,
    pub dns_names: Vec<String>,
}

/// Gathers the [`Evidence`] for one connection.
pub async fn corroborate(
    resolver: &Resolver,
    table: Option<&HandedOut>,
    hello: &Hello,
    original: SocketAddr,
) -> Evidence {
    let dns_names = table
        .map(|t| t.names_for(original.ip(), Instant::now()))
        .unwrap_or_default();
    let claimed = match hello {
        Hello::Tls { sni: Some(n) } | Hello::Http { host: Some(n) } => Some(n),
        _ => None,
    };
    let resolved = match claimed {
        Some(name) if !dns_names.iter().any(|n| n == name) => {
            resolver.resolve(name).await.unwrap_or_default()
        }
        _ => Vec::new(),
    };
    Evidence {
        resolved,
        dns_names,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_names_whose_endpoints_at_the_port_are_all_raw_tcp_skip_the_sniff() {
        let yaml = "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - {host: db.test, port: 5432, protocol: tcp}\n      - {host: mail.test, port: 25, protocol: tcp}\n      - {host: mixed.test, port: 25, protocol: tcp}\n      - {host: \"*.mixed.test\", port: 25}\n      - {host: mixed.test, port: 443, protocol: rest, access: full}\n    binaries:\n      - path: /usr/bin/psql\n";
        let source = crate::policy::Source {
            name: "p.yaml".to_string(),
            text: yaml.to_string(),
        };
        let policy = crate::policy::load(&[source], crate::policy::Compat::Strict)
            .unwrap()
            .policy;
        let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(raw_tcp_only(&policy, &names(&["db.test"]), 5432));
        assert!(raw_tcp_only(&policy, &names(&["mail.test", "db.test"]), 25));
        // No handed-out name, or none with an endpoint at the port: the sniff decides.
        assert!(!raw_tcp_only(&policy, &[], 5432));
        assert!(!raw_tcp_only(&policy, &names(&["db.test"]), 25));
        // One endpoint of another protocol at the port (an L4 wildcard here) is enough to
        // need the first bytes, whichever name it comes through.
        assert!(!raw_tcp_only(&policy, &names(&["a.mixed.test"]), 25));
        assert!(!raw_tcp_only(
            &policy,
            &names(&["mail.test", "a.mixed.test"]),
            25
        ));
        assert!(!raw_tcp_only(&policy, &names(&["mixed.test"]), 443));
    }

    #[test]
    fn a_raw_connection_takes_the_most_recent_name_with_an_endpoint_at_its_port() {
        // allowed.test was handed out last for the address; only echo.test has a TCP
        // endpoint at the connection's port.
        let mut names: Vec<String> = ["allowed.test", "echo.test", "other.test"]
            .map(String::from)
            .to_vec();
        names_with_endpoints_first(&mut names, |n| n == "echo.test" || n == "other.test");
        assert_eq!(names, ["echo.test", "other.test", "allowed.test"]);
        let hello = Hello::Opaque;
        let got = decide_target(&input("45.77.0.10:7000", &hello, &[], &names)).unwrap();
        assert_eq!(got.dst.host(), "echo.test");
    }

    fn input<'a>(
        original: &str,
        hello: &'a Hello,
        resolved: &'a [IpAddr],
        dns_names: &'a [String],
    ) -> TargetInput<'a> {
        TargetInput {
            original: addr(original),
            own_listeners: &[],
            hello,
            needs_name: true,
            resolved,
            dns_names,
        }
    }

    fn sni(n: &str) -> Hello {
        Hello::Tls {
            sni: Some(n.to_string()),
        }
    }

    #[test]
    fn every_refusal_before_policy_is_a_typed_code_answered_403() {
        let original: SocketAddr = "203.0.113.7:443".parse().unwrap();
        let refusals = [
            TargetRefusal::Loop { original },
            TargetRefusal::NoSni { original },
            TargetRefusal::NoName { original },
            TargetRefusal::Forged {
                name: "api.example.com".into(),
                claimed_by: NameSource::Sni,
                original,
                why: "it resolves elsewhere".into(),
            },
        ];
        let codes: Vec<_> = refusals.iter().map(TargetRefusal::code).collect();
        assert_eq!(
            codes,
            [
                "transparent_loop",
                "tls_sni_required",
                "host_name_required",
                "host_name_mismatch"
            ]
        );
        assert!(codes.iter().all(|c| c.status() == 403), "{codes:?}");
        assert_eq!(Code::NoOriginalDestination.status(), 400);
        assert_eq!(Code::MalformedClientHello.status(), 400);
    }

    #[test]
    fn a_name_stands_when_the_original_address_is_one_of_its_addresses() {
        let hello = sni("api.example.com");
        let resolved = [
            "203.0.113.9".parse().unwrap(),
            "203.0.113.7".parse().unwrap(),
        ];
        let t = decide_target(&input("203.0.113.7:443", &hello, &resolved, &[])).unwrap();
        assert_eq!(t.dst.to_string(), "api.example.com:443");
        assert_eq!(t.basis, NameBasis::Resolves(NameSource::Sni));
    }

    #[test]
    fn a_forged_sni_towards_another_address_is_refused_with_the_reason() {
        let hello = sni("api.example.com");
        let resolved = ["203.0.113.9".parse().unwrap()];
        let err = decide_target(&input("198.51.100.1:443", &hello, &resolved, &[])).unwrap_err();
        assert_eq!(err.code(), "host_name_mismatch");
        let text = err.to_string();
        assert!(
            text.contains("api.example.com") && text.contains("198.51.100.1"),
            "{text}"
        );
        assert!(text.contains("resolves to 203.0.113.9"), "{text}");
        // A name that does not resolve at all is no evidence either.
        let err = decide_target(&input("198.51.100.1:443", &hello, &[], &[])).unwrap_err();
        assert!(matches!(err, TargetRefusal::Forged { .. }));
    }

    #[test]
    fn the_policy_dns_vouches_for_the_names_it_handed_out() {
        let hello = Hello::Http {
            host: Some("echo.internal".to_string()),
        };
        let names = ["echo.internal".to_string()];
        let t = decide_target(&input("10.1.2.3:80", &hello, &[], &names)).unwrap();
        assert_eq!(t.basis, NameBasis::PolicyDns(NameSource::Host));
        // But not for a different name on that address.
        let other = Hello::Http {
            host: Some("other.internal".to_string()),
        };
        assert!(decide_target(&input("10.1.2.3:80", &other, &[], &names)).is_err());
    }

    #[test]
    fn raw_tcp_takes_the_name_the_policy_dns_handed_out() {
        let names = ["db.example.com".to_string(), "old.example.com".to_string()];
        let t = decide_target(&input("10.1.2.3:5432", &Hello::Opaque, &[], &names)).unwrap();
        assert_eq!(t.dst.host(), "db.example.com");
        assert_eq!(t.basis, NameBasis::PolicyDnsOnly);
        let err = decide_target(&input("10.1.2.3:5432", &Hello::Opaque, &[], &[])).unwrap_err();
        assert_eq!(err.code(), "host_name_required");
    }

    #[test]
    fn tls_without_sni_is_refused_where_a_name_is_needed() {
        let hello = Hello::Tls { sni: None };
        let err = decide_target(&input("203.0.113.7:443", &hello, &[], &[])).unwrap_err();
        assert_eq!(err.code(), "tls_sni_required");
        assert!(err.to_string().contains("no SNI"));
        // Where the policy allows the bare address, the address is the host.
        let mut i = input("203.0.113.7:443", &hello, &[], &[]);
        i.needs_name = false;
        let t = decide_target(&i).unwrap();
        assert_eq!((t.dst.host(), t.basis), ("203.0.113.7", NameBasis::Address));
    }

    #[test]
    fn connections_to_sluice_itself_are_refused_first() {
        let hello = sni("api.example.com");
        let resolved = ["127.0.0.1".parse().unwrap()];
        for (listener, original) in [
            ("127.0.0.1:3128", "127.0.0.1:3128"),
            ("0.0.0.0:15001", "10.0.0.5:15001"),
            ("127.0.0.1:3128", "127.0.0.2:3128"),
            ("[::]:15001", "[2001:db8::5]:15001"),
            ("[::1]:15053", "[::ffff:127.0.0.1]:15053"),
        ] {
            let own = [addr(listener)];
            let mut i = input(original, &hello, &resolved, &[]);
            i.own_listeners = &own;
            assert_eq!(
                decide_target(&i).unwrap_err(),
                TargetRefusal::Loop {
                    original: addr(original)
                },
                "{listener} {original}"
            );
        }
        // Same port on another host is not a loop.
        assert!(!is_own_listener(
            addr("203.0.113.7:3128"),
            &[addr("127.0.0.1:3128")]
        ));
        assert!(!is_own_listener(
            addr("[2001:db8::5]:3128"),
            &[addr("0.0.0.0:3128")]
        ));
    }

    #[test]
    fn mapped_and_plain_ipv4_are_the_same_address() {
        let hello = sni("a.example.com");
        let resolved = ["::ffff:203.0.113.7".parse().unwrap()];
        assert!(decide_target(&input("203.0.113.7:443", &hello, &resolved, &[])).is_ok());
    }
}
