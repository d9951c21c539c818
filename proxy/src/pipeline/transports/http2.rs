//! HTTP/2 in an inspected tunnel: hyper's HTTP/2 server on the client's TLS stream, hyper's
//! HTTP/2 client on the upstream's, and the same judgement (`judge`) per stream as HTTP/1.
//!
//! Owns only HTTP/2's wire work around the one exchange (`phases/exchange.rs`, the same as
//! HTTP/1.1's): the stream's authority (`:authority` or `Host`), head and body handed to it
//! (the body paced there, with HTTP/2 flow control as backpressure), and its answer written
//! back on the stream without connection-specific headers (its body audited to its end by
//! the exchange), or its refusal. A refusal answers that stream only; the connection and its
//! other streams go on. gRPC is HTTP/2 with trailers and needs nothing more.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};

use super::unread;
use crate::http::body::UpBody;
use crate::http::respond::is_hop_by_hop;
use crate::pipeline::caller::identify::{self, Known};
use crate::pipeline::denial::Denial;
use crate::pipeline::phases::connection::Admitted;
use crate::pipeline::phases::exchange::{self, Answered, Wire};
use crate::pipeline::phases::record::Record;
use crate::pipeline::phases::request::{Exchange, Head};
use crate::pipeline::state::shared::Shared;
use crate::pipeline::target::host_matches;

type Body = BoxBody<Bytes, BoxError>;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    refusal(d)
}

/// A refusal as an HTTP/2 answer.
fn refusal(d: &Denial) -> Response<Body> {
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

/// HTTP/2's wire work for one stream's exchange (`exchange::Transport`): the tunnel's one
/// upstream connection, already dialled; hyper answers `100 Continue` itself.
struct H2Wire {
    sender: SendRequest<UpBody>,
}

impl exchange::Transport for H2Wire {
    async fn upstream(
        &mut self,
        _: &Exchange<'_>,
        _: &Known,
        _: &mut Record,
    ) -> Result<bool, Denial> {
        Ok(true)
    }

    async fn proceed(&mut self) -> bool {
        true
    }

    async fn send(&mut self, request: Request<UpBody>) -> Result<Response<Incoming>, String> {
        self.sender
            .send_request(request)
            .await
            .map_err(|e| e.to_string())
    }
}

/// One stream: its authority and head handed to the exchange (`phases/exchange.rs`), its
/// answer or refusal written back on the stream.
async fn handle(
    t: &H2Tunnel,
    sender: SendRequest<UpBody>,
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
        host_matches(a.as_bytes(), dst.host(), dst.port(), default)
    });
    // Each stream is the caller's only if it still holds the socket, alone. (A gateway
    // tenant is its tunnel's: a stream's `Proxy-Authorization` is not sluice's, and is
    // dropped.)
    let confirmed = identify::recheck(&t.shared, &t.known).await;
    let (parts, body) = req.into_parts();
    let head = Head {
        method: parts.method.as_str(),
        target: &path_and_query,
        authority_ok,
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
            .collect(),
        websocket: false,
        has_body: !http_body::Body::is_end_stream(&body),
    };
    let request = exchange::ClientRequest {
        head,
        wire: Wire {
            method: parts.method.as_str(),
            version: http::Version::HTTP_2,
            nominated: &[],
            chunked: false,
            websocket: false,
        },
        body,
        pace: Some(t.shared.limits.body_pace),
    };
    let caller = confirmed.as_ref().map(|()| &t.known);
    let mut wire = H2Wire { sender };
    match exchange::exchange(&x, caller, request, rec, &mut wire).await {
        Answered::Response(response) => {
            let (mut parts, body) = response.into_parts();
            // Connection-specific headers have no place in HTTP/2.
            let drop: Vec<http::HeaderName> = parts
                .headers
                .keys()
                .filter(|n| is_hop_by_hop(n.as_str()))
                .cloned()
                .collect();
            for n in drop {
                parts.headers.remove(n);
            }
            Response::from_parts(parts, body.boxed())
        }
        Answered::Refused { denial, unread } => {
            if let Some(mut body) = unread {
                unread::drain_body(&mut body).await;
            }
            refusal(&denial)
        }
        // No upgrade over HTTP/2, and its upstream is never gone before a stream.
        Answered::Upgrade(..) | Answered::Gone => refusal(&x.upstream_failed("no answer")),
    }
}
