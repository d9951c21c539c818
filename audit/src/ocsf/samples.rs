//! Sample events, one of each kind, for tests (`cfg(test)` here, feature `samples` for
//! `sluice`'s tests): never built into the binary.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::super::*;
use super::Context;

/// 2024-03-09T16:05:07.123Z.
fn time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(1_710_000_307_123)
}

pub fn ctx() -> Context {
    Context {
        instance: "i-1".into(),
        hostname: "build-7".into(),
    }
}

fn caller() -> Caller {
    Caller {
        process: Process {
            pid: 4242,
            exe: "/usr/bin/curl".into(),
            cmdline: vec!["curl".into(), "-s".into(), "https://api.github.com/".into()],
            uid: Some(1000),
        },
        ancestors: vec![
            Process {
                pid: 4000,
                exe: "/usr/bin/bash".into(),
                cmdline: vec!["bash".into(), "-c".into(), "curl -s".into()],
                uid: Some(1000),
            },
            Process {
                pid: 1,
                exe: "/usr/lib/systemd/systemd".into(),
                cmdline: vec!["/sbin/init".into()],
                uid: Some(0),
            },
        ],
        ..Caller::default()
    }
}

fn src() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 50_123)
}

pub fn open(outcome: Outcome) -> ConnectionOpen {
    let denied = outcome == Outcome::Denied;
    ConnectionOpen {
        time: time(),
        id: 7,
        via: Via::Connect,
        caller: Some(Arc::new(caller())),
        src: src(),
        dst: Destination {
            authority: Authority::new(
                if denied {
                    "example.com"
                } else {
                    "api.github.com"
                },
                443,
            ),
            ip: (!denied).then(|| IpAddr::V4(Ipv4Addr::new(140, 82, 121, 6))),
        },
        outcome,
        policy: (!denied).then(|| "github".into()),
        engine: Engine::L4,
        reason: denied.then(|| "endpoint example.com:443 is not allowed by any policy".into()),
        status: if denied { 403 } else { 200 },
    }
}

pub fn close() -> ConnectionClose {
    ConnectionClose {
        time: time(),
        id: 7,
        via: Via::Connect,
        caller: Some(Arc::new(caller())),
        src: src(),
        dst: Destination {
            authority: Authority::new("api.github.com", 443),
            ip: Some(IpAddr::V4(Ipv4Addr::new(140, 82, 121, 6))),
        },
        policy: Some("github".into()),
        engine: Engine::L4,
        bytes_in: 517,
        bytes_out: 4096,
        duration_ms: 1250,
        reason: "client closed".into(),
    }
}

pub fn request(outcome: Outcome) -> HttpRequest {
    HttpRequest {
        time: time(),
        id: 9,
        caller: Some(Arc::new(Caller {
            process: Process {
                pid: 88,
                ..caller().process
            },
            ancestors: vec![],
            ..Caller::default()
        })),
        src: src(),
        dst: Destination {
            authority: Authority::new("h", 8080),
            ip: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
        },
        method: "GET".into(),
        scheme: "http",
        path: "/path".into(),
        outcome,
        policy: Some("p".into()),
        engine: Engine::L7,
        rule: Some("GET /path".into()),
        reason: (outcome != Outcome::Allowed).then(|| "GET /path not permitted by policy".into()),
        status: Some(if outcome == Outcome::Denied { 403 } else { 200 }),
        bytes_in: 120,
        bytes_out: 2048,
        duration_ms: 35,
        credentials: vec!["GITHUB_TOKEN".into()],
        signed: None,
    }
}

pub fn policy_loaded() -> PolicyChange {
    PolicyChange {
        time: time(),
        sources: vec!["a.yaml".into(), "b.yaml".into()],
        result: Ok((3, 5)),
        hash: Some("sha256:abc123".into()),
        warnings: 0,
    }
}

pub fn policy_failed() -> PolicyChange {
    PolicyChange {
        time: time(),
        sources: vec!["a.yaml".into()],
        result: Err(vec![
            "a.yaml:3:5: unknown field `hots`".into(),
            "a.yaml:9:1: second".into(),
        ]),
        hash: None,
        warnings: 0,
    }
}

pub fn start() -> Lifecycle {
    Lifecycle {
        time: time(),
        started: true,
        version: "0.1.0",
        message: "listening on 127.0.0.1:3128".into(),
    }
}
