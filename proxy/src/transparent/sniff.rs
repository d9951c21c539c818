//! The name a redirected client claims: the SNI of its TLS ClientHello, or the `Host` of its
//! plain HTTP request head, read with a timeout and a size limit.
//!
//! Every byte read is kept ([`Sniffed::replay`]) so the pipeline can hand them on unchanged
//! (to TLS termination, the HTTP parser, or the upstream of a raw relay). The ClientHello is
//! read by rustls' own `Acceptor` (the parser the TLS terminator uses), the request head by
//! `http::head`'s strict parser: no second parser of attacker bytes.
//!
//! The first bytes decide at once which it is, so a raw TCP client never waits for a head
//! it will not send: the TLS handshake byte starts a ClientHello; a request line (a method
//! token, a target, `HTTP/1.x`) starts a request head; anything else (a PostgreSQL startup
//! message, Redis' `PING\r\n`, an SSH banner, any binary protocol) is [`Hello::Opaque`] as
//! soon as the byte that rules both out arrives. A client that sends nothing first (a
//! server-speaks-first protocol) is not an error: it is [`Hello::Opaque`] with nothing to
//! replay once the timeout passes; the listener skips the sniff altogether where the policy
//! DNS says the address is for raw TCP only (`listener.rs`).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::http::head;
use crate::policy::canon;

/// How long and how much to read before deciding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SniffLimits {
    /// The whole sniff (all reads together).
    pub timeout: Duration,
    /// Largest ClientHello or request head read.
    pub max_bytes: usize,
}

impl Default for SniffLimits {
    fn default() -> Self {
        SniffLimits {
            timeout: Duration::from_secs(10),
            max_bytes: 16 * 1024,
        }
    }
}

/// What the first bytes were.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    /// A TLS ClientHello; `sni` is its `server_name`, lower-cased, without a trailing dot.
    Tls { sni: Option<String> },
    /// A plain HTTP/1 request head; `host` is its `Host` without the port.
    Http { host: Option<String> },
    /// Neither (or nothing before the timeout): no name is claimed.
    Opaque,
}

/// The result of a sniff: what was seen, and every byte read, to replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sniffed {
    pub hello: Hello,
    pub replay: Vec<u8>,
}

impl Sniffed {
    /// Nothing read, nothing claimed: the sniff was skipped.
    pub fn skipped() -> Sniffed {
        Sniffed {
            hello: Hello::Opaque,
            replay: Vec::new(),
        }
    }
}

/// Why nothing could be decided.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SniffError {
    /// The client closed before sending anything.
    #[error("the client closed the connection before sending anything")]
    Closed,
    /// A ClientHello started but was not complete in time.
    #[error("no complete TLS ClientHello within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The bytes start like TLS but are not a ClientHello rustls accepts.
    #[error("malformed TLS ClientHello: {0}")]
    MalformedTls(String),
    /// The ClientHello is larger than the limit.
    #[error("TLS ClientHello larger than {0} bytes")]
    TooLarge(usize),
    #[error("read error")]
    Io(#[source] std::io::Error),
}

/// TLS record type `handshake`: every ClientHello starts with it.
const TLS_HANDSHAKE: u8 = 0x16;

/// The longest method token read before the bytes are taken for another protocol: the
/// longest registered method (`UPDATEREDIRECTREF`) has 17 characters.
const MAX_METHOD: usize = 32;

/// Empty lines a request may start with (RFC 9112 §2.2 lets a server ignore at least one).
const MAX_LEADING_CRLF: usize = 2;

/// What the first bytes of a plaintext connection can still be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// A prefix of a request line so far: no byte yet rules one in or out.
    Undecided,
    /// A whole request line (RFC 9112 §3): a head follows.
    RequestLine,
    /// Not a request line: another protocol.
    Other,
}

/// Whether `buf` (the first bytes of a connection that is not TLS) starts with an HTTP/1
/// request line, `method SP request-target SP HTTP/D.D CRLF`, read as far as it goes: the
/// first byte that cannot continue one decides `Other`. (A method and a space alone are not
/// enough: an SSH identification string, `SSH-2.0-OpenSSH_9.2p1 Debian-2`, starts so.)
fn start_of(buf: &[u8]) -> Start {
    let mut rest = buf;
    for _ in 0..MAX_LEADING_CRLF {
        match rest {
            [b'\r'] => return Start::Undecided,
            [b'\r', b'\n', tail @ ..] => rest = tail,
            _ => break,
        }
    }
    // The method, then the request-target (visible ASCII), each ended by one space.
    for (is_part, max) in [
        (head::is_tchar as fn(u8) -> bool, MAX_METHOD),
        (|b: u8| b.is_ascii_graphic(), usize::MAX),
    ] {
        let len = rest.iter().take_while(|&&b| is_part(b)).count();
        if len > max {
            return Start::Other;
        }
        match rest.get(len) {
            None => return Start::Undecided,
            Some(b' ') if len > 0 => rest = &rest[len + 1..],
            Some(_) => return Start::Other,
        }
    }
    // The version and the line's end; `#` stands for a digit.
    for (i, want) in b"HTTP/#.#\r\n".iter().enumerate() {
        let Some(&b) = rest.get(i) else {
            return Start::Undecided;
        };
        let fits = if *want == b'#' {
            b.is_ascii_digit()
        } else {
            b == *want
        };
        if !fits {
            return Start::Other;
        }
    }
    Start::RequestLine
}

