//! `CONNECT host:port`: decide, vet the destination, dial, answer `200`, relay.
//!
//! Owns the tunnel entry point. Every refusal is an HTTP status with a JSON body sent before
//! any `200` (policy 403, SSRF 403, unreachable 502, slow 504). An endpoint whose requests
//! must be inspected is refused with 503 until TLS termination exists, never relayed
//! uninspected.

use std::time::SystemTime;

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::authority::Authority;
use super::caller::Known;
use super::destination::{self, DialError};
use super::{Conn, Shared};
use crate::audit::{self, Engine, Outcome, Via};
use crate::http::head::RequestHead;
use crate::http::respond::Refusal;
use crate::policy::L4Decision;
use crate::policy::canon;
use crate::relay;

struct Ctx<'a> {
    shared: &'a Shared,
    conn: &'a Conn,
    caller: Option<&'a Known>,
    host: String,
    port: u16,
}

impl Ctx<'_> {
    fn open_event(
        &self,
        outcome: Outcome,
        policy: Option<String>,
        engine: Engine,
        reason: Option<String>,
        status: u16,
        ip: Option<std::net::IpAddr>,
    ) {
        self.shared
            .audit
            .emit(&audit::Event::ConnectionOpen(audit::ConnectionOpen {
                time: SystemTime::now(),
                id: self.conn.id,
                via: Via::Connect,
                caller: self.caller.map(|c| c.audit.clone()),
                src: self.conn.peer,
                dst: audit::Destination {
                    host: self.host.clone(),
                    port: self.port,
                    ip,
                },
                outcome,
                policy,
                engine,
                reason,
                status,
            }));
    }

    /// The close event of an admitted tunnel: bytes from and to the client, and why it ended.
    fn close_event(
        &self,
        policy: Option<String>,
        engine: Engine,
        addr: std::net::SocketAddr,
        bytes_in: u64,
        bytes_out: u64,
        reason: &str,
    ) {
        self.shared
            .audit
            .emit(&audit::Event::ConnectionClose(audit::ConnectionClose {
                time: SystemTime::now(),
                id: self.conn.id,
                via: Via::Connect,
                caller: self.caller.map(|c| c.audit.clone()),
                src: self.conn.peer,
                dst: audit::Destination {
                    host: self.host.clone(),
                    port: self.port,
                    ip: Some(addr.ip()),
                },
                policy,
                engine,
                bytes_in,
                bytes_out,
                duration_ms: u64::try_from(self.conn.started.elapsed().as_millis())
                    .unwrap_or(u64::MAX),
                reason: reason.to_string(),
            }));
    }

    async fn refuse(
        &self,
        wr: &mut OwnedWriteHalf,
        refusal: Refusal,
        policy: Option<String>,
        engine: Engine,
    ) {
        let _ = wr.write_all(&refusal.to_bytes()).await;
        let _ = wr.shutdown().await;
        let reason = refusal
            .reason
            .clone()
            .unwrap_or_else(|| refusal.detail.clone());
        self.open_event(
            Outcome::Denied,
            policy,
            engine,
            Some(reason),
            refusal.status,
            None,
        );
    }
}

