//! WebSocket over HTTP/1.1: the handshake of an allowed GET goes upstream through the one
//! exchange (`phases/exchange.rs`), like any request; only a `101` whose
//! `Sec-WebSocket-Accept` answers the client's key (RFC 6455 §4.2.2) and whose `Upgrade` is
//! `websocket` is passed on, here, then both sides are relayed until either closes. Any
//! other answer is an ordinary response, written by HTTP/1.1.
//!
//! When the handshake carried a secret or the endpoint has one bound, the client's offer of
//! extensions is not sent upstream (a compressed frame could hide the secret from the scan),
//! a `101` that names one anyway is refused, and the upstream's frames are scrubbed of every
//! such secret (`scrub`); the client's frames go up as they are. Otherwise both sides are
//! relayed raw. On a `protocol: websocket` endpoint the client's text messages are judged
//! (`judged`), and no extension is negotiated either (a compressed message could not be
//! judged). With `websocket_credential_rewrite` the client's text messages have their
//! placeholders swapped (`rewrite`), through the same relay, without extensions.

use bytes::BytesMut;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::judged::{self, Halves, PolicyJudge};
use super::messages::Judge;
use super::rewrite::{Messages, Rewrite, Rewriter};
use super::scrub::{Reports, ScrubbedFrames};
use crate::audit::Engine;
use crate::http::respond::{Code, Refusal};
use crate::pipeline::caller::identify::Known;
use crate::pipeline::denial::Denial;
use crate::pipeline::phases::exchange;
use crate::pipeline::phases::record::Record;
use crate::pipeline::phases::request::Exchange;
use crate::relay;

