//! The `_method` fields of a form body, found while the body streams.
//!
//! Owns [`FormScan`]: fed a form body chunk by chunk (after de-chunking), it hands back the
//! bytes that may go upstream now and withholds every field that could be a method override
//! (by `form_override`'s name rules) until that field is complete and its method read. Other
//! fields, a multipart upload's file parts included, pass as they arrive, so memory stays
//! bounded whatever the body's size: a held field is at most [`MAX_HELD_VALUE`] bytes of
//! value, a held multipart part head at most [`MAX_PART_HEAD`] bytes; more is refused.
//! [`from_body`] is the same scan over a body read whole.
//!
//! The contract with the caller: bytes handed back by a call go upstream only after every
//! method in [`FormScan::found`] has been judged and allowed. A part or pair not yet judged
//! is never handed back, so an upstream cut off after a refusal never holds it.

use bytes::Bytes;

use super::form_override::{FormKind, MAX_BOUNDARY, part_is_method};
use super::method_override::{self, InvalidOverride, KeyPrefix, Override, Source};

/// Longest value of a withheld field (a method is at most 32 bytes; white space around it
/// may fill the rest). A longer one is refused.
pub const MAX_HELD_VALUE: usize = 1024;
/// Longest head (delimiter line and headers) of a multipart part, held until its name is
/// known. A longer one is refused.
pub const MAX_PART_HEAD: usize = 8 * 1024;
/// Longest urlencoded field name held until it is known not to be `_method` (PHP drops any
/// number of leading spaces, so the name alone does not bound it). A longer one is refused.
const MAX_HELD_KEY: usize = 1024;
/// Raw name bytes up to which each new byte is checked against `_method`'s spellings; past
/// it a still-undecided name is decided when it ends.
const PREFIX_CHECKED: usize = 128;

/// The streaming `_method` reader of one form body.
#[derive(Debug)]
pub struct FormScan {
    found: Vec<Override>,
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Url(UrlScan),
    Multipart(PartScan),
}

/// The methods named by `_method` fields of a whole form body of `kind`, in order, each once.
/// (For the fuzz entry points and tests: the proxy judges bodies as they stream.)
#[cfg(any(test, feature = "fuzz"))]
pub fn from_body(kind: &FormKind, body: &[u8]) -> Result<Vec<Override>, InvalidOverride> {
    let mut scan = FormScan::new(kind)?;
    let mut out = Vec::new();
    scan.feed(Bytes::copy_from_slice(body), &mut out)?;
    scan.finish(&mut out)?;
    Ok(scan.found)
}

impl FormScan {
    /// A scan of a body of `kind`; a multipart boundary no parser would accept is refused.
    pub fn new(kind: &FormKind) -> Result<FormScan, InvalidOverride> {
        let inner = match kind {
            FormKind::Urlencoded => Inner::Url(UrlScan::default()),
            FormKind::Unreadable(why) => return Err(InvalidOverride::Unreadable(why.to_string())),
            FormKind::Multipart(boundary) => {
                if boundary.len() > MAX_BOUNDARY {
                    return Err(InvalidOverride::Unreadable(format!(
                        "a multipart boundary longer than {MAX_BOUNDARY} bytes"
                    )));
                }
                if boundary.iter().any(|&b| b == b'\r' || b == b'\n') {
                    return Err(InvalidOverride::Unreadable(
                        "a multipart boundary with a line break".to_string(),
                    ));
                }
                let mut delimiter = b"--".to_vec();
                delimiter.extend_from_slice(boundary);
                Inner::Multipart(PartScan {
                    delimiter,
                    held: Vec::new(),
                    state: PartState::Open { line_start: true },
                    search: HeadSearch::default(),
                })
            }
        };
        Ok(FormScan {
            found: Vec::new(),
            inner,
        })
    }

    /// Every method the body's `_method` fields named so far, in order, each once.
    pub fn found(&self) -> &[Override] {
        &self.found
    }

