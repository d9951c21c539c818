//! Placeholders in request bodies (spec §3.3, §3.5): kept from upstream by default, swapped
//! only where the endpoint opts in.
//!
//! Owns `BodyGuard`, the streaming scanner for endpoints without
//! `request_body_credential_rewrite`: fed the body's payload chunk by chunk, it reports a
//! marker even when it is split across chunks, percent-encoded, JSON-escaped or in another
//! letter case, in constant memory and without allocating. Also owns `rewrite_body`, the
//! opt-in rewrite of a buffered body (at most 256 KiB) of UTF-8 JSON (inside strings, the
//! secret JSON-escaped), form (values decoded and re-encoded) or text, and the header fix that
//! goes with it. Framing (de-chunking, buffering, resets) belongs to the pipeline.

use std::borrow::Cow;
use std::fmt;

use super::binding::Resolve;
use super::placeholder::{self, MAX_ENCODED_MARKER_LEN};
use super::rewrite::{CredentialError, Encoding, Injected, Run, Site, Spot};

/// Largest body `rewrite_body` takes.
pub(crate) const MAX_REWRITE_BODY_BYTES: usize = 256 * 1024;
/// Detection Finding type for a placeholder that could not be inspected or swapped.
pub const FINDING_TRAFFIC_UNINSPECTABLE: &str = "openshell.credentials.traffic_uninspectable";

/// Bytes of earlier chunks kept to catch a marker split across chunks: its longest spelling
/// (every character as `\u00XX`). The reference keeps three times the marker length, which
/// covers `%XX`; sluice also decodes JSON escapes, so it keeps six.
const TAIL: usize = MAX_ENCODED_MARKER_LEN;

// === impl BodyGuard ===

/// A streaming marker scanner for one request body.
///
/// Feed it the body's payload (after de-chunking: chunk-size lines between two halves of a
/// marker would hide it from a scan of the wire bytes) in order, before forwarding each
/// chunk. When `feed` returns true, the chunk holds the end of a marker: do not forward it.
/// If nothing went upstream yet, answer `403`; otherwise reset both connections (upstream sees
/// a truncated request, never a whole marker) and emit `FINDING_TRAFFIC_UNINSPECTABLE`.
pub struct BodyGuard {
    tail: [u8; TAIL],
    tail_len: usize,
    scratch: [u8; 2 * TAIL],
    found: bool,
}

impl Default for BodyGuard {
    fn default() -> Self {
        BodyGuard::new()
    }
}

// Body bytes are the client's business, not the log's.
impl fmt::Debug for BodyGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyGuard")
            .field("found", &self.found)
            .field("tail_len", &self.tail_len)
            .finish_non_exhaustive()
    }
}

impl BodyGuard {
    pub(crate) fn new() -> BodyGuard {
        BodyGuard {
            tail: [0; TAIL],
            tail_len: 0,
            scratch: [0; 2 * TAIL],
            found: false,
        }
    }

    /// Scans the next chunk; true once a marker has been seen (and for every chunk after).
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> bool {
        if self.found || chunk.is_empty() {
            return self.found;
        }
        // A marker that began in earlier chunks ends within the first TAIL bytes of this one;
        // one that begins in this chunk is found by scanning the chunk itself.
        let head = &chunk[..chunk.len().min(TAIL)];
        let joined = self.tail_len + head.len();
        self.scratch[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        self.scratch[self.tail_len..joined].copy_from_slice(head);
        if placeholder::contains_marker(&self.scratch[..joined])
            || placeholder::contains_marker(chunk)
        {
            self.found = true;
            return true;
        }
        if chunk.len() >= TAIL {
            self.tail.copy_from_slice(&chunk[chunk.len() - TAIL..]);
            self.tail_len = TAIL;
        } else {
            let keep = joined.min(TAIL);
            self.tail[..keep].copy_from_slice(&self.scratch[joined - keep..joined]);
            self.tail_len = keep;
        }
        false
    }

    pub fn found(&self) -> bool {
        self.found
    }

    /// [`BodyGuard::feed`], and where in `chunk` the marker ends: `Some(n)` when a marker
    /// was seen, `chunk[..n]` being the bytes before its last one (0 when one was seen in an
    /// earlier chunk). A reader after the guard reads those bytes before the guard's
    /// refusal, so whichever finds something first in the body answers, however it was cut.
    pub(crate) fn feed_until(&mut self, chunk: &[u8]) -> Option<usize> {
        if self.found {
            return Some(0);
        }
        if !self.feed(chunk) {
            return None;
        }
        // The tail is as it was before `chunk` (a feed that finds a marker keeps it). A
        // marker in a prefix is in every longer one (a cut-off escape reads as its `%` or
        // `\`, never a marker's character): the shortest prefix that holds one ends it.
        let mut joined = self.tail[..self.tail_len].to_vec();
        joined.extend_from_slice(chunk);
        let (mut lo, mut hi) = (0, chunk.len());
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if placeholder::contains_marker(&joined[..self.tail_len + mid]) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi - 1)
    }
}

