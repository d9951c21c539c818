//! The OCSF 1.8.0 form of an audit event: one JSON object per event. Pure: no clock, no I/O;
//! the time is the event's own and the host facts come in a [`Context`].
//!
//! | event | class | activity | action / disposition |
//! |---|---|---|---|
//! | [`ConnectionOpen`] | Network Activity 4001 | Open 1 | by outcome (below) |
//! | [`ConnectionClose`] | Network Activity 4001 | Close 2 | none (not a decision) |
//! | [`HttpRequest`] | HTTP Activity 4002 | the method's id (Get 3, Post 6, ...), else Other 99 | by outcome |
//! | [`PolicyChange`] | Device Config State Change 5019 | Log 1 | none |
//! | [`Lifecycle`] | Application Lifecycle 6002 | Start 3 / Stop 4 | none |
//! | [`super::DnsQuery`] | DNS Activity 4003 | Response 2 | by outcome (`ocsf/dns.rs`) |
//!
//! Outcomes: allowed is action Allowed 1 / disposition Allowed 1 (Informational); denied is
//! Denied 2 / Blocked 2 (Medium), like the reference (spec §7.2), including refusals: a refused
//! CONNECT is an *Open* that was blocked, not activity Refuse 5, which OCSF defines as the
//! server refusing ("an attempt to connect to a server port which is not open"). An audited
//! denial (`enforcement: audit`: logged, then forwarded) is action Allowed 1 with disposition
//! Detected 15 ("a policy violation was detected without further action") and severity Low.
//!
//! What this module does not own: deciding (policy), redaction at the source (callers put
//! credential *names* and query-less paths into the model). As a second line of defence every
//! path is cut at its first `?` or `#` here, so a query string never reaches the audit.

use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;
#[cfg(test)]
use serde_json::json;

use super::{
    Authority, ConnectionClose, ConnectionOpen, Event, Finding, HttpRequest, Lifecycle, Outcome,
    PolicyChange, Severity, Via,
};
#[cfg(test)]
use super::{Engine, Process};

/// The OCSF schema version of every event (`metadata.version`).
const OCSF_VERSION: &str = "1.8.0";

/// `metadata.product.name`, `vendor_name` and `app.name`.
pub(super) const PRODUCT_NAME: &str = "sluice";

/// `metadata.product.version`: the crate's version.
const PRODUCT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// How many ancestors are nested as `parent_process`. JSON consumers limit nesting depth
/// (serde_json's parser stops at 128 levels); a real process chain is far shorter.
const MAX_PARENT_DEPTH: usize = 32;

/// Bytes of command line all of a caller's ancestors carry together in one record (each
/// line is already at most `cmdline::MAX_LINE`); the nearest keep theirs whole, farther ones
/// are cut, saying how much.
const MAX_ANCESTOR_CMDLINES: usize = 6 * 1024;

/// Facts about the sluice instance that every event carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Context {
    /// This sluice process's id, unique per start: the prefix of `metadata.uid` and of the
    /// connection correlation ids.
    pub instance: String,
    /// The host sluice runs on (`device.hostname`).
    pub hostname: String,
}

/// The OCSF JSON object of `event`, as a tree (for tests and tools that inspect it; the
/// audit sink writes [`write_json`]'s bytes instead).
pub fn to_json(event: &Event, ctx: &Context) -> Value {
    with_record(event, ctx, |r| serde_json::to_value(r)).unwrap_or(Value::Null)
}

/// Appends the OCSF JSON object of `event` to `out`, compact, on one line (no newline).
pub fn write_json(event: &Event, ctx: &Context, out: &mut Vec<u8>) {
    // Serializing these structs into a Vec cannot fail: every key is a string and no
    // Serialize impl here returns an error.
    let _ = with_record(event, ctx, |r| serde_json::to_writer(&mut *out, r));
}

