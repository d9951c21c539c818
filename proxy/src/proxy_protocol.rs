//! The PROXY protocol (HAProxy's, versions 1 and 2) on the explicit and TLS listeners: the
//! header a load balancer sends before a client's bytes, carrying the client's address.
//!
//! Owns reading one header from a peer `--proxy-protocol-from` trusts (however the header is
//! cut across reads, and keeping whatever follows it in the same read: the client's request
//! or TLS bytes), what address it yields, and recognising a header sent by anyone else (who
//! is then refused: a client must not name its own address). Parsing is the `ppp` crate's.
//! What the address is used for (tenants, limits, audit) is the pipeline's; the listener
//! (`listen::front`) decides whom to read a header from. It imports nothing of sluice, so
//! that both can use it.

use std::net::{IpAddr, SocketAddr};

use bytes::BytesMut;
use ppp::{HeaderResult, PartialResult, v1, v2};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The longest header read: a v1 header is at most 107 bytes; a v2 header is 16 bytes and
/// its addresses (36 for IPv6) and TLVs, which a balancer may add (a unique id, TLS facts).
/// A longer one is refused rather than buffered.
pub const MAX_HEADER: usize = 16 + 2048;

/// The longest v1 header, CRLF included (the spec's 107 bytes).
const V1_MAX: usize = 107;

/// The first bytes of a version 2 header.
const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

/// What a header says about the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Carried {
    /// The client's address (`PROXY` command, TCP over IPv4 or IPv6).
    Client(SocketAddr),
    /// The balancer's own connection (v2 `LOCAL`, e.g. a health check; v1 `UNKNOWN`; an
    /// unspecified or UNIX family): the connection is the peer's, its address the socket's.
    Local,
}

/// Why a header was refused. The connection is closed (with a `400` where the client speaks
/// HTTP), and audited.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderError {
    /// A trusted peer closed or sent something else first: from it a header is required.
    #[error("no PROXY protocol header, which --proxy-protocol-from requires from this peer")]
    Missing,
    /// A header that does not parse (the reason `ppp`'s).
    #[error("a malformed PROXY protocol header: {0}")]
    Malformed(String),
    /// Longer than [`MAX_HEADER`].
    #[error("a PROXY protocol header longer than {MAX_HEADER} bytes")]
    TooLong,
    /// A version 2 header for a datagram transport: sluice proxies streams.
    #[error("a PROXY protocol header for a datagram (UDP) connection")]
    Datagram,
}

/// Whether `buf` starts with (a prefix of) a PROXY protocol header of either version: what
/// refuses a header from a peer not trusted to send one, and what tells a missing header
/// from a cut one.
pub fn is_header(buf: &[u8]) -> bool {
    let v1 = b"PROXY ";
    let n = buf.len().min(v1.len());
    let m = buf.len().min(V2_SIGNATURE.len());
    n > 0 && (buf[..n] == v1[..n] || buf[..m] == V2_SIGNATURE[..m])
}

