//! Tests of the streaming `_method` reader: the rules as parsers spell them, a reference
//! reader of whole bodies that the stream must agree with however the body is split, and
//! attacks on what is held back.

use proptest::prelude::*;

use super::*;
use crate::http::body_override::BodyKind;
use crate::http::body_override::streamed::{self, Streamed};
use crate::http::method_override::{is_method_key, method_key_prefix, percent_decode, push};

fn methods(kind: &FormKind, body: &str) -> Vec<String> {
    from_body(kind, body.as_bytes())
        .unwrap()
        .into_iter()
        .map(|o| o.method)
        .collect()
}

/// The reference: the whole body split at once, by the same rules (every line start that
/// begins with the delimiter is one; a part's head as `read_head` reads it; the last part
/// counts even without a delimiter after it).
fn whole(kind: &FormKind, body: &[u8]) -> Result<Vec<Override>, InvalidOverride> {
    let mut found = Vec::new();
    match kind {
        FormKind::Urlencoded => {
            for pair in body.split(|&b| b == b'&' || b == b';') {
                let mut kv = pair.splitn(2, |&b| b == b'=');
                let key = kv.next().unwrap_or_default();
                let Some(value) = kv.next() else { continue };
                if is_method_key(&percent_decode(key)) {
                    push(&mut found, Source::Form, percent_decode(value).trim_ascii())?;
                }
            }
        }
        FormKind::Unreadable(why) => return Err(InvalidOverride::Unreadable(why.to_string())),
        FormKind::Multipart(boundary) => {
            let mut delimiter = b"--".to_vec();
            delimiter.extend_from_slice(boundary);
            let starts: Vec<usize> = (0..body.len())
                .filter(|&at| {
                    let lead = body[..at].iter().rposition(|&b| !is_line_space(b));
                    lead.is_none_or(|l| body[l] == b'\n') && body[at..].starts_with(&delimiter)
                })
                .chain([body.len()])
                .collect();
            for pair in starts.windows(2) {
                let (start, next) = (pair[0] + delimiter.len(), pair[1]);
                if start > next {
                    continue;
                }
                let part = &body[start..next];
                let search = &mut HeadSearch::default();
                let content = match read_head(part, delimiter.len(), true, search) {
                    HeadRead::Part {
                        content,
                        method: true,
                    } => content,
                    HeadRead::TooLong => return Err(head_too_long()),
                    HeadRead::CutNamed => return Err(cut_named()),
                    _ => continue,
                };
                let value = &part[content..];
                let value = value.strip_suffix(b"\n").unwrap_or(value);
                let value = value.strip_suffix(b"\r").unwrap_or(value);
                if value.len() > MAX_HELD_VALUE {
                    return Err(value_too_long());
                }
                push(&mut found, Source::Multipart, value.trim_ascii())?;
            }
        }
    }
    Ok(found)
}

/// What the stream makes of a form `body` of `kind` cut at `cuts`.
fn stream(kind: &FormKind, body: &[u8], cuts: &[usize]) -> Streamed {
    let kind = BodyKind {
        form: Some(kind.clone()),
        json: false,
    };
    streamed::stream(&kind, body, cuts, usize::MAX)
}

const BOUNDARY: &[u8] = b"XyZ";

fn multipart() -> FormKind {
    FormKind::Multipart(BOUNDARY.to_vec())
}

#[test]
fn urlencoded_method_fields_are_read_as_parsers_spell_them() {
    let k = FormKind::Urlencoded;
    assert_eq!(methods(&k, "a=1&_method=delete"), ["DELETE"]);
    assert!(methods(&k, "a=1&method=DELETE&payment_method=card").is_empty());
    // Percent-encoded, `+` as space, `;` as separator, PHP's name mangling (leading
    // spaces dropped, so ` method` is `method`; ` ` and `.` read as `_`; cut at a NUL), the
    // array form.
    assert_eq!(
        methods(
            &k,
            "%5Fmethod=%50UT;+.method=patch&%20method=trace&_method[]=move&_METHOD=copy&+_method=purge&_method%00x=lock"
        ),
        ["PUT", "PATCH", "MOVE", "COPY", "PURGE", "LOCK"]
    );
    assert!(methods(&k, "_method=&x").is_empty());
    assert!(from_body(&k, b"_method=DEL+ETE").is_err());
    assert!(from_body(&k, b"_method=%FF").is_err());
}

