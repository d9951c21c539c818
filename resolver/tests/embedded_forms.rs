//! Property test: every IPv6 form that carries an IPv4 address is classified as that IPv4
//! address (or stricter), for addresses in, at the edges of, and just outside every special
//! IPv4 range. The forms are built here from the RFCs' layouts, independently of
//! `resolver/src/embedded.rs`, which reads them back; the IPv4 classes themselves are checked
//! by the unit tests beside `resolver/src/class.rs`.
//!
//! `SLUICE_FUZZ_CASES` sets the cases per property (default 2048); the seed is fixed, so a run
//! is repeatable.
#![allow(clippy::unwrap_used)] // a failed expectation is a failed test

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use proptest::test_runner::{Config, RngSeed};
use sluice_resolver::{AddressClass, always_blocked_in, classify};

fn config() -> Config {
    let cases = std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2048);
    Config {
        cases,
        rng_seed: RngSeed::Fixed(0x6052_8215),
        failure_persistence: None,
        ..Config::default()
    }
}

/// Every IPv4 range that is not public (RFC 6890's special-purpose registry as sluice reads
/// it, plus the metadata addresses outside 169.254/16): network, prefix length.
const SPECIAL_V4: &[([u8; 4], u32)] = &[
    ([0, 0, 0, 0], 8),
    ([10, 0, 0, 0], 8),
    ([100, 64, 0, 0], 10),
    ([100, 100, 100, 200], 32),
    ([127, 0, 0, 0], 8),
    ([168, 63, 129, 16], 32),
    ([169, 254, 0, 0], 16),
    ([172, 16, 0, 0], 12),
    ([192, 0, 0, 0], 24),
    ([192, 0, 0, 192], 32),
    ([192, 0, 2, 0], 24),
    ([192, 168, 0, 0], 16),
    ([198, 18, 0, 0], 15),
    ([198, 51, 100, 0], 24),
    ([203, 0, 113, 0], 24),
    ([224, 0, 0, 0], 4),
    ([240, 0, 0, 0], 4),
    ([255, 255, 255, 255], 32),
];

/// Where in (or around) a range the address is taken.
#[derive(Debug, Clone, Copy)]
enum Spot {
    First,
    Last,
    Inside(u32),
    JustBelow,
    JustAbove,
}

/// An IPv4 address in, at the edge of, or next to one special range.
fn around_special() -> impl Strategy<Value = Ipv4Addr> {
    let spot = prop_oneof![
        Just(Spot::First),
        Just(Spot::Last),
        any::<u32>().prop_map(Spot::Inside),
        Just(Spot::JustBelow),
        Just(Spot::JustAbove),
    ];
    (0..SPECIAL_V4.len(), spot).prop_map(|(i, spot)| {
        let (net, prefix) = SPECIAL_V4[i];
        let net = u32::from_be_bytes(net);
        let host_mask = u32::MAX.checked_shr(prefix).unwrap_or(0);
        let bits = match spot {
            Spot::First => net,
            Spot::Last => net | host_mask,
            Spot::Inside(r) => net | (r & host_mask),
            Spot::JustBelow => net.wrapping_sub(1),
            Spot::JustAbove => (net | host_mask).wrapping_add(1),
        };
        Ipv4Addr::from(bits)
    })
}

/// A public IPv4 address (a Teredo server, a client or a 6to4 router that is not the one
/// under test).
fn public_v4() -> impl Strategy<Value = Ipv4Addr> {
    prop_oneof![
        Just(Ipv4Addr::new(65, 54, 227, 120)),
        Just(Ipv4Addr::new(8, 8, 8, 8)),
        Just(Ipv4Addr::new(93, 184, 215, 14)),
        (1u8..=9, any::<[u8; 3]>()).prop_map(|(a, [b, c, d])| Ipv4Addr::new(a, b, c, d)),
    ]
}

fn v6(octets: [u8; 16]) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(octets))
}

fn with_v4(mut octets: [u8; 16], at: usize, ip: Ipv4Addr) -> [u8; 16] {
    octets[at..at + 4].copy_from_slice(&ip.octets());
    octets
}

/// True when the interface identifier (octets 8..16) has ISATAP's shape (RFC 5214 §6.1), so a
/// randomly built address of another form is not mistaken for one.
fn looks_isatap(octets: &[u8; 16]) -> bool {
    octets[8] & 0xfc == 0 && octets[9] == 0 && octets[10] == 0x5e && octets[11] == 0xfe
}

fn class(ip: Ipv4Addr) -> AddressClass {
    classify(IpAddr::V4(ip))
}