fn with_record<T>(event: &Event, ctx: &Context, f: impl FnOnce(&Record<'_>) -> T) -> T {
    let record = match event {
        Event::ConnectionOpen(e) => connection_open(e, ctx),
        Event::ConnectionClose(e) => connection_close(e, ctx),
        Event::HttpRequest(e) => http_request(e, ctx),
        Event::PolicyChange(e) => policy_change(e, ctx),
        Event::Lifecycle(e) => lifecycle(e, ctx),
        Event::Finding(e) => finding(e, ctx),
        Event::Dns(e) => dns::dns_query(e, ctx),
    };
    f(&record)
}

/// The severity of `event` (`severity_id`; the shorthand's `[INFO]`, `[MED]`, ...).
pub(super) fn severity(event: &Event) -> Severity {
    match event {
        Event::ConnectionOpen(e) => outcome_severity(e.outcome),
        Event::HttpRequest(e) => outcome_severity(e.outcome),
        Event::ConnectionClose(_) | Event::Lifecycle(_) => Severity::Informational,
        Event::PolicyChange(e) => policy_severity(e),
        Event::Finding(e) => e.severity,
        Event::Dns(e) => outcome_severity(e.outcome),
    }
}

fn policy_severity(e: &PolicyChange) -> Severity {
    match e.result {
        Ok(_) => Severity::Informational,
        Err(_) => Severity::High,
    }
}

/// The human sentence of `event` (`message`).
pub fn message(event: &Event) -> String {
    match event {
        Event::ConnectionOpen(e) => open_message(e),
        Event::ConnectionClose(e) => close_message(e),
        Event::HttpRequest(e) => request_message(e),
        Event::PolicyChange(e) => policy_message(e),
        Event::Lifecycle(e) => lifecycle_message(e),
        Event::Finding(e) => e.title.clone(),
        Event::Dns(e) => dns::message(e),
    }
}

fn open_message(e: &ConnectionOpen) -> String {
    format!(
        "{} {} {}",
        via_label(e.via),
        outcome_verb(e.outcome),
        e.dst.authority
    )
}

fn close_message(e: &ConnectionClose) -> String {
    let mut m = format!("{} closed {}", via_label(e.via), e.dst.authority);
    if !e.reason.is_empty() {
        m.push_str(": ");
        m.push_str(&e.reason);
    }
    m
}

fn request_message(e: &HttpRequest) -> String {
    Message::Request(e).to_string()
}

pub(super) fn policy_message(e: &PolicyChange) -> String {
    match &e.result {
        Ok((entries, endpoints)) => format!(
            "policy loaded from {} ({entries} {}, {endpoints} {})",
            e.sources.join(", "),
            plural(*entries, "entry", "entries"),
            plural(*endpoints, "endpoint", "endpoints"),
        ),
        Err(errors) => format!(
            "policy load failed: {}",
            errors.first().map_or("unknown error", String::as_str)
        ),
    }
}

fn lifecycle_message(e: &Lifecycle) -> String {
    let verb = if e.started { "started" } else { "stopped" };
    let mut m = format!("{PRODUCT_NAME} {} {verb}", e.version);
    if !e.message.is_empty() {
        m.push_str(": ");
        m.push_str(&e.message);
    }
    m
}

/// Milliseconds since the Unix epoch (0 for a time before it).
pub fn epoch_millis(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `path` without its query or fragment.
pub(super) fn strip_query(path: &str) -> &str {
    path.find(['?', '#']).map_or(path, |i| &path[..i])
}

/// `scheme://host[:port]path`, the port left out when it is the scheme's default.
pub(super) fn url_string(scheme: &str, authority: &Authority, path: &str) -> String {
    UrlString {
        scheme,
        authority,
        path,
    }
    .to_string()
}

// === The classes ===

/// The identity of an OCSF class: its uid, caption and category.
struct Class {
    uid: u32,
    name: &'static str,
    category_uid: u32,
    category_name: &'static str,
}

const NETWORK_ACTIVITY: Class = Class {
    uid: 4001,
    name: "Network Activity",
    category_uid: 4,
    category_name: "Network Activity",
};

const HTTP_ACTIVITY: Class = Class {
    uid: 4002,
    name: "HTTP Activity",
    category_uid: 4,
    category_name: "Network Activity",
};

const DEVICE_CONFIG_STATE_CHANGE: Class = Class {
    uid: 5019,
    name: "Device Config State Change",
    category_uid: 5,
    category_name: "Discovery",
};

const DETECTION_FINDING: Class = Class {
    uid: 2004,
    name: "Detection Finding",
    category_uid: 2,
    category_name: "Findings",
};

const APPLICATION_LIFECYCLE: Class = Class {
    uid: 6002,
    name: "Application Lifecycle",
    category_uid: 6,
    category_name: "Application Activity",
};

/// An activity: its id, its schema caption, and the `activity_name` to print (the caption,
/// except for Other 99, where OCSF wants the source's own label).
struct Activity<'a> {
    id: u32,
    caption: &'static str,
    name: &'a str,
}

impl Activity<'static> {
    const fn known(id: u32, caption: &'static str) -> Self {
        Activity {
            id,
            caption,
            name: caption,
        }
    }
}

