//! Strict HTTP/1 request heads: reading them with a size limit, and parsing them with the
//! smuggling defences of spec §5.1.
//!
//! Owns the byte-level grammar of a request head: `METHOD SP target SP HTTP/1.x CRLF`,
//! header lines, and the rules that make framing unambiguous (no bare LF, no obs-fold, no
//! whitespace before `:`, token names, no control bytes, one Host, Content-Length and
//! Transfer-Encoding never together, differing duplicate lengths refused, only `chunked`).
//! It does not judge the request against policy; `pipeline/` does.

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// A parsed request head. Header names keep their case; lookups are case-insensitive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    /// The raw request target (visible ASCII only).
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// How the request body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeadError {
    #[error("request head larger than {0} bytes")]
    TooLarge(usize),
    #[error("malformed request: {0}")]
    Malformed(String),
    /// Framing two parsers could read differently (CL+TE, duplicate Content-Length, obs-fold,
    /// bare LF or CR, another Transfer-Encoding, two Hosts): a request smuggling attempt.
    #[error("malformed request: {0}")]
    Ambiguous(String),
    /// The peer closed before sending a complete head.
    #[error("connection closed before a complete request head")]
    Closed,
    #[error("read error: {0}")]
    Io(String),
}

fn malformed(msg: impl Into<String>) -> HeadError {
    HeadError::Malformed(msg.into())
}

fn ambiguous(msg: impl Into<String>) -> HeadError {
    HeadError::Ambiguous(msg.into())
}

impl RequestHead {
    /// The values of a header, case-insensitively.
    pub(crate) fn header_values<'a, 'n>(
        &'a self,
        name: &'n str,
    ) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    pub(crate) fn header(&self, name: &str) -> Option<&[u8]> {
        self.header_values(name).next()
    }

    /// Connection tokens, lower-cased.
    pub(crate) fn connection_tokens(&self) -> Vec<String> {
        self.header_values("connection")
            .flat_map(|v| v.split(|&b| b == b','))
            .map(|t| String::from_utf8_lossy(t).trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect()
    }

    /// Whether the client wants the connection kept open after this request.
    pub(crate) fn keep_alive(&self) -> bool {
        let tokens = self.connection_tokens();
        if self.minor_version == 0 {
            tokens.iter().any(|t| t == "keep-alive")
        } else {
            !tokens.iter().any(|t| t == "close")
        }
    }

    /// Body framing; validated by `parse`, so it cannot be ambiguous here.
    pub(crate) fn framing(&self) -> BodyFraming {
        if self.header("transfer-encoding").is_some() {
            return BodyFraming::Chunked;
        }
        match self
            .header("content-length")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            Some(0) | None => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        }
    }
}

/// Reads one head into `buf` (which may already hold bytes) and returns it, leaving any
/// bytes after the head (a body, a pipelined request) in `buf`.
pub(crate) async fn read_head<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    max: usize,
) -> Result<RequestHead, HeadError> {
    let mut scanned = 0usize;
    loop {
        if let Some(end) = find_head_end(buf, &mut scanned)? {
            let head = parse(&buf[..end])?;
            buf.advance(end);
            return Ok(head);
        }
        if buf.len() >= max {
            return Err(HeadError::TooLarge(max));
        }
        buf.reserve(4096.min(max - buf.len()).max(1));
        let n = reader
            .read_buf(buf)
            .await
            .map_err(|e| HeadError::Io(e.to_string()))?;
        if n == 0 {
            return Err(if buf.is_empty() {
                HeadError::Closed
            } else {
                malformed("connection closed in the middle of the request head")
            });
        }
        if buf.len() > max && find_head_end(buf, &mut scanned)?.is_none_or(|end| end > max) {
            return Err(HeadError::TooLarge(max));
        }
    }
}

/// Whether `buf` holds a whole head: its blank line has arrived (whether it parses is for
/// [`read_head`] to say; a bare LF before it makes it not whole).
pub(crate) fn is_whole(buf: &[u8]) -> bool {
    matches!(find_head_end(buf, &mut 0), Ok(Some(_)))
}

/// The end of the head (after the blank line), if complete. A bare LF is refused as soon as
/// it is seen (spec §5.1).
fn find_head_end(buf: &[u8], scanned: &mut usize) -> Result<Option<usize>, HeadError> {
    // Leading CRLFs before a request line are tolerated (RFC 9112 §2.2).
    let mut i = *scanned;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if i == 0 || buf[i - 1] != b'\r' {
                return Err(ambiguous("bare LF in request head"));
            }
            if i >= 3 && &buf[i - 3..=i] == b"\r\n\r\n" {
                return Ok(Some(i + 1));
            }
        }
        i += 1;
    }
    // Keep the last byte unscanned-safe: a CR at the end may be followed by LF later.
    *scanned = buf.len();
    Ok(None)
}

