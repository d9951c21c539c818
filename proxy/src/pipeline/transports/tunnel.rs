//! Tunnels: a connection whose destination is named once for its whole life. `CONNECT
//! host:port` enters through [`run`]; every tunnel (a transparently redirected connection too,
//! from `transparent::listener`) goes through [`tunnel`]: the connection phase
//! (`phases/connection.rs`: normalise, caller, L4), the tunnel's own checks, the dial, `200`, then the
//! inspected tunnel (`transports/inspect.rs`) or the raw relay, until either side closes or the caller no
//! longer holds the socket.
//!
//! Every refusal is an HTTP status with a JSON body sent before any `200` (policy 403, SSRF
//! 403, unreachable 502, slow 504); a transparent connection is closed instead, and both are
//! audited with the reason. A credentialed endpoint is never relayed uninspected
//! unless it opts in, and an endpoint whose requests must be inspected is refused with 503
//! when TLS termination is unavailable.

use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use crate::pipeline::client::stream::{ClientRead, ClientWrite};
use bytes::BytesMut;
use tokio::io::AsyncWriteExt;

use super::inspect::{self, Inspected};
use crate::audit::{self, Engine, Outcome, Via};
use crate::http::head::RequestHead;
use crate::http::respond::{Code, Refusal};
use crate::pipeline::authority::Authority;
use crate::pipeline::caller::identify::{CallerState, Known};
use crate::pipeline::client::accepted::Conn;
use crate::pipeline::client::counted::Traffic;
use crate::pipeline::denial::Denial;
use crate::pipeline::phases::connection;
use crate::pipeline::phases::connection::{Admitted, Dialled, Scheme};
use crate::pipeline::state::live::InForce;
use crate::pipeline::state::shared::Shared;
use crate::relay;

/// How a tunnel entered. A `CONNECT` client is answered in HTTP (`200`, or a refusal as
/// JSON); a transparently redirected connection has no one to answer (the client believes it
/// talks to the origin): a refusal closes it, and it is dialled only at the address the
/// client dialled, never at a fresh lookup of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Entry {
    Connect,
    /// Redirected by the network fence; `original` is the address the client dialled.
    Transparent {
        original: std::net::SocketAddr,
    },
}

impl Entry {
    fn via(self) -> Via {
        match self {
            Entry::Connect => Via::Connect,
            Entry::Transparent { .. } => Via::Transparent,
        }
    }

    /// Whether refusals and the `200` are answered in HTTP.
    fn answers(self) -> bool {
        matches!(self, Entry::Connect)
    }
}

/// A tunnel about to enter the connection phase.
#[derive(Debug)]
pub struct Start<'a> {
    pub shared: &'a Arc<Shared>,
    pub conn: &'a Conn,
    pub caller: CallerState,
    /// The destination as the client named it (not yet normalised).
    pub target: Authority,
    pub entry: Entry,
}

struct Ctx<'a> {
    shared: &'a Shared,
    conn: &'a Conn,
    caller: Option<&'a Known>,
    /// The destination as far as it is known (normalised once it is).
    dst: Authority,
    via: Via,
    /// False for a transparent connection: a refusal closes it without an answer.
    answers: bool,
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
                via: self.via,
                caller: self.caller.map(|c| Arc::clone(&c.audit)),
                src: self.conn.peer,
                dst: audit::Destination::new(self.dst.clone(), ip),
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
                via: self.via,
                caller: self.caller.map(|c| Arc::clone(&c.audit)),
                src: self.conn.peer,
                dst: audit::Destination::new(self.dst.clone(), Some(addr.ip())),
                policy,
                engine,
                bytes_in,
                bytes_out,
                duration_ms: u64::try_from(self.conn.started.elapsed().as_millis())
                    .unwrap_or(u64::MAX),
                reason: reason.to_string(),
            }));
    }

    async fn refuse(&self, wr: &mut ClientWrite, d: &Denial, policy: Option<String>) {
        if self.answers {
            let _ = wr.write_all(&d.refusal.to_bytes()).await;
        }
        let _ = wr.shutdown().await;
        self.open_event(
            Outcome::Denied,
            policy,
            d.engine,
            Some(d.audit_reason()),
            d.refusal.status,
            None,
        );
    }
}