/// Reads the client's first bytes (at most `limits.max_bytes`, within `limits.timeout`) and
/// says what they claim.
pub async fn sniff<R: AsyncRead + Unpin>(
    reader: &mut R,
    limits: SniffLimits,
) -> Result<Sniffed, SniffError> {
    let mut buf = Vec::new();
    let deadline = tokio::time::Instant::now() + limits.timeout;
    // The first byte decides which parser reads on.
    let mut first = [0u8; 1];
    match tokio::time::timeout_at(deadline, reader.read(&mut first)).await {
        Err(_) => {
            return Ok(Sniffed {
                hello: Hello::Opaque,
                replay: buf,
            });
        }
        Ok(Ok(0)) => return Err(SniffError::Closed),
        Ok(Ok(_)) => buf.push(first[0]),
        Ok(Err(e)) => return Err(SniffError::Io(e)),
    }
    if first[0] == TLS_HANDSHAKE {
        let sni = read_client_hello(reader, &mut buf, deadline, limits).await?;
        return Ok(Sniffed {
            hello: Hello::Tls { sni },
            replay: buf,
        });
    }
    // Read on only while the bytes can still be the start of a request line.
    let mut chunk = [0u8; 64];
    loop {
        match start_of(&buf) {
            Start::RequestLine => break,
            Start::Undecided if buf.len() < limits.max_bytes => {}
            Start::Other | Start::Undecided => {
                return Ok(Sniffed {
                    hello: Hello::Opaque,
                    replay: buf,
                });
            }
        }
        match tokio::time::timeout_at(deadline, reader.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            // Silence, a close or an error with a token half sent: nothing is claimed, and
            // the bytes go on as they are (the relay sees the close or error itself).
            _ => {
                return Ok(Sniffed {
                    hello: Hello::Opaque,
                    replay: buf,
                });
            }
        }
    }
    let hello = read_http_host(reader, &mut buf, deadline, limits).await;
    Ok(Sniffed { hello, replay: buf })
}

/// Feeds rustls' `Acceptor` until it has a whole ClientHello.
async fn read_client_hello<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    deadline: tokio::time::Instant,
    limits: SniffLimits,
) -> Result<Option<String>, SniffError> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut fed = 0usize;
    loop {
        while fed < buf.len() {
            let mut rest = &buf[fed..];
            match acceptor.read_tls(&mut rest) {
                Ok(0) => break,
                Ok(n) => fed += n,
                Err(e) => return Err(SniffError::MalformedTls(e.to_string())),
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                return Ok(accepted.client_hello().server_name().and_then(sni_name));
            }
            Ok(None) => {}
            Err((e, _alert)) => return Err(SniffError::MalformedTls(e.to_string())),
        }
        if buf.len() >= limits.max_bytes {
            return Err(SniffError::TooLarge(limits.max_bytes));
        }
        let mut chunk = vec![0u8; (limits.max_bytes - buf.len()).min(4096)];
        match tokio::time::timeout_at(deadline, reader.read(&mut chunk)).await {
            Err(_) => return Err(SniffError::Timeout(limits.timeout)),
            Ok(Ok(0)) => {
                return Err(SniffError::MalformedTls(
                    "the client closed in the middle of its ClientHello".to_string(),
                ));
            }
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(SniffError::Io(e)),
        }
    }
}

/// An SNI as a policy host name: normalised, and never an address (RFC 6066 §3 forbids IP
/// literals in `server_name`; one that slips through claims nothing).
fn sni_name(sni: &str) -> Option<String> {
    let name = canon::normalize_host(sni).ok()?;
    if name.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    Some(name)
}

