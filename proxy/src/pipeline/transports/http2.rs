//! HTTP/2 in an inspected tunnel: hyper's HTTP/2 server on the client's TLS stream, hyper's
//! HTTP/2 client on the upstream's, and the same judgement (`judge`) per stream as HTTP/1.
//!
//! Owns the HTTP/2 transport of the exchange (`phases/exchange.rs`, the same order and steps as
//! HTTP/1.1): the stream's authority (`:authority` or `Host`) and head handed to it, the body
//! streamed upstream with HTTP/2 flow control as backpressure (through the shared body check,
//! or buffered when read whole), and the response streamed back, its bytes counted
//! into the stream's audit record, which is emitted when the response ends. A refusal answers
//! that stream only; the connection and its other streams go on. gRPC is HTTP/2 with
//! trailers and needs nothing more.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

use super::unread;
use crate::audit::Engine;
use crate::http::body;
use crate::http::respond::{Code, Refusal, is_hop_by_hop};
use crate::pipeline::caller::identify::{self, Known};
use crate::pipeline::denial::Denial;
use crate::pipeline::phases::connection::Admitted;
use crate::pipeline::phases::exchange::{self, Begun, Unanswered, Wire};
use crate::pipeline::phases::form::FormVerdict;
use crate::pipeline::phases::record::Record;
use crate::pipeline::phases::request::{BodyPlan, Exchange, Head};
use crate::pipeline::state::pool::UpBody;
use crate::pipeline::state::shared::Shared;
use crate::pipeline::target::host_matches;

type Body = BoxBody<Bytes, BoxError>;

/// A client request body on its way upstream through the [`body::BodyCheck`] (the placeholder
/// guard, the hold, the trailers: the same as HTTP/1.1's), and paced like an HTTP/1 body
/// ([`body::Pacer`]): only time spent waiting for the client counts, since hyper polls the
/// body only when the upstream stream has room for it.
#[derive(Debug)]
pub struct Guarded {
    inner: Incoming,
    check: body::BodyCheck,
    /// What the check let go and is not sent yet, then the trailers it waited for.
    ready: std::collections::VecDeque<http_body::Frame<Bytes>>,
    /// Why the body stopped: a placeholder in it or its trailers, or a client too slow.
    tripped: Arc<std::sync::OnceLock<body::BodyError>>,
    pacer: body::Pacer,
    /// The wait for the client under way: when it began, and when its allowance runs out.
    waiting: Option<(tokio::time::Instant, std::pin::Pin<Box<tokio::time::Sleep>>)>,
    /// Body bytes received from the client so far (for the stream's audit record).
    received: Arc<AtomicU64>,
    /// Told (or dropped) when the body has ended or stopped: the upstream timeout counts
    /// from then (`exchange::within`).
    sent: Option<oneshot::Sender<()>>,
}

type Polled = std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>>;

impl Guarded {
    /// Stops the body for `e` (kept, for its refusal); the upstream stream is reset.
    fn stop(&mut self, e: body::BodyError) -> Polled {
        self.sent = None;
        let _ = self.tripped.set(e.clone());
        std::task::Poll::Ready(Some(Err(Box::new(e))))
    }

    /// Stops a body whose client did not keep up.
    fn too_slow(&mut self) -> Polled {
        self.waiting = None;
        let slow = self.pacer.too_slow();
        self.stop(slow)
    }

    /// Passes a frame from the client through the check into `ready`.
    fn check(&mut self, frame: http_body::Frame<Bytes>) -> Result<(), body::BodyError> {
        let mut out = Vec::new();
        match frame.into_data() {
            Ok(data) => self.check.data(data, &mut out)?,
            Err(trailers) => {
                if let Some(t) = trailers.trailers_ref() {
                    body::BodyCheck::trailers(t)?;
                }
                // The payload ended: what is held goes (if it may) before the trailers.
                self.check.end(&mut out)?;
                self.ready.extend(out.drain(..).map(http_body::Frame::data));
                self.ready.push_back(trailers);
            }
        }
        self.ready
            .extend(out.into_iter().map(http_body::Frame::data));
        Ok(())
    }

