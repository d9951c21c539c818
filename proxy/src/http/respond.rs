//! Responses sluice writes to an HTTP/1 client: its own refusals, and upstream responses.
//!
//! Owns the refusal shape every denial shares (a status and a compact JSON body with
//! `error`, `detail` and, where there is one, `reason`: spec §9), and the serialisation of
//! an upstream response with hop-by-hop headers removed and framing chosen for the client
//! (Content-Length kept, else chunked for HTTP/1.1, else close-delimited).

use bytes::Bytes;
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
    pub status: u16,
    /// Machine-readable code (`policy_denied`, `ssrf_denied`, ...).
    pub error: Code,
    /// One sentence saying what was refused.
    pub detail: String,
    /// Why (the policy's reason), when there is one.
    pub reason: Option<String>,
    /// More fields for agents (`binary`, `host`, `port`, `stage`, ...).
    pub extra: Vec<(&'static str, Value)>,
}

impl Refusal {
    pub fn new(status: u16, error: Code, detail: impl Into<String>) -> Refusal {
        Refusal {
            status,
            error,
            detail: detail.into(),
            reason: None,
            extra: Vec::new(),
        }
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

    /// The complete HTTP/1.1 response; the connection is closed after it.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let body = self.body();
        let reason = StatusCode::from_u16(self.status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("Error");
        format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.status,
            body.len()
        )
        .into_bytes()
    }
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

/// Writes an upstream response to an HTTP/1 client.
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

    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .into_bytes();
    let nominated = nominated(&parts.headers);
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
    let keep = keep_alive && !close_delimited;
    head.extend_from_slice(if keep {
        b"Connection: keep-alive\r\n"
    } else {
        b"Connection: close\r\n"
    });
    head.extend_from_slice(b"\r\n");
    w.write_all(&head).await?;
    let mut written = Written {
        body_bytes: 0,
        wire_bytes: head.len() as u64,
        close_delimited,
    };
    if bodiless {
        w.flush().await?;
        return Ok(written);
    }
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| WriteError::Upstream(e.to_string()))?;
        match frame.into_data() {
            Ok(data) => {
                if data.is_empty() {
                    continue;
                }
                written.body_bytes += data.len() as u64;
                if chunked {
                    let size = format!("{:x}\r\n", data.len());
                    w.write_all(size.as_bytes()).await?;
                    w.write_all(&data).await?;
                    w.write_all(b"\r\n").await?;
                    written.wire_bytes += (size.len() + data.len() + 2) as u64;
                } else {
                    w.write_all(&data).await?;
                    written.wire_bytes += data.len() as u64;
                }
                // Stream as it comes (SSE): never sit on a chunk.
                w.flush().await?;
            }
            Err(frame) => {
                if let (true, Ok(trailers)) = (chunked, frame.into_trailers()) {
                    let mut t = b"0\r\n".to_vec();
                    for (name, value) in &trailers {
                        t.extend_from_slice(name.as_str().as_bytes());
                        t.extend_from_slice(b": ");
                        t.extend_from_slice(value.as_bytes());
                        t.extend_from_slice(b"\r\n");
                    }
                    t.extend_from_slice(b"\r\n");
                    w.write_all(&t).await?;
                    written.wire_bytes += t.len() as u64;
                    w.flush().await?;
                    return Ok(written);
                }
            }
        }
    }
    if chunked {
        w.write_all(b"0\r\n\r\n").await?;
        written.wire_bytes += 5;
    }
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
    use http_body_util::Full;

    #[test]
    fn refusal_bytes() {
        let r = Refusal::new(
            403,
            Code::PolicyDenied,
            "CONNECT h:443 not permitted by policy",
        )
        .with_reason("no");
        let s = String::from_utf8(r.to_bytes()).unwrap();
        assert!(s.starts_with("HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: 88\r\nConnection: close\r\n\r\n"), "{s}");
        assert!(s.ends_with("{\"error\":\"policy_denied\",\"detail\":\"CONNECT h:443 not permitted by policy\",\"reason\":\"no\"}"));
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
