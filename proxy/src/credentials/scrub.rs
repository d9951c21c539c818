//! Secrets reflected in a response (an API that echoes the request: a 404 naming the path, an
//! error quoting a header) are turned back into what the client sent before it sees them.
//!
//! Owns `ScrubSet` (the secret spellings injected into one request, each with the text the
//! client wrote in its place; each byte is also matched as an encoder may have escaped it:
//! `%XX`, JSON `\u00XX`, `\/`), the streaming `Scrubber` (constant memory: it holds back the
//! body's last bytes, as many as a secret's longest spelling less one, whatever they are, so
//! that split secrets are caught across chunk and frame boundaries and what goes out when
//! says nothing of what a tail begins; a stream that pauses gets them after
//! `RELEASE_AFTER`), the `Scrubbed` response body both
//! HTTP/1.1 and HTTP/2 wrap around an upstream body, and `scrub_response`, the one step both
//! call on a response to a request that carried an injected secret: header values scrubbed
//! back to the placeholder, a text body (`text/*`, JSON, XML, forms, none declared) likewise,
//! any other body (gRPC, protobuf: binary framing that counts bytes) masked with as many `*`,
//! `Content-Length` dropped (a scrubbed body changes length), and an encoded body refused
//! (sluice asks for `Accept-Encoding: identity`, see `ask_whole_plain_response`; a compressed
//! body could hide the secret from the scan), declared or recognised by its first bytes
//! (`scrub/magic.rs`: every compressed and archive format with a magic number, zlib by its
//! header arithmetic).
//! The caller decides which responses come here (those from an endpoint with secrets bound,
//! see `Bindings::endpoint_secrets`). It knows nothing of sockets or audit: the caller says
//! what a hit reports.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt as _;
use zeroize::Zeroizing;

mod magic;
mod spelling;

use spelling::{Cursor, MAX_SPELLING, Match, Tables, match_at, may_start};

/// Detection Finding type for a secret found (and scrubbed) in a response.
pub(crate) const FINDING_REFLECTED: &str = "sluice.provider_credential.reflected";

// === ScrubSet ===

/// Secret spellings injected into one request, each with its replacement: the placeholder
/// (or the encoded token) the client sent there.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ScrubSet {
    pairs: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>,
    /// Boxed: a set moves with its request through several futures, its tables (about
    /// 800 bytes) stay where they are.
    find: Box<Tables>,
    /// Each secret is replaced by as many `*` as the bytes that spelled it.
    mask: bool,
}

// Holds secrets: never printed.
impl fmt::Debug for ScrubSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScrubSet")
            .field("entries", &self.pairs.len())
            .finish()
    }
}

impl ScrubSet {
    /// Adds `secret` → `replacement`; an empty secret, or one already there, is ignored.
    pub(crate) fn add(&mut self, secret: &[u8], replacement: &[u8]) {
        if secret.is_empty()
            || secret == replacement
            || self.pairs.iter().any(|(s, _)| **s == *secret)
        {
            return;
        }
        let entity = (!spelling::entities(secret[0]).is_empty()).then_some(b'&');
        for b in [secret[0], b'\\', b'%'].into_iter().chain(entity) {
            if !self.find.first[usize::from(b)] {
                self.find.first[usize::from(b)] = true;
                self.find.few.add(b);
            }
        }
        self.find.starts.add_secret(secret);
        self.pairs
            .push((Zeroizing::new(secret.to_vec()), replacement.to_vec()));
    }

