//! The placeholder grammar (spec §3.2): finding placeholders in text, and detecting anything
//! that looks like one.
//!
//! Owns two questions, kept apart on purpose. `find` answers "which placeholders are here,
//! exactly, and which env key does each name?" with the reference's strict, case-sensitive
//! grammar: the canonical `openshell:resolve:env:KEY` (also in its revisioned
//! `v<digits>_KEY` and stable `s<64 hex>_KEY` spellings) and the provider-shaped alias
//! `<prefix>OPENSHELL-RESOLVE-ENV-KEY`. `contains_marker` answers the broader "could any
//! reader take this for a placeholder?", case-insensitively and through percent-encoding and
//! JSON `\u00XX` escapes; refusals use it, so that what the strict grammar does not swap
//! never slips upstream. Neither knows about secrets, bindings or HTTP.

use std::fmt;
use std::ops::Range;

/// The canonical prefix; the key follows it.
pub(super) const CANONICAL_PREFIX: &str = "openshell:resolve:env:";
/// The alias marker: `<prefix>OPENSHELL-RESOLVE-ENV-<KEY>`.
const ALIAS_MARKER: &str = "OPENSHELL-RESOLVE-ENV-";
/// Longest env key a placeholder may name (longer is malformed, and so refused).
pub(super) const MAX_KEY_LEN: usize = 256;
/// Length of either marker (`openshell` SEP `resolve` SEP `env` SEP).
const MARKER_LEN: usize = 22;
/// Longest spelling of one marker character that `contains_marker` decodes (`\u003a`).
const MAX_ESCAPE_LEN: usize = 6;
/// Longest wire form of a marker that `contains_marker` recognises.
pub(super) const MAX_ENCODED_MARKER_LEN: usize = MARKER_LEN * MAX_ESCAPE_LEN;

/// Which spelling a placeholder used. All resolve through the same env key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `openshell:resolve:env:KEY`
    Canonical,
    /// `openshell:resolve:env:v<digits>_KEY`
    Revisioned,
    /// `openshell:resolve:env:s<64 lowercase hex>_KEY`
    Stable,
    /// `<prefix>OPENSHELL-RESOLVE-ENV-KEY` (possibly with a revision or stable handle).
    Alias,
}

/// One placeholder found in a text: where it is, and the env key it names.
#[derive(Clone, PartialEq, Eq)]
pub struct Placeholder<'a> {
    /// Byte range of the whole token (alias prefix included).
    pub span: Range<usize>,
    /// The env key, without revision or stable handle.
    pub key: &'a str,
    pub form: Form,
}

// Placeholders are not secret, but keep them out of logs anyway (spec §3.3: logs see a
// redacted target): Debug shows the key and form only.
impl fmt::Debug for Placeholder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Placeholder")
            .field("span", &self.span)
            .field("key", &self.key)
            .field("form", &self.form)
            .finish()
    }
}

/// `[A-Za-z0-9_]`: the characters of an env key.
fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `[A-Za-z0-9_.~-]`: the characters of an alias token (prefix, marker and key).
fn is_alias_char(b: u8) -> bool {
    is_key_char(b) || matches!(b, b'-' | b'.' | b'~')
}

/// Whether `key` is a valid env key name: `[A-Za-z0-9_]+`, at most `MAX_KEY_LEN` long.
pub(super) fn is_valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN && key.bytes().all(is_key_char)
}

/// Whether `key` is in a namespace that placeholders reserve for revisions (`v<digits>_…`)
/// or stable handles (`s<64 hex>_…`), so that no profile can name an env var that way.
pub fn is_reserved_key(key: &str) -> bool {
    strip_revision(key).is_some() || strip_stable(key).is_some()
}

/// The canonical placeholder for an env key, as the sandboxed side receives it.
pub fn canonical_for(key: &str) -> String {
    format!("{CANONICAL_PREFIX}{key}")
}

/// `v<digits>_KEY` → `KEY`.
fn strip_revision(token: &str) -> Option<&str> {
    let rest = token.strip_prefix('v')?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let key = rest[digits..].strip_prefix('_')?;
    (digits > 0 && !key.is_empty()).then_some(key)
}