/// Profiles whose attributes an event uses (`metadata.profiles`): `host` for `device` and
/// `actor`, `security_control` for `action*`, `disposition*` and `firewall_rule`.
const HOST: &str = "host";
const SECURITY_CONTROL: &str = "security_control";

/// One OCSF event as serde writes it: every attribute any class uses, in the order they are
/// written; the attributes a class does not have stay `None` and are left out. Serialized
/// straight to bytes, with no intermediate JSON tree.
#[derive(Serialize)]
struct Record<'a> {
    class_uid: u32,
    class_name: &'static str,
    category_uid: u32,
    category_name: &'static str,
    activity_id: u32,
    activity_name: &'a str,
    type_uid: u64,
    type_name: Shown<TypeName>,
    time: i64,
    severity_id: u32,
    severity: &'static str,
    status_id: u32,
    status: &'static str,
    message: Shown<Message<'a>>,
    device: Device<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_code: Option<Shown<u16>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    http_response: Option<HttpResponse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_detail: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finding_info: Option<FindingInfo<'a>>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    decision: Option<Decision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    firewall_rule: Option<FirewallRule<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    http_request: Option<HttpRequestObject<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traffic: Option<Traffic>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    app: Option<App>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    network: Option<Network<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unmapped: Option<Unmapped<'a>>,
    /// Attributes of the rare classes without their own structs (DNS Activity's `query`,
    /// `answers`, `rcode`, endpoints); never on the request path.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    extra: Option<serde_json::Map<String, Value>>,
    metadata: Metadata<'a>,
}

/// The facts every class shares that the builders compute.
struct Common<'a> {
    time: SystemTime,
    severity: Severity,
    success: bool,
    message: Message<'a>,
}

/// The common attributes (classification, time, severity, status, message, device) and
/// `metadata`; everything else left out for the class builder to fill.
fn header<'a>(
    class: &Class,
    activity: &Activity<'a>,
    common: Common<'a>,
    ctx: &'a Context,
    metadata: Metadata<'a>,
) -> Record<'a> {
    let Common {
        time,
        severity,
        success,
        message,
    } = common;
    let (status_id, status) = if success {
        (1, "Success")
    } else {
        (2, "Failure")
    };
    Record {
        class_uid: class.uid,
        class_name: class.name,
        category_uid: class.category_uid,
        category_name: class.category_name,
        activity_id: activity.id,
        activity_name: activity.name,
        type_uid: u64::from(class.uid) * 100 + u64::from(activity.id),
        type_name: Shown(TypeName {
            class: class.name,
            caption: activity.caption,
        }),
        time: long(epoch_millis(time)),
        severity_id: severity_id(severity),
        severity: severity_caption(severity),
        status_id,
        status,
        message: Shown(message),
        device: device(ctx),
        status_code: None,
        http_response: None,
        state_id: None,
        state: None,
        status_detail: None,
        finding_info: None,
        decision: None,
        firewall_rule: None,
        http_request: None,
        traffic: None,
        duration: None,
        app: None,
        network: None,
        unmapped: None,
        extra: None,
        metadata,
    }
}

fn connection_open<'a>(e: &'a ConnectionOpen, ctx: &'a Context) -> Record<'a> {
    let common = Common {
        time: e.time,
        severity: outcome_severity(e.outcome),
        success: e.outcome != Outcome::Denied,
        message: Message::Text(open_message(e)),
    };
    let metadata = metadata(
        ctx,
        Uid::Text(format!("{}:{}:open", ctx.instance, e.id)),
        Some(e.id),
        &[HOST, SECURITY_CONTROL],
    );
    let mut r = header(
        &NETWORK_ACTIVITY,
        &Activity::known(1, "Open"),
        common,
        ctx,
        metadata,
    );
    r.status_code = Some(Shown(e.status));
    r.status_detail = e.reason.as_deref();
    r.decision = Some(decision(e.outcome));
    r.firewall_rule = Some(firewall_rule(e.policy.as_deref(), e.engine, None));
    r.network = Some(network(ctx, e.id, e.caller.as_deref(), e.src, &e.dst));
    r
}

