//! The name a redirected client claims: the SNI of its TLS ClientHello, or the `Host` of its
//! plain HTTP request head, read with a timeout and a size limit.
//!
//! Every byte read is kept ([`Sniffed::replay`]) so the pipeline can hand them on unchanged
//! (to TLS termination, the HTTP parser, or the upstream of a raw relay). The ClientHello is
//! read by rustls' own `Acceptor` (the parser the TLS terminator uses), the request head by
//! `http::head`'s strict parser: no second parser of attacker bytes. A client that sends
//! nothing first (a server-speaks-first protocol) is not an error: it is [`Hello::Opaque`]
//! with nothing to replay once the timeout passes.

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
    let host = if let Some(v6) = text.strip_prefix('[') {
        let (inside, _) = v6.split_once(']')?;
        inside
    } else {
        match text.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            Some(_) => return None,
            None => text,
        }
    };
    canon::normalize_host(host).ok()
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