    /// The client's body has nothing yet: the wait for it is paced.
    fn pending(&mut self, cx: &mut std::task::Context<'_>) -> Polled {
        use std::task::Poll;
        if self.waiting.is_none() {
            let Ok(allowance) = self.pacer.allowance() else {
                return self.too_slow();
            };
            let now = tokio::time::Instant::now();
            self.waiting = Some((now, Box::pin(tokio::time::sleep_until(now + allowance))));
        }
        if let Some((since, sleep)) = self.waiting.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            let waited = since.elapsed();
            self.pacer.record(waited, 0);
            return self.too_slow();
        }
        Poll::Pending
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Polled {
        use std::task::Poll;
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Poll::Ready(Some(Ok(frame)));
            }
            let frame = match std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => frame,
                Poll::Ready(Some(Err(e))) => {
                    self.sent = None;
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                Poll::Ready(None) => {
                    if !self.check.holding() {
                        self.sent = None;
                        return Poll::Ready(None);
                    }
                    let mut out = Vec::new();
                    if let Err(e) = self.check.end(&mut out) {
                        return self.stop(e);
                    }
                    self.ready
                        .extend(out.into_iter().map(http_body::Frame::data));
                    continue;
                }
                Poll::Pending => return self.pending(cx),
            };
            let this = &mut *self;
            let waited = this
                .waiting
                .take()
                .map_or(std::time::Duration::ZERO, |(since, _)| since.elapsed());
            let n = frame.data_ref().map_or(0, bytes::Buf::remaining);
            this.pacer.record(waited, n);
            this.received.fetch_add(n as u64, Ordering::Relaxed);
            if let Err(e) = this.check(frame) {
                return this.stop(e);
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ready.is_empty() && !self.check.holding() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// What every stream of one HTTP/2 tunnel shares.
#[derive(Debug)]
pub struct H2Tunnel {
    pub shared: Arc<Shared>,
    pub conn_id: u64,
    pub peer: SocketAddr,
    pub known: Known,
    pub admitted: Admitted,
    /// The upstream address dialled.
    pub addr: SocketAddr,
}

/// Connects HTTP/2 to the upstream over `upstream_io`.
pub async fn connect<U>(upstream_io: U) -> Result<SendRequest<UpBody>, String>
where
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(upstream_io))
            .await
            .map_err(|e| format!("upstream HTTP/2 handshake failed: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Serves the client's streams on `client_io` over the upstream HTTP/2 connection `sender`
/// until the client closes.
pub async fn serve<C>(
    tunnel: H2Tunnel,
    client_io: C,
    sender: SendRequest<UpBody>,
) -> Result<(), String>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let tunnel = Arc::new(tunnel);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let tunnel = Arc::clone(&tunnel);
        let sender = sender.clone();
        async move { Ok::<_, Infallible>(handle(&tunnel, sender, req).await) }
    });
    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(client_io), service)
        .await
        .map_err(|e| format!("client HTTP/2: {e}"))
}

/// Answers every stream of the client's connection on `client_io` with `denial` (the
/// upstream could not be reached), each audited, until the client closes.
pub async fn refuse_streams<C>(tunnel: H2Tunnel, client_io: C, denial: Denial) -> Result<(), String>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let tunnel = Arc::new(tunnel);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let t = Arc::clone(&tunnel);
        let denial = denial.clone();
        async move {
            let mut rec = Record::open(&t.shared, t.conn_id, t.peer, Some(&t.known));
            rec.on(&t.admitted);
            let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
            rec.request(req.method().as_str(), target);
            unread::drain_body(&mut req.into_body()).await;
            Ok::<_, Infallible>(refuse(rec, &denial))
        }
    });
    hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(client_io), service)
        .await
        .map_err(|e| format!("client HTTP/2: {e}"))
}

/// Answers a stream with a refusal, and audits it.
fn refuse(mut rec: Record, d: &Denial) -> Response<Body> {
    rec.deny(d);
    rec.finish();
    let body = Full::new(Bytes::from(d.refusal.body()))
        .map_err(|never| match never {})
        .boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() =
        http::StatusCode::from_u16(d.refusal.status).unwrap_or(http::StatusCode::FORBIDDEN);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in d.refusal.headers() {
        // (`from_bytes` writes the name in lower case, as HTTP/2 needs.)
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            resp.headers_mut().append(name, value);
        }
    }
    resp
}