fn connection_close<'a>(e: &'a ConnectionClose, ctx: &'a Context) -> Record<'a> {
    let common = Common {
        time: e.time,
        severity: Severity::Informational,
        success: true,
        message: Message::Text(close_message(e)),
    };
    let metadata = metadata(
        ctx,
        Uid::Text(format!("{}:{}:close", ctx.instance, e.id)),
        Some(e.id),
        &[HOST, SECURITY_CONTROL],
    );
    let mut r = header(
        &NETWORK_ACTIVITY,
        &Activity::known(2, "Close"),
        common,
        ctx,
        metadata,
    );
    r.status_detail = (!e.reason.is_empty()).then_some(e.reason.as_str());
    r.firewall_rule = Some(firewall_rule(e.policy.as_deref(), e.engine, None));
    r.traffic = Some(traffic(e.bytes_in, e.bytes_out));
    r.duration = Some(long(e.duration_ms));
    r.network = Some(network(ctx, e.id, e.caller.as_deref(), e.src, &e.dst));
    r
}

fn http_request<'a>(e: &'a HttpRequest, ctx: &'a Context) -> Record<'a> {
    let standard = standard_method(&e.method);
    let activity = match standard {
        Some((id, caption)) => Activity::known(id, caption),
        None => Activity {
            id: 99,
            caption: "Other",
            name: &e.method,
        },
    };
    let common = Common {
        time: e.time,
        severity: outcome_severity(e.outcome),
        success: e.outcome != Outcome::Denied,
        message: Message::Request(e),
    };
    // Requests on one keep-alive connection share its id; the time in nanoseconds tells them
    // apart in `metadata.uid` (they are sequential, so their decision times differ).
    let metadata = metadata(
        ctx,
        Uid::Request {
            instance: &ctx.instance,
            id: e.id,
            nanos: epoch_nanos(e.time),
        },
        Some(e.id),
        &[HOST, SECURITY_CONTROL],
    );
    let mut r = header(&HTTP_ACTIVITY, &activity, common, ctx, metadata);
    if let Some(status) = e.status {
        r.status_code = Some(Shown(status));
        r.http_response = Some(HttpResponse { code: status });
    }
    r.status_detail = e.reason.as_deref();
    r.decision = Some(decision(e.outcome));
    r.firewall_rule = Some(firewall_rule(
        e.policy.as_deref(),
        e.engine,
        e.rule.as_deref(),
    ));
    let path = strip_query(&e.path);
    r.http_request = Some(HttpRequestObject {
        http_method: standard.map(|_| e.method.as_str()),
        url: Url {
            scheme: e.scheme,
            hostname: e.dst.host(),
            port: e.dst.port(),
            path,
            url_string: Shown(UrlString {
                scheme: e.scheme,
                authority: &e.dst.authority,
                path,
            }),
        },
    });
    r.traffic = Some(traffic(e.bytes_in, e.bytes_out));
    r.duration = Some(long(e.duration_ms));
    r.network = Some(network(ctx, e.id, e.caller.as_deref(), e.src, &e.dst));
    // `http_request.http_method` is an enum in 1.8.0; a method outside it (PROPFIND, ...) is
    // kept here rather than written where strict validators reject it.
    let unmapped = Unmapped {
        http_method: standard.is_none().then_some(e.method.as_str()),
        credentials_injected: (!e.credentials.is_empty()).then_some(e.credentials.as_slice()),
        credentials_signed: e.signed.as_deref(),
        ..Unmapped::default()
    };
    if unmapped.http_method.is_some()
        || unmapped.credentials_injected.is_some()
        || unmapped.credentials_signed.is_some()
    {
        r.unmapped = Some(unmapped);
    }
    r
}

fn policy_change<'a>(e: &'a PolicyChange, ctx: &'a Context) -> Record<'a> {
    let common = Common {
        time: e.time,
        severity: policy_severity(e),
        success: e.result.is_ok(),
        message: Message::Text(policy_message(e)),
    };
    let metadata = metadata(
        ctx,
        Uid::Text(format!("{}:policy:{}", ctx.instance, epoch_millis(e.time))),
        None,
        &[HOST],
    );
    let mut r = header(
        &DEVICE_CONFIG_STATE_CHANGE,
        &Activity::known(1, "Log"),
        common,
        ctx,
        metadata,
    );
    let mut unmapped = Unmapped {
        policy_sources: Some(&e.sources),
        policy_hash: e.hash.as_deref(),
        policy_warnings: Some(e.warnings),
        ..Unmapped::default()
    };
    match &e.result {
        Ok((entries, endpoints)) => {
            // The loaded policy is now the one enforced.
            r.state_id = Some(2);
            r.state = Some("Enabled");
            unmapped.policy_entries = Some(*entries);
            unmapped.policy_endpoints = Some(*endpoints);
        }
        Err(errors) => {
            r.status_detail = errors.first().map(String::as_str);
            unmapped.policy_errors = Some(errors);
        }
    }
    r.unmapped = Some(unmapped);
    r
}

