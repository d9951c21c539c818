//! Address classes for the SSRF check (OpenShell semantics §6.4).
//!
//! This module owns the one table that says which addresses are never dialable
//! ([`AddressClass::AlwaysBlocked`]), which are internal ([`AddressClass::Internal`]) and which
//! are public. It is pure: no lookups, no policy. How a class turns into a decision for one
//! destination is [`crate::vet`]'s job.
//!
//! An IPv6 address that carries an IPv4 address ([`crate::embedded`]: mapped, SIIT-translated,
//! IPv4-compatible, NAT64, 6to4, Teredo, ISATAP) takes the strictest of its own class and the
//! classes of every IPv4 address it carries: a dual-stack socket connecting to
//! `::ffff:127.0.0.1`, or a translator handed `::ffff:0:127.0.0.1`, reaches the local host, so
//! no such form can be used to reach a private or metadata address. NAT64's local-use prefix
//! `64:ff9b:1::/48` is always blocked as a whole: where its IPv4 address sits depends on the
//! translator's prefix length (RFC 6052 §2.2), which the address does not say.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::embedded;

/// The class of one address, with a short human name of the range it falls in.
///
/// The name (`"loopback"`, `"link-local (cloud metadata)"`, `"private 10.0.0.0/8"`, ...) is for
/// logs, audit events and refusal details; decisions use the variant only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressClass {
    /// Never dialled, whatever the policy says: loopback, link-local (cloud metadata),
    /// unspecified, multicast, broadcast and known metadata service addresses.
    AlwaysBlocked(&'static str),
    /// Private, shared, documentation and benchmarking ranges: dialled only when the policy
    /// names the destination (a declared host, an IP literal or `allowed_ips`).
    Internal(&'static str),
    /// Everything else.
    Public,
}

impl AddressClass {
    /// The human name of the range, or `None` for [`AddressClass::Public`].
    pub fn range_name(self) -> Option<&'static str> {
        match self {
            Self::AlwaysBlocked(name) | Self::Internal(name) => Some(name),
            Self::Public => None,
        }
    }

    /// True for [`AddressClass::AlwaysBlocked`].
    pub fn is_always_blocked(self) -> bool {
        matches!(self, Self::AlwaysBlocked(_))
    }

    /// True for [`AddressClass::Public`].
    pub fn is_public(self) -> bool {
        matches!(self, Self::Public)
    }

    /// How much the class forbids: always blocked over internal over public.
    fn strictness(self) -> u8 {
        match self {
            Self::AlwaysBlocked(_) => 2,
            Self::Internal(_) => 1,
            Self::Public => 0,
        }
    }

    /// The stricter of two classes; `self` on a tie.
    fn stricter(self, other: Self) -> Self {
        if other.strictness() > self.strictness() {
            other
        } else {
            self
        }
    }
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AlwaysBlocked(name) => write!(f, "always blocked ({name})"),
            Self::Internal(name) => write!(f, "internal ({name})"),
            Self::Public => f.write_str("public"),
        }
    }
}

/// The cloud metadata and link-local service addresses of the major providers, for tests that
/// check each is always blocked whatever a plan or an operator switch says. Every entry is
/// inside an always-blocked row of the tables below (`169.254.0.0/16` or a row of its own).
pub const CLOUD_METADATA_ADDRESSES: &[IpAddr] = &[
    // AWS, Azure, Google Cloud, DigitalOcean, OpenStack, IBM, Hetzner instance metadata.
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)),
    IpAddr::V6(Ipv6Addr::new(0xfd20, 0x00ce, 0, 0, 0, 0, 0, 0x0254)),
    // AWS ECS task metadata and credentials, AWS DNS and time sync (IPv4 and IPv6).
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 2)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 253)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 123)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0253)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0123)),
    // Alibaba Cloud, Oracle Cloud, Azure wire server, Tencent Cloud.
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V4(Ipv4Addr::new(192, 0, 0, 192)),
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 0, 23)),
];

/// Classifies one address. Pure and allocation-free.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

// === IPv4 ===

/// One row of a range table: network bits, prefix length, class.
struct Range<T> {
    net: T,
    prefix: u32,
    class: AddressClass,
}

use AddressClass::{AlwaysBlocked, Internal};

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u32, class: AddressClass) -> Range<u32> {
    Range {
        net: u32::from_be_bytes([a, b, c, d]),
        prefix,
        class,
    }
}

