//! A refusal as the pipeline makes it: what the client reads ([`Refusal`]: status, typed
//! code, detail, reason, fields for agents) and which part of sluice refused ([`Engine`]),
//! which audit records. Every refusal site in the pipeline builds one `Denial`; the
//! transports only write it (an HTTP/1 response, an HTTP/2 stream's answer) and audit it.

use std::sync::Arc;
use std::time::SystemTime;

use crate::audit::{self, AuditSink, Engine};
use crate::http::head::HeadError;
use crate::http::respond::{Code, Refusal};
use crate::pipeline::client::accepted::Conn;
use crate::pipeline::state::shared::Shared;

/// A refusal and the engine that made it.
#[derive(Clone, Debug)]
pub struct Denial {
    pub refusal: Refusal,
    pub engine: Engine,
}

impl Denial {
    pub fn new(engine: Engine, refusal: Refusal) -> Denial {
        Denial { refusal, engine }
    }

    /// What audit records as the reason: the refusal's reason, else its detail.
    pub fn audit_reason(&self) -> String {
        self.refusal
            .reason
            .clone()
            .unwrap_or_else(|| self.refusal.detail.clone())
    }
}

/// Fails closed while the audit log cannot take records (its spool is full and
/// `--audit-on-failure` is `closed`): every new connection and every request is refused with
/// `503 audit_unavailable` before anything else is decided, and counted. The refusal is
/// audited like any other; the spool keeps a reserve for such records.
pub fn audit_gate(audit: &AuditSink) -> Result<(), Denial> {
    if !audit.refusing() {
        return Ok(());
    }
    audit.refused();
    let refusal = Refusal::new(
        Code::AuditUnavailable,
        "sluice cannot write its audit log; new connections and requests are refused until it can",
    );
    Err(Denial::new(Engine::Proxy, refusal))
}

/// The refusal for a head that could not be read.
pub fn head_refusal(e: &HeadError) -> Refusal {
    match e {
        HeadError::TooLarge(max) => Refusal::new(
            Code::RequestHeaderFieldsTooLarge,
            format!("request head larger than {max} bytes"),
        ),
        other => Refusal::new(Code::BadRequest, other.to_string()),
    }
}

/// The Detection Finding type of a request head refused for its framing.
pub const FINDING_SMUGGLING: &str = "sluice.http.request_smuggling";

/// Audits, besides its refusal, a request head whose framing two parsers could read
/// differently ([`HeadError::Ambiguous`]: CL+TE, two Content-Lengths, obs-fold, a bare LF or
/// CR, another Transfer-Encoding, two Hosts): a request smuggling attempt, as a Detection
/// Finding. Any other head error is only refused.
pub fn smuggling_finding(
    shared: &Shared,
    conn: &Conn,
    caller: Option<Arc<audit::Caller>>,
    dst: audit::Destination,
    e: &HeadError,
) {
    let HeadError::Ambiguous(why) = e else { return };
    shared.audit.emit(&audit::Event::Finding(audit::Finding {
        time: SystemTime::now(),
        id: conn.id,
        caller,
        src: conn.peer,
        dst,
        kind: FINDING_SMUGGLING.to_string(),
        guard: audit::Guard::Http,
        title: format!("request with ambiguous framing refused (request smuggling?): {why}"),
        credential: None,
        policy: None,
        severity: audit::Severity::High,
    }));
}
