//! Tests of the streaming JSON `_method` reader: members as parsers read them, a reference
//! built from the members a generated object holds that the stream must agree with however
//! the body is cut, and what is held back.

use proptest::prelude::*;

use super::*;
use crate::http::body_override::BodyKind;
use crate::http::body_override::streamed::{self, Streamed};
use crate::http::method_override::is_method_key;

fn methods(body: &str) -> Vec<String> {
    from_body(body.as_bytes())
        .unwrap()
        .into_iter()
        .map(|o| o.method)
        .collect()
}

/// What the stream makes of a JSON `body` cut at `cuts` (`watch`: see [`Streamed`]).
fn stream(body: &[u8], cuts: &[usize], watch: usize) -> Streamed {
    let kind = BodyKind {
        form: None,
        json: true,
    };
    streamed::stream(&kind, body, cuts, watch)
}

#[test]
fn top_level_method_members_are_read_as_parsers_spell_them() {
    assert_eq!(methods(r#"{"_method":"DELETE"}"#), ["DELETE"]);
    assert_eq!(methods(r#" { "a" : 1 , "_method" : " put " } "#), ["PUT"]);
    // Escapes in the key and the value.
    assert_eq!(methods(r#"{"\u005fmethod":"DELETE"}"#), ["DELETE"]);
    assert_eq!(
        methods(r#"{"\u005F\u006De\u0074hod":"\u0064elete"}"#),
        ["DELETE"]
    );
    // The name rules of forms and queries: any case, an array suffix.
    assert_eq!(
        methods(r#"{"_METHOD":"patch","_method[]":"put"}"#),
        ["PATCH", "PUT"]
    );
    // Duplicates: each is read (PHP and JavaScript keep the last).
    assert_eq!(
        methods(r#"{"_method":"GET","b":[],"_method":"DELETE"}"#),
        ["GET", "DELETE"]
    );
    // Strings that hold quotes, escapes and brackets do not confuse the structure.
    assert_eq!(
        methods(r#"{"a":"}\"{[","b\\":{"c":"\"_method\":\"x\""},"_method":"DELETE"}"#),
        ["DELETE"]
    );
    // After a value without a comma a string is still read as a key.
    assert_eq!(methods(r#"{"a":1 "_method":"PUT"}"#), ["PUT"]);
    // Each top-level value counts.
    assert_eq!(methods(r#"{"a":1}{"_method":"PUT"}"#), ["PUT"]);
}

#[test]
fn other_members_are_not_overrides() {
    for body in [
        r#"{"a":{"_method":"DELETE"}}"#,
        r#"{"a":["_method","DELETE"]}"#,
        r#"[{"_method":"DELETE"}]"#,
        r#"["_method","DELETE"]"#,
        r#"{"a":"_method","b":"DELETE"}"#,
        r#"{"x_method":"DELETE","_methods":"PUT","method":"PUT"}"#,
        r#""_method""#,
        // Not JSON: a `_method` key without a `:` is no member.
        r#"{"_method" "DELETE"}"#,
        r#"{"_method""#,
        r#"{"_method":"#,
        "",
    ] {
        assert_eq!(methods(body), Vec::<String>::new(), "{body}");
    }
}

#[test]
fn values_that_are_not_strings_are_refused() {
    for (body, kind) in [
        (r#"{"_method":["DELETE"]}"#, "an array"),
        (r#"{"_method":{"a":"DELETE"}}"#, "an object"),
        (r#"{"_method":1}"#, "a number"),
        (r#"{"_method":true}"#, "a boolean"),
        (r#"{"_method": null}"#, "null"),
    ] {
        let e = from_body(body.as_bytes()).unwrap_err();
        assert_eq!(
            e,
            InvalidOverride::JsonUnreadable(format!("its value is {kind}, not a string")),
            "{body}"
        );
    }
    for body in [r#"{"_method":"DEL ETE"}"#, r#"{"_method":"DELETE\u0000"}"#] {
        assert!(
            matches!(
                from_body(body.as_bytes()),
                Err(InvalidOverride::NotAMethod { .. })
            ),
            "{body}"
        );
    }
}

#[test]
fn a_method_member_cut_at_every_byte_is_held_until_read() {
    let body = br#"{"pad":"a\"b","n":[1,{"_method":"x"}],"\u005fmethod" : "DELETE","z":2}"#;
    let watch = body.windows(6).position(|w| w == b"\\u005f").unwrap();
    for at in 0..=body.len() {
        for cuts in [vec![at], vec![at, at + 1, at + 7]] {
            let s = stream(body, &cuts, watch);
            assert_eq!(s.verdict.as_ref().unwrap()[0].method, "DELETE", "{cuts:?}");
            assert!(
                !s.early,
                "cut at {cuts:?}: the member went before it was read"
            );
            assert!(
                s.out == body,
                "cut at {cuts:?}: the bytes handed back differ"
            );
        }
    }
    let every: Vec<usize> = (1..body.len()).collect();
    let s = stream(body, &every, watch);
    assert!(!s.early && s.out == body && s.verdict.is_ok());
}

#[test]
fn huge_members_stream_with_bounded_memory() {
    let pad = "p".repeat(5 << 20);
    let cuts: Vec<usize> = (1..(5 << 20) / 16_384 + 2).map(|i| i * 16_384).collect();
    // A huge string value, a huge key, huge nesting: nothing of them is held.
    for body in [
        format!(r#"{{"pad":"{pad}","_method":"DELETE"}}"#),
        format!(r#"{{"{pad}":1,"_method":"DELETE"}}"#),
        format!(
            r#"{{"a":[{}],"_method":"DELETE"}}"#,
            "[1,".repeat(1 << 20) + &"]".repeat(1 << 20)
        ),
    ] {
        let body = body.as_bytes();
        let s = stream(body, &cuts, body.len() - 20);
        assert_eq!(s.verdict.unwrap()[0].method, "DELETE");
        assert!(s.out == body);
        assert!(s.held_max <= 16_384 + 32, "held {}", s.held_max);
    }
}

#[test]
fn what_is_held_is_bounded() {
    let long = |n: usize| " ".repeat(n);
    // A key that may still be `_method` (PHP drops leading spaces) for more than 1 KiB.
    let body = format!(r#"{{"{}_method":"GET"}}"#, long(MAX_HELD_KEY));
    assert!(matches!(
        from_body(body.as_bytes()),
        Err(InvalidOverride::JsonUnreadable(_))
    ));
    // White space after the key, or a value, of more than 1 KiB.
    for body in [
        format!(r#"{{"_method"{}:"GET"}}"#, long(MAX_HELD_VALUE + 1)),
        format!(r#"{{"_method":"{}GET"}}"#, long(MAX_HELD_VALUE + 1)),
    ] {
        assert!(matches!(
            from_body(body.as_bytes()),
            Err(InvalidOverride::JsonUnreadable(_))
        ));
    }
    // Within the bounds it is read.
    let body = format!(
        r#"{{"{}_method"{}:"{}GET"}}"#,
        long(900),
        long(400),
        long(500)
    );
    assert_eq!(methods(&body), ["GET"]);
}

#[test]
fn which_bodies_are_json() {
    let of = |m: &str, cts: &[&str]| is_json(m, cts.iter().map(|c| c.as_bytes()));
    assert!(of("POST", &["application/json"]));
    assert!(of("PUT", &["application/vnd.api+JSON; charset=utf-8"]));
    assert!(of("POST", &["text/plain", "text/json"]));
    assert!(of("POST", &[]));
    assert!(!of("PUT", &[]));
    assert!(!of("POST", &["application/x-www-form-urlencoded"]));
}

// === a reference: the members of a generated object ===

/// A key as written in JSON (escaped or not) and what it decodes to.
fn key() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        Just((r#""_method""#.to_string(), "_method".to_string())),
        Just((r#""\u005fmethod""#.to_string(), "_method".to_string())),
        Just((r#""_MeThOd""#.to_string(), "_MeThOd".to_string())),
        Just((r#"" _method""#.to_string(), " _method".to_string())),
        Just((r#""_method[]""#.to_string(), "_method[]".to_string())),
        Just((r#""_metho\"d""#.to_string(), "_metho\"d".to_string())),
        Just((r#""_meth""#.to_string(), "_meth".to_string())),
        Just((r#""a\\""#.to_string(), "a\\".to_string())),
        Just((r#""x_method""#.to_string(), "x_method".to_string())),
    ]
}

/// A value as written, and the method it names when it is a string (`None`: not a string).
fn value() -> impl Strategy<Value = (String, Option<String>)> {
    let nested = prop_oneof![
        Just(r#"{"_method":"DELETE"}"#),
        Just(r#"["_method",{"a":"}"}]"#),
        Just("12"),
        Just("null"),
        Just(r#"{"a":[[["\"]"]]]}"#),
    ];
    prop_oneof![
        prop::sample::select(vec!["GET", "delete", " Put ", "\\u0050OST", "x\\/y"]).prop_map(|m| {
            let text = m.replace("\\u0050", "P").replace("\\/", "/");
            (format!("\"{m}\""), Some(text))
        }),
        nested.prop_map(|v| (v.to_string(), None)),
    ]
}

/// A generated object's text, and its reference verdict.
type Generated = (Vec<u8>, Result<Vec<String>, ()>);

/// A generated object: its text, and the reference verdict (each `_method` member's string
/// value, in order; a refusal at the first one that is not a string or not a method).
fn object() -> impl Strategy<Value = Generated> {
    prop::collection::vec((key(), value(), 0usize..3), 0..6).prop_map(|members| {
        let ws = ["", " ", "\r\n\t "];
        let mut text = String::from("{");
        let mut found = Vec::new();
        let mut refused = false;
        for (i, ((raw, decoded), (v, method), w)) in members.into_iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&format!("{}{raw}{}:{}{v}", ws[w], ws[w], ws[w]));
            if refused || !is_method_key(decoded.as_bytes()) {
                continue;
            }
            refused = match method {
                Some(m) => {
                    method_override::push(&mut found, Source::Json, m.trim_ascii().as_bytes())
                        .is_err()
                }
                None => true,
            };
        }
        text.push('}');
        let verdict = match refused {
            true => Err(()),
            false => Ok(found.into_iter().map(|o| o.method).collect()),
        };
        (text.into_bytes(), verdict)
    })
}

fn object_and_cuts() -> impl Strategy<Value = (Generated, Vec<usize>)> {
    object().prop_flat_map(|o| {
        let len = o.0.len();
        (Just(o), prop::collection::vec(0..=len, 0..8))
    })
}

/// Bodies of JSON tokens, valid or not: the stream must agree with the whole body.
fn tokens_and_cuts() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    let token = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        " ",
        "\"",
        "\\",
        "\\u005f",
        "\\u00",
        "_method",
        "\"_method\"",
        "\"DELETE\"",
        "get",
        "1",
        "null",
        "\"a\"",
        "\\\"",
    ]);
    prop::collection::vec(token, 0..40).prop_flat_map(|t| {
        let body = t.concat().into_bytes();
        let len = body.len();
        (Just(body), prop::collection::vec(0..=len, 0..8))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_stream_reads_a_generated_object_as_its_members_say(((body, want), cuts) in object_and_cuts()) {
        for cuts in [cuts, (1..body.len()).collect()] {
            let s = stream(&body, &cuts, usize::MAX);
            let got = s.verdict.map(|f| f.into_iter().map(|o| o.method).collect::<Vec<_>>());
            prop_assert_eq!(got.clone().map_err(|_| ()), want.clone(), "{}", String::from_utf8_lossy(&body));
            if got.is_ok() {
                prop_assert!(s.out == body);
            }
        }
    }

    #[test]
    fn the_stream_agrees_with_the_whole_body_however_it_is_cut((body, cuts) in tokens_and_cuts()) {
        let whole = from_body(&body);
        for cuts in [cuts, (1..body.len()).collect()] {
            let s = stream(&body, &cuts, usize::MAX);
            prop_assert_eq!(&s.verdict, &whole);
            if whole.is_ok() {
                prop_assert!(s.out == body);
            }
        }
    }
}