/// First match wins, so the narrow metadata rows come before the ranges that contain them.
const V4_RANGES: &[Range<u32>] = &[
    // Always blocked.
    v4(0, 0, 0, 0, 32, AlwaysBlocked("unspecified")),
    v4(0, 0, 0, 0, 8, AlwaysBlocked("this network 0.0.0.0/8")),
    v4(127, 0, 0, 0, 8, AlwaysBlocked("loopback")),
    v4(
        169,
        254,
        0,
        0,
        16,
        AlwaysBlocked("link-local (cloud metadata)"),
    ),
    // Metadata services that live outside 169.254/16.
    v4(
        100,
        100,
        100,
        200,
        32,
        AlwaysBlocked("cloud metadata (Alibaba Cloud)"),
    ),
    v4(
        192,
        0,
        0,
        192,
        32,
        AlwaysBlocked("cloud metadata (Oracle Cloud)"),
    ),
    // Azure's wire server (VM agent, DHCP, DNS, health probes): a public address that answers
    // only inside Azure, where it hands out VM configuration and extension settings.
    v4(
        168,
        63,
        129,
        16,
        32,
        AlwaysBlocked("cloud metadata (Azure wire server)"),
    ),
    v4(224, 0, 0, 0, 4, AlwaysBlocked("multicast")),
    v4(255, 255, 255, 255, 32, AlwaysBlocked("broadcast")),
    // Internal.
    v4(10, 0, 0, 0, 8, Internal("private 10.0.0.0/8")),
    v4(
        100,
        64,
        0,
        0,
        10,
        Internal("shared address space 100.64.0.0/10"),
    ),
    v4(172, 16, 0, 0, 12, Internal("private 172.16.0.0/12")),
    v4(
        192,
        0,
        0,
        0,
        24,
        Internal("IETF protocol assignments 192.0.0.0/24"),
    ),
    v4(192, 0, 2, 0, 24, Internal("documentation 192.0.2.0/24")),
    v4(192, 168, 0, 0, 16, Internal("private 192.168.0.0/16")),
    v4(198, 18, 0, 0, 15, Internal("benchmarking 198.18.0.0/15")),
    v4(
        198,
        51,
        100,
        0,
        24,
        Internal("documentation 198.51.100.0/24"),
    ),
    v4(203, 0, 113, 0, 24, Internal("documentation 203.0.113.0/24")),
    v4(240, 0, 0, 0, 4, Internal("reserved 240.0.0.0/4")),
];

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let bits = u32::from(ip);
    V4_RANGES
        .iter()
        .find(|range| {
            // `checked_shl` covers prefix 0 (a shift by 32 would overflow).
            let mask = u32::MAX.checked_shl(32 - range.prefix).unwrap_or(0);
            bits & mask == range.net
        })
        .map_or(AddressClass::Public, |range| range.class)
}

// === IPv6 ===

const fn v6(segments: [u16; 8], prefix: u32, class: AddressClass) -> Range<u128> {
    let [a, b, c, d, e, f, g, h] = segments;
    Range {
        net: u128::from_be_bytes(Ipv6Addr::new(a, b, c, d, e, f, g, h).octets()),
        prefix,
        class,
    }
}

