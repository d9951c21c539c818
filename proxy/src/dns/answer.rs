//! One question to the policy DNS, decided: which names may be answered (policy), with which
//! addresses (the real resolver, then the SSRF check), and what to remember.
//!
//! A name is answerable when some endpoint of some policy entry, on any port and for any
//! binary, has a host pattern that matches it: the policy DNS cannot know which program asks
//! or where it will connect, and the connection itself is judged later in full. The
//! addresses go through the same destination plan and check as a connection to that name
//! (`pipeline::upstream::destination::plan_for`, `sluice_resolver::vet`), so an allowed name whose DNS
//! points at a private, loopback or metadata address is refused here too. Everything else
//! is `REFUSED`, and nothing about a refused name is ever sent to a real resolver.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_resolver::{DestinationPlan, Resolver, ResolverError, VetOptions};

use super::table::HandedOut;
use crate::policy::decide::Admission;
use crate::policy::{Compat, EndpointRef, Policy, canon};

/// The record types the policy DNS answers with addresses; other types of an answerable
/// name get an empty answer (`NOERROR`, no records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressType {
    A,
    Aaaa,
    /// Any other type (MX, TXT, HTTPS, ...): answered empty.
    Other,
}

/// What to reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `NOERROR` with these addresses (possibly none) and this TTL; `entry` is the policy
    /// entry whose endpoint matched first.
    Answer {
        addrs: Vec<IpAddr>,
        ttl: Duration,
        entry: String,
    },
    /// `NXDOMAIN`: an answerable name that does not exist.
    NxDomain { entry: String },
    /// `SERVFAIL`: the lookup failed or timed out.
    ServFail { entry: String, reason: String },
    /// `REFUSED`: not a name any policy allows, or its addresses fail the SSRF check.
    Refused {
        entry: Option<String>,
        reason: String,
    },
}

/// The current policy, as the proxy holds it (reloads take effect on the next question).
pub type PolicySource = Arc<dyn Fn() -> Arc<Policy> + Send + Sync>;

