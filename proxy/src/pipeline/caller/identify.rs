//! The caller of a connection, found from its socket, in the two shapes sluice needs: what
//! policy matches on (exe, ancestor exes, cmdline paths) and what audit records (pids,
//! cmdlines); or, on a gateway (`--tenants`), the tenant it connects as.
//!
//! Owns the calls into `sluice-identity` (on a blocking thread: they read /proc and talk
//! netlink) and the conversion of their answers: the lookup when a connection is accepted, and
//! the confirmation that the same process (pid, start time, executable) still holds the socket
//! when its request arrives, at every later request on an inspected or kept-alive connection,
//! and periodically on tunnels (`holder.rs`). On a gateway it owns the choice of tenant: by
//! the client's address when the connection is accepted, and by the proxy credentials of its
//! first request head (`tenants::Table::identify`). A failed lookup or confirmation is an
//! error the pipeline turns into a denial: sluice never guesses who is calling (fail closed).

use std::net::IpAddr;
use std::sync::Arc;

use sluice_identity::{Identity, IdentityError};

use crate::audit;
use crate::http::head::RequestHead;
use crate::http::respond::Code;
use crate::http::respond::Refusal;
use crate::pipeline::client::accepted::Conn;
use crate::pipeline::denial::Denial;
use crate::pipeline::state::seen::Seen;
use crate::pipeline::state::shared::Shared;
use crate::policy;
use crate::tenants::cert::PeerCert;
use crate::tenants::{Claim, Credentials, NoTenant, Presented, Table, Tenant};

/// Why a connection's caller is not known, or no longer holds its socket: the identity
/// crate's answer, shared (every later request of the connection is refused with it); or,
/// on a gateway, why the connection is no tenant's.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CallerError {
    #[error(transparent)]
    Identity(Arc<IdentityError>),
    #[error(transparent)]
    Tenant(NoTenant),
}

impl From<IdentityError> for CallerError {
    fn from(e: IdentityError) -> Self {
        CallerError::Identity(Arc::new(e))
    }
}

/// The caller error of a failed identification, counted when sluice ran out of file
/// descriptors (the caller is then refused for sluice's state, not its own).
fn failed(e: IdentityError) -> CallerError {
    if matches!(e, IdentityError::DescriptorsExhausted) {
        crate::metrics::identity_descriptors_exhausted();
    }
    CallerError::from(e)
}

/// A connection's caller as the request phases carry it: known, or why not.
pub type CallerState = Result<Known, CallerError>;

/// A caller as policy and audit see it.
#[derive(Clone, Debug)]
pub struct Known {
    /// The executable; for a gateway tenant, `tenant:<name>` (what limits, pooling and
    /// refusals name it by).
    pub exe: String,
    pub ancestors: Vec<String>,
    pub cmdline_paths: Vec<String>,
    /// Shared by every event of the connection, never copied per event.
    pub audit: Arc<audit::Caller>,
    /// What the lookup found, for confirming it later; `None` for a gateway tenant (no
    /// process to confirm).
    pub identity: Option<Arc<Identity>>,
    /// The gateway tenant, judged under its own policy and credentials.
    pub tenant: Option<Arc<Claim>>,
}

impl Known {
    pub fn policy_caller(&self) -> policy::Caller<'_> {
        match &self.tenant {
            Some(claim) => policy::Caller::tenant(&claim.tenant.name),
            None => policy::Caller {
                exe: &self.exe,
                ancestors: &self.ancestors,
                cmdline: &self.cmdline_paths,
                tenant: None,
            },
        }
    }

    /// The tenant's name, if the caller is one.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_ref().map(|c| &*c.tenant.name)
    }

    /// The caller's claim to be a tenant, if it is one: what its configuration is looked up
    /// by.
    pub fn claim(&self) -> Option<&Claim> {
        self.tenant.as_deref()
    }
}

/// A gateway tenant, connected from `peer` with the client certificate `cert`, as a caller.
fn tenant_known(tenant: &Arc<Tenant>, peer: IpAddr, cert: Option<&Arc<PeerCert>>) -> Known {
    Known {
        exe: format!("tenant:{}", tenant.name),
        ancestors: Vec::new(),
        cmdline_paths: Vec::new(),
        audit: Arc::new(audit::Caller {
            tenant: Some(Arc::clone(&tenant.name)),
            ..audit::Caller::default()
        }),
        identity: None,
        tenant: Some(Arc::new(Claim {
            tenant: Arc::clone(tenant),
            peer,
            cert: cert.cloned(),
        })),
    }
}

