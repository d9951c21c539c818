use proptest::prelude::*;

use super::*;
use crate::credentials::binding::tests::bindings;

const SECRET: &str = "ghp_s3cr3t-VALUE-7f3a9c";
const PLACEHOLDER: &str = "openshell:resolve:env:GITHUB_TOKEN";

fn set() -> ScrubSet {
    bindings(&[("GITHUB_TOKEN", SECRET)])
        .endpoint_secrets(&sluice_addr::Authority::new("api.github.com", 443))
}

fn frame(fin: bool, opcode: OpCode, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::encode(fin, opcode, payload, &mut out);
    out
}

/// What a strict client makes of a server's bytes: whole messages and control frames in
/// order, each frame checked against RFC 6455 (a violation panics the test).
#[derive(Debug, PartialEq, Eq)]
enum Got {
    Message(OpCode, Vec<u8>),
    Control(OpCode, Vec<u8>),
}

fn client_view(mut bytes: &[u8]) -> Vec<Got> {
    let mut got = Vec::new();
    let mut open: Option<(OpCode, Vec<u8>)> = None;
    while !bytes.is_empty() {
        let (h, n) = frame::parse(bytes).unwrap().expect("a whole header");
        let len = usize::try_from(h.len).unwrap();
        let payload = bytes[n..n + len].to_vec();
        bytes = &bytes[n + len..];
        match h.opcode {
            OpCode::Continuation => {
                let (_, buf) = open.as_mut().expect("a continuation continues a message");
                buf.extend_from_slice(&payload);
            }
            OpCode::Text | OpCode::Binary => {
                assert!(open.is_none(), "a message starts inside another");
                open = Some((h.opcode, payload));
            }
            op => {
                assert!(h.fin && payload.len() <= MAX_CONTROL);
                if op == OpCode::Close && payload.len() > 2 {
                    std::str::from_utf8(&payload[2..]).expect("a close reason is UTF-8");
                }
                got.push(Got::Control(op, payload));
                continue;
            }
        }
        if h.fin {
            let (op, buf) = open.take().unwrap();
            if op == OpCode::Text {
                std::str::from_utf8(&buf).expect("a text message is UTF-8");
            }
            got.push(Got::Message(op, buf));
        }
    }
    assert!(open.is_none(), "a message left unfinished");
    got
}

fn run(input: &[u8], chunk: usize) -> (Vec<u8>, u64) {
    let mut s = FrameScrubber::new(&set());
    let mut out = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        s.push(piece, &mut out).unwrap();
    }
    (out, s.hits())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_secret_split_across_fragments_with_a_ping_between_is_replaced_at_any_read_size() {
    let auth = format!("Bearer {SECRET}");
    let (a, b) = auth.as_bytes().split_at(14);
    let mut input = frame(false, OpCode::Text, &[b"part one ".as_slice(), a].concat());
    input.extend(frame(true, OpCode::Ping, b"are you there"));
    input.extend(frame(
        true,
        OpCode::Continuation,
        &[b, b" end".as_slice()].concat(),
    ));
    input.extend(frame(
        true,
        OpCode::Binary,
        &[b"\x00\x01", auth.as_bytes(), b"\xff"].concat(),
    ));
    let mut close = 1000u16.to_be_bytes().to_vec();
    close.extend_from_slice(format!("bye {auth}").as_bytes());
    input.extend(frame(true, OpCode::Close, &close));
    for chunk in 1..input.len() {
        let (out, hits) = run(&input, chunk);
        assert!(!contains(&out, SECRET.as_bytes()), "chunk {chunk}");
        assert_eq!(hits, 3, "chunk {chunk}");
        let stars = "*".repeat(SECRET.len());
        assert_eq!(
            client_view(&out),
            vec![
                Got::Control(OpCode::Ping, b"are you there".to_vec()),
                Got::Message(
                    OpCode::Text,
                    format!("part one Bearer {PLACEHOLDER} end").into_bytes()
                ),
                Got::Message(
                    OpCode::Binary,
                    [b"\x00\x01Bearer ", stars.as_bytes(), b"\xff"].concat()
                ),
                Got::Control(
                    OpCode::Close,
                    [
                        &1000u16.to_be_bytes()[..],
                        format!("bye Bearer {PLACEHOLDER}").as_bytes()
                    ]
                    .concat()
                ),
            ],
            "chunk {chunk}"
        );
    }
}

