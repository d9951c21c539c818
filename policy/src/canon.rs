//! Request targets as policy sees them and as they go upstream: one pure function each.
//!
//! Owns path canonicalisation (spec §5.2 with §13 rows 16-18): visible ASCII only, no
//! fragment, percent-decoding once, `%2F` refused unless the endpoint allows encoded slashes,
//! `;parameters` stripped before dot segments are resolved, `..` above the root refused, and
//! re-encoding in one canonical spelling. The same output decides policy and is written
//! upstream, so the two cannot disagree. Also owns query decoding for rule matching and the
//! target-host check (§13 row 3). It does no I/O.

use std::fmt;
use std::net::IpAddr;

/// Longest path (before the query) accepted.
const MAX_PATH_BYTES: usize = 4096;
/// Stand-in for an allowed `%2F` inside a decoded segment; a decoded NUL is refused, so it
/// cannot come from the input.
const ENCODED_SLASH: u8 = 0;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CanonError {
    #[error("request target contains a control character or space (byte 0x{0:02x})")]
    ControlByte(u8),
    #[error("request target contains a non-ASCII byte (0x{0:02x}); percent-encode it")]
    NonAscii(u8),
    #[error("request target contains a fragment (`#`)")]
    Fragment,
    #[error("request target must start with `/`")]
    NotOriginForm,
    #[error("request path is longer than 4096 bytes")]
    TooLong,
    #[error("invalid percent-encoding in request path")]
    InvalidPercentEncoding,
    #[error("request path encodes a control character (%{0:02X})")]
    EncodedControl(u8),
    #[error(
        "request path contains an encoded slash (%2F), which this endpoint does not allow (allow_encoded_slash)"
    )]
    EncodedSlashNotAllowed,
    #[error("request path climbs above the root with `..`")]
    AboveRoot,
    #[error("request path keeps a `.` or `..` segment behind an encoded slash")]
    ResidualDotSegment,
    #[error("invalid percent-encoding in query string")]
    InvalidQueryEncoding,
}

/// A canonical request target: the path policy judges and upstream receives, and the query
/// exactly as the client sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub path: String,
    pub query: Option<String>,
}

impl Target {
    /// The origin-form request target to write upstream.
    pub fn to_origin_form(&self) -> String {
        match &self.query {
            Some(q) => format!("{}?{q}", self.path),
            None => self.path.clone(),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)
    }
}

/// Canonicalises a raw request target (origin-form, or absolute-form whose path is taken).
pub fn canonicalize(target: &[u8], allow_encoded_slash: bool) -> Result<Target, CanonError> {
    for &b in target {
        match b {
            0x21..=0x7e => {}
            0x80..=0xff => return Err(CanonError::NonAscii(b)),
            _ => return Err(CanonError::ControlByte(b)),
        }
    }
    if target.contains(&b'#') {
        return Err(CanonError::Fragment);
    }
    let mut rest = strip_absolute_form(target);
    let query = match rest.iter().position(|&b| b == b'?') {
        Some(i) => {
            let q = String::from_utf8_lossy(&rest[i + 1..]).into_owned();
            rest = &rest[..i];
            Some(q)
        }
        None => None,
    };
    if rest.is_empty() {
        rest = b"/";
    }
    if rest.len() > MAX_PATH_BYTES {
        return Err(CanonError::TooLong);
    }
    if rest[0] != b'/' {
        return Err(CanonError::NotOriginForm);
    }

    let raw_segments: Vec<&[u8]> = rest[1..].split(|&b| b == b'/').collect();
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(raw_segments.len());
    let mut trailing_slash = false;
    let last = raw_segments.len() - 1;
    for (i, raw) in raw_segments.iter().enumerate() {
        let mut seg = decode_segment(raw, allow_encoded_slash)?;
        // `;params` go before dot resolution, so `..;x` and `..%3B` are `..` (spec §5.2 step 3).
        if let Some(cut) = seg.iter().position(|&b| b == b';') {
            seg.truncate(cut);
        }
        let is_last = i == last;
        match seg.as_slice() {
            b"" => {
                if is_last {
                    trailing_slash = true;
                }
            }
            b"." => trailing_slash = is_last,
            b".." => {
                if out.pop().is_none() {
                    return Err(CanonError::AboveRoot);
                }
                trailing_slash = is_last;
            }
            _ => {
                if seg
                    .split(|&b| b == ENCODED_SLASH)
                    .any(|part| part == b"." || part == b"..")
                {
                    return Err(CanonError::ResidualDotSegment);
                }
                out.push(seg);
                trailing_slash = false;
            }
        }
    }

    let mut path = String::with_capacity(rest.len() + 8);
    for seg in &out {
        path.push('/');
        encode_segment(seg, &mut path);
    }
    if out.is_empty() || trailing_slash {
        path.push('/');
    }
    Ok(Target { path, query })
}