    /// The next chunk of the body: what may go upstream (once [`FormScan::found`] is judged)
    /// is pushed to `out`, in order; the rest is held.
    pub fn feed(&mut self, chunk: Bytes, out: &mut Vec<Bytes>) -> Result<(), InvalidOverride> {
        let from = out.len();
        let fed = match &mut self.inner {
            Inner::Url(u) => u.feed(&chunk, &mut Cut::new(&chunk, out), &mut self.found),
            Inner::Multipart(m) => m.feed(&chunk, &mut Cut::new(&chunk, out), &mut self.found),
        };
        coalesce(out, from);
        fed
    }

    /// How many of the first bytes of `next` this scan would only pass, as they come, without
    /// finding, holding or refusing anything: fed them in one piece or byte by byte, it ends
    /// in the same state. (What is neither a urlencoded pair's name or `_method` value nor a
    /// multipart line's start: a reader in step with this one may read such a run at once.)
    pub fn quiet_len(&self, next: &[u8]) -> usize {
        match &self.inner {
            Inner::Url(u) if u.state == UrlState::Pass => next
                .iter()
                .position(|&b| is_separator(b))
                .unwrap_or(next.len()),
            Inner::Multipart(m)
                if m.held.is_empty() && m.state == (PartState::Open { line_start: false }) =>
            {
                memchr::memchr(b'\n', next).unwrap_or(next.len())
            }
            Inner::Url(_) | Inner::Multipart(_) => 0,
        }
    }

    /// The body ended: a field still held is read as ended here (conservatively, even
    /// where a parser would find it unterminated), and what is left pushed to `out`.
    pub fn finish(&mut self, out: &mut Vec<Bytes>) -> Result<(), InvalidOverride> {
        let from = out.len();
        let finished = match &mut self.inner {
            Inner::Url(u) => u.finish(out, &mut self.found),
            Inner::Multipart(m) => m.finish(out, &mut self.found),
        };
        coalesce(out, from);
        finished
    }
}

/// The pieces handed back from `from` on, as one when there are more than two: each piece
/// goes upstream as a frame of its own, and a chunk of one-byte fields would otherwise be a
/// frame per byte (an HTTP/2 DATA frame's 9-byte header each, a channel hand-off each).
pub(super) fn coalesce(out: &mut Vec<Bytes>, from: usize) {
    if out.len().saturating_sub(from) <= 2 {
        return;
    }
    let pieces = out.split_off(from);
    let mut one = bytes::BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
    for piece in &pieces {
        one.extend_from_slice(piece);
    }
    out.push(one.freeze());
}

/// Hands back slices of one chunk without copying: `chunk[from..]` not yet handed back.
struct Cut<'o> {
    chunk: Bytes,
    from: usize,
    out: &'o mut Vec<Bytes>,
}