#[test]
fn a_close_reason_lengthened_past_125_bytes_is_cut_after_scrubbing_at_a_character() {
    // 121 bytes of reason: 99 of 'é' (2 bytes each) and 'x'; the placeholder is longer.
    let mut reason = "é".repeat(49);
    reason.push('x');
    reason.push_str(SECRET);
    let mut close = 1001u16.to_be_bytes().to_vec();
    close.extend_from_slice(reason.as_bytes());
    assert!(close.len() <= MAX_CONTROL);
    let (out, hits) = run(&frame(true, OpCode::Close, &close), 7);
    assert_eq!(hits, 1);
    let got = client_view(&out);
    let [Got::Control(OpCode::Close, payload)] = got.as_slice() else {
        panic!("{got:?}");
    };
    assert!(payload.len() <= MAX_CONTROL);
    assert_eq!(&payload[..2], &1001u16.to_be_bytes());
    let reason = std::str::from_utf8(&payload[2..]).unwrap();
    let whole = format!("{}x{PLACEHOLDER}", "é".repeat(49));
    assert!(whole.starts_with(reason), "{reason}");
    assert!(!contains(payload, SECRET.as_bytes()) && !contains(payload, &SECRET.as_bytes()[..4]));
}

#[test]
fn a_frame_over_the_piece_size_streams_in_bounded_pieces_and_a_secret_across_them_is_caught() {
    let mut payload = vec![b'a'; PIECE - 5];
    payload.extend_from_slice(SECRET.as_bytes());
    payload.extend(vec![b'b'; PIECE * 2]);
    let input = frame(true, OpCode::Text, &payload);
    let mut s = FrameScrubber::new(&set());
    let mut out = Vec::new();
    for piece in input.chunks(10_000) {
        s.push(piece, &mut out).unwrap();
        assert!(s.input.len() < 16, "input held: {}", s.input.len());
        assert!(s.frame.as_ref().is_none_or(|f| f.payload.len() < PIECE));
    }
    assert!(!contains(&out, SECRET.as_bytes()));
    let want = [
        vec![b'a'; PIECE - 5],
        PLACEHOLDER.as_bytes().to_vec(),
        vec![b'b'; PIECE * 2],
    ]
    .concat();
    assert_eq!(client_view(&out), vec![Got::Message(OpCode::Text, want)]);
}

#[test]
fn frames_out_of_sequence_are_errors() {
    let mut s = FrameScrubber::new(&set());
    let mut out = Vec::new();
    assert_eq!(
        s.push(&frame(true, OpCode::Continuation, b"x"), &mut out),
        Err(FrameError::Continuation)
    );
    let mut s = FrameScrubber::new(&set());
    let mut two = frame(false, OpCode::Text, b"x");
    two.extend(frame(true, OpCode::Text, b"y"));
    assert_eq!(s.push(&two, &mut out), Err(FrameError::Interleaved));
    let mut s = FrameScrubber::new(&set());
    // Compressed (RSV1): refused, whatever it carries.
    assert_eq!(
        s.push(&[0xC1, 1, b'x'], &mut out),
        Err(FrameError::Reserved(0x40))
    );
}

