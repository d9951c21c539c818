//! The connection phase, written once for every way a connection names its destination (a
//! CONNECT authority, an absolute-form request's host, a transparently redirected connection's
//! claimed name, dialled only at its original destination): the target normalised, its caller
//! required, the L4 decision, and the dial through the destination plan (SSRF-checked,
//! `upstream/destination.rs`).
//!
//! ```text
//! normalize(target) → admit(caller, L4) → Admitted → dial(plan) → upstream socket
//! ```
//!
//! Each step answers a refusal as a [`Denial`]; the entry points (`transports/tunnel.rs`,
//! `transports/http1.rs`) only write it. An inspected tunnel dials through [`dial_inspected`], which
//! may leave the dial to after the ClientHello when the pool (`state/pool.rs`) holds a connection
//! this tunnel's own destination plan would have dialled.
//!
//! An admitted connection is then [`hold`]: registered as live until it ends, and re-judged
//! by the same L4 rule when a reload swaps the policy ([`revoke_disallowed`]): one the new
//! policy no longer allows is stopped, with the reason its close event records.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;

use crate::audit::Engine;
use crate::credentials::{Bindings, Transport};
use crate::http::respond::{Code, Refusal};
use crate::pipeline::authority::Authority;
use crate::pipeline::caller::identify::{self, CallerError, Known};
use crate::pipeline::client::accepted::Conn;
use crate::pipeline::client::stop::StopReason;
use crate::pipeline::denial::Denial;
use crate::pipeline::state::live::{InForce, Judge, Registration};
use crate::pipeline::state::pool::{Epoch, Key, Wanted};
use crate::pipeline::state::shared::Shared;
use crate::pipeline::upstream::destination;
use crate::policy::canon;
use crate::policy::decide::Admission;
use crate::policy::{L4Decision, Policy};
use crate::tenants::Claim;

/// The target with its host in canonical form (lower case, IDNA, no trailing dot); `verb`
/// names the refused request in the refusal (`CONNECT`, `GET`).
pub fn normalize(verb: &str, target: &Authority) -> Result<Authority, Denial> {
    canon::normalize_host(target.host())
        .map(|host| target.with_host(host))
        .map_err(|e| {
            let shown = target.with_host(target.host().to_ascii_lowercase());
            let refusal = Refusal::new(Code::InvalidTarget, format!("{verb} {shown} refused: {e}"));
            Denial::new(Engine::HttpParser, refusal)
        })
}

/// The audit gate (`denial::audit_gate`), the caller (required: sluice never guesses who is
/// calling) and the L4 decision for a normalised target, under the policy snapshot in force now, which the admitted
/// connection keeps. `what` names the refused request (`CONNECT h:p`, `GET h:p/path`).
pub fn admit<'k>(
    shared: &Shared,
    caller: Result<&'k Known, &CallerError>,
    dst: &Authority,
    scheme: Scheme,
    what: &str,
) -> Result<(&'k Known, Admitted), Denial> {
    // Nothing is admitted while it could not be audited.
    crate::pipeline::denial::audit_gate(&shared.audit)?;
    let known = caller.map_err(|e| identify::denial(what, e))?;
    let admitted = admit_under(shared.policy(known.claim()), known, dst, scheme, what)?;
    Ok((known, admitted))
}

/// The L4 decision under one policy snapshot: [`admit`]'s rule, also the one a reload's
/// re-judgement of live connections applies ([`hold`]).
fn admit_under(
    policy: Arc<Policy>,
    known: &Known,
    dst: &Authority,
    scheme: Scheme,
    what: &str,
) -> Result<Admitted, Denial> {
    match policy.decide_l4(&known.policy_caller(), dst) {
        L4Decision::Allow(admission) => Ok(Admitted {
            dst: dst.clone(),
            scheme,
            policy,
            admission,
            tenant: known.tenant.clone(),
        }),
        L4Decision::Deny(d) => {
            let refusal = Refusal::new(
                Code::PolicyDenied,
                format!("{what} not permitted by policy"),
            )
            .with_reason(d.reason);
            let refusal = match known.tenant() {
                Some(tenant) => refusal.with("tenant", tenant),
                None => refusal
                    .with("binary", known.exe.clone())
                    .with("ancestors", known.ancestors.clone()),
            };
            let refusal = refusal
                .with("host", dst.host().to_string())
                .with("port", dst.port())
                .with("stage", "l4");
            Err(Denial::new(Engine::L4, refusal))
        }
    }
}