/// `s<64 lowercase hex>_KEY` → `KEY`.
fn strip_stable(token: &str) -> Option<&str> {
    let rest = token.strip_prefix('s')?;
    let hex = rest.get(..64)?;
    if !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let key = rest[64..].strip_prefix('_')?;
    (!key.is_empty()).then_some(key)
}

/// Splits a key token into the env key and the form it was written in.
fn classify(token: &str, alias: bool) -> (&str, Form) {
    let (key, form) = if let Some(key) = strip_revision(token) {
        (key, Form::Revisioned)
    } else if let Some(key) = strip_stable(token) {
        (key, Form::Stable)
    } else {
        (token, Form::Canonical)
    };
    if alias {
        (key, Form::Alias)
    } else {
        (key, form)
    }
}

/// Every placeholder of the strict grammar in `text`, in order, not overlapping.
///
/// A canonical placeholder may start anywhere (`/bot<ph>/…`) and its key is the longest run
/// of key characters after the prefix. An alias is a whole token of alias characters (bounded
/// by non-alias characters or the ends of the text) made of a non-empty prefix, the marker and
/// a key. Anything marker-like that is not a placeholder is skipped here; callers refuse it
/// with `contains_marker` on what is left.
pub fn find(text: &str) -> Vec<Placeholder<'_>> {
    find_in_bytes(text.as_bytes())
}

/// `find` over bytes that need not be UTF-8 (a percent-decoded path segment, say): the
/// grammar is ASCII, so keys are always text.
pub(crate) fn find_in_bytes(bytes: &[u8]) -> Vec<Placeholder<'_>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(p) = canonical_at(bytes, i) {
            i = p.span.end;
            out.push(p);
            continue;
        }
        let token_start = i == 0 || !is_alias_char(bytes[i - 1]);
        if token_start
            && is_alias_char(bytes[i])
            && let Some(p) = alias_at(bytes, i)
        {
            i = p.span.end;
            out.push(p);
            continue;
        }
        i += 1;
    }
    out
}

/// The placeholder that is the whole of `text`, if it is exactly one.
pub fn parse_exact(text: &str) -> Option<Placeholder<'_>> {
    let found = find(text);
    match found.as_slice() {
        [p] if p.span == (0..text.len()) => found.into_iter().next(),
        _ => None,
    }
}

fn canonical_at(bytes: &[u8], start: usize) -> Option<Placeholder<'_>> {
    if !bytes[start..].starts_with(CANONICAL_PREFIX.as_bytes()) {
        return None;
    }
    let key_start = start + CANONICAL_PREFIX.len();
    let len = bytes[key_start..]
        .iter()
        .take_while(|&&b| is_key_char(b))
        .count();
    // Key characters are ASCII, so this is always text.
    let token = std::str::from_utf8(&bytes[key_start..key_start + len]).ok()?;
    let (key, form) = classify(token, false);
    is_valid_key(key).then_some(Placeholder {
        span: start..key_start + len,
        key,
        form,
    })
}

fn alias_at(bytes: &[u8], start: usize) -> Option<Placeholder<'_>> {
    let len = bytes[start..]
        .iter()
        .take_while(|&&b| is_alias_char(b))
        .count();
    // Alias characters are ASCII, so this is always text.
    let token = std::str::from_utf8(&bytes[start..start + len]).ok()?;
    let marker = token.find(ALIAS_MARKER)?;
    if marker == 0 {
        return None;
    }
    let key_token = &token[marker + ALIAS_MARKER.len()..];
    if key_token.is_empty() || !key_token.bytes().all(is_key_char) {
        return None;
    }
    let (key, form) = classify(key_token, true);
    is_valid_key(key).then_some(Placeholder {
        span: start..start + len,
        key,
        form,
    })
}

// === contains_marker ===

/// The marker words; between and after them a separator (`:` or `-`).
const MARKER_WORDS: [&[u8]; 3] = [b"openshell", b"resolve", b"env"];

