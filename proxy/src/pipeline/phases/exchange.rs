//! One request's exchange on an admitted connection, in the order every transport follows
//! (HTTP/1.1 in `forward.rs`, HTTP/2 in `h2.rs`, the WebSocket handshake in `websocket.rs`):
//!
//! ```text
//! begin      the phase (`request.rs`): audit gate, authority, caller, judgement,
//!            credentials of the head, body plan; a form's `_method` hold
//! body       judged here and only here: streamed through `http::body::BodyCheck`
//!            (placeholder guard, hold, trailers), or read whole (bounded) and passed to
//!            `Exchange::whole_body` (form methods judged, placeholders swapped)
//! request    `upstream_request`: the one upstream head for both versions; the request is
//!            complete there, the place a request signer signs it
//! send       `within`: the upstream timeout, counted from the end of the body
//! failure    `Exchange::unanswered`: no answer, a stopped body, a refused form method,
//!            each to its refusal
//! answer     `Exchange::answer`: scrubbed where secrets are bound
//! audit      the request's `Record`, finished when the response body ends
//! ```
//!
//! The transports do only what their wire needs: reading heads and bodies, `100 Continue`,
//! choosing or dialling the upstream connection, writing the answer.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::Either;
use tokio::sync::oneshot;

use super::form::{self, FormVerdict};
use super::inject;
use super::record::Record;
use super::request::{Exchange, Head, Prepared};
use crate::audit::Engine;
use crate::credentials::Scrubbed;
use crate::http::body::{BodyError, Hold};
use crate::http::respond::{Code, Refusal};
use crate::http::upstream::{self, Outgoing};
use crate::pipeline::caller::identify::{CallerError, Known};
use crate::pipeline::denial::Denial;

/// A request the phase let through: its caller, what goes upstream, and the hold and
/// verdict of a form body's `_method` fields (streamed).
#[derive(Debug)]
pub(crate) struct Begun<'k> {
    pub(crate) known: &'k Known,
    pub(crate) prepared: Prepared,
    pub(crate) hold: Option<Box<dyn Hold>>,
    pub(crate) form: Option<FormVerdict>,
}

/// How the request goes on the wire, as its transport knows it.
#[derive(Debug)]
pub(crate) struct Wire<'a> {
    pub(crate) method: &'a str,
    pub(crate) version: http::Version,
    /// The headers the client's `Connection` nominates (HTTP/1.1).
    pub(crate) nominated: &'a [String],
    /// HTTP/1.1: the body is sent chunked.
    pub(crate) chunked: bool,
    /// A WebSocket handshake: `Upgrade` and `Connection` go with it.
    pub(crate) websocket: bool,
}

/// Why the upstream did not answer.
#[derive(Debug)]
pub(crate) enum Unanswered {
    /// No response head within the upstream timeout after the body ended.
    Timeout,
    /// The upstream failed (or the request was aborted) before answering.
    Failed(String),
}

/// A response as it goes to the client: as the upstream sent it, or scrubbed.
pub(crate) type Answer<B> = Response<Either<B, Scrubbed<B>>>;

