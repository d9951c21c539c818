//! The objects of an OCSF event (metadata, device, endpoints, process chain, rule, traffic,
//! decision), as typed structs serde writes directly. Built by the class builders in `ocsf`.

use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;
use std::time::SystemTime;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::value::RawValue;

use super::super::{Caller, Destination, Engine, Outcome, Process};
use super::text::{ConnectionUid, Shown, Uid, UrlString};
use super::{
    Context, MAX_ANCESTOR_CMDLINES, MAX_PARENT_DEPTH, OCSF_VERSION, PRODUCT_NAME, PRODUCT_VERSION,
};

#[derive(Serialize)]
pub(super) struct HttpResponse {
    pub(super) code: u16,
}

#[derive(Serialize)]
pub(super) struct FindingInfo<'a> {
    pub(super) uid: String,
    pub(super) title: &'a str,
    pub(super) types: [&'a str; 1],
}

#[derive(Serialize)]
pub(super) struct App {
    pub(super) name: &'static str,
    pub(super) vendor_name: &'static str,
    pub(super) version: &'static str,
}

#[derive(Serialize)]
pub(super) struct HttpRequestObject<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) http_method: Option<&'a str>,
    pub(super) url: Url<'a>,
}

#[derive(Serialize)]
pub(super) struct Url<'a> {
    pub(super) scheme: &'a str,
    pub(super) hostname: &'a str,
    pub(super) port: u16,
    pub(super) path: &'a str,
    pub(super) url_string: Shown<UrlString<'a>>,
}

/// What `unmapped` may hold; each class fills its own few.
#[derive(Serialize, Default)]
pub(super) struct Unmapped<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) http_method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) credentials_injected: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) credentials_signed: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) policy_sources: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) policy_entries: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) policy_endpoints: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) policy_errors: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) policy_hash: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) policy_warnings: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) finding_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) destination: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) credential: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) binary: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) pid: Option<u32>,
}

#[derive(Serialize)]
pub(super) struct Metadata<'a> {
    pub(super) version: &'static str,
    pub(super) product: Product,
    pub(super) uid: Shown<Uid<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) correlation_uid: Option<Shown<ConnectionUid<'a>>>,
    pub(super) profiles: &'a [&'a str],
}

#[derive(Serialize)]
pub(super) struct Product {
    pub(super) name: &'static str,
    pub(super) vendor_name: &'static str,
    pub(super) version: &'static str,
}

pub(super) fn metadata<'a>(
    ctx: &'a Context,
    uid: Uid<'a>,
    connection: Option<u64>,
    profiles: &'a [&'a str],
) -> Metadata<'a> {
    Metadata {
        version: OCSF_VERSION,
        product: Product {
            name: PRODUCT_NAME,
            vendor_name: PRODUCT_NAME,
            version: PRODUCT_VERSION,
        },
        uid: Shown(uid),
        correlation_uid: connection.map(|id| connection_uid(ctx, id)),
        profiles,
    }
}

/// The id shared by every event of one connection (open, requests, close).
pub(super) fn connection_uid(ctx: &Context, id: u64) -> Shown<ConnectionUid<'_>> {
    Shown(ConnectionUid {
        instance: &ctx.instance,
        id,
    })
}

#[derive(Serialize)]
pub(super) struct Device<'a> {
    pub(super) hostname: &'a str,
    pub(super) type_id: u32,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
}

/// The host sluice runs on. `type_id` is required; sluice cannot tell a server from a laptop,
/// so it says Unknown rather than guess.
pub(super) fn device(ctx: &Context) -> Device<'_> {
    let hostname = if ctx.hostname.is_empty() {
        "localhost"
    } else {
        &ctx.hostname
    };
    Device {
        hostname,
        type_id: 0,
        kind: "Unknown",
    }
}

/// `actor`, endpoints and `connection_info`, shared by 4001 and 4002.
#[derive(Serialize)]
pub(super) struct Network<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) actor: Option<&'a RawValue>,
    pub(super) src_endpoint: SrcEndpoint,
    pub(super) dst_endpoint: DstEndpoint<'a>,
    pub(super) connection_info: ConnectionInfo<'a>,
}