/// The handshake's expected `Sec-WebSocket-Accept` (RFC 6455 §4.2.2).
fn websocket_accept(key: &[u8]) -> String {
    use base64::Engine as _;
    let mut input = key.to_vec();
    input.extend_from_slice(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// The client side of the connection: its halves and the bytes read and not yet consumed.
pub(crate) struct Client<'a, R, W> {
    pub(crate) rd: &'a mut R,
    pub(crate) wr: &'a mut W,
    pub(crate) buf: &'a mut BytesMut,
}

/// What the handshake's relay needs besides the upstream's `101`: the client's key and the
/// request target as the client sent it (its messages are judged on it).
pub(crate) struct Handshake {
    pub(crate) key: Option<Vec<u8>>,
    pub(crate) target: String,
    /// The canonical path its text messages' placeholders are swapped for
    /// (`websocket_credential_rewrite`).
    pub(crate) path: String,
}

/// Answers the handshake with a refusal and audits it.
async fn refuse<W: AsyncWrite + Unpin>(wr: &mut W, mut rec: Record, d: &Denial) {
    let _ = wr.write_all(&d.refusal.to_bytes()).await;
    rec.deny(d);
    rec.finish();
}

/// A WebSocket handshake the upstream answered `101` (sent by the exchange,
/// `phases/exchange.rs`): a valid one is passed on, audited, and the two sides are relayed
/// until either closes. The connection is not kept alive after it.
pub(crate) async fn relay<R, W>(
    x: &Exchange<'_>,
    known: &Known,
    up: exchange::Upgrade,
    client: Client<'_, R, W>,
    hs: Handshake,
) where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let Client { rd, wr, buf } = client;
    let exchange::Upgrade {
        response,
        mut rec,
        scrub,
        plain,
        rewrite,
    } = up;
    // A handshake that carried a secret: its frames are scrubbed of it (see `inject`).
    let scrubbing = !scrub.is_empty();
    let mut judge = Messages {
        policy: PolicyJudge::for_upgrade(*x, known, &hs.target, &rec),
        rewrite: rewrite.then(|| {
            let r = Rewrite {
                path: hs.path.clone(),
                scrubbed: scrub.clone(),
            };
            Rewriter::new(*x, known, r, &rec)
        }),
    };
    let accept_ok = match (&hs.key, response.headers().get("sec-websocket-accept")) {
        (Some(k), Some(a)) => a.as_bytes() == websocket_accept(k).as_bytes(),
        _ => false,
    };
    let upgrade_ok = response
        .headers()
        .get(http::header::UPGRADE)
        .is_some_and(|u| u.as_bytes().eq_ignore_ascii_case(b"websocket"));
    if !accept_ok || !upgrade_ok {
        let refusal = Refusal::new(
            Code::UpstreamUnreachable,
            "the upstream's WebSocket handshake answer is not valid (RFC 6455)",
        );
        return refuse(wr, rec, &Denial::new(Engine::Proxy, refusal)).await;
    }
    let mut response = response;
    if scrubbing {
        crate::pipeline::phases::inject::scrub_head(
            &rec.dest(x.shared, known),
            &scrub,
            &rec.credentials,
            response.headers_mut(),
        );
    }
    // Named after the scrub: the upstream wrote it, and it goes to the client.
    if plain && let Some(ext) = response.headers().get("sec-websocket-extensions") {
        let text = String::from_utf8_lossy(ext.as_bytes());
        let name: String = text
            .split([';', ','])
            .next()
            .unwrap_or_default()
            .trim()
            .chars()
            .take(64)
            .collect();
        let detail = if scrubbing {
            format!(
                "the upstream answered a WebSocket handshake to a credentialed endpoint with extension `{name}` although none was offered; sluice does not relay frames it cannot scan for the secret"
            )
        } else {
            format!(
                "the upstream answered a WebSocket handshake with extension `{name}` although none was offered; sluice does not relay messages it cannot judge"
            )
        };
        let refusal =
            Refusal::new(Code::CredentialResponseEncoded, detail.clone()).with_reason(detail);
        return refuse(wr, rec, &Denial::new(Engine::L7, refusal)).await;
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
            let refusal = Refusal::new(Code::UpstreamUnreachable, format!("upgrade failed: {e}"));
            return refuse(wr, rec, &Denial::new(Engine::Proxy, refusal)).await;
        }
    };
    if wr.write_all(&head).await.is_err() {
        // The handshake went upstream (with its credential): audited, whatever became of the
        // client.
        rec.status = Some(101);
        rec.reason = Some("websocket upgrade; the client was gone before the 101".to_string());
        rec.finish();
        return;
    }
    // What the upstream's frames report, a secret found or a frame that ends the relay (the
    // record is gone by then).
    let reports = scrubbing.then(|| {
        let d = rec.dest(x.shared, known);
        Reports {
            hit: crate::pipeline::phases::inject::reflected_report(&d, &rec.credentials),
            refused: crate::pipeline::phases::inject::uninspectable_report(&d),
        }
    });
    // The handshake's record goes out at the upgrade; the relay's bytes are the tunnel's.
    rec.status = Some(101);
    rec.reason = Some("websocket upgrade".to_string());
    rec.finish();
    let (ur, uw) = tokio::io::split(TokioIo::new(upgraded));
    let leftover = buf.split();
    let idle = x.shared.limits.idle_timeout;
    let judge = judge
        .is_some()
        .then_some(&mut judge as &mut (dyn Judge + Send));
    if let Some(reports) = reports {
        let ur = ScrubbedFrames::new(ur, &scrub, reports);
        pass(
            Halves {
                client_rd: rd,
                client_wr: wr,
                upstream_rd: ur,
                upstream_wr: uw,
            },
            &leftover,
            idle,
            judge,
        )
        .await;
    } else {
        pass(
            Halves {
                client_rd: rd,
                client_wr: wr,
                upstream_rd: ur,
                upstream_wr: uw,
            },
            &leftover,
            idle,
            judge,
        )
        .await;
    }
}

/// Relays the upgraded connection: the client's messages through `judge` when there is one,
/// else raw.
async fn pass<CR, CW, UR, UW>(
    halves: Halves<&mut CR, &mut CW, UR, UW>,
    leftover: &[u8],
    idle: std::time::Duration,
    judge: Option<&mut (dyn Judge + Send)>,
) where
    CR: AsyncRead + Unpin + Send,
    CW: AsyncWrite + Unpin + Send,
    UR: AsyncRead + Unpin + Send,
    UW: AsyncWrite + Unpin + Send,
{
    match judge {
        Some(judge) => {
            judged::relay(halves, leftover, idle, judge).await;
        }
        None => {
            let Halves {
                client_rd,
                client_wr,
                upstream_rd,
                upstream_wr,
            } = halves;
            let _ = relay::relay(
                client_rd,
                client_wr,
                upstream_rd,
                upstream_wr,
                leftover,
                idle,
            )
            .await;
        }
    }
}
