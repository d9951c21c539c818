//! The transparent listener's entry into the pipeline (`--transparent-listen`): one
//! redirected connection from accept to the tunnel phases.
//!
//! ```text
//! accept → original destination → arrive (caller, slot)
//!        → sniff (SNI / Host, kept; skipped for an address handed out for raw TCP only)
//!        → settle (caller rechecked at those bytes) → corroborate + decide_target
//!        → connect::tunnel(Entry::Transparent { original })
//! ```
//!
//! Owns only what is particular to a redirected connection: reading where the client meant
//! to go, the name it claims, and the refusals before a target exists (no answer is written:
//! the client believes it talks to the origin; each refusal is audited with its reason code).
//! Admission, judgement, credentials, the pinned dial and audit of the tunnel are the
//! pipeline's, as for `CONNECT`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::BytesMut;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::origdst;
use super::sniff::{self, SniffLimits};
use super::target::{self, TargetInput};
use crate::audit::{self, Engine, Outcome, Via};
use crate::dns::table::HandedOut;
use crate::pipeline::authority::Authority;
use crate::pipeline::transports::tunnel::{self, Entry, Start};
use crate::pipeline::{self, Conn, Shared};
use crate::refusal_code::Code;

/// What every transparent connection of a running proxy shares beyond [`Shared`].
#[derive(Debug, Default)]
pub struct Context {
    /// The policy DNS's table of handed-out addresses (`--dns-listen`), when it runs.
    pub dns_table: Option<Arc<HandedOut>>,
    /// Every address sluice listens on (explicit, transparent, DNS, metrics): a connection
    /// whose original destination is one of them is a loop.
    pub own_listeners: Vec<SocketAddr>,
}

/// A refusal before the tunnel phases: audited, and the connection closed.
struct Early<'a> {
    shared: &'a Shared,
    conn: &'a Conn,
    caller: Option<Arc<audit::Caller>>,
    original: Option<SocketAddr>,
}

impl Early<'_> {
    /// Audits the refusal: `code` names it and gives its status.
    fn audit(&self, engine: Engine, code: Code, reason: &str) {
        self.shared
            .audit
            .emit(&audit::Event::ConnectionOpen(audit::ConnectionOpen {
                time: SystemTime::now(),
                id: self.conn.id,
                via: Via::Transparent,
                caller: self.caller.clone(),
                src: self.conn.peer,
                dst: self.original.map_or_else(audit::Destination::nowhere, |a| {
                    let authority = Authority::new(a.ip().to_string(), a.port());
                    audit::Destination::new(authority, Some(a.ip()))
                }),
                outcome: Outcome::Denied,
                policy: None,
                engine,
                reason: Some(format!("{code}: {reason}")),
                status: code.status(),
            }));
    }
}

/// The name a client's first bytes claim, if any.
fn claimed(hello: &sniff::Hello) -> Option<&str> {
    match hello {
        sniff::Hello::Tls { sni: Some(n) } | sniff::Hello::Http { host: Some(n) } => Some(n),
        _ => None,
    }
}