/// Identifies the process at the other end of a connection, as soon as it is accepted; on a
/// gateway, the tenant that connects from its address, or with its client certificate,
/// without credentials (one that presents credentials is known at its first request head,
/// [`by_credentials`]).
pub async fn identify(shared: &Shared, conn: &Conn) -> CallerState {
    let (peer, local) = (conn.peer, conn.local);
    let tenants = shared.tenants.load();
    if tenants.is_gateway() {
        return tenants
            .identify(presented(conn), None)
            .map(|t| tenant_known(&t, peer.ip(), conn.cert.as_ref()))
            .map_err(CallerError::Tenant);
    }
    let resolver = &shared.identity;
    let lookup = || {
        in_place_or_blocking(
            || resolver.lookup_within(peer, local, IN_PLACE_READS),
            || resolver.lookup(peer, local),
        )
    };
    match crate::metrics::identity_lookup(lookup) {
        Ok(identity) => Ok(known(&shared.seen, identity)),
        Err(e) => Err(failed(e)),
    }
}

/// Checks that the process identified before (pid, start time, executable) still holds the
/// connection's socket, and that no process of another identity in its fork family holds it
/// as well: made when the first request head arrives, at every later request of a
/// kept-alive connection or HTTP/2 stream, at a tunnel's first use and at each periodic
/// re-check. A socket handed over between two looks is refused; one handed over while the
/// identified process keeps its copy too (which a look at that process alone would pass:
/// every such hand-over won) is refused when the program that took it holds it as the
/// request arrives. (A program that hides the socket in an `SCM_RIGHTS` message while its
/// bytes arrive is invisible to /proc; docs/identity.md says what that leaves.)
pub async fn recheck(shared: &Shared, known: &Known) -> Result<(), CallerError> {
    let Some(identity) = &known.identity else {
        return Ok(());
    };
    let resolver = &shared.identity;
    in_place_or_blocking(
        || resolver.recheck_within(identity, IN_PLACE_READS),
        || resolver.recheck(identity),
    )
    .map_err(failed)
}

/// What a connection presents to be a tenant: its address and its hop's client certificate.
fn presented(conn: &Conn) -> Presented<'_> {
    Presented {
        peer: conn.peer.ip(),
        cert: conn.cert.as_deref(),
    }
}

/// Whether a gateway client's tenant waits for the credentials of its first head.
pub fn awaits_credentials(caller: &CallerState) -> bool {
    matches!(
        caller,
        Err(CallerError::Tenant(NoTenant::CredentialsRequired(_)))
    )
}

/// On a gateway, the tenant a request head's proxy credentials (`Proxy-Authorization`)
/// name. Presented on the connection's `first` head, they decide its tenant (a client at a
/// tenant's address may still be another tenant by its credentials); on a later head of a
/// kept-alive connection they must name the same tenant, or every later request is refused.
/// Without credentials the caller stays as it is. Returns whether the tenant changed.
pub fn by_credentials(
    shared: &Shared,
    caller: &mut CallerState,
    conn: &Conn,
    head: &RequestHead,
    first: bool,
) -> bool {
    by_values(
        shared,
        caller,
        conn,
        head.header_values("proxy-authorization"),
        first,
    )
}

/// [`by_credentials`], given the values of the request's `Proxy-Authorization` headers.
fn by_values<'v>(
    shared: &Shared,
    caller: &mut CallerState,
    conn: &Conn,
    mut values: impl Iterator<Item = &'v [u8]>,
    first: bool,
) -> bool {
    // Most requests carry no credentials: the table is not even loaded for them.
    let Some(value) = values.next() else {
        return false;
    };
    let tenants = shared.tenants.load();
    if !tenants.is_gateway() {
        return false;
    }
    // Two credentials are no tenant's: which one counts is not for sluice to guess.
    let found = match values.next() {
        Some(_) => Err(NoTenant::TwoCredentials),
        None => identify_counted(shared, &tenants, presented(conn), value, first),
    };
    let same = matches!((&found, &*caller), (Ok(t), Ok(k)) if k.tenant() == Some(&*t.name));
    if same {
        return false;
    }
    *caller = match found {
        Ok(t) if first => Ok(tenant_known(&t, conn.peer.ip(), conn.cert.as_ref())),
        Err(e) if first => Err(CallerError::Tenant(e)),
        // A later request: any credentials but its tenant's end the connection alike, so
        // that it cannot tell another tenant's real password from a wrong guess.
        _ => Err(CallerError::Tenant(NoTenant::Switched)),
    };
    true
}

/// The tenant whose credentials `value` are, from `peer`. A connection's first credentials
/// are counted: an address that has sent too many wrong ones has its next attempts refused
/// unchecked for a while (`tenants::guesses`). A later request's are not (they cannot tell
/// a right password from a wrong one: every answer to them is the same refusal).
fn identify_counted(
    shared: &Shared,
    tenants: &Table,
    from: Presented<'_>,
    value: &[u8],
    first: bool,
) -> Result<Arc<Tenant>, NoTenant> {
    if !first {
        return tenants.identify(from, Some(value));
    }
    let peer = from.peer;
    let credentials = Credentials::parse(value);
    let user = credentials.as_ref().map_or("", |c| tenants.username_of(c));
    let attempt = shared
        .failed_logins
        .attempt(peer, user, std::time::Instant::now())
        .map_err(NoTenant::Throttled)?;
    let found = credentials.and_then(|c| tenants.by_credentials(from, &c));
    if found.is_ok() {
        attempt.succeeded();
    }
    found
}

