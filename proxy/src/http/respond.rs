//! Responses sluice writes to an HTTP/1 client: its own refusals, and upstream responses.
//!
//! Owns the refusal shape every denial shares (a status and a compact JSON body with
//! `error`, `detail` and, where there is one, `reason`: spec §9), and the serialisation of
//! an upstream response with hop-by-hop headers removed and framing chosen for the client
//! (Content-Length kept, else chunked for HTTP/1.1, else close-delimited).

use std::io::IoSlice;
use std::pin::Pin;
use std::task::Poll;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use serde_json::{Map, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus `Proxy-*`.
pub(crate) fn is_hop_by_hop(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
    ) || n.starts_with("proxy-")
}

pub use crate::refusal_code::Code;

/// A refusal: what the client reads when sluice says no.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The code's status ([`Code::status`]).
    pub status: u16,
    /// Machine-readable code (`policy_denied`, `ssrf_denied`, ...).
    pub error: Code,
    /// One sentence saying what was refused.
    pub detail: String,
    /// Why (the policy's reason), when there is one.
    pub reason: Option<String>,
    /// More fields for agents (`binary`, `host`, `port`, `stage`, ...).
    pub extra: Vec<(&'static str, Value)>,
    /// Seconds after which the client may try again (`Retry-After`).
    retry_after: Option<u32>,
    /// The L7 policy entry that denied it (`X-OpenShell-Policy`).
    policy_entry: Option<Box<str>>,
}

impl Refusal {
    /// A refusal with `error`'s status ([`Code::status`]).
    pub fn new(error: Code, detail: impl Into<String>) -> Refusal {
        Refusal {
            status: error.status(),
            error,
            detail: detail.into(),
            reason: None,
            extra: Vec::new(),
            retry_after: None,
            policy_entry: None,
        }
    }

    /// Says when to come back: the `retry_after` field and the `Retry-After` header.
    pub(crate) fn retry_after(mut self, secs: u64) -> Refusal {
        self.retry_after = Some(u32::try_from(secs).unwrap_or(u32::MAX));
        self.with("retry_after", secs)
    }

    /// Names the L7 policy entry that denied it: the `policy` field and, when the name is a
    /// valid field value, the `X-OpenShell-Policy` header (as the reference does).
    pub(crate) fn denied_by_entry(mut self, policy: &str) -> Refusal {
        if !policy.is_empty() && policy.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            self.policy_entry = Some(policy.into());
        }
        self.with("policy", policy.to_string())
    }

    pub(crate) fn with_reason(mut self, reason: impl Into<String>) -> Refusal {
        let r = reason.into();
        if !r.is_empty() {
            self.reason = Some(r);
        }
        self
    }

    pub(crate) fn with(mut self, key: &'static str, value: impl Into<Value>) -> Refusal {
        self.extra.push((key, value.into()));
        self
    }

    pub(crate) fn body(&self) -> String {
        let mut m = Map::new();
        m.insert("error".into(), Value::from(self.error.as_str()));
        m.insert("detail".into(), Value::from(self.detail.clone()));
        if let Some(r) = &self.reason {
            m.insert("reason".into(), Value::from(r.clone()));
        }
        for (k, v) in &self.extra {
            m.insert((*k).into(), v.clone());
        }
        Value::Object(m).to_string()
    }

    /// What was refused and why, in one line: the detail, followed by the reason where the
    /// detail does not already end with it.
    fn why(&self) -> String {
        match &self.reason {
            Some(r) if !self.detail.ends_with(r.as_str()) => format!("{}: {r}", self.detail),
            _ => self.detail.clone(),
        }
    }

    /// The refusal's header fields besides its framing, for HTTP/1.1 and HTTP/2 alike: the
    /// code and why in `X-Sluice-Error` and `X-Sluice-Reason` (what `curl -v` prints of a
    /// `CONNECT` refusal, whose body curl never shows); a gateway tenant's credentials are
    /// asked for (RFC 9110 §11.7.1); a refusal that says when to come back says it in
    /// `Retry-After` too (RFC 9110 §10.2.3); an L7 policy denial names its policy entry in
    /// `X-OpenShell-Policy`, as the reference does (when the name is a valid field value).
    pub(crate) fn headers(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (ERROR_HEADER, self.error.as_str().to_string()),
            (REASON_HEADER, field_text(&self.why(), MAX_REASON_FIELD)),
        ];
        if self.error == Code::ProxyAuthRequired {
            out.push((
                "Proxy-Authenticate",
                "Basic realm=\"sluice\", charset=\"UTF-8\"".to_string(),
            ));
        }
        if let Some(secs) = self.retry_after {
            out.push(("Retry-After", secs.to_string()));
        }
        if let Some(policy) = &self.policy_entry {
            out.push(("X-OpenShell-Policy", policy.to_string()));
        }
        out
    }

    /// The HTTP/1.1 status line's reason phrase: the status's own, then sluice's code and
    /// why. Python's `http.client` (so `requests`, `urllib3` and pip) prints a failed
    /// tunnel's reason phrase and nothing else of the response: `Tunnel connection failed:
    /// 403 Forbidden (sluice: policy_denied: ...)`.
    pub(crate) fn reason_phrase(&self) -> String {
        let canonical = StatusCode::from_u16(self.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Error");
        format!(
            "{canonical} (sluice: {}: {})",
            self.error.as_str(),
            field_text(&self.why(), MAX_REASON_PHRASE)
        )
    }

    /// The complete HTTP/1.1 response; the connection is closed after it.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let body = self.body();
        let reason = self.reason_phrase();
        let mut extra = String::new();
        for (name, value) in self.headers() {
            extra.push_str(&format!("{name}: {value}\r\n"));
        }
        format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.status,
            body.len()
        )
        .into_bytes()
    }
}

