//! A tiny DNS server on 127.0.0.1 for tests: hand-built responses over UDP, so the real DNS
//! path of hickory is exercised without any traffic leaving the machine.
//!
//! It answers A and AAAA questions from a fixed zone (or always NODATA, SERVFAIL, or never),
//! records every question it receives, and stops when dropped (or after a minute at most).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hickory_resolver::proto::rr::RecordType;

/// How the server answers.
pub(crate) enum Reply {
    /// Records by lowercase name without trailing dot: matching records, NODATA for a known name
    /// without records of the asked type, NXDOMAIN for an unknown name.
    Zone(Vec<(&'static str, IpAddr)>),
    /// Like `Zone` for A questions; AAAA questions are never answered.
    ZoneSilentOnAaaa(Vec<(&'static str, IpAddr)>),
    /// NOERROR with no answer to every question.
    NoData,
    /// SERVFAIL to every question.
    ServFail,
    /// Never answers.
    Silent,
}

type Queries = Arc<Mutex<Vec<(String, RecordType)>>>;

pub(crate) struct TestDns {
    addr: SocketAddr,
    queries: Queries,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

const MAX_LIFETIME: Duration = Duration::from_secs(60);

impl TestDns {
    pub(crate) fn start(reply: Reply) -> Self {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let queries = Queries::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let queries = queries.clone();
            let stop = stop.clone();
            move || serve(&socket, &reply, &queries, &stop)
        });
        Self {
            addr,
            queries,
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The questions received so far: (lowercase name without trailing dot, type).
    pub(crate) fn queries(&self) -> Vec<(String, RecordType)> {
        self.queries.lock().unwrap().clone()
    }
}

impl Drop for TestDns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(socket: &UdpSocket, reply: &Reply, queries: &Queries, stop: &AtomicBool) {
    let started = Instant::now();
    let mut buf = [0u8; 1500];
    while !stop.load(Ordering::Relaxed) && started.elapsed() < MAX_LIFETIME {
        let Ok((len, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        // Only ever answer the loopback peer that asked.
        if !peer.ip().is_loopback() {
            continue;
        }
        let Some(question) = parse_question(&buf[..len]) else {
            continue;
        };
        queries
            .lock()
            .unwrap()
            .push((question.name.clone(), RecordType::from(question.qtype)));
        if let Some(response) = respond(&buf[..len], &question, reply) {
            let _ = socket.send_to(&response, peer);
        }
    }
}

struct Question {
    name: String,
    qtype: u16,
    /// Offset just past QTYPE and QCLASS.
    end: usize,
}

/// Parses the first question of a query (RFC 1035 §4.1.2); no compression in questions.
fn parse_question(msg: &[u8]) -> Option<Question> {
    if msg.len() < 12 || u16::from_be_bytes([msg[4], msg[5]]) == 0 {
        return None;
    }
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*msg.get(pos)?);
        pos += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None;
        }
        let label = msg.get(pos..pos + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        pos += len;
    }
    let qtype = u16::from_be_bytes([*msg.get(pos)?, *msg.get(pos + 1)?]);
    msg.get(pos + 2..pos + 4)?;
    Some(Question {
        name: labels.join("."),
        qtype,
        end: pos + 4,
    })
}

const A: u16 = 1;
const AAAA: u16 = 28;
const NOERROR: u16 = 0;
const SERVFAIL: u16 = 2;
const NXDOMAIN: u16 = 3;

fn respond(query: &[u8], question: &Question, reply: &Reply) -> Option<Vec<u8>> {
    let (rcode, answers): (u16, Vec<IpAddr>) = match reply {
        Reply::Silent => return None,
        Reply::ServFail => (SERVFAIL, vec![]),
        Reply::NoData => (NOERROR, vec![]),
        Reply::ZoneSilentOnAaaa(_) if question.qtype == AAAA => return None,
        Reply::Zone(zone) | Reply::ZoneSilentOnAaaa(zone) => {
            let known = zone.iter().any(|(name, _)| *name == question.name);
            let answers = zone
                .iter()
                .filter(|(name, _)| *name == question.name)
                .map(|&(_, ip)| ip)
                .filter(|ip| match question.qtype {
                    A => ip.is_ipv4(),
                    AAAA => ip.is_ipv6(),
                    _ => false,
                })
                .collect();
            (if known { NOERROR } else { NXDOMAIN }, answers)
        }
    };
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(&query[0..2]); // ID
    // QR=1, opcode 0, AA=1, RD copied, RA=1, rcode.
    let rd = u16::from(query[2] & 0x01) << 8;
    let flags: u16 = 0x8000 | 0x0400 | rd | 0x0080 | rcode;
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
    let ancount = u16::try_from(answers.len()).ok()?;
    out.extend_from_slice(&ancount.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes()); // NSCOUNT
    out.extend_from_slice(&0u16.to_be_bytes()); // ARCOUNT
    out.extend_from_slice(&query[12..question.end]);
    for ip in answers {
        out.extend_from_slice(&[0xc0, 0x0c]); // pointer to the question name
        let (rtype, rdata) = match ip {
            IpAddr::V4(v4) => (A, v4.octets().to_vec()),
            IpAddr::V6(v6) => (AAAA, v6.octets().to_vec()),
        };
        out.extend_from_slice(&rtype.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes()); // class IN
        out.extend_from_slice(&60u32.to_be_bytes()); // TTL
        out.extend_from_slice(&u16::try_from(rdata.len()).ok()?.to_be_bytes());
        out.extend_from_slice(&rdata);
    }
    Some(out)
}
