//! Unit tests of `scrub`.

use super::*;
use http_body_util::BodyExt;

fn set(pairs: &[(&str, &str)]) -> Arc<ScrubSet> {
    let mut s = ScrubSet::default();
    for (a, b) in pairs {
        s.add(a.as_bytes(), b.as_bytes());
    }
    Arc::new(s)
}

fn stream(set: &Arc<ScrubSet>, chunks: &[&[u8]]) -> Vec<u8> {
    let mut s = Scrubber::new(Arc::clone(set));
    let mut out = Vec::new();
    for c in chunks {
        out.extend_from_slice(&s.feed(Bytes::copy_from_slice(c)));
    }
    out.extend_from_slice(&s.finish());
    out
}

#[test]
fn whole_and_split_secrets_are_replaced() {
    let s = set(&[("SECRET-123", "PH"), ("abc", "X")]);
    let text = b"a SECRET-123 b abcabc SECRET-12 c";
    let want = b"a PH b XX SECRET-12 c".to_vec();
    // Every way of cutting the text into two or three chunks.
    for i in 0..=text.len() {
        for j in i..=text.len() {
            let got = stream(&s, &[&text[..i], &text[i..j], &text[j..]]);
            assert_eq!(got, want, "cut at {i}, {j}");
        }
    }
    // One byte at a time.
    let bytes: Vec<&[u8]> = text.chunks(1).collect();
    assert_eq!(stream(&s, &bytes), want);
}

#[test]
fn the_last_window_is_held_back_whatever_it_is() {
    let s = set(&[("SECRET", "PH")]);
    // Six bytes, each spelled in at most eight: 47 bytes kept back.
    assert_eq!(s.window(), 47);
    let mut sc = Scrubber::new(Arc::clone(&s));
    assert_eq!(&sc.feed(Bytes::from_static(b"data: 1\n\n"))[..], b"");
    assert!(sc.holds());
    let text = [b'a'; 50];
    let out = sc.feed(Bytes::copy_from_slice(&text));
    assert_eq!(out.len(), 9 + 50 - 47);
    assert_eq!(&out[..9], b"data: 1\n\n");
    assert_eq!(sc.finish().len(), 47);
    assert!(!sc.holds());
    let mut sc = Scrubber::new(Arc::clone(&s));
    assert_eq!(&sc.feed(Bytes::from_static(b"x SEC"))[..], b"");
    assert_eq!(&sc.feed(Bytes::from_static(b"RET y"))[..], b"");
    assert_eq!(&sc.release()[..], b"x PH y");
    assert_eq!(sc.hits(), 1);
}

/// A download's chunks after the first go on without a copy: the held bytes, then the
/// chunk's own start (the same bytes, not a copy of them).
#[test]
fn a_long_chunk_after_held_bytes_is_not_copied() {
    let s = set(&[("SECRET", "PH")]);
    let mut sc = Scrubber::new(Arc::clone(&s));
    let first = Bytes::from(vec![b'a'; 4096]);
    let (held, start) = sc.feed_parts(first.clone());
    assert!(held.len() + start.len() == 4096 - 47);
    let second = Bytes::from(vec![b'b'; 4096]);
    let (held, start) = sc.feed_parts(second.clone());
    assert_eq!(&held[..], &[b'a'; 47]);
    assert_eq!(start.len(), 4096 - 47);
    assert_eq!(start.as_ptr(), second.as_ptr());
    // A secret across the cut: joined and scrubbed, as one part.
    let mut third = b"SEC".to_vec();
    third.extend_from_slice(&[b'c'; 100]);
    let mut sc = Scrubber::new(Arc::clone(&s));
    let mut out = Vec::new();
    let (a, b) = sc.feed_parts(Bytes::from(vec![b'a'; 4096]));
    out.extend_from_slice(&a);
    out.extend_from_slice(&b);
    let mut tail = vec![b'b'; 4096];
    tail.extend_from_slice(b"SEC");
    let (a, b) = sc.feed_parts(Bytes::from(tail));
    out.extend_from_slice(&a);
    out.extend_from_slice(&b);
    let (a, b) = sc.feed_parts(Bytes::from_static(
        b"RET and the rest of it, long enough to pass the window",
    ));
    out.extend_from_slice(&a);
    out.extend_from_slice(&b);
    out.extend_from_slice(&sc.finish());
    assert!(find(&out, b"SECRET").is_none());
    assert!(find(&out, b"PH and the rest").is_some());
}

