//! DNS Activity (4003), activity Response 2: one event per question the policy DNS answered
//! or refused. `query` carries the name and type asked, `answers` the addresses handed out,
//! `rcode_id` the reply's code; refusals are action Denied / disposition Blocked like a
//! refused connection, with the reason in `status_detail`.

use serde_json::{Map, Value, json};

use super::{
    Activity, Class, Common, Context, HOST, Message, Record, SECURITY_CONTROL, Uid, decision,
    firewall_rule, header, metadata, outcome_severity,
};
use crate::{DnsQuery, DnsRcode, DnsTransport, Engine, Outcome};

const DNS_ACTIVITY: Class = Class {
    uid: 4003,
    name: "DNS Activity",
    category_uid: 4,
    category_name: "Network Activity",
};

/// The reply's code as the OCSF `rcode_id` and its caption.
fn rcode(r: DnsRcode) -> (u32, &'static str) {
    match r {
        DnsRcode::NoError => (0, "NoError"),
        DnsRcode::FormErr => (1, "FormError"),
        DnsRcode::ServFail => (2, "ServError"),
        DnsRcode::NxDomain => (3, "NXDomain"),
        DnsRcode::NotImp => (4, "NotImp"),
        DnsRcode::Refused => (5, "Refused"),
    }
}

/// The reply's code whose OCSF `rcode_id` is `id`, reading an event back.
pub fn rcode_from_id(id: u64) -> Option<DnsRcode> {
    [
        DnsRcode::NoError,
        DnsRcode::FormErr,
        DnsRcode::ServFail,
        DnsRcode::NxDomain,
        DnsRcode::NotImp,
        DnsRcode::Refused,
    ]
    .into_iter()
    .find(|r| u64::from(rcode(*r).0) == id)
}

/// The reply's code as DNS tools print it (`NOERROR`, `REFUSED`, ...).
pub fn rcode_label(r: DnsRcode) -> &'static str {
    match r {
        DnsRcode::NoError => "NOERROR",
        DnsRcode::FormErr => "FORMERR",
        DnsRcode::ServFail => "SERVFAIL",
        DnsRcode::NxDomain => "NXDOMAIN",
        DnsRcode::NotImp => "NOTIMP",
        DnsRcode::Refused => "REFUSED",
    }
}

pub(super) fn message(e: &DnsQuery) -> String {
    let name = if e.name.is_empty() { "-" } else { &e.name };
    format!(
        "DNS {} {name} {}: {}",
        e.qtype,
        rcode_label(e.rcode),
        match e.outcome {
            Outcome::Denied => "refused",
            _ => "answered",
        }
    )
}