/// One stream: the request phase, the body, the upstream exchange, the audited answer.
async fn handle(
    t: &H2Tunnel,
    mut sender: SendRequest<UpBody>,
    req: Request<Incoming>,
) -> Response<Body> {
    let x = Exchange {
        shared: &t.shared,
        admitted: &t.admitted,
    };
    let mut rec = Record::open(&t.shared, t.conn_id, t.peer, Some(&t.known));
    rec.ip = Some(t.addr.ip());
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    rec.request(req.method().as_str(), &path_and_query);
    let authority = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            req.headers()
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        });
    let dst = &t.admitted.dst;
    let authority_ok = authority.as_deref().is_some_and(|a| {
        let default = t.admitted.scheme.default_port();
        host_matches(a.as_bytes(), dst, default)
    });
    // Each stream is the caller's only if it still holds the socket, alone. (A gateway
    // tenant is its tunnel's: a stream's `Proxy-Authorization` is not sluice's, and is
    // dropped.)
    let confirmed = identify::recheck(&t.shared, &t.known).await;
    let head = Head {
        method: req.method().as_str(),
        target: &path_and_query,
        authority_ok,
        headers: req
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
            .collect(),
        websocket: false,
        has_body: !http_body::Body::is_end_stream(req.body()),
    };
    let begun = x.begin(confirmed.as_ref().map(|()| &t.known), head, &mut rec);
    let Begun {
        known,
        mut prepared,
        hold,
        form,
    } = match begun {
        Ok(b) => b,
        Err(d) => {
            unread::drain_body(&mut req.into_body()).await;
            return refuse(rec, &d);
        }
    };
    let (parts, body) = req.into_parts();
    let received = Arc::new(AtomicU64::new(0));
    let tripped = Arc::new(std::sync::OnceLock::new());
    let reads_whole = prepared
        .reads_whole()
        .filter(|_| !http_body::Body::is_end_stream(&body));
    // A body read whole is guarded whole (`whole_body`), not as it streams.
    let guard = prepared.body == BodyPlan::Guard && reads_whole.is_none();
    let mut guarded = Guarded {
        inner: body,
        check: body::BodyCheck::new(guard, hold).aws_chunked(prepared.aws_chunked),
        ready: std::collections::VecDeque::new(),
        tripped: Arc::clone(&tripped),
        pacer: body::Pacer::new(t.shared.limits.body_pace),
        waiting: None,
        received: Arc::clone(&received),
        sent: None,
    };
    let (sent_tx, mut sent) = oneshot::channel();
    guarded.sent = Some(sent_tx);
    let up_body: UpBody = if let Some(max) = reads_whole {
        // Buffered (bounded, paced), its form judged, rewritten, sent whole: the same step
        // as HTTP/1.1.
        let collected = http_body_util::Limited::new(&mut guarded, max)
            .collect()
            .await;
        let whole = match collected {
            Ok(c) => c.to_bytes(),
            Err(e) => {
                let d = match tripped.get() {
                    Some(b) => x.body_failed(known, &rec, b),
                    None if e.is::<http_body_util::LengthLimitError>() => x.too_large(max),
                    None => Denial::new(
                        Engine::HttpParser,
                        Refusal::new(Code::BadRequest, format!("request body: {e}")),
                    ),
                };
                unread::drain_body(&mut guarded).await;
                return refuse(rec, &d);
            }
        };
        // Read whole: the clock starts now.
        guarded.sent = None;
        sent = exchange::already_sent();
        match x.whole_body(known, &mut rec, &mut prepared, whole) {
            Ok(b) => Full::new(b).map_err(|never| match never {}).boxed(),
            Err(d) => return refuse(rec, &d),
        }
    } else {
        guarded.boxed()
    };
    let wire = Wire {
        method: parts.method.as_str(),
        version: http::Version::HTTP_2,
        nominated: &[],
        chunked: false,
        websocket: false,
    };
    let upstream_req = match x.upstream_request(&prepared, &wire, up_body) {
        Ok(r) => r,
        Err(d) => return refuse(rec, &d),
    };
    let timeout = t.shared.limits.upstream_timeout;
    let response = match exchange::within(sender.send_request(upstream_req), sent, timeout).await {
        Some(Ok(r)) => r,
        unanswered => {
            let why = match unanswered {
                Some(Err(e)) => Unanswered::Failed(e.to_string()),
                _ => Unanswered::Timeout,
            };
            rec.bytes_in += received.load(Ordering::Relaxed);
            let form_denied = form.as_ref().and_then(|f| f.apply(&mut rec));
            let d = x.unanswered(known, &rec, why, tripped.get(), form_denied);
            return refuse(rec, &d);
        }
    };
    rec.status = Some(response.status().as_u16());
    let (mut parts, body) = response.into_parts();
    let drop: Vec<http::HeaderName> = parts
        .headers
        .keys()
        .filter(|n| is_hop_by_hop(n.as_str()))
        .cloned()
        .collect();
    for n in drop {
        parts.headers.remove(n);
    }
    let response = Response::from_parts(parts, body);
    let response = match x.answer(known, &rec, prepared.scrub, response).await {
        Ok(r) => r,
        Err(d) => return refuse(rec, &d),
    };
    response.map(|inner| {
        Audited {
            inner: inner.boxed(),
            rec: Some(rec),
            received,
            form,
        }
        .boxed()
    })
}

/// A response body on its way to the client, counted into its request's audit record,
/// which is emitted when the body ends (or is dropped: the stream was reset).
struct Audited {
    inner: Body,
    rec: Option<Record>,
    /// The request body bytes received, counted by [`Guarded`].
    received: Arc<AtomicU64>,
    /// What judging a streamed form's methods found (the body may end after the answer began).
    form: Option<FormVerdict>,
}

impl Audited {
    fn end(&mut self, interrupted: Option<String>) {
        if let Some(mut rec) = self.rec.take() {
            rec.bytes_in += self.received.load(Ordering::Relaxed);
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

impl Drop for Audited {
    fn drop(&mut self) {
        self.end(None);
    }
}

impl http_body::Body for Audited {
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
