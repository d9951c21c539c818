//! Absolute-form HTTP (`GET http://host/path HTTP/1.1`): each request decided and forwarded,
//! keep-alive on both sides.
//!
//! Owns the forward-proxy loop of one client connection: parse the absolute target, decide
//! (L4 for host:port, then the L7 rules of an inspected endpoint, on the canonical path),
//! reuse or dial the upstream (through `destination`, SSRF-checked), stream the request body
//! up and the response down with backpressure, and audit each request. Hop-by-hop and
//! `Proxy-*` headers never cross; the canonical path is what goes upstream.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::BytesMut;
use http::HeaderValue;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use super::caller::Known;
use super::connect::dial_refusal;
use super::destination;
use super::inject;
use super::judge;
use super::target::{host_matches, parse_absolute, tunnel_target};
use super::websocket::websocket;
use super::{Conn, Shared, head_refusal};
use crate::audit::{self, Engine, Outcome};
use crate::credentials;
use crate::http::body::{self, ChannelBody};
use crate::http::head::{self, BodyFraming, HeadError, RequestHead};
use crate::http::respond::{self, Refusal};
use crate::policy::canon;
use crate::policy::decide::Admission;
use crate::policy::{L4Decision, Policy};

/// Upstream connections kept per client connection.
const MAX_UPSTREAMS: usize = 8;

pub(super) struct Upstream {
    pub(super) sender: SendRequest<ChannelBody>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// What one request did to the connection.
pub(super) struct Step {
    pub(super) keep_alive: bool,
}

/// How requests on this connection find their upstream.
#[derive(Debug)]
pub enum Route {
    /// Absolute-form requests: each names its own host, decided and dialled per request.
    Forward,
    /// Requests inside an admitted CONNECT tunnel (TLS-terminated, or plaintext HTTP).
    Tunnel(Tunnel),
}

/// An admitted tunnel: its target, the policy snapshot it was admitted under, and its
/// upstream connection.
#[derive(Debug)]
pub struct Tunnel {
    pub host: String,
    pub port: u16,
    /// `https` when the tunnel carries TLS, else `http`.
    pub scheme: &'static str,
    pub policy: Arc<Policy>,
    pub admission: Admission,
    upstream: Upstream,
}

impl Tunnel {
    #[allow(clippy::too_many_arguments)] // the parts of an admitted tunnel
    pub fn new(
        host: String,
        port: u16,
        scheme: &'static str,
        policy: Arc<Policy>,
        admission: Admission,
        sender: SendRequest<ChannelBody>,
        addr: SocketAddr,
    ) -> Tunnel {
        Tunnel {
            host,
            port,
            scheme,
            policy,
            admission,
            upstream: Upstream { sender, addr },
        }
    }
}

/// Serves HTTP/1 requests on a client connection until it closes: absolute-form requests
/// (`Route::Forward`, with the first head already read) or requests in a tunnel.
#[allow(clippy::too_many_arguments)] // one connection's halves, state and route
pub async fn serve<R, W>(
    shared: &Shared,
    conn: &Conn,
    mut caller: Result<Known, String>,
    mut route: Route,
    first: Option<RequestHead>,
    mut rd: R,
    mut wr: W,
    mut buf: BytesMut,
) where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let mut upstreams: HashMap<(String, u16), Upstream> = HashMap::new();
    let mut next = first;
    loop {
        let head = match next.take() {
            Some(h) => h,
            None => match read_next(shared, &mut rd, &mut wr, &mut buf).await {
                Some(h) => {
                    // Each later request is the caller's only if it still holds the socket.
                    super::caller::reconfirm(shared, &mut caller).await;
                    h
                }
                None => break,
            },
        };
        let step = one(
            shared,
            conn,
            &caller,
            &mut route,
            &head,
            &mut rd,
            &mut wr,
            &mut buf,
            &mut upstreams,
        )
        .await;
        if !step.keep_alive {
            break;
        }
    }
    let _ = wr.shutdown().await;
}

