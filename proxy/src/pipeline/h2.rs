//! HTTP/2 in an inspected tunnel: hyper's HTTP/2 server on the client's TLS stream, hyper's
//! HTTP/2 client on the upstream's, and the same judgement (`judge`) per stream as HTTP/1.
//!
//! Owns the per-stream handler: the authority check (`:authority` must name the tunnel),
//! the L7 decision, the upstream request (canonical target, connection-specific headers
//! dropped, body and trailers streamed with HTTP/2 flow control as backpressure), the
//! response streamed back, and one audit event per stream. A refusal answers that stream
//! only; the connection and its other streams go on. gRPC is HTTP/2 with trailers and needs
//! nothing more.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};

use super::Shared;
use super::authority::Authority;
use super::caller::Known;
use super::judge::{self, Judged};
use super::target::host_matches;
use crate::audit::{self, Engine, Outcome};
use crate::credentials;
use crate::http::body;
use crate::http::respond::{Refusal, is_hop_by_hop};
use crate::policy::Policy;
use crate::policy::decide::Admission;

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
    /// Why the body stopped: a placeholder in it or its trailers, or a client too slow.
    tripped: Arc<std::sync::OnceLock<body::BodyError>>,
    pacer: body::Pacer,
    /// The wait for the client under way: when it began, and when its allowance runs out.
    waiting: Option<(tokio::time::Instant, std::pin::Pin<Box<tokio::time::Sleep>>)>,
}

impl Guarded {
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
        match std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let this = &mut *self;
                let waited = this
                    .waiting
                    .take()
                    .map_or(std::time::Duration::ZERO, |(since, _)| since.elapsed());
                this.pacer
                    .record(waited, frame.data_ref().map_or(0, bytes::Buf::remaining));
                if let (Some(g), Some(data)) = (this.guard.as_mut(), frame.data_ref())
                    && g.feed(data)
                {
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
                        "credential placeholder in the request trailers".into(),
                    )));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let this = &mut *self;
                if this.waiting.is_none() {
                    let Ok(allowance) = this.pacer.allowance() else {
                        return this.too_slow();
                    };
                    let now = tokio::time::Instant::now();
                    this.waiting = Some((now, Box::pin(tokio::time::sleep_until(now + allowance))));
                }
                if let Some((since, sleep)) = this.waiting.as_mut()
                    && sleep.as_mut().poll(cx).is_ready()
                {
                    let waited = since.elapsed();
                    this.pacer.record(waited, 0);
                    return this.too_slow();
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
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
    pub host: String,
    pub port: u16,
    pub policy: Arc<Policy>,
    pub admission: Admission,
    pub addr: SocketAddr,
}

