//! `_method` fields in form bodies: the override Rack (`Rack::MethodOverride`, so Rails) and
//! Symfony (so Laravel) honour in a `POST` form, urlencoded or multipart.
//!
//! Owns deciding which bodies are forms ([`FormKind::of`]) and reading the methods their
//! `_method` fields name ([`from_body`]), with the same key spelling rules and value checks as
//! the query parameter (`method_override`). The pipeline reads a form body whole (bounded)
//! before any of it goes upstream and judges each method named here like the request line's.
//! Reads are conservative where parsers differ: any field whose name a common parser would
//! take for `_method` counts, and every one of them is judged.

use super::method_override::{self, InvalidOverride, Override, Source};

/// Longest multipart boundary read (RFC 2046 allows 70; Rack refuses longer ones).
const MAX_BOUNDARY: usize = 70;

/// How a request body is a form, from its `Content-Type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormKind {
    /// `application/x-www-form-urlencoded`, or a `POST` without a `Content-Type` (Rack
    /// parses that as a form).
    Urlencoded,
    /// `multipart/form-data` with its boundary (without one no parser can split it).
    Multipart(Vec<u8>),
}

impl FormKind {
    /// The form kind of a request with `method` and `content_types` (every `Content-Type`
    /// value it sent), or `None` when no framework reads it as a form.
    pub fn of<'a>(method: &str, content_types: impl IntoIterator<Item = &'a [u8]>) -> Option<Self> {
        let mut any = false;
        for value in content_types {
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
        if !essence.eq_ignore_ascii_case(b"multipart/form-data") {
            return None;
        }
        params_of(params)
            .into_iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(b"boundary"))
            .map(|(_, boundary)| FormKind::Multipart(boundary))
            .filter(|k| !matches!(k, FormKind::Multipart(b) if b.is_empty()))
    }
}

/// The methods named by `_method` fields of a form body of `kind`, in order, each once.
pub fn from_body(kind: &FormKind, body: &[u8]) -> Result<Vec<Override>, InvalidOverride> {
    let mut found = Vec::new();
    match kind {
        FormKind::Urlencoded => {
            for pair in body.split(|&b| b == b'&' || b == b';') {
                let mut kv = pair.splitn(2, |&b| b == b'=');
                let key = kv.next().unwrap_or_default();
                let value = kv.next().unwrap_or_default();
                if method_override::is_method_key(&method_override::percent_decode(key)) {
                    let value = method_override::percent_decode(value);
                    method_override::push(&mut found, Source::Form, value.trim_ascii())?;
                }
            }
        }
        FormKind::Multipart(boundary) => {
            if boundary.len() > MAX_BOUNDARY {
                return Err(InvalidOverride::Unreadable(format!(
                    "a multipart boundary longer than {MAX_BOUNDARY} bytes"
                )));
            }
            for (name, value) in parts(boundary, body) {
                if method_override::is_method_key(&name) {
                    method_override::push(&mut found, Source::Multipart, value.trim_ascii())?;
                }
            }
        }
    }
    Ok(found)
}