    pub(crate) fn merge(&mut self, other: &ScrubSet) {
        for (s, r) in &other.pairs {
            self.add(s, r);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Whether every secret of `other` is one of this set's (a stream scrubbed by this set
    /// is scrubbed of them too).
    pub(crate) fn covers(&self, other: &ScrubSet) -> bool {
        other
            .pairs
            .iter()
            .all(|(s, _)| self.pairs.iter().any(|(mine, _)| **mine == **s))
    }

    /// The same secrets, each replaced by as many `*`: for bodies whose framing counts bytes
    /// (gRPC messages, protobuf), where a replacement of another length would corrupt it.
    pub(crate) fn masked(&self) -> ScrubSet {
        ScrubSet {
            mask: true,
            ..self.clone()
        }
    }

    /// Replaces every secret in `text` (a whole header value); the count of replacements.
    pub(crate) fn replace_all(&self, text: &[u8], out: &mut Vec<u8>) -> u64 {
        self.replace_before(text, text.len(), out).1
    }

    /// The leftmost secret (the longest on a tie) that starts at or after `from` and before
    /// `stop`: where it starts, how many bytes spell it, and its replacement.
    /// `cur` is the scan's state over `buf` up to `stop` (a fresh one for another text or
    /// stop).
    fn next_match(
        &self,
        cur: &mut Cursor,
        buf: &[u8],
        from: usize,
        stop: usize,
    ) -> Option<(usize, usize, &[u8])> {
        let stop = stop.min(buf.len());
        let mut from = from;
        while let Some(i) = self.find.next_first(cur, buf, from, stop) {
            from = i + 1;
            if !self.find.may_begin(buf, i, buf[i]) {
                continue;
            }
            let at = &buf[i..];
            let mut longest: Option<(usize, &[u8])> = None;
            for (secret, replacement) in &self.pairs {
                if !may_start(at, secret[0]) {
                    continue;
                }
                if let Match::Full(n) = match_at(at, secret)
                    && longest.is_none_or(|(m, _)| n >= m)
                {
                    longest = Some((n, replacement));
                }
            }
            if let Some((n, replacement)) = longest {
                return Some((i, n, replacement));
            }
        }
        None
    }

    /// The same secrets in lower case: what a header name (which reaches sluice lower-cased)
    /// holds of one.
    fn lowercase(&self) -> ScrubSet {
        let mut lower = ScrubSet::default();
        for (secret, replacement) in &self.pairs {
            lower.add(&Zeroizing::new(secret.to_ascii_lowercase()), replacement);
        }
        lower
    }

    /// Whether `text` holds a secret (any spelling).
    fn is_in(&self, text: &[u8]) -> bool {
        self.next_match(&mut Cursor::default(), text, 0, text.len())
            .is_some()
    }

    /// Copies `buf` to `out` with every secret that starts before `limit` replaced, leftmost
    /// first (the longest on a tie), up to `limit` or the end of the last replacement,
    /// whichever is later; returns where copying stopped, the number of replacements and
    /// where the last one ended (0 if none).
    fn replace_before(&self, buf: &[u8], limit: usize, out: &mut Vec<u8>) -> (usize, u64, usize) {
        let (mut pos, mut hits) = (0, 0);
        let mut cur = Cursor::default();
        while let Some((i, n, replacement)) = self.next_match(&mut cur, buf, pos, limit) {
            out.extend_from_slice(&buf[pos..i]);
            if self.mask {
                out.resize(out.len() + n, b'*');
            } else {
                out.extend_from_slice(replacement);
            }
            pos = i + n;
            hits += 1;
        }
        let end = pos.max(limit).min(buf.len());
        out.extend_from_slice(&buf[pos.min(end)..end]);
        (end, hits, pos)
    }

    /// How many bytes at the end of a body so far a scrubber keeps back, whatever they are:
    /// one less than the longest spelling of a secret, so that a secret that starts before
    /// them lies whole in what the scrubber has seen.
    fn window(&self) -> usize {
        let longest = self.pairs.iter().map(|(s, _)| s.len()).max().unwrap_or(0);
        (longest * MAX_SPELLING).saturating_sub(1)
    }
}

/// The audit sink's redactor: a set of every known secret value (see
/// `Bindings::redactor`), applied to each line before it is written.
impl crate::audit::Redact for ScrubSet {
    fn redact(&self, line: &[u8]) -> Option<Vec<u8>> {
        // Most lines hold no secret: looked through first, copied only when one is there.
        self.next_match(&mut Cursor::default(), line, 0, line.len())?;
        let mut out = Vec::with_capacity(line.len());
        if self.replace_all(line, &mut out) == 0 {
            return None;
        }
        Some(out)
    }
}

// === Scrubber ===

/// The streaming state of one response body.
///
/// What goes out, and when, never depends on whether the body's bytes begin a secret: after
/// each chunk the scrubber keeps back the body's last [`ScrubSet::window`] bytes, whatever they
/// are, and lets them go with the next chunk or at the end (or, through [`Scrubber::release`],
/// when the upstream pauses). Holding back only a tail that could begin a secret would tell a
/// client that chooses the tail (an echo) whether its guess is the start of the secret: a
/// secret could be read a byte at a time from where the body is cut.
#[derive(Default)]
pub(crate) struct Scrubber {
    set: Arc<ScrubSet>,
    /// The body's last bytes, not yet gone out (at most `window` after each chunk).
    carry: Zeroizing<Vec<u8>>,
    /// The last bytes let go by `release` (at most `window`): a secret that began there is
    /// not completed by what follows, which is replaced instead.
    sent: Zeroizing<Vec<u8>>,
    hits: u64,
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrubber")
            .field("set", &self.set)
            .field("held", &self.carry.len())
            .field("hits", &self.hits)
            .finish()
    }
}

impl Scrubber {
    pub(crate) fn new(set: Arc<ScrubSet>) -> Scrubber {
        Scrubber {
            set,
            carry: Zeroizing::new(Vec::new()),
            sent: Zeroizing::new(Vec::new()),
            hits: 0,
        }
    }

