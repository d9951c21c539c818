//! The IPv6 forms that carry an IPv4 address, and where in the address it sits.
//!
//! This module owns one question: which IPv4 addresses may a packet sent to this IPv6 address
//! end up at? [`carried`] answers it for every form the RFCs define at a fixed position, so
//! that [`crate::class`] can give the IPv6 address the class of what it carries: a translator,
//! tunnel or dual-stack socket turns `::ffff:0:127.0.0.1` into a packet for 127.0.0.1 as surely
//! as the IPv4 address itself. It does no classification and no I/O.
//!
//! The forms, each recognised by its prefix or interface identifier:
//!
//! 1. IPv4-mapped `::ffff:0:0/96` (RFC 4291 §2.5.5.2): a dual-stack socket dials the IPv4
//!    address in the low 32 bits.
//! 2. IPv4-translated `::ffff:0:0:0/96` (SIIT, RFC 2765 §2.1): a stateless translator does.
//! 3. IPv4-compatible `::/96` except `::` and `::1` (RFC 4291 §2.5.5.1, deprecated): an
//!    automatic tunnel (Linux `sit`) does.
//! 4. NAT64 well-known prefix `64:ff9b::/96` (RFC 6052 §2.1): the translator does.
//! 5. 6to4 `2002::/16` (RFC 3056 §2): bits 16..48 are the IPv4 address of the 6to4 router the
//!    packet is tunnelled to.
//! 6. Teredo `2001::/32` (RFC 4380 §4): bits 32..64 are the Teredo server, and bits 96..128
//!    the client's public IPv4 address with every bit inverted ("obfuscated"); a relay sends
//!    the packet to the client and its bubbles to the server, so both count.
//! 7. ISATAP interface identifiers (RFC 5214 §6.1): `0000:5efe:a.b.c.d` (or `0200:5efe:...`,
//!    with the universal/local bit set) under any /64 prefix; a router on an ISATAP link
//!    tunnels the packet to a.b.c.d. The `g` bit is ignored too, so a variant cannot slip past.
//!
//! NAT64's local-use prefix `64:ff9b:1::/48` (RFC 8215) is not here: a translator may use it
//! with a /48, /56, /64 or /96 prefix, and RFC 6052 §2.2 puts the IPv4 address at a different
//! position for each, so which 32 bits a translator reads cannot be known from the address
//! alone. [`crate::class`] therefore always blocks that whole range (fail closed). For the same
//! reason a network-specific prefix (RFC 6052 §2.2) or a MAP-E/6rd prefix (RFC 7597, RFC 5969)
//! from an operator's own address space cannot be recognised here at all; the operator's
//! translator must refuse private destinations itself (documented in `docs/addresses.md`).

use std::net::{Ipv4Addr, Ipv6Addr};

/// The IPv4 addresses one IPv6 address carries: none, one, or (Teredo's server and client, and
/// an ISATAP interface identifier under a prefix that carries one already) up to three.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Carried {
    addrs: [Option<Ipv4Addr>; 3],
}

impl Carried {
    fn push(&mut self, ip: Ipv4Addr) {
        if let Some(slot) = self.addrs.iter_mut().find(|slot| slot.is_none()) {
            *slot = Some(ip);
        }
    }

    /// The carried addresses, in the order the forms above are listed.
    pub(crate) fn iter(self) -> impl Iterator<Item = Ipv4Addr> {
        self.addrs.into_iter().flatten()
    }
}

/// One form: the bits that say an address is in it (`mask`, `value`), where its IPv4 address
/// sits (`at`, bits from the top), and whether that address is stored inverted (Teredo's
/// client). Every form but ISATAP's is a prefix; ISATAP's is an interface identifier under
/// any prefix.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Form {
    /// The form's name and layout, for messages: `SIIT-translated ::ffff:0:0:0/96`.
    pub(crate) name: &'static str,
    pub(crate) mask: u128,
    pub(crate) value: u128,
    pub(crate) at: u32,
    pub(crate) inverted: bool,
}

impl Form {
    /// Whether `bits` are in this form.
    fn holds(&self, bits: u128) -> bool {
        bits & self.mask == self.value
    }

    /// The IPv4 address at the form's position in `bits`.
    fn read(&self, bits: u128) -> Ipv4Addr {
        // `at + 32 <= 128` for every form, so the shift leaves the address in the low bits.
        let raw = (bits >> (96 - self.at)) as u32;
        Ipv4Addr::from(if self.inverted { !raw } else { raw })
    }

    /// Whether this form is an interface identifier under any /64 prefix (ISATAP).
    pub(crate) fn under_any_prefix(&self) -> bool {
        self.mask >> 64 == 0
    }
}

/// The top `n` bits of a 128-bit value.
const fn top(n: u32) -> u128 {
    if n == 0 { 0 } else { u128::MAX << (128 - n) }
}

const fn seg(segments: [u16; 8]) -> u128 {
    let mut bits = 0u128;
    let mut i = 0;
    while i < 8 {
        bits = (bits << 16) | segments[i] as u128;
        i += 1;
    }
    bits
}

