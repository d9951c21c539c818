//! Method-override conventions: the headers (`X-HTTP-Method-Override`, `X-HTTP-Method`,
//! `X-Method-Override`) and the `_method` query parameter through which many web frameworks
//! let a `POST` act as the method it names.
//!
//! Owns reading the methods a request names that way, for HTTP/1 and HTTP/2 alike. An upstream
//! that honours an override would otherwise run a `DELETE` that policy judged as a `POST`;
//! `pipeline/judge.rs` judges every named method as well as the request line's and refuses
//! when any is denied. A value that is not an HTTP method is refused rather than guessed at.
//! The `_method` fields of form bodies are read by `form_scan` (which forms, and their part
//! names, by `form_override`), the top-level `_method` members of JSON bodies by `json_scan`,
//! through the same rules.

use std::fmt;

use super::head::is_tchar;

/// The override headers, lower case.
const HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// The query parameter some frameworks read as an override.
const QUERY_PARAM: &str = "_method";

/// Distinct methods one request may name through overrides; more is refused (each is judged).
const MAX_OVERRIDES: usize = 8;

/// Longest method name accepted in an override (the longest registered method is 17 bytes).
const MAX_METHOD_LEN: usize = 32;

/// Where an override was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// One of [`HEADERS`], lower case.
    Header(&'static str),
    /// The [`QUERY_PARAM`] query parameter.
    Query,
    /// A `_method` field of an urlencoded form body.
    Form,
    /// A `_method` part of a multipart form body.
    Multipart,
    /// A top-level `_method` member of a JSON body.
    Json,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(name) => f.write_str(name),
            Self::Query => write!(f, "query parameter {QUERY_PARAM}"),
            Self::Form => write!(f, "form field {QUERY_PARAM}"),
            Self::Multipart => write!(f, "multipart field {QUERY_PARAM}"),
            Self::Json => write!(f, "JSON member {QUERY_PARAM}"),
        }
    }
}

/// One method a request names through an override, upper case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    pub method: String,
    pub source: Source,
}

/// An override whose value is not an HTTP method, or too many of them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidOverride {
    /// The value (shown escaped and shortened) is not a method token.
    #[error("{found_in} names {value}, which is not an HTTP method")]
    NotAMethod { found_in: Source, value: String },
    /// More distinct methods than sluice judges for one request.
    #[error("the request names more than {MAX_OVERRIDES} methods through overrides")]
    TooMany,
    /// A form body whose `_method` fields cannot be read (what made it unreadable).
    #[error("the form body's {QUERY_PARAM} fields cannot be read: {0}")]
    Unreadable(String),
    /// A JSON body whose top-level `_method` member cannot be read (why: its value is not
    /// a string, or it is too long).
    #[error("the JSON body's {QUERY_PARAM} member cannot be read: {0}")]
    JsonUnreadable(String),
}

/// The methods named by the override headers among `headers` (name, value), in order, each
/// once. A comma-separated value names each of its items; empty items are ignored.
pub(crate) fn from_headers<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<Vec<Override>, InvalidOverride> {
    let mut found = Vec::new();
    for (name, value) in headers {
        let Some(header) = HEADERS.iter().find(|h| h.eq_ignore_ascii_case(name)) else {
            continue;
        };
        let source = Source::Header(header);
        for item in value.split(|&b| b == b',') {
            push(&mut found, source, item.trim_ascii())?;
        }
    }
    Ok(found)
}

/// The methods named by `_method` parameters in the query of `path_and_query` (keys read by
/// [`is_method_key`] after percent-decoding; `&` and `;` both separate parameters, as some
/// parsers accept).
pub(crate) fn from_query(path_and_query: &str) -> Result<Vec<Override>, InvalidOverride> {
    let mut found = Vec::new();
    let Some((_, query)) = path_and_query.split_once('?') else {
        return Ok(found);
    };
    for pair in query.split(['&', ';']) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !is_method_key(&percent_decode(key.as_bytes())) {
            continue;
        }
        push(
            &mut found,
            Source::Query,
            percent_decode(value.as_bytes()).trim_ascii(),
        )?;
    }
    Ok(found)
}

/// Whether a parameter or field name (percent-decoded) is one some framework reads as
/// `_method`: compared without regard to case, after PHP's mangling of names (cut at a NUL,
/// leading spaces dropped, ` `, `.` and `[` read as `_`), with an array suffix
/// (`_method[]`), as Rack 2 reads names (leading `[` and `]`, trailing `]` dropped), and
/// after a UTF-8 byte order mark (body-parser drops one).
pub(super) fn is_method_key(key: &[u8]) -> bool {
    let key = name_start(cut_at_nul(key));
    php_reads_method(key) || rack2_reads_method(key)
}

