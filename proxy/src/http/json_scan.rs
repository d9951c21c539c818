//! The `_method` members of a JSON body, found while the body streams.
//!
//! Laravel (whose request reads a JSON body as its input, where Symfony's method override
//! finds `_method`) and Express's `method-override` with a body getter take the method from
//! a top-level `_method` member of a JSON body. Owns which bodies are read as JSON
//! ([`is_json`]) and [`JsonScan`]: fed a body chunk by chunk, it follows the JSON structure
//! (strings and their escapes, nesting) and holds back each top-level member whose key may
//! decode to `_method` (JSON escapes decoded, then `method_override`'s name rules) from its
//! key's opening quote until its value ends; then the method its value names is read and the
//! member handed back. Everything else passes as it arrives, so memory stays bounded: a
//! held key is at most [`MAX_HELD_KEY`] bytes, what follows it to the value's end at most
//! [`MAX_HELD_VALUE`]; more is refused. A value that is not a string is refused too (fail
//! closed: Express reads the first item of an array). Nested members are not overrides and
//! pass; duplicate members are each read. A body that is not valid JSON is not refused for
//! that (strict parsers refuse it themselves); only a held member is judged.
//!
//! The contract with the caller is `form_scan`'s: bytes handed back by a call go upstream
//! only after every method in [`JsonScan::found`] has been judged and allowed.

use bytes::Bytes;

use super::method_override::{self, InvalidOverride, KeyPrefix, Override, Source};

/// Longest raw key (from its opening quote) held while it may still be `_method`.
pub const MAX_HELD_KEY: usize = 1024;
/// Most bytes held after a `_method` key: white space, `:` and the raw string value.
pub const MAX_HELD_VALUE: usize = 1024;
/// Decoded key bytes up to which each new byte is checked against `_method`'s spellings;
/// past it a still-undecided key is decided when it ends.
const PREFIX_CHECKED: usize = 128;

/// Whether a request with `method` and `content_types` (every `Content-Type` value it sent)
/// may have its body read as JSON: a type that names JSON anywhere (Laravel looks for
/// `/json` or `+json` in the header; `json` in any case covers both and custom types), or a
/// `POST` without a `Content-Type` (read as a form too).
pub fn is_json<'a>(method: &str, content_types: impl IntoIterator<Item = &'a [u8]>) -> bool {
    let mut any = false;
    for value in content_types {
        any = true;
        if value.windows(4).any(|w| w.eq_ignore_ascii_case(b"json")) {
            return true;
        }
    }
    !any && method.eq_ignore_ascii_case("POST")
}

/// The streaming `_method` reader of one JSON body.
#[derive(Debug, Default)]
pub struct JsonScan {
    found: Vec<Override>,
    /// Containers open, objects and arrays alike.
    depth: u32,
    /// The open top-level container is an object.
    top_object: bool,
    /// At depth 1, a `:` came and the value after it has not begun: a string is a value.
    /// Any other string of the top-level object is read as a key.
    after_colon: bool,
    state: State,
    /// The held member, from its key's opening quote.
    held: Vec<u8>,
    /// Where its key ended in `held`.
    key_end: usize,
}

#[derive(Debug, Default)]
enum State {
    /// Between tokens, or in a number or literal: passes.
    #[default]
    Structure,
    /// In a string that cannot be a `_method` key (`escaped`: the last byte was a lone
    /// backslash): passes.
    Str { escaped: bool },
    /// In a top-level key that may still be `_method`: held.
    Key(Decoder),
    /// After a `_method` key, before its `:`: held.
    Colon,
    /// After its `:`, before its value: held.
    Value,
    /// In its string value: held.
    ValueStr(Decoder),
}

/// What a held byte does to the held member.
enum Held {
    /// It stays held.
    Keep,
    /// The member is read (or not one): what is held goes.
    Release,
    /// The byte is not the member's (a `_method` key without a `:`): what is held goes, and
    /// the byte is read again as structure.
    Again,
}

/// The methods named by top-level `_method` members of a whole JSON body, in order, each
/// once.
/// (For the fuzz entry points and tests: the proxy judges bodies as they stream.)
#[cfg(any(test, feature = "fuzz"))]
pub fn from_body(body: &[u8]) -> Result<Vec<Override>, InvalidOverride> {
    let mut scan = JsonScan::default();
    let mut out = Vec::new();
    scan.feed(Bytes::copy_from_slice(body), &mut out)?;
    scan.finish(&mut out)?;
    Ok(scan.found)
}