impl<'o> Cut<'o> {
    fn new(chunk: &Bytes, out: &'o mut Vec<Bytes>) -> Cut<'o> {
        Cut {
            chunk: chunk.clone(),
            from: 0,
            out,
        }
    }

    /// Hands back the chunk's bytes before `to` not handed back yet.
    fn pass_to(&mut self, to: usize) {
        if to > self.from {
            self.out.push(self.chunk.slice(self.from..to));
        }
        self.from = self.from.max(to);
    }

    /// The chunk's bytes before `to` are held elsewhere (copied): not handed back from here.
    fn skip_to(&mut self, to: usize) {
        self.from = self.from.max(to);
    }

    /// Hands back held bytes (they come before the chunk's from `from` on).
    fn release(&mut self, held: &mut Vec<u8>) {
        if !held.is_empty() {
            self.out.push(Bytes::from(std::mem::take(held)));
        }
    }
}

// === urlencoded ===

/// `name=value` pairs split at `&` or `;`: a pair whose name may decode to `_method` is
/// held until its separator (or the body's end); others pass.
#[derive(Debug, Default)]
struct UrlScan {
    /// The held pair so far (its name, then `=` and its value when it is a `_method` one).
    held: Vec<u8>,
    state: UrlState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum UrlState {
    /// In a pair's name, held until it is known not to be `_method`.
    #[default]
    Name,
    /// In the value of a `_method` pair (`=` at `eq` in `held`), held to its end.
    Value { eq: usize },
    /// In a pair known not to be `_method`: passes to its separator.
    Pass,
}

fn is_separator(b: u8) -> bool {
    b == b'&' || b == b';'
}

impl UrlScan {
    fn feed(
        &mut self,
        chunk: &[u8],
        cut: &mut Cut<'_>,
        found: &mut Vec<Override>,
    ) -> Result<(), InvalidOverride> {
        let mut i = 0;
        while i < chunk.len() {
            match self.state {
                UrlState::Pass => match chunk[i..].iter().position(|&b| is_separator(b)) {
                    Some(at) => {
                        i += at + 1;
                        self.state = UrlState::Name;
                    }
                    None => i = chunk.len(),
                },
                UrlState::Name => {
                    cut.pass_to(i);
                    let b = chunk[i];
                    i += 1;
                    cut.skip_to(i);
                    if is_separator(b) {
                        // A name without a value names nothing.
                        self.held.push(b);
                        cut.release(&mut self.held);
                        continue;
                    }
                    if b == b'=' {
                        let name = method_override::percent_decode(&self.held);
                        let eq = self.held.len();
                        self.held.push(b);
                        if method_override::is_method_key(&name) {
                            self.state = UrlState::Value { eq };
                        } else {
                            cut.release(&mut self.held);
                            self.state = UrlState::Pass;
                        }
                        continue;
                    }
                    self.held.push(b);
                    if self.held.len() > MAX_HELD_KEY {
                        return Err(InvalidOverride::Unreadable(format!(
                            "a form field name longer than {MAX_HELD_KEY} bytes that may be _method"
                        )));
                    }
                    if self.held.len() <= PREFIX_CHECKED && name_prefix(&self.held) == KeyPrefix::No
                    {
                        cut.release(&mut self.held);
                        self.state = UrlState::Pass;
                    }
                }
                UrlState::Value { eq } => {
                    let end = chunk[i..]
                        .iter()
                        .position(|&b| is_separator(b))
                        .map(|at| i + at);
                    let upto = end.unwrap_or(chunk.len());
                    cut.pass_to(i);
                    self.held.extend_from_slice(&chunk[i..upto]);
                    if self.held.len() - eq - 1 > MAX_HELD_VALUE {
                        return Err(value_too_long());
                    }
                    match end {
                        Some(at) => {
                            self.value_ends(eq, found)?;
                            self.held.push(chunk[at]);
                            i = at + 1;
                            cut.skip_to(i);
                            cut.release(&mut self.held);
                            self.state = UrlState::Name;
                        }
                        None => {
                            i = chunk.len();
                            cut.skip_to(i);
                        }
                    }
                }
            }
        }
        cut.pass_to(chunk.len());
        Ok(())
    }

    /// The held `_method` pair's value ended: its method is read.
    fn value_ends(&self, eq: usize, found: &mut Vec<Override>) -> Result<(), InvalidOverride> {
        let value = method_override::percent_decode(&self.held[eq + 1..]);
        method_override::push(found, Source::Form, value.trim_ascii())
    }

    fn finish(
        &mut self,
        out: &mut Vec<Bytes>,
        found: &mut Vec<Override>,
    ) -> Result<(), InvalidOverride> {
        match self.state {
            UrlState::Value { eq } => self.value_ends(eq, found)?,
            // A name without a value names nothing.
            UrlState::Name | UrlState::Pass => {}
        }
        self.state = UrlState::Pass;
        if !self.held.is_empty() {
            out.push(Bytes::from(std::mem::take(&mut self.held)));
        }
        Ok(())
    }
}

/// Whether a field name that begins with the raw (percent-encoded) `raw` may still be
/// `_method`: an escape cut off at the end is left out until it is complete.
fn name_prefix(raw: &[u8]) -> KeyPrefix {
    let whole = match raw {
        [.., b'%'] => &raw[..raw.len() - 1],
        [.., b'%', h] if h.is_ascii_hexdigit() => &raw[..raw.len() - 2],
        _ => raw,
    };
    method_override::method_key_prefix(&method_override::percent_decode(whole))
}

fn cut_named() -> InvalidOverride {
    InvalidOverride::Unreadable(
        "a multipart part names _method in a head that a delimiter line cuts short".to_string(),
    )
}

fn head_too_long() -> InvalidOverride {
    InvalidOverride::Unreadable(format!(
        "a multipart part head (delimiter line and headers) longer than {MAX_PART_HEAD} bytes"
    ))
}

fn value_too_long() -> InvalidOverride {
    InvalidOverride::Unreadable(format!(
        "a _method field longer than {MAX_HELD_VALUE} bytes"
    ))
}

// === multipart ===

/// A multipart body: parts begin at a delimiter (`--` and the boundary at the start of a
/// line, after any white space or NUL as Rack 2 strips lines, whatever follows on it; the closing one too, since some parsers read on after it).
/// Each part's head is held until it ends (a blank line); a part whose head may name
/// `_method` is held until the next delimiter, others pass. A delimiter's first bytes at a
/// line's start are held until it is known whether they are one.
#[derive(Debug)]
struct PartScan {
    /// `--` and the boundary.
    delimiter: Vec<u8>,
    /// Held bytes: a possible delimiter's start, a part's head, or a `_method` part.
    held: Vec<u8>,
    state: PartState,
    /// How far the held part's head has been searched for its end (reset with each part).
    search: HeadSearch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartState {
    /// Passing: the preamble, or the content of a part not named `_method` (`line_start`:
    /// the next byte begins a line). `held` holds a delimiter's start, if any.
    Open { line_start: bool },
    /// `held` is a part's delimiter and its head so far.
    Head,
    /// `held` is a `_method` part: delimiter, head, and content from `content`.
    Value { content: usize },
}

impl PartScan {
    /// A part's head begins in `held` (after its delimiter): searched from its start.
    fn enter_head(&mut self) {
        self.state = PartState::Head;
        self.search = HeadSearch::default();
    }

