//! Every kind of audit event sluice builds is a valid OCSF 1.8.0 event, by the offline schema
//! validator (`sluice_e2e::ocsf`), and so is every line the sink writes to its file. Runs in
//! process through the `sluice` library: no binary needed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use sluice::audit::ocsf::{self, Context};
use sluice::audit::{
    AuditSink, Authority, Caller, ConnectionClose, ConnectionOpen, Destination, Engine, Event,
    HttpRequest, Lifecycle, LogFormat, Outcome, PolicyChange, Process, Via,
};
use sluice_e2e::ocsf::{validate, validate_line};

const ENGINES: [Engine; 6] = [
    Engine::L4,
    Engine::L7,
    Engine::Ssrf,
    Engine::Identity,
    Engine::HttpParser,
    Engine::Proxy,
];

fn ctx() -> Context {
    Context {
        instance: "test-1".into(),
        hostname: "ci-runner".into(),
    }
}

fn time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(1_710_000_307_123)
}

fn caller(depth: u32) -> Arc<Caller> {
    Arc::new(Caller {
        process: Process {
            pid: 4242,
            exe: "/usr/bin/curl".into(),
            cmdline: vec!["curl".into(), "-H".into(), "X-Debug: 1".into()],
            uid: Some(1000),
        },
        ancestors: (0..depth)
            .map(|i| Process {
                pid: 4000 - i,
                exe: if i % 2 == 0 { "/usr/bin/bash" } else { "" }.into(),
                cmdline: vec![],
                uid: (i % 3 != 0).then_some(i),
            })
            .collect(),
        ..Caller::default()
    })
}

fn dst(host: &str, port: u16, ip: Option<IpAddr>) -> Destination {
    Destination::new(Authority::new(host, port), ip)
}

fn src() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 50_123)
}

fn opens() -> Vec<Event> {
    let mut events = Vec::new();
    for outcome in [Outcome::Allowed, Outcome::Denied, Outcome::Audited] {
        for engine in ENGINES {
            for (via, caller) in [
                (Via::Connect, Some(caller(3))),
                (Via::Forward, None),
                (Via::Connect, Some(caller(100))),
            ] {
                events.push(Event::ConnectionOpen(ConnectionOpen {
                    time: time(),
                    id: 1,
                    via,
                    caller,
                    src: src(),
                    dst: dst(
                        "api.github.com",
                        443,
                        Some(IpAddr::V4(Ipv4Addr::new(140, 82, 121, 6))),
                    ),
                    outcome,
                    policy: (outcome != Outcome::Denied).then(|| "github".into()),
                    engine,
                    reason: (outcome != Outcome::Allowed).then(|| "no\r\nmatch".into()),
                    status: if outcome == Outcome::Denied { 403 } else { 200 },
                }));
            }
        }
    }
    for host in ["[2001:db8::1]", "2001:db8::1", "10.0.0.1"] {
        events.push(Event::ConnectionOpen(ConnectionOpen {
            time: time(),
            id: 2,
            via: Via::Connect,
            caller: Some(caller(1)),
            src: SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 40_000),
            dst: dst(host, 8443, None),
            outcome: Outcome::Denied,
            policy: None,
            engine: Engine::Ssrf,
            reason: Some("internal address".into()),
            status: 403,
        }));
    }
    events
}

fn closes() -> Vec<Event> {
    [None, Some(caller(2))]
        .into_iter()
        .map(|caller| {
            let duration_ms = if caller.is_some() { u64::MAX } else { 1250 };
            let engine = if caller.is_some() {
                Engine::L7
            } else {
                Engine::L4
            };
            Event::ConnectionClose(ConnectionClose {
                time: time(),
                id: 1,
                via: Via::Connect,
                caller,
                src: src(),
                dst: dst("api.github.com", 443, None),
                policy: Some("github".into()),
                engine,
                bytes_in: 517,
                bytes_out: u64::MAX,
                // Saturated to OCSF's signed 64-bit `long_t`.
                duration_ms,
                reason: String::new(),
            })
        })
        .collect()
}

fn request(method: &str, scheme: &'static str, port: u16, path: &str) -> HttpRequest {
    HttpRequest {
        time: time(),
        id: 3,
        caller: Some(caller(1)),
        src: src(),
        dst: dst("api.github.com", port, None),
        method: method.into(),
        scheme,
        path: path.into(),
        outcome: Outcome::Allowed,
        policy: Some("github".into()),
        engine: Engine::L7,
        rule: Some("GET /repos/**".into()),
        reason: None,
        status: Some(200),
        bytes_in: 100,
        bytes_out: 200,
        duration_ms: 12,
        credentials: vec!["GITHUB_TOKEN".into(), "NPM_TOKEN".into()],
        signed: None,
    }
}