    /// The next chunk: what may go to the client now (possibly nothing).
    pub(crate) fn feed(&mut self, chunk: Bytes) -> Bytes {
        match self.feed_parts(chunk) {
            (first, rest) if rest.is_empty() => first,
            (first, rest) if first.is_empty() => rest,
            (first, rest) => {
                let mut out = Vec::with_capacity(first.len() + rest.len());
                out.extend_from_slice(&first);
                out.extend_from_slice(&rest);
                Bytes::from(out)
            }
        }
    }

    /// [`Scrubber::feed`] in two parts, in order: so that a long chunk after held bytes (a
    /// download's every chunk) goes on without a copy: the held bytes, then the chunk's start.
    /// Whether it comes in two parts depends on lengths and on whether a whole secret is
    /// there (which its replacement shows anyway), never on a secret's beginning.
    pub(crate) fn feed_parts(&mut self, chunk: Bytes) -> (Bytes, Bytes) {
        let window = self.set.window();
        if self.sent.is_empty()
            && !self.carry.is_empty()
            && chunk.len() >= window
            && self.clean_after_carry(&chunk, window)
        {
            let held = Bytes::from(std::mem::take(&mut *self.carry));
            let limit = chunk.len() - window;
            self.carry.extend_from_slice(&chunk[limit..]);
            return (held, chunk.slice(..limit));
        }
        (self.feed_copying(chunk, window), Bytes::new())
    }

    /// Whether no secret starts in the held bytes, nor in `chunk` before its last `window`
    /// bytes (those starting in the held bytes end within `window` bytes of the chunk).
    fn clean_after_carry(&mut self, chunk: &Bytes, window: usize) -> bool {
        let held = self.carry.len();
        self.carry
            .extend_from_slice(&chunk[..window.min(chunk.len())]);
        let junction = self
            .set
            .next_match(&mut Cursor::default(), &self.carry, 0, held);
        self.carry.truncate(held);
        junction.is_none()
            && self
                .set
                .next_match(&mut Cursor::default(), chunk, 0, chunk.len() - window)
                .is_none()
    }

