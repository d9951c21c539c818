//! Tests of `http/body.rs`: the pump's framings, the body check, `Checked` and the channel body.

use super::*;
use http_body_util::BodyExt;

async fn run(
    framing: BodyFraming,
    input: &[u8],
) -> (Result<u64, BodyError>, Vec<u8>, Option<HeaderMap>, BytesMut) {
    let (tx, body) = ChannelBody::channel(None);
    let mut buf = BytesMut::new();
    let mut r = input;
    let collect = tokio::spawn(async move { body.collect().await });
    let res = pump(&mut r, &mut buf, framing, BodySink::new(tx)).await;
    let (data, trailers) = match collect.await.unwrap() {
        Ok(c) => {
            let t = c.trailers().cloned();
            (c.to_bytes().to_vec(), t)
        }
        Err(_) => (Vec::new(), None),
    };
    (res, data, trailers, buf)
}

#[tokio::test]
async fn content_length() {
    let (res, data, _, rest) = run(BodyFraming::Length(5), b"helloGET").await;
    assert_eq!(res, Ok(5));
    assert_eq!(data, b"hello");
    assert_eq!(&rest[..], b"GET");
    let (res, _, _, _) = run(BodyFraming::Length(10), b"short").await;
    assert_eq!(res, Err(BodyError::Truncated));
}

#[tokio::test]
async fn chunked_with_trailers() {
    let (res, data, trailers, rest) = run(
        BodyFraming::Chunked,
        b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: v\r\n\r\nNEXT",
    )
    .await;
    assert_eq!(res, Ok(11));
    assert_eq!(data, b"hello world");
    assert_eq!(trailers.unwrap().get("x-t").unwrap(), "v");
    assert_eq!(&rest[..], b"NEXT");
}

/// Pumps a `Content-Length: len` body that a writer task sends as `(delay, bytes)` steps,
/// on tokio's paused clock; returns the result and the (virtual) time it took.
async fn paced(
    pace: BodyPace,
    len: u64,
    steps: Vec<(u64, usize)>,
) -> (Result<u64, BodyError>, Duration) {
    use tokio::io::AsyncWriteExt;
    let (mut client, mut server) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        for (delay_ms, n) in steps {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            if client.write_all(&vec![b'x'; n]).await.is_err() {
                return;
            }
        }
        // Hold the connection open, silent, until the reader gives up.
        tokio::time::sleep(Duration::from_secs(86_400)).await;
    });
    let (tx, mut rx) = ChannelBody::channel(None);
    let drain = tokio::spawn(async move { while rx.frame().await.is_some() {} });
    let started = tokio::time::Instant::now();
    let mut buf = BytesMut::new();
    let sink = BodySink::new(tx).paced(pace);
    let res = pump(&mut server, &mut buf, BodyFraming::Length(len), sink).await;
    let took = started.elapsed();
    drain.abort();
    (res, took)
}

const PACE: BodyPace = BodyPace {
    idle: Duration::from_secs(10),
    min_rate: 256,
};

#[tokio::test(start_paused = true)]
async fn a_trickle_is_cut_after_about_the_idle_time() {
    // One byte a second: each wait is short, but the waiting adds up.
    let (res, took) = paced(PACE, 1000, vec![(1000, 1); 1000]).await;
    assert!(matches!(res, Err(BodyError::TooSlow(_))), "{res:?}");
    assert!(
        took >= Duration::from_secs(10) && took <= Duration::from_secs(11),
        "{took:?}"
    );
    assert_eq!(res.unwrap_err().refusal().status, 408);
}