/// The sizes of what a scrubber lets go, chunk by chunk, pause by pause, for a body
/// `hello <tail>` cut into `pieces` (a pause after each) and more after.
fn sizes_out(set: &Arc<ScrubSet>, tail: &[u8], pieces: usize) -> Vec<usize> {
    let mut body = b"hello ".to_vec();
    body.extend_from_slice(tail);
    let mut sc = Scrubber::new(Arc::clone(set));
    let mut sizes = Vec::new();
    for piece in body.chunks(body.len().div_ceil(pieces)) {
        sizes.push(sc.feed(Bytes::copy_from_slice(piece)).len());
        sizes.push(sc.release().len());
    }
    sizes.push(sc.feed(Bytes::from_static(b" and more")).len());
    sizes.push(sc.finish().len());
    sizes
}

/// A client that chooses a body's tail (an echo) must not learn from where sluice cuts it,
/// nor from when it lets it go, whether the tail begins a secret: the same sizes go out
/// for every tail of a length, the secret's beginnings included.
#[test]
fn what_goes_out_when_does_not_say_whether_a_tail_begins_a_secret() {
    let secret = "s3cr3t-VALUE-7f3a9c";
    let s = set(&[(secret, "openshell:resolve:env:KEY")]);
    for n in 1..secret.len() {
        let guessed = &secret.as_bytes()[..n];
        let wrong = vec![b'x'; n];
        let spelled = secret[..n].replace('-', "%2D");
        let wrong_spelled = "x".repeat(spelled.len());
        for pieces in [1, 2, 3] {
            assert_eq!(
                sizes_out(&s, guessed, pieces),
                sizes_out(&s, &wrong, pieces),
                "{n} bytes of the secret, {pieces} pieces"
            );
            assert_eq!(
                sizes_out(&s, spelled.as_bytes(), pieces),
                sizes_out(&s, wrong_spelled.as_bytes(), pieces),
                "{spelled}, {pieces} pieces"
            );
        }
    }
}