    /// `feed`'s general case: everything joined, then scrubbed up to the last `window` bytes.
    fn feed_copying(&mut self, chunk: Bytes, window: usize) -> Bytes {
        // A first chunk with no secret before its last `window` bytes: its start goes on
        // without a copy.
        if self.carry.is_empty() && self.sent.is_empty() {
            let limit = chunk.len().saturating_sub(window);
            let found = self
                .set
                .next_match(&mut Cursor::default(), &chunk, 0, limit);
            if found.is_none() {
                self.carry.extend_from_slice(&chunk[limit..]);
                return chunk.slice(..limit);
            }
        }
        // What went out at a pause, then what is held, then the chunk.
        let sent = self.sent.len();
        let mut buf = Zeroizing::new(std::mem::take(&mut *self.sent));
        buf.extend_from_slice(&self.carry);
        buf.extend_from_slice(&chunk);
        self.carry.clear();
        let mut out = Vec::with_capacity(buf.len());
        let from = self.rest_of_a_secret_begun_in_what_went_out(&buf, sent, &mut out);
        let limit = buf.len().saturating_sub(window).max(from);
        let (end, hits, _) = self
            .set
            .replace_before(&buf[from..], limit - from, &mut out);
        self.hits += hits;
        let end = from + end;
        if limit == sent {
            // Too little after what went out to complete a secret begun there: it stays.
            self.sent.extend_from_slice(&buf[..sent]);
        }
        self.carry.extend_from_slice(&buf[end..]);
        Bytes::from(out)
    }

    /// Where the bytes after those that went out at a pause (`buf[..sent]`) may be read
    /// from: past the end of a secret begun in them and completed after (whose beginning the
    /// client has; its rest becomes the replacement, and counts as a hit), else `sent`.
    fn rest_of_a_secret_begun_in_what_went_out(
        &mut self,
        buf: &[u8],
        sent: usize,
        out: &mut Vec<u8>,
    ) -> usize {
        let mut cur = Cursor::default();
        let mut from = 0;
        while let Some((i, n, replacement)) = self.set.next_match(&mut cur, buf, from, sent) {
            if i + n > sent {
                self.hits += 1;
                if self.set.mask {
                    out.resize(out.len() + (i + n - sent), b'*');
                } else {
                    out.extend_from_slice(replacement);
                }
                return i + n;
            }
            from = i + 1;
        }
        sent
    }

    /// The upstream paused: every byte held goes out now (scrubbed of the secrets it holds
    /// whole), whatever it is. A secret it begins is caught when its rest arrives (see
    /// [`Scrubber::feed`]): only its beginning will have reached the client.
    pub(crate) fn release(&mut self) -> Bytes {
        let held = Zeroizing::new(std::mem::take(&mut *self.carry));
        let mut out = Vec::with_capacity(held.len());
        let (_, hits, replaced_to) = self.set.replace_before(&held, held.len(), &mut out);
        self.hits += hits;
        // What follows a replacement cannot complete a secret begun before it (that one
        // went out replaced): only the bytes after the last replacement are remembered.
        if replaced_to > 0 {
            self.sent.clear();
        }
        self.sent.extend_from_slice(&held[replaced_to..]);
        let keep = self.sent.len().saturating_sub(self.set.window());
        self.sent.drain(..keep);
        Bytes::from(out)
    }

    /// Whether bytes are held back (`release` would let some go).
    pub(crate) fn holds(&self) -> bool {
        !self.carry.is_empty()
    }

    /// The end of the body: the bytes held back, scrubbed.
    pub(crate) fn finish(&mut self) -> Bytes {
        let held = Zeroizing::new(std::mem::take(&mut *self.carry));
        self.sent.clear();
        let mut out = Vec::with_capacity(held.len());
        self.hits += self.set.replace_all(&held, &mut out);
        Bytes::from(out)
    }

    /// Secrets replaced so far.
    pub(crate) fn hits(&self) -> u64 {
        self.hits
    }
}

// === The response ===

/// A response that cannot be scanned for the secret injected into its request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScrubError {
    /// A `Content-Encoding` (or transfer coding) other than identity and chunked.
    #[error(
        "the upstream answered a request to a credentialed endpoint with Content-Encoding `{0}` although sluice asked for identity; sluice does not forward a body it cannot scan for the secret"
    )]
    Encoded(String),
    /// No encoding declared, but the body starts like compressed data (gzip, zstd, ...).
    #[error(
        "the upstream answered a request to a credentialed endpoint with a body that starts like {0} data although it declares no Content-Encoding; sluice does not forward a body it cannot scan for the secret"
    )]
    Undeclared(&'static str),
    /// A `206 Partial Content`: part of a response, where a secret could be split across
    /// answers too short to recognise it in.
    #[error(
        "the upstream answered a request to a credentialed endpoint with 206 Partial Content although sluice asked for no range; sluice does not forward part of a response, where a secret split across parts could not be recognised"
    )]
    Partial,
}