#[tokio::test(start_paused = true)]
async fn silence_is_cut_after_the_idle_time_even_with_credit() {
    // 64 KiB up front earns 256 s of credit, but no single wait may exceed `idle`.
    let (res, took) = paced(PACE, 1 << 20, vec![(0, 64 * 1024)]).await;
    assert!(matches!(res, Err(BodyError::TooSlow(_))), "{res:?}");
    assert_eq!(took, Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn a_stream_at_the_minimum_rate_is_never_cut() {
    // 512 bytes every 2 s (the minimum rate) for ten minutes: sixty times the idle time.
    let (res, took) = paced(PACE, 300 * 512, vec![(2000, 512); 300]).await;
    assert_eq!(res, Ok(300 * 512));
    assert_eq!(took, Duration::from_secs(600));
    // Without a minimum rate only silence counts: a byte every 9 s passes.
    let idle_only = BodyPace {
        min_rate: 0,
        ..PACE
    };
    let (res, _) = paced(idle_only, 20, vec![(9000, 1); 20]).await;
    assert_eq!(res, Ok(20));
}

#[test]
fn pace_allowance() {
    let mut st = PaceState::default();
    assert_eq!(st.allowance(PACE), Some(Duration::from_secs(10)));
    st.record(Duration::from_secs(8), 256);
    assert_eq!(st.allowance(PACE), Some(Duration::from_secs(3)));
    st.record(Duration::from_secs(3), 0);
    assert_eq!(st.allowance(PACE), None);
    st.record(Duration::ZERO, 1 << 30);
    assert_eq!(st.allowance(PACE), Some(Duration::from_secs(10)));
}

#[tokio::test]
async fn chunked_refusals() {
    for bad in [
        &b"zz\r\n"[..],
        b"5\r\nhelloXX",
        b"5\nhello\r\n0\r\n\r\n",
        b"-1\r\n",
    ] {
        let (res, _, _, _) = run(BodyFraming::Chunked, bad).await;
        assert!(
            matches!(res, Err(BodyError::BadChunk(_))),
            "{bad:?}: {res:?}"
        );
    }
}
/// The frames a pump would send, through [`Checked`]: what went upstream, how the body
/// ended, and whether the exchange was told it had.
async fn checked(
    frames: Vec<Result<Frame<Bytes>, BodyError>>,
    guard: bool,
) -> (Vec<u8>, Option<BodyError>, u64, bool) {
    let (tx, raw) = ChannelBody::channel(None);
    let (body, state, told) = Checked::new(raw, BodyCheck::new(guard, None), None);
    let send = async move {
        for f in frames {
            if tx.send(f).await.is_err() {
                break;
            }
        }
    };
    let collect = async move {
        let mut body = body;
        let mut out = Vec::new();
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(d) = frame.into_data() {
                out.extend_from_slice(&d);
            }
        }
        out
    };
    let ((), out) = tokio::join!(send, collect);
    let ended = told.await.is_err();
    (out, state.stopped().cloned(), state.received(), ended)
}

/// One check for both transports: a placeholder split across HTTP/1.1's frames stops
/// the body before its second half goes, and the exchange learns why.
#[tokio::test]
async fn a_placeholder_across_frames_stops_the_body() {
    let frames = || {
        vec![
            Ok(Frame::data(Bytes::from_static(b"a=openshell:res"))),
            Ok(Frame::data(Bytes::from_static(b"olve:env:TOKEN&b=1"))),
        ]
    };
    let (out, stopped, received, ended) = checked(frames(), true).await;
    assert_eq!(stopped, Some(BodyError::Placeholder));
    assert!(!out.windows(7).any(|w| w == b"olve:en"), "{out:?}");
    assert_eq!(received, 33);
    assert!(ended);
    // Unguarded it passes whole.
    let (out, stopped, _, _) = checked(frames(), false).await;
    assert_eq!(stopped, None);
    assert_eq!(out, b"a=openshell:resolve:env:TOKEN&b=1");
}

/// Trailers are checked whether or not the body is guarded; a failure of the wire (a
/// truncated HTTP/1.1 body) is kept for the refusal.
#[tokio::test]
async fn trailers_and_the_wires_failures_are_kept() {
    let mut t = HeaderMap::new();
    t.insert(
        "x-sig",
        HeaderValue::from_static("openshell:resolve:env:KEY"),
    );
    let frames = vec![
        Ok(Frame::data(Bytes::from_static(b"ok"))),
        Ok(Frame::trailers(t)),
    ];
    let (_, stopped, _, _) = checked(frames, false).await;
    assert_eq!(stopped, Some(BodyError::PlaceholderInTrailers));
    let frames = vec![
        Ok(Frame::data(Bytes::from_static(b"par"))),
        Err(BodyError::Truncated),
    ];
    let (out, stopped, received, ended) = checked(frames, true).await;
    assert_eq!((out.as_slice(), received), (&b"par"[..], 3));
    assert_eq!(stopped, Some(BodyError::Truncated));
    assert!(ended);
}