    fn feed(
        &mut self,
        chunk: &[u8],
        cut: &mut Cut<'_>,
        found: &mut Vec<Override>,
    ) -> Result<(), InvalidOverride> {
        let mut i = 0;
        while i < chunk.len() {
            match self.state {
                PartState::Open { line_start } if self.held.is_empty() => {
                    // The first line start whose bytes may begin a delimiter (a plain loop:
                    // this runs over every byte of every file uploaded).
                    let mut candidate = None;
                    let mut at = if line_start { i } else { chunk.len() + 1 };
                    let mut j = i;
                    loop {
                        if at <= chunk.len() {
                            while at < chunk.len() && is_line_space(chunk[at]) {
                                at += 1;
                            }
                            let n = (chunk.len() - at).min(self.delimiter.len());
                            if n > 0 && chunk[at..at + n] == self.delimiter[..n] {
                                candidate = Some((at, n));
                                break;
                            }
                        }
                        while j < chunk.len() && chunk[j] != b'\n' {
                            j += 1;
                        }
                        if j == chunk.len() {
                            break;
                        }
                        j += 1;
                        at = j;
                    }
                    let Some((at, n)) = candidate else {
                        // A line start, and any line space after it, carries over.
                        let last = chunk[i..].iter().rposition(|&b| !is_line_space(b));
                        self.state = PartState::Open {
                            line_start: match last {
                                Some(l) => chunk[i + l] == b'\n',
                                None => line_start,
                            },
                        };
                        i = chunk.len();
                        continue;
                    };
                    cut.pass_to(at);
                    self.held.extend_from_slice(&chunk[at..at + n]);
                    i = at + n;
                    cut.skip_to(i);
                    if n == self.delimiter.len() {
                        self.enter_head();
                    } else {
                        self.state = PartState::Open { line_start: false };
                    }
                }
                PartState::Open { .. } => {
                    // `held` is a delimiter's start: it is one, or it passes.
                    let have = self.held.len();
                    let n = (self.delimiter.len() - have).min(chunk.len() - i);
                    if chunk[i..i + n] == self.delimiter[have..have + n] {
                        self.held.extend_from_slice(&chunk[i..i + n]);
                        i += n;
                        cut.skip_to(i);
                        if self.held.len() == self.delimiter.len() {
                            self.enter_head();
                        }
                    } else {
                        // Not a delimiter (it holds no line break: the boundary has none).
                        cut.release(&mut self.held);
                        self.state = PartState::Open { line_start: false };
                    }
                }
                PartState::Head | PartState::Value { .. } => {
                    cut.pass_to(i);
                    let from = self.held.len();
                    self.held.extend_from_slice(&chunk[i..]);
                    i = chunk.len();
                    cut.skip_to(i);
                    // A head ends, and a delimiter begins, only after a line break: without
                    // one in the new bytes (or just before them, where a delimiter may have
                    // begun) nothing changes but the head's length. Not reading the head
                    // again then keeps a head sent a byte at a time from costing its square.
                    let window = from.saturating_sub(self.delimiter.len());
                    if self.state == PartState::Head
                        && !self.held[window..].contains(&b'\n')
                        && !ends_line(&self.held[..window], window)
                    {
                        if self.held.len() > MAX_PART_HEAD {
                            return Err(head_too_long());
                        }
                        continue;
                    }
                    self.judge_held(from, false, cut, found)?;
                    // What is left of `held` is a part or a delimiter's start: passing
                    // resumes in the next chunk.
                }
            }
        }
        cut.pass_to(chunk.len());
        Ok(())
    }