/// PHP's reading of a name (its leading spaces dropped).
fn php_reads_method(key: &[u8]) -> bool {
    let key = match key.iter().skip(1).position(|&b| b == b'[') {
        Some(i) => &key[..=i],
        None => key,
    };
    key.len() == QUERY_PARAM.len()
        && key
            .iter()
            .zip(QUERY_PARAM.bytes())
            .all(|(&k, m)| key_byte_matches(k, m))
}

/// Rack 2's reading of a name: `[\[\]]*_method\]*`.
fn rack2_reads_method(key: &[u8]) -> bool {
    let start = key.iter().position(|&b| b != b'[' && b != b']');
    let key = &key[start.unwrap_or(key.len())..];
    let end = key.iter().rposition(|&b| b != b']').map_or(0, |i| i + 1);
    key[..end].eq_ignore_ascii_case(QUERY_PARAM.as_bytes())
}

/// UTF-8's byte order mark.
const BOM: &[u8] = "\u{feff}".as_bytes();

/// A name without the white space and byte order marks it begins with.
fn name_start(mut key: &[u8]) -> &[u8] {
    loop {
        key = key.trim_ascii_start();
        match key.strip_prefix(BOM) {
            Some(rest) => key = rest,
            None => return key,
        }
    }
}

/// What the first bytes of a name (percent-decoded) say about the whole name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyPrefix {
    /// No name that begins so is read as `_method` ([`is_method_key`] refuses them all).
    No,
    /// Every name that begins so is read as `_method`.
    Yes,
    /// It depends on what follows.
    Maybe,
}

/// What [`is_method_key`] says of every name that begins with `prefix`, where the first
/// bytes already decide it: the same rules, read a byte at a time.
pub(super) fn method_key_prefix(prefix: &[u8]) -> KeyPrefix {
    if prefix.contains(&0) {
        // PHP ends the name at the NUL: what follows does not matter.
        return if is_method_key(prefix) {
            KeyPrefix::Yes
        } else {
            KeyPrefix::No
        };
    }
    let key = name_start(prefix);
    if !key.is_empty() && BOM.starts_with(key) {
        // A byte order mark cut short.
        return KeyPrefix::Maybe;
    }
    match (php_prefix(key), rack2_prefix(key)) {
        (KeyPrefix::Yes, _) => KeyPrefix::Yes,
        (KeyPrefix::No, KeyPrefix::No) => KeyPrefix::No,
        _ => KeyPrefix::Maybe,
    }
}

/// [`php_reads_method`] of every name that begins with `key`.
fn php_prefix(key: &[u8]) -> KeyPrefix {
    for (i, &k) in key.iter().enumerate() {
        let Some(&m) = QUERY_PARAM.as_bytes().get(i) else {
            // An array suffix, or a longer name.
            return if k == b'[' {
                KeyPrefix::Yes
            } else {
                KeyPrefix::No
            };
        };
        // A `[` after the first byte cuts the name short of `_method`.
        if (i > 0 && k == b'[') || !key_byte_matches(k, m) {
            return KeyPrefix::No;
        }
    }
    KeyPrefix::Maybe
}

/// [`rack2_reads_method`] of every name that begins with `key` (never all of them: one
/// more byte other than `]` makes it another name).
fn rack2_prefix(key: &[u8]) -> KeyPrefix {
    let start = key.iter().position(|&b| b != b'[' && b != b']');
    let key = &key[start.unwrap_or(key.len())..];
    let method = QUERY_PARAM.as_bytes();
    let fits = key.iter().enumerate().all(|(i, &k)| match method.get(i) {
        Some(m) => k.eq_ignore_ascii_case(m),
        None => k == b']',
    });
    if fits {
        KeyPrefix::Maybe
    } else {
        KeyPrefix::No
    }
}

/// One byte of a name against `_method`'s: any case; `_` also as ` `, `.` or `[`.
fn key_byte_matches(k: u8, m: u8) -> bool {
    k.eq_ignore_ascii_case(&m) || (m == b'_' && matches!(k, b' ' | b'.' | b'['))
}

/// A name up to its first NUL (PHP reads names as C strings).
fn cut_at_nul(key: &[u8]) -> &[u8] {
    key.split(|&b| b == 0).next().unwrap_or_default()
}