impl ScrubError {
    pub fn code(&self) -> crate::refusal_code::Code {
        match self {
            ScrubError::Encoded(_) | ScrubError::Undeclared(_) => {
                crate::refusal_code::Code::CredentialResponseEncoded
            }
            ScrubError::Partial => crate::refusal_code::Code::CredentialResponsePartial,
        }
    }
}

/// What to do at the first secret found in a response (audit it).
type OnHit = Box<dyn FnOnce() + Send + Sync>;

/// Request headers that ask for part of a representation: `Range` and its condition, and
/// the spellings servers also honour (Apache's `Request-Range`, Azure Storage's
/// `x-ms-range`).
const RANGE_HEADERS: [&str; 4] = ["range", "if-range", "request-range", "x-ms-range"];

/// Asks the upstream for a whole, unencoded response, replacing what the client asked for:
/// the response must be scanned. `Accept-Encoding: identity`, so that the secret is not
/// hidden by compression; no range header ([`RANGE_HEADERS`]), so that a secret stored
/// upstream cannot be fetched back a few bytes at a time, each piece too short to be
/// recognised (the server then answers the whole representation, which HTTP lets it do for
/// any range request).
pub fn ask_whole_plain_response(headers: &mut Vec<(String, Vec<u8>)>) {
    headers.retain(|(n, _)| {
        !n.eq_ignore_ascii_case("accept-encoding")
            && !RANGE_HEADERS.iter().any(|h| n.eq_ignore_ascii_case(h))
    });
    headers.push(("accept-encoding".to_string(), b"identity".to_vec()));
}

/// Scrubs a response of the secrets in `set`: header values now, the
/// body as it streams. `Content-Length` is dropped (the client gets chunked or HTTP/2 DATA
/// framing). An encoded body is refused, declared or not: the first bytes are read before the
/// head goes out, and a body that starts like compressed data is refused too. So is a `206`:
/// sluice asked for the whole response (see [`ask_whole_plain_response`]), and a server that
/// answers a piece anyway (to a range header of its own) could hand a secret out a few bytes
/// at a time, each piece too short to recognise. `on_hit` runs once, at the first secret
/// found.
pub async fn scrub_response<B>(
    response: Response<B>,
    set: Arc<ScrubSet>,
    on_hit: OnHit,
) -> Result<Response<Scrubbed<B>>, ScrubError>
where
    B: Body<Data = Bytes> + Unpin,
{
    let (mut parts, mut body) = response.into_parts();
    if parts.status == http::StatusCode::PARTIAL_CONTENT {
        return Err(ScrubError::Partial);
    }
    let mut early = Early::default();
    if !body.is_end_stream() {
        // A transfer coding other than chunked (which the HTTP/1 client removes) would
        // reach the client as encoded bytes just the same.
        let codings = parts
            .headers
            .get_all(http::header::CONTENT_ENCODING)
            .iter()
            .chain(
                parts
                    .headers
                    .get_all(http::header::TRANSFER_ENCODING)
                    .iter(),
            )
            .flat_map(|v| v.as_bytes().split(|&b| b == b','));
        for c in codings {
            let coding = String::from_utf8_lossy(c).trim().to_ascii_lowercase();
            if !coding.is_empty() && coding != "identity" && coding != "chunked" {
                return Err(ScrubError::Encoded(coding));
            }
        }
        early = Early::read(&mut body).await;
        if let magic::Sniff::Compressed(format) = magic::sniff(&early.start) {
            return Err(ScrubError::Undeclared(format));
        }
    }
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let body_set = if is_text(parts.headers.get(http::header::CONTENT_TYPE)) {
        Arc::clone(&set)
    } else {
        Arc::new(set.masked())
    };
    let hits = scrub_headers(&mut parts.headers, &set);
    let mut on_hit = Some(on_hit);
    if hits > 0
        && let Some(report) = on_hit.take()
    {
        report();
    }
    Ok(Response::from_parts(
        parts,
        Scrubbed {
            inner: body,
            early: early.frames,
            early_error: early.error,
            early_end: early.end,
            scrubber: Scrubber::new(body_set),
            trailers: None,
            pause: None,
            next: None,
            done: false,
            on_hit,
        },
    ))
}

