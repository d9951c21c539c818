//! `_method` fields in form bodies: the override Rack (`Rack::MethodOverride`, so Rails) and
//! Symfony (so Laravel) honour in a `POST` form, urlencoded or multipart.
//!
//! Owns deciding which bodies are forms ([`FormKind::of`]) and which multipart parts may be
//! `_method` fields ([`part_is_method`]), with the same name rules as the query parameter
//! (`method_override`). `form_scan` reads the fields while the body streams. Reads are
//! conservative where parsers differ: any part whose name a common parser would take for
//! `_method` counts, and every one of them is judged.

use super::method_override;

/// Longest multipart boundary read (RFC 2046 allows 70; Rack refuses longer ones).
pub(super) const MAX_BOUNDARY: usize = 70;

/// How a request body is a form, from its `Content-Type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormKind {
    /// `application/x-www-form-urlencoded`, or a `POST` without a `Content-Type` (Rack
    /// parses that as a form).
    Urlencoded,
    /// `multipart/form-data` (or another `multipart/` type: Rack also parses `mixed` and
    /// `related`) with its boundary (without one no parser can split it).
    Multipart(Vec<u8>),
    /// A form no reading of which can be trusted (why): its boundary is read differently by
    /// different parsers.
    Unreadable(&'static str),
}

impl FormKind {
    /// The form kind of a request with `method` and `content_types` (every `Content-Type`
    /// value it sent), or `None` when no framework reads it as a form. An empty value counts
    /// as none (Rack reads a `POST` with an empty `Content-Type` as a form).
    pub fn of<'a>(method: &str, content_types: impl IntoIterator<Item = &'a [u8]>) -> Option<Self> {
        let mut any = false;
        for value in content_types {
            if value.trim_ascii().is_empty() {
                continue;
            }
            any = true;
            if let Some(kind) = Self::of_one(value) {
                return Some(kind);
            }
        }
        (!any && method.eq_ignore_ascii_case("POST")).then_some(FormKind::Urlencoded)
    }

    fn of_one(value: &[u8]) -> Option<Self> {
        // The media type ends at `;`, `,` or white space, as Rack and PHP cut it.
        let value = value.trim_ascii_start();
        let end = value
            .iter()
            .position(|&b| b == b';' || b == b',' || b.is_ascii_whitespace())
            .unwrap_or(value.len());
        let (essence, params) = value.split_at(end);
        if essence.eq_ignore_ascii_case(b"application/x-www-form-urlencoded") {
            return Some(FormKind::Urlencoded);
        }
        if !essence
            .get(..b"multipart/".len())
            .is_some_and(|m| m.eq_ignore_ascii_case(b"multipart/"))
        {
            return None;
        }
        // Every boundary a parser may read: the `boundary` parameter, what follows each
        // `boundary=` as Rack's pattern reads it (which may be inside another parameter), and
        // PHP's; each as read (white space kept, as PHP, Rack and busboy keep it, and empty,
        // as PHP and busboy accept it) and trimmed (as Python's parsers trim it).
        let mut read: Vec<Vec<u8>> = params_of(params)
            .into_iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(b"boundary"))
            .map(|(_, boundary)| boundary)
            .collect();
        read.extend(rack_boundaries(params));
        read.extend(php_boundary(value));
        let read: Vec<&[u8]> = read
            .iter()
            .flat_map(|b| [b.as_slice(), b.trim_ascii()])
            .collect();
        // An RFC 2231 boundary (`boundary*`, `boundary*0`...), which Go and Python decode and
        // others ignore: no reading of it can be trusted.
        if params_of(params).iter().any(|(name, _)| {
            name.get(..b"boundary*".len())
                .is_some_and(|k| k.eq_ignore_ascii_case(b"boundary*"))
        }) {
            return Some(FormKind::Unreadable(
                "a multipart Content-Type with an RFC 2231 boundary parameter",
            ));
        }
        let shortest = read.iter().min_by_key(|b| b.len())?;
        // A delimiter of the shortest begins every delimiter of the others: splitting at its
        // delimiters splits wherever any of them would.
        if read.iter().all(|b| b.starts_with(shortest)) {
            Some(FormKind::Multipart(shortest.to_vec()))
        } else {
            Some(FormKind::Unreadable(
                "a multipart Content-Type whose boundary parsers read differently",
            ))
        }
    }
}