#[test]
fn multipart_method_parts_are_read() {
    let k = multipart();
    // The part after the closing delimiter counts too: some parsers read on after it.
    let body = "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"title\"\r\n\r\n_method=GET\r\n--XyZ\r\ncontent-disposition: form-data; filename=\"a;name=x\"; NAME=\"_method\"\r\nContent-Type: text/plain\r\n\r\nDELETE\r\n--XyZ  \nContent-Disposition: form-data; name=.method\n\nput\n--XyZ--\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nPATCH\r\n";
    assert_eq!(methods(&k, body), ["DELETE", "PUT", "PATCH"]);
    // A boundary that only appears inside a line is not a delimiter.
    let inline = "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx--XyZ\r\n--XyZ--";
    assert!(methods(&k, inline).is_empty());
    let bad =
        "--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nnot a method\r\n--XyZ--";
    assert!(from_body(&k, bad.as_bytes()).is_err());
    // A last part without a delimiter after it is still read.
    let open = "--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE";
    assert_eq!(methods(&k, open), ["DELETE"]);
    // Tricky spellings of the name.
    for head in [
        "Content-Disposition: form-data; name*=UTF-8''%5Fmethod",
        "Content-Disposition: form-data; name=\"%5fMETHOD\"",
        "Content-ID: _method",
        "Content-Disposition: form-data\r\n ; name=_method",
    ] {
        let body = format!("--XyZ\r\n{head}\r\n\r\nDELETE\r\n--XyZ--\r\n");
        assert_eq!(methods(&k, &body), ["DELETE"], "{head}");
    }
    // A head that ends with a bare LF blank line: a parser that wants CRLF CRLF reads the
    // lines after it as headers too, so a name there counts (and the value is not a method).
    let hidden =
        "--XyZ\r\nX: a\n\nContent-Disposition: form-data; name=_method\r\n\r\nDELETE\r\n--XyZ--";
    assert!(from_body(&k, hidden.as_bytes()).is_err());
    let plain = "--XyZ\nContent-Disposition: form-data; name=a\n\nvalue\n--XyZ--";
    assert!(methods(&k, plain).is_empty());
    let mut long = b"--XyZ\nContent-Disposition: form-data; name=a\n\n".to_vec();
    long.extend(std::iter::repeat_n(b'v', MAX_PART_HEAD));
    assert!(from_body(&k, &long).is_err());
    // A line that begins with the delimiter cuts a head short here, but not for a parser
    // that wants the delimiter line to end after the boundary: a name before it counts.
    let cut = "--XyZ\r\nContent-Disposition: form-data; name=_method\r\n--XyZjunk\r\n\r\nDELETE\r\n--XyZ--";
    assert!(from_body(&k, cut.as_bytes()).is_err());
    assert!(FormScan::new(&FormKind::Multipart(b"a\r\nb".to_vec())).is_err());
    assert!(FormScan::new(&FormKind::Multipart(vec![b'b'; 71])).is_err());
}

/// A file part of `size` bytes (line breaks and dashes included) and then `tail` parts.
fn upload(size: usize, tail: &str) -> Vec<u8> {
    let mut body =
        b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n".to_vec();
    body.extend((0..size).map(|i| match i % 97 {
        0 => b'\n',
        1 | 2 => b'-',
        3 => b'X',
        _ => b'a' + (i % 26) as u8,
    }));
    body.extend_from_slice(tail.as_bytes());
    body
}

const DENIED_TAIL: &str =
    "\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XyZ--\r\n";

/// The bytes the stream hands back before its `_method` field is read never hold that
/// field's part, wherever the body is cut; once read, every byte is handed back in order.
fn assert_held_until_read(kind: &FormKind, body: &[u8], field: &[u8], cuts: &[usize]) {
    let mut scan = FormScan::new(kind).unwrap();
    let mut out = Vec::new();
    let mut from = 0;
    for &to in cuts.iter().chain([&body.len()]) {
        let to = to.min(body.len());
        if to <= from {
            continue;
        }
        let mut got = Vec::new();
        scan.feed(Bytes::copy_from_slice(&body[from..to]), &mut got)
            .unwrap();
        for b in got {
            out.extend_from_slice(&b);
        }
        if scan.found().is_empty() {
            assert!(
                !out.windows(field.len()).any(|w| w == field),
                "cut at {cuts:?}: {:?} went before it was read",
                String::from_utf8_lossy(field)
            );
        }
        from = to;
    }
    let mut last = Vec::new();
    scan.finish(&mut last).unwrap();
    for b in last {
        out.extend_from_slice(&b);
    }
    assert_eq!(scan.found().len(), 1, "cut at {cuts:?}");
    assert!(out == body, "cut at {cuts:?}: the bytes handed back differ");
}