/// `CONNECT host:port`: the target parsed, then the tunnel.
pub async fn run(
    shared: &Arc<Shared>,
    conn: &Conn,
    caller: CallerState,
    head: RequestHead,
    rd: ClientRead,
    mut wr: ClientWrite,
    buf: BytesMut,
) {
    let target = match Authority::parse_connect(&head.target) {
        Ok(a) => {
            // Its headers are not needed again: freed now rather than held by the tunnel.
            drop(head);
            a
        }
        Err(e) => {
            let ctx = Ctx {
                shared,
                conn,
                caller: caller.as_ref().ok(),
                dst: Authority::new(head.target.clone(), 0),
                via: Via::Connect,
                answers: true,
            };
            let refusal = Refusal::new(Code::BadRequest, format!("CONNECT target {e}"));
            let d = Denial::new(Engine::HttpParser, refusal);
            ctx.refuse(&mut wr, &d, None).await;
            return;
        }
    };
    let start = Start {
        shared,
        conn,
        caller,
        target,
        entry: Entry::Connect,
    };
    tunnel(start, (rd, wr), buf).await;
}

/// A tunnel from its target to its end: the client's halves, and the bytes it sent after
/// naming the target (replayed first). The one function every tunnel entry calls.
pub async fn tunnel(start: Start<'_>, (rd, mut wr): (ClientRead, ClientWrite), buf: BytesMut) {
    let Start {
        shared,
        conn,
        caller,
        target,
        entry: start_entry,
    } = start;
    let mut ctx = Ctx {
        shared,
        conn,
        caller: caller.as_ref().ok(),
        dst: target.with_host(target.host().to_ascii_lowercase()),
        via: start_entry.via(),
        answers: start_entry.answers(),
    };
    let dst = match connection::normalize("CONNECT", &target) {
        Ok(d) => d,
        Err(d) => return ctx.refuse(&mut wr, &d, None).await,
    };
    ctx.dst = dst.clone();
    // (Not while the audit log cannot take records: then it is refused as any host is.)
    if dst.host() == crate::pipeline::doctor::HOST
        && start_entry.answers()
        && caller.is_ok()
        && !shared.audit.refusing()
    {
        // Answered by sluice itself, whatever the policy: it proves the way through sluice
        // and the trust in its CA, and reaches nothing. Only for a caller sluice knows (in
        // a gateway, a tenant): an unknown one is refused below as for any host. Audited,
        // and bounded in time as a head is: it holds one of the caller's connection slots.
        ctx.open_event(
            Outcome::Allowed,
            None,
            Engine::Proxy,
            Some(format!(
                "answered by sluice itself ({})",
                crate::pipeline::doctor::HOST
            )),
            200,
            None,
        );
        let lifetime = crate::pipeline::doctor::LIFETIME;
        let _ = tokio::time::timeout(
            lifetime,
            Box::pin(crate::pipeline::doctor::tunnel(shared, rd, wr, buf)),
        )
        .await;
        return;
    }
    // Pins the policy snapshot this connection is admitted under. The scheme is the
    // inspected tunnel's to find (TLS or plaintext HTTP).
    let what = format!("CONNECT {dst}");
    let admitted = connection::admit(shared, caller.as_ref(), &dst, Scheme::Https, &what);
    let (known, admitted) = match admitted {
        Ok(a) => a,
        Err(d) => return ctx.refuse(&mut wr, &d, None).await,
    };
    let (policy, admission) = (&admitted.policy, &admitted.admission);
    let entry = Some(admission.entry.to_string());
    let inspect = admission.inspects(policy);
    if let Err(d) = tunnel_checks(shared, conn, known, &admitted, inspect) {
        return ctx.refuse(&mut wr, &d, entry).await;
    }
    // An inspected tunnel may take a pooled upstream connection instead (`state/pool.rs`); a
    // transparent one dials only the address its client dialled. Boxed, as every one-off
    // phase of a tunnel: the connection's future keeps only the size of the state it idles
    // in.
    let dialled = Box::pin(async {
        match start_entry {
            Entry::Transparent { original } => {
                connection::dial_pinned(shared, &admitted, "CONNECT", original)
                    .await
                    .map(|(s, a)| (Dialled::Socket(s), a))
            }
            Entry::Connect if inspect => {
                connection::dial_inspected(shared, &admitted, known, "CONNECT").await
            }
            Entry::Connect => connection::dial(shared, &admitted, "CONNECT")
                .await
                .map(|(s, a)| (Dialled::Socket(s), a)),
        }
    })
    .await;
    let (upstream, addr) = match dialled {
        Ok(x) => x,
        Err(d) => return ctx.refuse(&mut wr, &d, entry).await,
    };
    if start_entry.answers()
        && wr
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
    // Live until the tunnel ends: a reload that no longer allows it stops it (`state/live.rs`).
    let kind = if inspect {
        connection::Kind::InspectedTunnel
    } else {
        connection::Kind::RawTunnel
    };
    let _live = connection::hold(shared, conn, known, &admitted, kind, Some(addr));
    if inspect {
        let traffic = Arc::new(Traffic::default());
        let reached = OnceLock::new();
        // Boxed: `select!` would hold a second copy of the future it is handed.
        let inspected = Box::pin(inspect::run(
            Inspected {
                shared,
                conn,
                caller: known.clone(),
                admitted,
                upstream: (upstream, addr),
                traffic: &traffic,
                via: ctx.via,
                reached: &reached,
            },
            (rd, wr),
            buf,
        ));
        // Ended by the client or upstream, or cut when the caller no longer holds the socket
        // or a reload revoked it.
        let reason = tokio::select! {
            failed = inspected => failed.unwrap_or_else(|| "closed".to_string()),
            reason = conn.stop.wait() => reason.to_string(),
        };
        // Client-side bytes, TLS records included, as for an uninspected tunnel.
        ctx.close_event(
            entry,
            Engine::L7,
            reached.get().copied().unwrap_or(addr),
            traffic.bytes_in(),
            traffic.bytes_out(),
            &reason,
        );
        return;
    }
    let Dialled::Socket(upstream) = upstream else {
        // Only `dial_inspected` defers a dial, and only inspected tunnels call it.
        return;
    };
    let (ur, uw) = upstream.into_split();
    let bounds = relay::Bounds {
        idle: shared.limits.idle_timeout,
        unused: Some(shared.limits.unused_tunnel_timeout),
    };
    // The caller is checked again when it first uses the tunnel (a socket handed over right
    // after connecting can pass both earlier looks), then periodically (`caller/holder.rs`). A full
    // re-check, not just a confirmation: the listed process may still hold its copy while the
    // program that took the socket back writes the first bytes, and only the fork-family scan
    // sees that second holder.
    let checks = relay::Checks {
        stop: async { conn.stop.wait().await.to_string() },
        first_use: async {
            crate::pipeline::caller::identify::recheck(shared, known)
                .await
                .map_err(|e| e.to_string())
        },
    };
    let stats = Box::pin(relay::relay_until(rd, wr, ur, uw, &buf, bounds, checks)).await;
    ctx.close_event(
        entry,
        Engine::L4,
        addr,
        stats.client_to_upstream,
        stats.upstream_to_client,
        &stats.end.describe(),
    );
}