/// The `(name, value)` of each part of a multipart body: the `name` parameter of its
/// `Content-Disposition` and its content. Lenient as parsers are: a delimiter line may end in
/// LF alone, and a part without a name is skipped.
fn parts<'b>(boundary: &[u8], body: &'b [u8]) -> Vec<(Vec<u8>, &'b [u8])> {
    let mut delimiter = b"--".to_vec();
    delimiter.extend_from_slice(boundary);
    // Where each delimiter line begins: at the start of the body or of a line.
    let line_starts = std::iter::once(0).chain(
        body.iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1),
    );
    let starts: Vec<usize> = line_starts
        .filter(|&at| body[at.min(body.len())..].starts_with(&delimiter))
        .collect();
    let mut out = Vec::new();
    for pair in starts.windows(2) {
        let (start, next) = (pair[0] + delimiter.len(), pair[1]);
        let part = &body[start..next];
        if part.starts_with(b"--") {
            break;
        }
        // The rest of the delimiter line (transport padding), then the headers.
        let Some(eol) = part.iter().position(|&b| b == b'\n') else {
            continue;
        };
        let part = &part[eol + 1..];
        let (headers, content) = match find(part, b"\n\r\n") {
            Some(i) if find(part, b"\n\n").is_none_or(|j| i < j) => (&part[..i], &part[i + 3..]),
            _ => match find(part, b"\n\n") {
                Some(j) => (&part[..j], &part[j + 2..]),
                None => continue,
            },
        };
        // The line break before the next delimiter belongs to the delimiter.
        let content = content.strip_suffix(b"\n").unwrap_or(content);
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        let name = headers.split(|&b| b == b'\n').find_map(|line| {
            let (header, value) = split_once(line, b':')?;
            if !header
                .trim_ascii()
                .eq_ignore_ascii_case(b"content-disposition")
            {
                return None;
            }
            params_of(value)
                .into_iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(b"name"))
                .map(|(_, v)| v)
        });
        if let Some(name) = name {
            out.push((name, content));
        }
    }
    out
}

/// The `; name=value` parameters after a media type or disposition (values quoted or not;
/// a quoted value's backslash escapes undone). Anything before the first `;` is skipped.
fn params_of(text: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
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

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn split_once(line: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = line.iter().position(|&b| b == sep)?;
    Some((&line[..i], &line[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn methods(kind: &FormKind, body: &str) -> Vec<String> {
        from_body(kind, body.as_bytes())
            .unwrap()
            .into_iter()
            .map(|o| o.method)
            .collect()
    }

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
        assert_eq!(of("POST", &["application/json"]), None);
        assert_eq!(of("POST", &["text/plain"]), None);
    }

    #[test]
    fn urlencoded_method_fields_are_read_as_parsers_spell_them() {
        let k = FormKind::Urlencoded;
        assert_eq!(methods(&k, "a=1&_method=delete"), ["DELETE"]);
        assert!(methods(&k, "a=1&method=DELETE&payment_method=card").is_empty());
        // Percent-encoded, `+` as space, `;` as separator, PHP's name mangling (leading
        // spaces dropped, so ` method` is `method`; ` ` and `.` read as `_`), the array form.
        assert_eq!(
            methods(
                &k,
                "%5Fmethod=%50UT;+.method=patch&%20method=trace&_method[]=move&_METHOD=copy&+_method=purge"
            ),
            ["PUT", "PATCH", "MOVE", "COPY", "PURGE"]
        );
        assert!(methods(&k, "_method=&x").is_empty());
        assert!(from_body(&k, b"_method=DEL+ETE").is_err());
        assert!(from_body(&k, b"_method=%FF").is_err());
    }

    #[test]
    fn multipart_method_parts_are_read() {
        let k = FormKind::Multipart(b"XyZ".to_vec());
        let body = "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\n_method=GET\r\n--XyZ\r\ncontent-disposition: form-data; filename=\"a;name=x\"; NAME=\"_method\"\r\nContent-Type: text/plain\r\n\r\nDELETE\r\n--XyZ  \nContent-Disposition: form-data; name=.method\n\nput\n--XyZ--\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nPATCH\r\n";
        assert_eq!(methods(&k, body), ["DELETE", "PUT"]);
        // A boundary that only appears inside a line is not a delimiter.
        let inline = "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx--XyZ\r\n--XyZ--";
        assert!(methods(&k, inline).is_empty());
        let bad = "--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nnot a method\r\n--XyZ--";
        assert!(from_body(&k, bad.as_bytes()).is_err());
        // Escapes in a quoted name are undone.
        assert_eq!(
            params_of(b"form-data; name=\"a\\\"b\"; x"),
            [(b"name".to_vec(), b"a\"b".to_vec())]
        );
    }
}
