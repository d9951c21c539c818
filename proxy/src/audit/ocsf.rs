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

use std::net::{IpAddr, SocketAddr};
use std::time::SystemTime;

use serde_json::{Map, Value, json};

use super::{
    Caller, ConnectionClose, ConnectionOpen, Destination, Engine, Event, Finding, HttpRequest,
    Lifecycle, Outcome, PolicyChange, Process, Severity, Via,
};

/// The OCSF schema version of every event (`metadata.version`).
const OCSF_VERSION: &str = "1.8.0";

/// `metadata.product.name`, `vendor_name` and `app.name`.
pub(super) const PRODUCT_NAME: &str = "sluice";

/// `metadata.product.version`: the crate's version.
const PRODUCT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// How many ancestors are nested as `parent_process`. JSON consumers limit nesting depth
/// (serde_json's parser stops at 128 levels); a real process chain is far shorter.
const MAX_PARENT_DEPTH: usize = 32;

/// Facts about the sluice instance that every event carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Context {
    /// This sluice process's id, unique per start: the prefix of `metadata.uid` and of the
    /// connection correlation ids.
    pub instance: String,
    /// The host sluice runs on (`device.hostname`).
    pub hostname: String,
}

/// The OCSF JSON object of `event`.
pub fn to_json(event: &Event, ctx: &Context) -> Value {
    let object = match event {
        Event::ConnectionOpen(e) => connection_open(e, ctx),
        Event::ConnectionClose(e) => connection_close(e, ctx),
        Event::HttpRequest(e) => http_request(e, ctx),
        Event::PolicyChange(e) => policy_change(e, ctx),
        Event::Lifecycle(e) => lifecycle(e, ctx),
        Event::Finding(e) => finding(e, ctx),
        Event::Dns(e) => dns::dns_query(e, ctx),
    };
    Value::Object(object)
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
        authority(&e.dst.host, e.dst.port)
    )
}

fn close_message(e: &ConnectionClose) -> String {
    let mut m = format!(
        "{} closed {}",
        via_label(e.via),
        authority(&e.dst.host, e.dst.port)
    );
    if !e.reason.is_empty() {
        m.push_str(": ");
        m.push_str(&e.reason);
    }
    m
}

