use super::samples;
use super::*;

fn json_of(event: Event) -> Value {
    to_json(&event, &samples::ctx())
}

#[test]
fn allowed_connect_is_network_open_allowed() {
    let v = json_of(Event::ConnectionOpen(samples::open(Outcome::Allowed)));
    assert_eq!(v["class_uid"], 4001);
    assert_eq!(v["category_uid"], 4);
    assert_eq!(v["activity_id"], 1);
    assert_eq!(v["activity_name"], "Open");
    assert_eq!(v["type_uid"], 400_101);
    assert_eq!(v["type_name"], "Network Activity: Open");
    assert_eq!(v["time"], 1_710_000_307_123_u64);
    assert_eq!(v["severity_id"], 1);
    assert_eq!(v["severity"], "Informational");
    assert_eq!(v["status_id"], 1);
    assert_eq!(v["status_code"], "200");
    assert_eq!(v["message"], "CONNECT allowed api.github.com:443");
    assert_eq!(v["action_id"], 1);
    assert_eq!(v["disposition_id"], 1);
    assert_eq!(v["disposition"], "Allowed");
    assert_eq!(
        v["firewall_rule"],
        json!({ "name": "github", "type": "l4" })
    );
    assert_eq!(
        v["dst_endpoint"],
        json!({ "hostname": "api.github.com", "ip": "140.82.121.6", "port": 443 })
    );
    assert_eq!(
        v["src_endpoint"],
        json!({ "ip": "127.0.0.1", "port": 50_123 })
    );
    assert_eq!(v["connection_info"]["direction_id"], 2);
    assert_eq!(v["connection_info"]["protocol_name"], "tcp");
    assert_eq!(v["metadata"]["version"], "1.8.0");
    assert_eq!(v["metadata"]["product"]["name"], "sluice");
    assert_eq!(v["metadata"]["uid"], "i-1:7:open");
    assert_eq!(v["metadata"]["correlation_uid"], "i-1:7");
    assert_eq!(
        v["metadata"]["profiles"],
        json!(["host", "security_control"])
    );
    assert_eq!(v["device"]["hostname"], "build-7");
    assert!(v.get("status_detail").is_none());
}

#[test]
fn actor_carries_the_ancestor_chain_nearest_first() {
    let v = json_of(Event::ConnectionOpen(samples::open(Outcome::Allowed)));
    let p = &v["actor"]["process"];
    assert_eq!(p["pid"], 4242);
    assert_eq!(p["name"], "curl");
    assert_eq!(p["path"], "/usr/bin/curl");
    assert_eq!(p["cmd_line"], "curl -s https://api.github.com/");
    assert_eq!(p["user"]["uid"], "1000");
    assert_eq!(p["parent_process"]["pid"], 4000);
    assert_eq!(p["parent_process"]["name"], "bash");
    assert_eq!(p["parent_process"]["parent_process"]["pid"], 1);
    assert_eq!(
        p["parent_process"]["parent_process"]["cmd_line"],
        "/sbin/init"
    );
    assert!(
        p["parent_process"]["parent_process"]
            .get("parent_process")
            .is_none()
    );
}

#[test]
fn parent_chain_is_bounded() {
    let mut e = samples::open(Outcome::Allowed);
    if let Some(c) = e.caller.as_mut().map(std::sync::Arc::make_mut) {
        c.ancestors = (0..100)
            .map(|pid| Process {
                pid,
                ..Process::default()
            })
            .collect();
    }
    let v = json_of(Event::ConnectionOpen(e));
    let mut p = &v["actor"]["process"];
    let mut depth = 0;
    while let Some(parent) = p.get("parent_process") {
        p = parent;
        depth += 1;
    }
    assert_eq!(depth, MAX_PARENT_DEPTH);
}