#[test]
fn a_method_field_cut_at_every_byte_is_held_until_read() {
    let k = multipart();
    let body = upload(40, DENIED_TAIL);
    let field = b"name=\"_method\"";
    for at in 0..=body.len() {
        assert_held_until_read(&k, &body, field, &[at]);
        assert_held_until_read(&k, &body, field, &[at, at + 1, at + 5]);
    }
    // A byte at a time.
    let every: Vec<usize> = (1..body.len()).collect();
    assert_held_until_read(&k, &body, field, &every);

    let form = b"pad=aaaa&b=%5F&%5Fmethod=DELETE&z=1";
    for at in 0..=form.len() {
        assert_held_until_read(&FormKind::Urlencoded, form, b"method=", &[at]);
    }
    let every: Vec<usize> = (1..form.len()).collect();
    assert_held_until_read(&FormKind::Urlencoded, form, b"method=", &every);
}

#[test]
fn a_method_part_after_five_mib_is_read_with_bounded_memory() {
    let body = upload(5 << 20, DENIED_TAIL);
    let cuts: Vec<usize> = (1..body.len() / 65_536 + 1).map(|i| i * 65_536).collect();
    let s = stream(&multipart(), &body, &cuts);
    assert_eq!(s.verdict.unwrap()[0].method, "DELETE");
    assert!(s.out == body);
    assert!(s.held_max <= 65_536 + 200, "held {}", s.held_max);
    // The same with 16 KiB pieces (HTTP/2 frames), and as an urlencoded form.
    let cuts: Vec<usize> = (1..body.len() / 16_384 + 1).map(|i| i * 16_384).collect();
    assert!(stream(&multipart(), &body, &cuts).held_max <= 16_384 + 200);
    let mut form = b"pad=".to_vec();
    form.extend(std::iter::repeat_n(b'p', 5 << 20));
    form.extend_from_slice(b"&_method=DELETE");
    let s = stream(&FormKind::Urlencoded, &form, &cuts);
    assert_eq!(s.verdict.unwrap()[0].method, "DELETE");
    assert!(s.held_max <= 64, "held {}", s.held_max);
}

/// A head held byte after byte costs its length, not its square: one whose LF-only blank
/// line a strict parser does not end (it waits for CRLF CRLF) is looked at again at every
/// line break, and each look used to search it from its start.
#[test]
fn a_head_sent_a_byte_at_a_time_is_searched_in_linear_work() {
    for lines in [b"a\n".as_slice(), b"\n", b"a\r\n"] {
        let mut body = b"--XyZ\r\nContent-Disposition: form-data; name=\"x\"\n\n".to_vec();
        while body.len() < MAX_PART_HEAD - 1000 {
            body.extend_from_slice(lines);
        }
        body.extend_from_slice(b"\r\n\r\nvalue\r\n--XyZ--\r\n");
        let cuts: Vec<usize> = (1..body.len()).collect();
        SEARCHED.with(|n| n.set(0));
        let streamed = stream(&multipart(), &body, &cuts);
        let work = SEARCHED.with(std::cell::Cell::get);
        assert_eq!(streamed.out, body, "{lines:?}");
        assert!(streamed.verdict.is_ok(), "{lines:?}");
        assert!(
            work < 16 * body.len(),
            "{lines:?}: {work} bytes searched for a {}-byte body",
            body.len()
        );
    }
}

#[test]
fn two_method_parts_are_both_read() {
    let tail = "\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nGET\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_METHOD\"\r\n\r\ndelete\r\n--XyZ--\r\n";
    let body = upload(1000, tail);
    let found: Vec<String> = from_body(&multipart(), &body)
        .unwrap()
        .into_iter()
        .map(|o| o.method)
        .collect();
    assert_eq!(found, ["GET", "DELETE"]);
}