/// The next request head on a kept-alive connection; `None` ends the connection (after
/// answering a malformed head).
async fn read_next<R, W>(
    shared: &Shared,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
) -> Option<RequestHead>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    match tokio::time::timeout(
        shared.limits.keepalive_timeout,
        head::read_head(rd, buf, shared.limits.max_head_bytes),
    )
    .await
    {
        Ok(Ok(h)) if h.method.eq_ignore_ascii_case("CONNECT") => {
            let refusal = Refusal::new(
                400,
                "bad_request",
                "CONNECT after a forwarded request on the same connection: open a new connection",
            );
            let _ = wr.write_all(&refusal.to_bytes()).await;
            None
        }
        Ok(Ok(h)) => Some(h),
        Ok(Err(HeadError::Closed)) | Err(_) => None,
        Ok(Err(e)) => {
            let _ = wr.write_all(&head_refusal(&e).to_bytes()).await;
            None
        }
    }
}

/// The audit record of one request, filled in as the request goes.
pub(super) struct Record<'a> {
    pub(super) shared: &'a Shared,
    pub(super) conn: &'a Conn,
    pub(super) caller: Option<&'a Known>,
    pub(super) started: Instant,
    pub(super) method: String,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) ip: Option<std::net::IpAddr>,
    pub(super) path: String,
    pub(super) policy: Option<String>,
    pub(super) rule: Option<String>,
    pub(super) scheme: &'static str,
    /// Names of the credentials injected into this request.
    pub(super) credentials: Vec<String>,
}

impl Record<'_> {
    pub(super) fn emit(
        &self,
        outcome: Outcome,
        engine: Engine,
        reason: Option<String>,
        status: Option<u16>,
        bytes_in: u64,
        bytes_out: u64,
    ) {
        self.shared
            .audit
            .emit(&audit::Event::HttpRequest(audit::HttpRequest {
                time: SystemTime::now(),
                id: self.conn.id,
                caller: self.caller.map(|c| c.audit.clone()),
                src: self.conn.peer,
                dst: audit::Destination {
                    host: self.host.clone(),
                    port: self.port,
                    ip: self.ip,
                },
                method: self.method.clone(),
                scheme: self.scheme,
                path: self.path.clone(),
                outcome,
                policy: self.policy.clone(),
                engine,
                rule: self.rule.clone(),
                reason,
                status,
                bytes_in,
                bytes_out,
                duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                credentials: self.credentials.clone(),
            }));
    }

    /// Where this request goes, for credential findings; `None` without a known caller.
    pub(super) fn dest(&self) -> Option<inject::Dest<'_>> {
        Some(inject::Dest {
            shared: self.shared,
            conn_id: self.conn.id,
            peer: self.conn.peer,
            caller: self.caller?,
            host: &self.host,
            port: self.port,
            ip: self.ip,
            policy: self.policy.clone(),
        })
    }

    /// Refuses with a refusal whose audit reason differs from its client text.
    pub(super) async fn refuse_with<W: AsyncWrite + Unpin>(
        &self,
        wr: &mut W,
        refused: inject::Refused,
        engine: Engine,
    ) -> Step {
        let refusal = refused.refusal.with_reason(refused.reason);
        self.refuse(wr, refusal, engine).await
    }

    pub(super) async fn refuse<W: AsyncWrite + Unpin>(
        &self,
        wr: &mut W,
        refusal: Refusal,
        engine: Engine,
    ) -> Step {
        let _ = wr.write_all(&refusal.to_bytes()).await;
        let reason = refusal
            .reason
            .clone()
            .unwrap_or_else(|| refusal.detail.clone());
        self.emit(
            Outcome::Denied,
            engine,
            Some(reason),
            Some(refusal.status),
            0,
            0,
        );
        Step { keep_alive: false }
    }
}

/// The path without its query, for messages and audit (queries are never logged).
fn path_only(path_and_query: &str) -> &str {
    path_and_query.split('?').next().unwrap_or("/")
}