/// What a tunnel needs beyond its L4 admission: a credentialed destination reached without
/// inspection would carry placeholders as text, or real secrets nobody checks (spec §3.6),
/// unless an endpoint opts in; an inspected one needs TLS termination.
fn tunnel_checks(
    shared: &Shared,
    conn: &Conn,
    known: &Known,
    admitted: &Admitted,
    inspect: bool,
) -> Result<(), Denial> {
    let (dst, admission) = (&admitted.dst, &admitted.admission);
    let credentials = shared.credentials(admitted.tenant.as_deref());
    if !inspect && connection::uninspected_credentials(&credentials, admitted) {
        shared.audit.emit(&audit::Event::Finding(audit::Finding {
            time: SystemTime::now(),
            id: conn.id,
            caller: Some(Arc::clone(&known.audit)),
            src: conn.peer,
            dst: audit::Destination::new(dst.clone(), None),
            kind: "openshell.credentials.traffic_uninspectable".to_string(),
            guard: audit::Guard::Credentials,
            title: format!("CONNECT refused for {dst}: uninspected credential traffic"),
            credential: None,
            policy: Some(admission.entry.to_string()),
            severity: audit::Severity::High,
        }));
        let refusal = Refusal::new(
            Code::UninspectedCredentials,
            "credentialed endpoint requires L7 inspection; raw tunnel is not explicitly allowed",
        )
        .with("host", dst.host().to_string())
        .with("port", dst.port())
        .with("policy", admission.entry.to_string());
        return Err(Denial::new(Engine::L4, refusal));
    }
    if inspect && shared.tls.is_none() {
        let refusal = Refusal::new(Code::TlsTerminationUnavailable,
            format!("CONNECT {dst} needs L7 inspection, and TLS termination is unavailable; it is refused rather than relayed uninspected"),
        )
        .with("policy", admission.entry.to_string());
        return Err(Denial::new(Engine::L7, refusal));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transparent_entry_is_never_answered_in_http_and_audits_as_such() {
        assert!(Entry::Connect.answers());
        assert_eq!(Entry::Connect.via(), Via::Connect);
        let t = Entry::Transparent {
            original: "203.0.113.7:443".parse().unwrap(),
        };
        assert!(!t.answers());
        assert_eq!(t.via(), Via::Transparent);
    }
}
