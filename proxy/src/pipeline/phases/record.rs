//! One request's audit record: opened when its head arrives, filled in by the phases as they
//! go (destination, judgement, credentials, answer, bytes each way), and emitted once, when
//! the exchange ends: after the response's last byte, at a refusal, or when the transport
//! drops it (a stream reset midway), whichever comes first. HTTP/1.1, HTTP/2 and WebSocket
//! handshakes all audit through it, so their records carry the same fields.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::connection::Admitted;
use super::inject;
use super::judge::Judged;
use crate::audit::{self, AuditSink, Engine, Outcome};
use crate::pipeline::authority::{Authority, path_only};
use crate::pipeline::caller::identify::Known;
use crate::pipeline::denial::Denial;
use crate::pipeline::state::shared::Shared;

/// The audit record of one request, emitted once (see the module doc).
#[derive(Debug)]
pub struct Record {
    audit: Arc<AuditSink>,
    conn_id: u64,
    peer: SocketAddr,
    caller: Option<Arc<audit::Caller>>,
    started: Instant,
    /// Upper case.
    pub method: String,
    pub dst: Authority,
    /// The address dialled, once there is one.
    pub ip: Option<IpAddr>,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The canonical path, without the query.
    pub path: String,
    pub policy: Option<String>,
    pub rule: Option<String>,
    /// Names of the credentials injected into this request.
    pub credentials: Vec<String>,
    /// How it was signed again (`credential_signing`), once it was.
    pub signed: Option<String>,
    pub outcome: Outcome,
    pub engine: Engine,
    pub reason: Option<String>,
    /// The status the client got (sluice's own for a refusal), once it got one.
    pub status: Option<u16>,
    /// Request body bytes received from the client.
    pub bytes_in: u64,
    /// Response body bytes sent to the client.
    pub bytes_out: u64,
    emitted: bool,
}

impl Record {
    /// A record for a request of connection `conn_id` from `peer`, by `caller` when known.
    pub fn open(shared: &Shared, conn_id: u64, peer: SocketAddr, caller: Option<&Known>) -> Record {
        Record {
            audit: Arc::clone(&shared.audit),
            conn_id,
            peer,
            caller: caller.map(|k| Arc::clone(&k.audit)),
            started: Instant::now(),
            method: String::new(),
            dst: Authority::new(String::new(), 0),
            ip: None,
            scheme: "http",
            path: String::new(),
            policy: None,
            rule: None,
            credentials: Vec::new(),
            signed: None,
            outcome: Outcome::Denied,
            engine: Engine::HttpParser,
            reason: None,
            status: None,
            bytes_in: 0,
            bytes_out: 0,
            emitted: false,
        }
    }

    /// The request is on `admitted`'s connection: its destination, scheme and policy entry.
    pub fn on(&mut self, admitted: &Admitted) {
        self.dst = admitted.dst.clone();
        self.scheme = admitted.scheme.as_str();
        self.policy = Some(admitted.admission.entry.to_string());
    }

    /// A new record of the same connection, caller and destination, judged as this one was
    /// (a WebSocket message's, from its upgrade's); no credentials, bytes or status yet.
    pub fn copy(&self) -> Record {
        Record {
            audit: Arc::clone(&self.audit),
            conn_id: self.conn_id,
            peer: self.peer,
            caller: self.caller.clone(),
            started: Instant::now(),
            method: self.method.clone(),
            dst: self.dst.clone(),
            ip: self.ip,
            scheme: self.scheme,
            path: self.path.clone(),
            policy: self.policy.clone(),
            rule: self.rule.clone(),
            credentials: Vec::new(),
            signed: None,
            outcome: self.outcome,
            engine: self.engine,
            reason: None,
            status: None,
            bytes_in: 0,
            bytes_out: 0,
            emitted: false,
        }
    }

    /// The request's method and target as they arrived (the path until policy canonicalises it).
    pub fn request(&mut self, method: &str, path_and_query: &str) {
        self.method = method.to_ascii_uppercase();
        self.path = path_only(path_and_query).to_string();
    }

    /// What the judgement found (also for a refusal).
    pub fn judged(&mut self, j: &Judged) {
        self.policy = Some(j.policy.clone());
        self.rule.clone_from(&j.rule);
        if let Some(p) = &j.path {
            self.path.clone_from(p);
        }
        self.outcome = j.outcome;
        self.engine = j.engine;
        self.reason.clone_from(&j.reason);
    }

    /// A refusal: denied, by its engine, for its reason, with its status.
    pub fn deny(&mut self, d: &Denial) {
        self.outcome = Outcome::Denied;
        self.engine = d.engine;
        self.reason = Some(d.audit_reason());
        self.status = Some(d.refusal.status);
    }

    /// Where this request goes, for its credential steps and findings.
    pub(crate) fn dest<'a>(&'a self, shared: &'a Shared, known: &'a Known) -> inject::Dest<'a> {
        inject::Dest {
            shared,
            conn_id: self.conn_id,
            peer: self.peer,
            caller: known,
            dst: &self.dst,
            ip: self.ip,
            policy: self.policy.clone(),
        }
    }

    /// The destination as audit names it.
    pub fn destination(&self) -> audit::Destination {
        audit::Destination::new(self.dst.clone(), self.ip)
    }

    /// Drops the record unemitted: the request was not judged (sluice answered it itself, or
    /// its connection ended before it went anywhere).
    pub fn discard(mut self) {
        self.emitted = true;
    }

    /// Emits the record now (the exchange ended).
    pub fn finish(mut self) {
        self.emit();
    }

    fn emit(&mut self) {
        if std::mem::replace(&mut self.emitted, true) {
            return;
        }
        self.audit
            .emit(&audit::Event::HttpRequest(audit::HttpRequest {
                time: SystemTime::now(),
                id: self.conn_id,
                caller: self.caller.clone(),
                src: self.peer,
                dst: self.destination(),
                method: std::mem::take(&mut self.method),
                scheme: self.scheme,
                path: std::mem::take(&mut self.path),
                outcome: self.outcome,
                policy: self.policy.take(),
                engine: self.engine,
                rule: self.rule.take(),
                reason: self.reason.take(),
                status: self.status,
                bytes_in: self.bytes_in,
                bytes_out: self.bytes_out,
                duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                credentials: std::mem::take(&mut self.credentials),
                signed: self.signed.take(),
            }));
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        self.emit();
    }
}