/// Reads a header from `rd` into `buf` (which may already hold bytes) and removes it; what
/// followed it stays in `buf`. Waits as long as the header is cut but not refused: the
/// caller bounds the time.
pub async fn read<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
) -> Result<Carried, HeaderError> {
    loop {
        match parse(buf) {
            Ok(Some((carried, len))) => {
                let _ = buf.split_to(len);
                return Ok(carried);
            }
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        if buf.len() >= MAX_HEADER {
            return Err(HeaderError::TooLong);
        }
        buf.reserve(MAX_HEADER - buf.len());
        let mut limited = (&mut *rd).take((MAX_HEADER - buf.len()) as u64);
        match limited.read_buf(buf).await {
            Ok(0) | Err(_) => return Err(HeaderError::Missing),
            Ok(_) => {}
        }
    }
}

/// A whole header at the start of `buf`: what it carries and its length; `None` while it is
/// cut (more bytes may complete it).
pub fn parse(buf: &[u8]) -> Result<Option<(Carried, usize)>, HeaderError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if !is_header(buf) {
        return Err(HeaderError::Missing);
    }
    // A v1 header is one line: until its CRLF has come, it is cut (whatever a cut field
    // would parse as), within the 107 bytes the spec allows it.
    if buf[0] == b'P'
        && !buf[..buf.len().min(V1_MAX)]
            .windows(2)
            .any(|w| w == b"\r\n")
    {
        return if buf.len() >= V1_MAX {
            Err(HeaderError::Malformed(format!(
                "a v1 header longer than {V1_MAX} bytes"
            )))
        } else {
            Ok(None)
        };
    }
    let result = HeaderResult::parse(buf);
    if result.is_incomplete() {
        return Ok(None);
    }
    match result {
        HeaderResult::V1(Ok(h)) => {
            let carried = match h.addresses {
                v1::Addresses::Tcp4(a) => {
                    Carried::Client(SocketAddr::new(IpAddr::V4(a.source_address), a.source_port))
                }
                v1::Addresses::Tcp6(a) => {
                    Carried::Client(SocketAddr::new(IpAddr::V6(a.source_address), a.source_port))
                }
                v1::Addresses::Unknown => Carried::Local,
            };
            Ok(Some((carried, h.header.len())))
        }
        HeaderResult::V2(Ok(h)) => {
            if h.command == v2::Command::Local {
                return Ok(Some((Carried::Local, h.len())));
            }
            if h.protocol == v2::Protocol::Datagram {
                return Err(HeaderError::Datagram);
            }
            let carried = match h.addresses {
                v2::Addresses::IPv4(a) => {
                    Carried::Client(SocketAddr::new(IpAddr::V4(a.source_address), a.source_port))
                }
                v2::Addresses::IPv6(a) => {
                    Carried::Client(SocketAddr::new(IpAddr::V6(a.source_address), a.source_port))
                }
                // The spec: a receiver uses the connection's own addresses for these.
                v2::Addresses::Unspecified | v2::Addresses::Unix(_) => Carried::Local,
            };
            Ok(Some((carried, h.len())))
        }
        HeaderResult::V1(Err(e)) => Err(HeaderError::Malformed(e.to_string())),
        HeaderResult::V2(Err(e)) => Err(HeaderError::Malformed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn v2(command: u8, family: u8, addresses: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(0x20 | command);
        h.push(family);
        h.extend_from_slice(&u16::try_from(addresses.len()).unwrap().to_be_bytes());
        h.extend_from_slice(addresses);
        h
    }

    fn v2_tcp4(src: [u8; 4], port: u16) -> Vec<u8> {
        let mut a = src.to_vec();
        a.extend_from_slice(&[10, 0, 0, 1]);
        a.extend_from_slice(&port.to_be_bytes());
        a.extend_from_slice(&3128u16.to_be_bytes());
        v2(0x1, 0x11, &a)
    }

    #[test]
    fn both_versions_carry_the_client_and_local_carries_none() {
        let line = b"PROXY TCP4 192.0.2.7 10.0.0.1 5555 3128\r\nCONNECT a:443 HTTP/1.1\r\n\r\n";
        let (c, len) = parse(line).unwrap().unwrap();
        assert_eq!(c, Carried::Client("192.0.2.7:5555".parse().unwrap()));
        assert_eq!(&line[len..len + 7], b"CONNECT");
        let six = b"PROXY TCP6 2001:db8::7 2001:db8::1 5555 3128\r\n";
        assert_eq!(
            parse(six).unwrap().unwrap().0,
            Carried::Client("[2001:db8::7]:5555".parse().unwrap())
        );
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n").unwrap().unwrap().0,
            Carried::Local
        );
        let h = v2_tcp4([198, 51, 100, 9], 40000);
        assert_eq!(
            parse(&h).unwrap().unwrap(),
            (
                Carried::Client("198.51.100.9:40000".parse().unwrap()),
                h.len()
            )
        );
        // LOCAL (a balancer's health check) carries no client, whatever addresses follow.
        let local = v2(0x0, 0x11, &[1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2]);
        assert_eq!(parse(&local).unwrap().unwrap().0, Carried::Local);
        let unspec = v2(0x1, 0x00, &[]);
        assert_eq!(parse(&unspec).unwrap().unwrap().0, Carried::Local);
        let udp = v2(0x1, 0x12, &[1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2]);
        assert_eq!(parse(&udp), Err(HeaderError::Datagram));
    }

    #[test]
    fn a_cut_header_waits_and_anything_else_is_refused() {
        let line = b"PROXY TCP4 192.0.2.7 10.0.0.1 5555 3128\r\n";
        for cut in 1..line.len() {
            assert_eq!(parse(&line[..cut]), Ok(None), "{cut}");
        }
        let h = v2_tcp4([198, 51, 100, 9], 1);
        for cut in 1..h.len() {
            assert_eq!(parse(&h[..cut]), Ok(None), "{cut}");
        }
        assert_eq!(
            parse(b"CONNECT a:443 HTTP/1.1\r\n"),
            Err(HeaderError::Missing)
        );
        assert_eq!(parse(b"\x16\x03\x01"), Err(HeaderError::Missing));
        assert!(matches!(
            parse(b"PROXY TCP4 not-an-ip 10.0.0.1 1 2\r\n"),
            Err(HeaderError::Malformed(_))
        ));
        // A v2 header of another version or command.
        let mut bad = h.clone();
        bad[12] = 0x31;
        assert!(matches!(parse(&bad), Err(HeaderError::Malformed(_))));
        assert!(is_header(b"PROXY"));
        assert!(is_header(b"\r\n\r\n\0"));
        assert!(!is_header(b"GET / HTTP/1.1"));
    }

    #[tokio::test]
    async fn a_header_split_across_reads_and_followed_by_the_request_is_read_whole() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let mut bytes = v2_tcp4([203, 0, 113, 5], 7000);
        bytes.extend_from_slice(b"CONNECT a:443 HTTP/1.1\r\n\r\n");
        let sender = tokio::spawn(async move {
            for chunk in bytes.chunks(3) {
                client.write_all(chunk).await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            client
        });
        let mut buf = BytesMut::new();
        let carried = read(&mut server, &mut buf).await.unwrap();
        assert_eq!(
            carried,
            Carried::Client("203.0.113.5:7000".parse().unwrap())
        );
        let _client = sender.await.unwrap();
        // What followed the header is kept for the request reader (at least its start).
        assert!(b"CONNECT a:443 HTTP/1.1\r\n\r\n".starts_with(&buf));
    }

    #[tokio::test]
    async fn a_peer_that_sends_nothing_or_too_much_is_refused() {
        let (client, mut server) = tokio::io::duplex(64);
        drop(client);
        assert_eq!(
            read(&mut server, &mut BytesMut::new()).await,
            Err(HeaderError::Missing)
        );
        // A v2 header that claims 65535 bytes of TLVs is not buffered.
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        let mut h = V2_SIGNATURE.to_vec();
        h.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        h.extend_from_slice(&vec![0u8; 4096]);
        client.write_all(&h).await.unwrap();
        assert_eq!(
            read(&mut server, &mut BytesMut::new()).await,
            Err(HeaderError::TooLong)
        );
    }

    proptest::proptest! {
        /// Whatever bytes a trusted peer sends, parsing answers (a header, a wait, or a
        /// refusal) and never panics.
        #[test]
        fn any_bytes_parse_or_are_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), v in 0u8..3) {
            let mut input = match v {
                0 => b"PROXY ".to_vec(),
                1 => V2_SIGNATURE.to_vec(),
                _ => Vec::new(),
            };
            input.extend(bytes);
            let _ = parse(&input);
        }
    }
}