/// `http://host:port/x?y` → `/x?y`; anything else is returned as is.
fn strip_absolute_form(target: &[u8]) -> &[u8] {
    let Some(colon) = target.windows(3).position(|w| w == b"://") else {
        return target;
    };
    let scheme = &target[..colon];
    let is_scheme = !scheme.is_empty()
        && scheme[0].is_ascii_alphabetic()
        && scheme
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !is_scheme {
        return target;
    }
    let after = &target[colon + 3..];
    match after.iter().position(|&b| b == b'/' || b == b'?') {
        Some(i) => &after[i..],
        None => b"",
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn decode_segment(raw: &[u8], allow_encoded_slash: bool) -> Result<Vec<u8>, CanonError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let (Some(h), Some(l)) = (
                raw.get(i + 1).copied().and_then(hex),
                raw.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(CanonError::InvalidPercentEncoding);
            };
            let b = h * 16 + l;
            match b {
                b'/' if allow_encoded_slash => out.push(ENCODED_SLASH),
                b'/' => return Err(CanonError::EncodedSlashNotAllowed),
                0x00..=0x1f | 0x7f => return Err(CanonError::EncodedControl(b)),
                _ => out.push(b),
            }
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn encode_segment(seg: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in seg {
        if b == ENCODED_SLASH {
            out.push_str("%2F");
        } else if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// Decodes a query string into (name, value) pairs for rule matching: `+` is a space, `%XX`
/// is decoded once; a malformed escape refuses the request (spec §1.8).
pub fn parse_query(query: &str) -> Result<Vec<(String, String)>, CanonError> {
    let mut out = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.push((decode_query_part(k)?, decode_query_part(v)?));
    }
    Ok(out)
}

fn decode_query_part(s: &str) -> Result<String, CanonError> {
    let raw = s.as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                let (Some(h), Some(l)) = (
                    raw.get(i + 1).copied().and_then(hex),
                    raw.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(CanonError::InvalidQueryEncoding);
                };
                out.push(h * 16 + l);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    #[error("target host is empty")]
    Empty,
    #[error("target host `{0}` has an empty label")]
    EmptyLabel(String),
    #[error("target host `{0}` is not a valid DNS name or IP literal")]
    Invalid(String),
}

/// Checks and lower-cases a target host (a CONNECT authority's or a URL's host, brackets of
/// an IPv6 literal removed). A name with an empty label or characters no DNS name has is
/// refused before policy (spec §13 row 3). IP literals are kept as written: policy compares
/// them as text (row 5).
pub fn normalize_host(host: &str) -> Result<String, HostError> {
    if host.is_empty() {
        return Err(HostError::Empty);
    }
    let unbracketed = sluice_addr::unbracketed(host);
    if unbracketed.parse::<IpAddr>().is_ok() {
        return Ok(unbracketed.to_ascii_lowercase());
    }
    let lower = host.to_ascii_lowercase();
    // One trailing dot is the fully qualified form of the same name: policy and DNS both see
    // the name without it. Any other empty label is refused below.
    let lower = match lower.strip_suffix('.') {
        Some(h) if !h.is_empty() => h.to_string(),
        _ => lower,
    };
    if lower.len() > 253 {
        return Err(HostError::Invalid(lower));
    }
    for label in lower.split('.') {
        if label.is_empty() {
            return Err(HostError::EmptyLabel(lower));
        }
        if label.len() > 63
            || !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(HostError::Invalid(lower));
        }
    }
    Ok(lower)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(t: &str) -> Result<String, CanonError> {
        canonicalize(t.as_bytes(), false).map(|t| t.path)
    }

    #[test]
    fn vectors() {
        let cases = [
            ("/", "/"),
            ("", "/"),
            ("/a/b", "/a/b"),
            ("/a//b", "/a/b"),
            ("/a/b/", "/a/b/"),
            ("/a/./b", "/a/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/../c", "/a/c"),
            ("/a/.", "/a/"),
            ("/%61%62", "/ab"),
            ("/a%20b", "/a%20b"),
            ("/%7euser", "/~user"),
            ("/caf%c3%a9", "/caf%C3%A9"),
            ("/files/a%3Bb", "/files/a"),
            ("/files/a;b/c", "/files/a/c"),
            ("/a/..;x/b", "/b"),
            ("/a/..%3bx/b", "/b"),
            ("/a/.;x/b", "/a/b"),
            ("/%252F", "/%252F"),
            ("/a:b@c", "/a:b@c"),
            ("/x?y=1&z", "/x"),
            ("http://example.com/a/../b?q", "/b"),
            ("http://example.com", "/"),
            ("http://example.com?x=1", "/"),
        ];
        for (input, want) in cases {
            assert_eq!(canon(input).as_deref(), Ok(want), "input {input:?}");
        }
    }

    #[test]
    fn query_is_kept_verbatim() {
        let t = canonicalize(b"/a/../b?x=%41&y", false).unwrap();
        assert_eq!(t.query.as_deref(), Some("x=%41&y"));
        assert_eq!(t.to_origin_form(), "/b?x=%41&y");
    }

    #[test]
    fn refusals() {
        assert_eq!(canon("/a\u{7f}"), Err(CanonError::ControlByte(0x7f)));
        assert_eq!(canon("/a b"), Err(CanonError::ControlByte(0x20)));
        assert_eq!(canon("/secret\u{a0}"), Err(CanonError::NonAscii(0xc2)));
        assert_eq!(canon("/a#b"), Err(CanonError::Fragment));
        assert_eq!(canon("a/b"), Err(CanonError::NotOriginForm));
        assert_eq!(canon("*"), Err(CanonError::NotOriginForm));
        assert_eq!(canon("/%zz"), Err(CanonError::InvalidPercentEncoding));
        assert_eq!(canon("/%4"), Err(CanonError::InvalidPercentEncoding));
        assert_eq!(canon("/a%00"), Err(CanonError::EncodedControl(0)));
        assert_eq!(canon("/a%0d%0a"), Err(CanonError::EncodedControl(0x0d)));
        assert_eq!(canon("/a%2Fb"), Err(CanonError::EncodedSlashNotAllowed));
        assert_eq!(canon("/.."), Err(CanonError::AboveRoot));
        assert_eq!(canon("/a/../.."), Err(CanonError::AboveRoot));
        assert_eq!(canon("/%2e%2e/x"), Err(CanonError::AboveRoot));
        assert_eq!(
            canon(&format!("/{}", "a".repeat(4096))),
            Err(CanonError::TooLong)
        );
    }

    #[test]
    fn encoded_slash_when_allowed() {
        let t = canonicalize(b"/@scope%2fname", true).unwrap();
        assert_eq!(t.path, "/@scope%2Fname");
        assert_eq!(
            canonicalize(b"/..%2fsecret", true),
            Err(CanonError::ResidualDotSegment)
        );
        assert_eq!(
            canonicalize(b"/a%2F..", true),
            Err(CanonError::ResidualDotSegment)
        );
    }

    #[test]
    fn canonical_is_a_fixed_point() {
        for input in ["/a/./b/../c%20d/", "/x;y/%7e", "/caf%c3%a9/%252F"] {
            let once = canon(input).unwrap();
            assert_eq!(canon(&once).unwrap(), once, "{input}");
        }
    }

    #[test]
    fn query_decoding() {
        assert_eq!(
            parse_query("a=1&b=x+y&c=%2F&d&&e=").unwrap(),
            [
                ("a".into(), "1".into()),
                ("b".into(), "x y".into()),
                ("c".into(), "/".into()),
                ("d".into(), String::new()),
                ("e".into(), String::new())
            ]
        );
        assert_eq!(parse_query("a=%g1"), Err(CanonError::InvalidQueryEncoding));
    }

    #[test]
    fn hosts() {
        assert_eq!(
            normalize_host("API.Example.com").unwrap(),
            "api.example.com"
        );
        assert_eq!(normalize_host("[::1]").unwrap(), "::1");
        assert_eq!(normalize_host("127.0.0.1").unwrap(), "127.0.0.1");
        assert!(matches!(
            normalize_host(".example.com"),
            Err(HostError::EmptyLabel(_))
        ));
        assert!(matches!(
            normalize_host("x..example.org"),
            Err(HostError::EmptyLabel(_))
        ));
        // One trailing dot is the same name; two are an empty label.
        assert_eq!(normalize_host("Example.com.").unwrap(), "example.com");
        assert!(matches!(
            normalize_host("example.com.."),
            Err(HostError::EmptyLabel(_))
        ));
        assert!(matches!(normalize_host("."), Err(HostError::EmptyLabel(_))));
        assert!(matches!(
            normalize_host("exa mple.com"),
            Err(HostError::Invalid(_))
        ));
        assert!(matches!(
            normalize_host("a\0b.com"),
            Err(HostError::Invalid(_))
        ));
        assert!(matches!(normalize_host(""), Err(HostError::Empty)));
    }
}