#[test]
fn a_deep_chain_of_long_command_lines_stays_small() {
    let mut e = samples::open(Outcome::Allowed);
    let line = |pid: u32| vec![format!("/bin/pad{pid}"), "x".repeat(2000)];
    if let Some(c) = e.caller.as_mut().map(std::sync::Arc::make_mut) {
        c.process.cmdline = line(0);
        c.ancestors = (1..=40)
            .map(|pid| Process {
                pid,
                cmdline: line(pid),
                ..Process::default()
            })
            .collect();
    }
    let written = line_of(&Event::ConnectionOpen(e));
    assert!(written.len() < 16 * 1024, "{} bytes", written.len());
    let v: Value = serde_json::from_slice(&written).expect("JSON");
    let p = &v["actor"]["process"];
    // The caller and its nearest ancestors are whole; a farther one says what it lost.
    assert_eq!(p["cmd_line"].as_str().map(str::len), Some(2010));
    assert_eq!(
        p["parent_process"]["cmd_line"].as_str().map(str::len),
        Some(2010)
    );
    let mut q = p;
    let mut cut = 0;
    while let Some(parent) = q.get("parent_process") {
        q = parent;
        if q["cmd_line"].as_str().is_some_and(|l| l.contains("bytes]")) {
            cut += 1;
        }
    }
    assert!(cut >= 1, "{v}");
    assert_eq!(q["pid"], MAX_PARENT_DEPTH);
}

#[test]
fn denied_connect_is_blocked_medium_with_reason() {
    let v = json_of(Event::ConnectionOpen(samples::open(Outcome::Denied)));
    assert_eq!(v["activity_id"], 1);
    assert_eq!(v["severity_id"], 3);
    assert_eq!(v["status_id"], 2);
    assert_eq!(v["status"], "Failure");
    assert_eq!(v["status_code"], "403");
    assert_eq!(v["action"], "Denied");
    assert_eq!(v["disposition_id"], 2);
    assert_eq!(v["disposition"], "Blocked");
    assert_eq!(v["message"], "CONNECT denied example.com:443");
    assert_eq!(
        v["status_detail"],
        "endpoint example.com:443 is not allowed by any policy"
    );
    assert_eq!(v["firewall_rule"]["name"], "-");
    assert_eq!(
        v["dst_endpoint"],
        json!({ "hostname": "example.com", "port": 443 })
    );
}

#[test]
fn audited_is_allowed_and_detected() {
    let v = json_of(Event::ConnectionOpen(samples::open(Outcome::Audited)));
    assert_eq!(v["action_id"], 1);
    assert_eq!(v["disposition_id"], 15);
    assert_eq!(v["disposition"], "Detected");
    assert_eq!(v["severity"], "Low");
    assert_eq!(v["status"], "Success");
}

#[test]
fn unknown_caller_has_no_actor() {
    let mut e = samples::open(Outcome::Denied);
    e.caller = None;
    e.engine = Engine::Identity;
    let v = json_of(Event::ConnectionOpen(e));
    assert!(v.get("actor").is_none());
    assert_eq!(v["firewall_rule"]["type"], "identity");
}

#[test]
fn ip_literal_destination_goes_to_ip() {
    let mut e = samples::open(Outcome::Allowed);
    e.dst.authority = Authority::new("[2001:db8::1]", 443);
    e.dst.ip = None;
    let v = json_of(Event::ConnectionOpen(e));
    assert_eq!(
        v["dst_endpoint"],
        json!({ "ip": "2001:db8::1", "port": 443 })
    );
    assert_eq!(v["message"], "CONNECT allowed [2001:db8::1]:443");
}

#[test]
fn close_reports_traffic_from_the_clients_side() {
    let v = json_of(Event::ConnectionClose(samples::close()));
    assert_eq!(v["activity_id"], 2);
    assert_eq!(v["type_uid"], 400_102);
    assert_eq!(
        v["traffic"],
        json!({ "bytes_in": 4096, "bytes_out": 517, "bytes": 4613 })
    );
    assert_eq!(v["duration"], 1250);

    let mut huge = samples::close();
    huge.bytes_out = u64::MAX;
    huge.duration_ms = u64::MAX;
    let v = json_of(Event::ConnectionClose(huge));
    assert_eq!(v["traffic"]["bytes_in"], i64::MAX);
    assert_eq!(v["traffic"]["bytes"], i64::MAX);
    assert_eq!(v["duration"], i64::MAX);
    assert_eq!(v["status_detail"], "client closed");
    assert_eq!(
        v["message"],
        "CONNECT closed api.github.com:443: client closed"
    );
    assert!(v.get("action_id").is_none());
    assert_eq!(v["metadata"]["correlation_uid"], "i-1:7");
}