proptest! {
    #![proptest_config(config())]

    /// IPv4-mapped `::ffff:0:0/96` (RFC 4291 §2.5.5.2), SIIT-translated `::ffff:0:0:0/96`
    /// (RFC 2765 §2.1) and NAT64's well-known prefix `64:ff9b::/96` (RFC 6052 §2.1) take the
    /// class of the IPv4 address in their low 32 bits, name and all.
    #[test]
    fn low_32_bit_forms_take_the_ipv4_class(ip in around_special()) {
        let expected = class(ip);
        let mapped = with_v4([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0], 12, ip);
        let translated = with_v4([0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0], 12, ip);
        let nat64 = with_v4([0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 12, ip);
        for form in [mapped, translated, nat64] {
            prop_assert_eq!(classify(v6(form)), expected, "{} carrying {}", v6(form), ip);
        }
    }

    /// The deprecated IPv4-compatible `::a.b.c.d` (RFC 4291 §2.5.5.1) is always blocked,
    /// named by the address it carries when that is always blocked too.
    #[test]
    fn compatible_form_is_always_blocked(ip in around_special()) {
        prop_assume!(u32::from(ip) > 1); // `::` and `::1` are not this form
        let compatible = v6(with_v4([0; 16], 12, ip));
        let got = classify(compatible);
        prop_assert!(got.is_always_blocked(), "{compatible}: {got}");
        if class(ip).is_always_blocked() {
            prop_assert_eq!(got, class(ip), "{}", compatible);
        }
    }

    /// 6to4 `2002:V4::/48` (RFC 3056 §2), whatever the subnet and interface identifier.
    #[test]
    fn six_to_four_takes_the_ipv4_class(
        ip in around_special(),
        rest in any::<[u8; 10]>(),
    ) {
        let mut octets = with_v4([0x20, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 2, ip);
        octets[6..].copy_from_slice(&rest);
        prop_assume!(!looks_isatap(&octets));
        prop_assert_eq!(classify(v6(octets)), class(ip), "{}", v6(octets));
    }

    /// Teredo `2001:0:SERVER:FLAGS:PORT:CLIENT` (RFC 4380 §4, port and client inverted): a
    /// special address as the client behind a public server, or as the server of a public
    /// client, gives its class.
    #[test]
    fn teredo_takes_the_class_of_server_or_client(
        special in around_special(),
        public in public_v4(),
        flags in any::<u16>(),
        port in any::<u16>(),
        special_is_client in any::<bool>(),
    ) {
        let (server, client) = if special_is_client { (public, special) } else { (special, public) };
        let mut octets = with_v4([0x20, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 4, server);
        octets[8..10].copy_from_slice(&flags.to_be_bytes());
        octets[10..12].copy_from_slice(&(!port).to_be_bytes());
        octets = with_v4(octets, 12, Ipv4Addr::from(!u32::from(client)));
        prop_assume!(!looks_isatap(&octets));
        prop_assert_eq!(classify(v6(octets)), class(special), "{}", v6(octets));
    }

    /// An ISATAP interface identifier `[02]00:5efe:V4` (RFC 5214 §6.1) under a public /64.
    #[test]
    fn isatap_takes_the_ipv4_class(
        ip in around_special(),
        subnet in any::<u32>(),
        universal in any::<bool>(),
    ) {
        let mut octets = [0x26, 0x06, 0x47, 0x00, 0, 0, 0, 0, 0, 0, 0x5e, 0xfe, 0, 0, 0, 0];
        octets[4..8].copy_from_slice(&subnet.to_be_bytes());
        octets[8] = if universal { 0x02 } else { 0 };
        octets = with_v4(octets, 12, ip);
        prop_assert_eq!(classify(v6(octets)), class(ip), "{}", v6(octets));
    }

    /// NAT64 local-use `64:ff9b:1::/48` (RFC 8215) with the address where a /48, /56, /64 or
    /// /96 translator (RFC 6052 §2.2) reads it, and random prefix bits: always blocked, since
    /// the position cannot be known.
    #[test]
    fn local_use_nat64_is_always_blocked(
        ip in around_special(),
        prefix_bits in any::<[u8; 10]>(),
        position in 0..4usize,
    ) {
        let mut octets = [0, 0x64, 0xff, 0x9b, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let [a, b, c, d] = ip.octets();
        match position {
            // /48: bits 48..64 and 72..88 (octet 8 is the reserved `u` octet).
            0 => { octets[6..8].copy_from_slice(&[a, b]); octets[9..11].copy_from_slice(&[c, d]); }
            // /56: bits 56..64 and 72..96.
            1 => { octets[6] = prefix_bits[0]; octets[7] = a; octets[9..12].copy_from_slice(&[b, c, d]); }
            // /64: bits 72..104.
            2 => { octets[6..8].copy_from_slice(&prefix_bits[..2]); octets[9..13].copy_from_slice(&[a, b, c, d]); }
            // /96: the low 32 bits.
            _ => { octets[6..12].copy_from_slice(&prefix_bits[..6]); octets[12..].copy_from_slice(&[a, b, c, d]); }
        }
        let got = classify(v6(octets));
        prop_assert!(got.is_always_blocked(), "{}: {}", v6(octets), got);
    }
}

/// An IPv6 address of any form above carrying an address around a special range, or none.
fn any_form() -> impl Strategy<Value = Ipv6Addr> {
    (around_special(), public_v4(), any::<[u8; 16]>(), 0..9usize).prop_map(
        |(ip, public, random, form)| {
            let mut o = random;
            match form {
                0 => {
                    o = with_v4(
                        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0],
                        12,
                        ip,
                    )
                }
                1 => {
                    o = with_v4(
                        [0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0],
                        12,
                        ip,
                    )
                }
                2 => o = with_v4([0; 16], 12, ip),
                3 => {
                    o = with_v4(
                        [0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                        12,
                        ip,
                    )
                }
                4 => {
                    o = with_v4(
                        [0x20, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                        2,
                        ip,
                    )
                }
                5 => {
                    o[..4].copy_from_slice(&[0x20, 0x01, 0, 0]);
                    o = with_v4(with_v4(o, 4, public), 12, Ipv4Addr::from(!u32::from(ip)));
                }
                6 => {
                    o[8..12].copy_from_slice(&[0, 0, 0x5e, 0xfe]);
                    o = with_v4(o, 12, ip);
                }
                7 => o[..6].copy_from_slice(&[0, 0x64, 0xff, 0x9b, 0, 1]),
                _ => {}
            }
            Ipv6Addr::from(o)
        },
    )
}

/// Every address of `net` (small networks only).
fn addresses(net: IpNet) -> Vec<IpAddr> {
    net.hosts()
        .chain([net.network(), net.broadcast()])
        .collect()
}

/// Checks one network against the classifier: a reported overlap comes with an address of the
/// network that `classify` always blocks, and a network small enough to walk reports one
/// exactly when it holds such an address.
fn judged_as_classified(net: IpNet, walk: bool) -> Result<(), TestCaseError> {
    let got = always_blocked_in(net);
    if let Some(o) = got {
        prop_assert!(net.contains(&o.witness), "{net}: {o:?}");
        prop_assert!(classify(o.witness).is_always_blocked(), "{net}: {o:?}");
    }
    if walk {
        let blocked = addresses(net)
            .into_iter()
            .find(|a| classify(*a).is_always_blocked());
        prop_assert_eq!(
            got.is_some(),
            blocked.is_some(),
            "{}: {:?} / {:?}",
            net,
            got,
            blocked
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// `allowed_ips` is judged at load by the classifier's own tables: an IPv6 network
    /// (longer than /64, where ISATAP's interface identifiers are judged too) around every
    /// form and every special IPv4 range reaches an always-blocked address exactly when
    /// `classify` blocks one of its addresses.
    #[test]
    fn an_ipv6_network_is_judged_as_its_addresses_are(ip in any_form(), len in 65u8..=128) {
        let net = IpNet::V6(Ipv6Net::new(ip, len).unwrap().trunc());
        judged_as_classified(net, len >= 120)?;
    }

    /// The same for IPv4 networks around every special range, and wider ones.
    #[test]
    fn an_ipv4_network_is_judged_as_its_addresses_are(ip in around_special(), len in 0u8..=32) {
        let net = IpNet::V4(Ipv4Net::new(ip, len).unwrap().trunc());
        judged_as_classified(net, len >= 24)?;
    }
}

/// The generator is not vacuous: it reaches every range, inside and out.
#[test]
fn every_special_range_is_not_public_inside() {
    for &(net, prefix) in SPECIAL_V4 {
        let first = Ipv4Addr::from(net);
        let last =
            Ipv4Addr::from(u32::from_be_bytes(net) | u32::MAX.checked_shr(prefix).unwrap_or(0));
        assert!(!class(first).is_public(), "{first}/{prefix}");
        assert!(!class(last).is_public(), "{last}/{prefix}");
    }
}