/// Connects HTTP/2 to the upstream over `upstream_io`, then serves the client's streams on
/// `client_io` until either side closes.
pub async fn serve<C, U>(tunnel: H2Tunnel, client_io: C, upstream_io: U) -> Result<(), String>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(upstream_io))
            .await
            .map_err(|e| format!("upstream HTTP/2 handshake failed: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
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

fn refusal_response(refusal: &Refusal) -> Response<Body> {
    let body = Full::new(Bytes::from(refusal.body()))
        .map_err(|never| match never {})
        .boxed();
    let mut resp = Response::new(body);
    *resp.status_mut() =
        http::StatusCode::from_u16(refusal.status).unwrap_or(http::StatusCode::FORBIDDEN);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Audits a refused request (its reason, else its detail) and answers it.
fn refuse(
    t: &H2Tunnel,
    method: &str,
    j: &Judged,
    started: Instant,
    refusal: &Refusal,
) -> Response<Body> {
    let reason = refusal
        .reason
        .clone()
        .or_else(|| Some(refusal.detail.clone()));
    emit(t, method, j, Some(refusal.status), 0, started, reason);
    refusal_response(refusal)
}

async fn handle(
    t: &H2Tunnel,
    mut sender: SendRequest<Guarded>,
    req: Request<Incoming>,
) -> Response<Body> {
    let started = Instant::now();
    let method = req.method().as_str().to_string();
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let hp = Authority::new(t.host.clone(), t.port).to_string();
    let mut judged = Judged {
        origin_form: path_and_query.clone(),
        path: None,
        outcome: Outcome::Denied,
        engine: Engine::HttpParser,
        reason: None,
        rule: None,
        policy: t.admission.entry.to_string(),
    };
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
    if !authority
        .as_deref()
        .is_some_and(|a| host_matches(a.as_bytes(), &t.host, t.port, 443))
    {
        let refusal = Refusal::new(
            403,
            "request_authority_mismatch",
            "HTTP request authority does not match the authorized tunnel endpoint",
        );
        return refuse(t, &method, &judged, started, &refusal);
    }
    // Each stream is the caller's only if it still holds the socket.
    if let Err(reason) = super::caller::confirm(&t.shared, &t.known).await {
        let path = path_and_query.split('?').next().unwrap_or("/");
        let refusal = super::caller::refusal(&format!("{method} {hp}{path}"), &reason);
        judged.engine = Engine::Identity;
        return refuse(t, &method, &judged, started, &refusal);
    }
    let named = judge::Method::new(
        &method,
        req.headers()
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes())),
    );
    judged = match judge::judge(
        &t.policy,
        &t.admission,
        &t.known,
        &named,
        &path_and_query,
        &hp,
        false,
    ) {
        Ok(j) => j,
        Err(boxed) => {
            let (refusal, mut j) = *boxed;
            j.outcome = Outcome::Denied;
            return refuse(t, &method, &j, started, &refusal);
        }
    };
    let (parts, body) = req.into_parts();
    // Credentials: placeholders become secrets only where each is bound (spec §3.3, §3.4).
    let mut origin_form = judged.origin_form.clone();
    let mut headers: Vec<(String, Vec<u8>)> = parts
        .headers
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
        .collect();
    let dest = super::inject::Dest {
        shared: &t.shared,
        conn_id: t.conn_id,
        peer: t.peer,
        caller: &t.known,
        host: &t.host,
        port: t.port,
        ip: Some(t.addr.ip()),
        policy: Some(judged.policy.clone()),
    };
    let path = judged.path.clone().unwrap_or_else(|| "/".to_string());
    let (injected, scrub) = match super::inject::inject_head(
        &dest,
        credentials::Transport::VerifiedTls,
        &path,
        &mut origin_form,
        &mut headers,
    ) {
        Ok(inj) => (
            inj.credentials
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<String>>(),
            inj.scrub,
        ),
        Err(refused) => {
            let mut j = judged.clone();
            j.outcome = Outcome::Denied;
            return refuse_with(t, &method, &j, started, refused);
        }
    };
    let guard_body = t.shared.credentials.is_credentialed(&t.host, t.port);
    if guard_body
        && !http_body::Body::is_end_stream(&body)
        && let Some(refused) = super::inject::encoded_body(
            parts
                .headers
                .get_all(http::header::CONTENT_ENCODING)
                .iter()
                .map(HeaderValue::as_bytes),
        )
    {
        return refuse_with(t, &method, &judged, started, refused);
    }
    // An IPv6 literal is bracketed, else the URI does not parse and the request is refused.
    let authority = Authority::new(t.host.clone(), t.port).to_uri_authority(443);
    let uri = match format!("https://{authority}{origin_form}").parse::<Uri>() {
        Ok(u) => u,
        Err(e) => {
            let refusal = Refusal::new(
                400,
                "invalid_request_target",
                format!("request-target refused: {e}"),
            );
            return refuse(t, &method, &judged, started, &refusal);
        }
    };
    let mut up = Request::builder()
        .method(parts.method)
        .uri(uri)
        .version(http::Version::HTTP_2);
    for (name, value) in &headers {
        let n = name.as_str();
        // HTTP/2 forbids connection-specific headers; `te: trailers` is the one allowed (gRPC).
        if (is_hop_by_hop(n) && !(n == "te" && value.as_slice() == b"trailers")) || n == "host" {
            continue;
        }
        up = up.header(name.as_str(), value.as_slice());
    }
    // Opt-in body rewriting is done on HTTP/1.1 only so far; on HTTP/2 a placeholder in the
    // body of a credentialed endpoint is stopped like any other (never sent unresolved).
    let tripped = Arc::new(std::sync::OnceLock::new());
    let body = Guarded {
        inner: body,
        guard: guard_body.then(credentials::BodyGuard::new),
        tripped: Arc::clone(&tripped),
        pacer: body::Pacer::new(t.shared.limits.body_pace),
        waiting: None,
    };
    let upstream_req = match up.body(body) {
        Ok(r) => r,
        Err(e) => {
            let refusal = Refusal::new(400, "bad_request", e.to_string());
            return refuse(t, &method, &judged, started, &refusal);
        }
    };
    let timeout = t.shared.limits.upstream_timeout;
    let response = match tokio::time::timeout(timeout, sender.send_request(upstream_req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) if matches!(tripped.get(), Some(body::BodyError::PlaceholderInTrailers)) => {
            let refusal = Refusal::new(
                403,
                "credential_in_trailers",
                "a credential placeholder in the request trailers would reach the upstream unresolved; sluice swaps placeholders in request headers only",
            );
            return refuse(t, &method, &judged, started, &refusal);
        }
        Ok(Err(_)) if matches!(tripped.get(), Some(body::BodyError::Placeholder)) => {
            super::emit_finding(
                &t.shared,
                t.conn_id,
                t.peer,
                Some(&t.known),
                audit::Destination {
                    host: t.host.clone(),
                    port: t.port,
                    ip: Some(t.addr.ip()),
                },
                "openshell.credentials.traffic_uninspectable",
                format!("request body with a credential placeholder stopped before {hp}"),
                None,
                Some(judged.policy.clone()),
            );
            let refusal = Refusal::new(
                403,
                "credential_in_body",
                "a credential placeholder in the request body would reach the upstream unresolved; this endpoint does not allow body rewriting (request_body_credential_rewrite)",
            );
            return refuse(t, &method, &judged, started, &refusal);
        }
        Ok(Err(_)) if let Some(slow @ body::BodyError::TooSlow(_)) = tripped.get() => {
            let refusal = slow.refusal();
            let mut j = judged.clone();
            j.outcome = Outcome::Denied;
            j.engine = Engine::Proxy;
            return refuse(t, &method, &j, started, &refusal);
        }
        Ok(Err(e)) => {
            let refusal = Refusal::new(
                502,
                "upstream_unreachable",
                format!("connection to {hp} failed"),
            )
            .with_reason(e.to_string());
            return refuse(t, &method, &judged, started, &refusal);
        }
        Err(_) => {
            let refusal = Refusal::new(
                504,
                "upstream_timeout",
                format!("{hp} sent no response within {} s", timeout.as_secs_f32()),
            );
            return refuse(t, &method, &judged, started, &refusal);
        }
    };
    let status = response.status().as_u16();
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
    let body = if scrub.is_empty() {
        response.map(BodyExt::boxed)
    } else {
        // A secret went in, or the endpoint has secrets bound: the response is scrubbed.
        match super::inject::scrub(&dest, scrub, &injected, response).await {
            Ok(r) => r.map(BodyExt::boxed),
            Err(refused) => return refuse_with(t, &method, &judged, started, refused),
        }
    };
    let reason = judged.reason.clone();
    emit_with(
        t,
        &method,
        &judged,
        Some(status),
        0,
        started,
        reason,
        injected,
    );
    body
}

/// Audits and answers a refusal whose audit reason differs from its client text.
fn refuse_with(
    t: &H2Tunnel,
    method: &str,
    j: &Judged,
    started: Instant,
    refused: super::inject::Refused,
) -> Response<Body> {
    let refusal = refused.refusal.with_reason(refused.reason);
    refuse(t, method, j, started, &refusal)
}

#[allow(clippy::too_many_arguments)] // the parts of one audit record
fn emit(
    t: &H2Tunnel,
    method: &str,
    j: &Judged,
    status: Option<u16>,
    bytes_out: u64,
    started: Instant,
    reason: Option<String>,
) {
    emit_with(t, method, j, status, bytes_out, started, reason, Vec::new());
}

#[allow(clippy::too_many_arguments)] // the parts of one audit record
fn emit_with(
    t: &H2Tunnel,
    method: &str,
    j: &Judged,
    status: Option<u16>,
    bytes_out: u64,
    started: Instant,
    reason: Option<String>,
    credentials: Vec<String>,
) {
    t.shared
        .audit
        .emit(&audit::Event::HttpRequest(audit::HttpRequest {
            time: SystemTime::now(),
            id: t.conn_id,
            caller: Some(t.known.audit.clone()),
            src: t.peer,
            dst: audit::Destination {
                host: t.host.clone(),
                port: t.port,
                ip: Some(t.addr.ip()),
            },
            method: method.to_ascii_uppercase(),
            scheme: "https",
            path: j
                .path
                .clone()
                .unwrap_or_else(|| j.origin_form.split('?').next().unwrap_or("/").to_string()),
            outcome: j.outcome,
            policy: Some(j.policy.clone()),
            engine: j.engine,
            rule: j.rule.clone(),
            reason,
            status,
            bytes_in: 0,
            bytes_out,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            credentials,
        }));
}
