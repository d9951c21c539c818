//! Destination plans and the SSRF check of resolved addresses (OpenShell semantics §6.4).
//!
//! The proxy picks a [`DestinationPlan`] from the policy match; [`vet`] checks **every**
//! resolved address against it (one bad address refuses the whole destination) and returns the
//! socket addresses that may be dialled, so the proxy pins them and never looks the name up a
//! second time. [`screen_host`] refuses well-known metadata host names before any lookup.
//!
//! This module decides nothing about whether a host is allowed by policy, and does no I/O.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use crate::class::{AddressClass, classify, is_local_loopback};

/// Ports of a cluster control plane: etcd client and peer, kube-apiserver, kubelet (read-write
/// and read-only). Refused for plans that may reach internal addresses.
pub const CONTROL_PLANE_PORTS: [u16; 5] = [2379, 2380, 6443, 10250, 10255];

/// Host names of cloud metadata services (compared case-insensitively, one trailing dot
/// tolerated). Their addresses are always blocked as well; the name check refuses them before
/// any lookup, including through a `--resolve` override.
const METADATA_HOSTS: [&str; 5] = [
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
];

/// How the addresses of one destination are vetted, chosen by the proxy from the policy match
/// in the precedence of §6.4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DestinationPlan {
    /// The matching endpoint has `allowed_ips`: every address must be inside one of `nets` and
    /// not always blocked. `has_invalid` (an entry that did not parse) refuses every address.
    ExplicitAllowedIps {
        /// The parsed `allowed_ips` entries.
        nets: Vec<IpNet>,
        /// At least one entry of `allowed_ips` was invalid.
        has_invalid: bool,
    },
    /// The target is an IP literal: the only address is that literal, and it must not be always
    /// blocked.
    ImplicitIpLiteral(IpAddr),
    /// The host is declared exactly by the policy: only always-blocked addresses are refused
    /// (private ranges are allowed).
    ExactDeclaredHost,
    /// Wildcard hosts and everything else: every address must be public.
    DefaultPublicOnly,
}

impl DestinationPlan {
    /// Whether [`CONTROL_PLANE_PORTS`] are refused under this plan. Not under
    /// [`DestinationPlan::DefaultPublicOnly`], which reaches public addresses only, nor under
    /// [`DestinationPlan::ImplicitIpLiteral`], where the policy names the exact address.
    pub fn blocks_control_plane_ports(&self) -> bool {
        matches!(
            self,
            Self::ExplicitAllowedIps { .. } | Self::ExactDeclaredHost
        )
    }
}

/// Operator switches that change the check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VetOptions {
    /// `--allow-loopback-upstream` (tests only): 127.0.0.0/8 and `::1` (and their IPv4-mapped
    /// forms) pass under every plan (under [`DestinationPlan::ExplicitAllowedIps`] they must
    /// still be inside `allowed_ips`). Link-local and metadata addresses are never allowed.
    pub allow_loopback: bool,
}

/// Why a destination was refused. `kind` is the reason clients and audit see (§9); `detail`
/// says which address failed and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {detail}")]
#[non_exhaustive]
pub struct Refusal {
    /// The reason, in the reference's words.
    pub kind: RefusalKind,
    /// The address that failed, if one did.
    pub address: Option<IpAddr>,
    /// The class of that address.
    pub class: Option<AddressClass>,
    /// A sentence for logs and audit events.
    pub detail: String,
}