/// The boundaries Rack's pattern (`boundary="?([^";,]+)"?`, anywhere in the parameters) may
/// read: one after each `boundary=`.
fn rack_boundaries(params: &[u8]) -> Vec<Vec<u8>> {
    const KEY: &[u8] = b"boundary=";
    (0..params.len())
        .filter(|&i| {
            params
                .get(i..i + KEY.len())
                .is_some_and(|k| k.eq_ignore_ascii_case(KEY))
        })
        .map(|i| {
            let rest = &params[i + KEY.len()..];
            let rest = rest.strip_prefix(b"\"").unwrap_or(rest);
            let end = rest
                .iter()
                .position(|&b| matches!(b, b'"' | b';' | b','))
                .unwrap_or(rest.len());
            rest[..end].to_vec()
        })
        .collect()
}

/// The boundary PHP reads: after the first `boundary` in the value (any case only when no
/// lower-case one is there), from the first `=` after it, to the next `"` when quoted, else
/// to `,` or `;`. `None` where PHP finds none (or an unterminated quote).
fn php_boundary(value: &[u8]) -> Option<Vec<u8>> {
    const KEY: &[u8] = b"boundary";
    let at = value
        .windows(KEY.len())
        .position(|w| w == KEY)
        .or_else(|| find_ci(value, KEY))?;
    let after = &value[at + KEY.len()..];
    let rest = &after[after.iter().position(|&b| b == b'=')? + 1..];
    let read = match rest.strip_prefix(b"\"") {
        Some(quoted) => &quoted[..quoted.iter().position(|&b| b == b'"')?],
        None => {
            &rest[..rest
                .iter()
                .position(|&b| b == b',' || b == b';')
                .unwrap_or(rest.len())]
        }
    };
    Some(read.to_vec())
}

/// Whether a multipart part whose header lines are `headers` may be read as a `_method`
/// field: by the `name` (or RFC 2231 `name*`) parameter of any `Content-Disposition` header,
/// as written or percent-decoded, its value read to the end of its line or to the next
/// `:`; by a ` name=` anywhere after `Content-Disposition:`, and by a `Content-ID` (which
/// Rack reads as the name of a part without one), wherever on a line they begin, as Rack's
/// patterns find them; the lines as written and as PHP joins them.
pub(super) fn part_is_method(headers: &[u8]) -> bool {
    lines_name_method(headers) || lines_name_method(&php_unfolded(headers))
}

/// The header lines as PHP reads them: a line that begins with white space or has no `:`
/// is joined to the one before it, with nothing between (its line break dropped).
fn php_unfolded(headers: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(headers.len());
    for (i, line) in headers.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let joined = line
            .first()
            .is_some_and(|&b| b.is_ascii_whitespace() || b == 0x0b)
            || !line.contains(&b':');
        if i > 0 && !joined {
            out.push(b'\n');
        }
        out.extend_from_slice(line);
    }
    out
}

/// [`part_is_method`] of header lines read as they are.
fn lines_name_method(headers: &[u8]) -> bool {
    let mut at = 0;
    for line in headers.split(|&b| b == b'\n') {
        let line_at = at;
        at += line.len() + 1;
        if let Some(i) = find_ci(line, b"content-id:")
            && name_is_method(line[i + b"content-id:".len()..].trim_ascii())
        {
            return true;
        }
        if let Some(i) = find_ci(line, b"content-disposition:")
            && loose_names(&line[i..]).iter().any(|v| name_is_method(v))
        {
            return true;
        }
        let Some((header, value)) = split_once(line, b':') else {
            continue;
        };
        if !header
            .trim_ascii()
            .eq_ignore_ascii_case(b"content-disposition")
        {
            continue;
        }
        // The value to the next `:` anywhere, across line breaks.
        let from = line_at + header_len(line) + 1;
        let rest = headers.get(from..).unwrap_or_default();
        let spanned = &rest[..rest.iter().position(|&b| b == b':').unwrap_or(rest.len())];
        if [value, spanned].into_iter().any(params_names_method) {
            return true;
        }
    }
    false
}