/// Whether `bytes` contain anything a reader could take for a placeholder marker: the
/// canonical prefix or the alias marker, in any letter case, with `:` or `-` as separators,
/// and with any of its characters percent-encoded (`%3A`) or JSON-escaped (`\u003a`).
///
/// This is deliberately broader than `find`: it decides refusals (a marker that `find` did
/// not swap must not reach upstream), so it errs on the side of seeing a marker.
pub(crate) fn contains_marker(bytes: &[u8]) -> bool {
    find_marker(bytes).is_some()
}

/// Start of the first marker in `bytes`, if any (see `contains_marker`).
fn find_marker(bytes: &[u8]) -> Option<usize> {
    (0..bytes.len())
        .find(|&i| matches!(bytes[i], b'o' | b'O' | b'%' | b'\\') && marker_at(bytes, i).is_some())
}

/// If a marker starts at `start`, where it ends.
fn marker_at(bytes: &[u8], start: usize) -> Option<usize> {
    let mut pos = start;
    for word in MARKER_WORDS {
        for &want in word {
            let (c, next) = char_at(bytes, pos)?;
            if c.to_ascii_lowercase() != want {
                return None;
            }
            pos = next;
        }
        let (c, next) = char_at(bytes, pos)?;
        if c != b':' && c != b'-' {
            return None;
        }
        pos = next;
    }
    Some(pos)
}

/// One character at `pos`, decoding `%HH` and `\u00HH`; returns it and where the next starts.
fn char_at(bytes: &[u8], pos: usize) -> Option<(u8, usize)> {
    let b = *bytes.get(pos)?;
    match b {
        b'%' => {
            if let (Some(h), Some(l)) = (hex_at(bytes, pos + 1), hex_at(bytes, pos + 2)) {
                return Some((h << 4 | l, pos + 3));
            }
            Some((b, pos + 1))
        }
        b'\\' => {
            let escaped = matches!(bytes.get(pos + 1), Some(b'u' | b'U'))
                && hex_at(bytes, pos + 2) == Some(0)
                && hex_at(bytes, pos + 3) == Some(0);
            if escaped && let (Some(h), Some(l)) = (hex_at(bytes, pos + 4), hex_at(bytes, pos + 5))
            {
                return Some((h << 4 | l, pos + 6));
            }
            Some((b, pos + 1))
        }
        _ => Some((b, pos + 1)),
    }
}

