use super::*;

/// Refuses messages that contain `deny`, records what it judged.
#[derive(Default)]
struct Words(Vec<String>);

impl Judge for Words {
    fn text(&mut self, message: &str) -> Result<(), Close> {
        self.0.push(message.to_string());
        if message.contains("deny") {
            return Err(Close::Policy(
                "WEBSOCKET_TEXT /ws not permitted by policy".into(),
            ));
        }
        Ok(())
    }
}

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

fn frame(fin: bool, opcode: OpCode, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::encode_masked(fin, opcode, payload, MASK, &mut out);
    out
}

/// Pushes `input` one byte at a time (every split point) and all at once; both must agree.
fn run(input: &[u8]) -> (Result<Vec<u8>, Close>, Vec<String>) {
    let mut whole = (ClientFrames::default(), Words::default(), Vec::new());
    let r1 = whole.0.push(input, &mut whole.1, &mut whole.2);
    let mut bytes = (ClientFrames::default(), Words::default(), Vec::new());
    let mut r2 = Ok(());
    for b in input {
        r2 = bytes.0.push(&[*b], &mut bytes.1, &mut bytes.2);
        if r2.is_err() {
            break;
        }
    }
    assert_eq!(r1, r2);
    assert_eq!(whole.1.0, bytes.1.0);
    if r1.is_ok() {
        assert_eq!(whole.2, bytes.2);
    }
    (r1.map(|()| whole.2), whole.1.0)
}

#[test]
fn an_allowed_text_message_goes_up_as_it_was_sent() {
    let input = frame(true, OpCode::Text, b"hello");
    let (out, judged) = run(&input);
    assert_eq!(out.unwrap(), input);
    assert_eq!(judged, ["hello"]);
}

#[test]
fn a_fragmented_message_is_judged_whole_and_controls_between_pass_first() {
    let mut input = frame(false, OpCode::Text, b"de");
    input.extend(frame(true, OpCode::Ping, b"p"));
    input.extend(frame(true, OpCode::Continuation, b"ny"));
    let (out, judged) = run(&input);
    assert_eq!(out.unwrap_err().code(), 1008);
    assert_eq!(judged, ["deny"]);

    let mut input = frame(false, OpCode::Text, b"al");
    input.extend(frame(true, OpCode::Ping, b"p"));
    input.extend(frame(true, OpCode::Continuation, b"low"));
    let (out, judged) = run(&input);
    let mut expected = frame(true, OpCode::Ping, b"p");
    expected.extend(frame(true, OpCode::Text, b"allow"));
    assert_eq!(out.unwrap(), expected);
    assert_eq!(judged, ["allow"]);
}

#[test]
fn a_refused_message_never_reaches_the_upstream() {
    let mut c = ClientFrames::default();
    let mut up = Vec::new();
    let mut input = frame(true, OpCode::Text, b"fine");
    input.extend(frame(true, OpCode::Text, b"deny this"));
    input.extend(frame(true, OpCode::Text, b"after"));
    let r = c.push(&input, &mut Words::default(), &mut up);
    assert_eq!(r.unwrap_err().code(), 1008);
    assert_eq!(up, frame(true, OpCode::Text, b"fine"));
}

#[test]
fn binary_messages_stream_unjudged() {
    let mut input = frame(false, OpCode::Binary, b"deny");
    input.extend(frame(true, OpCode::Continuation, &[0xff, 0xfe]));
    let (out, judged) = run(&input);
    assert_eq!(out.unwrap(), input);
    assert!(judged.is_empty());
}

#[test]
fn text_that_is_not_utf8_closes_with_1007() {
    let (out, judged) = run(&frame(true, OpCode::Text, &[0x61, 0xc3]));
    assert_eq!(out.unwrap_err(), Close::Utf8);
    assert!(judged.is_empty());
    let mut close = 1000u16.to_be_bytes().to_vec();
    close.push(0xff);
    assert_eq!(
        run(&frame(true, OpCode::Close, &close))
            .0
            .unwrap_err()
            .code(),
        1007
    );
}

#[test]
fn a_text_message_over_four_mebibytes_closes_with_1009() {
    // The header alone says so: nothing is buffered.
    let big = vec![b'a'; MAX_TEXT_MESSAGE + 1];
    let input = frame(true, OpCode::Text, &big);
    let mut c = ClientFrames::default();
    let r = c.push(&input[..20], &mut Words::default(), &mut Vec::new());
    assert_eq!(r.unwrap_err().code(), 1009);
    // Fragments that add up to more.
    let half = vec![b'a'; MAX_TEXT_MESSAGE / 2 + 1];
    let mut input = frame(false, OpCode::Text, &half);
    input.extend(frame(true, OpCode::Continuation, &half));
    let mut c = ClientFrames::default();
    let r = c.push(&input, &mut Words::default(), &mut Vec::new());
    assert_eq!(r.unwrap_err(), Close::TooBig);
    // Exactly the limit passes.
    let exact = vec![b'a'; MAX_TEXT_MESSAGE];
    let mut c = ClientFrames::default();
    let mut up = Vec::new();
    c.push(
        &frame(true, OpCode::Text, &exact),
        &mut Words::default(),
        &mut up,
    )
    .unwrap();
    assert_eq!(up.len(), MAX_TEXT_MESSAGE + 14);
}

#[test]
fn frames_rfc6455_forbids_close_with_1002() {
    let protocol = |input: &[u8]| run(input).0.unwrap_err().code();
    // Unmasked.
    assert_eq!(protocol(&[0x81, 0x01, b'a']), 1002);
    // A continuation that continues nothing.
    assert_eq!(protocol(&frame(true, OpCode::Continuation, b"a")), 1002);
    // A new message inside a fragmented one.
    let mut input = frame(false, OpCode::Text, b"a");
    input.extend(frame(true, OpCode::Text, b"b"));
    assert_eq!(protocol(&input), 1002);
    // Anything after the client's close.
    let mut input = frame(true, OpCode::Close, &1000u16.to_be_bytes());
    input.extend(frame(true, OpCode::Text, b"b"));
    assert_eq!(protocol(&input), 1002);
    // A close code no one may send, and a one-byte close payload.
    assert_eq!(
        protocol(&frame(true, OpCode::Close, &1005u16.to_be_bytes())),
        1002
    );
    assert_eq!(protocol(&frame(true, OpCode::Close, &[3])), 1002);
    // Too many fragments.
    let mut input = frame(false, OpCode::Text, b"a");
    for _ in 0..MAX_FRAGMENTS {
        input.extend(frame(false, OpCode::Continuation, b""));
    }
    assert_eq!(protocol(&input), 1002);
}

#[test]
fn a_close_payload_fits_a_control_frame_and_names_the_code() {
    let long = Close::Policy("é".repeat(200));
    let p = long.payload();
    assert!(p.len() <= MAX_CONTROL);
    assert_eq!(&p[..2], &1008u16.to_be_bytes());
    assert!(std::str::from_utf8(&p[2..]).is_ok());
}