/// Adds the method `item` names (once), or refuses a value that is not a method.
pub(super) fn push(
    found: &mut Vec<Override>,
    source: Source,
    item: &[u8],
) -> Result<(), InvalidOverride> {
    if item.is_empty() {
        return Ok(());
    }
    if item.len() > MAX_METHOD_LEN || !item.iter().all(|&b| is_tchar(b)) {
        return Err(InvalidOverride::NotAMethod {
            found_in: source,
            value: shown(item),
        });
    }
    let method: String = item
        .iter()
        .map(|&b| char::from(b.to_ascii_uppercase()))
        .collect();
    if found.iter().any(|o: &Override| o.method == method) {
        return Ok(());
    }
    if found.len() == MAX_OVERRIDES {
        return Err(InvalidOverride::TooMany);
    }
    found.push(Override { method, source });
    Ok(())
}

/// `%XX` decoded and `+` as a space (form encoding); a malformed escape stays as written.
pub(super) fn percent_decode(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        let hex = |j: usize| raw.get(j).and_then(|&h| char::from(h).to_digit(16));
        match (b, hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                // Two hex digits are at most 0xff.
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(u8::MAX));
                i += 3;
            }
            (b'+', ..) => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// A value for an error message: escaped, at most 40 bytes of it.
fn shown(value: &[u8]) -> String {
    let cut = &value[..value.len().min(40)];
    let mut s = format!("`{}`", cut.escape_ascii());
    if cut.len() < value.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(list: &[(&'static str, &'static str)]) -> Result<Vec<Override>, InvalidOverride> {
        from_headers(list.iter().map(|(n, v)| (*n, v.as_bytes())))
    }

    fn methods(found: &[Override]) -> Vec<&str> {
        found.iter().map(|o| o.method.as_str()).collect()
    }

    #[test]
    fn every_override_header_is_read_case_insensitively() {
        let found = headers(&[
            ("X-HTTP-Method-Override", "delete"),
            ("x-http-method", " PUT "),
            ("X-Method-Override", "patch, DELETE,,"),
            ("X-Other", "TRACE"),
        ])
        .unwrap();
        assert_eq!(methods(&found), ["DELETE", "PUT", "PATCH"]);
        assert_eq!(found[0].source, Source::Header("x-http-method-override"));
        assert_eq!(found[1].source.to_string(), "x-http-method");
        assert!(
            headers(&[("X-HTTP-Method-Override", "")])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_value_that_is_not_a_method_is_refused() {
        for bad in ["DEL ETE", "GET/", "\u{e9}", "A\"B", &"A".repeat(33)] {
            let err = from_headers([("x-http-method", bad.as_bytes())]).unwrap_err();
            assert!(
                matches!(err, InvalidOverride::NotAMethod { .. }),
                "{bad}: {err}"
            );
        }
        let err = from_headers([("x-http-method", &b"\xff\x00"[..])]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "x-http-method names `\\xff\\x00`, which is not an HTTP method"
        );
    }

    #[test]
    fn too_many_methods_are_refused() {
        let many = "A,B,C,D,E,F,G,H";
        assert_eq!(headers(&[("x-http-method", many)]).unwrap().len(), 8);
        let err = from_headers([("x-http-method", b"A,B,C,D,E,F,G,H,I".as_slice())]);
        assert_eq!(err, Err(InvalidOverride::TooMany));
        // Repeats do not count.
        let repeated = "GET,".repeat(1000);
        let found = from_headers([("x-http-method", repeated.as_bytes())]).unwrap();
        assert_eq!(methods(&found), ["GET"]);
    }

    #[test]
    fn the_query_parameter_is_read_percent_decoded() {
        assert!(from_query("/a/b").unwrap().is_empty());
        assert!(from_query("/a?x=1&method=DELETE").unwrap().is_empty());
        let found = from_query("/a?x=1&_method=delete").unwrap();
        assert_eq!(methods(&found), ["DELETE"]);
        assert_eq!(found[0].source, Source::Query);
        let found = from_query("/a?%5Fmethod=%50UT;_METHOD=patch&_method").unwrap();
        assert_eq!(methods(&found), ["PUT", "PATCH"]);
        let found = from_query("/a?_method=+DELETE+").unwrap();
        assert_eq!(methods(&found), ["DELETE"]);
        assert!(from_query("/a?_method=DEL%20ETE").is_err());
        // PHP's spellings of the name are read as it reads them.
        let found =
            from_query("/a?.method=put&+_method=patch&_method[]=purge&+method=trace").unwrap();
        assert_eq!(methods(&found), ["PUT", "PATCH", "PURGE"]);
        assert!(
            from_query("/a?x_method=PUT&_methods=PUT&_me.thod=PUT")
                .unwrap()
                .is_empty()
        );
        // A malformed escape stays as written (and `%` is a token character).
        assert_eq!(methods(&from_query("/a?_method=%zz").unwrap()), ["%ZZ"]);
    }
}