pub async fn run(
    shared: &std::sync::Arc<Shared>,
    conn: &Conn,
    caller: Result<Known, String>,
    head: RequestHead,
    rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    buf: BytesMut,
) {
    let authority = match Authority::parse_connect(&head.target) {
        Ok(a) => a,
        Err(e) => {
            let ctx = Ctx {
                shared,
                conn,
                caller: caller.as_ref().ok(),
                host: head.target.clone(),
                port: 0,
            };
            let refusal = Refusal::new(400, "bad_request", format!("CONNECT target {e}"));
            ctx.refuse(&mut wr, refusal, None, Engine::HttpParser).await;
            return;
        }
    };
    let mut ctx = Ctx {
        shared,
        conn,
        caller: caller.as_ref().ok(),
        host: authority.host().to_ascii_lowercase(),
        port: authority.port(),
    };
    let hp = authority.with_host(ctx.host.clone()).to_string();
    let host = match canon::normalize_host(authority.host()) {
        Ok(h) => h,
        Err(e) => {
            let refusal = Refusal::new(400, "invalid_target", format!("CONNECT {hp} refused: {e}"));
            ctx.refuse(&mut wr, refusal, None, Engine::HttpParser).await;
            return;
        }
    };
    ctx.host.clone_from(&host);
    if host == super::doctor::HOST {
        // Answered by sluice itself, whatever the policy: it proves the way through sluice
        // and the trust in its CA, and reaches nothing.
        super::doctor::tunnel(shared, rd, wr, buf).await;
        return;
    }
    let known = match &caller {
        Ok(k) => k,
        Err(e) => {
            let refusal = super::caller::refusal(&format!("CONNECT {hp}"), e);
            ctx.refuse(&mut wr, refusal, None, Engine::Identity).await;
            return;
        }
    };
    // Pin the snapshot this connection is admitted under.
    let policy = shared.policy.load_full();
    let admission = match policy.decide_l4(&known.policy_caller(), &host, ctx.port) {
        L4Decision::Allow(a) => a,
        L4Decision::Deny(d) => {
            let refusal = Refusal::new(
                403,
                "policy_denied",
                format!("CONNECT {hp} not permitted by policy"),
            )
            .with_reason(d.reason)
            .with("binary", known.exe.clone())
            .with("ancestors", known.ancestors.clone())
            .with("host", host.clone())
            .with("port", ctx.port)
            .with("stage", "l4");
            ctx.refuse(&mut wr, refusal, None, Engine::L4).await;
            return;
        }
    };
    let entry = Some(admission.entry.to_string());
    let inspect = admission.inspects(&policy);
    // A credentialed destination reached without inspection would carry placeholders as
    // text, or real secrets nobody checks (spec §3.6).
    if !inspect
        && shared.credentials.is_credentialed(&host, ctx.port)
        && !admission
            .endpoints
            .iter()
            .any(|r| policy.endpoint(*r).allow_uninspected_credentials)
    {
        let refusal = Refusal::new(
            403,
            "uninspected_credentials",
            "credentialed endpoint requires L7 inspection; raw tunnel is not explicitly allowed",
        )
        .with("host", host.clone())
        .with("port", ctx.port)
        .with("policy", admission.entry.to_string());
        super::emit_finding(
            shared,
            conn.id,
            conn.peer,
            Some(known),
            audit::Destination {
                host: host.clone(),
                port: ctx.port,
                ip: None,
            },
            "openshell.credentials.traffic_uninspectable",
            format!("CONNECT refused for {hp}: uninspected credential traffic"),
            None,
            entry.clone(),
        );
        ctx.refuse(&mut wr, refusal, entry, Engine::L4).await;
        return;
    }
    if inspect && shared.tls.is_none() {
        let refusal = Refusal::new(
            503,
            "tls_termination_unavailable",
            format!("CONNECT {hp} needs L7 inspection, and TLS termination is unavailable; it is refused rather than relayed uninspected"),
        )
        .with("policy", admission.entry.to_string());
        ctx.refuse(&mut wr, refusal, entry, Engine::L7).await;
        return;
    }
    let plan = destination::plan_for(&policy, &admission, &host, shared.compat);
    let (upstream, addr) = match destination::connect(shared, &plan, &host, ctx.port).await {
        Ok(x) => x,
        Err(e) => {
            let (refusal, engine) = dial_refusal(&e, "CONNECT", &hp);
            ctx.refuse(&mut wr, refusal, entry, engine).await;
            return;
        }
    };
    if wr
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    ctx.open_event(
        Outcome::Allowed,
        entry.clone(),
        if inspect { Engine::L7 } else { Engine::L4 },
        None,
        200,
        Some(addr.ip()),
    );
    if inspect {
        let traffic = std::sync::Arc::new(super::counted::Traffic::default());
        let inspected = super::inspect::run(
            shared,
            conn,
            known.clone(),
            host.clone(),
            ctx.port,
            std::sync::Arc::clone(&policy),
            admission,
            (rd, wr),
            buf,
            upstream,
            addr,
            &traffic,
        );
        // Ended by the client or upstream, or cut when the caller no longer holds the socket.
        let reason = tokio::select! {
            () = inspected => "closed".to_string(),
            reason = conn.stop.wait() => reason,
        };
        // Client-side bytes, TLS records included, as for an uninspected tunnel.
        ctx.close_event(
            entry,
            Engine::L7,
            addr,
            traffic.bytes_in(),
            traffic.bytes_out(),
            &reason,
        );
        return;
    }
    let (ur, uw) = upstream.into_split();
    let bounds = relay::Bounds {
        idle: shared.limits.idle_timeout,
        unused: Some(shared.limits.unused_tunnel_timeout),
    };
    // The caller is checked again when it first uses the tunnel (a socket handed over right
    // after connecting can pass both earlier looks), then periodically (`holder.rs`). A full
    // re-check, not just a confirmation: the listed process may still hold its copy while the
    // program that took the socket back writes the first bytes, and only the fork-family scan
    // sees that second holder.
    let checks = relay::Checks {
        stop: conn.stop.wait(),
        first_use: super::caller::recheck(shared, known),
    };
    let stats = relay::relay_until(rd, wr, ur, uw, &buf, bounds, checks).await;
    ctx.close_event(
        entry,
        Engine::L4,
        addr,
        stats.client_to_upstream,
        stats.upstream_to_client,
        &stats.end.describe(),
    );
}

/// The refusal for a failed destination step, shared with the forward path.
pub fn dial_refusal(e: &DialError, verb: &str, hp: &str) -> (Refusal, Engine) {
    match e {
        DialError::Refused { detail, reason } => (
            Refusal::new(403, "ssrf_denied", format!("{verb} {hp} blocked: {detail}"))
                .with_reason(reason.clone()),
            Engine::Ssrf,
        ),
        DialError::Resolve(msg) => (
            Refusal::new(
                502,
                "upstream_unreachable",
                format!("connection to {hp} failed"),
            )
            .with_reason(msg.clone()),
            Engine::Proxy,
        ),
        DialError::Unreachable(msg) => (
            Refusal::new(
                502,
                "upstream_unreachable",
                format!("connection to {hp} failed"),
            )
            .with_reason(msg.clone()),
            Engine::Proxy,
        ),
        DialError::Timeout => (
            Refusal::new(
                504,
                "upstream_timeout",
                format!("connection to {hp} timed out"),
            ),
            Engine::Proxy,
        ),
    }
}