/// RFC 9110 §5.6.2 token characters (a method, a header name).
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Parses a complete head (including the final CRLFCRLF) strictly.
pub fn parse(raw: &[u8]) -> Result<RequestHead, HeadError> {
    let mut raw = raw;
    while raw.starts_with(b"\r\n") {
        raw = &raw[2..];
    }
    if raw
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || raw[i - 1] != b'\r'))
    {
        return Err(ambiguous("bare LF in request head"));
    }
    let body = raw
        .strip_suffix(b"\r\n\r\n")
        .ok_or_else(|| malformed("request head does not end with an empty line"))?;
    let mut lines = body
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().ok_or_else(|| malformed("empty request"))?;
    if request_line.contains(&b'\r') {
        return Err(ambiguous("bare CR in request head"));
    }
    let (method, target, minor_version) = parse_request_line(request_line)?;

    let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
    for line in lines {
        if line.contains(&b'\r') {
            return Err(ambiguous("bare CR in request head"));
        }
        if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            return Err(ambiguous("obsolete line folding in header"));
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| malformed("header line without `:`"))?;
        let name = &line[..colon];
        if name.last().is_some_and(|&b| b == b' ' || b == b'\t') {
            // RFC 9112 §5.1: a server must reject it; a lenient parser reads another header.
            return Err(ambiguous("whitespace between a header name and `:`"));
        }
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(malformed(
                "invalid header name (whitespace before `:` or a non-token byte)",
            ));
        }
        let value = trim_ows(&line[colon + 1..]);
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(malformed("control byte in header value"));
        }
        headers.push((String::from_utf8_lossy(name).into_owned(), value.to_vec()));
    }
    let head = RequestHead {
        method,
        target,
        minor_version,
        headers,
    };
    check_framing(&head)?;
    Ok(head)
}

fn trim_ows(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |e| e + 1);
    &v[start..end]
}

fn parse_request_line(line: &[u8]) -> Result<(String, String, u8), HeadError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed(
            "request line is not `METHOD SP target SP HTTP/1.x`",
        ));
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(malformed("invalid method"));
    }
    // Not empty, visible ASCII only (spec §13 row 17).
    if let Err(e) = crate::policy::authority::check_request_target(target) {
        return Err(malformed(e.to_string()));
    }
    let minor = match version {
        b"HTTP/1.1" => 1,
        b"HTTP/1.0" => 0,
        _ => {
            return Err(malformed(
                "unsupported HTTP version (HTTP/1.0 or HTTP/1.1 expected)",
            ));
        }
    };
    Ok((
        String::from_utf8_lossy(method).into_owned(),
        String::from_utf8_lossy(target).into_owned(),
        minor,
    ))
}