/// Everything a question needs.
#[derive(Clone)]
pub struct Responder {
    pub policy: PolicySource,
    pub resolver: Resolver,
    pub compat: Compat,
    pub vet: VetOptions,
    pub table: Arc<HandedOut>,
    /// The TTL of every answer (the resolver does not report the upstream one).
    pub ttl: Duration,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("compat", &self.compat)
            .field("vet", &self.vet)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// The default TTL of answers: short, so a policy change or an upstream move is seen soon.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The endpoints whose host pattern matches `name` on any port, in entry-key order, and the
/// destination plan a connection to `name` would get. `None`: no endpoint matches.
pub fn answerable(
    policy: &Policy,
    name: &str,
    compat: Compat,
) -> Option<(String, DestinationPlan)> {
    let mut endpoints: Vec<EndpointRef> = Vec::new();
    for (ei, entry) in policy.entries().iter().enumerate() {
        for (pi, ep) in entry.endpoints.iter().enumerate() {
            if ep.host.is_match(name) {
                endpoints.push(EndpointRef {
                    entry: u32::try_from(ei).unwrap_or(u32::MAX),
                    endpoint: u32::try_from(pi).unwrap_or(u32::MAX),
                });
            }
        }
    }
    let first = *endpoints.first()?;
    let entry = policy.entry_of(first).key.clone();
    let admission = Admission {
        entry: entry.clone(),
        endpoint: first,
        endpoints,
    };
    let plan = crate::pipeline::upstream::destination::plan_for(policy, &admission, name, compat);
    Some((entry.to_string(), plan))
}

impl Responder {
    /// Decides one question. `qname` is the name as asked (any case, trailing dot or not).
    pub async fn reply(&self, qname: &str, qtype: AddressType) -> Reply {
        let name = match canon::normalize_host(qname) {
            Ok(n) if n.parse::<IpAddr>().is_err() => n,
            _ => {
                return Reply::Refused {
                    entry: None,
                    reason: format!("`{qname}` is not a host name a policy can allow"),
                };
            }
        };
        if let Err(refusal) = sluice_resolver::screen_host(&name) {
            return Reply::Refused {
                entry: None,
                reason: refusal.to_string(),
            };
        }
        let policy = (self.policy)();
        let Some((entry, plan)) = answerable(&policy, &name, self.compat) else {
            return Reply::Refused {
                entry: None,
                reason: format!("no policy endpoint allows `{name}`"),
            };
        };
        drop(policy);
        if qtype == AddressType::Other {
            return Reply::Answer {
                addrs: Vec::new(),
                ttl: self.ttl,
                entry,
            };
        }
        let addrs = match self.resolver.resolve(&name).await {
            Ok(a) => a,
            Err(ResolverError::NotFound { .. }) => return Reply::NxDomain { entry },
            Err(ResolverError::NoRecords { .. }) => {
                return Reply::Answer {
                    addrs: Vec::new(),
                    ttl: self.ttl,
                    entry,
                };
            }
            Err(e) => {
                return Reply::ServFail {
                    entry,
                    reason: e.to_string(),
                };
            }
        };
        // Every address of the name is checked, as for a connection: one bad address refuses
        // the name (the port is not known here; control-plane ports are refused at connect).
        if let Err(refusal) = sluice_resolver::vet(&plan, &addrs, 0, self.vet) {
            return Reply::Refused {
                entry: Some(entry),
                reason: format!("`{name}` resolves to an address sluice may not dial: {refusal}"),
            };
        }
        let addrs: Vec<IpAddr> = addrs
            .into_iter()
            .filter(|ip| match qtype {
                AddressType::A => ip.to_canonical().is_ipv4(),
                AddressType::Aaaa => ip.to_canonical().is_ipv6(),
                AddressType::Other => false,
            })
            .collect();
        self.table.record(&name, &addrs, self.ttl, Instant::now());
        Reply::Answer {
            addrs,
            ttl: self.ttl,
            entry,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Source, load};

    fn policy(yaml: &str) -> Arc<Policy> {
        let loaded = load(
            &[Source {
                name: "p.yaml".into(),
                text: yaml.into(),
            }],
            Compat::Strict,
        )
        .unwrap();
        Arc::new(loaded.policy)
    }

    const POLICY: &str = r#"
version: 1
network_policies:
  api:
    name: api
    endpoints:
      - { host: api.example.com, port: 443 }
      - { host: "*.svc.example.com", port: 5432, protocol: tcp }
      - { host: private.example.com, port: 443, allowed_ips: ["10.0.0.0/8"] }
      - { host: loop.example.com, port: 443 }
      - { host: meta.example.com, port: 443 }
    binaries:
      - { path: /usr/bin/curl }
"#;

    fn responder(allow_loopback: bool) -> Responder {
        let p = policy(POLICY);
        let overrides = sluice_resolver::Overrides::from_args(&[
            "api.example.com=93.184.215.7,2606:2800:21f::7".to_string(),
            "db.svc.example.com=93.184.215.8".to_string(),
            "private.example.com=10.1.2.3".to_string(),
            "loop.example.com=127.0.0.1".to_string(),
            "meta.example.com=169.254.169.254".to_string(),
            "other.example.org=93.184.215.9".to_string(),
        ])
        .unwrap();
        Responder {
            policy: Arc::new(move || Arc::clone(&p)),
            resolver: Resolver::overrides_only(overrides),
            compat: Compat::Strict,
            vet: VetOptions { allow_loopback },
            table: Arc::new(HandedOut::default()),
            ttl: DEFAULT_TTL,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn allowed_names_get_their_vetted_addresses_and_are_remembered() {
        let r = responder(false);
        let got = r.reply("API.example.com.", AddressType::A).await;
        assert_eq!(
            got,
            Reply::Answer {
                addrs: vec![ip("93.184.215.7")],
                ttl: DEFAULT_TTL,
                entry: "api".into()
            }
        );
        let got = r.reply("api.example.com", AddressType::Aaaa).await;
        assert!(
            matches!(got, Reply::Answer { ref addrs, .. } if addrs == &[ip("2606:2800:21f::7")])
        );
        let now = Instant::now();
        assert_eq!(
            r.table.names_for(ip("93.184.215.7"), now),
            ["api.example.com"]
        );
        assert_eq!(
            r.table.names_for(ip("2606:2800:21f::7"), now),
            ["api.example.com"]
        );
        // Wildcard patterns and `protocol: tcp` endpoints count.
        let got = r.reply("db.svc.example.com", AddressType::A).await;
        assert!(matches!(got, Reply::Answer { ref addrs, .. } if addrs == &[ip("93.184.215.8")]));
        // allowed_ips lets a private answer through.
        let got = r.reply("private.example.com", AddressType::A).await;
        assert!(matches!(got, Reply::Answer { ref addrs, .. } if addrs == &[ip("10.1.2.3")]));
    }

    #[tokio::test]
    async fn names_no_policy_allows_are_refused_without_a_lookup() {
        let r = responder(false);
        let got = r.reply("other.example.org", AddressType::A).await;
        assert!(
            matches!(&got, Reply::Refused { entry: None, reason } if reason.contains("no policy endpoint")),
            "{got:?}"
        );
        // The wildcard needs a label in its place.
        assert!(matches!(
            r.reply("svc.example.com", AddressType::A).await,
            Reply::Refused { .. }
        ));
        assert!(matches!(
            r.reply("metadata.google.internal", AddressType::A).await,
            Reply::Refused { .. }
        ));
        assert!(matches!(
            r.reply("93.184.215.7", AddressType::A).await,
            Reply::Refused { .. }
        ));
        assert!(r.table.is_empty());
    }

    #[tokio::test]
    async fn allowed_names_that_point_inside_are_refused_as_connections_would_be() {
        let r = responder(false);
        for name in ["loop.example.com", "meta.example.com"] {
            let got = r.reply(name, AddressType::A).await;
            assert!(
                matches!(&got, Reply::Refused { entry: Some(e), reason } if e == "api" && reason.contains("may not dial")),
                "{name}: {got:?}"
            );
        }
        // --allow-loopback-upstream (tests) lets loopback through, as it does for connections;
        // metadata stays refused.
        let r = responder(true);
        assert!(matches!(
            r.reply("loop.example.com", AddressType::A).await,
            Reply::Answer { .. }
        ));
        assert!(matches!(
            r.reply("meta.example.com", AddressType::A).await,
            Reply::Refused { .. }
        ));
        assert!(
            r.table
                .names_for(ip("169.254.169.254"), Instant::now())
                .is_empty()
        );
    }

    #[tokio::test]
    async fn other_types_of_allowed_names_are_answered_empty() {
        let r = responder(false);
        assert_eq!(
            r.reply("api.example.com", AddressType::Other).await,
            Reply::Answer {
                addrs: vec![],
                ttl: DEFAULT_TTL,
                entry: "api".into()
            }
        );
    }
}