proptest! {
    /// Any bytes, in any pieces: an error or frames, never a panic, and never the secret
    /// (the secret is planted in the noise).
    #[test]
    fn arbitrary_bytes_never_panic(noise in proptest::collection::vec(any::<u8>(), 0..600),
                                   at in 0usize..600, chunk in 1usize..64) {
        let mut input = noise;
        let at = at.min(input.len());
        input.splice(at..at, SECRET.bytes());
        let mut s = FrameScrubber::new(&set());
        let mut out = Vec::new();
        for piece in input.chunks(chunk) {
            if s.push(piece, &mut out).is_err() {
                break;
            }
        }
        let _ = s.hits();
    }

    /// Valid server streams (messages fragmented anyhow, control frames between, the secret
    /// anywhere) come out valid, with each message whole and scrubbed, at any read size.
    #[test]
    fn valid_streams_come_out_valid_and_scrubbed(
        messages in proptest::collection::vec(
            (any::<bool>(), proptest::collection::vec(0u8..3, 0..40), 0usize..4, any::<bool>()),
            1..6),
        chunk in 1usize..50,
    ) {
        let mut input = Vec::new();
        let mut want = Vec::new();
        for (text, parts, frags, ping) in messages {
            // Words: 0 = "ab", 1 = "é", 2 = the secret.
            let word = |w: u8, secret: &str| match w { 0 => "ab".to_string(), 1 => "é".to_string(), _ => secret.to_string() };
            let raw: String = parts.iter().map(|&w| word(w, SECRET)).collect();
            let marker = if text { PLACEHOLDER.to_string() } else { "*".repeat(SECRET.len()) };
            let clean: String = parts.iter().map(|&w| word(w, &marker)).collect();
            let bytes = raw.as_bytes();
            let n = frags + 1;
            let size = bytes.len().div_ceil(n).max(1);
            let pieces: Vec<&[u8]> = if bytes.is_empty() { vec![&[][..]] } else { bytes.chunks(size).collect() };
            for (i, p) in pieces.iter().enumerate() {
                let op = if i > 0 { OpCode::Continuation } else if text { OpCode::Text } else { OpCode::Binary };
                input.extend(frame(i + 1 == pieces.len(), op, p));
                if ping && i == 0 {
                    input.extend(frame(true, OpCode::Pong, SECRET.as_bytes()));
                    want.push(Got::Control(OpCode::Pong, "*".repeat(SECRET.len()).into_bytes()));
                }
            }
            want.push(Got::Message(if text { OpCode::Text } else { OpCode::Binary }, clean.into_bytes()));
        }
        let (out, _) = run(&input, chunk);
        prop_assert!(!contains(&out, SECRET.as_bytes()));
        let got = client_view(&out);
        // Control frames may move ahead of a message's end; compare each kind in order.
        let split = |v: &[Got]| -> (Vec<String>, Vec<String>) {
            let (c, m): (Vec<&Got>, Vec<&Got>) = v.iter().partition(|g| matches!(g, Got::Control(..)));
            (c.iter().map(|g| format!("{g:?}")).collect(), m.iter().map(|g| format!("{g:?}")).collect())
        };
        prop_assert_eq!(split(&got), split(&want));
    }
}

#[tokio::test]
async fn the_reader_reports_the_first_secret_once_and_ends_at_a_bad_frame_saying_why() {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (mut upstream, inner) = tokio::io::duplex(16);
    let hits = Arc::new(AtomicUsize::new(0));
    let why = Arc::new(Mutex::new(None));
    let (h, w) = (Arc::clone(&hits), Arc::clone(&why));
    let reports = Reports {
        hit: Box::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }),
        refused: Box::new(move |reason| *w.lock().unwrap() = Some(reason)),
    };
    let mut reader = ScrubbedFrames::new(inner, &set(), reports);
    let mut input = frame(true, OpCode::Text, SECRET.as_bytes());
    input.extend(frame(true, OpCode::Binary, SECRET.as_bytes()));
    input.extend([0xC1, 1, b'x']);
    let writer = tokio::spawn(async move {
        upstream.write_all(&input).await.unwrap();
        upstream
    });
    let mut got = Vec::new();
    let err = loop {
        let mut b = [0u8; 7];
        match reader.read(&mut b).await {
            Ok(0) => panic!("the stream ended without an error"),
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e) => break e,
        }
    };
    drop(writer.await.unwrap());
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(!contains(&got, SECRET.as_bytes()));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let why = why.lock().unwrap().clone().unwrap();
    assert!(why.contains("reserved bits"), "{why}");
}