impl JsonScan {
    /// Every method the body's `_method` members named so far, in order, each once.
    pub fn found(&self) -> &[Override] {
        &self.found
    }

    /// The next chunk of the body: what may go upstream (once [`JsonScan::found`] is
    /// judged) is pushed to `out`, in order; the rest is held.
    pub fn feed(&mut self, chunk: Bytes, out: &mut Vec<Bytes>) -> Result<(), InvalidOverride> {
        // `chunk[from..i]` passes; what is before `from` went or is held.
        let mut from = 0;
        let mut i = 0;
        while i < chunk.len() {
            match &mut self.state {
                State::Str { escaped } => {
                    if *escaped {
                        *escaped = false;
                        i += 1;
                        continue;
                    }
                    match memchr::memchr2(b'"', b'\\', &chunk[i..]) {
                        None => i = chunk.len(),
                        Some(at) => {
                            if chunk[i + at] == b'\\' {
                                *escaped = true;
                            } else {
                                self.state = State::Structure;
                            }
                            i += at + 1;
                        }
                    }
                }
                State::Structure => {
                    let b = chunk[i];
                    if b == b'"' && self.depth == 1 && self.top_object && !self.after_colon {
                        // A top-level key: held from its quote until it is known.
                        if i > from {
                            out.push(chunk.slice(from..i));
                        }
                        self.held.push(b);
                        self.key_end = 0;
                        self.state = State::Key(Decoder::default());
                        i += 1;
                        from = i;
                        continue;
                    }
                    self.structure(b);
                    i += 1;
                }
                State::Key(_) | State::Colon | State::Value | State::ValueStr(_) => {
                    let b = chunk[i];
                    self.held.push(b);
                    match self.held_byte(b)? {
                        Held::Keep => i += 1,
                        Held::Release => {
                            i += 1;
                            out.push(Bytes::from(std::mem::take(&mut self.held)));
                        }
                        Held::Again => {
                            self.held.pop();
                            out.push(Bytes::from(std::mem::take(&mut self.held)));
                        }
                    }
                    from = i;
                }
            }
        }
        if from < chunk.len() {
            out.push(chunk.slice(from..));
        }
        Ok(())
    }

    /// The body ended: a string value still held is read as ended here (conservatively,
    /// though parsers refuse it), and what is held pushed to `out`.
    pub fn finish(&mut self, out: &mut Vec<Bytes>) -> Result<(), InvalidOverride> {
        if let State::ValueStr(value) = &self.state {
            method_override::push(&mut self.found, Source::Json, value.text.trim_ascii())?;
        }
        self.state = State::Structure;
        if !self.held.is_empty() {
            out.push(Bytes::from(std::mem::take(&mut self.held)));
        }
        Ok(())
    }