/// A secret that ends in a byte that could begin an escape (`&`, `%`, `\`) is found at the
/// end of a text too: there, the byte is itself (no escape can follow).
#[test]
fn a_secret_ending_in_an_escape_byte_is_found_at_the_end() {
    for secret in ["p4ss&", "p4ss%", "p4ss\\"] {
        let s = set(&[(secret, "PH")]);
        let mut out = Vec::new();
        assert_eq!(s.replace_all(format!("x {secret}").as_bytes(), &mut out), 1);
        assert_eq!(out, b"x PH", "{secret}");
        assert_eq!(stream(&s, &[format!("x {secret}").as_bytes()]), b"x PH");
        // Let go at a pause, then more: replaced when let go.
        let mut sc = Scrubber::new(Arc::clone(&s));
        let mut out = Vec::new();
        out.extend_from_slice(&sc.feed(Bytes::from(format!("x {secret}"))));
        out.extend_from_slice(&sc.release());
        out.extend_from_slice(&sc.feed(Bytes::from_static(b" y")));
        out.extend_from_slice(&sc.finish());
        assert_eq!(out, b"x PH y", "{secret}");
    }
    // HTML's other spellings: zero-padded, `&#X`, upper-case names.
    let s = set(&[(r#"a&b"c'd<e"#, "PH")]);
    for spelled in [
        "a&#038;b&#034;c&#039;d&#060;e",
        "a&#X26;b&QUOT;c&#X27;d&LT;e",
        "a&AMP;b\\&quot;c'd<e",
        "a&#00038;b&#00034;c&#x0027;d&#X003C;e",
    ] {
        assert_eq!(
            stream(&s, &[spelled.as_bytes(), b" z"]),
            b"PH z",
            "{spelled}"
        );
    }
}

/// A secret with its own escape in it (`%25`, `\\`, `&amp;`) is found written as is, where
/// reading that text as the escape would not match: both readings are followed.
#[test]
fn a_secret_that_holds_its_own_escape_is_found_as_is() {
    for secret in ["ab%25cd", r"ab\\cd", "x&amp;y", r"q\u0041z"] {
        let s = set(&[(secret, "PH")]);
        let text = format!("{} {secret} {}", "q".repeat(100), "q".repeat(100));
        let out = stream(&s, &[text.as_bytes()]);
        assert!(find(&out, secret.as_bytes()).is_none(), "{secret}");
        assert!(find(&out, b" PH ").is_some(), "{secret}");
    }
}

/// A secret replaced when it went out at a pause is not replaced again when the escape it
/// ended in turns out longer (`%` then `25`).
#[test]
fn a_secret_let_go_at_a_pause_is_replaced_once() {
    let s = set(&[("p4ss%", "PH")]);
    let mut sc = Scrubber::new(Arc::clone(&s));
    let mut out = Vec::new();
    out.extend_from_slice(&sc.feed(Bytes::from(format!("{}p4ss%2", "x".repeat(100)))));
    out.extend_from_slice(&sc.release());
    out.extend_from_slice(&sc.feed(Bytes::from_static(b"5 tail")));
    out.extend_from_slice(&sc.finish());
    assert_eq!(sc.hits(), 1);
    assert!(
        out.ends_with(b"PH25 tail"),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

/// A secret whose beginning went out at a pause (the upstream stopped in its middle for
/// longer than `RELEASE_AFTER`) is not completed after it: its rest becomes the
/// replacement, and counts as found.
#[test]
fn a_secret_begun_before_a_pause_is_not_completed_after_it() {
    let s = set(&[("s3cr3t-VALUE", "PH")]);
    let mut sc = Scrubber::new(Arc::clone(&s));
    let mut out = Vec::new();
    out.extend_from_slice(&sc.feed(Bytes::from_static(b"x s3cr3")));
    out.extend_from_slice(&sc.release());
    out.extend_from_slice(&sc.feed(Bytes::from_static(b"t-VA")));
    out.extend_from_slice(&sc.release());
    out.extend_from_slice(&sc.feed(Bytes::from_static(b"LUE y")));
    out.extend_from_slice(&sc.finish());
    assert_eq!(out, b"x s3cr3t-VAPH y");
    assert_eq!(sc.hits(), 1);
    // Binary bodies keep their length: the rest becomes as many `*`.
    let masked = Arc::new(s.masked());
    let mut sc = Scrubber::new(masked);
    let mut out = Vec::new();
    out.extend_from_slice(&sc.feed(Bytes::from_static(b"x s3cr3")));
    out.extend_from_slice(&sc.release());
    let mut rest = b"t-VALUE".to_vec();
    rest.extend_from_slice(&[b'a'; 100]);
    out.extend_from_slice(&sc.feed(Bytes::from(rest)));
    out.extend_from_slice(&sc.finish());
    assert_eq!(&out[..7], b"x s3cr3");
    assert_eq!(&out[7..14], b"*******");
    assert_eq!(&out[14..], &[b'a'; 100]);
    // Far enough after a pause, what went out is forgotten: a later secret is whole.
    let mut sc = Scrubber::new(Arc::clone(&s));
    let mut out = Vec::new();
    out.extend_from_slice(&sc.feed(Bytes::from_static(b"s3cr3")));
    out.extend_from_slice(&sc.release());
    out.extend_from_slice(&sc.feed(Bytes::copy_from_slice(&[b'.'; 80])));
    out.extend_from_slice(&sc.feed(Bytes::from_static(b"s3cr3t-VALUE!")));
    out.extend_from_slice(&sc.finish());
    let mut want = b"s3cr3".to_vec();
    want.extend_from_slice(&[b'.'; 80]);
    want.extend_from_slice(b"PH!");
    assert_eq!(out, want);
}

#[test]
fn escaped_spellings_are_replaced() {
    let s = set(&[(r#"Sk/Ab+c<d>&e'f=g"h\i"#, "PH")]);
    for spelled in [
        r#"Sk/Ab+c<d>&e'f=g"h\i"#,
        r#"Sk\/Ab+c<d>&e'f=g\"h\\i"#,
        r#"Sk\u002fAb\u002bc\u003cd\u003e\u0026e\u0027f\u003dg\u0022h\u005ci"#,
        r#"Sk\u002FAb\u002Bc\u003Cd\u003E\u0026e\u0027f\u003Dg\u0022h\u005Ci"#,
        r#"Sk%2FAb%2Bc%3Cd%3E%26e%27f%3Dg%22h%5Ci"#,
        r#"Sk%2fAb%2bc%3cd%3e%26e%27f%3dg%22h%5ci"#,
        r#"\u0053k%2fAb\u002bc<d>&e'f%3d\u0067\"h\\%69"#,
        // HTML's escapes (an error page quoting the request), named and numeric.
        r#"Sk/Ab+c&lt;d&gt;&amp;e&#39;f=g&quot;h\i"#,
        r#"Sk/Ab+c&#60;d&#62;&#38;e&#x27;f=g&#34;h\i"#,
        r#"Sk/Ab+c&#x3C;d&#x3e;&#x26;e&apos;f=g&#x22;h\i"#,
        r#"Sk/Ab+c&lt;d&gt;&amp;e&#39;f=g\&quot;h\\i"#,
    ] {
        let text = format!(r#"{{"k": "{spelled}"}} tail"#);
        let want = br#"{"k": "PH"} tail"#.to_vec();
        assert_eq!(stream(&s, &[text.as_bytes()]), want, "{spelled}");
        // Split anywhere, held back across chunks.
        let t = text.as_bytes();
        for i in 0..=t.len() {
            assert_eq!(stream(&s, &[&t[..i], &t[i..]]), want, "{spelled} cut {i}");
        }
        let masked = Arc::new(s.masked());
        let got = stream(&masked, &[t]);
        assert_eq!(got.len(), t.len());
        assert!(!String::from_utf8_lossy(&got).contains("Sk"), "{spelled}");
    }
    // Near misses stay as they are.
    let s = set(&[("a/b", "PH")]);
    for kept in [r"a\u002gb", "a%2gb", r"a\/c", r"a\U002Fb", "a%2", r"a\"] {
        assert_eq!(stream(&s, &[kept.as_bytes()]), kept.as_bytes(), "{kept}");
    }
    // A secret that begins with an escaped byte; an entity for a byte that is not there.
    let s = set(&[("<tok", "PH")]);
    assert_eq!(stream(&s, &[b"x &lt;tok y"]), b"x PH y");
    assert_eq!(stream(&s, &[b"x &", b"#60;tok y"]), b"x PH y");
    for kept in ["&lt;toc", "&gt;tok", "&lt tok", "&#61;tok", "&amp;tok"] {
        assert_eq!(stream(&s, &[kept.as_bytes()]), kept.as_bytes(), "{kept}");
    }
}

#[test]
fn overlapping_secrets_leftmost_longest() {
    let s = set(&[("abc", "1"), ("abcdef", "2"), ("cde", "3")]);
    assert_eq!(stream(&s, &[b"xabcdefx abcx cdex"]), b"x2x 1x 3x".to_vec());
}

#[test]
fn every_way_of_finding_first_bytes_finds_the_same_secrets() {
    // One secret's first byte with `\\` and `%` (`memchr3`), and two secrets' (the table).
    let text = b"xx tok-1 y %74ok-1 z \\u0074ok-1 w sec-2 q sec-2 tok-1";
    let one = set(&[("tok-1", "PH1")]);
    assert!(one.find.few.groups().is_some());
    let first = b"xx PH1 y PH1 z PH1 w sec-2 q sec-2 PH1".to_vec();
    assert_eq!(stream(&one, &[text]), first);
    let two = set(&[("tok-1", "PH1"), ("sec-2", "PH2")]);
    assert!(two.find.few.groups().is_none());
    let both = b"xx PH1 y PH1 z PH1 w PH2 q PH2 PH1".to_vec();
    assert_eq!(stream(&two, &[text]), both);
    // Split anywhere, each way agrees.
    for cut in 1..text.len() {
        let (a, b) = text.split_at(cut);
        assert_eq!(stream(&one, &[a, b]), first, "cut {cut}");
        assert_eq!(stream(&two, &[a, b]), both, "cut {cut}");
    }
    // Candidates close together (the table takes over the scan): every secret still found.
    let dense = [
        b"t%t\\t ".repeat(40),
        b"tok-1".to_vec(),
        b" t".repeat(40),
        b"tok-1".to_vec(),
    ]
    .concat();
    let mut cur = Cursor::default();
    let mut out = Vec::new();
    assert_eq!(one.replace_before(&dense, dense.len(), &mut out).1, 2);
    assert!(one.next_match(&mut cur, &dense, 0, dense.len()).is_some());
    assert!(cur.dense);
}

#[test]
fn many_occurrences_stay_linear() {
    let s = set(&[("0123456789abcdef", "P"), ("never-there", "Q")]);
    let body = "0123456789abcdef".repeat(100_000);
    let t = std::time::Instant::now();
    let out = stream(&s, &[body.as_bytes()]);
    assert_eq!(out.len(), 100_000);
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
}

/// A header whose name holds the secret (an origin that reflects request values as names)
/// is dropped: names arrive lower-cased, so a secret in mixed case is matched in lower case.
#[test]
fn a_header_named_by_a_secret_is_dropped() {
    let s = set(&[("Tok-Secret-9", "PH")]);
    let mut h = HeaderMap::new();
    h.insert("x-tok-secret-9", HeaderValue::from_static("1"));
    h.insert("tok%2dsecret-9-x", HeaderValue::from_static("1"));
    h.insert("x-other", HeaderValue::from_static("v"));
    assert_eq!(scrub_headers(&mut h, &s), 2);
    assert_eq!(h.len(), 1);
    assert_eq!(h["x-other"], "v");
}

#[test]
fn headers_are_scrubbed() {
    let s = set(&[("tok-1", "openshell:resolve:env:K")]);
    let mut h = HeaderMap::new();
    h.append("x-echo", HeaderValue::from_static("Bearer tok-1"));
    h.append("x-echo", HeaderValue::from_static("plain"));
    h.append("x-other", HeaderValue::from_static("v"));
    assert_eq!(scrub_headers(&mut h, &s), 1);
    let got: Vec<&[u8]> = h
        .get_all("x-echo")
        .iter()
        .map(HeaderValue::as_bytes)
        .collect();
    assert_eq!(got, [&b"Bearer openshell:resolve:env:K"[..], b"plain"]);
    assert_eq!(h["x-other"], "v");
}

#[tokio::test]
async fn a_response_body_is_scrubbed_across_frames_with_trailers() {
    let s = set(&[("tok-secret", "PH")]);
    let body = Frames(
        [
            Frame::data(Bytes::from_static(b"echo: tok-")),
            Frame::data(Bytes::from_static(b"secret; tok-se")),
            Frame::trailers({
                let mut t = HeaderMap::new();
                t.insert("x-t", HeaderValue::from_static("tok-secret"));
                t
            }),
        ]
        .into(),
    );
    let response = Response::builder()
        .header("content-length", "24")
        .header("x-echo", "tok-secret")
        .body(body)
        .unwrap();
    let hits = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let h = Arc::clone(&hits);
    let r = scrub_response(
        response,
        s,
        Box::new(move || {
            h.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }),
    )
    .await
    .unwrap();
    assert!(r.headers().get("content-length").is_none());
    assert_eq!(r.headers()["x-echo"], "PH");
    let collected = r.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["x-t"], "PH");
    assert_eq!(&collected.to_bytes()[..], b"echo: PH; tok-se");
    assert_eq!(hits.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_binary_body_keeps_its_length() {
    let s = set(&[("tok-secret", "openshell:resolve:env:K")]);
    let grpc = |ct: &str| {
        Response::builder()
            .header("content-type", ct)
            .header("x-echo", "tok-secret")
            .body(http_body_util::Full::new(Bytes::from_static(
                b"\x00\x00\x00\x00\x0etok-secret abc",
            )))
            .unwrap()
    };
    let r = scrub_response(
        grpc("application/grpc+proto"),
        Arc::clone(&s),
        Box::new(|| {}),
    )
    .await
    .unwrap();
    assert_eq!(r.headers()["x-echo"], "openshell:resolve:env:K");
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"\x00\x00\x00\x00\x0e********** abc");
    let r = scrub_response(grpc("Text/Plain; charset=utf-8"), s, Box::new(|| {}))
        .await
        .unwrap();
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        &body[..],
        b"\x00\x00\x00\x00\x0eopenshell:resolve:env:K abc"
    );
}

#[tokio::test]
async fn an_encoded_body_is_refused() {
    let s = set(&[("tok", "PH")]);
    let response = Response::builder()
        .header("content-encoding", "gzip")
        .body(http_body_util::Full::new(Bytes::from_static(b"\x1f\x8b")))
        .unwrap();
    let err = scrub_response(response, Arc::clone(&s), Box::new(|| {}))
        .await
        .unwrap_err();
    assert_eq!(err, ScrubError::Encoded("gzip".into()));
    let response = Response::builder()
        .header("transfer-encoding", "br, chunked")
        .body(http_body_util::Full::new(Bytes::from_static(b"x")))
        .unwrap();
    let err = scrub_response(response, Arc::clone(&s), Box::new(|| {}))
        .await
        .unwrap_err();
    assert_eq!(err, ScrubError::Encoded("br".into()));
    assert_eq!(
        (err.code().status(), err.code().as_str()),
        (502, "credential_response_encoded")
    );
}

#[tokio::test]
async fn a_compressed_body_without_a_declared_encoding_is_refused() {
    let s = set(&[("tok", "PH")]);
    for (start, format) in [
        (&b"\x1f\x8b\x08\x00rest"[..], "gzip"),
        (b"\x28\xb5\x2f\xfdrest", "zstd"),
        (b"x\x9crest", "zlib"),
        (b"\xfd7zXZ\x00rest", "xz"),
        (b"PK\x03\x04rest", "zip"),
        // The finding: each of these passed unrecognised and the client unpacked the secret.
        (b"x^\x4b\x4c\x4a\x06\x00", "zlib"),
        (b"h\x81\x4b\x4c\x4a\x06\x00", "zlib"),
        (b"BZh91AY&SY", "bzip2"),
        (b"\x5d\x00\x00\x80\x00\xff\xff", "lzma"),
        (b"\x04\x22\x4d\x18\x64\x40", "lz4"),
        (b"\x1f\x9d\x90rest", "compress"),
        (b"7z\xbc\xaf\x27\x1c\x00\x04", "7z"),
        (b"PK\x05\x06\x00\x00\x00\x00", "zip"),
        (b"PK\x07\x08PK\x03\x04", "zip"),
    ] {
        // The magic bytes split over one-byte frames are still seen.
        let frames: Vec<&[u8]> = start.chunks(1).collect();
        let response = Response::builder()
            .header("content-type", "application/octet-stream")
            .body(frames_of(&frames))
            .unwrap();
        let err = scrub_response(response, Arc::clone(&s), Box::new(|| {}))
            .await
            .unwrap_err();
        assert_eq!(err, ScrubError::Undeclared(format));
        assert_eq!(err.code(), "credential_response_encoded");
    }
    // Other bodies, however framed, pass whole: the bytes read early come first.
    for text in [&b"x"[..], b"", b"{\"a\": \"tok\"}", b"\x1f"] {
        let frames: Vec<&[u8]> = text.chunks(1).collect();
        let response = Response::builder().body(frames_of(&frames)).unwrap();
        let r = scrub_response(response, Arc::clone(&s), Box::new(|| {}))
            .await
            .unwrap();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        let want = String::from_utf8_lossy(text).replace("tok", "PH");
        assert_eq!(&body[..], want.as_bytes());
    }
}

#[test]
fn set_debug_hides_secrets() {
    let s = set(&[("tok-secret", "PH")]);
    assert_eq!(format!("{s:?}"), "ScrubSet { entries: 1 }");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// However a body is cut into chunks, the stream comes out as a whole-body
        /// replacement would, and no secret survives (replacements use letters the
        /// secrets and the text do not, so neither can form a secret with the other).
        #[test]
        fn streaming_agrees_with_a_whole_body_pass(
            secrets in proptest::collection::vec("[ab]{1,6}", 1..4),
            text in "[abc]{0,200}",
            mut cuts in proptest::collection::vec(0usize..200, 0..10),
        ) {
            let mut set = ScrubSet::default();
            for (i, secret) in secrets.iter().enumerate() {
                set.add(secret.as_bytes(), format!("<{}>", "XYZ".as_bytes()[i % 3] as char).as_bytes());
            }
            let set = Arc::new(set);
            let text = text.as_bytes();
            let mut whole = Vec::new();
            set.replace_all(text, &mut whole);
            cuts.iter_mut().for_each(|c| *c = (*c).min(text.len()));
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for c in cuts {
                chunks.push(&text[last..c]);
                last = c;
            }
            chunks.push(&text[last..]);
            let streamed = stream(&set, &chunks);
            prop_assert_eq!(&streamed, &whole);
            for secret in &secrets {
                prop_assert!(find(&streamed, secret.as_bytes()).is_none());
            }
        }

        /// With pauses (`release`) anywhere between chunks, no secret reaches the client
        /// whole: one cut by a pause has its beginning out and its rest replaced.
        #[test]
        fn pauses_never_let_a_secret_through_whole(
            secrets in proptest::collection::vec("[ab]{2,6}", 1..3),
            text in "[abc]{0,120}",
            mut cuts in proptest::collection::vec((0usize..120, any::<bool>()), 0..10),
        ) {
            let mut set = ScrubSet::default();
            for (i, secret) in secrets.iter().enumerate() {
                set.add(secret.as_bytes(), format!("<{}>", "XYZ".as_bytes()[i % 3] as char).as_bytes());
            }
            let set = Arc::new(set);
            let text = text.as_bytes();
            cuts.iter_mut().for_each(|c| c.0 = c.0.min(text.len()));
            cuts.sort_unstable();
            let mut sc = Scrubber::new(Arc::clone(&set));
            let mut out = Vec::new();
            let mut last = 0;
            for (c, pause) in cuts {
                out.extend_from_slice(&sc.feed(Bytes::copy_from_slice(&text[last..c])));
                if pause {
                    out.extend_from_slice(&sc.release());
                }
                last = c;
            }
            out.extend_from_slice(&sc.feed(Bytes::copy_from_slice(&text[last..])));
            out.extend_from_slice(&sc.finish());
            for secret in &secrets {
                prop_assert!(find(&out, secret.as_bytes()).is_none(), "{:?}", String::from_utf8_lossy(&out));
            }
        }

        /// The quick tests that skip a byte (the first-byte table, `may_start`) never skip
        /// one where a spelling of a secret starts, escapes included: the scan agrees with
        /// one that tries every secret at every byte, whole and streamed.
        #[test]
        fn the_quick_skips_miss_no_spelling(
            secrets in proptest::collection::vec("[ab/\"\\\\u%é&<']{1,4}", 1..4),
            tokens in proptest::collection::vec((0usize..16, 0usize..8), 0..40),
            mut cuts in proptest::collection::vec(0usize..400, 0..6),
        ) {
            // Each token one character, plain or spelled as an encoder may (`\u00XX`, `%XX`
            // in either case, a short escape, an HTML entity), a lone `\\`, `%`, `\\u`, `\\u00`,
            // `&`, `&l`, `&#` or `&#x`, or a whole secret, each of its bytes spelled one of
            // those ways.
            fn spell(text: &mut Vec<u8>, b: u8, form: usize) {
                match form {
                    1 if b < 0x80 => text.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
                    2 => text.extend_from_slice(format!("%{b:02X}").as_bytes()),
                    3 => text.extend_from_slice(format!("%{b:02x}").as_bytes()),
                    4 if matches!(b, b'/' | b'\\' | b'"') => text.extend_from_slice(&[b'\\', b]),
                    7 if b == b'"' => text.extend_from_slice(b"\\&quot;"),
                    5..=7 if !spelling::entities(b).is_empty() => {
                        text.extend_from_slice(spelling::entities(b)[form - 5]);
                    }
                    _ => text.push(b),
                }
            }
            let mut text = Vec::new();
            for (c, form) in tokens {
                if c >= 12 {
                    let secret = secrets[(c - 12) % secrets.len()].as_bytes();
                    for (k, &b) in secret.iter().enumerate() {
                        spell(&mut text, b, (form + k) % 8);
                    }
                    continue;
                }
                // `é` is two bytes whose hex digits are letters (`%C3%A9` or `%c3%a9`).
                let b = [b'a', b'b', b'/', b'"', b'\\', b'u', b'%', b'x', 0xc3, 0xa9, b'&', b'<'][c];
                match form {
                    4 => text.extend_from_slice(
                        [&b"\\"[..], b"%", b"\\u", b"\\u00", b"&", b"&l", b"&#", b"&#x"][c % 8],
                    ),
                    _ => spell(&mut text, b, form),
                }
            }
            let mut set = ScrubSet::default();
            for (i, secret) in secrets.iter().enumerate() {
                set.add(secret.as_bytes(), format!("<{}>", "XYZ".as_bytes()[i % 3] as char).as_bytes());
            }
            let set = Arc::new(set);
            let text = text.as_slice();
            let mut whole = Vec::new();
            let hits = set.replace_all(text, &mut whole);
            let (reference, reference_hits) = replace_everywhere(&set, text);
            prop_assert_eq!(&whole, &reference);
            prop_assert_eq!(hits, reference_hits);
            cuts.iter_mut().for_each(|c| *c = (*c).min(text.len()));
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut last = 0;
            for c in cuts {
                chunks.push(&text[last..c]);
                last = c;
            }
            chunks.push(&text[last..]);
            prop_assert_eq!(&stream(&set, &chunks), &reference);
        }
    }
}

/// `replace_all` without any quick test: every secret tried at every byte, leftmost first,
/// the longest on a tie.
fn replace_everywhere(set: &ScrubSet, text: &[u8]) -> (Vec<u8>, u64) {
    let (mut out, mut hits, mut i) = (Vec::new(), 0, 0);
    while i < text.len() {
        let longest = set
            .pairs
            .iter()
            .filter_map(|(secret, replacement)| match match_at(&text[i..], secret) {
                Match::Full(n) => Some((n, replacement)),
                Match::Partial | Match::No => None,
            })
            .max_by_key(|(n, _)| *n);
        match longest {
            Some((n, replacement)) => {
                out.extend_from_slice(replacement);
                i += n;
                hits += 1;
            }
            None => {
                out.push(text[i]);
                i += 1;
            }
        }
    }
    (out, hits)
}

/// The first occurrence of `needle` (not empty) in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let last_start = hay.len().checked_sub(needle.len())?;
    let mut i = 0;
    while i <= last_start {
        let off = hay[i..=last_start].iter().position(|&b| b == first)?;
        let at = i + off;
        if hay[at + 1..at + needle.len()] == *rest {
            return Some(at);
        }
        i = at + 1;
    }
    None
}

/// A body of the given frames.
struct Frames(VecDeque<Frame<Bytes>>);

fn frames_of(chunks: &[&[u8]]) -> Frames {
    Frames(
        chunks
            .iter()
            .map(|c| Frame::data(Bytes::copy_from_slice(c)))
            .collect(),
    )
}

impl Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// A `206` from a credentialed endpoint is refused: sluice asked for no range, and a piece
/// of a stored secret could be too short to recognise.
#[tokio::test]
async fn a_partial_response_is_refused() {
    let s = set(&[("tok", "PH")]);
    let response = Response::builder()
        .status(206)
        .header("content-range", "bytes 0-1/3")
        .header("content-type", "text/plain")
        .body(http_body_util::Full::new(Bytes::from_static(b"to")))
        .unwrap();
    let err = scrub_response(response, Arc::clone(&s), Box::new(|| {}))
        .await
        .unwrap_err();
    assert_eq!(err, ScrubError::Partial);
    assert_eq!(
        (err.code().status(), err.code().as_str()),
        (502, "credential_response_partial")
    );
}

/// A body whose frames come from a channel, as an upstream's arrive.
struct Channel(tokio::sync::mpsc::Receiver<Frame<Bytes>>);

impl Body for Channel {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|f| f.map(Ok))
    }
}

/// What a client receives of `hello <tail>` sent by an upstream that then pauses a second
/// before it ends the body: each frame's size and when it came (ms, on tokio's paused clock).
async fn frames_through_a_pause(tail: &str) -> Vec<(usize, u128)> {
    let s = set(&[("s3cr3t-VALUE-7f3a9c", "PH")]);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let response = Response::builder()
        .header("content-type", "text/plain")
        .body(Channel(rx))
        .unwrap();
    let start = tokio::time::Instant::now();
    let tail = tail.to_string();
    tokio::spawn(async move {
        tx.send(Frame::data(Bytes::from(format!("hello {tail}"))))
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    });
    let mut body = scrub_response(response, s, Box::new(|| {}))
        .await
        .unwrap()
        .into_body();
    let mut got = Vec::new();
    while let Some(frame) = body.frame().await {
        let data = frame.unwrap().into_data().unwrap();
        got.push((data.len(), start.elapsed().as_millis()));
    }
    got
}

/// An upstream that pauses after a tail: the tail goes out `RELEASE_AFTER` later, whether or
/// not it begins a secret, not when the body ends.
#[tokio::test(start_paused = true)]
async fn a_paused_body_lets_its_tail_go_at_the_same_time_whatever_it_is() {
    let guessed = frames_through_a_pause("s3cr3t-VAL").await;
    let wrong = frames_through_a_pause("xxxxxxxxxx").await;
    assert_eq!(guessed, wrong);
    assert_eq!(guessed, [(16, RELEASE_AFTER.as_millis())]);
}

/// An upstream that trickles (20 bytes every 50 ms, never pausing for `RELEASE_AFTER`) does
/// not keep held bytes waiting until enough more push them out: every byte reaches the
/// client within about `RELEASE_AFTER` and one gap of its arrival.
#[tokio::test(start_paused = true)]
async fn a_trickling_body_is_not_held_back_longer_than_the_release_time() {
    let s = set(&[("s3cr3t-VALUE-7f3a9c", "PH")]);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let response = Response::builder()
        .header("content-type", "text/plain")
        .body(Channel(rx))
        .unwrap();
    let start = tokio::time::Instant::now();
    tokio::spawn(async move {
        for _ in 0..20 {
            tx.send(Frame::data(Bytes::from_static(&[b'a'; 20])))
                .await
                .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    let mut body = scrub_response(response, s, Box::new(|| {}))
        .await
        .unwrap()
        .into_body();
    let mut received = 0u128;
    while let Some(frame) = body.frame().await {
        received += frame.unwrap().into_data().unwrap().len() as u128;
        let ms = start.elapsed().as_millis();
        if ms < 1000 {
            // Sent by `ms - 200`: 20 bytes at 0, 50, 100, ... ms.
            let due = if ms >= 200 {
                20 * ((ms - 200) / 50 + 1)
            } else {
                0
            };
            assert!(received >= due, "{received} bytes by {ms} ms, {due} due");
        }
    }
    assert_eq!(received, 400);
}