/// The response header naming a refusal's code (`policy_denied`, ...).
pub const ERROR_HEADER: &str = "X-Sluice-Error";
/// The response header saying why, in one line.
pub const REASON_HEADER: &str = "X-Sluice-Reason";
/// The longest `X-Sluice-Reason`, in bytes (a policy's reason is the operator's text).
const MAX_REASON_FIELD: usize = 300;
/// The longest reason text in a status line, in bytes.
const MAX_REASON_PHRASE: usize = 160;

/// `text` as a field value or reason phrase: visible ASCII and spaces only (anything else
/// is `?`, so no line break or control byte can end the field early), at most `max` bytes
/// (cut with `...`).
fn field_text(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .map(|c| match c {
            ' '..='~' => c,
            '\t' | '\n' | '\r' => ' ',
            _ => '?',
        })
        .collect();
    if out.len() > max {
        out.truncate(max.saturating_sub(3));
        out.push_str("...");
    }
    out
}

/// What writing a response did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    /// Body bytes sent to the client.
    pub body_bytes: u64,
    /// Head and body bytes sent to the client.
    pub wire_bytes: u64,
    /// The response was delimited by closing the connection.
    pub close_delimited: bool,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum WriteError {
    #[error("writing to the client failed: {0}")]
    Client(#[from] std::io::Error),
    #[error("reading the upstream response body failed: {0}")]
    Upstream(String),
}

/// Bytes gathered before they are written even though more are ready (a fast download).
const WRITE_AT: usize = 64 * 1024;

/// What is ready to go to the client and not yet written: framing (the head, chunk lines)
/// and body frames, in order. Written in one go when nothing more is ready, so a response
/// whose body is already there is one write (over TLS one record and one system call).
struct Pending {
    /// Where framing is formatted; each piece is split off it (one allocation for many).
    framing: BytesMut,
    pieces: Vec<Bytes>,
    len: usize,
}

impl Pending {
    fn new() -> Pending {
        Pending {
            framing: BytesMut::with_capacity(512),
            pieces: Vec::with_capacity(8),
            len: 0,
        }
    }

    /// Framing bytes, formatted by `f` into the framing buffer.
    fn framing(&mut self, f: impl FnOnce(&mut BytesMut)) {
        f(&mut self.framing);
        let piece = self.framing.split().freeze();
        self.push(piece);
    }

    fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }

    /// Writes everything pending: one vectored write where the writer takes them, else the
    /// pieces joined into one buffer.
    async fn write<W: AsyncWrite + Unpin>(&mut self, w: &mut W) -> std::io::Result<()> {
        if self.pieces.is_empty() {
            return Ok(());
        }
        if self.pieces.len() == 1 || !w.is_write_vectored() {
            if let [one] = self.pieces.as_slice() {
                w.write_all(one).await?;
            } else {
                let mut joined = Vec::with_capacity(self.len);
                for p in &self.pieces {
                    joined.extend_from_slice(p);
                }
                w.write_all(&joined).await?;
            }
        } else {
            let mut first = 0;
            while first < self.pieces.len() {
                let slices: Vec<IoSlice<'_>> = self.pieces[first..]
                    .iter()
                    .map(|p| IoSlice::new(p))
                    .collect();
                let mut n = w.write_vectored(&slices).await?;
                if n == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                while n > 0 {
                    let len = self.pieces[first].len();
                    if n >= len {
                        n -= len;
                        first += 1;
                    } else {
                        self.pieces[first].advance(n);
                        n = 0;
                    }
                }
            }
        }
        self.pieces.clear();
        self.len = 0;
        Ok(())
    }
}