// === rewrite_body ===

/// Why an opted-in body could not be rewritten. Names, never values or body text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    #[error(
        "request body is larger than {limit} bytes, the most sluice buffers to swap credentials"
    )]
    TooLarge { limit: usize },
    #[error(
        "request body of type `{0}` holds a credential placeholder, but sluice swaps them only in UTF-8 application/json, application/x-www-form-urlencoded and text/* bodies"
    )]
    UnsupportedType(String),
    #[error("request body holds a credential placeholder but has no Content-Type")]
    NoContentType,
    #[error("request body holds a credential placeholder but its charset `{0}` is not UTF-8")]
    UnsupportedCharset(String),
    #[error("request body holds a credential placeholder but is not valid UTF-8")]
    NotUtf8,
    #[error("request body holds a credential placeholder but is not valid JSON ({0})")]
    InvalidJson(&'static str),
    #[error(transparent)]
    Credential(#[from] CredentialError),
}

impl BodyError {
    /// The refusal code (its status is [`Code::status`](crate::refusal_code::Code::status)):
    /// that of the credential error, else `credential_unavailable` (500: the placeholder
    /// cannot be resolved in this body).
    pub(crate) fn code(&self) -> crate::refusal_code::Code {
        match self {
            BodyError::Credential(e) => e.code(),
            _ => crate::refusal_code::Code::CredentialUnavailable,
        }
    }
}

/// A body after `rewrite_body`.
pub struct RewrittenBody<'a> {
    /// Borrowed when nothing changed.
    pub body: Cow<'a, [u8]>,
    pub injected: Injected,
}

// The body may now hold secrets.
impl fmt::Debug for RewrittenBody<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RewrittenBody")
            .field("len", &self.body.len())
            .field("changed", &matches!(self.body, Cow::Owned(_)))
            .field("injected", &self.injected)
            .finish()
    }
}

/// Swaps placeholders in a whole, buffered body (endpoints with
/// `request_body_credential_rewrite`), all or nothing. A body without anything marker-like is
/// returned as it is, whatever its type. When the body changed, call `set_content_length`.
///
/// A body over `MAX_REWRITE_BODY_BYTES` is `TooLarge`: the pipeline should not buffer it but
/// stream it through a `BodyGuard` instead.
pub fn rewrite_body<'a>(
    content_type: Option<&str>,
    body: &'a [u8],
    resolver: &impl Resolve,
) -> Result<RewrittenBody<'a>, BodyError> {
    if body.len() > MAX_REWRITE_BODY_BYTES {
        return Err(BodyError::TooLarge {
            limit: MAX_REWRITE_BODY_BYTES,
        });
    }
    if !placeholder::contains_marker(body) {
        return Ok(RewrittenBody {
            body: Cow::Borrowed(body),
            injected: Injected::default(),
        });
    }
    let kind = body_kind(content_type)?;
    if std::str::from_utf8(body).is_err() {
        return Err(BodyError::NotUtf8);
    }
    let mut run = Run::new(resolver);
    let new = match kind {
        BodyKind::Json => rewrite_json(&mut run, body)?,
        BodyKind::Form => run.pairs(body, &Site::Body, true),
        BodyKind::Text => run.swap(body, body, None, Spot::Body, &Site::Body, Encoding::Raw),
    };
    let injected = run.finish()?;
    Ok(RewrittenBody {
        body: new.map_or(Cow::Borrowed(body), Cow::Owned),
        injected,
    })
}