/// The forms, in the order of the module documentation (the order [`carried`] yields them).
/// The prefix forms are disjoint; ISATAP's may be under any of them.
pub(crate) const FORMS: &[Form] = &[
    Form {
        name: "IPv4-mapped ::ffff:0:0/96",
        mask: top(96),
        value: seg([0, 0, 0, 0, 0, 0xffff, 0, 0]),
        at: 96,
        inverted: false,
    },
    Form {
        name: "SIIT-translated ::ffff:0:0:0/96",
        mask: top(96),
        value: seg([0, 0, 0, 0, 0xffff, 0, 0, 0]),
        at: 96,
        inverted: false,
    },
    // `::` and `::1` are the unspecified and loopback addresses, not IPv4-compatible
    // ([`carried`] skips them).
    Form {
        name: "IPv4-compatible ::/96",
        mask: top(96),
        value: 0,
        at: 96,
        inverted: false,
    },
    Form {
        name: "NAT64 64:ff9b::/96",
        mask: top(96),
        value: seg([0x0064, 0xff9b, 0, 0, 0, 0, 0, 0]),
        at: 96,
        inverted: false,
    },
    Form {
        name: "6to4 2002::/16",
        mask: top(16),
        value: seg([0x2002, 0, 0, 0, 0, 0, 0, 0]),
        at: 16,
        inverted: false,
    },
    Form {
        name: "Teredo 2001::/32 (server)",
        mask: top(32),
        value: seg([0x2001, 0, 0, 0, 0, 0, 0, 0]),
        at: 32,
        inverted: false,
    },
    Form {
        name: "Teredo 2001::/32 (client)",
        mask: top(32),
        value: seg([0x2001, 0, 0, 0, 0, 0, 0, 0]),
        at: 96,
        inverted: true,
    },
    // `0000:5efe` or `0200:5efe`, the `u` and `g` bits (0x0300 of the first group) ignored.
    Form {
        name: "ISATAP interface identifier ::0:5efe:0:0/96 under any /64",
        mask: seg([0, 0, 0, 0, 0xfcff, 0xffff, 0, 0]),
        value: seg([0, 0, 0, 0, 0, 0x5efe, 0, 0]),
        at: 96,
        inverted: false,
    },
];

/// Every IPv4 address a packet for `ip` may be delivered to by a translator, tunnel or
/// dual-stack socket, as listed in the module documentation.
pub(crate) fn carried(ip: Ipv6Addr) -> Carried {
    let bits = u128::from(ip);
    let mut out = Carried::default();
    for form in FORMS {
        // `::` and `::1` carry nothing (see the compatible form).
        if form.holds(bits) && !(form.value == 0 && form.mask == top(96) && bits <= 1) {
            out.push(form.read(bits));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn carried_by(s: &str) -> Vec<Ipv4Addr> {
        carried(s.parse().unwrap()).iter().collect()
    }

    fn v4(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn each_form_yields_the_address_at_its_position() {
        assert_eq!(carried_by("::ffff:127.0.0.1"), [v4("127.0.0.1")]);
        assert_eq!(carried_by("::ffff:0:127.0.0.1"), [v4("127.0.0.1")]);
        assert_eq!(carried_by("::10.1.2.3"), [v4("10.1.2.3")]);
        assert_eq!(carried_by("::2"), [v4("0.0.0.2")]);
        assert_eq!(
            carried_by("64:ff9b::169.254.169.254"),
            [v4("169.254.169.254")]
        );
        assert_eq!(carried_by("2002:c0a8:101:5::1"), [v4("192.168.1.1")]);
        // RFC 4380 §4's example: server 65.54.227.120, client 192.0.2.45 (inverted: 3f:ffd2).
        assert_eq!(
            carried_by("2001:0:4136:e378:8000:63bf:3fff:fdd2"),
            [v4("65.54.227.120"), v4("192.0.2.45")]
        );
        assert_eq!(carried_by("fe80::5efe:10.0.0.1"), [v4("10.0.0.1")]);
        assert_eq!(carried_by("2001:db8:1:2:200:5efe:8.8.8.8"), [v4("8.8.8.8")]);
        // The `g` bit is ignored as well as the `u` bit.
        assert_eq!(carried_by("2001:db8::300:5efe:7f00:1"), [v4("127.0.0.1")]);
        // 6to4 with an ISATAP interface identifier carries both.
        assert_eq!(
            carried_by("2002:808:808::5efe:a9fe:a9fe"),
            [v4("8.8.8.8"), v4("169.254.169.254")]
        );
    }

    #[test]
    fn addresses_outside_every_form_carry_nothing() {
        for plain in [
            "::",
            "::1",
            "::1:0:0:1",
            "::fffe:7f00:1",
            "::ffff:1:7f00:1",
            "64:ff9b::1:0:0",
            "64:ff9b:1::7f00:1",
            "2003::7f00:1",
            "2001:1::7f00:1",
            "2606:4700:4700::1111",
            "2001:db8::400:5efe:7f00:1",
            "2001:db8::5eff:7f00:1",
        ] {
            assert!(carried_by(plain).is_empty(), "{plain}");
        }
    }
}
