//! HTTP/2 in an inspected tunnel: hyper's HTTP/2 server on the client's TLS stream, hyper's
//! HTTP/2 client on the upstream's, and the same judgement (`judge`) per stream as HTTP/1.
//!
//! Owns the HTTP/2 transport of the request phase (`request.rs`, the same steps as HTTP/1.1):
//! the stream's authority (`:authority` or `Host`) and head handed to the phase, the body
//! streamed upstream with HTTP/2 flow control as backpressure (guarded, or buffered and
//! rewritten when the endpoint opts in), the upstream request (canonical target,
//! connection-specific headers dropped), and the response streamed back, its bytes counted
//! into the stream's audit record, which is emitted when the response ends. A refusal answers
//! that stream only; the connection and its other streams go on. gRPC is HTTP/2 with
//! trailers and needs nothing more.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};

use super::caller::{self, Known};
use super::connection::Admitted;
use super::denial::Denial;
use super::form::{self, FormVerdict};
use super::inject;
use super::pool::UpBody;
use super::record::Record;
use super::request::{BodyPlan, Exchange, Head};
use super::shared::Shared;
use super::target::host_matches;
use super::unread;
use crate::audit::Engine;
use crate::credentials;
use crate::http::body;
use crate::http::respond::{Code, Refusal, is_hop_by_hop};
use crate::http::upstream::forwarded;

type Body = BoxBody<Bytes, hyper::Error>;

/// A client request body on its way upstream, stopped at the first credential placeholder
/// when the destination must not receive one unresolved (spec §3.5), and at trailers that
/// hold one (trailers are headers: a placeholder there is never forwarded unresolved), and
/// paced like an HTTP/1 body ([`body::Pacer`]): only time spent waiting for the client counts,
/// since hyper polls the body only when the upstream stream has room for it.
#[derive(Debug)]
pub struct Guarded {
    inner: Incoming,
    guard: Option<credentials::BodyGuard>,
    /// Holds back what may not go upstream yet (a form's `_method` fields), after the guard;
    /// `None` once the body's payload ended.
    hold: Option<Box<dyn body::Hold>>,
    /// What the hold let go and is not sent yet, then the trailers it waited for.
    ready: std::collections::VecDeque<http_body::Frame<Bytes>>,
    /// Why the body stopped: a placeholder in it or its trailers, or a client too slow.
    tripped: Arc<std::sync::OnceLock<body::BodyError>>,
    pacer: body::Pacer,
    /// The wait for the client under way: when it began, and when its allowance runs out.
    waiting: Option<(tokio::time::Instant, std::pin::Pin<Box<tokio::time::Sleep>>)>,
    /// Body bytes received from the client so far (for the stream's audit record).
    received: Arc<AtomicU64>,
}

impl Guarded {
    /// Passes `frame` through the hold (if any) into `ready`; `Err` stops the body.
    fn hold(&mut self, frame: http_body::Frame<Bytes>) -> Result<(), body::BodyError> {
        let Some(hold) = self.hold.as_mut() else {
            self.ready.push_back(frame);
            return Ok(());
        };
        match frame.into_data() {
            Ok(data) => {
                let mut out = Vec::new();
                hold.feed(data, &mut out)?;
                self.ready
                    .extend(out.into_iter().map(http_body::Frame::data));
            }
            Err(trailers) => {
                // The payload ended: what is held goes (if it may) before the trailers.
                self.end_hold()?;
                self.ready.push_back(trailers);
            }
        }
        Ok(())
    }

    /// The payload ended: what the hold still has goes into `ready`, if it may.
    fn end_hold(&mut self) -> Result<(), body::BodyError> {
        if let Some(mut hold) = self.hold.take() {
            let mut out = Vec::new();
            hold.finish(&mut out)?;
            self.ready
                .extend(out.into_iter().map(http_body::Frame::data));
        }
        Ok(())
    }

