//! Socket → inode: one exact NETLINK_SOCK_DIAG (`inet_diag`) query for the client's socket.
//!
//! The client's socket is the one whose source is the accepted socket's peer and whose
//! destination is the proxy's address as the client saw it. The kernel looks it up in its
//! connection hash (no dump, no `/proc/net/tcp` text). A socket answers in the network namespace
//! it was created in, which is how other namespaces are searched (`netns`).
//!
//! It does not find processes; it returns the inode and the socket's uid.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP, TCP_ESTABLISHED};
use netlink_packet_sock_diag::inet::{
    ExtensionFlags, InetRequest, InetResponseHeader, SocketId, StateFlags,
};
use netlink_sys::protocols::NETLINK_SOCK_DIAG;
use netlink_sys::{Socket, SocketAddr as NetlinkAddr};

/// `INET_DIAG_NOCOOKIE`: "any socket with this tuple", not one particular incarnation.
const NO_COOKIE: [u8; 8] = [0xff; 8];
/// The kernel answers an exact query before `send` returns, and a dump of a small table in
/// microseconds; this only bounds a kernel that stops answering.
const RECV_TIMEOUT: Duration = Duration::from_secs(1);
/// A reply is one `inet_diag_msg` (72 bytes + header) or one error; stale replies of a timed-out
/// query are skipped, at most this many.
const MAX_STALE_REPLIES: usize = 8;
/// `TCP_TIME_WAIT` (include/net/tcp_states.h).
const TCP_TIME_WAIT: u8 = 6;
/// Datagrams a dump may send before its end (a bound on a misbehaving reply stream).
const MAX_DUMP_DATAGRAMS: usize = 65_536;

/// What the kernel says about the client's socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SocketInfo {
    pub(crate) inode: u64,
    /// `idiag_uid`: the uid that created the socket (as seen from the querying namespace).
    pub(crate) uid: u32,
}

/// The exact query for the client's socket: source = `peer`, destination = `local`.
///
/// IPv4 peers that reach an IPv6 (dual-stack) listener show up as `::ffff:a.b.c.d`. When both
/// ends are IPv4 or v4-mapped, one `AF_INET` query is enough: the kernel keeps IPv4 sockets and
/// dual-stack IPv6 sockets talking IPv4 in the same IPv4 hash, and its exact lookup
/// (`inet_diag_find_one_icsk`) maps v4-mapped `AF_INET6` requests onto that same IPv4 lookup.
/// Genuine IPv6 pairs are queried as `AF_INET6`. Returns `None` when the two ends cannot belong
/// to one TCP connection (one IPv4, one genuine IPv6).
pub(crate) fn request_for(peer: SocketAddr, local: SocketAddr) -> Option<InetRequest> {
    let (family, src, dst) = match (peer.ip().to_canonical(), local.ip().to_canonical()) {
        (src @ IpAddr::V4(_), dst @ IpAddr::V4(_)) => (AF_INET, src, dst),
        (src @ IpAddr::V6(_), dst @ IpAddr::V6(_)) => (AF_INET6, src, dst),
        _ => return None,
    };
    Some(InetRequest {
        family,
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::empty(),
        // Ignored by exact queries (the reply is checked instead); kept for a reader of the
        // request.
        states: StateFlags::ESTABLISHED,
        socket_id: SocketId {
            source_port: peer.port(),
            destination_port: local.port(),
            source_address: src,
            destination_address: dst,
            interface_id: 0,
            cookie: NO_COOKIE,
        },
    })
}

/// Accepts a reply only for an ESTABLISHED socket with exactly the asked tuple and a real inode.
/// The kernel's exact lookup falls back to listening sockets and also returns TIME_WAIT ones,
/// so the reply is checked rather than trusted.
pub(crate) fn accept_reply(
    request: &InetRequest,
    reply: &InetResponseHeader,
) -> Option<SocketInfo> {
    let asked = &request.socket_id;
    let got = &reply.socket_id;
    let same_tuple = got.source_port == asked.source_port
        && got.destination_port == asked.destination_port
        && got.source_address.to_canonical() == asked.source_address.to_canonical()
        && got.destination_address.to_canonical() == asked.destination_address.to_canonical();
    (reply.state == TCP_ESTABLISHED && same_tuple && reply.inode != 0).then_some(SocketInfo {
        inode: u64::from(reply.inode),
        uid: reply.uid,
    })
}