/// Lower-case hex digits of `n`, without leading zeros.
fn put_hex(out: &mut BytesMut, n: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = HEX[v & 0xf];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The next frame if the body has it now (`Ready`), else `Pending` with the task registered
/// to be woken when it does.
async fn poll_once<B: Body + Unpin>(
    body: &mut B,
) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *body).poll_frame(cx))).await
}

/// Writes an upstream response to an HTTP/1 client. What is ready is written together (the
/// head with the body frames already there), and flushed as soon as the next frame is not:
/// a streamed body (server-sent events) reaches the client frame by frame.
pub(crate) async fn write_response<W, B>(
    w: &mut W,
    resp: Response<B>,
    head_request: bool,
    client_minor: u8,
    keep_alive: bool,
) -> Result<Written, WriteError>
where
    W: AsyncWrite + Unpin,
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let (parts, mut body) = resp.into_parts();
    let status = parts.status;
    let bodiless = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let length = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let chunked = !bodiless && length.is_none() && client_minor == 1;
    let close_delimited = !bodiless && length.is_none() && client_minor == 0;

    let mut out = Pending::new();
    let keep = keep_alive && !close_delimited;
    out.framing(|head| {
        head.extend_from_slice(b"HTTP/1.1 ");
        head.extend_from_slice(status.as_str().as_bytes());
        head.extend_from_slice(b" ");
        head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
        head.extend_from_slice(b"\r\n");
        let has_connection = parts.headers.contains_key(http::header::CONNECTION);
        let nominated = if has_connection {
            nominated(&parts.headers)
        } else {
            Vec::new()
        };
        for (name, value) in &parts.headers {
            let n = name.as_str();
            if is_hop_by_hop(n) || nominated.iter().any(|t| t == n) {
                continue;
            }
            head.extend_from_slice(n.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        if chunked {
            head.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        head.extend_from_slice(if keep {
            b"Connection: keep-alive\r\n"
        } else {
            b"Connection: close\r\n"
        });
        head.extend_from_slice(b"\r\n");
    });
    let mut written = Written {
        body_bytes: 0,
        wire_bytes: out.len as u64,
        close_delimited,
    };
    if bodiless {
        out.write(w).await?;
        w.flush().await?;
        return Ok(written);
    }
    loop {
        let frame = match poll_once(&mut body).await {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                // Nothing more is ready: what is gathered goes out now (never sit on a
                // chunk), then wait for the upstream.
                out.write(w).await?;
                w.flush().await?;
                body.frame().await
            }
        };
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| WriteError::Upstream(e.to_string()))?;
        match frame.into_data() {
            Ok(data) => {
                if data.is_empty() {
                    continue;
                }
                let n = data.len();
                written.body_bytes += n as u64;
                let before = out.len;
                if chunked {
                    out.framing(|f| {
                        put_hex(f, n);
                        f.extend_from_slice(b"\r\n");
                    });
                    out.push(data);
                    out.framing(|f| f.extend_from_slice(b"\r\n"));
                } else {
                    out.push(data);
                }
                written.wire_bytes += (out.len - before) as u64;
                if out.len >= WRITE_AT {
                    out.write(w).await?;
                }
            }
            Err(frame) => {
                if let (true, Ok(trailers)) = (chunked, frame.into_trailers()) {
                    let before = out.len;
                    out.framing(|t| {
                        t.extend_from_slice(b"0\r\n");
                        for (name, value) in &trailers {
                            t.extend_from_slice(name.as_str().as_bytes());
                            t.extend_from_slice(b": ");
                            t.extend_from_slice(value.as_bytes());
                            t.extend_from_slice(b"\r\n");
                        }
                        t.extend_from_slice(b"\r\n");
                    });
                    written.wire_bytes += (out.len - before) as u64;
                    out.write(w).await?;
                    w.flush().await?;
                    return Ok(written);
                }
            }
        }
    }
    if chunked {
        out.framing(|f| f.extend_from_slice(b"0\r\n\r\n"));
        written.wire_bytes += 5;
    }
    out.write(w).await?;
    w.flush().await?;
    Ok(written)
}

