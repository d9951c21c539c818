//! Which value a destination host or a calling executable is counted under. A sandboxed
//! program can make up any number of host names (a CONNECT each) and executable paths (a
//! copy of a binary each); if its denied attempts took label values first come, first
//! served, later real traffic would all land in `_other` and the dashboards and alerts would
//! go blind. So:
//!
//! - a host or executable the loaded policy names literally (an exact endpoint host, an exact
//!   binary path or its resolved target) is always its own label: the operator wrote it, so
//!   it is bounded by the configuration;
//! - any other one whose traffic was allowed (or audited and let through) takes one of the
//!   capped slots ([`super::bounded::Bounded`]: the first N distinct, then `_other`): only
//!   traffic the policy let through can fill them (a wildcard or `allowed_ips`-only entry);
//! - any other one whose traffic was denied counts under [`UNLISTED`], one fixed value.
//!
//! In a gateway, a host is its own label for a tenant's traffic only when that tenant's
//! policy names it (or the traffic was allowed): a tenant's denied attempts must not tell it,
//! through the labels, which hosts other tenants' policies name.
//!
//! The counts are the same as without this rule (one per audit event); only the label a
//! count goes under changes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::policy::Policy;
use crate::policy::glob::HostPattern;
use crate::policy::model::BinaryMatcher;

/// The label of denied traffic to a host, or from an executable, that no policy names.
pub const UNLISTED: &str = "_unlisted";

/// The hosts and executables the loaded policies name literally: hosts per policy (the local
/// one, and each gateway tenant's), executables all together (a tenant's traffic is labelled
/// by its tenant, not its executable).
#[derive(Debug, Default)]
pub struct Named {
    local_hosts: HashSet<String>,
    tenant_hosts: HashMap<String, HashSet<String>>,
    binaries: HashSet<String>,
}

impl Named {
    pub fn of(policy: &Policy) -> Named {
        Named::of_all([(None, policy)])
    }

    /// What each of `policies` names: `(tenant, policy)`, `None` for the local policy.
    pub fn of_all<'p>(policies: impl IntoIterator<Item = (Option<&'p str>, &'p Policy)>) -> Named {
        let mut named = Named::default();
        for (tenant, policy) in policies {
            let hosts = match tenant {
                None => &mut named.local_hosts,
                Some(t) => named.tenant_hosts.entry(t.to_owned()).or_default(),
            };
            for entry in policy.entries() {
                for ep in &entry.endpoints {
                    if let HostPattern::Exact(h) = &ep.host {
                        hosts.insert(h.clone());
                    }
                }
                for b in &entry.binaries {
                    if let BinaryMatcher::Exact(p) = &b.matcher {
                        named.binaries.insert(p.clone());
                    }
                }
            }
        }
        named
    }

    /// `host` as the policy spells it (lower case, no trailing dot), when the policy of
    /// `tenant` (`None`: the local one) names it.
    fn host(&self, tenant: Option<&str>, host: &str) -> Option<String> {
        let hosts = match tenant {
            None => &self.local_hosts,
            Some(t) => self.tenant_hosts.get(t)?,
        };
        let lower = host.to_ascii_lowercase();
        let canonical = match lower.strip_suffix('.') {
            Some(h) if !h.is_empty() => h.to_owned(),
            _ => lower,
        };
        hosts.contains(&canonical).then_some(canonical)
    }
}

/// The names of the policy in force, replaced at each load.
#[derive(Debug, Default)]
pub struct NamedNow(ArcSwap<Named>);

impl NamedNow {
    pub fn set(&self, named: Named) {
        self.0.store(Arc::new(named));
    }

    /// The host label of one decision (`allowed` false: denied) for traffic of `tenant`
    /// (`None`: not a gateway tenant's).
    pub fn host_label(
        &self,
        capped: &super::bounded::Bounded,
        host: &str,
        allowed: bool,
        tenant: Option<&str>,
    ) -> String {
        if host.is_empty() {
            return "_none".to_owned();
        }
        if let Some(h) = self.0.load().host(tenant, host) {
            return h;
        }
        if allowed {
            capped.label(host)
        } else {
            UNLISTED.to_owned()
        }
    }