fn requests() -> Vec<Event> {
    let mut events = Vec::new();
    for method in [
        "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "CONNECT", "PROPFIND",
        "get",
    ] {
        for outcome in [Outcome::Allowed, Outcome::Denied, Outcome::Audited] {
            let mut r = request(method, "https", 443, "/repos/a/b");
            r.outcome = outcome;
            r.reason = (outcome != Outcome::Allowed).then(|| "GET /x not permitted".into());
            events.push(Event::HttpRequest(r));
        }
    }
    let mut no_status = request("GET", "http", 8080, "/");
    no_status.status = None;
    no_status.credentials.clear();
    no_status.caller = None;
    no_status.rule = None;
    events.push(Event::HttpRequest(no_status));
    events
}

fn others() -> Vec<Event> {
    vec![
        Event::PolicyChange(PolicyChange {
            time: time(),
            sources: vec!["a.yaml".into(), "b.yaml".into()],
            result: Ok((1, 1)),
            hash: Some("sha256:00".into()),
            warnings: 2,
        }),
        Event::PolicyChange(PolicyChange {
            time: time(),
            sources: vec!["(embedded default)".into()],
            result: Err(vec!["a.yaml:1:1: bad".into()]),
            hash: None,
            warnings: 0,
        }),
        Event::PolicyChange(PolicyChange {
            time: time(),
            sources: vec![],
            result: Err(vec![]),
            hash: None,
            warnings: 0,
        }),
        Event::Lifecycle(Lifecycle {
            time: time(),
            started: true,
            version: "0.1.0",
            message: "listening on 127.0.0.1:3128".into(),
        }),
        Event::Lifecycle(Lifecycle {
            time: SystemTime::UNIX_EPOCH,
            started: false,
            version: "0.1.0",
            message: String::new(),
        }),
    ]
}

fn all_events() -> Vec<Event> {
    [opens(), closes(), requests(), others()].concat()
}

#[test]
fn every_event_kind_is_valid_ocsf() {
    let events = all_events();
    assert!(events.len() >= 90, "{} events", events.len());
    for event in &events {
        let json = ocsf::to_json(event, &ctx());
        if let Err(errors) = validate(&json) {
            panic!("{json:#}\nis not valid OCSF 1.8.0:\n{errors:#?}");
        }
    }
}

#[test]
fn queries_never_reach_the_audit() {
    let r = request(
        "GET",
        "https",
        443,
        "/search?q=hunter2&access_token=abc#frag",
    );
    let json = ocsf::to_json(&Event::HttpRequest(r.clone()), &ctx()).to_string();
    assert!(!json.contains('?'), "{json}");
    assert!(
        !json.contains("hunter2") && !json.contains("access_token"),
        "{json}"
    );
    let line = sluice::audit::shorthand::shorthand(&Event::HttpRequest(r));
    assert!(!line.contains('?') && !line.contains("hunter2"), "{line}");
    assert!(line.contains("https://api.github.com/search "), "{line}");
}

#[test]
fn credential_names_are_reported_by_name() {
    let json = ocsf::to_json(
        &Event::HttpRequest(request("GET", "https", 443, "/")),
        &ctx(),
    );
    assert_eq!(
        json["unmapped"]["credentials_injected"],
        serde_json::json!(["GITHUB_TOKEN", "NPM_TOKEN"])
    );
}

#[test]
fn the_sink_writes_valid_ocsf_lines() {
    let path = std::env::temp_dir().join(format!(
        "sluice-ocsf-events-{}-{}.jsonl",
        std::process::id(),
        ocsf::epoch_millis(SystemTime::now())
    ));
    let target = path.to_str().expect("a UTF-8 temp path");
    let sink = AuditSink::open(target, LogFormat::Shorthand).expect("open the audit log");
    // A few of each kind: their human lines go to the test's stderr.
    let events: Vec<Event> = [
        &opens()[..3],
        &closes()[..1],
        &requests()[..3],
        &others()[..],
    ]
    .concat();
    for event in &events {
        sink.emit(event);
    }
    let text = std::fs::read_to_string(&path).expect("read the audit log");
    std::fs::remove_file(&path).expect("remove the audit log");
    assert_eq!(text.lines().count(), events.len());
    let ctx = sink.context().expect("an enabled sink");
    for line in text.lines() {
        let event: Value = match validate_line(line) {
            Ok(event) => event,
            Err(errors) => panic!("{line}\nis not valid OCSF 1.8.0:\n{errors:#?}"),
        };
        assert_eq!(event["device"]["hostname"], ctx.hostname.as_str());
        let uid = event["metadata"]["uid"].as_str().unwrap_or_default();
        assert!(uid.starts_with(&format!("{}:", ctx.instance)), "{uid}");
    }
}