/// [`recheck`] for a connection's caller as the request loop carries it: a caller that no
/// longer holds the socket alone becomes the reason every later request is refused.
pub async fn reconfirm(shared: &Shared, caller: &mut CallerState) {
    if let Ok(known) = caller
        && let Err(reason) = recheck(shared, known).await
    {
        *caller = Err(reason);
    }
}

/// The refusal of a request whose caller could not be identified or confirmed: `what` is the
/// refused request (`CONNECT host:port`, `GET host:port/path`), `e` why.
pub fn denial(what: &str, e: &CallerError) -> Denial {
    if let CallerError::Tenant(no) = e {
        let refusal = if let NoTenant::Throttled(wait) = no {
            Refusal::new(Code::TooManyFailedLogins,
                format!(
                    "{what} refused: too many wrong proxy credentials for this username from this address"
                ),
            )
            .retry_after(crate::tenants::guesses::retry_after_secs(*wait))
        } else if no.asks_credentials() {
            Refusal::new(
                Code::ProxyAuthRequired,
                format!("{what} needs a tenant's proxy credentials"),
            )
        } else {
            Refusal::new(
                Code::PolicyDenied,
                format!("{what} not permitted: no tenant"),
            )
        };
        let refusal = refusal.with_reason(no.to_string()).with("stage", "tenant");
        return Denial::new(audit::Engine::Identity, refusal);
    }
    let refusal = Refusal::new(
        Code::PolicyDenied,
        format!("{what} not permitted by policy"),
    )
    .with_reason(e.to_string())
    .with("stage", "identity");
    Denial::new(audit::Engine::Identity, refusal)
}

/// How much of `/proc` a lookup, recheck or confirmation may read in place on a worker, in
/// descriptors' worth (one `readlink` each; a thread's `children` file or a `/proc/<pid>`
/// `stat` one; a process opened and listed sixteen; see `IdentityResolver::lookup_within`).
/// A client a few processes below init with a few dozen descriptors costs 100 to 300
/// (`tls_bench`'s client: 115 to 200); 512 took 450 µs where measured, about what a TLS
/// handshake takes. One that reaches it (a client whose family has hundreds of processes or
/// threads, or tables of thousands of descriptors) stops there and runs again in full under
/// `block_in_place`, so that no worker is held for long by one caller's family.
const IN_PLACE_READS: usize = 512;

/// Runs `in_place` on this worker; when it answers "this would take longer" (`Ok(None)`),
/// runs `full` where it blocks no other task.
fn in_place_or_blocking<T>(
    in_place: impl FnOnce() -> Result<Option<T>, IdentityError>,
    full: impl FnOnce() -> Result<T, IdentityError>,
) -> Result<T, IdentityError> {
    match in_place() {
        Ok(Some(done)) => Ok(done),
        Ok(None) => {
            crate::metrics::identity_off_worker();
            blocking(full)
        }
        Err(e) => Err(e),
    }
}

/// Runs a lookup on this worker: `block_in_place` makes the runtime move other tasks away
/// instead of handing the work to another thread and back, which costs two wake-ups per
/// connection on a busy machine.
fn blocking<T>(lookup: impl FnOnce() -> T) -> T {
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        tokio::task::block_in_place(lookup)
    } else {
        lookup()
    }
}

fn known(seen: &Seen, identity: Identity) -> Known {
    let id = &identity;
    let audit = seen.share(audit::Caller {
        process: audit::Process {
            pid: id.pid,
            exe: id.exe.clone(),
            cmdline: audit::cmdline::recorded(&id.cmdline),
            uid: Some(id.uid),
        },
        ancestors: id
            .ancestors
            .iter()
            .map(|a| audit::Process {
                pid: a.pid,
                exe: a.exe.clone(),
                cmdline: audit::cmdline::recorded(&a.cmdline),
                uid: None,
            })
            .collect(),
        ..audit::Caller::default()
    });
    Known {
        exe: id.exe.clone(),
        // An ancestor whose exe the kernel would not show (pid 1 in some sandboxes) matches
        // nothing and says nothing: left out.
        ancestors: id
            .ancestors
            .iter()
            .filter(|a| !a.exe.is_empty())
            .map(|a| a.exe.clone())
            .collect(),
        cmdline_paths: id.cmdline_paths.clone(),
        audit,
        // The raw command lines live on in `audit` (in the form audit records them); the
        // later checks never read them.
        identity: Some(Arc::new(identity.without_cmdlines())),
        tenant: None,
    }
}