/// An exact lookup's reply: the client's socket, a TIME_WAIT socket of the same tuple that may
/// hide it, or nothing of the client's.
fn classify(request: &InetRequest, reply: &InetResponseHeader) -> Exact {
    if let Some(info) = accept_reply(request, reply) {
        return Exact::Found(info);
    }
    let mut same = reply.clone();
    same.state = TCP_ESTABLISHED;
    same.inode = same.inode.max(1);
    match reply.state == TCP_TIME_WAIT && accept_reply(request, &same).is_some() {
        true => Exact::Shadowed,
        false => Exact::Missing,
    }
}

/// A netlink socket of `protocol` talking to the kernel, in the calling thread's network
/// namespace, whose reads give up after [`RECV_TIMEOUT`] (for `sock_diag` here, and the
/// conntrack dump of `conntrack`).
pub(crate) fn kernel_socket(protocol: isize) -> io::Result<Socket> {
    let mut socket = Socket::new(protocol)?;
    socket.bind_auto()?;
    socket.connect(&NetlinkAddr::new(0, 0))?;
    rustix::net::sockopt::set_socket_timeout(
        &socket,
        rustix::net::sockopt::Timeout::Recv,
        Some(RECV_TIMEOUT),
    )?;
    Ok(socket)
}

// === impl DiagSocket ===

/// A NETLINK_SOCK_DIAG socket bound to the network namespace it was created in.
#[derive(Debug)]
pub(crate) struct DiagSocket {
    socket: Socket,
    sequence: u32,
    buffer: Vec<u8>,
}

impl DiagSocket {
    /// Opens a socket in the calling thread's network namespace.
    pub(crate) fn open() -> io::Result<Self> {
        Ok(Self {
            socket: kernel_socket(NETLINK_SOCK_DIAG)?,
            sequence: 0,
            buffer: Vec::with_capacity(8192),
        })
    }

    /// Looks up the client's socket. `Ok(None)`: no such ESTABLISHED socket here.
    pub(crate) fn find(
        &mut self,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> io::Result<Option<SocketInfo>> {
        let Some(request) = request_for(peer, local) else {
            return Ok(None);
        };
        self.sequence = self.sequence.wrapping_add(1);
        let sequence = self.sequence;

        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST;
        header.sequence_number = sequence;
        let mut message =
            NetlinkMessage::new(header, SockDiagMessage::InetRequest(request.clone()).into());
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        self.socket.send(&bytes, 0)?;

        for _ in 0..MAX_STALE_REPLIES {
            self.buffer.clear();
            let received = self.socket.recv(&mut self.buffer, 0)?;
            let datagram = self.buffer.get(..received).unwrap_or(&self.buffer);
            match parse_datagram(datagram, sequence, &request)? {
                Some(Exact::Found(info)) => return Ok(Some(info)),
                Some(Exact::Missing) => return Ok(None),
                // The exact lookup stops at the first socket of the tuple, and a TIME_WAIT one
                // left by an earlier connection of the same ports can stand before the live
                // one (a client reusing its port at once): only a dump sees past it.
                Some(Exact::Shadowed) => return self.dump_find(&request),
                None => {}
            }
        }
        Err(io::Error::other(
            "no sock_diag reply carried the request's sequence number",
        ))
    }

    /// Looks up the client's socket among every ESTABLISHED TCP socket of the namespace (a
    /// dump): only when the exact lookup met a TIME_WAIT socket of the same tuple.
    fn dump_find(&mut self, request: &InetRequest) -> io::Result<Option<SocketInfo>> {
        self.sequence = self.sequence.wrapping_add(1);
        let sequence = self.sequence;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        header.sequence_number = sequence;
        let mut message =
            NetlinkMessage::new(header, SockDiagMessage::InetRequest(request.clone()).into());
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        self.socket.send(&bytes, 0)?;
        // Dump datagrams are larger than an exact reply; read the whole dump so that no part
        // of it is left for the next lookup.
        let mut buffer: Vec<u8> = Vec::with_capacity(64 * 1024);
        let mut found = None;
        for _ in 0..MAX_DUMP_DATAGRAMS {
            buffer.clear();
            let received = self.socket.recv(&mut buffer, 0)?;
            let datagram = buffer.get(..received).unwrap_or(&buffer);
            if dump_datagram(datagram, sequence, request, &mut found)? {
                return Ok(found);
            }
        }
        Err(io::Error::other("a sock_diag dump did not end"))
    }
}

/// What an exact lookup answered.
#[derive(Debug, PartialEq, Eq)]
enum Exact {
    Found(SocketInfo),
    Missing,
    /// A TIME_WAIT socket of exactly the asked tuple answered.
    Shadowed,
}

/// Reads one datagram of a dump into `found`. `Ok(true)`: the dump ended.
fn dump_datagram(
    mut datagram: &[u8],
    sequence: u32,
    request: &InetRequest,
    found: &mut Option<SocketInfo>,
) -> io::Result<bool> {
    while !datagram.is_empty() {
        let message = NetlinkMessage::<SockDiagMessage>::deserialize(datagram)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))?;
        let length = usize::try_from(message.header.length).unwrap_or(usize::MAX);
        if message.header.sequence_number == sequence {
            match message.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(reply))
                    if found.is_none() =>
                {
                    *found = accept_reply(request, &reply.header);
                }
                NetlinkPayload::Done(_) => return Ok(true),
                NetlinkPayload::Error(error) => {
                    return match error.code {
                        None => Ok(true),
                        Some(_) => Err(error.to_io()),
                    };
                }
                _ => {}
            }
        }
        let advance = length.checked_add(3).map(|l| l & !3).filter(|l| *l > 0);
        match advance.and_then(|l| datagram.get(l..)) {
            Some(rest) => datagram = rest,
            None => break,
        }
    }
    Ok(false)
}

