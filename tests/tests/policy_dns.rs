//! The policy DNS (`sluice run --dns-listen`), asked by a real DNS client (dnspython, over UDP
//! and TCP): names some policy endpoint allows get their vetted addresses, everything else
//! gets REFUSED without being looked up, allowed names that point at loopback or metadata
//! addresses are refused like connections to them would be, and every reply is an OCSF DNS
//! Activity event that validates against the schema copy.
//!
//! Every name here is answered from `--resolve` overrides: nothing is sent to a real resolver.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::package_dir;
use sluice_e2e::proxy::{Sluice, assert_events_valid};

const POLICY: &str = r#"
version: 1
network_policies:
  api:
    name: api
    endpoints:
      - { host: api.example.test, port: 443 }
      - { host: "*.svc.example.test", port: 5432, protocol: tcp }
      - { host: loop.example.test, port: 443 }
      - { host: meta.example.test, port: 443 }
    binaries:
      - { path: /usr/bin/curl }
"#;

/// sluice with the policy DNS on ephemeral loopback ports (IPv4 and IPv6), and those.
fn start() -> (Sluice, SocketAddr, SocketAddr) {
    start_with(&[])
}

/// [`start`] with more flags for sluice.
fn start_with(extra: &[&str]) -> (Sluice, SocketAddr, SocketAddr) {
    let mut args = vec![
        "--dns-listen",
        "127.0.0.1:0",
        "--dns-listen",
        "[::1]:0",
        "--resolve",
        "api.example.test=93.184.215.7,2606:2800:21f::7",
        "--resolve",
        "db.svc.example.test=93.184.215.8",
        "--resolve",
        "loop.example.test=127.0.0.1",
        "--resolve",
        "meta.example.test=169.254.169.254",
        "--resolve",
        "elsewhere.example.org=93.184.215.9",
    ];
    args.extend_from_slice(extra);
    let sluice = Sluice::start(POLICY, &args);
    match dns_listeners(&sluice, 2)[..] {
        [v4, v6] if v4.is_ipv4() => (sluice, v4, v6),
        [v6, v4] => (sluice, v4, v6),
        _ => unreachable!("two listeners"),
    }
}