/// `actor`: the calling process (and its ancestors), or a gateway tenant as `user`.
#[derive(Serialize)]
struct Actor<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    process: Option<ProcessObject<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<TenantUser<'a>>,
}

/// OCSF `user` for a gateway tenant: its name, type Other ("Tenant").
#[derive(Serialize)]
struct TenantUser<'a> {
    name: &'a str,
    type_id: u8,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
pub(super) struct SrcEndpoint {
    pub(super) ip: IpAddr,
    pub(super) port: u16,
}

/// network_connection_info (not in the schema copy; shape from the OCSF documentation):
/// direction_id is required there; 2 is Outbound.
#[derive(Serialize)]
pub(super) struct ConnectionInfo<'a> {
    pub(super) uid: Shown<ConnectionUid<'a>>,
    pub(super) protocol_name: &'static str,
    pub(super) protocol_num: u32,
    pub(super) direction_id: u32,
    pub(super) direction: &'static str,
}

pub(super) fn network<'a>(
    ctx: &'a Context,
    id: u64,
    caller: Option<&'a Caller>,
    src: SocketAddr,
    dst: &'a Destination,
) -> Network<'a> {
    Network {
        actor: caller.and_then(|c| c.json.get_or_write(c)),
        src_endpoint: SrcEndpoint {
            ip: src.ip(),
            port: src.port(),
        },
        dst_endpoint: dst_endpoint(dst),
        connection_info: ConnectionInfo {
            uid: connection_uid(ctx, id),
            protocol_name: "tcp",
            protocol_num: 6,
            direction_id: 2,
            direction: "Outbound",
        },
    }
}

#[derive(Serialize)]
pub(super) struct DstEndpoint<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) hostname: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ip: Option<IpAddr>,
    pub(super) port: u16,
}

/// The destination as asked for: a name in `hostname` (and the dialled address in `ip`), or
/// an address literal in `ip`.
pub(super) fn dst_endpoint(dst: &Destination) -> DstEndpoint<'_> {
    let (hostname, ip) = match dst.authority.ip() {
        Some(ip) => (None, Some(ip)),
        None => (Some(dst.host()), dst.ip),
    };
    DstEndpoint {
        hostname,
        ip,
        port: dst.port(),
    }
}

/// The OCSF JSON of a caller (`actor`: `process`, the process and, nested as
/// `parent_process`, its ancestors; or a gateway tenant's `user`), written at the first
/// event that carries the caller and reused by every later one: a caller's command lines
/// (often kilobytes) are escaped once, not per event.
/// It holds exactly what writing the caller then would produce; the caller is read-only
/// once an event carries it (see [`Caller`]).
#[derive(Default)]
pub struct CallerJson(OnceLock<Option<Box<RawValue>>>);

impl CallerJson {
    /// The caller's JSON, written now if this is its first use. `None` only if writing it
    /// failed (it cannot: every key is a string, no Serialize impl here errs); the actor is
    /// then left out rather than the event lost.
    fn get_or_write(&self, caller: &Caller) -> Option<&RawValue> {
        self.0.get_or_init(|| write_caller(caller)).as_deref()
    }
}

/// `caller`'s `actor` object, compact, as serde_json writes it.
fn write_caller(caller: &Caller) -> Option<Box<RawValue>> {
    let actor = match &caller.tenant {
        Some(name) => Actor {
            process: None,
            user: Some(TenantUser {
                name,
                type_id: 99,
                kind: "Tenant",
            }),
        },
        None => Actor {
            process: Some(ProcessObject::caller(&caller.process, &caller.ancestors)),
            user: None,
        },
    };
    let json = serde_json::to_string(&actor).ok()?;
    RawValue::from_string(json).ok()
}

impl Clone for CallerJson {
    /// A clone starts empty: the copy may be changed before it is written.
    fn clone(&self) -> Self {
        CallerJson::default()
    }
}

impl PartialEq for CallerJson {
    /// Derived data: callers compare by what they are.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for CallerJson {}

impl std::fmt::Debug for CallerJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallerJson")
    }
}

/// A process and, nested as `parent_process`, its ancestors (nearest first).
pub(super) struct ProcessObject<'a> {
    p: &'a Process,
    ancestors: &'a [Process],
    depth: usize,
    /// Bytes of command line the ancestors still to be written may carry together.
    left: usize,
}