/// Keeps an admitted connection in the live registry until the returned registration drops:
/// called once by each entry of the connection phase (a tunnel for its life, an
/// absolute-form request for its own), so that a reload re-judges it whatever it carries.
/// A reload that landed after its admission (perhaps after that reload's sweep) is applied
/// to it here at once.
pub fn hold<'s>(
    shared: &'s Shared,
    conn: &Conn,
    known: &Known,
    admitted: &Admitted,
    kind: Kind,
    dialled: Option<SocketAddr>,
) -> Registration<'s> {
    let pinned = dialled.map(|addr| DialledAt {
        addr,
        compat: shared.compat,
        allow_loopback: shared.allow_loopback,
    });
    let judge = judge(known.clone(), admitted.clone(), kind, pinned);
    // Inserted before the policy is read: a sweep holds the registry while it runs, so either
    // it sees this connection or this sees the policy its reload stored.
    let registration = shared.live.insert(conn.id, judge, conn.raise.clone());
    let now = shared.policy(known.claim());
    // A reload swaps the policy (a new snapshot each time) after the credentials.
    if !Arc::ptr_eq(&now, &admitted.policy)
        && let Some(reason) = rejudge(
            &now,
            &shared.credentials(known.claim()),
            known,
            admitted,
            kind,
            pinned.as_ref(),
        )
        && conn.raise.raise(reason)
    {
        crate::metrics::connections_revoked(1);
    }
    registration
}

/// Re-judges every live connection at L4 under the policy now in force (a reload has just
/// stored it) and stops each it no longer allows, with the reason; one still allowed is not
/// touched. Idle pooled upstream connections are closed. Returns how many were stopped.
pub fn revoke_disallowed(shared: &Shared) -> usize {
    // Idle pooled upstream connections were made under the old configuration: closed now.
    shared.pool.retire(current_epochs(shared));
    let revoked = shared.live.sweep(shared);
    crate::metrics::connections_revoked(revoked);
    revoked
}

/// How a live connection carries its traffic, which decides what a new policy must still
/// allow of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A tunnel relayed byte for byte: it must stay admitted, and uninspected.
    RawTunnel,
    /// A tunnel whose requests are inspected (each also judged on its own at L7).
    InspectedTunnel,
    /// An absolute-form request (and its WebSocket after an upgrade).
    Forward,
}

/// The address a live tunnel's upstream was dialled at, and how it was vetted: a reload
/// that narrows `allowed_ips` (or otherwise the destination plan) must close a tunnel whose
/// address the new plan would refuse, even though its name is still allowed.
#[derive(Clone, Copy, Debug)]
pub struct DialledAt {
    pub addr: SocketAddr,
    pub compat: crate::policy::Compat,
    pub allow_loopback: bool,
}

fn judge(known: Known, admitted: Admitted, kind: Kind, dialled: Option<DialledAt>) -> Judge {
    Box::new(move |now| {
        rejudge(
            &now.policy(known.claim()),
            &now.credentials(known.claim()),
            &known,
            &admitted,
            kind,
            dialled.as_ref(),
        )
    })
}

/// Whether a tunnel to an admitted destination would carry credential traffic uninspected: a
/// credential is bound to it and no endpoint that admits it opts in
/// (`allow_uninspected_credentials`). A raw tunnel is refused then at CONNECT, and closed
/// when a reload makes it so.
pub fn uninspected_credentials(credentials: &Bindings, admitted: &Admitted) -> bool {
    let (dst, policy) = (&admitted.dst, &admitted.policy);
    credentials.is_credentialed(dst)
        && !admitted
            .admission
            .endpoints
            .iter()
            .any(|r| policy.endpoint(*r).allow_uninspected_credentials)
}

/// Why `policy` and `credentials` no longer allow a live connection; `None` while they do. A
/// raw tunnel to an endpoint `policy` inspects is no longer allowed either: it would go on
/// carrying uninspected what the new policy judges request by request; nor one to a
/// destination a credential is now bound to ([`uninspected_credentials`]).
fn rejudge(
    policy: &Arc<Policy>,
    credentials: &Bindings,
    known: &Known,
    admitted: &Admitted,
    kind: Kind,
    dialled: Option<&DialledAt>,
) -> Option<StopReason> {
    let dst = &admitted.dst;
    let what = match kind {
        Kind::RawTunnel | Kind::InspectedTunnel => format!("CONNECT {dst}"),
        Kind::Forward => format!("requests to {dst}"),
    };
    let entry = admitted.admission.entry.to_string();
    let why = match admit_under(Arc::clone(policy), known, dst, admitted.scheme, &what) {
        Err(_) => format!("entry {entry} no longer allows {what} by {}", known.exe),
        Ok(now) if kind == Kind::RawTunnel && now.admission.inspects(&now.policy) => format!(
            "entry {} now inspects {what}; the uninspected tunnel is closed",
            now.admission.entry
        ),
        Ok(now) if kind == Kind::RawTunnel && uninspected_credentials(credentials, &now) => {
            format!(
                "a credential is bound to {dst} and no endpoint allows it uninspected; the uninspected tunnel is closed"
            )
        }
        Ok(now) => {
            let d = dialled?;
            let plan = destination::plan_for(&now.policy, &now.admission, dst.host(), d.compat);
            let opts = sluice_resolver::VetOptions {
                allow_loopback: d.allow_loopback,
            };
            if sluice_resolver::vet(&plan, &[d.addr.ip()], d.addr.port(), opts).is_ok() {
                return None;
            }
            format!(
                "entry {} no longer allows the address {} of {what}",
                now.admission.entry, d.addr
            )
        }
    };
    Some(StopReason::PolicyRevoked {
        entry,
        dst: dst.clone(),
        why,
    })
}