/// Reads one datagram. `Ok(None)`: nothing in it answers `sequence` (a stale reply).
fn parse_datagram(
    mut datagram: &[u8],
    sequence: u32,
    request: &InetRequest,
) -> io::Result<Option<Exact>> {
    while !datagram.is_empty() {
        let message = NetlinkMessage::<SockDiagMessage>::deserialize(datagram)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))?;
        let length = usize::try_from(message.header.length).unwrap_or(usize::MAX);
        if message.header.sequence_number == sequence {
            match message.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(reply)) => {
                    return Ok(Some(classify(request, &reply.header)));
                }
                NetlinkPayload::Error(error) => {
                    return match error.code {
                        None => Ok(Some(Exact::Missing)),
                        Some(code) if -code.get() == rustix::io::Errno::NOENT.raw_os_error() => {
                            Ok(Some(Exact::Missing))
                        }
                        Some(_) => Err(error.to_io()),
                    };
                }
                NetlinkPayload::Done(_) => return Ok(Some(Exact::Missing)),
                _ => {}
            }
        }
        // Netlink messages are 4-byte aligned within a datagram.
        let advance = length.checked_add(3).map(|l| l & !3).filter(|l| *l > 0);
        match advance.and_then(|l| datagram.get(l..)) {
            Some(rest) => datagram = rest,
            None => break,
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn reply_for(request: &InetRequest, state: u8, inode: u32) -> InetResponseHeader {
        InetResponseHeader {
            family: request.family,
            state,
            timer: None,
            socket_id: request.socket_id.clone(),
            recv_queue: 0,
            send_queue: 0,
            uid: 1000,
            inode,
        }
    }

    #[test]
    fn ipv4_pair_is_an_inet_query_with_the_client_as_source() {
        let request = request_for(addr("127.0.0.1:40000"), addr("127.0.0.1:3128")).unwrap();
        assert_eq!(request.family, AF_INET);
        assert_eq!(request.socket_id.source_port, 40000);
        assert_eq!(request.socket_id.destination_port, 3128);
        assert_eq!(request.socket_id.cookie, NO_COOKIE);
    }

    #[test]
    fn v4_mapped_pair_is_queried_as_ipv4() {
        let request = request_for(
            addr("[::ffff:10.0.0.2]:40000"),
            addr("[::ffff:10.0.0.1]:3128"),
        )
        .unwrap();
        assert_eq!(request.family, AF_INET);
        assert_eq!(
            request.socket_id.source_address,
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))
        );
        let mixed = request_for(addr("[::ffff:10.0.0.2]:40000"), addr("10.0.0.1:3128")).unwrap();
        assert_eq!(mixed.family, AF_INET);
    }

    #[test]
    fn ipv6_pair_is_an_inet6_query() {
        let request = request_for(addr("[::1]:40000"), addr("[::1]:3128")).unwrap();
        assert_eq!(request.family, AF_INET6);
        assert_eq!(
            request.socket_id.source_address,
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        );
    }

    #[test]
    fn impossible_pair_is_not_queried() {
        assert!(request_for(addr("[2001:db8::1]:40000"), addr("10.0.0.1:3128")).is_none());
    }

    #[test]
    fn only_established_exact_replies_with_an_inode_count() {
        let request = request_for(addr("127.0.0.1:40000"), addr("127.0.0.1:3128")).unwrap();
        assert_eq!(
            accept_reply(&request, &reply_for(&request, TCP_ESTABLISHED, 99)),
            Some(SocketInfo {
                inode: 99,
                uid: 1000
            })
        );
        // TIME_WAIT (6) and LISTEN (10) replies, and a zero inode, are not the client's socket.
        assert_eq!(accept_reply(&request, &reply_for(&request, 6, 99)), None);
        assert_eq!(accept_reply(&request, &reply_for(&request, 10, 99)), None);
        assert_eq!(
            accept_reply(&request, &reply_for(&request, TCP_ESTABLISHED, 0)),
            None
        );
        let mut other = reply_for(&request, TCP_ESTABLISHED, 99);
        other.socket_id.destination_port = 3129;
        assert_eq!(accept_reply(&request, &other), None);
    }

    #[test]
    fn dual_stack_reply_matches_a_v4_request() {
        let request = request_for(addr("127.0.0.1:40000"), addr("127.0.0.1:3128")).unwrap();
        let mut reply = reply_for(&request, TCP_ESTABLISHED, 5);
        reply.family = AF_INET6;
        reply.socket_id.source_address = "::ffff:127.0.0.1".parse().unwrap();
        reply.socket_id.destination_address = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(
            accept_reply(&request, &reply).map(|info| info.inode),
            Some(5)
        );
    }

    #[test]
    fn a_listening_socket_answers_itself_but_a_missing_tuple_does_not() {
        // A real kernel round trip on the test's own sockets: the listener is not ESTABLISHED.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(local).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let mut diag = DiagSocket::open().unwrap();
        let found = diag.find(peer, local).unwrap().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&client);
        let inode = std::os::unix::fs::MetadataExt::ino(
            &std::fs::metadata(format!("/proc/self/fd/{fd}")).unwrap(),
        );
        assert_eq!(found.inode, inode);
        // The reverse tuple is the server side of the same connection, also ESTABLISHED.
        assert!(diag.find(local, peer).unwrap().is_some());
        let nobody = SocketAddr::new(peer.ip(), peer.port().wrapping_add(1).max(1));
        assert_eq!(diag.find(nobody, local).unwrap(), None);
    }

    #[test]
    fn a_time_wait_reply_of_the_same_tuple_sends_the_lookup_to_a_dump() {
        let request = request_for(addr("10.0.0.1:40000"), addr("10.0.0.2:6379")).unwrap();
        assert_eq!(
            classify(&request, &reply_for(&request, TCP_TIME_WAIT, 0)),
            Exact::Shadowed
        );
        assert!(matches!(
            classify(&request, &reply_for(&request, TCP_ESTABLISHED, 7)),
            Exact::Found(_)
        ));
        // A listener (the kernel's fallback) is not the client's and hides nothing.
        assert_eq!(
            classify(&request, &reply_for(&request, 10, 7)),
            Exact::Missing
        );
    }

    #[test]
    fn a_dump_finds_the_live_socket_and_reads_to_the_end() {
        // A real kernel round trip: the dump finds the test's own connection, and a lookup
        // after it still gets its own answer (nothing of the dump left unread).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(local).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let mut diag = DiagSocket::open().unwrap();
        let request = request_for(peer, local).unwrap();
        let by_dump = diag
            .dump_find(&request)
            .unwrap()
            .expect("found by the dump");
        let exact = diag.find(peer, local).unwrap().expect("found exactly");
        assert_eq!(by_dump, exact);
        let nobody = request_for(
            SocketAddr::new(peer.ip(), peer.port().wrapping_add(1).max(1)),
            local,
        )
        .unwrap();
        assert_eq!(diag.dump_find(&nobody).unwrap(), None);
    }
}