/// Where `needle` (lower case) first is in `hay`, in any case.
fn find_ci(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

/// Where a header line's `:` is.
fn header_len(line: &[u8]) -> usize {
    line.iter().position(|&b| b == b':').unwrap_or(line.len())
}

/// The values after each `name=` in `value` not preceded by a token byte, read quoted (its
/// escapes undone), up to white space, `;` or `"`, and up to `;` or `"`.
fn loose_names(value: &[u8]) -> Vec<Vec<u8>> {
    const KEY: &[u8] = b"name=";
    let is_token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let mut out = Vec::new();
    for i in 0..value.len() {
        let at_key = value
            .get(i..i + KEY.len())
            .is_some_and(|k| k.eq_ignore_ascii_case(KEY));
        if !at_key || (i > 0 && is_token(value[i - 1])) {
            continue;
        }
        let rest = &value[i + KEY.len()..];
        if let Some(quoted) = rest.strip_prefix(b"\"") {
            let mut v = Vec::new();
            let mut bytes = quoted.iter();
            while let Some(&b) = bytes.next() {
                match b {
                    b'"' => break,
                    b'\\' => v.extend(bytes.next()),
                    _ => v.push(b),
                }
            }
            out.push(v);
        }
        let rest = rest.strip_prefix(b"\"").unwrap_or(rest);
        let cut = |stop: &dyn Fn(u8) -> bool| {
            rest[..rest.iter().position(|&b| stop(b)).unwrap_or(rest.len())].to_vec()
        };
        out.push(cut(&|b| b.is_ascii_whitespace() || b == b';' || b == b'"'));
        out.push(cut(&|b| b == b';' || b == b'"'));
    }
    out
}

/// Whether a `Content-Disposition` value's `name` or `name*` parameter may be `_method`.
fn params_names_method(value: &[u8]) -> bool {
    let params = params_of(value);
    let named = params.iter().any(|(name, v)| {
        if name.eq_ignore_ascii_case(b"name") {
            name_is_method(v)
        } else if name.eq_ignore_ascii_case(b"name*") {
            // `charset'language'percent-encoded`.
            let encoded = v.rsplit(|&b| b == b'\'').next().unwrap_or_default();
            name_is_method(encoded)
        } else {
            false
        }
    });
    named || continued(&params, b"name").is_some_and(|v| name_is_method(&v))
}

/// The value RFC 2231 continuations of `key` (`key*0`, `key*1*`...) join to, sections in
/// order (Go's `mime` joins them), as written: the first one's `charset'language'` dropped,
/// escapes left for [`name_is_method`] to read both ways.
fn continued(params: &[(Vec<u8>, Vec<u8>)], key: &[u8]) -> Option<Vec<u8>> {
    let mut sections: Vec<(u32, &[u8])> = params
        .iter()
        .filter_map(|(name, v)| {
            let rest = name
                .get(..key.len())
                .filter(|k| k.eq_ignore_ascii_case(key))
                .and(name.get(key.len()..))?
                .strip_prefix(b"*")?;
            let digits = rest.strip_suffix(b"*").unwrap_or(rest);
            let n = std::str::from_utf8(digits).ok()?.parse().ok()?;
            Some((n, v.as_slice()))
        })
        .collect();
    sections.sort_by_key(|&(n, _)| n);
    let mut out = Vec::new();
    for (i, &(_, v)) in sections.iter().enumerate() {
        let v = match i {
            0 if v.iter().filter(|&&b| b == b'\'').count() >= 2 => {
                v.rsplit(|&b| b == b'\'').next().unwrap_or_default()
            }
            _ => v,
        };
        out.extend_from_slice(v);
    }
    (!sections.is_empty()).then_some(out)
}

/// A part name as written or percent-decoded (some parsers decode names the HTML form
/// encoding escaped), or in single quotes as PHP reads them.
fn name_is_method(name: &[u8]) -> bool {
    let read = |name: &[u8]| {
        method_override::is_method_key(name)
            || method_override::is_method_key(&method_override::percent_decode(name))
    };
    read(name) || single_quoted(name).is_some_and(|n| read(&n))
}

/// A value in single quotes as PHP reads it: to the next `'` (or the end), `\'` an escaped
/// quote.
fn single_quoted(value: &[u8]) -> Option<Vec<u8>> {
    let mut rest = value.trim_ascii_start().strip_prefix(b"'")?.iter();
    let mut out = Vec::new();
    while let Some(&b) = rest.next() {
        match b {
            b'\'' => break,
            b'\\' if rest.as_slice().first() == Some(&b'\'') => {
                out.push(b'\'');
                rest.next();
            }
            _ => out.push(b),
        }
    }
    Some(out)
}

/// The `; name=value` parameters after a media type or disposition (values quoted or not;
/// a quoted value's backslash escapes undone). Anything before the first `;` is skipped.
pub(super) fn params_of(text: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let Some(first) = text.iter().position(|&b| b == b';') else {
        return out;
    };
    let mut i = first + 1;
    while i < text.len() {
        while text
            .get(i)
            .is_some_and(|b| b.is_ascii_whitespace() || *b == b';')
        {
            i += 1;
        }
        let name_start = i;
        while text.get(i).is_some_and(|&b| b != b'=' && b != b';') {
            i += 1;
        }
        let name = text[name_start..i].trim_ascii().to_vec();
        if text.get(i) != Some(&b'=') {
            continue;
        }
        i += 1;
        while text.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        let mut value = Vec::new();
        if text.get(i) == Some(&b'"') {
            i += 1;
            while let Some(&b) = text.get(i) {
                i += 1;
                match b {
                    b'"' => break,
                    b'\\' => {
                        if let Some(&escaped) = text.get(i) {
                            value.push(escaped);
                            i += 1;
                        }
                    }
                    _ => value.push(b),
                }
            }
            while text.get(i).is_some_and(|&b| b != b';') {
                i += 1;
            }
        } else {
            let start = i;
            while text.get(i).is_some_and(|&b| b != b';') {
                i += 1;
            }
            value = text[start..i].trim_ascii().to_vec();
        }
        out.push((name, value));
    }
    out
}

fn split_once(line: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = line.iter().position(|&b| b == sep)?;
    Some((&line[..i], &line[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_kinds_follow_the_content_type() {
        let of = |m: &str, cts: &[&str]| FormKind::of(m, cts.iter().map(|c| c.as_bytes()));
        assert_eq!(of("POST", &[]), Some(FormKind::Urlencoded));
        assert_eq!(of("PUT", &[]), None);
        assert_eq!(
            of("PUT", &["Application/X-WWW-Form-Urlencoded; charset=utf-8"]),
            Some(FormKind::Urlencoded)
        );
        assert_eq!(
            of("POST", &["application/x-www-form-urlencoded,text/plain"]),
            Some(FormKind::Urlencoded)
        );
        assert_eq!(
            of("POST", &["multipart/form-data; boundary=\"a b\""]),
            Some(FormKind::Multipart(b"a b".to_vec()))
        );
        assert_eq!(
            of("POST", &["text/plain", "multipart/form-data;BOUNDARY=x"]),
            Some(FormKind::Multipart(b"x".to_vec()))
        );
        assert_eq!(of("POST", &["multipart/form-data"]), None);
        // Rack parses these too.
        assert_eq!(
            of("POST", &["multipart/mixed; boundary=x"]),
            Some(FormKind::Multipart(b"x".to_vec()))
        );
        // Boundaries parsers read differently: one a prefix of the others is the one split
        // at; otherwise no reading is trusted.
        assert_eq!(
            of(
                "POST",
                &["multipart/form-data; boundary=abc ; boundary=\"abcd\""]
            ),
            Some(FormKind::Multipart(b"abc".to_vec()))
        );
        for ambiguous in [
            "multipart/form-data; boundary=good; boundary=evil",
            "multipart/form-data; boundary=good; x=\"boundary=evil\"",
            "multipart/form-data; boundary=good; xboundary=evil",
            "multipart/form-data; boundary=\"a\\\"b\"",
        ] {
            assert!(
                matches!(of("POST", &[ambiguous]), Some(FormKind::Unreadable(_))),
                "{ambiguous}"
            );
        }
        assert_eq!(of("POST", &["application/json"]), None);
        assert_eq!(of("POST", &["text/plain"]), None);
    }

    #[test]
    fn part_names_are_read_as_parsers_spell_them() {
        for head in [
            "Content-Disposition: form-data; name=\"_method\"",
            "content-disposition: form-data; filename=\"a;name=x\"; NAME=\"_method\"\r\nContent-Type: text/plain\r",
            "Content-Disposition: form-data; name=.method",
            "Content-Disposition: form-data; name=\"%5Fmethod\"",
            "Content-Disposition: form-data; name*=UTF-8''%5Fmethod",
            "Content-Disposition: form-data; name=\"  _method[]\"",
            "Content-Disposition: form-data; name=\"_method%00x\"",
            "X-Other: 1\r\nContent-Disposition: form-data; name=a\r\nContent-Disposition: form-data; name=_method",
            // Rack's pattern reads a name on a line without a colon; without a name, the
            // Content-ID.
            "Content-Disposition: form-data\r\n ; name=_method",
            "Content-ID: _method",
            // Rack's pattern finds ` name=` inside another parameter, quoted or not.
            "Content-Disposition: form-data; name=\"a\"; x= name=_method",
            "Content-Disposition: form-data; name=a; filename=\"x name=_method\"",
            "Content-Disposition: form-data;name=_method[]",
            "X-Other: Content-Disposition: form-data; name=_method",
            "--XyZjunk Content-ID: _method",
        ] {
            assert!(part_is_method(head.as_bytes()), "{head}");
        }
        for head in [
            "Content-Disposition: form-data; name=\"title\"",
            "Content-Disposition: form-data; name=\"payment_method\"",
            "Content-Disposition: form-data; filename=\"_method\"",
            "X-Name: form-data; name=_method",
            "",
        ] {
            assert!(!part_is_method(head.as_bytes()), "{head}");
        }
        // Escapes in a quoted name are undone.
        assert_eq!(
            params_of(b"form-data; name=\"a\\\"b\"; x"),
            [(b"name".to_vec(), b"a\"b".to_vec())]
        );
    }
}
