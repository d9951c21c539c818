//! The client's own source address of a connection that NAT rewrote on its way to sluice,
//! read from the kernel's connection tracking (ctnetlink).
//!
//! A transparent listener receives what the fence redirected. When two of a client's
//! connections share a source port (Linux hands out the same ephemeral port for different
//! destinations, and a closed connection's tracking entry lives on for minutes), both
//! redirected connections would have the same reply tuple (listener ↔ client:port), so the
//! kernel's NAT gives the second one another source port. sluice then sees a peer port the
//! client's socket does not have, and the exact socket lookup (`diag`) finds nothing. The
//! tracking entry knows both sides: its reply tuple's destination is the peer sluice saw, its
//! original tuple's source is the client's socket. Only the namespace where the NAT happened
//! (sluice's own: the listener's) has the entry.
//!
//! The message is written by hand (`nfgenmsg` and nested attributes; no maintained crate
//! speaks ctnetlink's conntrack messages): a dump of the table, matched on the original
//! destination and the reply destination, both of which the kernel sets.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use netlink_sys::protocols::NETLINK_NETFILTER;

/// `(NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET`.
const CT_GET: u16 = (1 << 8) | 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLA_TYPE_MASK: u16 = 0x3fff;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const IPPROTO_TCP: u8 = 6;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// Datagrams a dump may send before its end (a bound on a misbehaving reply stream).
const MAX_DUMP_DATAGRAMS: usize = 65_536;

/// One side of a tracked connection, as far as this lookup reads it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tuple {
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    tcp: bool,
}

/// The client's own source address of the TCP connection whose reply goes to `peer` (the
/// accepted socket's peer) and whose original destination is `local` (the address the client
/// dialled), when NAT changed it; `Ok(None)` when the table (of the calling thread's network
/// namespace) has no such entry or the source was not changed.
pub(crate) fn original_source(
    peer: SocketAddr,
    local: SocketAddr,
) -> io::Result<Option<SocketAddr>> {
    let peer = canonical(peer);
    let local = canonical(local);
    let family = match peer.ip() {
        IpAddr::V4(_) => AF_INET,
        IpAddr::V6(_) => AF_INET6,
    };
    let socket = crate::diag::kernel_socket(NETLINK_NETFILTER)?;
    socket.send(&dump_request(family, 1), 0)?;
    let mut buffer: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut found = None;
    for _ in 0..MAX_DUMP_DATAGRAMS {
        buffer.clear();
        let received = socket.recv(&mut buffer, 0)?;
        let datagram = buffer.get(..received).unwrap_or(&buffer);
        if read_datagram(datagram, peer, local, &mut found)? {
            return Ok(found.filter(|source| *source != peer));
        }
    }
    Err(io::Error::other("a conntrack dump did not end"))
}

fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// A dump request of the `family` table: `nlmsghdr` then `nfgenmsg`.
fn dump_request(family: u8, sequence: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(20);
    out.extend_from_slice(&20u32.to_ne_bytes());
    out.extend_from_slice(&CT_GET.to_ne_bytes());
    out.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    out.extend_from_slice(&sequence.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&[family, 0, 0, 0]);
    out
}

/// Reads one datagram of the dump into `found`. `Ok(true)`: the dump ended.
fn read_datagram(
    mut datagram: &[u8],
    peer: SocketAddr,
    local: SocketAddr,
    found: &mut Option<SocketAddr>,
) -> io::Result<bool> {
    while datagram.len() >= 16 {
        let length = usize::try_from(u32_at(datagram, 0)).unwrap_or(usize::MAX);
        let kind = u16_at(datagram, 4);
        let Some(message) = datagram.get(16..length) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a conntrack message longer than its datagram",
            ));
        };
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let code = message.get(..4).map_or(0, |b| i32_at(b, 0));
                return match code {
                    0 => Ok(true),
                    code => Err(io::Error::from_raw_os_error(-code)),
                };
            }
            CT_GET | 0x0100 if found.is_none() => {
                // `nfgenmsg` (4 bytes), then the entry's attributes.
                if let Some(source) = message.get(4..).and_then(|a| matches(a, peer, local)) {
                    *found = Some(source);
                }
            }
            _ => {}
        }
        let advance = length.checked_add(3).map(|l| l & !3).filter(|l| *l >= 16);
        match advance.and_then(|l| datagram.get(l..)) {
            Some(rest) => datagram = rest,
            None => break,
        }
    }
    Ok(false)
}

