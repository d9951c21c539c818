//! HTTP/1.1 on one client connection: absolute-form requests (`GET http://host/path`), each
//! admitted on its own by the connection phase (`phases/connection.rs`) and forwarded with
//! keep-alive on both sides, or the requests inside an admitted tunnel (TLS-terminated, or
//! plaintext HTTP). A thin adapter: each head read strictly, made a request, handed to the
//! one exchange (`phases/exchange.rs`, the same as HTTP/2's), its answer written.
//!
//! Owns HTTP/1.1's wire: reading heads (a later one refused is audited as the first is),
//! decoding and pacing a body by its framing into the channel the exchange's body check
//! reads (`http::body::pump`, started when the exchange asks for the body), `100 Continue`,
//! writing answers, and this connection's upstream connections (`H1Wire`). Hop-by-hop and
//! `Proxy-*` headers never cross; the canonical path is what goes upstream.

use std::collections::HashMap;
use std::task::Poll;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::oneshot;

pub use super::http1_route::{Route, Tunnel};
use super::http1_route::{Upstream, upstream_for};
use super::lease;
use super::unread;
use crate::audit::{self, Engine};
use crate::http::body::{self, ChannelBody, UpBody};
use crate::http::head::{self, BodyFraming, HeadError, RequestHead};
use crate::http::respond::{self, Code, Refusal};
use crate::pipeline::authority::Authority;
use crate::pipeline::caller::identify::{self, CallerState, Known};
use crate::pipeline::client::accepted::Conn;
use crate::pipeline::denial::Denial;
use crate::pipeline::denial::{head_refusal, smuggling_finding};
use crate::pipeline::phases::connection;
use crate::pipeline::phases::connection::{Admitted, Scheme};
use crate::pipeline::phases::exchange::{self, Answered, Wire};
use crate::pipeline::phases::record::Record;
use crate::pipeline::phases::request::{Exchange, Head};
use crate::pipeline::state::shared::Shared;
use crate::pipeline::target::{host_matches, parse_absolute, tunnel_target};
use crate::pipeline::transports::websocket::handshake::{self, Client, Handshake};

/// What one request did to the connection.
pub(crate) struct Step {
    pub(crate) keep_alive: bool,
}

/// One client connection's HTTP/1.1 session: what its requests share.
pub struct Session<'a, R, W> {
    pub shared: &'a Shared,
    pub conn: &'a Conn,
    /// The caller, confirmed again at every later request.
    pub caller: CallerState,
    pub route: Route,
    pub rd: R,
    pub wr: W,
    /// Bytes read from the client and not yet consumed.
    pub buf: BytesMut,
}

impl<R, W> std::fmt::Debug for Session<'_, R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("conn", &self.conn.id)
            .field("route", &self.route)
            .finish_non_exhaustive()
    }
}

/// Serves HTTP/1 requests on a client connection until it closes: absolute-form requests
/// (`Route::Forward`, with the first head already read) or requests in a tunnel.
pub async fn serve<R, W>(s: Session<'_, R, W>, first: Option<RequestHead>)
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    serve_route(s, first).await;
}

/// Like [`serve`], and hands back the route (a tunnel's upstream connection, for the pool).
pub async fn serve_route<R, W>(mut s: Session<'_, R, W>, first: Option<RequestHead>) -> Route
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let mut upstreams: HashMap<Authority, Upstream> = HashMap::new();
    let mut next = first;
    // A tunnel's first request is awaited even while sluice drains (the client opened the
    // tunnel to send it); only a connection idle after a request is closed for the drain.
    let mut served = false;
    loop {
        let head = match next.take() {
            Some(h) => h,
            None => match read_next(&mut s, served).await {
                Some(h) => {
                    // Each later request is the caller's only if it still holds the socket,
                    // and no other program of its family does too (on a gateway: if its proxy credentials, when sent, are still its
                    // tenant's; they are the proxy hop's, so only absolute-form requests
                    // carry them: inside a tunnel, `Proxy-Authorization` is not sluice's and
                    // is dropped like every `Proxy-*` header).
                    identify::reconfirm(s.shared, &mut s.caller).await;
                    if matches!(s.route, Route::Forward) {
                        identify::by_credentials(s.shared, &mut s.caller, s.conn, &h, false);
                    }
                    h
                }
                None => break,
            },
        };
        // Boxed: the request phase's state (kilobytes) exists only while a request is
        // in flight, not while the connection waits idle for the next one.
        let step = Box::pin(one(&mut s, &mut upstreams, &head)).await;
        served = true;
        if !step.keep_alive {
            // The client may still be sending (a refused request's body): read it before
            // closing, so that closing does not reset the answer away.
            let _ = s.wr.shutdown().await;
            unread::linger(&mut s.rd).await;
            break;
        }
    }
    let _ = s.wr.shutdown().await;
    s.route
}