    /// Reads the held bytes (new from `from` on) as far as they go: part heads decided,
    /// `_method` parts read, what may pass handed back. `end`: the body ended here.
    fn judge_held(
        &mut self,
        from: usize,
        end: bool,
        cut: &mut Cut<'_>,
        found: &mut Vec<Override>,
    ) -> Result<(), InvalidOverride> {
        let mut scan_from = from;
        loop {
            match self.state {
                PartState::Head => {
                    // The part ends at the next delimiter (or the body's end).
                    let dlen = self.delimiter.len();
                    let (limit, complete) = match self.next_delimiter(dlen, scan_from) {
                        Some((at, true)) => (at, true),
                        _ if end => (self.held.len(), true),
                        Some((at, false)) => (at, false),
                        None => (self.held.len(), false),
                    };
                    let part = &self.held[dlen..limit];
                    match read_head(part, dlen, complete, &mut self.search) {
                        HeadRead::Wait => {
                            // However the body is cut, the same heads are too long.
                            if limit > MAX_PART_HEAD {
                                return Err(head_too_long());
                            }
                            return Ok(());
                        }
                        HeadRead::TooLong => return Err(head_too_long()),
                        HeadRead::CutNamed => return Err(cut_named()),
                        HeadRead::Part { content, method } => {
                            let content = content + dlen;
                            if method {
                                self.state = PartState::Value { content };
                                scan_from = content;
                                continue;
                            }
                            // Not `_method`: the head passes, and so does what follows.
                            let rest = self.held.split_off(content);
                            cut.release(&mut self.held);
                            self.reopen(rest, cut);
                            scan_from = 0;
                            if matches!(self.state, PartState::Open { .. }) {
                                return Ok(());
                            }
                        }
                        HeadRead::Nameless => {
                            // The part ended before its head did: it has no name.
                            let rest = self.held.split_off(limit);
                            cut.release(&mut self.held);
                            self.held = rest;
                            if self.held.len() < dlen {
                                self.state = PartState::Open { line_start: false };
                                return Ok(());
                            }
                            self.enter_head();
                            scan_from = dlen;
                        }
                    }
                }
                PartState::Value { content } => {
                    let next = self.next_delimiter(content, scan_from.max(content));
                    let at = match next {
                        Some((at, true)) => at,
                        _ if end => self.held.len(),
                        Some((at, false)) => {
                            // A delimiter's start at the end: wait for the rest.
                            if at - content > MAX_HELD_VALUE + 2 {
                                return Err(value_too_long());
                            }
                            return Ok(());
                        }
                        None => {
                            if self.held.len() - content > MAX_HELD_VALUE + 2 {
                                return Err(value_too_long());
                            }
                            return Ok(());
                        }
                    };
                    // The line break before the delimiter belongs to it.
                    let value = &self.held[content..at];
                    let value = value.strip_suffix(b"\n").unwrap_or(value);
                    let value = value.strip_suffix(b"\r").unwrap_or(value);
                    if value.len() > MAX_HELD_VALUE {
                        return Err(value_too_long());
                    }
                    method_override::push(found, Source::Multipart, value.trim_ascii())?;
                    let rest = self.held.split_off(at);
                    cut.release(&mut self.held);
                    self.held = rest;
                    self.enter_head();
                    if end && self.held.len() < self.delimiter.len() {
                        self.state = PartState::Open { line_start: false };
                        return Ok(());
                    }
                    scan_from = self.delimiter.len();
                }
                PartState::Open { .. } => return Ok(()),
            }
        }
    }