/// Header names a `Connection` header nominates as hop-by-hop, lower-cased.
fn nominated(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::body::ChannelBody;
    use http_body_util::Full;
    use std::sync::{Arc, Mutex};
    use std::task::Context;
    use std::time::Duration;

    #[test]
    fn refusal_bytes() {
        let r = Refusal::new(Code::PolicyDenied, "CONNECT h:443 not permitted by policy")
            .with_reason("no");
        let s = String::from_utf8(r.to_bytes()).unwrap();
        assert!(s.starts_with("HTTP/1.1 403 Forbidden (sluice: policy_denied: CONNECT h:443 not permitted by policy: no)\r\nContent-Type: application/json\r\nX-Sluice-Error: policy_denied\r\nX-Sluice-Reason: CONNECT h:443 not permitted by policy: no\r\nContent-Length: 88\r\nConnection: close\r\n\r\n"), "{s}");
        assert!(s.ends_with("{\"error\":\"policy_denied\",\"detail\":\"CONNECT h:443 not permitted by policy\",\"reason\":\"no\"}"));
    }

    #[test]
    fn the_reason_fields_cannot_break_the_head() {
        let long = "x".repeat(1000);
        for why in ["a\r\nSet-Cookie: x=1", "caf\u{e9}\u{0}", long.as_str()] {
            let r = Refusal::new(Code::PolicyDenied, "d").with_reason(why);
            let s = String::from_utf8(r.to_bytes()).unwrap();
            let (head, _) = s.split_once("\r\n\r\n").unwrap();
            assert_eq!(head.lines().count(), 6, "{head}");
            assert!(!head.lines().any(|l| l.starts_with("Set-Cookie")), "{head}");
            assert!(head.is_ascii() && !head.contains('\0'), "{head}");
            let status = head.lines().next().unwrap();
            assert!(status.len() < 230, "{status}");
            let field = head
                .lines()
                .find(|l| l.starts_with("X-Sluice-Reason: "))
                .unwrap();
            assert!(field.len() <= "X-Sluice-Reason: ".len() + 300, "{field}");
        }
        // Without a reason, the detail says why; a reason the detail holds is not repeated.
        let r = Refusal::new(Code::UpstreamUnreachable, "cannot reach h:443");
        assert!(
            r.headers()
                .contains(&("X-Sluice-Reason", "cannot reach h:443".to_string()))
        );
        let r = Refusal::new(Code::PolicyDenied, "POST h/ denied: POST / not permitted")
            .with_reason("POST / not permitted");
        assert!(r.headers().contains(&(
            "X-Sluice-Reason",
            "POST h/ denied: POST / not permitted".to_string()
        )));
    }

    #[tokio::test]
    async fn chunked_when_length_unknown() {
        let resp = Response::builder()
            .status(200)
            .header("connection", "x-drop")
            .header("x-drop", "1")
            .header("x-keep", "2")
            .header("transfer-encoding", "chunked")
            .body(Full::new(Bytes::from_static(b"hello")))
            .unwrap();
        let mut out = Vec::new();
        let w = write_response(&mut out, resp, false, 1, true)
            .await
            .unwrap();
        let s = String::from_utf8(out).unwrap();
        assert_eq!(
            s,
            "HTTP/1.1 200 OK\r\nx-keep: 2\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        );
        assert_eq!(w.body_bytes, 5);
    }

    /// A client socket that records each write call, and how many bytes had been written at
    /// each flush.
    #[derive(Clone, Default)]
    struct Recorder {
        log: Arc<Mutex<Log>>,
        vectored: bool,
    }

    #[derive(Default)]
    struct Log {
        writes: Vec<Vec<u8>>,
        flushed_at: Vec<usize>,
    }

    impl Log {
        fn all(&self) -> Vec<u8> {
            self.writes.concat()
        }

        fn flushed(&self) -> Vec<u8> {
            let upto = self.flushed_at.last().copied().unwrap_or(0);
            self.all()[..upto].to_vec()
        }
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.log.lock().unwrap().writes.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_write_vectored(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let one: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            let n = one.len();
            self.log.lock().unwrap().writes.push(one);
            Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            self.vectored
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            let mut log = self.log.lock().unwrap();
            let n = log.all().len();
            log.flushed_at.push(n);
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A whole response that is ready at once (head, body, chunked framing) goes to the client
    /// in one write: over TLS each write is a record and a system call.
    #[tokio::test]
    async fn a_ready_response_is_one_write() {
        let body = vec![b'x'; 1024];
        for vectored in [true, false] {
            for length in [true, false] {
                let mut resp = Response::builder().status(200);
                if length {
                    resp = resp.header("content-length", "1024");
                }
                let resp = resp.body(Full::new(Bytes::from(body.clone()))).unwrap();
                let mut w = Recorder {
                    vectored,
                    ..Recorder::default()
                };
                let written = write_response(&mut w, resp, false, 1, true).await.unwrap();
                let log = w.log.lock().unwrap();
                assert_eq!(log.writes.len(), 1, "vectored {vectored}, length {length}");
                let all = log.all();
                assert_eq!(log.flushed(), all);
                assert_eq!(written.wire_bytes, all.len() as u64);
                assert_eq!(written.body_bytes, 1024);
                let text = String::from_utf8(all).unwrap();
                let expected_body = String::from_utf8(body.clone()).unwrap();
                if length {
                    assert!(
                        text.ends_with(&format!("\r\n\r\n{expected_body}")),
                        "{text}"
                    );
                } else {
                    assert!(
                        text.ends_with(&format!("\r\n\r\n400\r\n{expected_body}\r\n0\r\n\r\n")),
                        "{text}"
                    );
                }
            }
        }
    }

    /// A streamed body (server-sent events) reaches the client chunk by chunk: what is ready is
    /// written and flushed while the upstream holds the rest back.
    #[tokio::test]
    async fn a_streamed_body_is_delivered_while_the_rest_is_held_back() {
        for vectored in [true, false] {
            let (tx, body) = ChannelBody::channel(None);
            let resp = Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(body)
                .unwrap();
            let w = Recorder {
                vectored,
                ..Recorder::default()
            };
            let log = Arc::clone(&w.log);
            tx.send(Ok(http_body::Frame::data(Bytes::from_static(
                b"data: one\n\n",
            ))))
            .await
            .unwrap();
            let task = tokio::spawn(async move {
                let mut w = w;
                write_response(&mut w, resp, false, 1, true).await
            });
            let first_out = async {
                loop {
                    let flushed = log.lock().unwrap().flushed();
                    if flushed.ends_with(b"b\r\ndata: one\n\n\r\n") {
                        return flushed;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            let flushed = tokio::time::timeout(Duration::from_secs(10), first_out)
                .await
                .expect("the first event was not delivered while the second was held back");
            assert!(flushed.starts_with(b"HTTP/1.1 200 OK\r\n"));
            // The head and the first event went out in one write.
            assert_eq!(log.lock().unwrap().writes.len(), 1);
            tx.send(Ok(http_body::Frame::data(Bytes::from_static(
                b"data: two\n\n",
            ))))
            .await
            .unwrap();
            drop(tx);
            let written = task.await.unwrap().unwrap();
            let log = log.lock().unwrap();
            let text = String::from_utf8(log.all()).unwrap();
            assert!(
                text.ends_with("\r\n\r\nb\r\ndata: one\n\n\r\nb\r\ndata: two\n\n\r\n0\r\n\r\n"),
                "{text}"
            );
            assert_eq!(log.flushed(), log.all());
            assert_eq!(written.body_bytes, 22);
            assert_eq!(written.wire_bytes, log.all().len() as u64);
        }
    }

    #[tokio::test]
    async fn length_kept_and_head_bodiless() {
        let resp = Response::builder()
            .status(200)
            .header("content-length", "5")
            .body(Full::new(Bytes::from_static(b"hello")))
            .unwrap();
        let mut out = Vec::new();
        write_response(&mut out, resp, true, 1, false)
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nConnection: close\r\n\r\n"
        );
    }
}