/// The `count` policy DNS listeners `sluice` announced, in the order it did.
fn dns_listeners(sluice: &Sluice, count: usize) -> Vec<SocketAddr> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let dns: Vec<SocketAddr> = sluice
            .stderr()
            .lines()
            .filter_map(|l| {
                l.strip_prefix("sluice: listening on ")
                    .filter(|rest| rest.contains("(policy DNS"))
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|a| a.parse().ok())
            })
            .collect();
        if dns.len() >= count {
            return dns;
        }
        assert!(
            Instant::now() < deadline,
            "no policy DNS listener announced:\n{}",
            sluice.stderr()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// One question through dnspython.
fn ask(dns: SocketAddr, name: &str, rtype: &str, transport: &str) -> Value {
    let out = Command::new("python3")
        .arg(package_dir().join("clients/dns_ask.py"))
        .args([
            &dns.ip().to_string(),
            &dns.port().to_string(),
            name,
            rtype,
            transport,
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "dns_ask.py failed (is dnspython installed? tests/clients/requirements.txt): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: Value = serde_json::from_slice(&out.stdout).expect("dns_ask.py prints JSON");
    assert_eq!(reply["id_matches"], true, "{reply}");
    reply
}

fn dns_events(sluice: &Sluice) -> Vec<Value> {
    sluice
        .events()
        .into_iter()
        .filter(|e| e["class_uid"] == 4003)
        .collect()
}

#[test]
fn allowed_names_are_answered_over_udp_and_tcp_with_their_vetted_addresses() {
    let (sluice, dns, dns6) = start();
    assert!(dns6.is_ipv6());
    for (dns, transport) in [(dns, "udp"), (dns, "tcp"), (dns6, "udp"), (dns6, "tcp")] {
        let a = ask(dns, "api.example.test", "A", transport);
        assert_eq!(a["rcode"], "NOERROR", "{a}");
        assert_eq!(a["answers"], serde_json::json!(["93.184.215.7"]), "{a}");
        assert_eq!(a["ttls"], serde_json::json!([30]), "{a}");
        let aaaa = ask(dns, "API.Example.Test.", "AAAA", transport);
        assert_eq!(aaaa["rcode"], "NOERROR", "{aaaa}");
        assert_eq!(
            aaaa["answers"],
            serde_json::json!(["2606:2800:21f::7"]),
            "{aaaa}"
        );
        // A wildcard pattern of a `protocol: tcp` endpoint counts.
        let db = ask(dns, "db.svc.example.test", "A", transport);
        assert_eq!(db["answers"], serde_json::json!(["93.184.215.8"]), "{db}");
        // Other types of an allowed name: NOERROR, no records.
        let mx = ask(dns, "api.example.test", "MX", transport);
        assert_eq!(mx["rcode"], "NOERROR", "{mx}");
        assert_eq!(mx["answers"], serde_json::json!([]), "{mx}");
    }
    let events = dns_events(&sluice);
    let answered = events
        .iter()
        .find(|e| e["query"]["hostname"] == "api.example.test" && e["query"]["type"] == "A")
        .expect("an event for the answer");
    assert_eq!(answered["rcode_id"], 0);
    assert_eq!(answered["action_id"], 1);
    assert_eq!(answered["answers"][0]["rdata"], "93.184.215.7");
    assert_eq!(answered["firewall_rule"]["name"], "api");
    assert!(
        events
            .iter()
            .any(|e| e["connection_info"]["protocol_name"] == "tcp"),
        "TCP questions are audited as TCP"
    );
    assert_events_valid(&sluice);
}

#[test]
fn names_no_policy_allows_are_refused_and_audited() {
    let (sluice, dns, _) = start();
    for transport in ["udp", "tcp"] {
        for (name, why) in [
            ("elsewhere.example.org", "no policy endpoint allows"),
            ("svc.example.test", "no policy endpoint allows"),
            ("metadata.google.internal", "metadata"),
            ("loop.example.test", "may not dial"),
            ("meta.example.test", "may not dial"),
        ] {
            let r = ask(dns, name, "A", transport);
            assert_eq!(r["rcode"], "REFUSED", "{name} over {transport}: {r}");
            assert_eq!(r["answers"], serde_json::json!([]), "{r}");
            let event = sluice.wait_event(&format!("refusing {name}"), |e| {
                e["class_uid"] == 4003
                    && e["query"]["hostname"] == name
                    && e["connection_info"]["protocol_name"] == transport
            });
            assert_eq!(event["rcode_id"], 5, "{event}");
            assert_eq!(event["action_id"], 2, "{event}");
            assert_eq!(event["disposition_id"], 2, "{event}");
            let detail = event["status_detail"].as_str().unwrap_or_default();
            assert!(detail.contains(why), "{name}: {detail}");
        }
    }
    assert_events_valid(&sluice);
}

#[test]
fn dns_listen_is_refused_by_exec() {
    let out = Command::new(sluice_e2e::sluice_bin())
        .args(["exec", "--dns-listen", "127.0.0.1:0", "--", "true"])
        .output()
        .expect("sluice exec");
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dns-listen is for `sluice run`"));
}

/// A DNS query for `name` (type A, class IN, recursion desired), built by hand so the test
/// can send hundreds quickly.
fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = Vec::new();
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        q.push(u8::try_from(label.len()).unwrap());
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// The id and response code of a reply.
fn id_and_rcode(reply: &[u8]) -> (u16, u8) {
    assert!(reply.len() >= 12, "{reply:?}");
    assert!(reply[2] & 0x80 != 0, "not a response: {reply:?}");
    (u16::from_be_bytes([reply[0], reply[1]]), reply[3] & 0x0f)
}

const NOERROR: u8 = 0;
const REFUSED: u8 = 5;

/// A TCP connection to `to` from the loopback address `from`.
fn tcp_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    s.connect_timeout(&to.into(), Duration::from_secs(2))
        .unwrap();
    s.into()
}

/// One question over TCP (RFC 7766 framing) on `s`: the reply's id and response code.
fn ask_tcp(s: &mut TcpStream, id: u16, name: &str) -> (u16, u8) {
    let q = query(id, name);
    let mut framed = u16::try_from(q.len()).unwrap().to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    s.write_all(&framed).unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).unwrap();
    let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut reply).unwrap();
    id_and_rcode(&reply)
}

/// `sluice_dns_queries_total{result}`, scraped.
fn dns_metric(sluice: &Sluice, result: &str) -> f64 {
    let (status, text) = sluice_e2e::scrape::openmetrics(sluice_e2e::scrape::metrics_addr(sluice));
    assert_eq!(status, 200);
    let samples = sluice_e2e::scrape::parse(&text);
    sluice_e2e::scrape::value(&samples, "sluice_dns_queries_total", &[("result", result)])
}