impl<'a> ProcessObject<'a> {
    /// The caller `p` with its ancestors (nearest first).
    pub(super) fn caller(p: &'a Process, ancestors: &'a [Process]) -> Self {
        ProcessObject {
            p,
            ancestors,
            depth: 0,
            left: MAX_ANCESTOR_CMDLINES,
        }
    }
}

impl Serialize for ProcessObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.p;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("pid", &p.pid)?;
        if !p.exe.is_empty() {
            m.serialize_entry("name", basename(&p.exe))?;
            m.serialize_entry("path", &p.exe)?;
        }
        // OCSF: "If the command line is unavailable or missing, the empty string is to be
        // used."
        let mut left = self.left;
        if self.depth == 0 {
            m.serialize_entry("cmd_line", &CmdLine(&p.cmdline))?;
        } else {
            // An ancestor's line is cut to what the chain has left: a deep chain of long
            // command lines cannot make every event of the caller tens of kilobytes.
            let line = crate::cmdline::cut(Joined(&p.cmdline).to_string(), left);
            left = left.saturating_sub(line.len());
            m.serialize_entry("cmd_line", &line)?;
        }
        if let Some(uid) = p.uid {
            // `process.uid` is a producer-assigned process id; the account is `user.uid`.
            m.serialize_entry("user", &User { uid })?;
        }
        if let Some((parent, rest)) = self.ancestors.split_first()
            && self.depth < MAX_PARENT_DEPTH
        {
            let parent = ProcessObject {
                p: parent,
                ancestors: rest,
                depth: self.depth + 1,
                left,
            };
            m.serialize_entry("parent_process", &parent)?;
        }
        m.end()
    }
}

/// The arguments joined by spaces, as one JSON string, without building it first.
pub(super) struct CmdLine<'a>(&'a [String]);

impl Serialize for CmdLine<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}", Joined(self.0)))
    }
}

pub(super) struct Joined<'a>(&'a [String]);

impl std::fmt::Display for Joined<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(a)?;
        }
        Ok(())
    }
}

/// `user.uid`: the account id, as a string.
pub(super) struct User {
    pub(super) uid: u32,
}

impl Serialize for User {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry("uid", &self.uid.to_string())?;
        m.end()
    }
}

pub(super) fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[derive(Serialize)]
pub(super) struct FirewallRule<'a> {
    pub(super) name: &'a str,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) desc: Option<&'a str>,
}

pub(super) fn firewall_rule<'a>(
    policy: Option<&'a str>,
    engine: Engine,
    rule: Option<&'a str>,
) -> FirewallRule<'a> {
    FirewallRule {
        name: policy.unwrap_or("-"),
        kind: engine.as_str(),
        desc: rule,
    }
}

#[derive(Serialize)]
pub(super) struct Traffic {
    pub(super) bytes_in: i64,
    pub(super) bytes_out: i64,
    pub(super) bytes: i64,
}

/// OCSF counts bytes from the source's side: `bytes_out` went from the source (the client) to
/// the destination, `bytes_in` came back. The model counts from sluice's side of the client
/// socket (`bytes_in` = received from the client), so the names swap here.
pub(super) fn traffic(from_client: u64, to_client: u64) -> Traffic {
    Traffic {
        bytes_in: long(to_client),
        bytes_out: long(from_client),
        bytes: long(from_client.saturating_add(to_client)),
    }
}

/// A count as an OCSF `long_t` (signed 64 bits), saturated.
pub(super) fn long(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Nanoseconds since the Unix epoch (0 for a time before it).
pub(super) fn epoch_nanos(time: SystemTime) -> u128 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[derive(Serialize)]
pub(super) struct Decision {
    pub(super) action_id: u32,
    pub(super) action: &'static str,
    pub(super) disposition_id: u32,
    pub(super) disposition: &'static str,
}

pub(super) fn decision(outcome: Outcome) -> Decision {
    let (action_id, action, disposition_id, disposition) = match outcome {
        Outcome::Allowed => (1, "Allowed", 1, "Allowed"),
        Outcome::Denied => (2, "Denied", 2, "Blocked"),
        Outcome::Audited => (1, "Allowed", 15, "Detected"),
    };
    Decision {
        action_id,
        action,
        disposition_id,
        disposition,
    }
}
