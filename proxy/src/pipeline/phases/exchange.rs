//! One request's exchange on an admitted connection, in one order for every transport:
//! [`exchange`], called by HTTP/1.1 (`transports/http1.rs`), HTTP/2 (`transports/http2.rs`)
//! and the WebSocket handshake (`transports/websocket/handshake.rs`, through HTTP/1.1's).
//!
//! ```text
//! begin      the phase (`phases/request.rs`): audit gate, authority, caller, judgement,
//!            credentials of the head, body plan; a form's `_method` hold
//! upstream   the transport picks or dials the upstream connection (`Transport::upstream`)
//! body       judged here and only here: streamed through `http::body::Checked` (the
//!            `BodyCheck`: placeholder guard, hold, trailers), or read whole (bounded) and
//!            passed to `Exchange::whole_body` (form methods judged, placeholders swapped)
//! request    `upstream_request`: the one upstream head for both versions; the request is
//!            complete there, the place a request signer signs it
//! send       `within`: the upstream timeout, counted from the end of the body
//! failure    `Exchange::unanswered`: no answer, a stopped body, a refused form method,
//!            each to its refusal, audited here
//! answer     `Exchange::answer`: scrubbed where secrets are bound
//! audit      the request's `Record`, finished when the response body ends (`AuditedBody`)
//! ```
//!
//! The transports do only what their wire needs ([`Transport`]): reading heads and bodies,
//! `100 Continue`, choosing or dialling the upstream connection, writing the answer.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use tokio::sync::oneshot;

use super::form::{self, FormVerdict};
use super::inject;
use super::record::Record;
use super::request::{BodyPlan, Exchange, Head, Prepared};
use crate::audit::Engine;
use crate::credentials::Scrubbed;
use crate::http::body::{BodyCheck, BodyError, BodyPace, BodyState, Checked, Hold, UpBody};
use crate::http::respond::{Code, Refusal};
use crate::http::upstream::{self, Outgoing};
use crate::pipeline::caller::identify::{CallerError, Known};
use crate::pipeline::denial::Denial;

/// A request the phase let through: its caller, what goes upstream, and the hold and
/// verdict of a form body's `_method` fields (streamed).
#[derive(Debug)]
struct Begun<'k> {
    known: &'k Known,
    prepared: Prepared,
    hold: Option<Box<dyn Hold>>,
    form: Option<FormVerdict>,
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
enum Unanswered {
    /// No response head within the upstream timeout after the body ended.
    Timeout,
    /// The upstream failed (or the request was aborted) before answering.
    Failed(String),
}

/// A response as it goes to the client: as the upstream sent it, or scrubbed.
type Answer<B> = Response<Either<B, Scrubbed<B>>>;

