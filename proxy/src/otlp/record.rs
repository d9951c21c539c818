//! One audit event as OTLP sees it: a log record whose body is the event's OCSF JSON line (as
//! the audit log holds it, secrets redacted) and whose attributes are that object's fields,
//! flattened to dotted keys (`class_uid`, `activity_name`, `disposition`,
//! `actor.process.path`, `dst_endpoint.hostname`...); and for an HTTP request, a span
//! from its start to its end, linked to the record. Both are read from the redacted JSON,
//! never from the event itself, so nothing reaches the collector that the log would not hold.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::logs::{AnyValue, LogRecord as _, Severity};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, Key, KeyValue, Value as OtelValue};
use opentelemetry_sdk::logs::SdkLogRecord;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use serde_json::Value;

/// Nesting kept when flattening; deeper values are kept as JSON text.
const MAX_DEPTH: usize = 4;

/// The OCSF object's fields as dotted attribute keys.
pub fn attributes(ocsf: &Value) -> Vec<(String, AnyValue)> {
    let mut out = Vec::new();
    flatten("", ocsf, 0, &mut out);
    out
}

fn flatten(prefix: &str, v: &Value, depth: usize, out: &mut Vec<(String, AnyValue)>) {
    match v {
        Value::Object(map) if depth < MAX_DEPTH => {
            for (k, child) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, child, depth + 1, out);
            }
        }
        Value::Null => {}
        Value::Bool(b) => out.push((prefix.to_string(), AnyValue::Boolean(*b))),
        Value::Number(n) => out.push((
            prefix.to_string(),
            n.as_i64().map_or_else(
                || AnyValue::Double(n.as_f64().unwrap_or_default()),
                AnyValue::Int,
            ),
        )),
        Value::String(s) => out.push((prefix.to_string(), AnyValue::String(s.clone().into()))),
        Value::Array(items) if items.iter().all(|i| i.is_string()) => out.push((
            prefix.to_string(),
            AnyValue::ListAny(Box::new(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|s| AnyValue::String(s.to_string().into()))
                    .collect(),
            )),
        )),
        other => out.push((
            prefix.to_string(),
            AnyValue::String(other.to_string().into()),
        )),
    }
}

/// OCSF `severity_id` as an OTel severity.
fn severity(ocsf: &Value) -> (Severity, &'static str) {
    match ocsf["severity_id"].as_u64() {
        Some(2) => (Severity::Info2, "Low"),
        Some(3) => (Severity::Warn, "Medium"),
        Some(4) => (Severity::Error, "High"),
        Some(5) => (Severity::Fatal, "Critical"),
        Some(6) => (Severity::Fatal2, "Fatal"),
        _ => (Severity::Info, "Informational"),
    }
}

/// The event's time (OCSF `time`, epoch milliseconds).
pub fn time(ocsf: &Value) -> SystemTime {
    ocsf["time"]
        .as_u64()
        .map_or_else(SystemTime::now, |ms| UNIX_EPOCH + Duration::from_millis(ms))
}

/// Fills `rec` from the redacted line and its parsed object.
pub fn fill(rec: &mut SdkLogRecord, line: &str, ocsf: &Value, span: Option<&SpanContext>) {
    rec.set_event_name("sluice.audit");
    rec.set_timestamp(time(ocsf));
    rec.set_observed_timestamp(SystemTime::now());
    let (number, text) = severity(ocsf);
    rec.set_severity_number(number);
    rec.set_severity_text(text);
    rec.set_body(AnyValue::String(line.to_string().into()));
    for (k, v) in attributes(ocsf) {
        rec.add_attribute(Key::from(k), v);
    }
    if let Some(span) = span {
        rec.set_trace_context(span.trace_id(), span.span_id(), Some(span.trace_flags()));
    }
}

/// Fresh random trace and span ids (a request span is a root: sluice starts no trace context
/// from the client's headers).
pub fn new_context(random: &dyn Fn(&mut [u8])) -> SpanContext {
    let mut trace = [0u8; 16];
    let mut span = [0u8; 8];
    random(&mut trace);
    random(&mut span);
    // An all-zero id is invalid; the odds are nil, but keep it valid.
    trace[15] |= 1;
    span[7] |= 1;
    SpanContext::new(
        TraceId::from_bytes(trace),
        SpanId::from_bytes(span),
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    )
}

/// The span of one HTTP request event (OCSF HTTP Activity).
pub fn span(ocsf: &Value, context: SpanContext, scope: &InstrumentationScope) -> SpanData {
    let end = time(ocsf);
    let took = Duration::from_millis(ocsf["duration"].as_u64().unwrap_or(0));
    let method = ocsf["http_request"]["http_method"]
        .as_str()
        .or_else(|| ocsf["unmapped"]["http_method"].as_str())
        .unwrap_or("HTTP")
        .to_string();
    let mut attributes = vec![KeyValue::new("http.request.method", method.clone())];
    let mut put = |key: &'static str, v: &Value| match v {
        Value::String(s) => attributes.push(KeyValue::new(key, s.clone())),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                attributes.push(KeyValue::new(key, OtelValue::I64(i)));
            }
        }
        _ => {}
    };
    put("url.scheme", &ocsf["http_request"]["url"]["scheme"]);
    put("url.path", &ocsf["http_request"]["url"]["path"]);
    put("server.address", &ocsf["http_request"]["url"]["hostname"]);
    put("server.port", &ocsf["http_request"]["url"]["port"]);
    put("http.response.status_code", &ocsf["http_response"]["code"]);
    put("process.executable.path", &ocsf["actor"]["process"]["path"]);
    put("process.pid", &ocsf["actor"]["process"]["pid"]);
    put("sluice.disposition", &ocsf["disposition"]);
    put("sluice.policy", &ocsf["firewall_rule"]["name"]);
    put("sluice.engine", &ocsf["firewall_rule"]["type"]);
    put("sluice.event_uid", &ocsf["metadata"]["uid"]);
    let status = if ocsf["action_id"].as_u64() == Some(2) {
        Status::error(
            ocsf["status_detail"]
                .as_str()
                .or_else(|| ocsf["message"].as_str())
                .unwrap_or("denied")
                .to_string(),
        )
    } else {
        Status::Unset
    };
    SpanData {
        span_context: context,
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Server,
        name: Cow::Owned(method),
        start_time: end.checked_sub(took).unwrap_or(end),
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_flatten_to_dotted_keys() {
        let v = serde_json::json!({
            "class_uid": 4002,
            "actor": {"process": {"pid": 7, "cmd_line": "curl x", "file": {"path": "/usr/bin/curl"}}},
            "dst_endpoint": {"hostname": "h", "port": 443},
            "tags": ["a", "b"],
            "skip": null
        });
        let attrs = attributes(&v);
        let get = |k: &str| {
            attrs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("class_uid"), Some(AnyValue::Int(4002)));
        assert_eq!(get("actor.process.pid"), Some(AnyValue::Int(7)));
        assert_eq!(
            get("actor.process.file.path"),
            Some(AnyValue::String("/usr/bin/curl".into()))
        );
        assert_eq!(get("dst_endpoint.port"), Some(AnyValue::Int(443)));
        assert!(matches!(get("tags"), Some(AnyValue::ListAny(l)) if l.len() == 2));
        assert_eq!(get("skip"), None);
    }
}