#[test]
fn http_request_maps_method_url_response_and_credential_names() {
    let v = json_of(Event::HttpRequest(samples::request(Outcome::Allowed)));
    assert_eq!(v["class_uid"], 4002);
    assert_eq!(v["activity_id"], 3);
    assert_eq!(v["activity_name"], "Get");
    assert_eq!(v["type_uid"], 400_203);
    assert_eq!(v["type_name"], "HTTP Activity: Get");
    assert_eq!(v["message"], "HTTP allowed GET h:8080/path");
    assert_eq!(
        v["http_request"],
        json!({
            "http_method": "GET",
            "url": {
                "scheme": "http",
                "hostname": "h",
                "port": 8080,
                "path": "/path",
                "url_string": "http://h:8080/path",
            },
        })
    );
    assert_eq!(v["http_response"], json!({ "code": 200 }));
    assert_eq!(v["status_code"], "200");
    assert_eq!(
        v["firewall_rule"],
        json!({ "name": "p", "type": "l7", "desc": "GET /path" })
    );
    assert_eq!(
        v["unmapped"],
        json!({ "credentials_injected": ["GITHUB_TOKEN"] })
    );
}

#[test]
fn http_other_method_is_activity_other() {
    let mut e = samples::request(Outcome::Denied);
    e.method = "PROPFIND".into();
    let v = json_of(Event::HttpRequest(e));
    assert_eq!(v["activity_id"], 99);
    assert_eq!(v["activity_name"], "PROPFIND");
    assert_eq!(v["type_name"], "HTTP Activity: Other");
    assert_eq!(v["type_uid"], 400_299);
    assert!(v["http_request"].get("http_method").is_none());
    assert_eq!(v["unmapped"]["http_method"], "PROPFIND");
    assert_eq!(v["action"], "Denied");
}

