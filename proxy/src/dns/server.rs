//! The policy DNS's sockets: one UDP socket and one TCP listener on the same address, the
//! DNS wire format through hickory-proto (no hand-written parser), one audit event per reply.
//!
//! Every question is decided by [`Responder::reply`]; this module only turns messages into
//! questions and replies into messages. Bounded against a client that tries to starve the
//! others:
//! - each client address may ask `--max-dns-queries-per-client-per-sec` questions a second
//!   over UDP and TCP together ([`RateLimit`]); past it, REFUSED, counted, and one audit
//!   event per burst;
//! - at most [`MAX_IN_FLIGHT`] UDP questions are answered at once, [`MAX_IN_FLIGHT_PER_CLIENT`]
//!   of them from one address ([`Slots`]); past either bound, a new question drops an older
//!   one (the address's own first, else the oldest of the address with the most), which is
//!   counted and never answered: a client asking names that take long to look up cannot
//!   starve the others;
//! - TCP: at most [`MAX_TCP_CONNECTIONS`] connections, [`MAX_TCP_PER_CLIENT`] of them from
//!   one address; the accept loop never waits: a connection past either bound closes an idle
//!   one ([`Slots`]: the address's own first). Each whole question must arrive within
//!   [`TCP_READ_TIMEOUT`] (a slow loris is cut off), and a connection answers at most
//!   [`MAX_TCP_QUESTIONS`] questions.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{DNSClass, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use super::answer::{AddressType, Reply, Responder};
use super::limit::{RateLimit, Verdict};
use crate::audit::{AuditSink, DnsQuery, DnsRcode, DnsTransport, Event, Outcome};
use crate::slots::{Slot, Slots};

/// UDP questions being answered at once.
pub const MAX_IN_FLIGHT: usize = 256;
/// UDP questions from one client address being answered at once.
pub const MAX_IN_FLIGHT_PER_CLIENT: usize = 64;
/// TCP connections served at once.
pub const MAX_TCP_CONNECTIONS: usize = 64;
/// TCP connections from one client address at once.
pub const MAX_TCP_PER_CLIENT: usize = 8;
/// A TCP connection must deliver each whole question (length and message) within this of
/// the previous reply (or of its start); else it is closed.
pub const TCP_READ_TIMEOUT: Duration = Duration::from_secs(3);
/// Questions one TCP connection may ask; then it is closed (RFC 7766 lets a server close).
pub const MAX_TCP_QUESTIONS: usize = 32;
/// The largest UDP reply without EDNS (RFC 1035 §4.2.1); with EDNS, at most this.
pub(crate) const UDP_PLAIN_MAX: usize = 512;
pub(crate) const UDP_EDNS_MAX: u16 = 1232;

/// A running policy DNS: what every question shares.
#[derive(Debug)]
pub struct DnsServer {
    pub responder: Responder,
    pub audit: Arc<AuditSink>,
    pub limit: RateLimit,
}

/// Binds UDP and TCP on `addr` (IPv6 sockets are v6-only, as the proxy's listeners).
pub fn bind(addr: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener)> {
    // Port 0: TCP takes the port UDP got, which a TCP socket may already hold; then another
    // port is tried.
    let attempts = if addr.port() == 0 { 16 } else { 1 };
    let mut last = None;
    for _ in 0..attempts {
        let udp = bind_udp(addr)?;
        let tcp_addr = SocketAddr::new(addr.ip(), udp.local_addr()?.port());
        match crate::listen::bind(tcp_addr) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AddrInUse)))
}

fn bind_udp(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let udp = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    if addr.is_ipv6() {
        udp.set_only_v6(true)?;
    }
    udp.set_nonblocking(true)?;
    udp.bind(&addr.into())?;
    UdpSocket::from_std(udp.into())
}