/// Whether `addr`, where an upstream connection to an admitted destination was dialled
/// earlier, is still one its destination plan allows: a kept connection is reused only then
/// (a reload may have narrowed `allowed_ips` since).
pub fn still_allows(shared: &Shared, admitted: &Admitted, addr: SocketAddr) -> bool {
    let opts = sluice_resolver::VetOptions {
        allow_loopback: shared.allow_loopback,
    };
    sluice_resolver::vet(&plan(shared, admitted), &[addr.ip()], addr.port(), opts).is_ok()
}

/// The destination plan (addresses allowed, the resolver's rules) of an admitted destination.
fn plan(shared: &Shared, admitted: &Admitted) -> sluice_resolver::DestinationPlan {
    destination::plan_for(
        &admitted.policy,
        &admitted.admission,
        admitted.dst.host(),
        shared.compat,
    )
}

/// Resolves, vets and dials an admitted destination; `verb` names the request in a
/// refusal. Returns the socket and the address dialled.
pub async fn dial(
    shared: &Shared,
    admitted: &Admitted,
    verb: &str,
) -> Result<(TcpStream, SocketAddr), Denial> {
    let dst = &admitted.dst;
    let plan = plan(shared, admitted);
    destination::connect(shared, &plan, dst)
        .await
        .map_err(|e| e.denial(verb, dst))
}

/// Vets and dials an admitted destination at one address only: the address a transparently
/// redirected client dialled. The name it claimed was tied to that address before admission
/// (`transparent::target`), and a fresh lookup of the name could lead elsewhere, so none is
/// made; the address still passes the destination plan's SSRF checks.
pub async fn dial_pinned(
    shared: &Shared,
    admitted: &Admitted,
    verb: &str,
    original: SocketAddr,
) -> Result<(TcpStream, SocketAddr), Denial> {
    let dst = &admitted.dst;
    let plan = plan(shared, admitted);
    destination::connect_at(shared, &plan, dst.host(), original)
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
    let plan = plan(shared, admitted);
    let fail = |e: destination::DialError| e.denial(verb, dst);
    let mut vetted = destination::vet(shared, &plan, dst).await.map_err(fail)?;
    let epoch = epoch(shared, admitted);
    let wanted = Wanted {
        vetted: &vetted,
        offer: None,
        alpn: None,
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
        // A gateway tenant has no process: its `exe` (`tenant:<name>`) tells it apart.
        known.identity.as_ref().map_or(u32::MAX, |i| i.uid),
        &known.exe,
        &known.ancestors,
        &known.cmdline_paths,
        dst,
    )
}

/// The configuration an admitted connection's upstream is made under: its pinned policy
/// snapshot and the credentials in force now (its tenant's, on a gateway).
pub fn epoch(shared: &Shared, admitted: &Admitted) -> Epoch {
    Epoch {
        policy: Arc::clone(&admitted.policy),
        credentials: shared.credentials(admitted.tenant.as_deref()),
    }
}

/// The configuration in force now for an admitted connection's caller (a connection made
/// under another is not pooled).
pub fn current_epoch(shared: &Shared, admitted: &Admitted) -> Epoch {
    current_epoch_of(shared, admitted.tenant.as_deref())
}

/// The configuration in force now for a local caller (`None`) or a gateway tenant.
pub fn current_epoch_of(shared: &Shared, tenant: Option<&Claim>) -> Epoch {
    Epoch {
        policy: shared.policy(tenant),
        credentials: shared.credentials(tenant),
    }
}

/// Every configuration in force now: the local one, and each gateway tenant's.
fn current_epochs(shared: &Shared) -> Vec<Epoch> {
    let local = Epoch {
        policy: shared.policy.load_full(),
        credentials: shared.credentials.load_full(),
    };
    let tenants = shared.tenants.load();
    let each = tenants.tenants().iter().map(|t| Epoch {
        policy: Arc::clone(&t.policy),
        credentials: Arc::clone(&t.credentials),
    });
    std::iter::once(local).chain(each).collect()
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
    /// The gateway tenant it was admitted for, whose configuration judges it (`None`: a
    /// local caller).
    pub tenant: Option<Arc<Claim>>,
}
