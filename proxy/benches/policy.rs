//! Policy engine benchmarks: load + compile of a large generated policy, L4 decisions and L7
//! request decisions on it.
//!
//! The policy is generated deterministically (a small LCG drives the variations): 1,000
//! `network_policies` entries with five endpoints each (5,000 endpoints), mixing exact hosts,
//! first-label wildcards (`*.svcN.example.com`), multi-label wildcards (`**.cdnN.example.net`),
//! intra-label wildcards (`api-*.zoneN.example.org`), several ports per endpoint, L4 and
//! `protocol: rest` + `enforcement: enforce` endpoints with `*`/`**` rule paths, deny rules and
//! query matchers, and binaries that are exact paths or globs (`/usr/bin/py*`).
//!
//! Every host is specific to its entry (the entry number is in a literal label), so no two
//! entries' endpoints can match the same host:port. Within an entry only the L4 endpoints
//! `apiN.svcN.example.com` and `*.svcN.example.com` overlap, with identical connection settings,
//! which the ambiguity check accepts. Every tenth entry also lists the shared L4 host
//! `shared.example.com` (identical settings in every entry), so the index has a host that many
//! entries match.
//!
//! Run with `cargo bench -p sluice --bench policy`.

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, SamplingMode, criterion_group, criterion_main};
use sluice::policy::{
    Admission, Caller, Compat, L4Decision, Policy, Request, Source, Verdict, load,
};
use sluice_addr::Authority;

const ENTRIES: usize = 1_000;
/// The entry the decision benchmarks aim at (in the middle of the key order).
const TARGET: usize = 500;

/// Knuth's MMIX LCG; the high bits are the useful ones.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The generated policy text: `ENTRIES` entries × 5 endpoints.
fn policy_text() -> String {
    let text = generate_policy_text();
    // `SLUICE_BENCH_DUMP=FILE` writes the generated policy out, to profile loading elsewhere.
    if let Some(path) = std::env::var_os("SLUICE_BENCH_DUMP") {
        let _ = std::fs::write(path, &text);
    }
    text
}

fn generate_policy_text() -> String {
    let mut rng = Lcg(0x5eed_1ce5);
    let mut y = String::with_capacity(4 << 20);
    y.push_str("version: 1\nnetwork_policies:\n");
    for i in 0..ENTRIES {
        let _ = writeln!(y, "  svc{i:04}:\n    name: service-{i}\n    endpoints:");

        // 0: an exact L4 host (the shared one for every tenth entry).
        if i % 10 == 0 {
            y.push_str("      - host: shared.example.com\n        port: 443\n");
        } else {
            let _ = writeln!(
                y,
                "      - host: api{i}.svc{i}.example.com\n        port: 443"
            );
        }

        // 1: a first-label wildcard, L4, sometimes several ports.
        let ports = match rng.below(3) {
            0 => "[443]",
            1 => "[443, 8443]",
            _ => "[80, 443, 8443]",
        };
        let _ = writeln!(
            y,
            "      - host: \"*.svc{i}.example.com\"\n        ports: {ports}"
        );

        // 2: a multi-label wildcard, L4.
        let _ = writeln!(
            y,
            "      - host: \"**.cdn{i}.example.net\"\n        ports: [443, 8443]"
        );

        // 3: an intra-label wildcard, REST.
        let _ = writeln!(
            y,
            "      - host: \"api-*.zone{i}.example.org\"\n        port: 443\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: \"/v{}/**\"}}\n          - allow: {{method: POST, path: \"/v1/jobs/*\"}}\n        deny_rules:\n          - {{method: \"*\", path: \"/v1/admin/**\"}}",
            1 + rng.below(2)
        );

        // 4: an exact REST host with realistic rules.
        let ports = if rng.below(2) == 0 {
            "[443]"
        } else {
            "[443, 8080]"
        };
        let _ = writeln!(
            y,
            "      - host: rest{i}.example.io\n        ports: {ports}\n        protocol: rest\n        enforcement: enforce\n        rules:"
        );
        y.push_str(
            "          - allow: {method: GET, path: \"/v1/projects/*/items/**\"}\n\
             \x20         - allow: {method: POST, path: \"/v1/projects/*/items\"}\n\
             \x20         - allow: {method: \"*\", path: \"/v2/**/status\"}\n\
             \x20         - allow: {method: GET, path: \"/v1/search\", query: {q: \"*\", page: {any: [\"1*\", \"2*\"]}}}\n",
        );
        for _ in 0..rng.below(4) {
            let _ = writeln!(
                y,
                "          - allow: {{method: GET, path: \"/v1/extra{}/*/data\"}}",
                rng.below(100)
            );
        }
        y.push_str(
            "        deny_rules:\n\
             \x20         - {method: DELETE, path: \"/v1/projects/*/items/**\"}\n\
             \x20         - {method: \"*\", path: \"/v1/admin/**\"}\n",
        );
        if rng.below(3) == 0 {
            y.push_str(
                "          - {method: GET, path: \"/v1/search\", query: {q: \"secret*\"}}\n",
            );
        }

        // Binaries: the entry's own agent (exact), a shared tool, and for some a glob.
        let _ = writeln!(y, "    binaries:\n      - path: /opt/svc{i}/bin/agent");
        match rng.below(4) {
            0 => y.push_str("      - path: \"/usr/bin/py*\"\n"),
            1 => y.push_str("      - path: /usr/bin/curl\n"),
            2 => {
                let _ = writeln!(y, "      - path: \"/opt/svc{i}/libexec/*\"");
            }
            _ => {}
        }
    }
    y
}