/// The IPv6 address's own class; [`classify_v6`] combines it with the classes of the IPv4
/// addresses it carries.
const V6_RANGES: &[Range<u128>] = &[
    // Always blocked.
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, AlwaysBlocked("unspecified")),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, AlwaysBlocked("loopback")),
    // `::a.b.c.d` (RFC 4291 §2.5.5.1): deprecated, never a legitimate destination. The IPv4
    // address it carries names the range when that is always blocked too.
    v6(
        [0, 0, 0, 0, 0, 0, 0, 0],
        96,
        AlwaysBlocked("IPv4-compatible ::/96"),
    ),
    // NAT64 local-use (RFC 8215): the IPv4 address sits at bits 48, 56, 72 or 96 depending on
    // the translator's prefix length (RFC 6052 §2.2), which the address does not say. Every
    // candidate position would have to be judged, and for nearly every address one of them
    // holds 0.x.x.x (zero prefix or suffix bits), so the range is refused whole: fail closed.
    v6(
        [0x0064, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
        AlwaysBlocked("local-use NAT64 64:ff9b:1::/48 (embedded IPv4 position unknown)"),
    ),
    v6(
        [0xfe80, 0, 0, 0, 0, 0, 0, 0],
        10,
        AlwaysBlocked("link-local"),
    ),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, AlwaysBlocked("multicast")),
    v6(
        [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254],
        128,
        AlwaysBlocked("cloud metadata (AWS IPv6)"),
    ),
    // The IPv6 forms of AWS's other link-local services: the Route 53 resolver (a DNS
    // tunnel out of any VPC) and the time sync service, as 169.254.169.253 and .123 are.
    v6(
        [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0253],
        128,
        AlwaysBlocked("cloud DNS resolver (AWS IPv6)"),
    ),
    v6(
        [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0123],
        128,
        AlwaysBlocked("cloud time service (AWS IPv6)"),
    ),
    v6(
        [0xfd20, 0x00ce, 0, 0, 0, 0, 0, 0x0254],
        128,
        AlwaysBlocked("cloud metadata (Google Cloud IPv6)"),
    ),
    // Internal.
    v6(
        [0x0100, 0, 0, 0, 0, 0, 0, 0],
        64,
        Internal("discard-only 100::/64"),
    ),
    v6(
        [0x2001, 0x0db8, 0, 0, 0, 0, 0, 0],
        32,
        Internal("documentation 2001:db8::/32"),
    ),
    v6(
        [0xfc00, 0, 0, 0, 0, 0, 0, 0],
        7,
        Internal("unique local fc00::/7"),
    ),
    v6(
        [0xfec0, 0, 0, 0, 0, 0, 0, 0],
        10,
        Internal("site-local fec0::/10"),
    ),
];

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let bits = u128::from(ip);
    let own = V6_RANGES
        .iter()
        .find(|range| {
            let mask = u128::MAX.checked_shl(128 - range.prefix).unwrap_or(0);
            bits & mask == range.net
        })
        .map_or(AddressClass::Public, |range| range.class);
    // The carried addresses come first so that, on a tie, the refusal names the IPv4 range
    // ("loopback") rather than the form ("IPv4-compatible ::/96").
    embedded::carried(ip)
        .iter()
        .map(classify_v4)
        .chain([own])
        .reduce(AddressClass::stricter)
        .unwrap_or(own)
}

/// An always-blocked range a network reaches: the range's name and network, and the IPv6
/// form that carries it, when it is an IPv4 range reached through one. `witness` is an
/// address of the network that [`classify`] always blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockedOverlap {
    pub name: &'static str,
    pub range: IpNet,
    pub form: Option<&'static str>,
    pub witness: IpAddr,
}

impl fmt::Display for BlockedOverlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.name, self.range)?;
        if let Some(form) = self.form {
            write!(f, " (carried by the {form} form)")?;
        }
        Ok(())
    }
}

/// Whether `net` holds an address [`classify`] always blocks, and which range: the question a
/// policy's `allowed_ips` is asked at load, answered from the same tables every connection is
/// judged by. An IPv6 network reaches an IPv4 range through every form that carries an IPv4
/// address at a fixed position ([`crate::embedded::FORMS`]). ISATAP's interface identifiers
/// are under every /64 prefix, so only a network longer than /64 is judged by them (every
/// wider IPv6 network holds the ISATAP form of every IPv4 address; those addresses are refused
/// when dialled).
pub fn always_blocked_in(net: IpNet) -> Option<BlockedOverlap> {
    match net {
        IpNet::V4(n) => {
            let (bits, len) = (u32::from(n.network()), u32::from(n.prefix_len()));
            V4_RANGES
                .iter()
                .filter(|r| r.class.is_always_blocked())
                .find_map(|r| {
                    let mask = top32(len.min(r.prefix));
                    (bits & mask == r.net & mask).then(|| {
                        // The longer of the two networks is inside the other.
                        let witness = if len >= r.prefix { bits } else { r.net };
                        own_overlap(r, v4_net(r), IpAddr::V4(Ipv4Addr::from(witness)))
                    })
                })
        }
        IpNet::V6(n) => {
            let (bits, len) = (u128::from(n.network()), u32::from(n.prefix_len()));
            // The carried ranges first, as `classify` names them first on a tie.
            let own = || {
                V6_RANGES
                    .iter()
                    .filter(|r| r.class.is_always_blocked())
                    .find_map(|r| {
                        let mask = top128(len.min(r.prefix));
                        (bits & mask == r.net & mask).then(|| {
                            let witness = if len >= r.prefix { bits } else { r.net };
                            let range = IpNet::V6(
                                Ipv6Net::new(Ipv6Addr::from(r.net), prefix_u8(r.prefix))
                                    .unwrap_or_default(),
                            );
                            own_overlap(r, range, IpAddr::V6(Ipv6Addr::from(witness)))
                        })
                    })
            };
            carried_overlap(bits, len).or_else(own)
        }
    }
}