/// Reads a request head with `http::head`'s strict parser; anything that is not one (another
/// protocol, a malformed head, silence) is [`Hello::Opaque`] with the bytes read so far.
async fn read_http_host<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    deadline: tokio::time::Instant,
    limits: SniffLimits,
) -> Hello {
    let mut recorder = Recorder {
        inner: reader,
        seen: std::mem::take(buf),
        replayed: 0,
    };
    let mut scratch = bytes::BytesMut::new();
    let read = tokio::time::timeout_at(
        deadline,
        head::read_head(&mut recorder, &mut scratch, limits.max_bytes),
    )
    .await;
    *buf = recorder.seen;
    match read {
        Ok(Ok(h)) if h.minor_version <= 1 => Hello::Http {
            host: h.header("host").and_then(host_name),
        },
        _ => Hello::Opaque,
    }
}

/// A `Host` value without its port, normalised; `None` when it is not a valid host.
fn host_name(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?.trim();
    // The port does not matter here (the original destination's does), only that it is one.
    let named = sluice_addr::Authority::parse(text, Some(80)).ok()?;
    canon::normalize_host(named.host()).ok()
}

/// A reader that first replays the bytes already seen, then reads on, keeping a copy of
/// everything so the sniff can hand it on.
struct Recorder<'r, R> {
    inner: &'r mut R,
    seen: Vec<u8>,
    replayed: usize,
}