#[test]
fn a_flooding_client_is_refused_past_its_rate_and_audited_once_while_others_are_answered() {
    const RATE: usize = 20;
    const SENT: u16 = 300;
    let (sluice, dns, _) = start_with(&[
        "--max-dns-queries-per-client-per-sec",
        "20",
        "--metrics-listen",
        "127.0.0.1:0",
    ]);
    let flood = UdpSocket::bind("127.0.0.1:0").unwrap();
    flood
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let reader = flood.try_clone().unwrap();
    let replies = thread::spawn(move || {
        let mut got = BTreeMap::new();
        let mut buf = [0u8; 1500];
        while let Ok(n) = reader.recv(&mut buf) {
            let (id, rcode) = id_and_rcode(&buf[..n]);
            assert!(got.insert(id, rcode).is_none(), "two replies to {id}");
        }
        got
    });
    let started = Instant::now();
    for id in 0..SENT {
        flood.send_to(&query(id, "api.example.test"), dns).unwrap();
        thread::sleep(Duration::from_millis(1));
    }
    let took = started.elapsed();
    let got = replies.join().unwrap();
    // Every question got an answer: REFUSED past the rate, never silence.
    assert_eq!(got.len(), usize::from(SENT), "unanswered questions");
    let answered = got.values().filter(|r| **r == NOERROR).count();
    let refused = got.values().filter(|r| **r == REFUSED).count();
    assert_eq!(answered + refused, usize::from(SENT), "{got:?}");
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let allowed = RATE + (took.as_secs_f64() * RATE as f64).ceil() as usize + 1;
    assert!(
        answered >= RATE && answered <= allowed,
        "{answered} answered in {took:?} at {RATE}/s"
    );
    // Another client (another address) is answered meanwhile and after.
    let other = UdpSocket::bind("127.0.0.2:0").unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    for id in 0..5 {
        other.send_to(&query(id, "api.example.test"), dns).unwrap();
        let mut buf = [0u8; 1500];
        let n = other.recv(&mut buf).unwrap();
        assert_eq!(id_and_rcode(&buf[..n]), (id, NOERROR));
    }
    // The audit holds each answer and one event for the whole burst of refusals.
    let events = dns_events(&sluice);
    let from_flood: Vec<&Value> = events
        .iter()
        .filter(|e| e["src_endpoint"]["port"] == flood.local_addr().unwrap().port())
        .collect();
    let limited: Vec<&&Value> = from_flood
        .iter()
        .filter(|e| {
            e["status_detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("rate limit"))
        })
        .collect();
    assert_eq!(limited.len(), 1, "{limited:#?}");
    assert_eq!(limited[0]["rcode_id"], 5);
    assert_eq!(limited[0]["action_id"], 2);
    assert_eq!(limited[0]["query"]["hostname"], "api.example.test");
    assert_eq!(from_flood.len(), answered + 1);
    // Every refusal is counted: the audited one as refused, the rest as rate_limited.
    assert_eq!(dns_metric(&sluice, "refused"), 1.0);
    assert_eq!(dns_metric(&sluice, "rate_limited"), (refused - 1) as f64);
    assert_events_valid(&sluice);
}

#[test]
fn slow_tcp_clients_cannot_hold_the_policy_dns() {
    let (sluice, dns, _) = start();
    // A slow loris: many connections from one address, each sending one byte of a length.
    let held: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = tcp_from([127, 0, 0, 2], dns);
            s.write_all(&[0]).unwrap();
            s
        })
        .collect();
    thread::sleep(Duration::from_millis(200));
    // Another client is answered promptly over TCP, again and again.
    for id in 0..3 {
        let started = Instant::now();
        let mut s = tcp_from([127, 0, 0, 1], dns);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(ask_tcp(&mut s, id, "api.example.test"), (id, NOERROR));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
    }
    // The slow loris's last connection (not closed to make room) is cut off by the read
    // timeout, not held for ever.
    let mut last = held.into_iter().last().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = last.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "a half question got an answer");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the slow connection lived {:?} more",
        started.elapsed()
    );
    // One connection answers at most 32 questions, then is closed.
    let mut s = tcp_from([127, 0, 0, 3], dns);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answered = 0;
    for id in 0..40 {
        let q = query(id, "api.example.test");
        let mut framed = u16::try_from(q.len()).unwrap().to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        if s.write_all(&framed).is_err() {
            break;
        }
    }
    loop {
        let mut len = [0u8; 2];
        if s.read_exact(&mut len).is_err() {
            break;
        }
        let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(id_and_rcode(&reply).1, NOERROR);
        answered += 1;
    }
    assert_eq!(answered, 32, "questions answered on one connection");
    assert_events_valid(&sluice);
}