#[test]
fn queries_never_reach_the_json() {
    let mut e = samples::request(Outcome::Allowed);
    e.path = "/search?q=hunter2&token=abc#frag".into();
    let text = json_of(Event::HttpRequest(e)).to_string();
    assert!(!text.contains('?'), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(!text.contains("frag"), "{text}");
    assert!(text.contains("http://h:8080/search"), "{text}");
}

#[test]
fn url_string_omits_default_ports() {
    let at = Authority::new;
    assert_eq!(url_string("https", &at("a", 443), "/x"), "https://a/x");
    assert_eq!(url_string("http", &at("a", 80), "/x"), "http://a/x");
    assert_eq!(url_string("http", &at("a", 443), "/x"), "http://a:443/x");
    assert_eq!(
        url_string("https", &at("::1", 8443), "/"),
        "https://[::1]:8443/"
    );
    assert_eq!(
        url_string("https", &at("[::1]", 443), "/"),
        "https://[::1]/"
    );
}

#[test]
fn policy_change_is_device_config_state_change() {
    let v = json_of(Event::PolicyChange(samples::policy_loaded()));
    assert_eq!(v["class_uid"], 5019);
    assert_eq!(v["category_uid"], 5);
    assert_eq!(v["category_name"], "Discovery");
    assert_eq!(v["activity_id"], 1);
    assert_eq!(v["type_uid"], 501_901);
    assert_eq!(v["severity"], "Informational");
    assert_eq!(
        v["message"],
        "policy loaded from a.yaml, b.yaml (3 entries, 5 endpoints)"
    );
    assert_eq!(v["state_id"], 2);
    assert_eq!(v["device"]["type_id"], 0);
    assert_eq!(v["unmapped"]["policy_hash"], "sha256:abc123");

    let v = json_of(Event::PolicyChange(samples::policy_failed()));
    assert_eq!(v["severity_id"], 4);
    assert_eq!(v["status"], "Failure");
    assert_eq!(
        v["message"],
        "policy load failed: a.yaml:3:5: unknown field `hots`"
    );
    assert_eq!(v["status_detail"], "a.yaml:3:5: unknown field `hots`");
    assert!(v.get("state_id").is_none());
    assert_eq!(v["unmapped"]["policy_errors"][1], "a.yaml:9:1: second");
}

#[test]
fn lifecycle_is_application_lifecycle() {
    let v = json_of(Event::Lifecycle(samples::start()));
    assert_eq!(v["class_uid"], 6002);
    assert_eq!(v["activity_id"], 3);
    assert_eq!(v["type_uid"], 600_203);
    assert_eq!(
        v["app"],
        json!({ "name": "sluice", "vendor_name": "sluice", "version": "0.1.0" })
    );
    assert_eq!(
        v["message"],
        "sluice 0.1.0 started: listening on 127.0.0.1:3128"
    );
    let mut stop = samples::start();
    stop.started = false;
    stop.message = String::new();
    let v = json_of(Event::Lifecycle(stop));
    assert_eq!(v["activity_name"], "Stop");
    assert_eq!(v["message"], "sluice 0.1.0 stopped");
    assert_eq!(v["metadata"]["uid"], "i-1:stop");
}

#[test]
fn a_transparent_connection_says_so() {
    let mut e = samples::open(Outcome::Allowed);
    e.via = Via::Transparent;
    let v = json_of(Event::ConnectionOpen(e));
    assert_eq!(v["message"], "TRANSPARENT allowed api.github.com:443");
    assert_eq!(v["class_uid"], 4001);
}

/// One line of `event`, as the audit sink writes it.
fn line_of(event: &Event) -> Vec<u8> {
    let mut out = Vec::new();
    write_json(event, &samples::ctx(), &mut out);
    out
}

#[test]
fn a_callers_json_written_once_is_what_writing_it_again_would_give() {
    // A caller with the characters JSON escapes, nested ancestors, an unreadable exe.
    let mut e = samples::open(Outcome::Allowed);
    if let Some(c) = e.caller.as_mut().map(std::sync::Arc::make_mut) {
        c.process.cmdline = vec![
            "python3".into(),
            "-c".into(),
            "print(\"a\\tb\")\n# é \u{1}".into(),
        ];
        c.ancestors[0].exe = String::new();
    }
    let caller = e.caller.clone().expect("the sample has a caller");
    let event = Event::ConnectionOpen(e);
    let first = line_of(&event);
    // The second event reuses the bytes the first wrote.
    let again = line_of(&event);
    assert_eq!(first, again);
    // The reused bytes are the tree the process chain builds, field for field.
    let tree = serde_json::to_value(ProcessObject::caller(&caller.process, &caller.ancestors))
        .expect("a process serializes");
    let written = serde_json::to_string(&ProcessObject::caller(&caller.process, &caller.ancestors))
        .expect("a process serializes");
    let spliced = format!("\"actor\":{{\"process\":{written}}},");
    assert!(
        String::from_utf8_lossy(&again).contains(&spliced),
        "{}",
        String::from_utf8_lossy(&again)
    );
    let parsed: Value = serde_json::from_slice(&again).expect("the line is JSON");
    assert_eq!(parsed["actor"]["process"], tree);
    assert_eq!(parsed, to_json(&event, &samples::ctx()));
    // A copy of the caller (which may be changed) writes its own.
    let mut changed = (*caller).clone();
    changed.process.cmdline = vec!["wget".into()];
    let mut e = samples::open(Outcome::Allowed);
    e.caller = Some(std::sync::Arc::new(changed));
    let v = json_of(Event::ConnectionOpen(e));
    assert_eq!(v["actor"]["process"]["cmd_line"], "wget");
}

/// A finding's destination brackets an IPv6 literal (`[::1]:443`, not `::1:443`), and what
/// guards against it is the finding's own, not read from its type's spelling.
#[test]
fn a_finding_names_an_ipv6_destination_in_brackets_and_its_guard() {
    let finding = |host: &str, guard: crate::Guard| {
        Event::Finding(Finding {
            time: std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_710_000_307),
            id: 7,
            caller: None,
            src: "10.0.0.2:50000".parse().unwrap(),
            dst: crate::Destination {
                authority: Authority::new(host.to_string(), 443),
                ip: None,
            },
            kind: "sluice.http.request_smuggling".to_string(),
            guard,
            title: "t".to_string(),
            credential: None,
            policy: None,
            severity: Severity::High,
        })
    };
    let v = json_of(finding("::1", crate::Guard::Http));
    assert_eq!(v["unmapped"]["destination"], "[::1]:443");
    assert_eq!(v["firewall_rule"]["type"], "http");
    let v = json_of(finding("api.test", crate::Guard::Audit));
    assert_eq!(v["unmapped"]["destination"], "api.test:443");
    assert_eq!(v["firewall_rule"]["type"], "audit");
}