impl DnsServer {
    /// Answers UDP questions until the process ends.
    pub async fn serve_udp(self: Arc<Self>, socket: UdpSocket) {
        let socket = Arc::new(socket);
        let local = socket
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let slots = Slots::new(MAX_IN_FLIGHT, MAX_IN_FLIGHT_PER_CLIENT);
        let mut buf = vec![0u8; 4096];
        loop {
            let (n, src) = match socket.recv_from(&mut buf).await {
                Ok(x) => x,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            // Never waits: past the bounds, an older question goes unanswered (the client's
            // own first), never this one.
            let (slot, dropped) = slots.admit(src.ip());
            slot.busy(true);
            let packet = buf[..n].to_vec();
            let server = Arc::clone(&self);
            let socket = Arc::clone(&socket);
            tokio::spawn(async move {
                let peer = Peer {
                    src,
                    dst: local,
                    transport: DnsTransport::Udp,
                };
                tokio::select! {
                    reply = server.answer(&packet, peer) => {
                        if let Some(reply) = reply {
                            let _ = socket.send_to(&reply, src).await;
                        }
                    }
                    _ = dropped => crate::metrics::dns_dropped(),
                }
                drop(slot);
            });
        }
    }

    /// Answers TCP questions (RFC 7766: two-byte length, then the message) until the process
    /// ends.
    pub async fn serve_tcp(self: Arc<Self>, listener: TcpListener) {
        let slots = Slots::new(MAX_TCP_CONNECTIONS, MAX_TCP_PER_CLIENT);
        loop {
            let (stream, src) = match listener.accept().await {
                Ok(x) => x,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let (slot, closed) = slots.admit(src.ip());
            let server = Arc::clone(&self);
            tokio::spawn(async move {
                let dst = stream
                    .local_addr()
                    .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
                let peer = Peer {
                    src,
                    dst,
                    transport: DnsTransport::Tcp,
                };
                tokio::select! {
                    () = server.serve_connection(stream, peer, &slot) => {}
                    // Another connection needed the slot: this one is dropped, and so closed.
                    _ = closed => {}
                }
            });
        }
    }

    async fn serve_connection(&self, mut stream: TcpStream, peer: Peer, slot: &Slot) {
        for _ in 0..MAX_TCP_QUESTIONS {
            let read = async {
                let len = usize::from(stream.read_u16().await?);
                let mut msg = vec![0u8; len];
                stream.read_exact(&mut msg).await?;
                Ok::<_, std::io::Error>(msg)
            };
            let Ok(Ok(msg)) = tokio::time::timeout(TCP_READ_TIMEOUT, read).await else {
                return;
            };
            slot.busy(true);
            let Some(reply) = self.answer(&msg, peer).await else {
                return;
            };
            let Ok(len) = u16::try_from(reply.len()) else {
                return;
            };
            let mut out = Vec::with_capacity(reply.len() + 2);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&reply);
            if tokio::time::timeout(TCP_READ_TIMEOUT, stream.write_all(&out))
                .await
                .is_err()
            {
                return;
            }
            slot.busy(false);
        }
        // The last answer goes out before the close: questions the client pipelined past the
        // limit are read and dropped (for at most a second), since closing with them unread
        // would reset the connection and could discard answers the client has not read yet.
        let _ = stream.shutdown().await;
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            let mut sink = [0u8; 4096];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
    }

    /// The reply to one message (already framed for its transport's size), audited; `None`
    /// when the bytes are too short to carry an id to answer to.
    async fn answer(&self, packet: &[u8], peer: Peer) -> Option<Vec<u8>> {
        let mut event = DnsQuery {
            time: SystemTime::now(),
            src: peer.src,
            dst: peer.dst,
            transport: peer.transport,
            name: String::new(),
            qtype: String::new(),
            rcode: DnsRcode::FormErr,
            answers: Vec::new(),
            ttl: 0,
            outcome: Outcome::Denied,
            policy: None,
            reason: None,
        };
        let verdict = self.limit.check(peer.src.ip(), Instant::now());
        if verdict != Verdict::Answer {
            return self.rate_limited(packet, peer, event, verdict);
        }
        let request = match Message::from_vec(packet) {
            Ok(m) => m,
            Err(e) => {
                // No id to answer to, or a response (QR set): never reply.
                if packet.len() < 12 || packet[2] & 0x80 != 0 {
                    return None;
                }
                let id = u16::from_be_bytes([packet[0], packet[1]]);
                event.reason = Some(format!("malformed DNS message: {e}"));
                self.audit.emit(&Event::Dns(event));
                return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
                    .to_vec()
                    .ok();
            }
        };
        if request.metadata.message_type != MessageType::Query {
            // Never answer a response: that would let two resolvers bounce packets forever.
            return None;
        }
        let mut response = Message::response(request.metadata.id, request.metadata.op_code);
        response.metadata.recursion_desired = request.metadata.recursion_desired;
        response.metadata.recursion_available = true;
        if request.edns.is_some() {
            let mut edns = Edns::new();
            edns.set_max_payload(UDP_EDNS_MAX);
            response.set_edns(edns);
        }
        let max_udp = match &request.edns {
            Some(e) => usize::from(e.max_payload().clamp(512, UDP_EDNS_MAX)),
            None => UDP_PLAIN_MAX,
        };
        let question = match (&request.metadata.op_code, request.queries.as_slice()) {
            (OpCode::Query, [q]) if q.query_class() == DNSClass::IN => Ok(q.clone()),
            (OpCode::Query, [q]) => Err((
                Some(q.clone()),
                ResponseCode::Refused,
                DnsRcode::Refused,
                "only the IN class is answered",
            )),
            (OpCode::Query, _) => Err((
                None,
                ResponseCode::FormErr,
                DnsRcode::FormErr,
                "a query must carry exactly one question",
            )),
            _ => Err((
                request.queries.first().cloned(),
                ResponseCode::NotImp,
                DnsRcode::NotImp,
                "only standard queries are answered",
            )),
        };
        let question = match question {
            Ok(q) => q,
            Err((q, code, rcode, why)) => {
                if let Some(q) = q {
                    describe(&mut event, &q);
                    response.add_query(q);
                }
                response.metadata.response_code = code;
                event.rcode = rcode;
                event.reason = Some(why.to_string());
                self.audit.emit(&Event::Dns(event));
                return finish(response, peer.transport, max_udp);
            }
        };
        describe(&mut event, &question);
        let qtype = match question.query_type() {
            RecordType::A => AddressType::A,
            RecordType::AAAA => AddressType::Aaaa,
            _ => AddressType::Other,
        };
        // No address is handed out while the audit log cannot take records (`--audit-on-failure
        // closed` with a full spool): REFUSED, audited when it can be.
        let reply = if self.audit.refusing() {
            self.audit.refused();
            Reply::Refused {
                entry: None,
                reason: "sluice cannot write its audit log; questions are refused until it can"
                    .to_string(),
            }
        } else {
            self.responder.reply(&event.name, qtype).await
        };
        response.add_query(question.clone());
        match reply {
            Reply::Answer { addrs, ttl, entry } => {
                let ttl = u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX);
                for ip in &addrs {
                    let rdata = match ip.to_canonical() {
                        IpAddr::V4(v4) => RData::A(A(v4)),
                        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
                    };
                    response.add_answer(Record::from_rdata(question.name().clone(), ttl, rdata));
                }
                event.rcode = DnsRcode::NoError;
                event.outcome = Outcome::Allowed;
                event.answers = addrs;
                event.ttl = ttl;
                event.policy = Some(entry);
            }
            Reply::NxDomain { entry } => {
                response.metadata.response_code = ResponseCode::NXDomain;
                event.rcode = DnsRcode::NxDomain;
                event.outcome = Outcome::Allowed;
                event.policy = Some(entry);
            }
            Reply::ServFail { entry, reason } => {
                response.metadata.response_code = ResponseCode::ServFail;
                event.rcode = DnsRcode::ServFail;
                event.outcome = Outcome::Allowed;
                event.policy = Some(entry);
                event.reason = Some(reason);
            }
            Reply::Refused { entry, reason } => {
                response.metadata.response_code = ResponseCode::Refused;
                event.rcode = DnsRcode::Refused;
                event.policy = entry;
                event.reason = Some(reason);
            }
        }
        self.audit.emit(&Event::Dns(event));
        finish(response, peer.transport, max_udp)
    }
}