    /// The executable label of one decision.
    pub fn binary_label(
        &self,
        capped: &super::bounded::Bounded,
        exe: &str,
        allowed: bool,
    ) -> String {
        if self.0.load().binaries.contains(exe) {
            return exe.to_owned();
        }
        if allowed {
            capped.label(exe)
        } else {
            UNLISTED.to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::bounded::{Bounded, OTHER};
    use super::*;
    use crate::policy::{Compat, Source, load};

    fn named() -> NamedNow {
        let policy = load(
            &[Source {
                name: "p.yaml".into(),
                text: "version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - { host: API.example.com, port: 443 }\n      - { host: \"*.wild.example.com\", port: 443 }\n    binaries:\n      - { path: /usr/bin/curl }\n      - { path: \"/opt/*/bin/tool\" }\n".into(),
            }],
            Compat::Strict,
        )
        .unwrap()
        .policy;
        let now = NamedNow::default();
        now.set(Named::of(&policy));
        now
    }

    #[test]
    fn named_values_always_have_their_label_and_denied_unknown_ones_share_one() {
        let n = named();
        let capped = Bounded::new(1);
        // Denied junk never takes the one capped slot.
        for junk in ["x1.evil", "x2.evil", "x3.evil"] {
            assert_eq!(n.host_label(&capped, junk, false, None), UNLISTED);
        }
        assert_eq!(
            n.host_label(&capped, "api.example.com", false, None),
            "api.example.com"
        );
        assert_eq!(
            n.host_label(&capped, "API.example.com.", true, None),
            "api.example.com"
        );
        // Allowed through the wildcard: the capped slot, then `_other`.
        assert_eq!(
            n.host_label(&capped, "a.wild.example.com", true, None),
            "a.wild.example.com"
        );
        assert_eq!(
            n.host_label(&capped, "b.wild.example.com", true, None),
            OTHER
        );
        assert_eq!(n.host_label(&capped, "", false, None), "_none");
        let capped = Bounded::new(1);
        assert_eq!(n.binary_label(&capped, "/tmp/copy1", false), UNLISTED);
        assert_eq!(
            n.binary_label(&capped, "/usr/bin/curl", false),
            "/usr/bin/curl"
        );
        assert_eq!(
            n.binary_label(&capped, "/opt/x/bin/tool", true),
            "/opt/x/bin/tool"
        );
        assert_eq!(n.binary_label(&capped, "/opt/y/bin/tool", true), OTHER);
    }

    #[test]
    fn a_tenant_learns_nothing_of_the_hosts_another_tenants_policy_names() {
        let policy = |host: &str| {
            load(
                &[Source {
                    name: "p.yaml".into(),
                    text: format!("version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - {{ host: {host}, port: 443 }}\n"),
                }],
                Compat::Strict,
            )
            .unwrap()
            .policy
        };
        let (alpha, beta) = (policy("alpha.test"), policy("beta.test"));
        let n = NamedNow::default();
        n.set(Named::of_all([
            (Some("alpha"), &alpha),
            (Some("beta"), &beta),
        ]));
        let capped = Bounded::new(4);
        // Alpha denied at beta's host: the same label as a made-up name.
        assert_eq!(
            n.host_label(&capped, "beta.test", false, Some("alpha")),
            UNLISTED
        );
        assert_eq!(
            n.host_label(&capped, "nosuch.test", false, Some("alpha")),
            UNLISTED
        );
        assert_eq!(
            n.host_label(&capped, "beta.test", false, Some("beta")),
            "beta.test"
        );
        assert_eq!(n.host_label(&capped, "alpha.test", false, None), UNLISTED);
    }
}