/// The overlap of a network with a range of the tables themselves.
fn own_overlap<T>(range: &Range<T>, net: IpNet, witness: IpAddr) -> BlockedOverlap {
    BlockedOverlap {
        name: range.class.range_name().unwrap_or_default(),
        range: net,
        form: None,
        witness,
    }
}

/// The first always-blocked IPv4 range an IPv6 network (`bits`, prefix `len`) reaches through
/// a form that carries an IPv4 address.
fn carried_overlap(bits: u128, len: u32) -> Option<BlockedOverlap> {
    let fixed = top128(len);
    embedded::FORMS
        .iter()
        .filter(|form| !form.under_any_prefix() || len > 64)
        .find_map(|form| {
            V4_RANGES
                .iter()
                .filter(|r| r.class.is_always_blocked())
                .find_map(|r| {
                    // The addresses of the form that carry an address of `r`: the form's own
                    // bits, and `r`'s network bits (inverted, when stored so) at its position.
                    let shift = 96 - form.at;
                    let v4_mask = u128::from(top32(r.prefix)) << shift;
                    let v4 = if form.inverted { !r.net } else { r.net };
                    let mask = form.mask | v4_mask;
                    let value = form.value | ((u128::from(v4) << shift) & v4_mask);
                    if (bits ^ value) & mask & fixed != 0 {
                        return None;
                    }
                    // An address in both: the network's fixed bits, then the pattern's. (It is
                    // blocked: it carries an address of `r`, or it is `::` or `::1`.)
                    let witness = (bits & fixed) | (value & mask & !fixed);
                    classify_v6(Ipv6Addr::from(witness))
                        .is_always_blocked()
                        .then(|| carried(form, r, witness))
                })
        })
}

fn carried(form: &embedded::Form, r: &Range<u32>, witness: u128) -> BlockedOverlap {
    BlockedOverlap {
        name: r.class.range_name().unwrap_or_default(),
        range: v4_net(r),
        form: Some(form.name),
        witness: IpAddr::V6(Ipv6Addr::from(witness)),
    }
}

fn v4_net(r: &Range<u32>) -> IpNet {
    IpNet::V4(Ipv4Net::new(Ipv4Addr::from(r.net), prefix_u8(r.prefix)).unwrap_or_default())
}

/// Prefix lengths in the tables are at most 128.
fn prefix_u8(prefix: u32) -> u8 {
    u8::try_from(prefix).unwrap_or(u8::MAX)
}

fn top32(n: u32) -> u32 {
    u32::MAX.checked_shl(32 - n).unwrap_or(0)
}

fn top128(n: u32) -> u128 {
    u128::MAX.checked_shl(128 - n).unwrap_or(0)
}