/// Serves one redirected connection to the end.
pub async fn serve(
    shared: Arc<Shared>,
    context: Arc<Context>,
    stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
) {
    let _active = crate::metrics::connection_active();
    let _ = stream.set_nodelay(true);
    let original = origdst::original_destination(socket2::SockRef::from(&stream));
    // The client's socket is keyed by the destination it dialled, not sluice's address.
    let (mut rd, mut wr) = pipeline::ClientStream::Tcp(stream).into_split();
    let keyed = *original.as_ref().unwrap_or(&local);
    let arrival =
        match pipeline::arrive(&shared, peer, keyed, pipeline::FirstHead::Never, false).await {
            Ok(a) => a,
            Err(limited) => {
                let early = Early {
                    shared: &shared,
                    conn: &limited.conn,
                    caller: limited.caller.as_ref().ok().map(|k| Arc::clone(&k.audit)),
                    original: original.as_ref().ok().copied(),
                };
                let r = &limited.refusal;
                early.audit(Engine::Proxy, r.error, &r.detail);
                let _ = wr.shutdown().await;
                return;
            }
        };
    let early = Early {
        shared: &shared,
        conn: &arrival.conn,
        caller: arrival.caller.as_ref().ok().map(|k| Arc::clone(&k.audit)),
        original: original.as_ref().ok().copied(),
    };
    let original = match original {
        Ok(o) => o,
        Err(e) => {
            early.audit(
                Engine::HttpParser,
                Code::NoOriginalDestination,
                &e.to_string(),
            );
            let _ = wr.shutdown().await;
            return;
        }
    };
    // A connection to sluice itself is refused before anything else is read.
    if target::is_own_listener(original, &context.own_listeners) {
        let refusal = target::TargetRefusal::Loop { original };
        early.audit(Engine::L4, refusal.code(), &refusal.to_string());
        let _ = wr.shutdown().await;
        return;
    }
    let limits = SniffLimits {
        timeout: shared.limits.head_timeout,
        max_bytes: shared.limits.max_head_bytes.max(16 * 1024),
    };
    // Where the policy DNS handed the address out only for raw TCP, nothing the client could
    // send first would change the decision: a server-speaks-first protocol gets its relay at
    // once instead of waiting out the sniff.
    let raw_only = context.dns_table.as_deref().is_some_and(|table| {
        let tenant = arrival.caller.as_ref().ok().and_then(|k| k.claim());
        let policy = pipeline::InForce::policy(&*shared, tenant);
        let names = table.names_for(original.ip(), Instant::now());
        target::raw_tcp_only(&policy, &names, original.port())
    });
    let sniffed = if raw_only {
        Ok(sniff::Sniffed::skipped())
    } else {
        sniff::sniff(&mut rd, limits).await
    };
    let sniffed = match sniffed {
        Ok(s) => s,
        Err(sniff::SniffError::Closed) => return,
        Err(e) => {
            early.audit(
                Engine::HttpParser,
                Code::MalformedClientHello,
                &e.to_string(),
            );
            let _ = wr.shutdown().await;
            return;
        }
    };
    // The first bytes are the caller's only if the process that connected still holds the
    // socket: rechecked here, then watched while the connection lasts.
    let settled = pipeline::settle(&shared, arrival).await;
    // On a gateway, a client that is no tenant is refused for that, before any name it
    // claims is judged (by the empty policy of nobody).
    if let Err(e) = &settled.caller
        && shared.tenants.load().is_gateway()
    {
        let early = Early {
            shared: &shared,
            conn: &settled.conn,
            caller: None,
            original: Some(original),
        };
        early.audit(Engine::Identity, Code::PolicyDenied, &e.to_string());
        let _ = wr.shutdown().await;
        return;
    }
    let tenant = settled.caller.as_ref().ok().and_then(|k| k.claim());
    let policy = pipeline::InForce::policy(&*shared, tenant);
    // A name no policy endpoint allows at this port is refused before it is looked up: a
    // client must not make sluice resolve names of its choosing (a DNS side channel).
    if let Some(name) = claimed(&sniffed.hello)
        && policy.endpoints_for(name, original.port()).is_empty()
    {
        let early = Early {
            shared: &shared,
            conn: &settled.conn,
            caller: settled.caller.as_ref().ok().map(|k| Arc::clone(&k.audit)),
            original: Some(original),
        };
        let reason = format!(
            "`{name}` (claimed for {original}) is allowed at port {} by no policy endpoint; not looked up",
            original.port()
        );
        early.audit(Engine::L4, Code::PolicyDenied, &reason);
        let _ = wr.shutdown().await;
        return;
    }
    let mut evidence = target::corroborate(
        &shared.resolver,
        context.dns_table.as_deref(),
        &sniffed.hello,
        original,
    )
    .await;
    target::names_with_endpoints_first(&mut evidence.dns_names, |name| {
        !policy.endpoints_for(name, original.port()).is_empty()
    });
    let decided = target::decide_target(&TargetInput {
        original,
        own_listeners: &context.own_listeners,
        hello: &sniffed.hello,
        needs_name: target::needs_name(&policy, original),
        resolved: &evidence.resolved,
        dns_names: &evidence.dns_names,
    });
    drop(policy);
    let decided = match decided {
        Ok(t) => t,
        Err(refusal) => {
            let early = Early {
                shared: &shared,
                conn: &settled.conn,
                caller: settled.caller.as_ref().ok().map(|k| Arc::clone(&k.audit)),
                original: Some(original),
            };
            early.audit(Engine::L4, refusal.code(), &refusal.to_string());
            let _ = wr.shutdown().await;
            return;
        }
    };
    let start = Start {
        shared: &shared,
        conn: &settled.conn,
        caller: settled.caller.clone(),
        target: decided.dst,
        entry: Entry::Transparent { original },
    };
    tunnel::tunnel(start, (rd, wr), BytesMut::from(&sniffed.replay[..])).await;
}