/// The original source of the entry whose attributes are `attrs`, if it is a TCP connection
/// to `local` whose replies go to `peer`.
fn matches(attrs: &[u8], peer: SocketAddr, local: SocketAddr) -> Option<SocketAddr> {
    let mut orig = None;
    let mut reply = None;
    for (kind, value) in Attrs(attrs) {
        match kind {
            CTA_TUPLE_ORIG => orig = Some(tuple(value)),
            CTA_TUPLE_REPLY => reply = Some(tuple(value)),
            _ => {}
        }
    }
    let (orig, reply) = (orig?, reply?);
    (orig.tcp && reply.tcp && orig.dst == Some(local) && reply.dst == Some(peer))
        .then_some(orig.src)
        .flatten()
}

fn tuple(attrs: &[u8]) -> Tuple {
    let mut out = Tuple::default();
    let (mut src_ip, mut dst_ip, mut src_port, mut dst_port) = (None, None, None, None);
    for (kind, value) in Attrs(attrs) {
        match kind {
            CTA_TUPLE_IP => {
                for (kind, value) in Attrs(value) {
                    let ip = match (kind, value.len()) {
                        (CTA_IP_V4_SRC | CTA_IP_V4_DST, 4) => <[u8; 4]>::try_from(value)
                            .ok()
                            .map(|b| IpAddr::V4(Ipv4Addr::from(b))),
                        (CTA_IP_V6_SRC | CTA_IP_V6_DST, 16) => <[u8; 16]>::try_from(value)
                            .ok()
                            .map(|b| IpAddr::V6(Ipv6Addr::from(b))),
                        _ => None,
                    };
                    match kind {
                        CTA_IP_V4_SRC | CTA_IP_V6_SRC => src_ip = ip,
                        CTA_IP_V4_DST | CTA_IP_V6_DST => dst_ip = ip,
                        _ => {}
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for (kind, value) in Attrs(value) {
                    match (kind, value) {
                        (CTA_PROTO_NUM, [num, ..]) => out.tcp = *num == IPPROTO_TCP,
                        (CTA_PROTO_SRC_PORT, [a, b, ..]) => {
                            src_port = Some(u16::from_be_bytes([*a, *b]));
                        }
                        (CTA_PROTO_DST_PORT, [a, b, ..]) => {
                            dst_port = Some(u16::from_be_bytes([*a, *b]));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    out.src = src_ip
        .zip(src_port)
        .map(|(ip, port)| SocketAddr::new(ip, port));
    out.dst = dst_ip
        .zip(dst_port)
        .map(|(ip, port)| SocketAddr::new(ip, port));
    out
}

/// The netlink attributes of a buffer: (type without its flags, value); stops at the first
/// malformed one.
struct Attrs<'a>(&'a [u8]);

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let len = usize::from(u16::from_ne_bytes([*self.0.first()?, *self.0.get(1)?]));
        let kind = u16::from_ne_bytes([*self.0.get(2)?, *self.0.get(3)?]) & NLA_TYPE_MASK;
        let value = self.0.get(4..len)?;
        let advance = (len + 3) & !3;
        self.0 = self.0.get(advance..).unwrap_or(&[]);
        Some((kind, value))
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0; 4];
    if let Some(s) = b.get(at..at + 4) {
        w.copy_from_slice(s);
    }
    u32::from_ne_bytes(w)
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_ne_bytes(u32_at(b, at).to_ne_bytes())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut w = [0; 2];
    if let Some(s) = b.get(at..at + 2) {
        w.copy_from_slice(s);
    }
    u16::from_ne_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
        let mut out = Vec::new();
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(value);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

    fn tuple_attr(kind: u16, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
        let ip = |a: SocketAddr, v4: u16| match a.ip() {
            IpAddr::V4(ip) => attr(v4, &ip.octets()),
            IpAddr::V6(ip) => attr(v4 + 2, &ip.octets()),
        };
        let ips = [ip(src, CTA_IP_V4_SRC), ip(dst, CTA_IP_V4_DST)].concat();
        let proto = [
            attr(CTA_PROTO_NUM, &[IPPROTO_TCP]),
            attr(CTA_PROTO_SRC_PORT, &src.port().to_be_bytes()),
            attr(CTA_PROTO_DST_PORT, &dst.port().to_be_bytes()),
        ]
        .concat();
        attr(
            kind | 0x8000,
            &[
                attr(CTA_TUPLE_IP | 0x8000, &ips),
                attr(CTA_TUPLE_PROTO | 0x8000, &proto),
            ]
            .concat(),
        )
    }

    fn entry(orig: (&str, &str), reply: (&str, &str)) -> Vec<u8> {
        let a = |s: &str| {
            s.parse::<SocketAddr>()
                .unwrap_or_else(|e| panic!("{s}: {e}"))
        };
        let attrs = [
            tuple_attr(CTA_TUPLE_ORIG, a(orig.0), a(orig.1)),
            tuple_attr(CTA_TUPLE_REPLY, a(reply.0), a(reply.1)),
        ]
        .concat();
        let len = u32::try_from(16 + 4 + attrs.len()).unwrap_or(u32::MAX);
        let mut out = Vec::new();
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&0x0100u16.to_ne_bytes());
        out.extend_from_slice(&2u16.to_ne_bytes());
        out.extend_from_slice(&1u32.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&[AF_INET, 0, 0, 0]);
        out.extend_from_slice(&attrs);
        out
    }

    fn done() -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&20u32.to_ne_bytes());
        out.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        out.extend_from_slice(&2u16.to_ne_bytes());
        out.extend_from_slice(&[0; 12]);
        out
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn the_entry_whose_reply_goes_to_the_peer_gives_the_clients_own_port() {
        let dump = [
            // The client's first connection, from port 40123, kept its port.
            entry(
                ("10.9.9.1:40123", "10.9.9.2:5432"),
                ("127.0.0.1:15001", "10.9.9.1:40123"),
            ),
            // Its second, from the same port to another destination: NAT moved it to 49074.
            entry(
                ("10.9.9.1:40123", "10.9.9.2:2525"),
                ("127.0.0.1:15001", "10.9.9.1:49074"),
            ),
            done(),
        ]
        .concat();
        let mut found = None;
        let ended = read_datagram(
            &dump,
            addr("10.9.9.1:49074"),
            addr("10.9.9.2:2525"),
            &mut found,
        );
        assert!(matches!(ended, Ok(true)), "{ended:?}");
        assert_eq!(found, Some(addr("10.9.9.1:40123")));
    }

    #[test]
    fn another_destination_or_peer_matches_nothing() {
        let dump = [
            entry(
                ("10.9.9.1:40123", "10.9.9.2:5432"),
                ("127.0.0.1:15001", "10.9.9.1:49074"),
            ),
            done(),
        ]
        .concat();
        for (peer, local) in [
            ("10.9.9.1:49074", "10.9.9.2:2525"),
            ("10.9.9.1:49075", "10.9.9.2:5432"),
            ("10.9.9.3:49074", "10.9.9.2:5432"),
        ] {
            let mut found = None;
            let ended = read_datagram(&dump, addr(peer), addr(local), &mut found);
            assert!(matches!(ended, Ok(true)), "{ended:?}");
            assert_eq!(found, None, "{peer} -> {local}");
        }
    }

    #[test]
    fn truncated_or_garbled_dumps_are_errors_or_nothing_never_a_panic() {
        let whole = [
            entry(
                ("10.9.9.1:40123", "10.9.9.2:2525"),
                ("127.0.0.1:15001", "10.9.9.1:49074"),
            ),
            done(),
        ]
        .concat();
        for cut in 0..whole.len() {
            let mut found = None;
            let _ = read_datagram(
                &whole[..cut],
                addr("10.9.9.1:49074"),
                addr("10.9.9.2:2525"),
                &mut found,
            );
            let mut garbled = whole.clone();
            garbled[cut] ^= 0xff;
            let _ = read_datagram(
                &garbled,
                addr("10.9.9.1:49074"),
                addr("10.9.9.2:2525"),
                &mut found,
            );
        }
    }
}