    /// A byte outside strings, not a top-level key's quote.
    fn structure(&mut self, b: u8) {
        match b {
            b'"' => {
                if self.depth == 1 {
                    self.after_colon = false;
                }
                self.state = State::Str { escaped: false };
            }
            b'{' | b'[' => {
                if self.depth == 0 {
                    // Each top-level value counts (a lenient parser may read on).
                    self.top_object = b == b'{';
                }
                if self.depth <= 1 {
                    self.after_colon = false;
                }
                self.depth = self.depth.saturating_add(1);
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b':' if self.depth == 1 => self.after_colon = true,
            b' ' | b'\t' | b'\n' | b'\r' => {}
            // `,`, or a number or literal begun.
            _ if self.depth == 1 => self.after_colon = false,
            _ => {}
        }
    }

    /// A byte of the held member (already in `held`).
    fn held_byte(&mut self, b: u8) -> Result<Held, InvalidOverride> {
        // (Read only once the key ended, when `key_end` is within `held`.)
        let after_key = self.held.len().saturating_sub(self.key_end);
        match &mut self.state {
            State::Key(key) => match key.push(b) {
                Step::End => {
                    if method_override::is_method_key(&key.text) {
                        self.key_end = self.held.len();
                        self.state = State::Colon;
                        return Ok(Held::Keep);
                    }
                    self.state = State::Structure;
                    Ok(Held::Release)
                }
                Step::Byte
                    if key.text.len() <= PREFIX_CHECKED
                        && method_override::method_key_prefix(&key.text) == KeyPrefix::No =>
                {
                    // Not `_method`: the rest of the key passes (no escape is open).
                    self.state = State::Str { escaped: false };
                    Ok(Held::Release)
                }
                Step::Byte | Step::More if self.held.len() > MAX_HELD_KEY => Err(unreadable(
                    format!("a key longer than {MAX_HELD_KEY} bytes that may be _method"),
                )),
                Step::Byte | Step::More => Ok(Held::Keep),
            },
            State::Colon => match b {
                b':' => {
                    self.state = State::Value;
                    bounded(after_key)
                }
                b' ' | b'\t' | b'\n' | b'\r' => bounded(after_key),
                _ => {
                    // Not a member (nor valid JSON).
                    self.state = State::Structure;
                    Ok(Held::Again)
                }
            },
            State::Value => match b {
                b'"' => {
                    self.state = State::ValueStr(Decoder::default());
                    bounded(after_key)
                }
                b' ' | b'\t' | b'\n' | b'\r' => bounded(after_key),
                other => Err(unreadable(format!(
                    "its value is {}, not a string",
                    value_kind(other)
                ))),
            },
            State::ValueStr(value) => match value.push(b) {
                Step::End => {
                    method_override::push(&mut self.found, Source::Json, value.text.trim_ascii())?;
                    self.state = State::Structure;
                    self.after_colon = false;
                    Ok(Held::Release)
                }
                Step::Byte | Step::More => bounded(after_key),
            },
            State::Structure | State::Str { .. } => Ok(Held::Release),
        }
    }
}

/// Keeps a member held, if what follows its key is within [`MAX_HELD_VALUE`].
fn bounded(after_key: usize) -> Result<Held, InvalidOverride> {
    if after_key > MAX_HELD_VALUE {
        return Err(unreadable(format!(
            "more than {MAX_HELD_VALUE} bytes after its key"
        )));
    }
    Ok(Held::Keep)
}

fn unreadable(why: String) -> InvalidOverride {
    InvalidOverride::JsonUnreadable(why)
}

/// What a JSON value that begins with `b` is, for a refusal.
fn value_kind(b: u8) -> &'static str {
    match b {
        b'{' => "an object",
        b'[' => "an array",
        b't' | b'f' => "a boolean",
        b'n' => "null",
        b'-' | b'0'..=b'9' => "a number",
        _ => "not JSON",
    }
}

/// A JSON string's text, decoded as its bytes arrive (after the opening quote).
#[derive(Debug, Default)]
struct Decoder {
    text: Vec<u8>,
    escape: Escape,
}

#[derive(Clone, Copy, Debug, Default)]
enum Escape {
    #[default]
    None,
    /// After a backslash.
    Backslash,
    /// In a `\uXXXX` escape: how many hex digits so far, their value.
    Unicode { digits: u8, code: u32 },
}

/// What one byte did to a [`Decoder`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Part of an escape: nothing decoded yet.
    More,
    /// A byte (or a character's bytes) decoded.
    Byte,
    /// The closing quote.
    End,
}

impl Decoder {
    fn push(&mut self, b: u8) -> Step {
        match self.escape {
            Escape::None => match b {
                b'"' => Step::End,
                b'\\' => {
                    self.escape = Escape::Backslash;
                    Step::More
                }
                _ => {
                    self.text.push(b);
                    Step::Byte
                }
            },
            Escape::Backslash => {
                self.escape = Escape::None;
                let c = match b {
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'u' => {
                        self.escape = Escape::Unicode { digits: 0, code: 0 };
                        return Step::More;
                    }
                    // `"`, `\`, `/`, and what parsers refuse, as written.
                    other => other,
                };
                self.text.push(c);
                Step::Byte
            }
            Escape::Unicode { digits, code } => {
                let Some(d) = char::from(b).to_digit(16) else {
                    // A malformed escape (parsers refuse it): it ends, the byte is read as is,
                    // as a scan that only skips the byte after a backslash reads it.
                    self.escape = Escape::None;
                    return self.push(b);
                };
                let code = code * 16 + d;
                if digits < 3 {
                    self.escape = Escape::Unicode {
                        digits: digits + 1,
                        code,
                    };
                    return Step::More;
                }
                self.escape = Escape::None;
                // A surrogate (half of a pair) is never part of `_method` nor of a method:
                // it decodes to U+FFFD.
                let c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
                let mut buf = [0; 4];
                self.text
                    .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                Step::Byte
            }
        }
    }
}

#[cfg(test)]
#[path = "json_scan_tests.rs"]
mod tests;