fn check_framing(head: &RequestHead) -> Result<(), HeadError> {
    if head.header_values("host").count() > 1 {
        return Err(ambiguous("more than one Host header"));
    }
    let lengths: Vec<&[u8]> = head.header_values("content-length").collect();
    let te: Vec<&[u8]> = head.header_values("transfer-encoding").collect();
    if !lengths.is_empty() && !te.is_empty() {
        return Err(ambiguous("both Content-Length and Transfer-Encoding"));
    }
    if let Some(first) = lengths.first() {
        if !first.iter().all(u8::is_ascii_digit) || first.is_empty() || first.len() > 19 {
            // A list (`5, 5`), a sign or a space: parsers disagree on what such a length is.
            return Err(ambiguous("invalid Content-Length"));
        }
        if lengths.iter().any(|l| l != first) {
            return Err(ambiguous("conflicting Content-Length headers"));
        }
        if lengths.len() > 1 {
            return Err(ambiguous("more than one Content-Length header"));
        }
    }
    if !te.is_empty() && (te.len() != 1 || !te[0].eq_ignore_ascii_case(b"chunked")) {
        return Err(ambiguous(
            "unsupported Transfer-Encoding (only a single `chunked` is accepted)",
        ));
    }
    for token in head.connection_tokens() {
        if matches!(
            token.as_str(),
            "host" | "content-length" | "transfer-encoding"
        ) {
            return Err(ambiguous(format!("Connection header nominates `{token}`")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<RequestHead, HeadError> {
        parse(s.as_bytes())
    }

    #[test]
    fn parses_connect_and_absolute_form() {
        let h =
            p("CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n").unwrap();
        assert_eq!(h.method, "CONNECT");
        assert_eq!(h.target, "api.example.com:443");
        let h = p("GET http://x.test/a?b HTTP/1.0\r\nUser-Agent: t\r\nX:  v \r\n\r\n").unwrap();
        assert_eq!(h.minor_version, 0);
        assert_eq!(h.header("x"), Some(&b"v"[..]));
        assert!(!h.keep_alive());
    }

    #[test]
    fn framing() {
        let h = p("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\n").unwrap();
        assert_eq!(h.framing(), BodyFraming::Length(5));
        let h = p("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n").unwrap();
        assert_eq!(h.framing(), BodyFraming::Chunked);
    }

    #[test]
    fn smuggling_defences() {
        let bad = [
            ("GET / HTTP/1.1\nHost: h\r\n\r\n", "bare LF"),
            ("GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n", "folding"),
            ("GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", "bare CR"),
            ("GET /a\rb HTTP/1.1\r\nHost: h\r\n\r\n", "bare CR"),
            ("GET / HTTP/1.1\r\nHost : h\r\n\r\n", "whitespace between"),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding\t: chunked\r\n\r\n",
                "whitespace between",
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\n",
                "invalid Content-Length",
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n",
                "invalid Content-Length",
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                "more than one Host",
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                "both",
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                "conflicting",
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
                "more than one Content-Length",
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                "unsupported Transfer-Encoding",
            ),
            (
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                "unsupported Transfer-Encoding",
            ),
            (
                "GET / HTTP/1.1\r\nHost: h\r\nConnection: content-length\r\n\r\n",
                "nominates",
            ),
        ];
        for (input, want) in bad {
            match p(input) {
                Err(HeadError::Ambiguous(m)) => assert!(m.contains(want), "{input:?}: {m}"),
                other => panic!("{input:?}: {other:?}"),
            }
        }
        // Malformed, but not framing two parsers could read differently.
        let bad = [
            ("GET / HTTP/1.1\r\nHo(st: h\r\n\r\n", "invalid header name"),
            ("GET /a b HTTP/1.1\r\nHost: h\r\n\r\n", "request line"),
            ("GET /\u{a0} HTTP/1.1\r\nHost: h\r\n\r\n", "byte 0xc2"),
            ("GET / HTTP/2.0\r\nHost: h\r\n\r\n", "version"),
            ("G@T / HTTP/1.1\r\nHost: h\r\n\r\n", "invalid method"),
            ("GET / HTTP/1.1\r\nX: a\u{1}b\r\n\r\n", "control byte"),
        ];
        for (input, want) in bad {
            match p(input) {
                Err(HeadError::Malformed(m)) => assert!(m.contains(want), "{input:?}: {m}"),
                other => panic!("{input:?}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn reads_with_limits_and_keeps_the_rest() {
        let data = b"GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\nNEXT".to_vec();
        let mut buf = BytesMut::new();
        let mut r = &data[..];
        let head = read_head(&mut r, &mut buf, 8192).await.unwrap();
        assert_eq!(head.target, "http://h/");
        assert_eq!(&buf[..], b"NEXT");

        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(10_000));
        let mut buf = BytesMut::new();
        let mut r = big.as_bytes();
        assert_eq!(
            read_head(&mut r, &mut buf, 8192).await,
            Err(HeadError::TooLarge(8192))
        );

        let mut buf = BytesMut::new();
        let mut r: &[u8] = b"";
        assert_eq!(
            read_head(&mut r, &mut buf, 8192).await,
            Err(HeadError::Closed)
        );

        let mut buf = BytesMut::new();
        let mut r: &[u8] = b"GET / HTTP/1.1\nHost: x\n\n";
        assert!(matches!(
            read_head(&mut r, &mut buf, 8192).await,
            Err(HeadError::Ambiguous(_))
        ));
    }

    /// Only a head whose blank line has arrived is whole: what `settle` relies on to skip
    /// the re-check (a partial or malformed head takes the usual path).
    #[test]
    fn a_head_is_whole_only_with_its_blank_line() {
        assert!(is_whole(b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"));
        assert!(is_whole(b"CONNECT h:443 HTTP/1.1\r\n\r\nbody"));
        assert!(!is_whole(b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n"));
        assert!(!is_whole(b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r"));
        assert!(!is_whole(b"CONNECT h:443 HTTP/1.1\nHost: h\r\n\r\n"));
        assert!(!is_whole(b""));
    }
}