/// After a rewrite: one `Content-Length` with the new length, and no `Transfer-Encoding`
/// (the body is no longer chunked).
pub fn set_content_length(headers: &mut Vec<(String, Vec<u8>)>, len: usize) {
    headers.retain(|(name, _)| {
        !name.eq_ignore_ascii_case("content-length")
            && !name.eq_ignore_ascii_case("transfer-encoding")
    });
    headers.push(("Content-Length".to_string(), len.to_string().into_bytes()));
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyKind {
    Json,
    Form,
    Text,
}

fn body_kind(content_type: Option<&str>) -> Result<BodyKind, BodyError> {
    let Some(ct) = content_type else {
        return Err(BodyError::NoContentType);
    };
    let mut parts = ct.split(';');
    let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    for param in parts {
        let Some((name, value)) = param.split_once('=') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("charset") {
            let value = value.trim().trim_matches('"');
            if !value.eq_ignore_ascii_case("utf-8") && !value.eq_ignore_ascii_case("utf8") {
                return Err(BodyError::UnsupportedCharset(shorten(value)));
            }
        }
    }
    let is_json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    if is_json {
        Ok(BodyKind::Json)
    } else if essence == "application/x-www-form-urlencoded" {
        Ok(BodyKind::Form)
    } else if essence.starts_with("text/") {
        Ok(BodyKind::Text)
    } else {
        Err(BodyError::UnsupportedType(shorten(&essence)))
    }
}

/// Client-supplied text going into an error: bounded.
fn shorten(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Placeholders swapped inside JSON strings (keys and values alike); a string with one is
/// decoded, swapped and written back JSON-escaped; anything marker-like outside strings is
/// refused.
fn rewrite_json<R: Resolve>(
    run: &mut Run<'_, R>,
    body: &[u8],
) -> Result<Option<Vec<u8>>, BodyError> {
    let mut out = Vec::with_capacity(body.len() + 64);
    let mut changed = false;
    let (mut i, mut last) = (0, 0);
    while i < body.len() {
        if body[i] != b'"' {
            i += 1;
            continue;
        }
        let end = string_end(body, i).ok_or(BodyError::InvalidJson("unterminated string"))?;
        let gap = &body[last..i];
        if placeholder::contains_marker(gap) {
            run.fail(CredentialError::InvalidPlaceholder { site: Site::Body });
        }
        out.extend_from_slice(gap);
        let literal = &body[i..=end];
        let swapped = if placeholder::contains_marker(literal) {
            let decoded: String = serde_json::from_slice(literal)
                .map_err(|_| BodyError::InvalidJson("invalid string"))?;
            run.swap(
                decoded.as_bytes(),
                decoded.as_bytes(),
                None,
                Spot::Body,
                &Site::Body,
                Encoding::Raw,
            )
        } else {
            None
        };
        match swapped.map(String::from_utf8) {
            Some(Ok(text)) => {
                let encoded = serde_json::to_string(&text)
                    .map_err(|_| BodyError::InvalidJson("unencodable string"))?;
                out.extend_from_slice(encoded.as_bytes());
                changed = true;
            }
            Some(Err(_)) => return Err(BodyError::NotUtf8),
            None => out.extend_from_slice(literal),
        }
        i = end + 1;
        last = i;
    }
    let rest = &body[last..];
    if placeholder::contains_marker(rest) {
        run.fail(CredentialError::InvalidPlaceholder { site: Site::Body });
    }
    out.extend_from_slice(rest);
    Ok(changed.then_some(out))
}

/// Index of the quote closing the JSON string that opens at `start`.
fn string_end(body: &[u8], start: usize) -> Option<usize> {
    let mut j = start + 1;
    while j < body.len() {
        match body[j] {
            b'\\' => j += 2,
            b'"' => return Some(j),
            _ => j += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::binding::Bindings;
    use crate::credentials::binding::tests::{bindings, scope};

    const MARKERS: &[&str] = &[
        "openshell:resolve:env:KEY",
        "sk-OPENSHELL-RESOLVE-ENV-KEY",
        "openshell%3Aresolve%3Aenv%3AKEY",
        "OpenShell:Resolve:Env:KEY",
        "openshell\\u003aresolve\\u003aenv\\u003aKEY",
        "%6f%70%65%6e%73%68%65%6c%6c%3a%72%65%73%6f%6c%76%65%3a%65%6e%76%3aKEY",
    ];

    fn feed_split(body: &[u8], cuts: &[usize]) -> (bool, usize) {
        let mut guard = BodyGuard::new();
        let mut from = 0;
        for (n, &cut) in cuts.iter().chain(std::iter::once(&body.len())).enumerate() {
            if guard.feed(&body[from..cut]) {
                return (true, n);
            }
            from = cut;
        }
        (false, cuts.len() + 1)
    }

    #[test]
    fn guard_finds_markers_split_at_every_boundary() {
        for marker in MARKERS {
            let body = format!("{{\"prompt\":\"{} {marker} tail\"}}", "x".repeat(300));
            let bytes = body.as_bytes();
            let at = bytes.len() - marker.len() - 7;
            for cut in 0..=bytes.len() {
                let (found, _) = feed_split(bytes, &[cut]);
                assert!(found, "{marker} cut at {cut}");
            }
            // Two cuts inside the marker.
            for a in at..at + marker.len() {
                for b in a..at + marker.len() {
                    assert!(feed_split(bytes, &[a, b]).0, "{marker} cuts {a},{b}");
                }
            }
            // Byte by byte: found exactly at the chunk that completes the marker.
            let mut guard = BodyGuard::new();
            let hit = bytes
                .iter()
                .position(|b| guard.feed(std::slice::from_ref(b)));
            let complete = at + placeholder_end(marker) - 1;
            assert_eq!(hit, Some(complete), "{marker}");
            assert!(guard.found() && guard.feed(b"more"));
        }
    }

    /// How many bytes of `marker` make the marker itself (before the key).
    fn placeholder_end(marker: &str) -> usize {
        let b = marker.as_bytes();
        (1..=b.len())
            .find(|&n| placeholder::contains_marker(&b[..n]))
            .unwrap_or(b.len())
    }

    #[test]
    fn guard_passes_clean_bodies_and_partial_markers() {
        let body = "openshell:resolve:en v openshell%3Aresolve%3A env openshell-resolve hello "
            .repeat(500);
        for size in [1, 7, 64, 131, 132, 133, 4096] {
            let mut guard = BodyGuard::new();
            assert!(
                !body.as_bytes().chunks(size).any(|c| guard.feed(c)),
                "chunk size {size}"
            );
        }
        let mut guard = BodyGuard::new();
        assert!(!guard.feed(b""));
        assert!(!guard.feed(b"openshell:resolve:env"));
        assert!(guard.feed(b":"));
    }

    #[test]
    fn guard_across_many_small_chunks_and_large_gap() {
        let mut guard = BodyGuard::new();
        assert!(!guard.feed(&[b'a'; 100_000]));
        assert!(!guard.feed(b"openshell%3A"));
        assert!(!guard.feed(b"resolve"));
        assert!(!guard.feed(b"%3a"));
        assert!(!guard.feed(b"en"));
        assert!(guard.feed(b"v-"));
    }

    fn gh() -> Bindings {
        bindings(&[("GH_TOKEN", "ghp_\"quoted\"\\secret")])
    }

    fn rewrite(ct: Option<&str>, body: &str) -> Result<String, BodyError> {
        let b = gh();
        let scoped = b.scoped(scope("api.github.com", 443, "/graphql", "/usr/bin/gh"));
        rewrite_body(ct, body.as_bytes(), &scoped)
            .map(|r| String::from_utf8(r.body.into_owned()).unwrap())
    }

    #[test]
    fn json_strings_are_rewritten_and_escaped() {
        let body = r#"{"token": "openshell:resolve:env:GH_TOKEN", "n": 1, "nested": ["Bearer sk-OPENSHELL-RESOLVE-ENV-GH_TOKEN", "openshell\u003aresolve:env:GH_TOKEN"], "plain": "x\"y"}"#;
        let out = rewrite(Some("application/json; charset=UTF-8"), body).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["token"], "ghp_\"quoted\"\\secret");
        assert_eq!(v["nested"][0], "Bearer ghp_\"quoted\"\\secret");
        assert_eq!(v["nested"][1], "ghp_\"quoted\"\\secret");
        assert_eq!(v["n"], 1);
        assert!(out.ends_with(r#""plain": "x\"y"}"#), "{out}");
        assert!(rewrite(Some("application/vnd.api+json"), body).is_ok());
    }

    #[test]
    fn json_refusals() {
        assert_eq!(
            rewrite(
                Some("application/json"),
                r#"{"a": "openshell:resolve:env:GH_TOKEN"#
            ),
            Err(BodyError::InvalidJson("unterminated string"))
        );
        assert!(matches!(
            rewrite(
                Some("application/json"),
                r#"{"a": openshell:resolve:env:GH_TOKEN}"#
            ),
            Err(BodyError::Credential(CredentialError::InvalidPlaceholder {
                site: Site::Body
            }))
        ));
        assert!(matches!(
            rewrite(
                Some("application/json"),
                r#"{"a": "openshell:resolve:env:NOPE"}"#
            ),
            Err(BodyError::Credential(CredentialError::Unavailable { .. }))
        ));
    }

    #[test]
    fn form_values_are_decoded_and_reencoded() {
        let body = "grant=x&token=openshell%3Aresolve%3Aenv%3AGH_TOKEN&q=a+b";
        let out = rewrite(Some("application/x-www-form-urlencoded"), body).unwrap();
        assert_eq!(out, "grant=x&token=ghp_%22quoted%22%5Csecret&q=a+b");
        assert!(matches!(
            rewrite(
                Some("application/x-www-form-urlencoded"),
                "openshell%3Aresolve%3Aenv%3AGH_TOKEN=1"
            ),
            Err(BodyError::Credential(
                CredentialError::InvalidPlaceholder { .. }
            ))
        ));
    }

    #[test]
    fn text_bodies() {
        let out = rewrite(Some("text/plain"), "key: openshell:resolve:env:GH_TOKEN\n").unwrap();
        assert_eq!(out, "key: ghp_\"quoted\"\\secret\n");
    }

    /// The revisioned and stable spellings are rewritten in bodies as the canonical one is,
    /// and the guard stops them where bodies are not rewritten.
    #[test]
    fn revisioned_and_stable_forms_in_bodies() {
        let hex = "0123456789abcdef".repeat(4);
        for ph in [
            "openshell:resolve:env:v9_GH_TOKEN".to_string(),
            format!("openshell:resolve:env:s{hex}_GH_TOKEN"),
            "sk-OPENSHELL-RESOLVE-ENV-v9_GH_TOKEN".to_string(),
        ] {
            let out = rewrite(Some("application/json"), &format!(r#"{{"t": "{ph}"}}"#)).unwrap();
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["t"], "ghp_\"quoted\"\\secret", "{ph}");
            let out = rewrite(Some("text/plain"), &format!("key: {ph}\n")).unwrap();
            assert_eq!(out, "key: ghp_\"quoted\"\\secret\n", "{ph}");
            let (found, _) = feed_split(format!("x={ph}").as_bytes(), &[5]);
            assert!(found, "{ph}");
        }
        let encoded = "t=openshell%3Aresolve%3Aenv%3Av9_GH_TOKEN";
        let out = rewrite(Some("application/x-www-form-urlencoded"), encoded).unwrap();
        assert_eq!(out, "t=ghp_%22quoted%22%5Csecret");
    }

    #[test]
    fn mismatch_in_body() {
        let b = gh();
        let scoped = b.scoped(scope("evil.example.com", 443, "/", "/usr/bin/gh"));
        let e = rewrite_body(
            Some("text/plain"),
            b"openshell:resolve:env:GH_TOKEN",
            &scoped,
        )
        .unwrap_err();
        assert_eq!(
            (e.code().status(), e.code().as_str()),
            (403, "credential_endpoint_mismatch")
        );
    }

    #[test]
    fn unsupported_bodies() {
        let ph = "openshell:resolve:env:GH_TOKEN";
        assert_eq!(rewrite(None, ph), Err(BodyError::NoContentType));
        assert_eq!(
            rewrite(Some("application/octet-stream"), ph),
            Err(BodyError::UnsupportedType(
                "application/octet-stream".into()
            ))
        );
        assert_eq!(
            rewrite(Some("text/plain; charset=latin1"), ph),
            Err(BodyError::UnsupportedCharset("latin1".into()))
        );
        let b = gh();
        let scoped = b.scoped(scope("api.github.com", 443, "/", "/usr/bin/gh"));
        let mut bytes = ph.as_bytes().to_vec();
        bytes.push(0xff);
        assert_eq!(
            rewrite_body(Some("text/plain"), &bytes, &scoped).unwrap_err(),
            BodyError::NotUtf8
        );
        let big = vec![b'a'; MAX_REWRITE_BODY_BYTES + 1];
        assert_eq!(
            rewrite_body(Some("text/plain"), &big, &scoped).unwrap_err(),
            BodyError::TooLarge {
                limit: MAX_REWRITE_BODY_BYTES
            }
        );
        // No marker: untouched and borrowed, whatever the type.
        let r = rewrite_body(Some("image/png"), b"\x89PNG", &scoped).unwrap();
        assert!(matches!(r.body, Cow::Borrowed(_)) && r.injected.is_empty());
        let exact = vec![b'a'; MAX_REWRITE_BODY_BYTES];
        assert!(rewrite_body(None, &exact, &scoped).is_ok());
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        /// Fragments that build markers, near-misses and their encodings.
        const FRAGMENTS: &[&str] = &[
            "openshell:resolve:",
            "env:",
            "openshell%3Aresolve",
            "%3Aenv%3A",
            "OPENSHELL-RESOLVE-",
            "ENV-",
            "openshell",
            "OpenShell",
            "OPENSHELL",
            "resolve",
            "RESOLVE",
            "env",
            "ENV",
            ":",
            "-",
            "%3A",
            "%3a",
            "%2D",
            "\\u003a",
            "\\u002D",
            "%6F",
            "o",
            "%",
            "\\",
            "x",
            "KEY",
            " ",
        ];

        fn body() -> impl Strategy<Value = Vec<u8>> {
            proptest::collection::vec(proptest::sample::select(FRAGMENTS), 0..60)
                .prop_map(|parts| parts.concat().into_bytes())
        }

        proptest! {
            /// However the body is cut, the guard finds a marker exactly when the whole body
            /// has one.
            #[test]
            fn guard_agrees_with_a_whole_body_scan(
                body in body(),
                mut cuts in proptest::collection::vec(0usize..400, 0..12),
            ) {
                cuts.iter_mut().for_each(|c| *c = (*c).min(body.len()));
                cuts.sort_unstable();
                let mut guard = BodyGuard::new();
                let mut from = 0;
                let mut found = false;
                for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
                    found |= guard.feed(&body[from..cut]);
                    from = cut;
                }
                prop_assert_eq!(found, placeholder::contains_marker(&body));
            }
        }
    }

    #[test]
    fn content_length_fix() {
        let mut h = vec![
            ("Host".to_string(), b"x".to_vec()),
            ("Transfer-Encoding".to_string(), b"chunked".to_vec()),
            ("content-length".to_string(), b"3".to_vec()),
        ];
        set_content_length(&mut h, 42);
        assert_eq!(
            h,
            [
                ("Host".to_string(), b"x".to_vec()),
                ("Content-Length".to_string(), b"42".to_vec())
            ]
        );
    }
}