    /// Passing resumes with `rest`, the held bytes after a part's head: its content up to
    /// a delimiter passes; from a (possible) delimiter on it is held again.
    fn reopen(&mut self, rest: Vec<u8>, cut: &mut Cut<'_>) {
        // The content begins a line (it follows the head's blank line).
        match self.next_delimiter_in(&rest, 0) {
            Some((at, whole)) => {
                if at > 0 {
                    cut.out.push(Bytes::copy_from_slice(&rest[..at]));
                }
                self.held = rest[at..].to_vec();
                if whole {
                    self.enter_head();
                } else {
                    self.state = PartState::Open { line_start: false };
                }
            }
            None => {
                let line_start = ends_line(&rest, rest.len());
                if !rest.is_empty() {
                    cut.out.push(Bytes::from(rest));
                }
                self.state = PartState::Open { line_start };
            }
        }
    }

    /// The first delimiter in `held` at a line start at or after `from` (`min` the earliest
    /// line start counted): where, and whether it is whole (else it is cut off by the end).
    fn next_delimiter(&self, min: usize, from: usize) -> Option<(usize, bool)> {
        // A line start at `from` counts only if a line break precedes it.
        let from = from.saturating_sub(self.delimiter.len() + 1).max(min);
        self.next_delimiter_in(&self.held, from)
            .filter(|&(at, _)| at >= min)
    }

    /// The first delimiter in `bytes` at a line start (after any line space) at or after
    /// `from` (`from` itself counts as one when only line space lies between it and the
    /// start or a line break).
    fn next_delimiter_in(&self, bytes: &[u8], from: usize) -> Option<(usize, bool)> {
        let from = from.min(bytes.len());
        let starts = ends_line(bytes, from).then_some(from).into_iter().chain(
            bytes
                .get(from..)
                .unwrap_or_default()
                .iter()
                .enumerate()
                .filter_map(|(at, &b)| (b == b'\n').then_some(from + at + 1)),
        );
        for mut at in starts {
            while at < bytes.len() && is_line_space(bytes[at]) {
                at += 1;
            }
            let n = (bytes.len() - at).min(self.delimiter.len());
            if n > 0 && bytes[at..at + n] == self.delimiter[..n] {
                return Some((at, n == self.delimiter.len()));
            }
        }
        None
    }