fn hex_at(bytes: &[u8], pos: usize) -> Option<u8> {
    let b = *bytes.get(pos)?;
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Vec<(&str, Form, Range<usize>)> {
        find(text)
            .into_iter()
            .map(|p| (p.key, p.form, p.span))
            .collect()
    }

    const HEX64: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn canonical_forms() {
        assert_eq!(
            keys("openshell:resolve:env:API_KEY"),
            [("API_KEY", Form::Canonical, 0..29)]
        );
        assert_eq!(
            keys("openshell:resolve:env:v12_API_KEY"),
            [("API_KEY", Form::Revisioned, 0..33)]
        );
        let stable = format!("openshell:resolve:env:s{HEX64}_TOKEN");
        assert_eq!(keys(&stable), [("TOKEN", Form::Stable, 0..stable.len())]);
        // Upper-case hex is not a stable handle: the whole token is the key.
        let upper = format!("openshell:resolve:env:s{}_TOKEN", HEX64.to_uppercase());
        assert_eq!(find(&upper)[0].form, Form::Canonical);
        // `v_KEY` and `v1_` are not revisions.
        assert_eq!(keys("openshell:resolve:env:v_KEY")[0].0, "v_KEY");
        assert_eq!(keys("openshell:resolve:env:v1_")[0].0, "v1_");
    }

    #[test]
    fn canonical_inside_text_and_key_boundaries() {
        // Telegram: the placeholder inside a path segment.
        assert_eq!(
            keys("bot openshell:resolve:env:TG/sendMessage"),
            [("TG", Form::Canonical, 4..28)]
        );
        assert_eq!(
            keys("botopenshell:resolve:env:TG"),
            [("TG", Form::Canonical, 3..27)]
        );
        // The key is the longest run of key characters.
        assert_eq!(keys("openshell:resolve:env:A-B")[0].0, "A");
        assert_eq!(keys("openshell:resolve:env:A.B")[0].0, "A");
        // Two placeholders.
        let two = keys("openshell:resolve:env:A:openshell:resolve:env:B");
        assert_eq!(two.len(), 2);
        assert_eq!((two[0].0, two[1].0), ("A", "B"));
    }

    #[test]
    fn malformed_canonical_is_not_a_placeholder() {
        assert!(find("openshell:resolve:env:").is_empty());
        assert!(find("openshell:resolve:env:-x").is_empty());
        assert!(find("OPENSHELL:RESOLVE:ENV:KEY").is_empty());
        assert!(find("openshell:resolve:KEY").is_empty());
        let long = format!("openshell:resolve:env:{}", "K".repeat(MAX_KEY_LEN + 1));
        assert!(find(&long).is_empty());
        let max = format!("openshell:resolve:env:{}", "K".repeat(MAX_KEY_LEN));
        assert_eq!(find(&max).len(), 1);
    }

    #[test]
    fn alias_forms() {
        assert_eq!(
            keys("xoxb-OPENSHELL-RESOLVE-ENV-SLACK_BOT_TOKEN"),
            [("SLACK_BOT_TOKEN", Form::Alias, 0..42)]
        );
        assert_eq!(
            keys("Bearer token.v1-OPENSHELL-RESOLVE-ENV-KEY"),
            [("KEY", Form::Alias, 7..41)]
        );
        assert_eq!(keys("a~b_OPENSHELL-RESOLVE-ENV-K")[0].0, "K");
        assert_eq!(keys("x-OPENSHELL-RESOLVE-ENV-v3_KEY")[0].0, "KEY");
        // Bounded by non-alias characters on both sides.
        assert_eq!(keys("\"sk-OPENSHELL-RESOLVE-ENV-KEY\"")[0].2, 1..29);
    }

    #[test]
    fn malformed_alias_is_not_a_placeholder() {
        // Empty prefix.
        assert!(find("OPENSHELL-RESOLVE-ENV-KEY").is_empty());
        assert!(find(" OPENSHELL-RESOLVE-ENV-KEY").is_empty());
        // The key runs into more alias characters.
        assert!(find("sk-OPENSHELL-RESOLVE-ENV-KEY-suffix").is_empty());
        assert!(find("sk-OPENSHELL-RESOLVE-ENV-KEY.x").is_empty());
        // Empty key.
        assert!(find("sk-OPENSHELL-RESOLVE-ENV-").is_empty());
        // Lower-case marker.
        assert!(find("sk-openshell-resolve-env-KEY").is_empty());
        // A prefix with a character outside the alias set splits the token.
        assert!(find("sk+OPENSHELL-RESOLVE-ENV-KEY").is_empty());
    }

    #[test]
    fn canonical_inside_an_alias_like_token() {
        let found = keys("xoxb-openshell:resolve:env:KEY");
        assert_eq!(found, [("KEY", Form::Canonical, 5..30)]);
    }

    #[test]
    fn exact_parse() {
        assert_eq!(
            parse_exact("openshell:resolve:env:KEY").map(|p| p.key),
            Some("KEY")
        );
        assert_eq!(
            parse_exact("sk-OPENSHELL-RESOLVE-ENV-KEY").map(|p| p.key),
            Some("KEY")
        );
        assert!(parse_exact(" openshell:resolve:env:KEY").is_none());
        assert!(parse_exact("openshell:resolve:env:KEY!").is_none());
        assert!(parse_exact("openshell:resolve:env:A:openshell:resolve:env:B").is_none());
        assert!(parse_exact("").is_none());
    }

    #[test]
    fn reserved_keys() {
        assert!(is_reserved_key("v1_TOKEN"));
        assert!(is_reserved_key("v10_GITHUB_TOKEN"));
        assert!(is_reserved_key(&format!("s{HEX64}_X")));
        assert!(!is_reserved_key("v_TOKEN"));
        assert!(!is_reserved_key("vault_TOKEN"));
        assert!(!is_reserved_key("V1_TOKEN"));
        assert!(!is_reserved_key("s1_X"));
        assert!(!is_reserved_key("GITHUB_TOKEN"));
        assert!(is_valid_key("A_1"));
        assert!(!is_valid_key("A-1"));
        assert!(!is_valid_key(""));
    }

    #[test]
    fn markers_raw_and_case_variants() {
        for text in [
            "openshell:resolve:env:",
            "OPENSHELL-RESOLVE-ENV-",
            "OpenShell:Resolve:Env:KEY",
            "openshell-resolve-env-key",
            "xx openshell:resolve-env:yy",
            "OPENSHELL-RESOLVE-ENV-KEY",
        ] {
            assert!(contains_marker(text.as_bytes()), "{text}");
        }
        for text in [
            "",
            "openshell",
            "openshell:resolve:env",
            "openshell resolve env ",
            "open shell:resolve:env:",
            "openshell_resolve_env_KEY",
        ] {
            assert!(!contains_marker(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn markers_encoded() {
        for text in [
            "openshell%3Aresolve%3Aenv%3AKEY",
            "openshell%3aresolve%3aenv%3a",
            "%6F%70%65%6E%73%68%65%6C%6C%3A%72%65%73%6F%6C%76%65%3A%65%6E%76%3A",
            "OPENSHELL%2DRESOLVE%2DENV%2DKEY",
            "openshell\\u003aresolve\\u003Aenv\\u003aKEY",
            "\\u006fpenshell:resolve:env:",
            "%4Fpenshell-resolve-env-",
        ] {
            assert!(contains_marker(text.as_bytes()), "{text}");
        }
        // Double encoding is decoded once only, and broken escapes are literal text.
        assert!(!contains_marker(b"openshell%253Aresolve%253Aenv%253A"));
        assert!(!contains_marker(b"openshell%3resolve:env:"));
        assert!(!contains_marker(b"openshell\\u3aresolve:env:"));
        assert_eq!(find_marker(b"abc openshell:resolve:env:"), Some(4));
    }

    #[test]
    fn longest_encoded_marker_fits_the_bound() {
        let all_escaped: String = "openshell:resolve:env:"
            .bytes()
            .map(|b| format!("\\u{:04x}", b))
            .collect();
        assert_eq!(all_escaped.len(), MAX_ENCODED_MARKER_LEN);
        assert!(contains_marker(all_escaped.as_bytes()));
        assert_eq!(CANONICAL_PREFIX.len(), MARKER_LEN);
        assert_eq!(ALIAS_MARKER.len(), MARKER_LEN);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        const FRAGMENTS: &[&str] = &[
            "openshell:resolve:env:",
            "OPENSHELL-RESOLVE-ENV-",
            "sk-",
            "v1_",
            "KEY",
            "A",
            "_",
            "-",
            ".",
            "~",
            ":",
            "/",
            " ",
            "%3A",
            "é",
        ];

        fn text() -> impl Strategy<Value = String> {
            proptest::collection::vec(proptest::sample::select(FRAGMENTS), 0..30)
                .prop_map(|parts| parts.concat())
        }

        proptest! {
            /// Placeholders come out in order, inside the text, each a marker-bearing token
            /// that parses back alone to the same key.
            #[test]
            fn found_placeholders_are_well_formed(text in text()) {
                let mut last = 0;
                for p in find(&text) {
                    prop_assert!(p.span.start >= last && p.span.end <= text.len());
                    last = p.span.end;
                    let token = &text[p.span.clone()];
                    prop_assert!(contains_marker(token.as_bytes()));
                    prop_assert!(is_valid_key(p.key));
                    let alone = parse_exact(token);
                    prop_assert_eq!(alone.map(|q| q.key), Some(p.key));
                }
            }

            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
                let _ = find_in_bytes(&bytes);
                let _ = contains_marker(&bytes);
            }
        }
    }

    #[test]
    fn non_ascii_input_is_harmless() {
        let text = "é openshell:resolve:env:KEY ü";
        assert_eq!(keys(text)[0].0, "KEY");
        assert_eq!(
            find_in_bytes(b"\xffopenshell:resolve:env:K\xfe")[0].key,
            "K"
        );
        assert!(find("ééé").is_empty());
        assert!(!contains_marker(&[0xff, 0xfe, b'%']));
        assert!(!contains_marker(&[0xff, b'%', b'\\']));
    }
}