/// The next request head on a kept-alive connection; `None` ends the connection (after
/// answering a malformed head, or, once a request was `served`, when sluice drains). While the client sends nothing, the connection holds no
/// head buffer, and a leased tunnel gives its upstream connection back once the client has
/// idled [`lease::RELEASE_AFTER`].
async fn read_next<R, W>(s: &mut Session<'_, R, W>, served: bool) -> Option<RequestHead>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let Session {
        shared,
        conn,
        caller,
        route,
        rd,
        wr,
        buf,
    } = s;
    let deadline = tokio::time::Instant::now() + shared.limits.keepalive_timeout;
    let limit = shared.limits.max_head_bytes;
    if buf.is_empty() {
        // A draining sluice serves no new request on a kept-alive connection: it closes it
        // now rather than wait for one (the client's next request opens a new connection,
        // to a replica that is not draining).
        if served && shared.drain.is_draining() {
            return None;
        }
        // The last request's buffer goes; the first bytes of the next are read into one of
        // their size (`read_head` grows it if the head needs more).
        *buf = BytesMut::new();
        let waiting = async {
            match tokio::time::timeout(lease::RELEASE_AFTER, read_first(rd, buf, limit)).await {
                Ok(read) => Some(read),
                Err(_) => {
                    if let Route::Tunnel(t) = route {
                        t.release(shared);
                    }
                    tokio::time::timeout_at(deadline, read_first(rd, buf, limit))
                        .await
                        .ok()
                }
            }
        };
        // Biased: a request that has arrived is served, not dropped for the drain.
        let drained = async {
            if served {
                shared.drain.started().await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let first = tokio::select! {
            biased;
            first = waiting => first?,
            () = drained => return None,
        };
        if !matches!(first, Ok(n) if n > 0) {
            return None;
        }
    }
    match tokio::time::timeout_at(
        deadline,
        head::read_head(rd, buf, shared.limits.max_head_bytes),
    )
    .await
    {
        Ok(Ok(h)) if h.method.eq_ignore_ascii_case("CONNECT") => {
            let refusal = Refusal::new(
                Code::BadRequest,
                "CONNECT after a forwarded request on the same connection: open a new connection",
            );
            let mut rec = later_record(shared, conn, caller, route);
            rec.request(&h.method, "");
            if matches!(route, Route::Forward)
                && let Ok(asked) = Authority::parse_connect(&h.target)
            {
                rec.dst = asked;
            }
            refuse(wr, rec, &Denial::new(Engine::HttpParser, refusal)).await;
            None
        }
        Ok(Ok(h)) => Some(h),
        Ok(Err(HeadError::Closed)) | Err(_) => None,
        Ok(Err(e)) => {
            let dst = match route {
                Route::Tunnel(t) => audit::Destination {
                    host: t.admitted.dst.host().to_string(),
                    port: t.admitted.dst.port(),
                    ip: None,
                },
                Route::Forward => audit::Destination {
                    host: String::new(),
                    port: 0,
                    ip: None,
                },
            };
            let known = caller
                .as_ref()
                .ok()
                .map(|k| std::sync::Arc::clone(&k.audit));
            smuggling_finding(shared, conn, known, dst, &e);
            let mut rec = later_record(shared, conn, caller, route);
            rec.request(line_method(buf), "");
            refuse(wr, rec, &Denial::new(Engine::HttpParser, head_refusal(&e))).await;
            None
        }
    }
}

/// The method of a head that could not be read, from its request line when it names one
/// (a token), else `-`: what its audit record names.
fn line_method(raw: &[u8]) -> &str {
    let token = raw.split(|b| *b == b' ').next().unwrap_or_default();
    match std::str::from_utf8(token) {
        Ok(m) if (1..=32).contains(&m.len()) && m.bytes().all(|b| b.is_ascii_alphabetic()) => m,
        _ => "-",
    }
}

/// The audit record of a later request refused before it could be read (a malformed head, a
/// `CONNECT`): audited like the first, with the tunnel's destination when it is in one.
fn later_record(shared: &Shared, conn: &Conn, caller: &CallerState, route: &Route) -> Record {
    let mut rec = Record::open(shared, conn.id, conn.peer, caller.as_ref().ok());
    if let Route::Tunnel(t) = route {
        rec.on(&t.admitted);
    }
    rec
}

/// Reads the first bytes of the next request into `buf` (empty) through a buffer on the
/// stack: while the client idles the connection holds no buffer, and what arrives lands in
/// one allocation of its size (not a small one grown, and copied, as the head comes in).
/// At most `limit` bytes (the head limit), so that a head past it is still refused.
async fn read_first<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    limit: usize,
) -> std::io::Result<usize> {
    std::future::poll_fn(|cx| {
        let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let at_most = limit.clamp(1, stack.len());
        let mut read = ReadBuf::uninit(&mut stack[..at_most]);
        match std::pin::Pin::new(&mut *rd).poll_read(cx, &mut read) {
            Poll::Ready(Ok(())) => {
                buf.extend_from_slice(read.filled());
                Poll::Ready(Ok(read.filled().len()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

/// Answers a request with a refusal (the connection closes after it) and audits it.
async fn refuse<W: AsyncWrite + Unpin>(wr: &mut W, mut rec: Record, d: &Denial) -> Step {
    let _ = wr.write_all(&d.refusal.to_bytes()).await;
    rec.deny(d);
    rec.finish();
    Step { keep_alive: false }
}

/// A WebSocket handshake: `GET` with `Upgrade: websocket` and `Connection: upgrade`.
fn is_websocket(head: &RequestHead) -> bool {
    head.method.eq_ignore_ascii_case("GET")
        && head
            .header("upgrade")
            .is_some_and(|u| u.eq_ignore_ascii_case(b"websocket"))
        && head.connection_tokens().iter().any(|t| t == "upgrade")
}

/// An absolute-form request's connection phase: its target parsed and normalised, the
/// doctor host answered, its `Host` header checked, its caller and L4 decision. `None`: the
/// request was answered (the doctor host, for a known caller; the connection closes).
async fn admit_forward<W: AsyncWrite + Unpin>(
    shared: &Shared,
    caller: &CallerState,
    head: &RequestHead,
    wr: &mut W,
    rec: &mut Record,
) -> Result<Option<(Admitted, String)>, Denial> {
    let target = parse_absolute(&head.target).map_err(|r| Denial::new(Engine::HttpParser, r))?;
    rec.request(&head.method, &target.path_and_query);
    let asked = Authority::new(target.host.to_ascii_lowercase(), target.port);
    rec.dst = asked.clone();
    let dst = connection::normalize(&rec.method, &asked)?;
    rec.dst = dst.clone();
    if dst.host() == crate::pipeline::doctor::HOST && caller.is_ok() && !shared.audit.refusing() {
        let _ = wr
            .write_all(&crate::pipeline::doctor::plain_response(&rec.path))
            .await;
        rec.outcome = audit::Outcome::Allowed;
        rec.engine = Engine::Proxy;
        rec.status = Some(200);
        rec.reason = Some(format!(
            "answered by sluice itself ({})",
            crate::pipeline::doctor::HOST
        ));
        return Ok(None);
    }
    if let Some(h) = head.header("host")
        && !host_matches(h, dst.host(), dst.port(), 80)
    {
        let refusal = Refusal::new(
            Code::BadRequest,
            "the Host header does not match the request URI's authority",
        );
        return Err(Denial::new(Engine::HttpParser, refusal));
    }
    let what = format!("{} {dst}{}", rec.method, rec.path);
    let (_, admitted) = connection::admit(shared, caller.as_ref(), &dst, Scheme::Http, &what)?;
    Ok(Some((admitted, target.path_and_query)))
}

/// HTTP/1.1's wire work for one exchange (`exchange::Transport`): this connection's
/// upstream connections, `100 Continue`, and the word to start reading the body.
struct H1Wire<'s, W> {
    shared: &'s Shared,
    conn: &'s Conn,
    route: &'s mut Route,
    upstreams: &'s mut HashMap<Authority, Upstream>,
    wr: &'s mut W,
    /// The destination, the key of a forward upstream.
    key: Authority,
    expect_continue: bool,
    /// Told when the client's body may be read.
    go: Option<oneshot::Sender<()>>,
    /// An absolute-form request, live until it ends.
    live: Option<crate::pipeline::state::live::Registration<'s>>,
}

impl<W> H1Wire<'_, W> {
    /// The upstream the exchange picked.
    fn chosen(&mut self) -> Option<&mut Upstream> {
        match &mut *self.route {
            Route::Tunnel(t) => t.upstream.as_mut(),
            Route::Forward => self.upstreams.get_mut(&self.key),
        }
    }
}

impl<W: AsyncWrite + Unpin + Send> exchange::Transport for H1Wire<'_, W> {
    async fn upstream(
        &mut self,
        x: &Exchange<'_>,
        known: &Known,
        rec: &mut Record,
    ) -> Result<bool, Denial> {
        let Some(upstream) = upstream_for(x, self.route, self.upstreams, &rec.method).await? else {
            return Ok(false);
        };
        // Reusable again only if this exchange ends cleanly.
        upstream.reusable = false;
        let addr = upstream.addr;
        rec.ip = Some(addr.ip());
        // An absolute-form request is live until it ends (its response, or its WebSocket): a
        // reload that no longer allows it, or no longer allows the address its upstream was
        // dialled at (per request, or kept from an earlier one at an address still allowed),
        // stops the connection. A tunnel registered itself.
        if matches!(self.route, Route::Forward) {
            let kind = connection::Kind::Forward;
            let live =
                connection::hold(self.shared, self.conn, known, x.admitted, kind, Some(addr));
            self.live = Some(live);
        }
        Ok(true)
    }

    async fn proceed(&mut self) -> bool {
        if self.expect_continue
            && self
                .wr
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
        {
            return false;
        }
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
        true
    }

    async fn send(
        &mut self,
        request: http::Request<UpBody>,
    ) -> Result<http::Response<hyper::body::Incoming>, String> {
        match self.chosen() {
            Some(u) => u
                .sender
                .send_request(request)
                .await
                .map_err(|e| e.to_string()),
            None => Err("the upstream connection is gone".to_string()),
        }
    }
}

/// What became of one exchange on the client's side.
enum Wrote<'k> {
    /// The answer was written (or failed midway).
    Answer(Result<respond::Written, respond::WriteError>),
    /// A refusal was written; the connection closes.
    Refused,
    /// A WebSocket handshake the upstream accepted, to relay.
    Upgrade(&'k Known, Box<exchange::Upgrade>),
    /// Nothing to write: the upstream or the client is gone.
    Gone,
}

/// One request on the connection: its connection phase (absolute-form) or its tunnel's
/// admission, then the exchange (`phases/exchange.rs`) while its body is read from the
/// client, then its answer written.
async fn one<R, W>(
    s: &mut Session<'_, R, W>,
    upstreams: &mut HashMap<Authority, Upstream>,
    head: &RequestHead,
) -> Step
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let Session {
        shared,
        conn,
        caller,
        route,
        rd,
        wr,
        buf,
    } = s;
    let shared: &Shared = shared;
    let conn: &Conn = conn;
    let mut rec = Record::open(shared, conn.id, conn.peer, caller.as_ref().ok());
    // Named from the start: a request refused before its target is parsed is audited with it.
    rec.method = head.method.to_ascii_uppercase();
    // The connection phase (absolute-form), or the tunnel's admission.
    let (admitted, path_and_query, authority_ok) = match route {
        Route::Forward => match admit_forward(shared, caller, head, wr, &mut rec).await {
            Ok(Some((admitted, pq))) => (admitted, pq, true),
            // The doctor host, answered.
            Ok(None) => {
                rec.finish();
                return Step { keep_alive: false };
            }
            Err(d) => return refuse(wr, rec, &d).await,
        },
        Route::Tunnel(t) => {
            let (pq, ok) = tunnel_target(head, &t.admitted);
            rec.request(&head.method, &pq);
            (t.admitted.clone(), pq, ok)
        }
    };
    let x = Exchange {
        shared,
        admitted: &admitted,
    };
    let websocket = is_websocket(head);
    let framing = head.framing();
    let req = Head {
        method: &head.method,
        target: &path_and_query,
        authority_ok,
        headers: head.headers.clone(),
        websocket,
        has_body: framing != BodyFraming::None,
    };
    // The body as it is decoded goes through a channel to the exchange (which checks it);
    // it is read once the exchange asks for it.
    let (tx, raw) = match framing {
        BodyFraming::None => (None, ChannelBody::empty()),
        BodyFraming::Length(n) => {
            let (tx, b) = ChannelBody::channel(Some(n));
            (Some(tx), b)
        }
        BodyFraming::Chunked => {
            let (tx, b) = ChannelBody::channel(None);
            (Some(tx), b)
        }
    };
    let nominated = head.connection_tokens();
    let request = exchange::ClientRequest {
        head: req,
        wire: Wire {
            method: &head.method,
            version: http::Version::HTTP_11,
            nominated: &nominated,
            chunked: framing == BodyFraming::Chunked,
            websocket,
        },
        body: raw,
        pace: None,
    };
    let (go, ready) = oneshot::channel();
    let mut wire = H1Wire {
        shared,
        conn,
        route,
        upstreams,
        wr,
        key: admitted.dst.clone(),
        expect_continue: head
            .header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case(b"100-continue")),
        go: Some(go),
        live: None,
    };
    let pace = shared.limits.body_pace;
    let pump = async {
        let tx = tx?;
        ready.await.ok()?;
        let sink = body::BodySink::new(tx).paced(pace);
        Some(body::pump(&mut *rd, &mut *buf, framing, sink).await)
    };
    let is_head = head.method.eq_ignore_ascii_case("HEAD");
    let client_keep_alive = head.keep_alive() && !websocket;
    let exchanged = async {
        let answered = exchange::exchange(&x, caller.as_ref(), request, rec, &mut wire).await;
        match answered {
            Answered::Response(response) => {
                let written = respond::write_response(
                    &mut *wire.wr,
                    response,
                    is_head,
                    head.minor_version,
                    client_keep_alive,
                )
                .await;
                Wrote::Answer(written)
            }
            Answered::Refused { denial, .. } => {
                let _ = wire.wr.write_all(&denial.refusal.to_bytes()).await;
                Wrote::Refused
            }
            Answered::Upgrade(known, up) => Wrote::Upgrade(known, up),
            Answered::Gone => Wrote::Gone,
        }
    };
    // The body goes up as the response comes down; either may finish first.
    let (pumped, wrote) = {
        tokio::pin!(pump);
        tokio::pin!(exchanged);
        tokio::select! {
            w = &mut exchanged => {
                // The response is out; the body should be done too (a server may answer early).
                let p = tokio::time::timeout(std::time::Duration::from_millis(500), &mut pump).await.ok();
                (p, w)
            }
            p = &mut pump => {
                let w = exchanged.await;
                (Some(p), w)
            }
        }
    };
    // No body, or all of it read.
    let body_complete = matches!(pumped, Some(None | Some(Ok(_))));
    match wrote {
        Wrote::Answer(Ok(written)) => {
            let clean = body_complete && !written.close_delimited;
            if let Some(u) = wire.chosen() {
                u.reusable = clean;
            }
            Step {
                keep_alive: client_keep_alive && clean,
            }
        }
        Wrote::Answer(Err(_)) | Wrote::Refused | Wrote::Gone => Step { keep_alive: false },
        Wrote::Upgrade(known, up) => {
            let hs = Handshake {
                key: head.header("sec-websocket-key").map(<[u8]>::to_vec),
                target: path_and_query.clone(),
                path: up.rec.path.clone(),
            };
            let client = Client {
                rd,
                wr: &mut *wire.wr,
                buf,
            };
            Box::pin(handshake::relay(&x, known, *up, client, hs)).await;
            Step { keep_alive: false }
        }
    }
}