impl<R: AsyncRead + Unpin> AsyncRead for Recorder<'_, R> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        out: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.replayed < this.seen.len() {
            let n = (this.seen.len() - this.replayed).min(out.remaining());
            out.put_slice(&this.seen[this.replayed..this.replayed + n]);
            this.replayed += n;
            return std::task::Poll::Ready(Ok(()));
        }
        let before = out.filled().len();
        let poll = std::pin::Pin::new(&mut *this.inner).poll_read(cx, out);
        if let std::task::Poll::Ready(Ok(())) = &poll {
            let new = &out.filled()[before..];
            this.seen.extend_from_slice(new);
            this.replayed = this.seen.len();
        }
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SniffLimits {
        SniffLimits {
            timeout: Duration::from_millis(300),
            max_bytes: 16 * 1024,
        }
    }

    /// A real ClientHello from rustls' client for `name`.
    fn client_hello(name: &str) -> Vec<u8> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let server = rustls_pki_types::ServerName::try_from(name.to_string()).unwrap();
        let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), server).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    async fn sniff_bytes(chunks: Vec<Vec<u8>>, close: bool) -> Result<Sniffed, SniffError> {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for c in chunks {
                client.write_all(&c).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if close {
                drop(client);
            } else {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        let got = sniff(&mut server, limits()).await;
        writer.abort();
        got
    }

    #[tokio::test]
    async fn sni_comes_from_a_real_client_hello_split_anywhere() {
        let hello = client_hello("API.Example.com");
        for cut in [1, 2, 5, 40, hello.len() - 1] {
            let got = sniff_bytes(vec![hello[..cut].to_vec(), hello[cut..].to_vec()], false)
                .await
                .unwrap();
            assert_eq!(
                got.hello,
                Hello::Tls {
                    sni: Some("api.example.com".to_string())
                }
            );
            assert_eq!(got.replay, hello, "every byte read is kept, in order");
        }
    }

    #[tokio::test]
    async fn host_comes_from_a_plain_request_head_without_its_port() {
        let req = b"GET /x HTTP/1.1\r\nHost: Example.COM.:8080\r\nAccept: */*\r\n\r\nBODY".to_vec();
        let got = sniff_bytes(vec![req[..3].to_vec(), req[3..].to_vec()], false)
            .await
            .unwrap();
        assert_eq!(
            got.hello,
            Hello::Http {
                host: Some("example.com".to_string())
            }
        );
        assert!(req.starts_with(&got.replay) && got.replay.len() >= req.len() - 4);
    }

    #[tokio::test]
    async fn a_request_without_host_claims_no_name() {
        let req = b"GET / HTTP/1.0\r\n\r\n".to_vec();
        let got = sniff_bytes(vec![req.clone()], false).await.unwrap();
        assert_eq!(got.hello, Hello::Http { host: None });
        assert_eq!(got.replay, req);
    }

    #[tokio::test]
    async fn other_protocols_and_silence_claim_nothing_and_keep_their_bytes() {
        let ssh = b"SSH-2.0-OpenSSH_9.6\r\n".to_vec();
        let got = sniff_bytes(vec![ssh.clone()], false).await.unwrap();
        assert_eq!(got.hello, Hello::Opaque);
        assert_eq!(got.replay, ssh);
        let got = sniff_bytes(vec![], false).await.unwrap();
        assert_eq!(got.hello, Hello::Opaque);
        assert!(got.replay.is_empty());
        assert!(matches!(
            sniff_bytes(vec![], true).await,
            Err(SniffError::Closed)
        ));
    }

    /// Sniffs `bytes` from a client that then stays silent with its socket open, under a
    /// 10 s sniff timeout on tokio's paused clock: returns the result and how long (virtual
    /// time) the sniff waited.
    async fn sniff_then_silence(bytes: &[u8]) -> (Sniffed, Duration) {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        tokio::io::AsyncWriteExt::write_all(&mut client, bytes)
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        let limits = SniffLimits {
            timeout: Duration::from_secs(10),
            max_bytes: 16 * 1024,
        };
        let got = sniff(&mut server, limits).await.unwrap();
        drop(client);
        (got, started.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn raw_protocols_are_recognised_from_their_first_bytes_without_waiting() {
        // The finding: each of these waited the whole head timeout before it was relayed.
        for first in [
            // PostgreSQL's SSLRequest and StartupMessage (a length, then a code).
            &[0u8, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f][..],
            &[0, 0, 0, 0x29, 0, 3, 0, 0][..],
            // Redis, inline and RESP.
            b"PING\r\n",
            b"*1\r\n$4\r\nPING\r\n",
            // SSH's identification string; MySQL-style binary; a lone CR LF CR LF CR LF.
            b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n",
            &[0x0a, 0x00, 0x00, 0x01][..],
            b"\r\n\r\n\r\nGET / HTTP/1.1\r\n",
            // A token longer than any method.
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJ / HTTP/1.1\r\n",
        ] {
            let (got, waited) = sniff_then_silence(first).await;
            assert_eq!(got.hello, Hello::Opaque, "{first:?}");
            assert!(first.starts_with(&got.replay), "{first:?}");
            assert!(
                waited < Duration::from_millis(1),
                "{first:?} waited {waited:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn request_lines_are_read_as_heads_and_a_half_sent_token_waits() {
        for req in [
            &b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"[..],
            b"\r\nPROPFIND /x HTTP/1.1\r\nHost: a.test\r\n\r\n",
            b"M-SEARCH * HTTP/1.1\r\nHost: a.test\r\n\r\n",
        ] {
            let (got, waited) = sniff_then_silence(req).await;
            assert_eq!(
                got.hello,
                Hello::Http {
                    host: Some("a.test".to_string())
                },
                "{req:?}"
            );
            assert_eq!(got.replay, req);
            assert!(waited < Duration::from_millis(1));
        }
        // A method token with nothing after it yet may still become a request line.
        let (got, waited) = sniff_then_silence(b"OPTIO").await;
        assert_eq!(got.hello, Hello::Opaque);
        assert_eq!(got.replay, b"OPTIO");
        assert_eq!(waited, Duration::from_secs(10));
    }

    #[tokio::test]
    async fn a_broken_or_stalled_client_hello_is_an_error_not_a_guess() {
        let hello = client_hello("example.com");
        let stalled = sniff_bytes(vec![hello[..20].to_vec()], false).await;
        assert!(
            matches!(stalled, Err(SniffError::Timeout(_))),
            "{stalled:?}"
        );
        let mut garbage = vec![0x16, 0x03, 0x01, 0x00, 0x05, 0x09, 1, 2, 3, 4];
        garbage.extend_from_slice(&[0; 8]);
        let broken = sniff_bytes(vec![garbage], false).await;
        assert!(
            matches!(broken, Err(SniffError::MalformedTls(_))),
            "{broken:?}"
        );
    }

    #[test]
    fn ip_literals_in_sni_claim_nothing() {
        assert_eq!(sni_name("192.0.2.1"), None);
        assert_eq!(sni_name("Example.com."), Some("example.com".to_string()));
        assert_eq!(
            host_name(b"[2001:db8::1]:443"),
            Some("2001:db8::1".to_string())
        );
        assert_eq!(host_name(b"example.com:x"), None);
        // A `Host` whose port is not one names no host (`sluice_addr::parse_port`).
        for bad in [
            &b"example.com:+80"[..],
            b"example.com:0",
            b"example.com:",
            b"[::1",
        ] {
            assert_eq!(host_name(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(
            host_name(b"Example.com:8080"),
            Some("example.com".to_string())
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Whatever the bytes, sniffing returns (no panic) and never loses or invents a byte.
        #[test]
        fn arbitrary_first_bytes_never_panic_and_replay_exactly(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..2048)
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let got = rt.block_on(async {
                let mut reader: &[u8] = &data;
                sniff(&mut reader, SniffLimits { timeout: Duration::from_millis(50), max_bytes: 4096 }).await
            });
            if let Ok(s) = got {
                proptest::prop_assert!(data.starts_with(&s.replay));
            }
        }
    }
}