/// True for an address that reaches the local host through the loopback interface: 127/8,
/// `::1` and the IPv4-mapped forms of 127/8 (not NAT64 or 6to4 forms, which leave the host).
pub(crate) fn is_local_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> AddressClass {
        classify(s.parse().unwrap())
    }

    /// Asserts the class of an IPv4 address and of its IPv4-mapped and NAT64 forms.
    #[track_caller]
    fn assert_v4(addr: &str, expected: AddressClass) {
        assert_eq!(class(addr), expected, "{addr}");
        assert_eq!(class(&format!("::ffff:{addr}")), expected, "::ffff:{addr}");
        assert_eq!(
            class(&format!("64:ff9b::{addr}")),
            expected,
            "64:ff9b::{addr}"
        );
    }

    /// First address inside, last inside, just below, just above, expected class.
    type Boundary = (
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        AddressClass,
    );

    /// (first inside, last inside, just below, just above, class) for each IPv4 range.
    #[rustfmt::skip]
    const V4_BOUNDARIES: &[Boundary] = &[
        ("0.0.0.1", "0.255.255.255", None, Some("1.0.0.0"), AlwaysBlocked("this network 0.0.0.0/8")),
        ("127.0.0.0", "127.255.255.255", Some("126.255.255.255"), Some("128.0.0.0"), AlwaysBlocked("loopback")),
        ("169.254.0.0", "169.254.255.255", Some("169.253.255.255"), Some("169.255.0.0"), AlwaysBlocked("link-local (cloud metadata)")),
        ("224.0.0.0", "239.255.255.255", Some("223.255.255.255"), None, AlwaysBlocked("multicast")),
        ("10.0.0.0", "10.255.255.255", Some("9.255.255.255"), Some("11.0.0.0"), Internal("private 10.0.0.0/8")),
        ("100.64.0.0", "100.127.255.255", Some("100.63.255.255"), Some("100.128.0.0"), Internal("shared address space 100.64.0.0/10")),
        ("172.16.0.0", "172.31.255.255", Some("172.15.255.255"), Some("172.32.0.0"), Internal("private 172.16.0.0/12")),
        ("192.0.0.0", "192.0.0.255", Some("191.255.255.255"), None, Internal("IETF protocol assignments 192.0.0.0/24")),
        ("192.0.2.0", "192.0.2.255", Some("192.0.1.255"), Some("192.0.3.0"), Internal("documentation 192.0.2.0/24")),
        ("192.168.0.0", "192.168.255.255", Some("192.167.255.255"), Some("192.169.0.0"), Internal("private 192.168.0.0/16")),
        ("198.18.0.0", "198.19.255.255", Some("198.17.255.255"), Some("198.20.0.0"), Internal("benchmarking 198.18.0.0/15")),
        ("198.51.100.0", "198.51.100.255", Some("198.51.99.255"), Some("198.51.101.0"), Internal("documentation 198.51.100.0/24")),
        ("203.0.113.0", "203.0.113.255", Some("203.0.112.255"), Some("203.0.114.0"), Internal("documentation 203.0.113.0/24")),
        ("240.0.0.0", "255.255.255.254", None, None, Internal("reserved 240.0.0.0/4")),
    ];

    #[test]
    fn v4_range_boundaries() {
        for &(first, last, below, above, expected) in V4_BOUNDARIES {
            assert_v4(first, expected);
            assert_v4(last, expected);
            for outside in [below, above].into_iter().flatten() {
                assert_v4(outside, AddressClass::Public);
            }
        }
    }

    #[test]
    fn v4_single_addresses() {
        assert_v4("0.0.0.0", AlwaysBlocked("unspecified"));
        assert_v4("255.255.255.255", AlwaysBlocked("broadcast"));
        assert_v4(
            "169.254.169.254",
            AlwaysBlocked("link-local (cloud metadata)"),
        );
        assert_v4(
            "100.100.100.200",
            AlwaysBlocked("cloud metadata (Alibaba Cloud)"),
        );
        assert_v4(
            "100.100.100.199",
            Internal("shared address space 100.64.0.0/10"),
        );
        assert_v4(
            "100.100.100.201",
            Internal("shared address space 100.64.0.0/10"),
        );
        assert_v4(
            "192.0.0.192",
            AlwaysBlocked("cloud metadata (Oracle Cloud)"),
        );
        assert_v4(
            "192.0.0.191",
            Internal("IETF protocol assignments 192.0.0.0/24"),
        );
        assert_v4(
            "168.63.129.16",
            AlwaysBlocked("cloud metadata (Azure wire server)"),
        );
        assert_v4("168.63.129.15", AddressClass::Public);
        assert_v4("168.63.129.17", AddressClass::Public);
        // AWS ECS task metadata, the AWS DNS resolver and time service, Tencent's metadata.
        for link_local in [
            "169.254.170.2",
            "169.254.169.253",
            "169.254.169.123",
            "169.254.0.23",
        ] {
            assert_v4(link_local, AlwaysBlocked("link-local (cloud metadata)"));
        }
        // The ranges between 192.0.0.0/24 and 192.0.2.0/24, and 192.88.99.0/24, are public.
        assert_v4("192.0.1.0", AddressClass::Public);
        for public in ["1.1.1.1", "8.8.8.8", "93.184.215.14", "223.255.255.255"] {
            assert_v4(public, AddressClass::Public);
        }
    }

    /// (first inside, last inside, just below, just above, class) for each IPv6 range.
    #[rustfmt::skip]
    const V6_BOUNDARIES: &[Boundary] = &[
        // The IPv4-compatible range: its own name where the address it carries is not always
        // blocked (`::2` carries 0.0.0.2, named as such; see `compatible_forms_...`).
        ("::1.0.0.0", "::223.255.255.255", None, Some("::1:0:0"), AlwaysBlocked("IPv4-compatible ::/96")),
        ("fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), None, AlwaysBlocked("link-local")),
        // Below ff00::/8 is fec0::/10 (site-local), checked by that row's last address.
        ("ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None, None, AlwaysBlocked("multicast")),
        ("fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Some("fe00::"), Internal("unique local fc00::/7")),
        ("fec0::", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None, None, Internal("site-local fec0::/10")),
        ("2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", Some("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff"), Some("2001:db9::"), Internal("documentation 2001:db8::/32")),
        ("100::", "100::ffff:ffff:ffff:ffff", Some("ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), Some("100:0:0:1::"), Internal("discard-only 100::/64")),
        ("64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", Some("64:ff9b:0:ffff:ffff:ffff:ffff:ffff"), Some("64:ff9b:2::"), AlwaysBlocked("local-use NAT64 64:ff9b:1::/48 (embedded IPv4 position unknown)")),
    ];

    #[test]
    fn v6_range_boundaries() {
        for &(first, last, below, above, expected) in V6_BOUNDARIES {
            assert_eq!(class(first), expected, "{first}");
            assert_eq!(class(last), expected, "{last}");
            for outside in [below, above].into_iter().flatten() {
                assert_eq!(class(outside), AddressClass::Public, "{outside}");
            }
        }
    }

    #[test]
    fn v6_single_addresses() {
        assert_eq!(class("::"), AlwaysBlocked("unspecified"));
        assert_eq!(class("::1"), AlwaysBlocked("loopback"));
        assert_eq!(
            class("fd00:ec2::254"),
            AlwaysBlocked("cloud metadata (AWS IPv6)")
        );
        assert_eq!(
            class("fd00:ec2::253"),
            AlwaysBlocked("cloud DNS resolver (AWS IPv6)")
        );
        assert_eq!(
            class("fd20:ce::254"),
            AlwaysBlocked("cloud metadata (Google Cloud IPv6)")
        );
        assert_eq!(class("fd00:ec2::252"), Internal("unique local fc00::/7"));
        assert_eq!(class("fd20:ce::253"), Internal("unique local fc00::/7"));
        for public in [
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2001:200::1",
            "1::",
        ] {
            assert_eq!(class(public), AddressClass::Public, "{public}");
        }
    }

    #[test]
    fn mapped_forms_follow_the_ipv4_class() {
        // Just outside ::ffff:0:0/96 on either side is not a mapped address.
        assert_eq!(class("::fffe:7f00:1"), AddressClass::Public);
        assert_eq!(class("::1:0:7f00:1"), AddressClass::Public);
        assert_eq!(class("::ffff:0.0.0.0"), AlwaysBlocked("unspecified"));
        assert_eq!(class("::ffff:8.8.8.8"), AddressClass::Public);
    }

    #[test]
    fn nat64_follows_the_embedded_ipv4_class() {
        assert_eq!(class("64:ff9b::7f00:1"), AlwaysBlocked("loopback"));
        assert_eq!(
            class("64:ff9b::a9fe:a9fe"),
            AlwaysBlocked("link-local (cloud metadata)")
        );
        assert_eq!(class("64:ff9b::a00:1"), Internal("private 10.0.0.0/8"));
        assert_eq!(
            class("64:ff9b::c0a8:101"),
            Internal("private 192.168.0.0/16")
        );
        assert_eq!(class("64:ff9b::808:808"), AddressClass::Public);
        // Outside the /96 the address is an ordinary (public) one.
        assert_eq!(class("64:ff9b:0:0:0:1:a00:1"), AddressClass::Public);
        assert_eq!(
            class("64:ff9a:ffff:ffff:ffff:ffff:a00:1"),
            AddressClass::Public
        );
    }

    #[test]
    fn six_to_four_follows_the_embedded_ipv4_class() {
        assert_eq!(class("2002:7f00:1::"), AlwaysBlocked("loopback"));
        assert_eq!(
            class("2002:a9fe:a9fe::1"),
            AlwaysBlocked("link-local (cloud metadata)")
        );
        assert_eq!(class("2002:ac10:1::1"), Internal("private 172.16.0.0/12"));
        assert_eq!(class("2002:808:808::1"), AddressClass::Public);
        assert_eq!(class("2003:a00:1::"), AddressClass::Public);
    }

    #[test]
    fn siit_translated_forms_follow_the_embedded_ipv4_class() {
        // The finding: `::ffff:0:7f00:1` was public and dialled.
        assert_eq!(class("::ffff:0:7f00:1"), AlwaysBlocked("loopback"));
        assert_eq!(
            class("::ffff:0:169.254.169.254"),
            AlwaysBlocked("link-local (cloud metadata)")
        );
        assert_eq!(class("::ffff:0:10.0.0.1"), Internal("private 10.0.0.0/8"));
        assert_eq!(class("::ffff:0:8.8.8.8"), AddressClass::Public);
    }

    #[test]
    fn compatible_forms_are_always_blocked_and_named_by_what_they_carry() {
        assert_eq!(class("::127.0.0.1"), AlwaysBlocked("loopback"));
        assert_eq!(class("::2"), AlwaysBlocked("this network 0.0.0.0/8"));
        assert_eq!(class("::10.0.0.1"), AlwaysBlocked("IPv4-compatible ::/96"));
        assert_eq!(class("::8.8.8.8"), AlwaysBlocked("IPv4-compatible ::/96"));
    }

    #[test]
    fn local_use_nat64_is_always_blocked_at_every_position() {
        // 127.0.0.1 at the /48, /56, /64 and /96 positions of RFC 6052 §2.2, and 8.8.8.8 at
        // /96: the position is the translator's, so none can be trusted.
        for addr in [
            "64:ff9b:1:7f00:0:1::",
            "64:ff9b:1:7f:0:1::",
            "64:ff9b:1:0:7f:0:100:0",
            "64:ff9b:1::7f00:1",
            "64:ff9b:1::808:808",
        ] {
            assert!(class(addr).is_always_blocked(), "{addr}");
        }
    }

    #[test]
    fn teredo_takes_the_stricter_of_server_and_client() {
        // RFC 4380's example: server 65.54.227.120, client 192.0.2.45 (documentation).
        assert_eq!(
            class("2001:0:4136:e378:8000:63bf:3fff:fdd2"),
            Internal("documentation 192.0.2.0/24")
        );
        // Client 127.0.0.1 (inverted 80ff:fffe) behind a public server.
        assert_eq!(
            class("2001:0:4136:e378:8000:63bf:80ff:fffe"),
            AlwaysBlocked("loopback")
        );
        // Server 169.254.169.254, client 8.8.8.8 (inverted f7f7:f7f7).
        assert_eq!(
            class("2001:0:a9fe:a9fe::f7f7:f7f7"),
            AlwaysBlocked("link-local (cloud metadata)")
        );
        assert_eq!(
            class("2001:0:4136:e378:8000:63bf:f7f7:f7f7"),
            AddressClass::Public
        );
    }

    #[test]
    fn isatap_interface_identifiers_follow_the_embedded_ipv4_class() {
        assert_eq!(
            class("2606:4700:1:2:200:5efe:a9fe:a9fe"),
            AlwaysBlocked("link-local (cloud metadata)")
        );
        assert_eq!(
            class("2606:4700:1:2::5efe:c0a8:101"),
            Internal("private 192.168.0.0/16")
        );
        assert_eq!(
            class("2606:4700:1:2:200:5efe:808:808"),
            AddressClass::Public
        );
        // The prefix's own class still counts.
        assert_eq!(
            class("fd00::200:5efe:808:808"),
            Internal("unique local fc00::/7")
        );
    }

    #[test]
    fn local_loopback_is_only_127_and_v6_loopback() {
        for lo in ["127.0.0.1", "127.255.255.254", "::1", "::ffff:127.0.0.1"] {
            assert!(is_local_loopback(lo.parse().unwrap()), "{lo}");
        }
        for not in [
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "0.0.0.0",
            "::",
            "169.254.1.1",
        ] {
            assert!(!is_local_loopback(not.parse().unwrap()), "{not}");
        }
    }

    #[test]
    fn names_and_display() {
        assert_eq!(class("127.0.0.1").range_name(), Some("loopback"));
        assert_eq!(AddressClass::Public.range_name(), None);
        assert_eq!(
            class("10.1.1.1").to_string(),
            "internal (private 10.0.0.0/8)"
        );
        assert_eq!(class("::1").to_string(), "always blocked (loopback)");
        assert!(class("::1").is_always_blocked());
        assert!(class("1.1.1.1").is_public());
    }
}