#[test]
fn what_is_held_is_bounded() {
    let k = multipart();
    // A part head that never ends.
    let mut body = b"--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\nX-Pad: ".to_vec();
    body.extend(std::iter::repeat_n(b'p', MAX_PART_HEAD + 1));
    let cuts: Vec<usize> = (1..body.len() / 1000 + 1).map(|i| i * 1000).collect();
    let s = stream(&k, &body, &cuts);
    assert!(matches!(s.verdict, Err(InvalidOverride::Unreadable(_))));
    assert!(s.held_max <= MAX_PART_HEAD + 1000);
    // The same whole (a head longer than the bound in one piece), and a part without a
    // head end as long: refused however the body is cut.
    let mut head = b"--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\nX-Pad: ".to_vec();
    head.extend(std::iter::repeat_n(b'p', MAX_PART_HEAD));
    let whole_head = [&head[..], b"\r\n\r\nv\r\n--XyZ--"].concat();
    let no_end = [&head[..], b"\r\n--XyZ--"].concat();
    for body in [&whole_head, &no_end] {
        assert!(from_body(&k, body).is_err());
        assert!(stream(&k, body, &[100, 5000]).verdict.is_err());
    }
    // A `_method` value that never ends, or is longer than a method list may be.
    let mut body =
        b"--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE".to_vec();
    body.extend(std::iter::repeat_n(b' ', MAX_HELD_VALUE));
    let s = stream(&k, &body, &[10, 60, 100]);
    assert!(matches!(s.verdict, Err(InvalidOverride::Unreadable(_))));
    body.extend_from_slice(b"\r\n--XyZ--");
    assert!(from_body(&k, &body).is_err());
    let mut form = b"_method=DELETE".to_vec();
    form.extend(std::iter::repeat_n(b'+', MAX_HELD_VALUE));
    assert!(from_body(&FormKind::Urlencoded, &form).is_err());
    // A name padded past the bound (PHP drops leading spaces).
    let mut form = Vec::new();
    form.extend(std::iter::repeat_n(b'+', MAX_HELD_KEY + 1));
    form.extend_from_slice(b"_method=DELETE");
    assert!(from_body(&FormKind::Urlencoded, &form).is_err());
    // A client that stalls in the middle of a `_method` part: nothing of it went.
    let body = upload(
        100,
        "\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDEL",
    );
    let mut scan = FormScan::new(&k).unwrap();
    let mut out = Vec::new();
    scan.feed(Bytes::from(body.clone()), &mut out).unwrap();
    let sent: Vec<u8> = out.concat();
    let part =
        body.len() - b"--XyZ\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDEL".len();
    assert_eq!(sent, body[..part]);
    assert!(scan.found().is_empty());
}

#[test]
fn name_prefixes_decide_as_the_whole_name_would() {
    for (prefix, want) in [
        ("", KeyPrefix::Maybe),
        ("  _me", KeyPrefix::Maybe),
        ("_method", KeyPrefix::Maybe),
        ("_method[", KeyPrefix::Yes),
        ("_methods", KeyPrefix::No),
        ("_me[", KeyPrefix::No),
        ("pad", KeyPrefix::No),
        ("_method\0", KeyPrefix::Yes),
    ] {
        assert_eq!(method_key_prefix(prefix.as_bytes()), want, "{prefix:?}");
    }
}

/// Bytes that make multipart and urlencoded structure, to build bodies from.
fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "--XyZ",
        "--XyZ--",
        "\r\n",
        "\n",
        "\r",
        "\r\n\r\n",
        "\n\n",
        "-",
        "X",
        "XyZ",
        "a",
        "Content-Disposition: form-data; name=\"_method\"",
        "Content-Disposition: form-data; name=\"file\"; filename=\"x\"",
        "Content-Disposition: form-data; name=.method",
        "Content-Disposition: form-data; name*=UTF-8''%5Fmethod",
        "content-id: _method",
        "Content-Type: text/plain",
        "DELETE",
        "get",
        " PUT ",
        "&",
        ";",
        "=",
        "_method",
        "%5F",
        "%5",
        "+",
        " ",
        "method",
        "[]",
        "[",
        "%00",
        "_method=",
        "%5Fmethod=delete",
        "x=1",
        "]",
        "\u{feff}",
        "%EF",
        "\t",
        "\0",
    ])
}