    /// Stops a body whose client did not keep up; the upstream stream is reset.
    fn too_slow(&mut self) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        self.waiting = None;
        let slow = self.pacer.too_slow();
        let _ = self.tripped.set(slow.clone());
        std::task::Poll::Ready(Some(Err(Box::new(slow))))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Poll::Ready(Some(Ok(frame)));
            }
            let frame = match std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => frame,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(Box::new(e)))),
                Poll::Ready(None) => {
                    if self.hold.is_none() {
                        return Poll::Ready(None);
                    }
                    if let Err(e) = self.end_hold() {
                        let _ = self.tripped.set(e.clone());
                        return Poll::Ready(Some(Err(Box::new(e))));
                    }
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
            if let (Some(g), Some(data)) = (this.guard.as_mut(), frame.data_ref())
                && let Some(before) = g.feed_until(data)
            {
                // The hold reads the bytes before the marker first (as `BodySink` does).
                let before = data.slice(..before);
                let held = this.hold.as_mut().map(|h| h.feed(before, &mut Vec::new()));
                if let Some(Err(e)) = held {
                    let _ = this.tripped.set(e.clone());
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                let _ = this.tripped.set(body::BodyError::Placeholder);
                return Poll::Ready(Some(Err(
                    "credential placeholder in the request body".into()
                )));
            }
            if frame.trailers_ref().is_some_and(|t| {
                t.iter().any(|(n, v)| {
                    credentials::placeholder::contains_marker(n.as_str().as_bytes())
                        || credentials::placeholder::contains_marker(v.as_bytes())
                })
            }) {
                let _ = this.tripped.set(body::BodyError::PlaceholderInTrailers);
                return Poll::Ready(Some(Err(
                    "credential placeholder in the request trailers".into()
                )));
            }
            if let Err(e) = this.hold(frame) {
                let _ = this.tripped.set(e.clone());
                return Poll::Ready(Some(Err(Box::new(e))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ready.is_empty() && self.hold.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Guarded {
    /// The client's body has nothing yet: the wait for it is paced.
    fn pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
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
    let authority_ok = authority
        .as_deref()
        .is_some_and(|a| host_matches(a.as_bytes(), dst.host(), dst.port(), 443));
    // Each stream is the caller's only if it still holds the socket. (A gateway tenant is
    // its tunnel's: a stream's `Proxy-Authorization` is not sluice's, and is dropped.)
    let confirmed = caller::confirm(&t.shared, &t.known).await;
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
    let prepared = x.prepare(confirmed.as_ref().map(|()| &t.known), head, &mut rec);
    let (known, mut prepared) = match prepared {
        Ok(p) => p,
        Err(d) => {
            unread::drain_body(&mut req.into_body()).await;
            return refuse(rec, &d);
        }
    };
    // A form that may name another method streams, its `_method` fields held until judged.
    let form::FormStream {
        hold,
        verdict: form,
    } = match form::stream(&mut prepared, known) {
        Ok(s) => s,
        Err(d) => {
            unread::drain_body(&mut req.into_body()).await;
            return refuse(rec, &d);
        }
    };
    let (parts, body) = req.into_parts();
    let received = Arc::new(AtomicU64::new(0));
    let tripped = Arc::new(std::sync::OnceLock::new());
    let mut guarded = Guarded {
        inner: body,
        guard: (prepared.body == BodyPlan::Guard).then(credentials::BodyGuard::new),
        hold,
        ready: std::collections::VecDeque::new(),
        tripped: Arc::clone(&tripped),
        pacer: body::Pacer::new(t.shared.limits.body_pace),
        waiting: None,
        received: Arc::clone(&received),
    };
    let reads_whole = prepared
        .reads_whole()
        .filter(|_| !http_body::Body::is_end_stream(&guarded));
    let up_body: UpBody = if let Some(max) = reads_whole {
        // Buffered (bounded, paced), its form judged, rewritten, sent whole: the same step
        // as HTTP/1.1.
        guarded.guard = None;
        let collected = http_body_util::Limited::new(&mut guarded, max)
            .collect()
            .await;
        let whole = match collected {
            Ok(c) => c.to_bytes(),
            Err(e) => {
                let d = match tripped.get() {
                    Some(b) => x.body_failed(known, &rec, b),
                    None if e.is::<http_body_util::LengthLimitError>() => x.too_large(),
                    None => Denial::new(
                        Engine::HttpParser,
                        Refusal::new(400, Code::BadRequest, format!("request body: {e}")),
                    ),
                };
                unread::drain_body(&mut guarded).await;
                return refuse(rec, &d);
            }
        };
        match x.whole_body(known, &mut rec, &mut prepared, whole) {
            Ok(b) => Full::new(b).map_err(|never| match never {}).boxed(),
            Err(d) => return refuse(rec, &d),
        }
    } else {
        guarded.boxed()
    };
    // An IPv6 literal is bracketed, else the URI does not parse and the request is refused.
    let uri = format!(
        "https://{}{}",
        dst.to_uri_authority(443),
        prepared.origin_form
    );
    let uri = match uri.parse::<Uri>() {
        Ok(u) => u,
        Err(e) => {
            let refusal = Refusal::new(
                400,
                Code::InvalidRequestTarget,
                format!("request-target refused: {e}"),
            );
            return refuse(rec, &Denial::new(Engine::HttpParser, refusal));
        }
    };
    let mut up = Request::builder()
        .method(parts.method)
        .uri(uri)
        .version(http::Version::HTTP_2);
    for (name, value) in &prepared.headers {
        // HTTP/2 has no `Connection` header to nominate others (hyper refuses one).
        if !forwarded(name, value, &[], http::Version::HTTP_2) {
            continue;
        }
        up = up.header(name.as_str(), value.as_slice());
    }
    let upstream_req = match up.body(up_body) {
        Ok(r) => r,
        Err(e) => {
            let refusal = Refusal::new(400, Code::BadRequest, e.to_string());
            return refuse(rec, &Denial::new(Engine::HttpParser, refusal));
        }
    };
    let timeout = t.shared.limits.upstream_timeout;
    let response = match tokio::time::timeout(timeout, sender.send_request(upstream_req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            rec.bytes_in += received.load(Ordering::Relaxed);
            let form_denied = form.as_ref().and_then(|f| f.apply(&mut rec));
            let d = match (tripped.get(), form_denied) {
                (Some(body::BodyError::Held), Some(denied)) => denied,
                (Some(stopped), _) => x.body_failed(known, &rec, stopped),
                (None, _) => x.upstream_failed(e.to_string()),
            };
            return refuse(rec, &d);
        }
        Err(_) => return refuse(rec, &x.upstream_timeout(timeout)),
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
    let response = if prepared.scrub.is_empty() {
        response.map(BodyExt::boxed)
    } else {
        // A secret went in, or the endpoint has secrets bound: the response is scrubbed.
        let scrubbed = inject::scrub(
            &rec.dest(&t.shared, known),
            prepared.scrub,
            &rec.credentials,
            response,
        )
        .await;
        match scrubbed {
            Ok(r) => r.map(BodyExt::boxed),
            Err(d) => return refuse(rec, &d),
        }
    };
    response.map(|inner| {
        Audited {
            inner,
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
    type Error = hyper::Error;

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
