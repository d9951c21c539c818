//! Reading the audit log back: one OCSF JSON line (as `ocsf.rs` writes it) into a `Record`,
//! the few facts `sluice audit` filters, prints and counts and `sluice policy suggest` drafts
//! from. Pure; a line that is not such an event is an error, never a panic.

use serde_json::Value;

use super::Severity;

/// What sluice decided, as the event's `action_id` and `disposition_id` say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Decision {
    Allowed,
    Denied,
    /// `enforcement: audit`: a would-be denial, logged and forwarded.
    Audited,
}

impl Decision {
    pub fn label(self) -> &'static str {
        match self {
            Decision::Allowed => "ALLOWED",
            Decision::Denied => "DENIED",
            Decision::Audited => "AUDITED",
        }
    }
}

/// One audit event, as far as the audit tools need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Milliseconds since the epoch (`time`).
    pub time_ms: u64,
    pub class_uid: u64,
    /// `NET:OPEN`, `NET:CLOSE`, `HTTP:GET`, `CONFIG:LOADED`, `CONFIG:FAILED`, `APP:START`,
    /// `APP:STOP`, `FINDING`, or `OCSF:<class>` for another class.
    pub label: String,
    pub severity: Severity,
    /// `None` for events that decide nothing (closes, config changes, lifecycle).
    pub decision: Option<Decision>,
    /// The caller's executable path (`actor.process.path`).
    pub binary: Option<String>,
    pub pid: Option<u64>,
    /// The destination as asked for: a host name, else the address.
    pub host: Option<String>,
    pub port: Option<u16>,
    pub scheme: Option<String>,
    pub method: Option<String>,
    /// The request path (sluice never logs a query).
    pub path: Option<String>,
    /// The deciding policy entry (`firewall_rule.name`; `-` is none).
    pub policy: Option<String>,
    /// `firewall_rule.type`: `l4`, `l7`, `identity`, ...
    pub engine: Option<String>,
    /// `status_detail`: why.
    pub reason: Option<String>,
    pub message: String,
    /// A policy-DNS question (DNS Activity): who asked, and what was answered.
    pub dns: Option<DnsFacts>,
}

/// What a policy-DNS event says beyond its name (`Record::host`) and decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsFacts {
    /// The client that asked (`src_endpoint`), `ip:port`.
    pub client: String,
    /// The question's type (`A`, `AAAA`, ...).
    pub qtype: String,
    /// The reply's code as DNS tools print it (`NOERROR`, `REFUSED`).
    pub rcode: String,
    /// The addresses handed out.
    pub answers: Vec<String>,
}

/// Why a line is not an audit event.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("not JSON: {0}")]
    Json(String),
    #[error("not an OCSF event (no numeric class_uid)")]
    NotOcsf,
}

fn str_at<'v>(v: &'v Value, path: &[&str]) -> Option<&'v str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

fn u64_at(v: &Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_u64()
}

fn severity(id: Option<u64>) -> Severity {
    match id {
        Some(2) => Severity::Low,
        Some(3) => Severity::Medium,
        Some(4) => Severity::High,
        Some(5..) => Severity::Critical,
        _ => Severity::Informational,
    }
}