pub(super) fn dns_query<'a>(e: &'a DnsQuery, ctx: &'a Context) -> Record<'a> {
    let common = Common {
        time: e.time,
        severity: outcome_severity(e.outcome),
        success: e.outcome != Outcome::Denied,
        message: Message::Text(message(e)),
    };
    let metadata = metadata(
        ctx,
        Uid::Text(format!(
            "{}:dns:{}:{}",
            ctx.instance,
            super::epoch_millis(e.time),
            e.src
        )),
        None,
        &[HOST, SECURITY_CONTROL],
    );
    let mut r = header(
        &DNS_ACTIVITY,
        &Activity::known(2, "Response"),
        common,
        ctx,
        metadata,
    );
    r.status_detail = e.reason.as_deref();
    r.decision = Some(decision(e.outcome));
    r.firewall_rule = Some(firewall_rule(e.policy.as_deref(), Engine::L4, None));
    let mut m = Map::new();
    let (rcode_id, rcode_name) = rcode(e.rcode);
    m.insert("rcode_id".into(), json!(rcode_id));
    m.insert("rcode".into(), json!(rcode_name));
    m.insert(
        "query".into(),
        json!({
            "hostname": e.name,
            "type": e.qtype,
            "class": "IN",
            "opcode_id": 0,
            "opcode": "Query",
        }),
    );
    let answers: Vec<Value> = e
        .answers
        .iter()
        .map(|ip| {
            json!({
                "rdata": ip.to_string(),
                "type": if ip.is_ipv4() { "A" } else { "AAAA" },
                "class": "IN",
                "ttl": e.ttl,
            })
        })
        .collect();
    m.insert("answers".into(), json!(answers));
    m.insert(
        "src_endpoint".into(),
        json!({ "ip": e.src.ip().to_string(), "port": e.src.port() }),
    );
    m.insert(
        "dst_endpoint".into(),
        json!({ "ip": e.dst.ip().to_string(), "port": e.dst.port() }),
    );
    let (protocol_name, protocol_num) = match e.transport {
        DnsTransport::Udp => ("udp", 17),
        DnsTransport::Tcp => ("tcp", 6),
    };
    m.insert(
        "connection_info".into(),
        json!({
            "protocol_name": protocol_name,
            "protocol_num": protocol_num,
            "direction_id": 2,
            "direction": "Outbound",
        }),
    );
    r.extra = Some(m);
    r
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::super::samples;
    use super::*;
    use crate::Event;

    pub(crate) fn sample(outcome: Outcome) -> DnsQuery {
        DnsQuery {
            time: SystemTime::UNIX_EPOCH + Duration::from_millis(1_710_000_307_123),
            src: "10.0.0.5:40000".parse().unwrap(),
            dst: "127.0.0.1:15053".parse().unwrap(),
            transport: DnsTransport::Udp,
            name: "api.example.com".into(),
            qtype: "A".into(),
            rcode: if outcome == Outcome::Denied {
                DnsRcode::Refused
            } else {
                DnsRcode::NoError
            },
            answers: if outcome == Outcome::Denied {
                vec![]
            } else {
                vec!["203.0.113.7".parse().unwrap()]
            },
            ttl: 30,
            outcome,
            policy: Some("api".into()),
            reason: (outcome == Outcome::Denied).then(|| "no policy endpoint allows it".into()),
        }
    }

    #[test]
    fn an_answer_is_dns_activity_response_with_its_addresses() {
        let v =
            serde_json::to_value(dns_query(&sample(Outcome::Allowed), &samples::ctx())).unwrap();
        assert_eq!(v["class_uid"], 4003);
        assert_eq!(v["category_uid"], 4);
        assert_eq!(v["activity_id"], 2);
        assert_eq!(v["type_uid"], 400_302);
        assert_eq!(v["rcode_id"], 0);
        assert_eq!(v["query"]["hostname"], "api.example.com");
        assert_eq!(v["query"]["type"], "A");
        assert_eq!(
            v["answers"],
            json!([{ "rdata": "203.0.113.7", "type": "A", "class": "IN", "ttl": 30 }])
        );
        assert_eq!(v["action_id"], 1);
        assert_eq!(v["connection_info"]["protocol_name"], "udp");
        let line = crate::shorthand::shorthand(&Event::Dns(sample(Outcome::Allowed)));
        assert_eq!(
            line,
            "DNS:QUERY [INFO] ALLOWED 10.0.0.5:40000 -> api.example.com A NOERROR 203.0.113.7 [policy:api engine:dns]"
        );
    }

    #[test]
    fn a_refusal_is_blocked_with_its_reason() {
        let v = serde_json::to_value(dns_query(&sample(Outcome::Denied), &samples::ctx())).unwrap();
        assert_eq!(v["rcode_id"], 5);
        assert_eq!(v["rcode"], "Refused");
        assert_eq!(v["action_id"], 2);
        assert_eq!(v["disposition_id"], 2);
        assert_eq!(v["status_detail"], "no policy endpoint allows it");
        assert_eq!(v["answers"], json!([]));
        let line = crate::shorthand::shorthand(&Event::Dns(sample(Outcome::Denied)));
        assert!(line.starts_with("DNS:QUERY [MED] DENIED"), "{line}");
        assert!(
            line.ends_with("[reason:no policy endpoint allows it]"),
            "{line}"
        );
    }
}