    fn finish(
        &mut self,
        out: &mut Vec<Bytes>,
        found: &mut Vec<Override>,
    ) -> Result<(), InvalidOverride> {
        let empty = Bytes::new();
        let mut cut = Cut::new(&empty, out);
        if matches!(self.state, PartState::Head | PartState::Value { .. }) {
            let from = self.held.len();
            self.judge_held(from, true, &mut cut, found)?;
        }
        cut.release(&mut self.held);
        self.state = PartState::Open { line_start: false };
        Ok(())
    }
}

/// What a part's bytes so far say about its head.
#[derive(Debug, PartialEq, Eq)]
enum HeadRead {
    /// It may end further on.
    Wait,
    /// Longer than [`MAX_PART_HEAD`].
    TooLong,
    /// The part ended before its head did: it has no name.
    Nameless,
    /// The part ended before its head did, but its lines name `_method`: a parser that does
    /// not end it there reads them as a head.
    CutNamed,
    /// Its content begins at `content` (in `part`); `method`: it may be a `_method` field.
    Part { content: usize, method: bool },
}

/// How far a part's head has been searched without finding where it ends, so that the next
/// search of the same part (grown, or cut shorter at a delimiter's start) begins there: a
/// head sent a byte at a time costs its length, not its square. Positions are in the part's
/// bytes after its delimiter; no match begins before them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct HeadSearch {
    /// Bytes searched for the first line break (none found in them).
    eol: usize,
    /// Where a blank line (`\n\n` or `\n\r\n`) may begin, at the earliest.
    blank: usize,
    /// Where the CRLF CRLF a strict parser waits for may begin, at the earliest.
    crlf: usize,
}

/// The first `needle` in `haystack` at or after `from` (clamped to its length); `None`
/// records in `from` where the next search may begin (a match may straddle the end).
fn find_from(haystack: &[u8], needle: &[u8], from: &mut usize) -> Option<usize> {
    let start = (*from).min(haystack.len());
    match find(&haystack[start..], needle) {
        Some(i) => Some(start + i),
        None => {
            *from = haystack.len().saturating_sub(needle.len() - 1).max(start);
            None
        }
    }
}

/// Reads the head of a part: `part` is its bytes after its delimiter (of `dlen` bytes), so
/// far, or all of them when `complete`. The delimiter line's rest comes first, then the
/// header lines up to the first blank line (CRLF or LF alone), where the content begins. A
/// parser that wants CRLF CRLF reads header lines on to the first one (or the part's end):
/// where the blank line is not one, the names are read up to there too. `search` carries
/// what earlier reads of the same part found.
fn read_head(part: &[u8], dlen: usize, complete: bool, search: &mut HeadSearch) -> HeadRead {
    let Some((headers_end, content, strict)) = head_end(part, search) else {
        return match complete {
            false => HeadRead::Wait,
            true if dlen + part.len() > MAX_PART_HEAD => HeadRead::TooLong,
            // A parser that does not split here reads these lines as a head that goes on.
            true if part_is_method(part) => HeadRead::CutNamed,
            true => HeadRead::Nameless,
        };
    };
    let (names_end, head_len) = if strict {
        (headers_end, content)
    } else {
        search.crlf = search.crlf.max(headers_end);
        match find_from(part, b"\r\n\r\n", &mut search.crlf) {
            Some(i) => (i, i + 4),
            None if complete => (part.len(), part.len()),
            None => return HeadRead::Wait,
        }
    };
    if dlen + head_len.max(content) > MAX_PART_HEAD {
        return HeadRead::TooLong;
    }
    // The delimiter line's rest too: for a parser that does not split there, it is a line.
    HeadRead::Part {
        content,
        method: part_is_method(&part[..names_end]),
    }
}

/// Where a part's head ends in `part` (the bytes after its delimiter): the end of its
/// header lines, the start of its content, and whether the blank line ended a CRLF line
/// with a CRLF. The delimiter line's rest comes first, then the headers up to the first
/// blank line (CRLF or LF alone).
fn head_end(part: &[u8], search: &mut HeadSearch) -> Option<(usize, usize, bool)> {
    let eol = find_from(part, b"\n", &mut search.eol)?;
    let after = &part[eol + 1..];
    // Both searches start where neither was found before (`blank`, in `after`); a CRLF
    // blank line counts only where it begins no later than the first LF one.
    let mut from = (search.blank, search.blank);
    let lf = find_from(after, b"\n\n", &mut from.1);
    let before_lf = &after[..lf.map_or(after.len(), |j| (j + 3).min(after.len()))];
    let crlf = find_from(before_lf, b"\n\r\n", &mut from.0);
    if crlf.is_none() && lf.is_none() {
        search.blank = from.0.min(from.1);
    }
    let (i, len) = match (crlf, lf) {
        (Some(i), Some(j)) if j < i => (j, 2),
        (Some(i), _) => (i, 3),
        (None, Some(j)) => (j, 2),
        (None, None) => return None,
    };
    let strict = len == 3 && i > 0 && after[i - 1] == b'\r';
    Some((eol + 1 + i, eol + 1 + i + len, strict))
}

/// White space and NUL before a delimiter on its line: Rack 2 strips them from each line
/// before comparing it with the delimiter.
pub(super) fn is_line_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | 0x0b | 0x0c | b'\r' | 0)
}

/// Whether `bytes[..at]` ends a line: it is empty, or ends with a line break and any line
/// space after it.
fn ends_line(bytes: &[u8], at: usize) -> bool {
    bytes[..at]
        .iter()
        .rposition(|&b| !is_line_space(b))
        .is_none_or(|l| bytes[l] == b'\n')
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let at = haystack.windows(needle.len()).position(|w| w == needle);
    #[cfg(test)]
    SEARCHED.with(|n| {
        let looked = at.map_or(haystack.len(), |i| i + needle.len());
        n.set(n.get() + looked);
    });
    at
}

#[cfg(test)]
thread_local! {
    /// Bytes `find` has looked at on this thread: the work of reading part heads.
    static SEARCHED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
#[path = "form_scan_tests.rs"]
mod tests;