/// Parses one line of the audit log.
pub fn parse(line: &str) -> Result<Record, ParseError> {
    let v: Value = serde_json::from_str(line).map_err(|e| ParseError::Json(e.to_string()))?;
    let class_uid = v
        .get("class_uid")
        .and_then(Value::as_u64)
        .ok_or(ParseError::NotOcsf)?;
    let activity = u64_at(&v, &["activity_id"]).unwrap_or(0);
    let ok = u64_at(&v, &["status_id"]) == Some(1);
    // A method outside OCSF's enum (PROPFIND, PURGE, `*`) is written to `unmapped`.
    let method = str_at(&v, &["http_request", "http_method"])
        .or_else(|| str_at(&v, &["unmapped", "http_method"]))
        .map(str::to_string);
    let dns = (class_uid == DNS_ACTIVITY).then(|| dns_facts(&v));
    let label = match class_uid {
        DNS_ACTIVITY => "DNS:QUERY".to_string(),
        4001 if activity == 1 => "NET:OPEN".to_string(),
        4001 if activity == 2 => "NET:CLOSE".to_string(),
        4002 => format!("HTTP:{}", method.as_deref().unwrap_or("?")),
        5019 if ok => "CONFIG:LOADED".to_string(),
        5019 => "CONFIG:FAILED".to_string(),
        6002 if activity == 3 => "APP:START".to_string(),
        6002 => "APP:STOP".to_string(),
        2004 => "FINDING".to_string(),
        other => format!("OCSF:{other}"),
    };
    let decision = match (u64_at(&v, &["action_id"]), u64_at(&v, &["disposition_id"])) {
        (Some(1), Some(15)) => Some(Decision::Audited),
        (Some(1), _) => Some(Decision::Allowed),
        (Some(2), _) => Some(Decision::Denied),
        _ => None,
    };
    let url = ["http_request", "url"];
    // A DNS event's destination is the name asked for; its endpoints are the client and the
    // policy DNS itself, neither of which is a destination.
    let (host, port) = if dns.is_some() {
        (str_at(&v, &["query", "hostname"]).map(str::to_string), None)
    } else {
        let host = str_at(&v, &[url[0], url[1], "hostname"])
            .or_else(|| str_at(&v, &["dst_endpoint", "hostname"]))
            .or_else(|| str_at(&v, &["dst_endpoint", "ip"]))
            .map(str::to_string);
        let port = u64_at(&v, &[url[0], url[1], "port"])
            .or_else(|| u64_at(&v, &["dst_endpoint", "port"]))
            .and_then(|p| u16::try_from(p).ok());
        (host, port)
    };
    Ok(Record {
        time_ms: u64_at(&v, &["time"]).unwrap_or(0),
        class_uid,
        label,
        severity: severity(u64_at(&v, &["severity_id"])),
        decision,
        // A gateway tenant (`actor.user`) reads as `tenant:<name>`, as the shorthand shows it.
        binary: str_at(&v, &["actor", "process", "path"])
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .or_else(|| {
                str_at(&v, &["actor", "user", "name"]).map(|name| format!("tenant:{name}"))
            }),
        pid: u64_at(&v, &["actor", "process", "pid"]),
        host,
        port,
        scheme: str_at(&v, &[url[0], url[1], "scheme"]).map(str::to_string),
        method,
        path: str_at(&v, &[url[0], url[1], "path"]).map(str::to_string),
        policy: str_at(&v, &["firewall_rule", "name"])
            .filter(|p| *p != "-")
            .map(str::to_string),
        engine: if dns.is_some() {
            Some("dns".to_string())
        } else {
            str_at(&v, &["firewall_rule", "type"]).map(str::to_string)
        },
        reason: str_at(&v, &["status_detail"]).map(str::to_string),
        message: str_at(&v, &["message"]).unwrap_or_default().to_string(),
        dns,
    })
}

/// OCSF DNS Activity: the policy DNS's questions (`ocsf/dns.rs`).
const DNS_ACTIVITY: u64 = 4003;