/// The reasons a destination is refused. [`RefusalKind::as_str`] gives the `<kind>` of
/// `403 ssrf_denied` details (`CONNECT h:p blocked: <kind>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// An address is not public under [`DestinationPlan::DefaultPublicOnly`], or an IP literal
    /// is always blocked.
    InternalAddress,
    /// Under [`DestinationPlan::ExplicitAllowedIps`]: an address is outside every entry, or is
    /// always blocked.
    AllowedIpsCheckFailed,
    /// Under [`DestinationPlan::ExactDeclaredHost`]: an address is always blocked.
    DeclaredEndpointCheckFailed,
    /// The matching endpoint's `allowed_ips` has an entry that did not parse.
    InvalidAllowedIps,
    /// The host is a cloud metadata host name.
    MetadataHost,
    /// The host resolved to no address at all.
    NoAddresses,
    /// The port is a cluster control-plane port.
    ControlPlanePort,
    /// Under [`DestinationPlan::ImplicitIpLiteral`]: an address is not the literal itself.
    LiteralMismatch,
}

impl RefusalKind {
    /// The reason string (spec §6.4 and §9 where the reference has one).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InternalAddress => "internal address",
            Self::AllowedIpsCheckFailed => "allowed_ips check failed",
            Self::DeclaredEndpointCheckFailed => "declared endpoint check failed",
            Self::InvalidAllowedIps => "invalid allowed_ips in policy",
            Self::MetadataHost => "metadata host",
            Self::NoAddresses => "no addresses",
            Self::ControlPlanePort => "control-plane port",
            Self::LiteralMismatch => "IP literal mismatch",
        }
    }
}

impl fmt::Display for RefusalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Refusal {
    fn new(kind: RefusalKind, detail: String) -> Self {
        Self {
            kind,
            address: None,
            class: None,
            detail,
        }
    }

    fn for_address(kind: RefusalKind, ip: IpAddr, class: AddressClass, detail: String) -> Self {
        Self {
            kind,
            address: Some(ip),
            class: Some(class),
            detail,
        }
    }
}

/// True for a well-known cloud metadata host name (`metadata.google.internal`,
/// `metadata.goog`, `metadata`, `instance-data`, `instance-data.ec2.internal`), compared
/// case-insensitively with one trailing dot tolerated.
pub fn is_metadata_host(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    METADATA_HOSTS
        .iter()
        .any(|name| name.eq_ignore_ascii_case(host))
}

/// Refuses a metadata host name before it is looked up (no plan or override can allow one).
pub fn screen_host(host: &str) -> Result<(), Refusal> {
    if is_metadata_host(host) {
        return Err(Refusal::new(
            RefusalKind::MetadataHost,
            format!("`{host}` is a cloud metadata host name"),
        ));
    }
    Ok(())
}

/// Checks every address of one destination against its plan. Any bad address refuses the
/// whole destination; otherwise the socket addresses to dial are returned in the order given.
pub fn vet(
    plan: &DestinationPlan,
    addrs: &[IpAddr],
    port: u16,
    opts: VetOptions,
) -> Result<Vec<SocketAddr>, Refusal> {
    if let DestinationPlan::ExplicitAllowedIps {
        has_invalid: true, ..
    } = plan
    {
        return Err(Refusal::new(
            RefusalKind::InvalidAllowedIps,
            "the matching endpoint's allowed_ips has an entry that is not an IP address or CIDR"
                .to_owned(),
        ));
    }
    if plan.blocks_control_plane_ports() && CONTROL_PLANE_PORTS.contains(&port) {
        return Err(Refusal::new(
            RefusalKind::ControlPlanePort,
            format!("port {port} is a cluster control-plane port (etcd, kube-apiserver, kubelet)"),
        ));
    }
    if addrs.is_empty() {
        return Err(Refusal::new(
            RefusalKind::NoAddresses,
            "the host resolved to no addresses".to_owned(),
        ));
    }
    for &ip in addrs {
        vet_address(plan, ip, opts)?;
    }
    Ok(addrs.iter().map(|&ip| SocketAddr::new(ip, port)).collect())
}