impl Exchange<'_> {
    /// The front of every exchange: the request phase, then the hold of a form's methods.
    fn begin<'k>(
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
    fn upstream_request<B>(
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
    fn unanswered(
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
    async fn answer<B>(
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

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request as its transport hands it to [`exchange`]: its head for the phase, how it
/// goes on the wire, and its body as the client sends it.
#[derive(Debug)]
pub(crate) struct ClientRequest<'a, B> {
    pub(crate) head: Head<'a>,
    pub(crate) wire: Wire<'a>,
    pub(crate) body: B,
    /// The body is paced as it is read here (HTTP/2); `None`: its wire paces its reads
    /// (HTTP/1.1's `http::body::pump`).
    pub(crate) pace: Option<BodyPace>,
}

/// A transport's wire work for one exchange.
pub(crate) trait Transport {
    /// The upstream connection for a request the phase let through: picked or dialled, its
    /// address named in `rec.ip`. `Ok(false)`: the connection's upstream is gone (the
    /// exchange ends unaudited, and the client connection with it).
    fn upstream(
        &mut self,
        x: &Exchange<'_>,
        known: &Known,
        rec: &mut Record,
    ) -> impl Future<Output = Result<bool, Denial>> + Send;

    /// The client may send its body now (HTTP/1.1: `100 Continue`, then it is read).
    /// `false`: the client is gone.
    fn proceed(&mut self) -> impl Future<Output = bool> + Send;

    /// Sends the request upstream; the response head, or why none came.
    fn send(
        &mut self,
        request: Request<UpBody>,
    ) -> impl Future<Output = Result<Response<Incoming>, String>> + Send;
}

/// A WebSocket handshake the upstream accepted (`101`), for the handshake to check and relay:
/// its record is the handshake's to finish.
#[derive(Debug)]
pub(crate) struct Upgrade {
    pub(crate) response: Response<Incoming>,
    pub(crate) rec: Record,
    /// The secrets the relayed frames are scrubbed of.
    pub(crate) scrub: crate::credentials::ScrubSet,
    /// The client's offer of extensions was not sent: sluice reads the frames (to scrub,
    /// judge or rewrite them).
    pub(crate) plain: bool,
    /// `websocket_credential_rewrite` applies to its text messages.
    pub(crate) rewrite: bool,
}

/// How an exchange ended, for its transport to write.
#[derive(Debug)]
pub(crate) enum Answered<'k, B> {
    /// The upstream's answer; its record is emitted when the body ends (or is dropped).
    Response(Response<AuditedBody>),
    /// Refused, and audited; what is left of the client's body, for the transport to
    /// drain before it answers (HTTP/2).
    Refused {
        denial: Denial,
        unread: Option<Box<Checked<B>>>,
    },
    /// A WebSocket handshake accepted upstream.
    Upgrade(&'k Known, Box<Upgrade>),
    /// Nothing to answer: the connection's upstream or its client is gone.
    Gone,
}

/// Refuses the exchange: `d` audited now.
fn refused<'k, B>(mut rec: Record, d: Denial, unread: Option<Checked<B>>) -> Answered<'k, B> {
    rec.deny(&d);
    rec.finish();
    let unread = unread.map(Box::new);
    Answered::Refused { denial: d, unread }
}

/// One request's exchange, in the order of the module doc, for every transport: `req`
/// judged by the phase, its upstream picked by `t`, its body checked (or read whole), the
/// request sent within the upstream timeout, a failure refused, the answer scrubbed and
/// audited as its body ends. `rec` is the request's record (opened by the transport, with
/// what its connection phase found).
pub(crate) async fn exchange<'k, T, B>(
    x: &Exchange<'_>,
    caller: Result<&'k Known, &CallerError>,
    req: ClientRequest<'_, B>,
    mut rec: Record,
    t: &mut T,
) -> Answered<'k, B>
where
    T: Transport + Send,
    B: http_body::Body<Data = Bytes> + Send + Sync + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let ClientRequest {
        head,
        mut wire,
        body,
        pace,
    } = req;
    let has_body = !http_body::Body::is_end_stream(&body);
    let (mut checked, state, mut sent) = Checked::new(body, BodyCheck::default(), pace);
    let begun = x.begin(caller, head, &mut rec);
    let Begun {
        known,
        mut prepared,
        hold,
        form,
    } = match begun {
        Ok(b) => b,
        Err(d) => return refused(rec, d, Some(checked)),
    };
    match t.upstream(x, known, &mut rec).await {
        Ok(true) => {}
        Ok(false) => {
            rec.discard();
            return Answered::Gone;
        }
        Err(d) => return refused(rec, d, Some(checked)),
    }
    let reads_whole = prepared.reads_whole().filter(|_| has_body);
    // A body read whole is guarded whole (`whole_body`), not as it streams.
    let guard = prepared.body == BodyPlan::Guard && reads_whole.is_none();
    checked.checking(BodyCheck::new(guard, hold).aws_chunked(prepared.aws_chunked));
    let up_body: UpBody = if let Some(max) = reads_whole {
        if http_body::Body::size_hint(&checked).lower() > max as u64 {
            // Refused before the client is asked for the body.
            return refused(rec, x.too_large(max), Some(checked));
        }
        if !t.proceed().await {
            return Answered::Gone;
        }
        // Buffered (bounded, paced), its form judged, rewritten, signed, sent whole.
        let collected = Limited::new(&mut checked, max).collect().await;
        let whole = match collected {
            Ok(c) => c.to_bytes(),
            Err(e) => {
                let d = match state.stopped() {
                    Some(b) => x.body_failed(known, &rec, b),
                    None if e.is::<http_body_util::LengthLimitError>() => x.too_large(max),
                    None => Denial::new(
                        Engine::HttpParser,
                        Refusal::new(Code::BadRequest, format!("request body: {e}")),
                    ),
                };
                return refused(rec, d, Some(checked));
            }
        };
        rec.bytes_in = state.received();
        // Read whole: the clock starts now; it goes with its length, not chunked.
        sent = already_sent();
        wire.chunked = false;
        match x.whole_body(known, &mut rec, &mut prepared, whole) {
            Ok(b) => Full::new(b).map_err(|never| match never {}).boxed(),
            Err(d) => return refused(rec, d, None),
        }
    } else {
        if !has_body {
            // Nothing to wait for: the clock starts when the request goes.
            sent = already_sent();
        }
        checked.boxed()
    };
    let mut request = match x.upstream_request(&prepared, &wire, up_body) {
        Ok(r) => r,
        Err(d) => return refused(rec, d, None),
    };
    let plain = wire.websocket && (!prepared.scrub.is_empty() || prepared.ws_read);
    if plain {
        // No extension: a compressed frame could not be scanned, judged or rewritten.
        request.headers_mut().remove("sec-websocket-extensions");
    }
    if has_body && reads_whole.is_none() && !t.proceed().await {
        return Answered::Gone;
    }
    let timeout = x.shared.limits.upstream_timeout;
    let response = match within(t.send(request), sent, timeout).await {
        Some(Ok(r)) => r,
        unanswered => {
            let why = match unanswered {
                Some(Err(e)) => Unanswered::Failed(e),
                _ => Unanswered::Timeout,
            };
            rec.bytes_in = state.received();
            let form_denied = form.as_ref().and_then(|f| f.apply(&mut rec));
            let d = x.unanswered(known, &rec, why, state.stopped(), form_denied);
            return refused(rec, d, None);
        }
    };
    rec.status = Some(response.status().as_u16());
    if wire.websocket && response.status() == http::StatusCode::SWITCHING_PROTOCOLS {
        let upgrade = Upgrade {
            response,
            rec,
            scrub: prepared.scrub,
            plain,
            rewrite: prepared.ws_rewrite,
        };
        return Answered::Upgrade(known, Box::new(upgrade));
    }
    let response = match x.answer(known, &rec, prepared.scrub, response).await {
        Ok(r) => r,
        Err(d) => return refused(rec, d, None),
    };
    Answered::Response(response.map(|inner| AuditedBody {
        inner: inner.boxed(),
        rec: Some(Box::new(rec)),
        state,
        form,
        begun: false,
    }))
}