/// The first frames of a body, read (up to `SNIFF` data bytes) before the head goes out.
struct Early<E> {
    frames: VecDeque<Frame<Bytes>>,
    /// The first `SNIFF` data bytes (fewer if the body is shorter).
    start: Vec<u8>,
    error: Option<E>,
    end: bool,
}

impl<E> Default for Early<E> {
    fn default() -> Self {
        Early {
            frames: VecDeque::new(),
            start: Vec::new(),
            error: None,
            end: false,
        }
    }
}

impl<E> Early<E> {
    async fn read<B>(body: &mut B) -> Early<E>
    where
        B: Body<Data = Bytes, Error = E> + Unpin,
    {
        let mut early = Early::default();
        // Only as many bytes as it takes to rule every compressed format in or out: a body
        // that starts `{` or `<` goes on at once (an event stream is not held back).
        while magic::sniff(&early.start) == magic::Sniff::NeedMore {
            match body.frame().await {
                None => {
                    early.end = true;
                    break;
                }
                Some(Err(e)) => {
                    early.error = Some(e);
                    break;
                }
                Some(Ok(frame)) => {
                    let data = frame.data_ref().cloned();
                    early.frames.push_back(frame);
                    let Some(data) = data else { break };
                    let room = magic::MAX - early.start.len();
                    early.start.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
        }
        early
    }
}

/// Whether a body of this type is text, where the placeholder can stand in for the secret
/// (no declared type counts as text: error pages often have none).
fn is_text(content_type: Option<&HeaderValue>) -> bool {
    let Some(ct) = content_type else { return true };
    let ct = String::from_utf8_lossy(ct.as_bytes()).to_ascii_lowercase();
    let essence = ct.split(';').next().unwrap_or("").trim();
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-www-form-urlencoded"
                | "application/x-ndjson"
                | "application/problem+json"
                | ""
        )
}

/// The header names that hold a secret, compared in lower case. No spelling is shorter than
/// its secret, so when every name is shorter than the shortest secret (the usual response)
/// nothing is compared, nor a lower-case set made.
fn names_holding_a_secret(headers: &HeaderMap, set: &ScrubSet) -> Vec<http::HeaderName> {
    let shortest = set
        .pairs
        .iter()
        .map(|(s, _)| s.len())
        .min()
        .unwrap_or(usize::MAX);
    if headers.keys().all(|n| n.as_str().len() < shortest) {
        return Vec::new();
    }
    let lowered;
    let lower = if set
        .pairs
        .iter()
        .any(|(s, _)| s.iter().any(u8::is_ascii_uppercase))
    {
        lowered = set.lowercase();
        &lowered
    } else {
        set
    };
    headers
        .keys()
        .filter(|n| lower.is_in(n.as_str().as_bytes()))
        .cloned()
        .collect()
}

/// Replaces secrets in every header value; a value that would no longer be a valid header
/// value is dropped, and so is a header whose name holds a secret (names reach sluice
/// lower-cased, so they are compared in lower case). The number of replacements.
pub(crate) fn scrub_headers(headers: &mut HeaderMap, set: &ScrubSet) -> u64 {
    let mut hits = 0;
    for name in names_holding_a_secret(headers, set) {
        headers.remove(&name);
        hits += 1;
    }
    let mut changed: Vec<(http::HeaderName, Vec<Option<HeaderValue>>)> = Vec::new();
    for name in headers.keys() {
        let mut any = false;
        let values: Vec<Option<HeaderValue>> = headers
            .get_all(name)
            .iter()
            .map(|v| {
                let mut out = Vec::new();
                let n = set.replace_all(v.as_bytes(), &mut out);
                if n == 0 {
                    return Some(v.clone());
                }
                hits += n;
                any = true;
                HeaderValue::from_bytes(&out).ok()
            })
            .collect();
        if any {
            changed.push((name.clone(), values));
        }
    }
    for (name, values) in changed {
        headers.remove(&name);
        for v in values.into_iter().flatten() {
            headers.append(name.clone(), v);
        }
    }
    hits
}

/// How long bytes a body holds back may wait for more from the upstream before they go out
/// anyway (so that a stream's last event is not kept waiting for the next): counted from the
/// first moment the upstream had nothing more while bytes were held, not reset by data that
/// trickles in after; the same for any bytes, so when they go out says nothing of what
/// they are.
const RELEASE_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// An upstream response body with every injected secret replaced as it streams.
pub struct Scrubbed<B: Body> {
    inner: B,
    /// Frames read before the head went out, then what ended that read.
    early: VecDeque<Frame<Bytes>>,
    early_error: Option<B::Error>,
    early_end: bool,
    scrubber: Scrubber,
    /// Trailers waiting while the held-back bytes go out first.
    trailers: Option<HeaderMap>,
    /// Running while the upstream pauses with bytes held back: when it fires they go out.
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The second part of what the last chunk let go ([`Scrubber::feed_parts`]).
    next: Option<Bytes>,
    done: bool,
    on_hit: Option<OnHit>,
}

// No field is ever pinned (the inner body is polled through `Pin::new`, which needs it
// `Unpin`): an early error need not be `Unpin` for the whole to be.
impl<B: Body + Unpin> Unpin for Scrubbed<B> {}

impl<B: Body> fmt::Debug for Scrubbed<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrubbed")
            .field("scrubber", &self.scrubber)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<B: Body<Data = Bytes> + Unpin> Scrubbed<B> {
    /// The next upstream frame: the early ones first.
    fn next_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(frame) = self.early.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if let Some(e) = self.early_error.take() {
            return Poll::Ready(Some(Err(e)));
        }
        if self.early_end {
            return Poll::Ready(None);
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn report(&mut self) {
        if self.scrubber.hits() > 0
            && let Some(report) = self.on_hit.take()
        {
            report();
        }
    }
}

impl<B> Body for Scrubbed<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        loop {
            if let Some(rest) = this.next.take() {
                return Poll::Ready(Some(Ok(Frame::data(rest))));
            }
            if let Some(trailers) = this.trailers.take() {
                this.done = true;
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.next_frame(cx) {
                Poll::Pending => {
                    if !this.scrubber.holds() {
                        return Poll::Pending;
                    }
                    let pause = this
                        .pause
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(RELEASE_AFTER)));
                    if pause.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    this.pause = None;
                    let out = this.scrubber.release();
                    this.report();
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        // The pause clock is not reset by data: held bytes wait at most
                        // about `RELEASE_AFTER`, even behind an upstream that trickles.
                        let (out, rest) = this.scrubber.feed_parts(data);
                        this.report();
                        let (out, rest) = if out.is_empty() {
                            (rest, Bytes::new())
                        } else {
                            (out, rest)
                        };
                        if !rest.is_empty() {
                            this.next = Some(rest);
                        }
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    Err(frame) => {
                        let Ok(mut trailers) = frame.into_trailers() else {
                            continue;
                        };
                        let set = Arc::clone(&this.scrubber.set);
                        this.scrubber.hits += scrub_headers(&mut trailers, &set);
                        this.report();
                        let held = this.scrubber.finish();
                        if held.is_empty() {
                            this.done = true;
                            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                        }
                        this.trailers = Some(trailers);
                        return Poll::Ready(Some(Ok(Frame::data(held))));
                    }
                },
                Poll::Ready(None) => {
                    this.done = true;
                    let held = this.scrubber.finish();
                    if !held.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(held))));
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests;
