//! Audit: what sluice allowed and denied, as OCSF 1.8 events (one JSON object per line) and
//! as human shorthand lines on stderr.
//!
//! This crate (re-exported as `sluice::audit`) owns the event *model*: plain data that the pipeline fills in. `ocsf.rs`
//! turns a model into an OCSF JSON object (pure), `shorthand.rs` into the spec §7.3 one-line
//! form (pure), and `sink.rs` writes both out. Nothing here decides anything; no secret,
//! placeholder or query string is ever put into a model (callers pass canonical paths
//! without queries, and credential *names* only).

pub mod cmdline;
pub mod observe;
pub mod ocsf;
pub mod read;
pub mod report;
pub mod shorthand;
pub mod sink;
pub mod suggest;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::SystemTime;

pub use sink::{AuditSink, LogFormat, OnFailure, Redact};
pub use sluice_addr::Authority;

/// OCSF severity (spec §7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Informational,
    Low,
    Medium,
    High,
    Critical,
}

/// A process as identified from its socket: the caller, or one of its ancestors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// The real executable path (symlinks resolved by the kernel).
    pub exe: String,
    pub cmdline: Vec<String>,
    pub uid: Option<u32>,
}

/// The caller of a connection: the process and its ancestors, parent first. Events hold it
/// behind an `Arc`: one connection's events share it, never copy it.
///
/// Read-only once an event carries it: its OCSF form is written once, at the first event that
/// writes it, and every later event reuses those bytes (`json`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    pub process: Process,
    pub ancestors: Vec<Process>,
    /// A gateway tenant (`--tenants`): the caller is known by its tenant's name only, and
    /// `process` is empty (OCSF `actor.user` instead of `actor.process`).
    pub tenant: Option<Arc<str>>,
    /// The OCSF JSON of `process` and its ancestors, once written (not part of what the
    /// caller is: it compares equal whatever it holds, and a clone starts without it).
    pub json: ocsf::CallerJson,
}

/// A network destination: the host the client asked for and the port (an IPv6 literal is
/// held without brackets and written with them, `sluice-addr`'s one spelling), and the
/// address sluice dialled (when it dialled one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    pub authority: Authority,
    pub ip: Option<IpAddr>,
}

impl Destination {
    pub fn new(authority: Authority, ip: Option<IpAddr>) -> Destination {
        Destination { authority, ip }
    }

    /// No destination known yet (a refusal before one was read): an empty host and port 0.
    pub fn nowhere() -> Destination {
        Destination::new(Authority::new(String::new(), 0), None)
    }

    /// The host, without brackets.
    pub fn host(&self) -> &str {
        self.authority.host()
    }

    pub fn port(&self) -> u16 {
        self.authority.port()
    }
}

/// The outcome of a decision, as audit reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Denied,
    /// Denied by rules of an `enforcement: audit` endpoint: logged, then forwarded.
    Audited,
}

/// Which part of sluice decided (`firewall_rule.type`, shorthand `engine:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// The L4 decision: binaries and endpoints.
    L4,
    /// The L7 rules of an inspected endpoint.
    L7,
    /// The SSRF address check.
    Ssrf,
    /// Caller identification failed (fail closed).
    Identity,
    /// The request could not be parsed or its target is refused before policy.
    HttpParser,
    /// A limit (connections, timeouts) or an upstream failure.
    Proxy,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::L4 => "l4",
            Engine::L7 => "l7",
            Engine::Ssrf => "ssrf",
            Engine::Identity => "identity",
            Engine::HttpParser => "http-parser",
            Engine::Proxy => "proxy",
        }
    }
}

/// How the connection reached sluice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// `CONNECT host:port`.
    Connect,
    /// An absolute-form `http://` request.
    Forward,
    /// A connection nftables redirected to the transparent listener (its host from the
    /// original destination, SNI or `Host`, or the policy DNS; see `sluice::transparent`).
    Transparent,
}

/// A connection decision (Network Activity 4001, activity Open).
#[derive(Clone, Debug)]
pub struct ConnectionOpen {
    pub time: SystemTime,
    /// Connection id, shared by the open and close events of one connection.
    pub id: u64,
    pub via: Via,
    /// None when identification failed.
    pub caller: Option<Arc<Caller>>,
    pub src: SocketAddr,
    pub dst: Destination,
    pub outcome: Outcome,
    /// The deciding policy key, when one decided.
    pub policy: Option<String>,
    pub engine: Engine,
    /// Why, for a denial (the text of the 403 body's `reason`/`detail`).
    pub reason: Option<String>,
    /// The HTTP status sluice answered with (200 for an established CONNECT, 403, 502, ...).
    pub status: u16,
}