/// A response body on its way to the client, counted into its request's audit record,
/// which is emitted when the body ends (or is dropped: the stream was reset, the client
/// went away, a `HEAD` answered), over HTTP/1.1 and HTTP/2 alike.
pub(crate) struct AuditedBody {
    inner: http_body_util::combinators::BoxBody<Bytes, BoxError>,
    rec: Option<Box<Record>>,
    /// What the request body's check counted.
    state: std::sync::Arc<BodyState>,
    /// What judging a streamed form's methods found (the body may end after the answer began).
    form: Option<FormVerdict>,
    /// Some of the body went: dropped before its end, it was interrupted.
    begun: bool,
}

impl std::fmt::Debug for AuditedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditedBody").finish_non_exhaustive()
    }
}

impl AuditedBody {
    fn end(&mut self, interrupted: Option<String>) {
        if let Some(mut rec) = self.rec.take() {
            rec.bytes_in = self.state.received();
            if let Some(form) = &self.form {
                let _ = form.apply(&mut rec);
            }
            if let Some(why) = interrupted {
                rec.reason = Some(format!("response interrupted: {why}"));
            }
            rec.finish();
        }
    }
}

impl Drop for AuditedBody {
    fn drop(&mut self) {
        // Dropped after some of it went and before its end: the client stopped reading (a
        // stream reset, a connection gone). Never polled: nothing to send (`HEAD`).
        let why = self.begun.then(|| "the client stopped reading".to_string());
        self.end(why);
    }
}

impl http_body::Body for AuditedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, bytes::Buf::remaining) as u64;
                if let Some(rec) = self.rec.as_mut() {
                    rec.bytes_out += n;
                }
                self.begun = true;
                // Trailers end a body, and a reader may stop at a body that says it ended.
                if frame.is_trailers() || self.inner.is_end_stream() {
                    self.end(None);
                }
            }
            Poll::Ready(Some(Err(e))) => {
                let why = e.to_string();
                self.end(Some(why));
            }
            Poll::Ready(None) => self.end(None),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The upstream's answer to `send`, or `None` when none came within `timeout` of the end of
/// the request body: `sent` fires (or its sender is dropped) when the body has gone up whole
/// or stopped. A slow upload is the client's time, not the upstream's delay: a 60 s upload
/// with a 10 s timeout is answered, over HTTP/1.1 and HTTP/2 alike.
async fn within<T>(
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
fn already_sent() -> oneshot::Receiver<()> {
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