fn dns_facts(v: &Value) -> DnsFacts {
    let client = match (
        str_at(v, &["src_endpoint", "ip"]),
        u64_at(v, &["src_endpoint", "port"]).and_then(|p| u16::try_from(p).ok()),
    ) {
        (Some(ip), Some(port)) => sluice_addr::HostPort(ip, port).to_string(),
        (Some(ip), None) => ip.to_string(),
        _ => "?".to_string(),
    };
    let rcode = u64_at(v, &["rcode_id"])
        .and_then(super::ocsf::dns_rcode_from_id)
        .map_or("?", super::ocsf::dns_rcode_label)
        .to_string();
    let answers = v
        .get("answers")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|a| a.get("rdata").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    DnsFacts {
        client,
        qtype: str_at(v, &["query", "type"]).unwrap_or("?").to_string(),
        rcode,
        answers,
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::ocsf::{self, Context};
    use crate::{Caller, Destination, Engine, Event, HttpRequest, Outcome, Process};

    fn ctx() -> Context {
        Context {
            instance: "i".into(),
            hostname: "h".into(),
        }
    }

    #[test]
    fn a_denied_request_reads_back() {
        let event = Event::HttpRequest(HttpRequest {
            time: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            id: 7,
            caller: Some(std::sync::Arc::new(Caller {
                process: Process {
                    pid: 42,
                    exe: "/usr/bin/curl".into(),
                    ..Process::default()
                },
                ancestors: Vec::new(),
                ..Caller::default()
            })),
            src: SocketAddr::from(([127, 0, 0, 1], 5000)),
            dst: Destination {
                authority: crate::Authority::new("api.example.com", 443),
                ip: None,
            },
            scheme: "https",
            method: "POST".into(),
            path: "/v1/x".into(),
            outcome: Outcome::Denied,
            status: Some(403),
            engine: Engine::L7,
            policy: Some("api".into()),
            rule: None,
            reason: Some("POST /v1/x not permitted by policy".into()),
            credentials: Vec::new(),
            signed: None,
            bytes_in: 0,
            bytes_out: 0,
            duration_ms: 1,
        });
        let line = ocsf::to_json(&event, &ctx()).to_string();
        let r = parse(&line).unwrap();
        assert_eq!(r.label, "HTTP:POST");
        assert_eq!(r.decision, Some(Decision::Denied));
        assert_eq!(r.binary.as_deref(), Some("/usr/bin/curl"));
        assert_eq!(r.pid, Some(42));
        assert_eq!(r.host.as_deref(), Some("api.example.com"));
        assert_eq!(r.port, Some(443));
        assert_eq!(r.path.as_deref(), Some("/v1/x"));
        assert_eq!(r.policy.as_deref(), Some("api"));
        assert_eq!(r.engine.as_deref(), Some("l7"));
        assert_eq!(r.time_ms, 1_700_000_000_123);
    }

    #[test]
    fn a_gateway_tenant_reads_back_as_tenant_colon_name() {
        let event = Event::ConnectionOpen(crate::ConnectionOpen {
            time: SystemTime::UNIX_EPOCH,
            id: 1,
            via: crate::Via::Connect,
            caller: Some(std::sync::Arc::new(Caller {
                tenant: Some("alpha".into()),
                ..Caller::default()
            })),
            src: SocketAddr::from(([10, 1, 0, 9], 5000)),
            dst: Destination {
                authority: crate::Authority::new("api.example.com", 443),
                ip: None,
            },
            outcome: Outcome::Allowed,
            policy: Some("api".into()),
            engine: Engine::L4,
            reason: None,
            status: 200,
        });
        let json = ocsf::to_json(&event, &ctx());
        assert_eq!(json["actor"]["user"]["name"], "alpha");
        assert_eq!(json["actor"]["user"]["type"], "Tenant");
        assert!(json["actor"].get("process").is_none(), "{json}");
        let r = parse(&json.to_string()).unwrap();
        assert_eq!(r.binary.as_deref(), Some("tenant:alpha"));
        assert_eq!(r.pid, None);
    }

    #[test]
    fn an_extension_method_reads_back_from_unmapped() {
        let mut event = ocsf::samples::request(Outcome::Denied);
        event.method = "PROPFIND".into();
        let line = ocsf::to_json(&Event::HttpRequest(event), &ctx()).to_string();
        let r = parse(&line).unwrap();
        assert_eq!(r.method.as_deref(), Some("PROPFIND"));
        assert_eq!(r.label, "HTTP:PROPFIND");
    }

    #[test]
    fn a_policy_dns_question_reads_back_as_the_name_asked_for() {
        // The finding: shown as `DENIED 127.0.0.1:60891 [engine:l4]`, the client's address as
        // the destination.
        let q = crate::DnsQuery {
            time: SystemTime::UNIX_EPOCH,
            src: "10.0.0.5:40000".parse().unwrap(),
            dst: "127.0.0.1:15053".parse().unwrap(),
            transport: crate::DnsTransport::Udp,
            name: "nowhere.example.org".into(),
            qtype: "A".into(),
            rcode: crate::DnsRcode::Refused,
            answers: vec![],
            ttl: 30,
            outcome: Outcome::Denied,
            policy: None,
            reason: Some("no policy endpoint allows it".into()),
        };
        let line = ocsf::to_json(&Event::Dns(q.clone()), &ctx()).to_string();
        let r = parse(&line).unwrap();
        assert_eq!(r.label, "DNS:QUERY");
        assert_eq!(r.host.as_deref(), Some(q.name.as_str()));
        assert_eq!(r.port, None);
        assert_eq!(r.engine.as_deref(), Some("dns"));
        let dns = r.dns.unwrap();
        assert_eq!(dns.client, q.src.to_string());
        assert_eq!(dns.qtype, q.qtype);
        assert_eq!(dns.rcode, "REFUSED");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(parse("not json"), Err(ParseError::Json(_))));
        assert_eq!(parse("{}"), Err(ParseError::NotOcsf));
        assert_eq!(parse("[1,2]"), Err(ParseError::NotOcsf));
        assert_eq!(parse("{\"class_uid\":\"x\"}"), Err(ParseError::NotOcsf));
        let r = parse("{\"class_uid\":4001,\"activity_id\":1,\"actor\":7}").unwrap();
        assert_eq!(r.binary, None);
    }
}