fn body_and_cuts() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    prop::collection::vec(token(), 0..40).prop_flat_map(|tokens| {
        let body: Vec<u8> = tokens.concat().into_bytes();
        let len = body.len();
        (Just(body), prop::collection::vec(0..=len, 0..8))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_stream_agrees_with_the_whole_body_however_it_is_cut((body, cuts) in body_and_cuts()) {
        // The random cuts, and a byte at a time.
        let every: Vec<usize> = (1..body.len()).collect();
        for kind in [multipart(), FormKind::Urlencoded] {
            let reference = whole(&kind, &body);
            for cuts in [&cuts, &every] {
                let s = stream(&kind, &body, cuts);
                prop_assert_eq!(&s.verdict, &reference);
                if s.verdict.is_ok() {
                    prop_assert_eq!(&s.out, &body);
                }
            }
        }
    }

    #[test]
    fn a_decided_name_prefix_holds_for_every_name_it_begins(
        prefix in prop::collection::vec(token(), 0..4),
        rest in prop::collection::vec(token(), 0..4),
    ) {
        let prefix = percent_decode(prefix.concat().as_bytes());
        let name = [prefix.clone(), rest.concat().into_bytes()].concat();
        match method_key_prefix(&prefix) {
            KeyPrefix::No => prop_assert!(!is_method_key(&name)),
            KeyPrefix::Yes => prop_assert!(is_method_key(&name)),
            KeyPrefix::Maybe => {}
        }
    }
}

/// A form of `content_type` (`None`: no Content-Type at all) read whole: the methods its
/// `_method` fields name, or the refusal (`Err`), or `None` when it is not read as a form.
fn verdict(content_type: Option<&str>, body: &[u8]) -> Option<Result<Vec<String>, ()>> {
    let kind = FormKind::of("POST", content_type.map(str::as_bytes))?;
    Some(
        from_body(&kind, body)
            .map(|f| f.into_iter().map(|o| o.method).collect())
            .map_err(|_| ()),
    )
}

/// A `_method` part of a body split at `--` and `boundary`.
fn method_part(boundary: &str) -> Vec<u8> {
    format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--{boundary}--\r\n"
    )
    .into_bytes()
}

#[test]
fn boundaries_as_php_rack_and_busboy_read_them_are_split_at_or_refused() {
    // Each Content-Type, with a body split at the boundary the named parser reads: DELETE
    // must be found, or the form refused; never passed as holding no `_method`.
    for (ct, read_by, boundary) in [
        // PHP: the first `boundary` anywhere, then the first `=` after it.
        (
            "multipart/form-data; boundaryx=evil; boundary=good",
            "PHP",
            "evil",
        ),
        ("multipart/form-data; boundaryy=evil", "PHP", "evil"),
        ("multipart/form-data; boundary; a=evil", "PHP", "evil"),
        ("multipart/form-data; a=boundary; b=evil", "PHP", "evil"),
        (
            "multipart/form-data; charset=boundary; x=evil; boundary=good",
            "PHP",
            "evil",
        ),
        (
            "multipart/form-data; BOUNDARY=good; x=\"boundary\"=evil",
            "PHP",
            "evil",
        ),
        // White space kept: PHP, Rack and busboy read it as part of the boundary.
        (
            "multipart/form-data; boundary=\" abc\"",
            "PHP, Rack, busboy",
            " abc",
        ),
        ("multipart/form-data; boundary= abc", "PHP, Rack", " abc"),
        ("multipart/form-data; boundary=\" \"", "PHP, busboy", " "),
        // An empty boundary: every line that begins with `--` is a delimiter.
        ("multipart/form-data; boundary=\"\"", "PHP, busboy", ""),
    ] {
        let v = verdict(Some(ct), &method_part(boundary));
        assert!(
            matches!(&v, Some(Ok(m)) if m == &["DELETE"]) || matches!(v, Some(Err(()))),
            "{ct} (read by {read_by}): {v:?}"
        );
    }
}

#[test]
fn an_empty_content_type_on_a_post_is_a_form_as_rack_reads_it() {
    for ct in ["", " "] {
        assert_eq!(
            verdict(Some(ct), b"_method=DELETE"),
            Some(Ok(vec!["DELETE".to_string()])),
            "{ct:?}"
        );
    }
    assert_eq!(verdict(Some("text/plain"), b"_method=DELETE"), None);
}

#[test]
fn names_as_rack_2_and_body_parser_read_them_are_method_fields() {
    // Rack 2.2 drops leading `[`/`]` and trailing `]`; body-parser drops a UTF-8 BOM.
    for name in [
        "[_method",
        "]_method",
        "_method]",
        "[[_method]]",
        "%5B_method",
        "[]_method",
        "\u{feff}_method",
    ] {
        let body = format!("{name}=DELETE");
        assert_eq!(methods(&FormKind::Urlencoded, &body), ["DELETE"], "{name}");
        let part = format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\nDELETE\r\n--XyZ--\r\n"
        );
        assert_eq!(methods(&multipart(), &part), ["DELETE"], "part {name}");
    }
    for name in ["x[_method", "_method]x", "x_method"] {
        let body = format!("{name}=DELETE");
        assert!(methods(&FormKind::Urlencoded, &body).is_empty(), "{name}");
    }
}