/// A name server that reads every question and never answers, on `ip`:53 (UDP).
fn silent_name_server(ip: [u8; 4]) -> UdpSocket {
    let s = UdpSocket::bind(SocketAddr::from((ip, 53))).expect("bind a name server on port 53");
    let reader = s.try_clone().unwrap();
    thread::spawn(move || {
        let mut buf = [0u8; 1500];
        while reader.recv(&mut buf).is_ok() {}
    });
    s
}

#[test]
fn one_client_cannot_take_every_question_in_flight() {
    if !sluice_e2e::proxy::privileged("one_client_cannot_take_every_question_in_flight") {
        return;
    }
    // Allowed names the real resolver must look up hang for its whole timeout: a client that
    // asks hundreds of them keeps that many questions in flight.
    let _ns = silent_name_server([127, 0, 0, 77]);
    let sluice = Sluice::start_with_resolv_conf(
        POLICY,
        &[
            "--dns-listen",
            "127.0.0.1:0",
            "--resolve",
            "api.example.test=93.184.215.7",
            "--max-dns-queries-per-client-per-sec",
            "2000",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
        "nameserver 127.0.0.77\noptions timeout:2 attempts:1\n",
    );
    let dns = dns_listeners(&sluice, 1)[0];
    let flood = UdpSocket::bind("127.0.0.1:0").unwrap();
    for id in 0..400u16 {
        flood
            .send_to(&query(id, &format!("h{id}.svc.example.test")), dns)
            .unwrap();
        // Paced, so that no question is lost in the socket's buffer before sluice reads it.
        thread::sleep(Duration::from_micros(300));
    }
    thread::sleep(Duration::from_millis(300));
    // Another client is answered at once, while the flood's questions still hang.
    let other = UdpSocket::bind("127.0.0.2:0").unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    for id in 0..5 {
        other.send_to(&query(id, "api.example.test"), dns).unwrap();
        let mut buf = [0u8; 1500];
        let n = other
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("question {id} of another client unanswered: {e}"));
        assert_eq!(id_and_rcode(&buf[..n]), (id, NOERROR));
    }
    // The flood's questions past its share were dropped, and counted.
    let dropped = dns_metric(&sluice, "dropped");
    assert!(dropped >= 400.0 - 64.0, "{dropped} dropped");
}

#[test]
fn a_tcp_client_past_the_question_limit_reads_every_answer_before_the_close() {
    let (sluice, dns, _) = start();
    // A client with a tiny receive buffer sends 32 questions and reads nothing for a while:
    // sluice's 32 answers wait in its send queue. Then it sends 8 more, past the limit. Had
    // sluice closed its socket after the 32nd answer, those 8 would reset the connection
    // and throw the queued answers away; it only shuts down its side and reads them.
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(1024).unwrap();
    s.bind(&SocketAddr::from(([127, 0, 0, 4], 0)).into())
        .unwrap();
    s.connect_timeout(&dns.into(), Duration::from_secs(2))
        .unwrap();
    let mut s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let questions = |ids: std::ops::Range<u16>| {
        let mut all = Vec::new();
        for id in ids {
            let q = query(id, "api.example.test");
            all.extend_from_slice(&u16::try_from(q.len()).unwrap().to_be_bytes());
            all.extend_from_slice(&q);
        }
        all
    };
    s.write_all(&questions(0..32)).unwrap();
    thread::sleep(Duration::from_millis(300));
    s.write_all(&questions(32..40)).unwrap();
    thread::sleep(Duration::from_millis(200));
    let mut ids = Vec::new();
    let end = loop {
        let mut len = [0u8; 2];
        if let Err(e) = s.read_exact(&mut len) {
            break e;
        }
        let mut reply = vec![0u8; usize::from(u16::from_be_bytes(len))];
        s.read_exact(&mut reply).unwrap();
        let (id, rcode) = id_and_rcode(&reply);
        assert_eq!(rcode, NOERROR);
        ids.push(id);
    };
    assert_eq!(
        ids,
        (0..32).collect::<Vec<u16>>(),
        "the answers read ({end})"
    );
    // The connection ended with a close, not a reset.
    assert_eq!(end.kind(), std::io::ErrorKind::UnexpectedEof, "{end}");
    assert_events_valid(&sluice);
}
