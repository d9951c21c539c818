//! The connection phase, written once for every way a connection names its destination (a
//! CONNECT authority, an absolute-form request's host; next, a transparently redirected
//! connection's original destination): the target normalised, its caller required, the L4
//! decision, and the dial through the destination plan (SSRF-checked, `destination.rs`).
//!
//! ```text
//! normalize(target) → admit(caller, L4) → Admitted → dial(plan) → upstream socket
//! ```
//!
//! Each step answers a refusal as a [`Denial`]; the entry points (`connect.rs`,
//! `forward.rs`) only write it. An inspected tunnel dials through [`dial_inspected`], which
//! may leave the dial to after the ClientHello when the pool (`pool.rs`) holds a connection
//! this tunnel's own destination plan would have dialled.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;

use super::authority::Authority;
use super::caller::{self, CallerError, Known};
use super::denial::Denial;
use super::destination;
use super::pool::{Epoch, Key, Wanted};
use super::shared::Shared;
use crate::audit::Engine;
use crate::credentials::Transport;
use crate::http::respond::{Code, Refusal};
use crate::policy::canon;
use crate::policy::decide::Admission;
use crate::policy::{L4Decision, Policy};

/// The target with its host in canonical form (lower case, IDNA, no trailing dot); `verb`
/// names the refused request in the refusal (`CONNECT`, `GET`).
pub fn normalize(verb: &str, target: &Authority) -> Result<Authority, Denial> {
    canon::normalize_host(target.host())
        .map(|host| target.with_host(host))
        .map_err(|e| {
            let shown = target.with_host(target.host().to_ascii_lowercase());
            let refusal = Refusal::new(
                400,
                Code::InvalidTarget,
                format!("{verb} {shown} refused: {e}"),
            );
            Denial::new(Engine::HttpParser, refusal)
        })
}

/// The caller (required: sluice never guesses who is calling) and the L4 decision for a
/// normalised target, under the policy snapshot in force now, which the admitted
/// connection keeps. `what` names the refused request (`CONNECT h:p`, `GET h:p/path`).
pub fn admit<'k>(
    shared: &Shared,
    caller: Result<&'k Known, &CallerError>,
    dst: &Authority,
    scheme: Scheme,
    what: &str,
) -> Result<(&'k Known, Admitted), Denial> {
    let known = caller.map_err(|e| caller::denial(what, e))?;
    let policy = shared.policy.load_full();
    match policy.decide_l4(&known.policy_caller(), dst.host(), dst.port()) {
        L4Decision::Allow(admission) => Ok((
            known,
            Admitted {
                dst: dst.clone(),
                scheme,
                policy: Arc::clone(&policy),
                admission,
            },
        )),
        L4Decision::Deny(d) => {
            let refusal = Refusal::new(
                403,
                Code::PolicyDenied,
                format!("{what} not permitted by policy"),
            )
            .with_reason(d.reason)
            .with("binary", known.exe.clone())
            .with("ancestors", known.ancestors.clone())
            .with("host", dst.host().to_string())
            .with("port", dst.port())
            .with("stage", "l4");
            Err(Denial::new(Engine::L4, refusal))
        }
    }
}

/// Resolves, vets and dials an admitted destination; `verb` names the request in a
/// refusal. Returns the socket and the address dialled.
pub async fn dial(
    shared: &Shared,
    admitted: &Admitted,
    verb: &str,
) -> Result<(TcpStream, SocketAddr), Denial> {
    let dst = &admitted.dst;
    let plan = destination::plan_for(
        &admitted.policy,
        &admitted.admission,
        dst.host(),
        shared.compat,
    );
    destination::connect(shared, &plan, dst.host(), dst.port())
        .await
        .map_err(|e| e.denial(verb, dst))
}

/// An inspected tunnel's upstream as the connection phase leaves it.
#[derive(Debug)]
pub enum Dialled {
    /// Dialled now.
    Socket(TcpStream),
    /// Not dialled: the pool holds a connection to one of these addresses (vetted by this
    /// tunnel's own plan, the pooled one first), to be taken once the client's ClientHello
    /// names its ALPN offer, or dialled then if none fits any more.
    Deferred(Vec<SocketAddr>),
}

/// Like [`dial`], for a tunnel whose requests are inspected: resolves and vets, then leaves
/// the dial to later when the pool holds a connection for this caller and destination to an
/// address just vetted, under the same configuration; else dials now. Returns the upstream
/// and the address dialled (or to be reused).
pub async fn dial_inspected(
    shared: &Shared,
    admitted: &Admitted,
    known: &Known,
    verb: &str,
) -> Result<(Dialled, SocketAddr), Denial> {
    let dst = &admitted.dst;
    let plan = destination::plan_for(
        &admitted.policy,
        &admitted.admission,
        dst.host(),
        shared.compat,
    );
    let fail = |e: destination::DialError| e.denial(verb, dst);
    let mut vetted = destination::vet(shared, &plan, dst.host(), dst.port())
        .await
        .map_err(fail)?;
    let epoch = epoch(shared, admitted);
    let wanted = Wanted {
        vetted: &vetted,
        offer: None,
        epoch: &epoch,
    };
    if let Some(addr) = shared.pool.candidate(&pool_key(known, dst), &wanted) {
        vetted.retain(|a| *a != addr);
        vetted.insert(0, addr);
        return Ok((Dialled::Deferred(vetted), addr));
    }
    let (socket, addr) = dial_vetted(shared, &vetted).await.map_err(fail)?;
    Ok((Dialled::Socket(socket), addr))
}

/// Dials addresses already vetted by a destination plan, in order.
pub async fn dial_vetted(
    shared: &Shared,
    vetted: &[SocketAddr],
) -> Result<(TcpStream, SocketAddr), destination::DialError> {
    crate::metrics::upstream_connect(destination::dial(vetted, shared.limits.connect_timeout)).await
}

/// Whose upstream connection to where, for the pool.
pub fn pool_key(known: &Known, dst: &Authority) -> Key {
    Key::new(
        known.identity.uid,
        &known.exe,
        &known.ancestors,
        &known.cmdline_paths,
        dst,
    )
}

/// The configuration an admitted connection's upstream is made under: its pinned policy
/// snapshot and the credentials in force now.
pub fn epoch(shared: &Shared, admitted: &Admitted) -> Epoch {
    Epoch {
        policy: Arc::clone(&admitted.policy),
        credentials: shared.credentials.load_full(),
    }
}

/// Whether an admitted connection's requests travel over TLS sluice verified upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// The port a request's authority may leave out.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    /// What a credential binding sees of the way a request travels.
    pub fn transport(self) -> Transport {
        match self {
            Scheme::Http => Transport::Plaintext,
            Scheme::Https => Transport::VerifiedTls,
        }
    }
}

/// An admitted destination: where a connection's requests go, and what admitted them (the
/// policy snapshot pinned for the connection and its L4 admission), which is also what a
/// later re-judgement of the connection needs.
#[derive(Clone, Debug)]
pub struct Admitted {
    pub dst: Authority,
    pub scheme: Scheme,
    pub policy: Arc<Policy>,
    pub admission: Admission,
}