fn request_message(e: &HttpRequest) -> String {
    format!(
        "HTTP {} {} {}{}",
        outcome_verb(e.outcome),
        e.method,
        authority(&e.dst.host, e.dst.port),
        strip_query(&e.path)
    )
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

/// `host:port`, with an IPv6 literal in brackets.
pub(super) fn authority(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `path` without its query or fragment.
pub(super) fn strip_query(path: &str) -> &str {
    path.find(['?', '#']).map_or(path, |i| &path[..i])
}

/// `scheme://host[:port]path`, the port left out when it is the scheme's default.
pub(super) fn url_string(scheme: &str, host: &str, port: u16, path: &str) -> String {
    let default_port = matches!((scheme, port), ("http", 80) | ("https", 443));
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    let path = strip_query(path);
    if default_port {
        format!("{scheme}://{host}{path}")
    } else {
        format!("{scheme}://{host}:{port}{path}")
    }
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

/// The common attributes: classification, time, severity, status, message, metadata, device.
/// The facts every class shares that the builders compute.
struct Common {
    time: SystemTime,
    severity: Severity,
    success: bool,
    message: String,
}

fn header(
    class: &Class,
    activity: &Activity<'_>,
    common: Common,
    ctx: &Context,
) -> Map<String, Value> {
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
    let mut m = Map::new();
    m.insert("class_uid".into(), json!(class.uid));
    m.insert("class_name".into(), json!(class.name));
    m.insert("category_uid".into(), json!(class.category_uid));
    m.insert("category_name".into(), json!(class.category_name));
    m.insert("activity_id".into(), json!(activity.id));
    m.insert("activity_name".into(), json!(activity.name));
    m.insert(
        "type_uid".into(),
        json!(u64::from(class.uid) * 100 + u64::from(activity.id)),
    );
    m.insert(
        "type_name".into(),
        json!(format!("{}: {}", class.name, activity.caption)),
    );
    m.insert("time".into(), json!(long(epoch_millis(time))));
    m.insert("severity_id".into(), json!(severity_id(severity)));
    m.insert("severity".into(), json!(severity_caption(severity)));
    m.insert("status_id".into(), json!(status_id));
    m.insert("status".into(), json!(status));
    m.insert("message".into(), json!(message));
    m.insert("device".into(), device(ctx));
    m
}

fn connection_open(e: &ConnectionOpen, ctx: &Context) -> Map<String, Value> {
    let common = Common {
        time: e.time,
        severity: outcome_severity(e.outcome),
        success: e.outcome != Outcome::Denied,
        message: open_message(e),
    };
    let mut m = header(&NETWORK_ACTIVITY, &Activity::known(1, "Open"), common, ctx);
    m.insert("status_code".into(), json!(e.status.to_string()));
    if let Some(reason) = &e.reason {
        m.insert("status_detail".into(), json!(reason));
    }
    insert_decision(&mut m, e.outcome);
    m.insert(
        "firewall_rule".into(),
        firewall_rule(e.policy.as_deref(), e.engine, None),
    );
    insert_network(&mut m, ctx, e.id, e.caller.as_deref(), e.src, &e.dst);
    m.insert(
        "metadata".into(),
        metadata(
            ctx,
            format!("{}:{}:open", ctx.instance, e.id),
            Some(e.id),
            &[HOST, SECURITY_CONTROL],
        ),
    );
    m
}

fn connection_close(e: &ConnectionClose, ctx: &Context) -> Map<String, Value> {
    let common = Common {
        time: e.time,
        severity: Severity::Informational,
        success: true,
        message: close_message(e),
    };
    let mut m = header(&NETWORK_ACTIVITY, &Activity::known(2, "Close"), common, ctx);
    if !e.reason.is_empty() {
        m.insert("status_detail".into(), json!(e.reason));
    }
    m.insert(
        "firewall_rule".into(),
        firewall_rule(e.policy.as_deref(), e.engine, None),
    );
    m.insert("traffic".into(), traffic(e.bytes_in, e.bytes_out));
    m.insert("duration".into(), json!(long(e.duration_ms)));
    insert_network(&mut m, ctx, e.id, e.caller.as_deref(), e.src, &e.dst);
    m.insert(
        "metadata".into(),
        metadata(
            ctx,
            format!("{}:{}:close", ctx.instance, e.id),
            Some(e.id),
            &[HOST, SECURITY_CONTROL],
        ),
    );
    m
}

fn http_request(e: &HttpRequest, ctx: &Context) -> Map<String, Value> {
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
        message: request_message(e),
    };
    let mut m = header(&HTTP_ACTIVITY, &activity, common, ctx);
    if let Some(status) = e.status {
        m.insert("status_code".into(), json!(status.to_string()));
        m.insert("http_response".into(), json!({ "code": status }));
    }
    if let Some(reason) = &e.reason {
        m.insert("status_detail".into(), json!(reason));
    }
    insert_decision(&mut m, e.outcome);
    m.insert(
        "firewall_rule".into(),
        firewall_rule(e.policy.as_deref(), e.engine, e.rule.as_deref()),
    );

    let path = strip_query(&e.path);
    let mut url = Map::new();
    url.insert("scheme".into(), json!(e.scheme));
    url.insert("hostname".into(), json!(bare_host(&e.dst.host)));
    url.insert("port".into(), json!(e.dst.port));
    url.insert("path".into(), json!(path));
    url.insert(
        "url_string".into(),
        json!(url_string(e.scheme, &e.dst.host, e.dst.port, path)),
    );
    let mut request = Map::new();
    if standard.is_some() {
        request.insert("http_method".into(), json!(e.method));
    }
    request.insert("url".into(), Value::Object(url));
    m.insert("http_request".into(), Value::Object(request));

    m.insert("traffic".into(), traffic(e.bytes_in, e.bytes_out));
    m.insert("duration".into(), json!(long(e.duration_ms)));
    insert_network(&mut m, ctx, e.id, e.caller.as_deref(), e.src, &e.dst);

    // `http_request.http_method` is an enum in 1.8.0; a method outside it (PROPFIND, ...) is
    // kept here rather than written where strict validators reject it.
    let mut unmapped = Map::new();
    if standard.is_none() {
        unmapped.insert("http_method".into(), json!(e.method));
    }
    if !e.credentials.is_empty() {
        unmapped.insert("credentials_injected".into(), json!(e.credentials));
    }
    if !unmapped.is_empty() {
        m.insert("unmapped".into(), Value::Object(unmapped));
    }
    // Requests on one keep-alive connection share its id; the time in nanoseconds tells them
    // apart in `metadata.uid` (they are sequential, so their decision times differ).
    let nanos = e
        .time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    m.insert(
        "metadata".into(),
        metadata(
            ctx,
            format!("{}:{}:http:{nanos}", ctx.instance, e.id),
            Some(e.id),
            &[HOST, SECURITY_CONTROL],
        ),
    );
    m
}

fn policy_change(e: &PolicyChange, ctx: &Context) -> Map<String, Value> {
    let common = Common {
        time: e.time,
        severity: policy_severity(e),
        success: e.result.is_ok(),
        message: policy_message(e),
    };
    let mut m = header(
        &DEVICE_CONFIG_STATE_CHANGE,
        &Activity::known(1, "Log"),
        common,
        ctx,
    );
    let mut unmapped = Map::new();
    unmapped.insert("policy_sources".into(), json!(e.sources));
    match &e.result {
        Ok((entries, endpoints)) => {
            // The loaded policy is now the one enforced.
            m.insert("state_id".into(), json!(2));
            m.insert("state".into(), json!("Enabled"));
            unmapped.insert("policy_entries".into(), json!(entries));
            unmapped.insert("policy_endpoints".into(), json!(endpoints));
        }
        Err(errors) => {
            if let Some(first) = errors.first() {
                m.insert("status_detail".into(), json!(first));
            }
            unmapped.insert("policy_errors".into(), json!(errors));
        }
    }
    if let Some(hash) = &e.hash {
        unmapped.insert("policy_hash".into(), json!(hash));
    }
    unmapped.insert("policy_warnings".into(), json!(e.warnings));
    m.insert("unmapped".into(), Value::Object(unmapped));
    m.insert(
        "metadata".into(),
        metadata(
            ctx,
            format!("{}:policy:{}", ctx.instance, epoch_millis(e.time)),
            None,
            &[HOST],
        ),
    );
    m
}

fn finding(e: &Finding, ctx: &Context) -> Map<String, Value> {
    let common = Common {
        time: e.time,
        severity: e.severity,
        success: false,
        message: e.title.clone(),
    };
    let mut m = header(
        &DETECTION_FINDING,
        &Activity::known(1, "Create"),
        common,
        ctx,
    );
    // A finding's status is its triage state, not success or failure.
    m.insert("status_id".into(), json!(1));
    m.insert("status".into(), json!("New"));
    let nanos = e
        .time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    m.insert(
        "finding_info".into(),
        json!({ "uid": format!("{}:{}:finding:{nanos}", ctx.instance, e.id), "title": e.title, "types": [e.kind] }),
    );
    m.insert("action_id".into(), json!(2));
    m.insert("action".into(), json!("Denied"));
    m.insert("disposition_id".into(), json!(2));
    m.insert("disposition".into(), json!("Blocked"));
    let mut rule = Map::new();
    rule.insert("name".into(), json!(e.policy.as_deref().unwrap_or("-")));
    rule.insert("type".into(), json!("credentials"));
    m.insert("firewall_rule".into(), Value::Object(rule));
    let mut unmapped = Map::new();
    unmapped.insert("finding_type".into(), json!(e.kind));
    unmapped.insert(
        "destination".into(),
        json!(format!("{}:{}", e.dst.host, e.dst.port)),
    );
    if let Some(c) = &e.credential {
        unmapped.insert("credential".into(), json!(c));
    }
    if let Some(caller) = &e.caller {
        unmapped.insert("binary".into(), json!(caller.process.exe));
        unmapped.insert("pid".into(), json!(caller.process.pid));
    }
    m.insert("unmapped".into(), Value::Object(unmapped));
    m.insert(
        "metadata".into(),
        metadata(
            ctx,
            format!("{}:{}:finding:{nanos}", ctx.instance, e.id),
            Some(e.id),
            &[HOST, SECURITY_CONTROL],
        ),
    );
    m
}

fn lifecycle(e: &Lifecycle, ctx: &Context) -> Map<String, Value> {
    let (activity, kind) = if e.started {
        (Activity::known(3, "Start"), "start")
    } else {
        (Activity::known(4, "Stop"), "stop")
    };
    let common = Common {
        time: e.time,
        severity: Severity::Informational,
        success: true,
        message: lifecycle_message(e),
    };
    let mut m = header(&APPLICATION_LIFECYCLE, &activity, common, ctx);
    m.insert(
        "app".into(),
        json!({ "name": PRODUCT_NAME, "vendor_name": PRODUCT_NAME, "version": e.version }),
    );
    m.insert(
        "metadata".into(),
        metadata(ctx, format!("{}:{kind}", ctx.instance), None, &[HOST]),
    );
    m
}

// === Objects ===

fn metadata(ctx: &Context, uid: String, connection: Option<u64>, profiles: &[&str]) -> Value {
    let mut m = Map::new();
    m.insert("version".into(), json!(OCSF_VERSION));
    m.insert(
        "product".into(),
        json!({
            "name": PRODUCT_NAME,
            "vendor_name": PRODUCT_NAME,
            "version": PRODUCT_VERSION,
        }),
    );
    m.insert("uid".into(), json!(uid));
    if let Some(id) = connection {
        m.insert("correlation_uid".into(), json!(connection_uid(ctx, id)));
    }
    m.insert("profiles".into(), json!(profiles));
    Value::Object(m)
}

/// The id shared by every event of one connection (open, requests, close).
fn connection_uid(ctx: &Context, id: u64) -> String {
    format!("{}:{id}", ctx.instance)
}

/// The host sluice runs on. `type_id` is required; sluice cannot tell a server from a laptop,
/// so it says Unknown rather than guess.
fn device(ctx: &Context) -> Value {
    let hostname = if ctx.hostname.is_empty() {
        "localhost"
    } else {
        &ctx.hostname
    };
    json!({ "hostname": hostname, "type_id": 0, "type": "Unknown" })
}

/// `actor`, endpoints and `connection_info`, shared by 4001 and 4002.
fn insert_network(
    m: &mut Map<String, Value>,
    ctx: &Context,
    id: u64,
    caller: Option<&Caller>,
    src: SocketAddr,
    dst: &Destination,
) {
    if let Some(caller) = caller {
        m.insert(
            "actor".into(),
            json!({ "process": process(&caller.process, &caller.ancestors, 0) }),
        );
    }
    m.insert(
        "src_endpoint".into(),
        json!({ "ip": src.ip().to_string(), "port": src.port() }),
    );
    m.insert("dst_endpoint".into(), dst_endpoint(dst));
    // network_connection_info (not in the schema copy; shape from the OCSF documentation):
    // direction_id is required there; 2 is Outbound.
    m.insert(
        "connection_info".into(),
        json!({
            "uid": connection_uid(ctx, id),
            "protocol_name": "tcp",
            "protocol_num": 6,
            "direction_id": 2,
            "direction": "Outbound",
        }),
    );
}

/// The destination as asked for: a name in `hostname` (and the dialled address in `ip`), or
/// an address literal in `ip`.
fn dst_endpoint(dst: &Destination) -> Value {
    let mut m = Map::new();
    let host = bare_host(&dst.host);
    match host.parse::<IpAddr>() {
        Ok(ip) => {
            m.insert("ip".into(), json!(ip.to_string()));
        }
        Err(_) => {
            m.insert("hostname".into(), json!(host));
            if let Some(ip) = dst.ip {
                m.insert("ip".into(), json!(ip.to_string()));
            }
        }
    }
    m.insert("port".into(), json!(dst.port));
    Value::Object(m)
}

/// `host` without the brackets of an IPv6 literal.
fn bare_host(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// A process and, nested as `parent_process`, its ancestors (nearest first).
fn process(p: &Process, ancestors: &[Process], depth: usize) -> Value {
    let mut m = Map::new();
    m.insert("pid".into(), json!(p.pid));
    if !p.exe.is_empty() {
        m.insert("name".into(), json!(basename(&p.exe)));
        m.insert("path".into(), json!(p.exe));
    }
    // OCSF: "If the command line is unavailable or missing, the empty string is to be used."
    m.insert("cmd_line".into(), json!(p.cmdline.join(" ")));
    if let Some(uid) = p.uid {
        // `process.uid` is a producer-assigned process id; the account is `user.uid`.
        m.insert("user".into(), json!({ "uid": uid.to_string() }));
    }
    if let Some((parent, rest)) = ancestors.split_first()
        && depth < MAX_PARENT_DEPTH
    {
        m.insert("parent_process".into(), process(parent, rest, depth + 1));
    }
    Value::Object(m)
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn firewall_rule(policy: Option<&str>, engine: Engine, rule: Option<&str>) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(policy.unwrap_or("-")));
    m.insert("type".into(), json!(engine.as_str()));
    if let Some(rule) = rule {
        m.insert("desc".into(), json!(rule));
    }
    Value::Object(m)
}

/// OCSF counts bytes from the source's side: `bytes_out` went from the source (the client) to
/// the destination, `bytes_in` came back. The model counts from sluice's side of the client
/// socket (`bytes_in` = received from the client), so the names swap here.
fn traffic(from_client: u64, to_client: u64) -> Value {
    json!({
        "bytes_in": long(to_client),
        "bytes_out": long(from_client),
        "bytes": long(from_client.saturating_add(to_client)),
    })
}

/// A count as an OCSF `long_t` (signed 64 bits), saturated.
fn long(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn insert_decision(m: &mut Map<String, Value>, outcome: Outcome) {
    let (action_id, action, disposition_id, disposition) = match outcome {
        Outcome::Allowed => (1, "Allowed", 1, "Allowed"),
        Outcome::Denied => (2, "Denied", 2, "Blocked"),
        Outcome::Audited => (1, "Allowed", 15, "Detected"),
    };
    m.insert("action_id".into(), json!(action_id));
    m.insert("action".into(), json!(action));
    m.insert("disposition_id".into(), json!(disposition_id));
    m.insert("disposition".into(), json!(disposition));
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
pub use dns::rcode_label as dns_rcode_label;

/// Events for the unit tests of `ocsf`, `shorthand`, `sink` and `metrics`.
#[cfg(test)]
pub(crate) mod samples;
#[cfg(test)]
mod tests;