impl DnsServer {
    /// The reply to one message from a loopback client over UDP (`udp`) or TCP, as
    /// [`DnsServer::answer`] gives it: for `sluice::fuzz`.
    #[cfg(feature = "fuzz")]
    pub(crate) async fn answer_loopback(&self, packet: &[u8], udp: bool) -> Option<Vec<u8>> {
        let peer = Peer {
            src: SocketAddr::from(([127, 0, 0, 1], 5353)),
            dst: SocketAddr::from(([127, 0, 0, 1], 53)),
            transport: if udp {
                DnsTransport::Udp
            } else {
                DnsTransport::Tcp
            },
        };
        self.answer(packet, peer).await
    }

    /// REFUSED for a question over the client's rate limit (nothing for bytes that are not a
    /// query), counted; only the first of a burst is audited.
    fn rate_limited(
        &self,
        packet: &[u8],
        peer: Peer,
        mut event: DnsQuery,
        verdict: Verdict,
    ) -> Option<Vec<u8>> {
        let request = Message::from_vec(packet).ok();
        let request = request.filter(|r| r.metadata.message_type == MessageType::Query);
        if verdict == Verdict::RefuseFirst {
            if let Some(q) = request.as_ref().and_then(|r| r.queries.first()) {
                describe(&mut event, q);
            }
            event.rcode = DnsRcode::Refused;
            event.reason = Some(format!(
                "rate limit: more than {} questions a second from this address; further questions are refused without an audit event each until it slows down",
                self.limit.rate()
            ));
            self.audit.emit(&Event::Dns(event));
        } else {
            crate::metrics::dns_rate_limited();
        }
        let request = request?;
        let mut response = Message::response(request.metadata.id, request.metadata.op_code);
        response.metadata.recursion_desired = request.metadata.recursion_desired;
        response.metadata.response_code = ResponseCode::Refused;
        if let [q] = request.queries.as_slice() {
            response.add_query(q.clone());
        }
        finish(response, peer.transport, UDP_PLAIN_MAX)
    }
}