#[allow(clippy::too_many_arguments)] // the halves of one connection and its state, borrowed together
async fn one<R, W>(
    shared: &Shared,
    conn: &Conn,
    caller: &Result<Known, String>,
    route: &mut Route,
    head: &RequestHead,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    upstreams: &mut HashMap<(String, u16), Upstream>,
) -> Step
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let mut rec = Record {
        shared,
        conn,
        caller: caller.as_ref().ok(),
        started: Instant::now(),
        method: head.method.to_ascii_uppercase(),
        host: String::new(),
        port: 0,
        ip: None,
        path: String::new(),
        policy: None,
        rule: None,
        scheme: match route {
            Route::Tunnel(t) => t.scheme,
            Route::Forward => "http",
        },
        credentials: Vec::new(),
    };
    let (host, port, path_and_query, policy, admission, known) = match route {
        Route::Forward => {
            let target = match parse_absolute(&head.target) {
                Ok(t) => t,
                Err(refusal) => return rec.refuse(wr, refusal, Engine::HttpParser).await,
            };
            rec.host = target.host.to_ascii_lowercase();
            rec.port = target.port;
            rec.path = path_only(&target.path_and_query).to_string();
            let hp = format!("{}:{}", rec.host, rec.port);
            let host = match canon::normalize_host(&target.host) {
                Ok(h) => h,
                Err(e) => {
                    return rec
                        .refuse(
                            wr,
                            Refusal::new(
                                400,
                                "invalid_target",
                                format!("{} {hp} refused: {e}", rec.method),
                            ),
                            Engine::HttpParser,
                        )
                        .await;
                }
            };
            rec.host.clone_from(&host);
            if host == super::doctor::HOST {
                let _ = wr
                    .write_all(&super::doctor::plain_response(&rec.path))
                    .await;
                return Step { keep_alive: false };
            }
            if let Some(h) = head.header("host")
                && !host_matches(h, &host, target.port, 80)
            {
                let refusal = Refusal::new(
                    400,
                    "bad_request",
                    "the Host header does not match the request URI's authority",
                );
                return rec.refuse(wr, refusal, Engine::HttpParser).await;
            }
            let known = match caller {
                Ok(k) => k,
                Err(e) => {
                    let what = format!("{} {hp}{}", rec.method, rec.path);
                    let refusal = super::caller::refusal(&what, e);
                    return rec.refuse(wr, refusal, Engine::Identity).await;
                }
            };
            let policy = shared.policy.load_full();
            let admission = match policy.decide_l4(&known.policy_caller(), &host, target.port) {
                L4Decision::Allow(a) => a,
                L4Decision::Deny(d) => {
                    let what = format!("{} {hp}{}", rec.method, rec.path);
                    let refusal = super::current::l4_refusal(&what, d, known, &host, target.port);
                    return rec.refuse(wr, refusal, Engine::L4).await;
                }
            };
            (
                host,
                target.port,
                target.path_and_query,
                policy,
                admission,
                known,
            )
        }
        Route::Tunnel(t) => {
            rec.host.clone_from(&t.host);
            rec.port = t.port;
            let (path_and_query, authority_ok) = tunnel_target(head, t);
            rec.path = path_only(&path_and_query).to_string();
            if !authority_ok {
                // Host-header redirection of credentials is the attack this stops (spec §3.4).
                let refusal = Refusal::new(
                    403,
                    "request_authority_mismatch",
                    "HTTP request authority does not match the authorized tunnel endpoint",
                )
                .with("host", t.host.clone())
                .with("port", t.port);
                return rec.refuse(wr, refusal, Engine::HttpParser).await;
            }
            let known = match caller {
                Ok(k) => k,
                Err(e) => {
                    let what = format!("{} {}:{}{}", rec.method, t.host, t.port, rec.path);
                    let refusal = super::caller::refusal(&what, e);
                    return rec.refuse(wr, refusal, Engine::Identity).await;
                }
            };
            // Judged by the policy in force now: a reload applies from the next request.
            let (policy, admission) = match super::current::tunnel_policy(
                shared,
                &t.policy,
                &t.admission,
                known,
                &t.host,
                t.port,
            ) {
                Ok(current) => current,
                Err(d) => {
                    let what = format!("{} {}:{}{}", rec.method, t.host, t.port, rec.path);
                    let refusal = super::current::l4_refusal(&what, d, known, &t.host, t.port);
                    return rec.refuse(wr, refusal, Engine::L4).await;
                }
            };
            (
                t.host.clone(),
                t.port,
                path_and_query,
                policy,
                admission,
                known,
            )
        }
    };
    let hp = format!("{host}:{port}");
    rec.policy = Some(admission.entry.to_string());

    // The request target upstream sees: canonical, as policy judged it.
    // A WebSocket handshake: judged as a GET upgrade, relayed raw after a valid 101.
    let ws_upgrade = head.method.eq_ignore_ascii_case("GET")
        && head
            .header("upgrade")
            .is_some_and(|u| u.eq_ignore_ascii_case(b"websocket"))
        && head.connection_tokens().iter().any(|t| t == "upgrade");
    let method = judge::Method::new(
        &head.method,
        head.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
    );
    let judged = match judge::judge(
        &policy,
        &admission,
        known,
        &method,
        &path_and_query,
        &hp,
        ws_upgrade,
    ) {
        Ok(j) => j,
        Err(boxed) => {
            let (refusal, j) = *boxed;
            rec.policy = Some(j.policy);
            rec.rule = j.rule;
            if let Some(p) = j.path {
                rec.path = p;
            }
            return rec.refuse(wr, refusal, j.engine).await;
        }
    };
    rec.policy = Some(judged.policy.clone());
    rec.rule.clone_from(&judged.rule);
    if let Some(p) = &judged.path {
        rec.path.clone_from(p);
    }
    let (outcome, engine, reason, origin_form) = (
        judged.outcome,
        judged.engine,
        judged.reason,
        judged.origin_form,
    );

    // Credentials: placeholders become secrets only where each is bound and placed (spec
    // §3.3, §3.4), and only over verified TLS unless the binding opts in to plaintext.
    // After this point the head may hold a secret: it is never logged or shown.
    let mut headers = head.headers.clone();
    let mut origin_form = origin_form;
    let transport = if rec.scheme == "https" {
        credentials::Transport::VerifiedTls
    } else {
        credentials::Transport::Plaintext
    };
    let policy_key = rec.policy.clone();
    // One credentials snapshot for the whole request (a reload applies from the next one).
    let creds = shared.credentials.load_full();
    let dest = |ip| inject::Dest {
        shared,
        conn_id: conn.id,
        peer: conn.peer,
        caller: known,
        host: &host,
        port,
        ip,
        policy: policy_key.clone(),
    };
    let mut scrub = match inject::inject_head(
        &dest(None),
        &creds,
        transport,
        &rec.path,
        &mut origin_form,
        &mut headers,
    ) {
        Ok(injected) => {
            rec.credentials = injected
                .credentials
                .iter()
                .map(ToString::to_string)
                .collect();
            injected.scrub
        }
        Err(refused) => return rec.refuse_with(wr, refused, Engine::L7).await,
    };
    let key = (host.clone(), port);
    let upstream: &mut Upstream = match route {
        Route::Tunnel(t) => {
            // The tunnel's one upstream connection; if it has gone, so does the tunnel.
            if t.upstream.sender.ready().await.is_err() {
                return Step { keep_alive: false };
            }
            &mut t.upstream
        }
        Route::Forward => {
            // An upstream connection: reuse this client's, or dial a vetted address.
            let reusable = match upstreams.get_mut(&key) {
                Some(u) => u.sender.ready().await.is_ok(),
                None => false,
            };
            if !reusable {
                upstreams.remove(&key);
                if upstreams.len() >= MAX_UPSTREAMS {
                    upstreams.clear();
                }
                let plan = destination::plan_for(&policy, &admission, &host, shared.compat);
                let (stream, addr) = match destination::connect(shared, &plan, &host, port).await {
                    Ok(x) => x,
                    Err(e) => {
                        let (refusal, engine) = dial_refusal(&e, &rec.method, &hp);
                        return rec.refuse(wr, refusal, engine).await;
                    }
                };
                match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
                    Ok((sender, connection)) => {
                        tokio::spawn(async move {
                            let _ = connection.with_upgrades().await;
                        });
                        upstreams.insert(key.clone(), Upstream { sender, addr });
                    }
                    Err(e) => {
                        let refusal = Refusal::new(
                            502,
                            "upstream_unreachable",
                            format!("connection to {hp} failed"),
                        )
                        .with_reason(e.to_string());
                        return rec.refuse(wr, refusal, Engine::Proxy).await;
                    }
                }
            }
            let Some(upstream) = upstreams.get_mut(&key) else {
                return Step { keep_alive: false };
            };
            upstream
        }
    };
    rec.ip = Some(upstream.addr.ip());

    let framing = head.framing();
    // A credentialed endpoint that does not opt in to body rewriting must never receive a
    // placeholder in a body (spec §3.5); bodies elsewhere pass as they are.
    let body_rewrite = admission
        .endpoints
        .iter()
        .any(|r| policy.endpoint(*r).request_body_credential_rewrite);
    let guard_body = !body_rewrite && creds.is_credentialed(&host, port);
    // Where placeholders must be found in the body, a compressed body would hide them.
    if (guard_body || body_rewrite)
        && framing != BodyFraming::None
        && let Some(refused) = inject::encoded_body(head.header_values("content-encoding"))
    {
        return rec.refuse_with(wr, refused, Engine::L7).await;
    }
    let expect_continue = head
        .header("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case(b"100-continue"));
    // Opt-in body rewriting (`request_body_credential_rewrite`): the body is buffered (at
    // most 256 KiB), its placeholders swapped where bound, and its length fixed.
    let mut framing = framing;
    let mut rewritten: Option<bytes::Bytes> = None;
    if body_rewrite && framing != BodyFraming::None && !ws_upgrade {
        let bytes =
            match body::read_bounded(rd, buf, framing, credentials::body::MAX_REWRITE_BODY_BYTES)
                .await
            {
                Ok(b) => b,
                Err(refusal) => return rec.refuse(wr, refusal, Engine::HttpParser).await,
            };
        if credentials::placeholder::contains_marker(&bytes) {
            let scope = credentials::RequestScope {
                host: &host,
                port,
                path: &rec.path,
                caller: known.policy_caller(),
                transport,
            };
            let scoped = creds.scoped(scope);
            let content_type = head
                .header("content-type")
                .map(|v| String::from_utf8_lossy(v).into_owned());
            match credentials::rewrite_body(content_type.as_deref(), &bytes, &scoped) {
                Ok(done) => {
                    rec.credentials
                        .extend(done.injected.credentials.iter().map(ToString::to_string));
                    rec.credentials.sort();
                    rec.credentials.dedup();
                    if !done.injected.scrub.is_empty() {
                        if scrub.is_empty() {
                            credentials::ask_identity_encoding(&mut headers);
                        }
                        scrub.merge(&done.injected.scrub);
                    }
                    rewritten = Some(bytes::Bytes::from(done.body.into_owned()));
                }
                Err(credentials::BodyError::Credential(e)) => {
                    let refused = inject::refuse_credential(&dest(Some(upstream.addr.ip())), &e);
                    return rec.refuse_with(wr, refused, Engine::L7).await;
                }
                Err(e) => {
                    let refusal = Refusal::new(e.status(), e.code(), e.to_string());
                    return rec.refuse(wr, refusal, Engine::L7).await;
                }
            }
        } else {
            rewritten = Some(bytes);
        }
        if let Some(b) = &rewritten {
            credentials::set_content_length(&mut headers, b.len());
            framing = BodyFraming::Length(b.len() as u64);
        }
    }
    let (tx, req_body) = match (framing, rewritten) {
        (_, Some(b)) => {
            let (tx, body) = ChannelBody::channel(Some(b.len() as u64));
            // Capacity 2: one frame fits without waiting.
            let _ = tx.try_send(Ok(http_body::Frame::data(b)));
            (None, body)
        }
        (BodyFraming::None, None) => (None, ChannelBody::empty()),
        (BodyFraming::Length(n), None) => {
            let (tx, b) = ChannelBody::channel(Some(n));
            (Some(tx), b)
        }
        (BodyFraming::Chunked, None) => {
            let (tx, b) = ChannelBody::channel(None);
            (Some(tx), b)
        }
    };
    let chunked = framing == BodyFraming::Chunked;
    let mut request = match crate::http::upstream::build_request(
        head,
        chunked,
        &headers,
        &origin_form,
        &host,
        port,
        req_body,
    ) {
        Ok(r) => r,
        Err(e) => {
            return rec
                .refuse(wr, Refusal::new(400, "bad_request", e), Engine::HttpParser)
                .await;
        }
    };
    if ws_upgrade {
        // Upgrade and Connection are hop-by-hop, except in a handshake sluice relays.
        let h = request.headers_mut();
        h.insert(
            http::header::CONNECTION,
            HeaderValue::from_static("upgrade"),
        );
        h.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
        let key = head.header("sec-websocket-key").map(<[u8]>::to_vec);
        return websocket(
            shared,
            &rec,
            rd,
            wr,
            buf,
            upstream,
            request,
            key.as_deref(),
            engine,
            outcome,
            scrub,
        )
        .await;
    }
    if expect_continue
        && tx.is_some()
        && wr
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .is_err()
    {
        return Step { keep_alive: false };
    }

    let (done_tx, done_rx) = oneshot::channel::<()>();
    let pump = async {
        let result = match tx {
            Some(tx) => {
                let sink = body::BodySink::new(tx, guard_body).paced(shared.limits.body_pace);
                body::pump(rd, buf, framing, sink).await
            }
            None => Ok(0),
        };
        let _ = done_tx.send(());
        result
    };
    let upstream_timeout = shared.limits.upstream_timeout;
    let is_head = head.method.eq_ignore_ascii_case("HEAD");
    let client_keep_alive = head.keep_alive();
    let exchange = async {
        let response = tokio::select! {
            r = upstream.sender.send_request(request) => r.map_err(|e| e.to_string()),
            () = async {
                let _ = done_rx.await;
                tokio::time::sleep(upstream_timeout).await;
            } => return Err(Exchange::Timeout),
        };
        let response = response.map_err(Exchange::Failed)?;
        let status = response.status().as_u16();
        let written = if scrub.is_empty() {
            respond::write_response(wr, response, is_head, head.minor_version, client_keep_alive)
                .await
        } else {
            // A secret went in, or the endpoint has secrets bound: the response is scrubbed.
            let dest = dest(rec.ip);
            let response = inject::scrub(&dest, scrub, &rec.credentials, response)
                .await
                .map_err(Exchange::Refused)?;
            respond::write_response(wr, response, is_head, head.minor_version, client_keep_alive)
                .await
        };
        written
            .map(|w| (status, w))
            .map_err(|e| Exchange::Midway(e.to_string()))
    };
    let (pumped, exchanged) = {
        tokio::pin!(pump);
        tokio::pin!(exchange);
        tokio::select! {
            e = &mut exchange => {
                // The response is out; the body should be done too (a server may answer early).
                let p = tokio::time::timeout(std::time::Duration::from_millis(500), &mut pump).await.ok();
                (p, e)
            }
            p = &mut pump => {
                let e = exchange.await;
                (Some(p), e)
            }
        }
    };
    let body_in = match &pumped {
        Some(Ok(n)) => *n,
        _ => 0,
    };
    match exchanged {
        Ok((status, written)) => {
            rec.emit(
                outcome,
                engine,
                reason,
                Some(status),
                body_in,
                written.body_bytes,
            );
            let body_complete = matches!(pumped, Some(Ok(_)));
            Step {
                keep_alive: client_keep_alive && body_complete && !written.close_delimited,
            }
        }
        Err(Exchange::Timeout) => {
            upstreams.remove(&key);
            let refusal = Refusal::new(
                504,
                "upstream_timeout",
                format!(
                    "{hp} sent no response within {} s",
                    upstream_timeout.as_secs_f32()
                ),
            );
            rec.refuse(wr, refusal, Engine::Proxy).await
        }
        Err(Exchange::Failed(e)) => {
            upstreams.remove(&key);
            let refusal = match &pumped {
                Some(Err(body::BodyError::Placeholder)) => {
                    super::emit_finding(
                        shared,
                        conn.id,
                        conn.peer,
                        Some(known),
                        audit::Destination {
                            host: host.clone(),
                            port,
                            ip: rec.ip,
                        },
                        "openshell.credentials.traffic_uninspectable",
                        format!("request body with a credential placeholder stopped before {hp}"),
                        None,
                        rec.policy.clone(),
                    );
                    Refusal::new(
                        403,
                        "credential_in_body",
                        "a credential placeholder in the request body would reach the upstream unresolved; this endpoint does not allow body rewriting (request_body_credential_rewrite)",
                    )
                }
                Some(Err(body_err)) => body_err.refusal(),
                _ => Refusal::new(
                    502,
                    "upstream_unreachable",
                    format!("connection to {hp} failed"),
                )
                .with_reason(e),
            };
            rec.refuse(wr, refusal, Engine::Proxy).await
        }
        Err(Exchange::Refused(refused)) => {
            upstreams.remove(&key);
            rec.refuse_with(wr, refused, Engine::L7).await
        }
        Err(Exchange::Midway(e)) => {
            // The head was sent: the only honest signal left is closing the connection.
            rec.emit(
                Outcome::Allowed,
                engine,
                Some(format!("response interrupted: {e}")),
                None,
                body_in,
                0,
            );
            Step { keep_alive: false }
        }
    }
}

enum Exchange {
    Timeout,
    /// The response may not reach the client (it cannot be scrubbed of a secret).
    Refused(inject::Refused),
    Failed(String),
    Midway(String),
}