fn finding<'a>(e: &'a Finding, ctx: &'a Context) -> Record<'a> {
    let common = Common {
        time: e.time,
        severity: e.severity,
        success: false,
        message: Message::Text(e.title.clone()),
    };
    let uid = format!("{}:{}:finding:{}", ctx.instance, e.id, epoch_nanos(e.time));
    let metadata = metadata(
        ctx,
        Uid::Text(uid.clone()),
        Some(e.id),
        &[HOST, SECURITY_CONTROL],
    );
    let mut r = header(
        &DETECTION_FINDING,
        &Activity::known(1, "Create"),
        common,
        ctx,
        metadata,
    );
    // A finding's status is its triage state, not success or failure.
    r.status_id = 1;
    r.status = "New";
    r.finding_info = Some(FindingInfo {
        uid,
        title: &e.title,
        types: [&e.kind],
    });
    r.decision = Some(decision(Outcome::Denied));
    r.firewall_rule = Some(FirewallRule {
        name: e.policy.as_deref().unwrap_or("-"),
        kind: e.guard.as_str(),
        desc: None,
    });
    r.unmapped = Some(Unmapped {
        finding_type: Some(&e.kind),
        destination: Some(e.dst.authority.to_string()),
        credential: e.credential.as_deref(),
        binary: e.caller.as_ref().map(|c| c.process.exe.as_str()),
        pid: e.caller.as_ref().map(|c| c.process.pid),
        ..Unmapped::default()
    });
    r
}

fn lifecycle<'a>(e: &'a Lifecycle, ctx: &'a Context) -> Record<'a> {
    let (activity, kind) = if e.started {
        (Activity::known(3, "Start"), "start")
    } else {
        (Activity::known(4, "Stop"), "stop")
    };
    let common = Common {
        time: e.time,
        severity: Severity::Informational,
        success: true,
        message: Message::Text(lifecycle_message(e)),
    };
    let metadata = metadata(
        ctx,
        Uid::Text(format!("{}:{kind}", ctx.instance)),
        None,
        &[HOST],
    );
    let mut r = header(&APPLICATION_LIFECYCLE, &activity, common, ctx, metadata);
    r.app = Some(App {
        name: PRODUCT_NAME,
        vendor_name: PRODUCT_NAME,
        version: e.version,
    });
    r
}

// === Enumerations ===

/// HTTP Activity's activity for a method named in the 1.8.0 enum (methods are
/// case-sensitive: `get` is not `GET`).
fn standard_method(method: &str) -> Option<(u32, &'static str)> {
    Some(match method {
        "CONNECT" => (1, "Connect"),
        "DELETE" => (2, "Delete"),
        "GET" => (3, "Get"),
        "HEAD" => (4, "Head"),
        "OPTIONS" => (5, "Options"),
        "POST" => (6, "Post"),
        "PUT" => (7, "Put"),
        "TRACE" => (8, "Trace"),
        "PATCH" => (9, "Patch"),
        _ => return None,
    })
}

fn outcome_severity(outcome: Outcome) -> Severity {
    match outcome {
        Outcome::Allowed => Severity::Informational,
        Outcome::Audited => Severity::Low,
        Outcome::Denied => Severity::Medium,
    }
}

fn severity_id(severity: Severity) -> u32 {
    match severity {
        Severity::Informational => 1,
        Severity::Low => 2,
        Severity::Medium => 3,
        Severity::High => 4,
        Severity::Critical => 5,
    }
}

fn severity_caption(severity: Severity) -> &'static str {
    match severity {
        Severity::Informational => "Informational",
        Severity::Low => "Low",
        Severity::Medium => "Medium",
        Severity::High => "High",
        Severity::Critical => "Critical",
    }
}

fn via_label(via: Via) -> &'static str {
    match via {
        Via::Connect => "CONNECT",
        Via::Forward => "FORWARD",
        Via::Transparent => "TRANSPARENT",
    }
}

fn outcome_verb(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allowed => "allowed",
        Outcome::Denied => "denied",
        Outcome::Audited => "audited",
    }
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

mod dns;
pub use dns::{rcode_from_id as dns_rcode_from_id, rcode_label as dns_rcode_label};
mod objects;
pub use objects::CallerJson;
use objects::*;
mod text;
use text::{Message, Shown, TypeName, Uid, UrlString};

/// Events for the unit tests of `ocsf`, `shorthand`, `sink` and, through the feature
/// `samples`, of `sluice`'s `metrics`.
#[cfg(any(test, feature = "samples"))]
pub mod samples;
#[cfg(test)]
mod tests;
