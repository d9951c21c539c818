//! OpenTelemetry export of the real binary (`--otlp-endpoint`), received by a real OTLP/HTTP
//! receiver started by the test (`opentelemetry-proto` types decoding the protobuf bodies sluice
//! POSTs to `/v1/logs` and `/v1/traces`): one log record per audit line (the line itself as
//! body, the OCSF fields as attributes), one span per HTTP request linked to its record, the
//! stop event flushed at shutdown, no secret anywhere; and an unreachable collector costs
//! counted drops and one audit finding, never a request.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use sluice_e2e::ocsf::class;
use sluice_e2e::origin::serve_posts;
use sluice_e2e::scrape::{SECRET, known_traffic_with, openmetrics, parse, value};

/// What the receiver got: log records and spans, with their resources' attributes.
#[derive(Default)]
struct Received {
    logs: Vec<LogRecord>,
    spans: Vec<Span>,
    resources: Vec<Vec<KeyValue>>,
    bodies: Vec<u8>,
}

/// An OTLP/HTTP receiver on loopback: HTTP/1.1 POSTs of protobuf bodies, answered 200 with
/// an empty (valid) export response.
struct Receiver {
    port: u16,
    got: Arc<Mutex<Received>>,
}

impl Receiver {
    fn start() -> Receiver {
        let got = Arc::new(Mutex::new(Received::default()));
        let shared = Arc::clone(&got);
        let port = serve_posts(move |path, body| record(&shared, path, &body));
        Receiver { port, got }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// One OTLP export: every body's bytes, and the records it decodes to.
fn record(got: &Mutex<Received>, path: &str, body: &[u8]) {
    let mut g = got.lock().unwrap();
    g.bodies.extend_from_slice(body);
    match path {
        "/v1/logs" => {
            let req = ExportLogsServiceRequest::decode(body).unwrap();
            for rl in req.resource_logs {
                g.resources
                    .push(rl.resource.map(|r| r.attributes).unwrap_or_default());
                for sl in rl.scope_logs {
                    g.logs.extend(sl.log_records);
                }
            }
        }
        "/v1/traces" => {
            let req = ExportTraceServiceRequest::decode(body).unwrap();
            for rs in req.resource_spans {
                for ss in rs.scope_spans {
                    g.spans.extend(ss.spans);
                }
            }
        }
        other => panic!("unexpected OTLP path {other}"),
    }
}

fn text(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn every_audit_event_reaches_the_collector_as_one_log_record() {
    let receiver = Receiver::start();
    let url = receiver.url();
    let mut t = known_traffic_with("otlp", &["--otlp-endpoint", &url]);
    // Stopping flushes the export: the stop event is exported too.
    t.sluice.stop();
    let lines: Vec<String> = std::fs::read_to_string(&t.sluice.audit_path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let events = t.sluice.events();
    assert!(
        events
            .iter()
            .any(|e| class(e) == 6002 && e["activity_id"] == 4),
        "no stop event"
    );
    wait_until("one record per audit line", || {
        receiver.got.lock().unwrap().logs.len() >= lines.len()
    });
    let got = receiver.got.lock().unwrap();
    // One record per audit line, its body the line itself.
    let mut bodies: Vec<String> = got
        .logs
        .iter()
        .map(|r| r.body.as_ref().map(text).unwrap_or_default())
        .collect();
    let mut want = lines.clone();
    bodies.sort();
    want.sort();
    assert_eq!(bodies, want, "log record bodies are not the audit lines");

    // OCSF fields as attributes: the L7-denied POST.
    let denied = got
        .logs
        .iter()
        .map(|r| (r, attrs(&r.attributes)))
        .find(|(_, a)| {
            a.get("class_uid").map(String::as_str) == Some("4002")
                && a.get("disposition").map(String::as_str) == Some("Blocked")
        })
        .expect("the denied request's record");
    let (record, a) = (denied.0.clone(), denied.1);
    assert_eq!(a["activity_name"], "Post", "{a:?}");
    assert_eq!(a["firewall_rule.name"], "web");
    assert_eq!(a["firewall_rule.type"], "l7");
    assert_eq!(a["http_request.url.hostname"], "127.0.0.1", "{a:?}");
    assert!(a.contains_key("dst_endpoint.port"), "{a:?}");
    assert_eq!(
        a["actor.process.path"],
        sluice_e2e::proxy::realpath("/usr/bin/curl")
    );
    assert!(
        a.contains_key("actor.process.pid") && a.contains_key("metadata.uid"),
        "{a:?}"
    );
    assert_eq!(record.event_name, "sluice.audit");
    assert_eq!(record.severity_text, "Medium");
    assert!(record.time_unix_nano > 0);

    // One span per HTTP request event, linked to its record by trace and span id.
    let requests = events.iter().filter(|e| class(e) == 4002).count();
    assert_eq!(requests, 5);
    drop(got);
    wait_until_spans(&receiver, requests);
    let got = receiver.got.lock().unwrap();
    let spans = got.spans.clone();
    assert_eq!(spans.len(), requests);
    assert_eq!(record.trace_id.len(), 16);
    let span = spans
        .iter()
        .find(|s| s.trace_id == record.trace_id && s.span_id == record.span_id)
        .expect("the denied request's span");
    assert_eq!(span.name, "POST");
    let sa = attrs(&span.attributes);
    assert_eq!(sa["http.request.method"], "POST");
    assert_eq!(sa["http.response.status_code"], "403");
    assert_eq!(sa["sluice.policy"], "web");
    assert_eq!(sa["server.address"], "127.0.0.1");
    assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
    assert_eq!(
        span.status.as_ref().map(|s| s.code),
        Some(2),
        "denied is an error span"
    );

    // The resource names the service and the instance.
    let res = attrs(&got.resources[0]);
    assert_eq!(res["service.name"], "sluice");
    assert!(res.contains_key("service.instance.id"), "{res:?}");
    // The injected secret never reached the collector.
    assert!(
        !String::from_utf8_lossy(&got.bodies).contains(SECRET),
        "the collector received the secret"
    );
}

fn wait_until_spans(receiver: &Receiver, n: usize) {
    wait_until("one span per request", || {
        receiver.got.lock().unwrap().spans.len() >= n
    });
}

#[test]
fn an_unreachable_collector_costs_counted_drops_and_one_finding_never_a_request() {
    // A port nothing listens on: every export fails.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let started = Instant::now();
    let t = known_traffic_with("otlp-down", &["--otlp-endpoint", &url]);
    // The traffic was not held up by the dead collector: were the audit path waiting on the
    // export, its twenty-odd events would each wait out the 10 s export timeout.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // The exporter retries each batch for up to 10 s before it counts it lost.
    let is_drop = |e: &serde_json::Value| {
        class(e) == 2004 && e["finding_info"]["types"][0] == "sluice.otlp.records_dropped"
    };
    let deadline = Instant::now() + Duration::from_secs(40);
    let finding = loop {
        if let Some(f) = t.sluice.events().into_iter().find(|e| is_drop(e)) {
            break f;
        }
        assert!(
            Instant::now() < deadline,
            "no drop finding:\n{}",
            t.sluice.stderr()
        );
        thread::sleep(Duration::from_millis(200));
    };
    assert!(
        finding["finding_info"]["title"]
            .as_str()
            .unwrap()
            .contains("lost")
    );
    let (_, text) = openmetrics(t.metrics);
    let dropped = value(&parse(&text), "sluice_otlp_dropped_total", &[]);
    assert!(dropped >= 1.0, "{text}");
    // Only one such event, however much is lost later.
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-x",
            &t.sluice.proxy_url(),
            "http://127.0.0.1:9/again",
        ])
        .status()
        .unwrap();
    assert!(out.success());
    thread::sleep(Duration::from_secs(2));
    let findings = t.sluice.events().iter().filter(|e| is_drop(e)).count();
    assert_eq!(findings, 1);
}