fn sources(text: &str) -> Vec<Source> {
    vec![Source {
        name: "bench.yaml".to_string(),
        text: text.to_string(),
    }]
}

fn load_policy(text: &str) -> Policy {
    match load(&sources(text), Compat::Strict) {
        Ok(loaded) => loaded.policy,
        Err(e) => {
            for d in e.errors().take(10) {
                eprintln!("{d}");
            }
            panic!("the generated policy does not load: {e}");
        }
    }
}

fn admit(policy: &Policy, caller: &Caller<'_>, dst: &Authority) -> Admission {
    match policy.decide_l4(caller, dst) {
        L4Decision::Allow(a) => a,
        L4Decision::Deny(d) => panic!("expected {dst} to be allowed: {}", d.reason),
    }
}

fn benches(c: &mut Criterion) {
    let text = policy_text();
    let policy = load_policy(&text);
    assert_eq!(policy.endpoint_count(), ENTRIES * 5);

    // Tens of milliseconds per iteration: flat sampling and few samples keep this short.
    let mut group = c.benchmark_group("policy_load");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    group.bench_function("load_compile_1000_entries_5000_endpoints", |b| {
        b.iter_batched(
            || sources(&text),
            |src| load(black_box(&src), Compat::Strict).map(|l| l.policy.endpoint_count()),
            BatchSize::LargeInput,
        );
    });
    group.finish();

    let mut group = c.benchmark_group("policy");

    // A 3-deep chain: curl, run by a shell, run by the entry's agent.
    let agent = format!("/opt/svc{TARGET}/bin/agent");
    let ancestors = vec!["/bin/bash".to_string(), agent, "/sbin/init".to_string()];
    let cmdline = vec!["/tmp/work/script.sh".to_string()];
    let caller = Caller {
        exe: "/usr/bin/wget",
        ancestors: &ancestors,
        cmdline: &cmdline,
        tenant: None,
    };
    let stranger_ancestors = vec![
        "/bin/bash".to_string(),
        "/usr/lib/systemd/systemd".to_string(),
        "/sbin/init".to_string(),
    ];
    let stranger = Caller {
        exe: "/usr/local/bin/evil",
        ancestors: &stranger_ancestors,
        cmdline: &cmdline,
        tenant: None,
    };

    let exact_host = Authority::new(format!("rest{TARGET}.example.io"), 443);
    let wildcard_host = Authority::new(format!("a.b.cdn{TARGET}.example.net"), 443);
    let miss_host = Authority::new(format!("nothing{TARGET}.example.com"), 443);

    // Sanity: each case decides as its name says.
    assert!(matches!(
        policy.decide_l4(&caller, &exact_host),
        L4Decision::Allow(_)
    ));
    assert!(matches!(
        policy.decide_l4(&caller, &wildcard_host),
        L4Decision::Allow(_)
    ));
    assert!(matches!(
        policy.decide_l4(&caller, &miss_host),
        L4Decision::Deny(_)
    ));
    assert!(matches!(
        policy.decide_l4(&stranger, &exact_host),
        L4Decision::Deny(_)
    ));

    group.bench_function("l4_exact_host_allow", |b| {
        b.iter(|| policy.decide_l4(black_box(&caller), black_box(&exact_host)));
    });
    group.bench_function("l4_wildcard_host_allow", |b| {
        b.iter(|| policy.decide_l4(black_box(&caller), black_box(&wildcard_host)));
    });
    group.bench_function("l4_no_endpoint_deny", |b| {
        b.iter(|| policy.decide_l4(black_box(&caller), black_box(&miss_host)));
    });
    group.bench_function("l4_binary_mismatch_deny", |b| {
        b.iter(|| policy.decide_l4(black_box(&stranger), black_box(&exact_host)));
    });

    let admission = admit(&policy, &caller, &exact_host);
    let target: &[u8] = b"/v1/projects/123/items/456?x=1";
    let allowed = Request {
        method: "GET",
        target,
        websocket_upgrade: false,
    };
    let deny_rule = Request {
        method: "DELETE",
        target,
        websocket_upgrade: false,
    };
    let no_rule = Request {
        method: "PUT",
        target,
        websocket_upgrade: false,
    };
    assert_eq!(
        policy.decide_request(&admission, &allowed).verdict,
        Verdict::Allow
    );
    assert_eq!(
        policy.decide_request(&admission, &deny_rule).verdict,
        Verdict::Deny
    );
    assert!(
        policy
            .decide_request(&admission, &deny_rule)
            .rule()
            .is_some()
    );
    assert_eq!(
        policy.decide_request(&admission, &no_rule).verdict,
        Verdict::Deny
    );
    assert!(policy.decide_request(&admission, &no_rule).rule().is_none());

    group.bench_function("l7_allow", |b| {
        b.iter(|| {
            policy
                .decide_request(black_box(&admission), black_box(&allowed))
                .verdict
        });
    });
    group.bench_function("l7_deny_rule", |b| {
        b.iter(|| {
            policy
                .decide_request(black_box(&admission), black_box(&deny_rule))
                .verdict
        });
    });
    group.bench_function("l7_no_rule_deny", |b| {
        b.iter(|| {
            policy
                .decide_request(black_box(&admission), black_box(&no_rule))
                .verdict
        });
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! {
    name = policy;
    config = config();
    targets = benches
}
criterion_main!(policy);