fn vet_address(plan: &DestinationPlan, ip: IpAddr, opts: VetOptions) -> Result<(), Refusal> {
    let class = classify(ip);
    let loopback_allowed = opts.allow_loopback && is_local_loopback(ip);
    let blocked = match class {
        AddressClass::AlwaysBlocked(name) if !loopback_allowed => Some(name),
        _ => None,
    };
    match plan {
        DestinationPlan::ExplicitAllowedIps { nets, .. } => {
            let kind = RefusalKind::AllowedIpsCheckFailed;
            if let Some(name) = blocked {
                let detail =
                    format!("{ip} is always blocked ({name}); allowed_ips cannot permit it");
                return Err(Refusal::for_address(kind, ip, class, detail));
            }
            // An allowed_ips entry also covers the IPv4-mapped form of its addresses.
            let canonical = ip.to_canonical();
            if !nets
                .iter()
                .any(|net| net.contains(&ip) || net.contains(&canonical))
            {
                let detail = format!("{ip} is not inside any allowed_ips entry");
                return Err(Refusal::for_address(kind, ip, class, detail));
            }
        }
        DestinationPlan::ImplicitIpLiteral(literal) => {
            if ip != *literal {
                let detail = format!("{ip} is not the IP literal {literal}");
                return Err(Refusal::for_address(
                    RefusalKind::LiteralMismatch,
                    ip,
                    class,
                    detail,
                ));
            }
            if let Some(name) = blocked {
                let detail = format!("{ip} is always blocked ({name})");
                return Err(Refusal::for_address(
                    RefusalKind::InternalAddress,
                    ip,
                    class,
                    detail,
                ));
            }
        }
        DestinationPlan::ExactDeclaredHost => {
            if let Some(name) = blocked {
                let detail = format!("{ip} is always blocked ({name})");
                return Err(Refusal::for_address(
                    RefusalKind::DeclaredEndpointCheckFailed,
                    ip,
                    class,
                    detail,
                ));
            }
        }
        DestinationPlan::DefaultPublicOnly => {
            // --allow-loopback-upstream (tests) lets loopback through under every plan, so a
            // wildcard host can be tested against a local origin.
            if !class.is_public() && !loopback_allowed {
                let detail = format!("{ip} is {class}");
                return Err(Refusal::for_address(
                    RefusalKind::InternalAddress,
                    ip,
                    class,
                    detail,
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUBLIC: &str = "93.184.215.14";
    const PUBLIC6: &str = "2606:4700:4700::1111";

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn nets(list: &[&str]) -> DestinationPlan {
        DestinationPlan::ExplicitAllowedIps {
            nets: list.iter().map(|s| s.parse().unwrap()).collect(),
            has_invalid: false,
        }
    }

    fn lit(s: &str) -> DestinationPlan {
        DestinationPlan::ImplicitIpLiteral(s.parse().unwrap())
    }

    const OFF: VetOptions = VetOptions {
        allow_loopback: false,
    };
    const ON: VetOptions = VetOptions {
        allow_loopback: true,
    };

    #[track_caller]
    fn refused(plan: &DestinationPlan, addrs: &[&str], port: u16, opts: VetOptions) -> Refusal {
        match vet(plan, &ips(addrs), port, opts) {
            Ok(ok) => panic!("{plan:?} {addrs:?}:{port} should be refused, got {ok:?}"),
            Err(refusal) => refusal,
        }
    }

    #[track_caller]
    fn allowed(plan: &DestinationPlan, addrs: &[&str], port: u16, opts: VetOptions) {
        let got = vet(plan, &ips(addrs), port, opts)
            .unwrap_or_else(|r| panic!("{plan:?} {addrs:?}:{port} refused: {r}"));
        let want: Vec<SocketAddr> = ips(addrs)
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn default_public_only_needs_every_address_public() {
        let plan = DestinationPlan::DefaultPublicOnly;
        allowed(&plan, &[PUBLIC, PUBLIC6], 443, OFF);
        // One bad address among good ones refuses the destination, wherever it is.
        for bad in [
            "10.0.0.1",
            "127.0.0.1",
            "169.254.169.254",
            "fd00::1",
            "::ffff:10.0.0.1",
        ] {
            for addrs in [
                [PUBLIC, bad, PUBLIC6],
                [bad, PUBLIC, PUBLIC6],
                [PUBLIC, PUBLIC6, bad],
            ] {
                let r = refused(&plan, &addrs, 443, OFF);
                assert_eq!(r.kind, RefusalKind::InternalAddress);
                assert_eq!(r.address, Some(bad.parse().unwrap()));
            }
        }
        let r = refused(&plan, &[PUBLIC, "10.1.2.3"], 443, OFF);
        assert_eq!(r.detail, "10.1.2.3 is internal (private 10.0.0.0/8)");
        assert_eq!(r.class, Some(AddressClass::Internal("private 10.0.0.0/8")));
        assert_eq!(
            r.to_string(),
            "internal address: 10.1.2.3 is internal (private 10.0.0.0/8)"
        );
    }

    #[test]
    fn default_public_only_with_allow_loopback_and_control_plane_ports() {
        let plan = DestinationPlan::DefaultPublicOnly;
        let r = refused(&plan, &["127.0.0.1"], 8080, OFF);
        assert_eq!(r.kind, RefusalKind::InternalAddress);
        assert_eq!(r.detail, "127.0.0.1 is always blocked (loopback)");
        allowed(&plan, &["127.0.0.1", "::1"], 8080, ON);
        refused(&plan, &["169.254.169.254"], 8080, ON);
        refused(&plan, &["10.0.0.1"], 8080, ON);
        for port in CONTROL_PLANE_PORTS {
            allowed(&plan, &[PUBLIC], port, OFF);
        }
    }

    #[test]
    fn exact_declared_host_refuses_only_always_blocked() {
        let plan = DestinationPlan::ExactDeclaredHost;
        allowed(
            &plan,
            &["10.0.0.1", "192.168.1.1", "fd00::1", PUBLIC],
            443,
            OFF,
        );
        for bad in [
            "127.0.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            let r = refused(&plan, &["10.0.0.1", bad], 443, OFF);
            assert_eq!(r.kind, RefusalKind::DeclaredEndpointCheckFailed, "{bad}");
            assert_eq!(r.address, Some(bad.parse().unwrap()));
        }
        let r = refused(&plan, &["169.254.169.254"], 80, OFF);
        assert_eq!(
            r.to_string(),
            "declared endpoint check failed: 169.254.169.254 is always blocked \
             (link-local (cloud metadata))"
        );
    }

    #[test]
    fn exact_declared_host_with_allow_loopback() {
        let plan = DestinationPlan::ExactDeclaredHost;
        allowed(&plan, &["127.0.0.1", "::1", "::ffff:127.0.0.2"], 8080, ON);
        refused(&plan, &["127.0.0.1"], 8080, OFF);
        // Only loopback is relaxed: link-local, metadata, unspecified and NAT64-of-loopback are not.
        for bad in [
            "169.254.169.254",
            "fd00:ec2::254",
            "0.0.0.0",
            "::",
            "64:ff9b::7f00:1",
        ] {
            let r = refused(&plan, &["127.0.0.1", bad], 8080, ON);
            assert_eq!(r.kind, RefusalKind::DeclaredEndpointCheckFailed, "{bad}");
        }
    }

    #[test]
    fn explicit_allowed_ips_needs_every_address_inside() {
        let plan = nets(&["10.0.0.0/8", "2001:db8::/32", "203.0.113.7/32"]);
        allowed(&plan, &["10.1.2.3", "2001:db8::5", "203.0.113.7"], 443, OFF);
        // The IPv4-mapped form of an allowed address is allowed too.
        allowed(&plan, &["::ffff:10.9.9.9"], 443, OFF);
        let r = refused(&plan, &["10.1.2.3", "203.0.113.8"], 443, OFF);
        assert_eq!(r.kind, RefusalKind::AllowedIpsCheckFailed);
        assert_eq!(r.detail, "203.0.113.8 is not inside any allowed_ips entry");
        // Public addresses need to be listed too.
        refused(&plan, &[PUBLIC], 443, OFF);
    }

    #[test]
    fn explicit_allowed_ips_never_permit_always_blocked() {
        let plan = nets(&["0.0.0.0/0", "::/0"]);
        allowed(&plan, &[PUBLIC, "10.0.0.1"], 443, OFF);
        for bad in [
            "127.0.0.1",
            "169.254.169.254",
            "::1",
            "fe80::1",
            "224.0.0.1",
        ] {
            let r = refused(&plan, &[PUBLIC, bad], 443, OFF);
            assert_eq!(r.kind, RefusalKind::AllowedIpsCheckFailed, "{bad}");
        }
        let r = refused(&plan, &["127.0.0.1"], 443, OFF);
        assert_eq!(
            r.detail,
            "127.0.0.1 is always blocked (loopback); allowed_ips cannot permit it"
        );
    }

    #[test]
    fn cloud_metadata_is_refused_under_every_plan_and_switch() {
        use crate::class::CLOUD_METADATA_ADDRESSES;
        for &ip in CLOUD_METADATA_ADDRESSES {
            let mut forms = vec![ip];
            if let IpAddr::V4(v4) = ip {
                forms.push(IpAddr::V6(v4.to_ipv6_mapped()));
            }
            for ip in forms {
                let text = ip.to_string();
                let plans = [
                    nets(&["0.0.0.0/0", "::/0"]),
                    DestinationPlan::ImplicitIpLiteral(ip),
                    DestinationPlan::ExactDeclaredHost,
                    DestinationPlan::DefaultPublicOnly,
                ];
                for plan in &plans {
                    for opts in [OFF, ON] {
                        let r = refused(plan, &[&text], 80, opts);
                        assert!(
                            r.class.is_some_and(AddressClass::is_always_blocked),
                            "{text} under {plan:?}: {r:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn explicit_allowed_ips_with_allow_loopback() {
        let plan = nets(&["127.0.0.1/32"]);
        allowed(&plan, &["127.0.0.1"], 8080, ON);
        refused(&plan, &["127.0.0.1"], 8080, OFF);
        // Loopback still has to be inside allowed_ips.
        let r = refused(&plan, &["127.0.0.2"], 8080, ON);
        assert_eq!(r.detail, "127.0.0.2 is not inside any allowed_ips entry");
        let r = refused(&nets(&["169.254.0.0/16"]), &["169.254.169.254"], 80, ON);
        assert_eq!(r.kind, RefusalKind::AllowedIpsCheckFailed);
    }

    #[test]
    fn invalid_allowed_ips_refuse_everything() {
        let plan = DestinationPlan::ExplicitAllowedIps {
            nets: vec!["0.0.0.0/0".parse().unwrap()],
            has_invalid: true,
        };
        for opts in [OFF, ON] {
            let r = refused(&plan, &[PUBLIC], 443, opts);
            assert_eq!(r.kind, RefusalKind::InvalidAllowedIps);
            assert_eq!(r.kind.as_str(), "invalid allowed_ips in policy");
            assert_eq!(r.address, None);
        }
    }

    #[test]
    fn implicit_ip_literal() {
        allowed(&lit("10.0.0.1"), &["10.0.0.1"], 443, OFF);
        allowed(&lit(PUBLIC), &[PUBLIC], 443, OFF);
        let r = refused(&lit("127.0.0.1"), &["127.0.0.1"], 443, OFF);
        assert_eq!(r.kind, RefusalKind::InternalAddress);
        allowed(&lit("127.0.0.1"), &["127.0.0.1"], 443, ON);
        allowed(&lit("::1"), &["::1"], 443, ON);
        for bad in ["169.254.169.254", "0.0.0.0", "::", "fe80::1"] {
            let r = refused(&lit(bad), &[bad], 80, ON);
            assert_eq!(r.kind, RefusalKind::InternalAddress, "{bad}");
        }
        let r = refused(&lit("10.0.0.1"), &["10.0.0.1", "10.0.0.2"], 443, OFF);
        assert_eq!(r.kind, RefusalKind::LiteralMismatch);
        assert_eq!(r.detail, "10.0.0.2 is not the IP literal 10.0.0.1");
        // The literal names the exact address, so control-plane ports are not refused.
        allowed(&lit("10.0.0.1"), &["10.0.0.1"], 6443, OFF);
    }

    #[test]
    fn control_plane_ports() {
        for plan in [nets(&["10.0.0.0/8"]), DestinationPlan::ExactDeclaredHost] {
            for port in CONTROL_PLANE_PORTS {
                let r = refused(&plan, &["10.0.0.1"], port, OFF);
                assert_eq!(r.kind, RefusalKind::ControlPlanePort);
                assert_eq!(r.kind.as_str(), "control-plane port");
            }
            for port in [2378, 2381, 6442, 6444, 10249, 10251, 10254, 10256, 443] {
                allowed(&plan, &["10.0.0.1"], port, OFF);
            }
        }
        let r = refused(&DestinationPlan::ExactDeclaredHost, &[PUBLIC], 6443, OFF);
        assert_eq!(
            r.detail,
            "port 6443 is a cluster control-plane port (etcd, kube-apiserver, kubelet)"
        );
    }

    #[test]
    fn no_addresses() {
        for plan in [
            DestinationPlan::DefaultPublicOnly,
            DestinationPlan::ExactDeclaredHost,
            nets(&["0.0.0.0/0"]),
            lit(PUBLIC),
        ] {
            let r = refused(&plan, &[], 443, OFF);
            assert_eq!(r.kind, RefusalKind::NoAddresses);
            assert_eq!(
                r.to_string(),
                "no addresses: the host resolved to no addresses"
            );
        }
    }

    #[test]
    fn refusal_kind_strings() {
        let all = [
            (RefusalKind::InternalAddress, "internal address"),
            (
                RefusalKind::AllowedIpsCheckFailed,
                "allowed_ips check failed",
            ),
            (
                RefusalKind::DeclaredEndpointCheckFailed,
                "declared endpoint check failed",
            ),
            (
                RefusalKind::InvalidAllowedIps,
                "invalid allowed_ips in policy",
            ),
            (RefusalKind::MetadataHost, "metadata host"),
            (RefusalKind::NoAddresses, "no addresses"),
            (RefusalKind::ControlPlanePort, "control-plane port"),
            (RefusalKind::LiteralMismatch, "IP literal mismatch"),
        ];
        for (kind, text) in all {
            assert_eq!(kind.to_string(), text);
        }
    }

    #[test]
    fn metadata_hosts() {
        for host in [
            "metadata.google.internal",
            "METADATA.Google.Internal.",
            "metadata.goog",
            "metadata",
            "Metadata.",
            "instance-data",
            "instance-data.ec2.internal",
            "INSTANCE-DATA.EC2.INTERNAL.",
        ] {
            assert!(is_metadata_host(host), "{host}");
        }
        for host in [
            "metadata.google.internal..",
            "metadata.google.internal.example.com",
            "xmetadata",
            "metadata.example.com",
            "instance-data.ec2",
            "",
            ".",
        ] {
            assert!(!is_metadata_host(host), "{host}");
        }
        let r = screen_host("metadata.google.internal").unwrap_err();
        assert_eq!(r.kind, RefusalKind::MetadataHost);
        assert_eq!(
            r.to_string(),
            "metadata host: `metadata.google.internal` is a cloud metadata host name"
        );
        assert!(screen_host("api.github.com").is_ok());
    }
}