/// The end of an allowed connection (Network Activity 4001, activity Close).
#[derive(Clone, Debug)]
pub struct ConnectionClose {
    pub time: SystemTime,
    pub id: u64,
    pub via: Via,
    pub caller: Option<Arc<Caller>>,
    pub src: SocketAddr,
    pub dst: Destination,
    pub policy: Option<String>,
    /// `L4` for a relayed tunnel, `L7` for one whose requests were inspected.
    pub engine: Engine,
    /// Bytes received from the client (and sent upstream).
    pub bytes_in: u64,
    /// Bytes sent to the client (received from upstream).
    pub bytes_out: u64,
    pub duration_ms: u64,
    /// Why it ended: `client closed`, `upstream closed`, `idle timeout`, an error.
    pub reason: String,
}

/// One HTTP request judged by sluice (HTTP Activity 4002).
#[derive(Clone, Debug)]
pub struct HttpRequest {
    pub time: SystemTime,
    pub id: u64,
    pub caller: Option<Arc<Caller>>,
    pub src: SocketAddr,
    pub dst: Destination,
    pub method: String,
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The canonical path, without the query.
    pub path: String,
    pub outcome: Outcome,
    pub policy: Option<String>,
    pub engine: Engine,
    /// The deciding rule (`METHOD path`), if a rule decided.
    pub rule: Option<String>,
    pub reason: Option<String>,
    /// Response status sent to the client (sluice's own for a refusal), if any.
    pub status: Option<u16>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration_ms: u64,
    /// Names (never values) of credentials injected into this request.
    pub credentials: Vec<String>,
    /// How the request was signed again (`credential_signing`): `sigv4/s3`.
    pub signed: Option<String>,
}

/// A policy load or a failed load (Device Config State Change 5019).
#[derive(Clone, Debug)]
pub struct PolicyChange {
    pub time: SystemTime,
    /// The files, in order (or the embedded default's name).
    pub sources: Vec<String>,
    /// `Ok((entries, endpoints))`, or the first errors of a failed load.
    pub result: Result<(usize, usize), Vec<String>>,
    /// `sha256:<hex>` of the sources' contents, when loaded.
    pub hash: Option<String>,
    pub warnings: usize,
}

/// sluice itself starting or stopping (Application Lifecycle 6002).
#[derive(Clone, Debug)]
pub struct Lifecycle {
    pub time: SystemTime,
    pub started: bool,
    pub version: &'static str,
    /// E.g. the listen addresses at start, the reason at stop.
    pub message: String,
}

/// A security finding: credential misuse or a smuggling attempt (Detection Finding 2004).
#[derive(Clone, Debug)]
pub struct Finding {
    pub time: SystemTime,
    pub id: u64,
    pub caller: Option<Arc<Caller>>,
    pub src: SocketAddr,
    pub dst: Destination,
    /// The finding type, e.g. `openshell.provider_credential.endpoint_mismatch`.
    pub kind: String,
    /// What in sluice guards against it.
    pub guard: Guard,
    /// One sentence for people.
    pub title: String,
    /// The credential *name* involved, if any (never a value).
    pub credential: Option<String>,
    pub policy: Option<String>,
    pub severity: Severity,
}

/// What in sluice guards against a finding's cause (OCSF `firewall_rule.type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// HTTP's framing (request smuggling).
    Http,
    /// The credential rules.
    Credentials,
    /// The audit trail itself (records lost on their way out).
    Audit,
}

impl Guard {
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::Http => "http",
            Guard::Credentials => "credentials",
            Guard::Audit => "audit",
        }
    }
}

/// The transport of a DNS question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsTransport {
    Udp,
    Tcp,
}

/// The response code the policy DNS answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsRcode {
    NoError,
    FormErr,
    ServFail,
    NxDomain,
    NotImp,
    Refused,
}

/// One question to the policy DNS and its reply (DNS Activity 4003).
#[derive(Clone, Debug)]
pub struct DnsQuery {
    pub time: SystemTime,
    pub src: SocketAddr,
    /// The policy DNS listener that answered.
    pub dst: SocketAddr,
    pub transport: DnsTransport,
    /// The name as asked (without a trailing dot); empty when the message had no question.
    pub name: String,
    /// The record type asked for (`A`, `AAAA`, `MX`, ...).
    pub qtype: String,
    pub rcode: DnsRcode,
    /// The addresses handed out.
    pub answers: Vec<IpAddr>,
    pub ttl: u32,
    /// Allowed (answered, NXDOMAIN included) or Denied (refused).
    pub outcome: Outcome,
    /// The policy entry whose endpoint matched the name, if one did.
    pub policy: Option<String>,
    /// Why, for a refusal or a failure.
    pub reason: Option<String>,
}

/// Every kind of audit event sluice emits.
#[derive(Clone, Debug)]
pub enum Event {
    ConnectionOpen(ConnectionOpen),
    ConnectionClose(ConnectionClose),
    HttpRequest(HttpRequest),
    PolicyChange(PolicyChange),
    Lifecycle(Lifecycle),
    Finding(Finding),
    Dns(DnsQuery),
}