impl Exchange<'_> {
    /// The front of every exchange: the request phase, then the hold of a form's methods.
    pub(crate) fn begin<'k>(
        &self,
        caller: Result<&'k Known, &CallerError>,
        head: Head<'_>,
        rec: &mut Record,
    ) -> Result<Begun<'k>, Denial> {
        let (known, mut prepared) = self.prepare(caller, head, rec)?;
        let form::FormStream { hold, verdict } = form::stream(&mut prepared, known)?;
        Ok(Begun {
            known,
            prepared,
            hold,
            form: verdict,
        })
    }

    /// The upstream request, for every transport: the canonical target, the headers with
    /// their credentials, the destination named as a URI names it (the scheme's default port
    /// left out). The request is complete here: a request signer signs it here, after the
    /// credentials went in and before it is sent.
    pub(crate) fn upstream_request<B>(
        &self,
        prepared: &Prepared,
        wire: &Wire<'_>,
        body: B,
    ) -> Result<Request<B>, Denial> {
        let dst = &self.admitted.dst;
        let scheme = self.admitted.scheme;
        let authority = dst.to_uri_authority(scheme.default_port());
        let out = Outgoing {
            method: wire.method,
            version: wire.version,
            scheme: scheme.as_str(),
            authority: &authority,
            origin_form: &prepared.origin_form,
            nominated: wire.nominated,
            chunked: wire.chunked,
        };
        let mut request = upstream::build_request(&out, &prepared.headers, body).map_err(|e| {
            let refusal = Refusal::new(Code::BadRequest, e);
            Denial::new(Engine::HttpParser, refusal)
        })?;
        if wire.websocket {
            // Upgrade and Connection are hop-by-hop, except in a handshake sluice relays.
            let h = request.headers_mut();
            h.insert(
                http::header::CONNECTION,
                HeaderValue::from_static("upgrade"),
            );
            h.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
        }
        Ok(request)
    }

    /// The refusal of a request its upstream did not answer: a form method refused while
    /// the body streamed (`form_denied`), the body stopped (a placeholder, a client too
    /// slow, bad framing), else the upstream's failure or its timeout.
    pub(crate) fn unanswered(
        &self,
        known: &Known,
        rec: &Record,
        why: Unanswered,
        stopped: Option<&BodyError>,
        form_denied: Option<Denial>,
    ) -> Denial {
        match (why, stopped, form_denied) {
            (Unanswered::Timeout, ..) => self.upstream_timeout(self.shared.limits.upstream_timeout),
            (Unanswered::Failed(_), Some(BodyError::Held), Some(denied)) => denied,
            (Unanswered::Failed(_), Some(stopped), _) => self.body_failed(known, rec, stopped),
            (Unanswered::Failed(e), None, _) => self.upstream_failed(e),
        }
    }

    /// The upstream's response as it goes to the client: scrubbed of every secret in
    /// `prepared.scrub` (a secret went in, or the endpoint has one bound), else as it is.
    pub(crate) async fn answer<B>(
        &self,
        known: &Known,
        rec: &Record,
        scrub: crate::credentials::ScrubSet,
        response: Response<B>,
    ) -> Result<Answer<B>, Denial>
    where
        B: http_body::Body<Data = Bytes> + Unpin,
    {
        if scrub.is_empty() {
            return Ok(response.map(Either::Left));
        }
        let dest = rec.dest(self.shared, known);
        let scrubbed = inject::scrub(&dest, scrub, &rec.credentials, response).await?;
        Ok(scrubbed.map(Either::Right))
    }
}

/// The upstream's answer to `send`, or `None` when none came within `timeout` of the end of
/// the request body: `sent` fires (or its sender is dropped) when the body has gone up whole
/// or stopped. A slow upload is the client's time, not the upstream's delay: a 60 s upload
/// with a 10 s timeout is answered, over HTTP/1.1 and HTTP/2 alike.
pub(crate) async fn within<T>(
    send: impl Future<Output = T>,
    sent: oneshot::Receiver<()>,
    timeout: Duration,
) -> Option<T> {
    tokio::select! {
        r = send => Some(r),
        () = async {
            let _ = sent.await;
            tokio::time::sleep(timeout).await;
        } => None,
    }
}

/// A request body with nothing to wait for: already sent (read whole), or none.
pub(crate) fn already_sent() -> oneshot::Receiver<()> {
    oneshot::channel().1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_clock_starts_when_the_body_ends() {
        let (tx, rx) = oneshot::channel::<()>();
        let t = Duration::from_secs(10);
        // An upload of 30 s, answered 1 s after it: answered.
        let upload = async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(tx);
        };
        let answer = async {
            tokio::time::sleep(Duration::from_secs(31)).await;
            7
        };
        let (got, ()) = tokio::join!(within(answer, rx, t), upload);
        assert_eq!(got, Some(7));
        // Nothing in the 10 s after the body: no answer.
        let never = std::future::pending::<u8>();
        assert_eq!(within(never, already_sent(), t).await, None);
    }
}