/// Who asked, where, how.
#[derive(Clone, Copy, Debug)]
struct Peer {
    src: SocketAddr,
    dst: SocketAddr,
    transport: DnsTransport,
}

/// The name and type of `q`, for the audit event.
fn describe(event: &mut DnsQuery, q: &Query) {
    let name = q.name().to_ascii();
    event.name = name.strip_suffix('.').unwrap_or(&name).to_string();
    event.qtype = q.query_type().to_string();
}

/// The encoded reply; over UDP, one that does not fit is sent truncated (TC set, no records)
/// so the client retries over TCP.
fn finish(response: Message, transport: DnsTransport, max_udp: usize) -> Option<Vec<u8>> {
    let bytes = response.to_vec().ok()?;
    if transport == DnsTransport::Udp && bytes.len() > max_udp {
        let mut cut = response.truncate();
        cut.metadata.truncation = true;
        return cut.to_vec().ok();
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use sluice_resolver::{Overrides, Resolver, VetOptions};

    use super::*;
    use crate::dns::table::HandedOut;
    use crate::policy::{Compat, Policy, Source, load};

    fn server() -> DnsServer {
        let policy: Arc<Policy> = Arc::new(
            load(
                &[Source {
                    name: "p.yaml".into(),
                    text: "version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - { host: a.example.com, port: 443 }\n    binaries:\n      - { path: /usr/bin/curl }\n".into(),
                }],
                Compat::Strict,
            )
            .unwrap()
            .policy,
        );
        let overrides = Overrides::from_args(&["a.example.com=93.184.215.7".to_string()]).unwrap();
        DnsServer {
            responder: Responder {
                policy: Arc::new(move || Arc::clone(&policy)),
                resolver: Resolver::overrides_only(overrides),
                compat: Compat::Strict,
                vet: VetOptions::default(),
                table: Arc::new(HandedOut::default()),
                ttl: Duration::from_secs(30),
            },
            audit: Arc::new(AuditSink::disabled()),
            limit: RateLimit::new(1_000_000),
        }
    }

    fn peer() -> Peer {
        Peer {
            src: "127.0.0.1:5353".parse().unwrap(),
            dst: "127.0.0.1:53".parse().unwrap(),
            transport: DnsTransport::Udp,
        }
    }

    fn query(name: &str, rtype: RecordType) -> Vec<u8> {
        let mut m = Message::query();
        m.metadata.id = 0x4242;
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(
            hickory_proto::rr::Name::from_ascii(name).unwrap(),
            rtype,
        ));
        m.to_vec().unwrap()
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_query_gets_a_reply_with_its_id_question_and_answer() {
        let s = server();
        let reply = rt()
            .block_on(s.answer(&query("A.example.com.", RecordType::A), peer()))
            .unwrap();
        let m = Message::from_vec(&reply).unwrap();
        assert_eq!(m.metadata.id, 0x4242);
        assert_eq!(m.metadata.message_type, MessageType::Response);
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert!(m.metadata.recursion_desired);
        assert_eq!(m.queries.len(), 1);
        assert_eq!(m.answers.len(), 1);
        let refused = rt()
            .block_on(s.answer(&query("b.example.com.", RecordType::A), peer()))
            .unwrap();
        let m = Message::from_vec(&refused).unwrap();
        assert_eq!(m.metadata.response_code, ResponseCode::Refused);
        assert!(m.answers.is_empty());
    }

    #[test]
    fn responses_and_runt_packets_get_no_reply() {
        let s = server();
        let mut response = Message::from_vec(&query("a.example.com.", RecordType::A)).unwrap();
        response.metadata.message_type = MessageType::Response;
        let bytes = response.to_vec().unwrap();
        assert!(rt().block_on(s.answer(&bytes, peer())).is_none());
        assert!(rt().block_on(s.answer(&[0x42], peer())).is_none());
        assert!(rt().block_on(s.answer(&[], peer())).is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
        /// Whatever arrives, the server does not panic, and whatever it sends back parses as a
        /// DNS response no larger than a plain UDP reply allows.
        #[test]
        fn arbitrary_packets_never_panic_and_replies_are_well_formed(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            valid_prefix in proptest::prelude::any::<bool>(),
        ) {
            let s = server();
            let packet = if valid_prefix {
                let mut q = query("a.example.com.", RecordType::A);
                q.truncate(12);
                q.extend_from_slice(&data);
                q
            } else {
                data
            };
            if let Some(reply) = rt().block_on(s.answer(&packet, peer())) {
                proptest::prop_assert!(reply.len() <= UDP_PLAIN_MAX.max(usize::from(UDP_EDNS_MAX)));
                let m = Message::from_vec(&reply);
                proptest::prop_assert!(m.is_ok(), "{:?}", m);
                proptest::prop_assert_eq!(m.unwrap().metadata.message_type, MessageType::Response);
            }
        }
    }
}
