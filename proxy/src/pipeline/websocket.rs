//! WebSocket over HTTP/1.1: the handshake of an allowed GET goes upstream; only a `101`
//! whose `Sec-WebSocket-Accept` answers the client's key (RFC 6455 §4.2.2) and whose
//! `Upgrade` is `websocket` is passed on, then both sides are relayed raw until either closes.
//! Any other answer is an ordinary response.

use bytes::BytesMut;
use http::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::Shared;
use super::forward::{Record, Step, Upstream};
use crate::audit::{Engine, Outcome};
use crate::http::body::ChannelBody;
use crate::http::respond::{self, Refusal};
use crate::relay;

/// The handshake's expected `Sec-WebSocket-Accept` (RFC 6455 §4.2.2).
fn websocket_accept(key: &[u8]) -> String {
    use base64::Engine as _;
    let mut input = key.to_vec();
    input.extend_from_slice(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// A WebSocket handshake: sent upstream; a valid `101` is passed on and the two sides are
/// relayed raw until either closes; anything else is an ordinary response.
#[allow(clippy::too_many_arguments)] // one connection's halves and the request's state
pub(super) async fn websocket<R, W>(
    shared: &Shared,
    rec: &Record<'_>,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    upstream: &mut Upstream,
    request: Request<ChannelBody>,
    key: Option<&[u8]>,
    engine: Engine,
    outcome: Outcome,
    scrub: crate::credentials::ScrubSet,
) -> Step
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let timeout = shared.limits.upstream_timeout;
    let response = match tokio::time::timeout(timeout, upstream.sender.send_request(request)).await
    {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let refusal = Refusal::new(
                502,
                "upstream_unreachable",
                format!("connection to {}:{} failed", rec.host, rec.port),
            )
            .with_reason(e.to_string());
            return rec.refuse(wr, refusal, Engine::Proxy).await;
        }
        Err(_) => {
            let refusal = Refusal::new(
                504,
                "upstream_timeout",
                format!("{}:{} sent no response", rec.host, rec.port),
            );
            return rec.refuse(wr, refusal, Engine::Proxy).await;
        }
    };
    let status = response.status().as_u16();
    // A handshake that carried a secret: its answer is scrubbed of it (see `inject`).
    let dest = (!scrub.is_empty()).then(|| rec.dest()).flatten();
    if status != 101 {
        let written = match &dest {
            None => respond::write_response(wr, response, false, 1, false).await,
            Some(d) => match super::inject::scrub(d, scrub, &rec.credentials, response).await {
                Ok(r) => respond::write_response(wr, r, false, 1, false).await,
                Err(refused) => return rec.refuse_with(wr, refused, Engine::L7).await,
            },
        };
        rec.emit(
            outcome,
            engine,
            None,
            Some(status),
            0,
            written.map_or(0, |w| w.body_bytes),
        );
        return Step { keep_alive: false };
    }
    let accept_ok = match (key, response.headers().get("sec-websocket-accept")) {
        (Some(k), Some(a)) => a.as_bytes() == websocket_accept(k).as_bytes(),
        _ => false,
    };
    let upgrade_ok = response
        .headers()
        .get(http::header::UPGRADE)
        .is_some_and(|u| u.as_bytes().eq_ignore_ascii_case(b"websocket"));
    if !accept_ok || !upgrade_ok {
        let refusal = Refusal::new(
            502,
            "upstream_unreachable",
            "the upstream's WebSocket handshake answer is not valid (RFC 6455)",
        );
        return rec.refuse(wr, refusal, Engine::Proxy).await;
    }
    let mut response = response;
    if let Some(d) = &dest {
        super::inject::scrub_head(d, &scrub, &rec.credentials, response.headers_mut());
    }
    let mut head = b"HTTP/1.1 101 Switching Protocols\r\n".to_vec();
    for (name, value) in response.headers() {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    let upgraded = match hyper::upgrade::on(response).await {
        Ok(u) => u,
        Err(e) => {
            let refusal = Refusal::new(502, "upstream_unreachable", format!("upgrade failed: {e}"));
            return rec.refuse(wr, refusal, Engine::Proxy).await;
        }
    };
    if wr.write_all(&head).await.is_err() {
        return Step { keep_alive: false };
    }
    rec.emit(
        outcome,
        engine,
        Some("websocket upgrade".to_string()),
        Some(101),
        0,
        0,
    );
    let (ur, uw) = tokio::io::split(TokioIo::new(upgraded));
    let leftover = buf.split();
    let _ = relay::relay(
        &mut *rd,
        &mut *wr,
        ur,
        uw,
        &leftover,
        shared.limits.idle_timeout,
    )
    .await;
    Step { keep_alive: false }
}