#[test]
fn part_heads_as_php_reads_them_name_method() {
    // PHP quotes with `'` as well as `"`, and joins a header line without a colon to the
    // one before it, with nothing between.
    for head in [
        "Content-Disposition: form-data; name='_method'",
        "Content-Disposition: form-data; name='_method",
        "Content-Disposition: form-data; x='a;b'; name='_method'",
        "Content-Disposition: form-data; na\r\nme=\"_method\"",
        "Content-Disposition: form-data; name=\"_met\r\nhod\"",
        "Content-Disposition: form-data; x=\":\"; name=\"_met\r\nhod\"",
        "Content-Disposition: form-data; x=1\r\n a:b; name=_method",
    ] {
        let part = format!("--XyZ\r\n{head}\r\n\r\nDELETE\r\n--XyZ--\r\n");
        assert_eq!(methods(&multipart(), &part), ["DELETE"], "{head}");
    }
}

#[test]
fn a_chunk_of_tiny_fields_is_handed_back_in_few_pieces() {
    // Each piece handed back goes upstream as a frame of its own (an HTTP/2 DATA frame): a
    // chunk of one-byte fields must not become a frame per byte.
    for (kind, chunk) in [
        (FormKind::Urlencoded, b"&".repeat(64 * 1024)),
        (FormKind::Urlencoded, b"_method=post&a&".repeat(4 * 1024)),
        (multipart(), b"--XyZ\r\n\r\n\r\n".repeat(6 * 1024)),
    ] {
        let mut scan = FormScan::new(&kind).unwrap();
        let mut out = Vec::new();
        scan.feed(Bytes::from(chunk.clone()), &mut out).unwrap();
        assert!(out.len() <= 2, "{} pieces", out.len());
        let mut last = Vec::new();
        scan.finish(&mut last).unwrap();
        assert!(last.len() <= 2, "{} pieces at the end", last.len());
        assert_eq!([out, last].concat().concat(), chunk);
    }
}

#[test]
fn rfc_2231_names_and_boundaries_as_go_reads_them() {
    // Go's `mime` (so `r.FormValue`, and gorilla's method override) joins `name*0`,
    // `name*1`... and reads `boundary*`.
    for head in [
        "Content-Disposition: form-data; name*0=_me; name*1=thod",
        "Content-Disposition: form-data; name*0*=utf-8''%5Fme; name*1*=thod",
        "Content-Disposition: form-data; name*1=\"thod\"; name*0=\"_me\"",
    ] {
        let part = format!("--XyZ\r\n{head}\r\n\r\nDELETE\r\n--XyZ--\r\n");
        assert_eq!(methods(&multipart(), &part), ["DELETE"], "{head}");
    }
    for ct in [
        "multipart/form-data; boundary*=utf-8''evil",
        "multipart/form-data; boundary=good; boundary*=utf-8''evil",
        "multipart/form-data; boundary*0=ev; boundary*1=il",
    ] {
        let v = verdict(Some(ct), &method_part("evil"));
        assert!(
            matches!(&v, Some(Ok(m)) if m == &["DELETE"]) || matches!(v, Some(Err(()))),
            "{ct}: {v:?}"
        );
    }
}

#[test]
fn delimiter_lines_led_by_white_space_as_rack_2_reads_them_begin_parts() {
    // Rack 2 compares each line stripped (white space and NUL) with the delimiter.
    let named = "Content-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--XyZ--\r\n";
    let a = "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n";
    for lead in [
        " --XyZ\r\n".to_string(),
        "\t--XyZ\r\n".to_string(),
        "\0--XyZ\r\n".to_string(),
        "\r--XyZ\r\n".to_string(),
        "\x0b\x0c --XyZ\r\n".to_string(),
        format!("{a}x--XyZ\r\n --XyZ\r\n"),
        format!("{a}x\r\n{}--XyZ\r\n", " ".repeat(3000)),
    ] {
        let body = format!("{lead}{named}").into_bytes();
        for cuts in [vec![], (1..body.len()).collect::<Vec<_>>()] {
            let s = stream(&multipart(), &body, &cuts);
            let found: Vec<String> = s.verdict.unwrap().into_iter().map(|o| o.method).collect();
            assert_eq!(found, ["DELETE"], "{lead:?} cut {}", cuts.len());
        }
    }
}
