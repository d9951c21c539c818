//! The generated policies and requests, and their YAML text.

use std::fmt::Write as _;

use proptest::prelude::*;

// The generated policy and requests.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct GenPolicy {
    pub entries: Vec<GenEntry>,
}

#[derive(Clone, Debug)]
pub struct GenEntry {
    pub key: String,
    pub binaries: Vec<String>,
    pub endpoints: Vec<GenEndpoint>,
}

#[derive(Clone, Debug)]
pub struct GenEndpoint {
    /// Empty: a hostless endpoint (it has `allowed_ips`), which matches every host.
    pub host: String,
    pub ports: Vec<u16>,
    /// `allowed_ips: [net]`: a connection setting every overlapping endpoint must share.
    pub allowed_ips: Option<&'static str>,
    /// `None`: a plain L4 endpoint.
    pub rest: Option<GenRest>,
}

#[derive(Clone, Debug)]
pub struct GenRest {
    /// The endpoint `path` selector, when written.
    pub selector: Option<String>,
    pub enforce: bool,
    /// `access` preset instead of `rules`.
    pub access: Option<&'static str>,
    pub rules: Vec<GenRule>,
    pub deny_rules: Vec<GenRule>,
}

#[derive(Clone, Debug)]
pub struct GenRule {
    pub method: &'static str,
    pub path: String,
    pub query: Vec<GenQuery>,
}

#[derive(Clone, Debug)]
pub struct GenQuery {
    pub key: &'static str,
    pub globs: Vec<&'static str>,
    /// Written as `{any: [...]}` rather than a plain string.
    pub any_form: bool,
}

#[derive(Clone, Debug)]
pub enum HostSpec {
    /// Labels, joined and suffixed with a top-level label.
    Random(Vec<&'static str>, &'static str),
    /// Instantiate the `which`-th endpoint's host pattern with these fill labels.
    FromEndpoint {
        which: usize,
        fills: Vec<&'static str>,
        two_for_double_star: bool,
    },
}

#[derive(Clone, Debug)]
pub struct GenRequest {
    pub exe: &'static str,
    pub ancestors: Vec<&'static str>,
    pub host: HostSpec,
    pub port: u16,
    pub method: &'static str,
    pub path: String,
    pub query: Option<String>,
}

pub const KEYS: &[&str] = &["alpha", "beta", "gamma", "delta"];
/// First labels of policy hosts (`B`: hosts compare case-insensitively).
pub const FIRST_LABELS: &[&str] = &["a", "b", "*", "**", "a*", "*b", "B"];
pub const REQUEST_LABELS: &[&str] = &["a", "b", "ab", "c"];
pub const TLDS: &[&str] = &["io", "com", "net"];
pub const BINARIES: &[&str] = &[
    "/usr/bin/curl",
    "/usr/bin/python3",
    "/bin/sh",
    "/usr/bin/*",
    "/usr/bin/py*",
    "/usr/**",
    "/**/sh",
    "/usr/*/curl",
    "/**",
];
pub const EXES: &[&str] = &[
    "/usr/bin/curl",
    "/usr/bin/python3",
    "/bin/sh",
    "/usr/local/bin/curl",
    "/opt/app/run",
    "/usr/bin/pyx/y",
];
pub const RULE_METHODS: &[&str] = &["GET", "POST", "HEAD", "*", "DELETE"];
pub const REQUEST_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "DELETE", "PUT", "OPTIONS", "get", "Post",
];
pub const PATTERN_SEGMENTS: &[&str] = &["a", "b", "c", "*", "**"];
/// Rarer pattern segments: a star inside a segment, and `**` next to a letter (which is `*`).
pub const ODD_PATTERN_SEGMENTS: &[&str] = &["a*", "a**"];
pub const PATH_SEGMENTS: &[&str] = &["a", "b", "c", "ab"];
pub const QUERY_GLOBS: &[&str] = &["*", "a*", "b", "a.*", "*.b"];
/// Raw query values: `%61` decodes to `a`, `+` to a space.
pub const QUERY_VALUES: &[&str] = &["", "a", "ab", "b", "a.b", "b.b", "%61", "a+b", "%61.b"];

/// `/` and 1 to 3 segments.
pub fn pattern_segments() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        12 => prop::sample::select(PATTERN_SEGMENTS),
        1 => prop::sample::select(ODD_PATTERN_SEGMENTS),
    ];
    prop::collection::vec(segment, 1..=3).prop_map(|segs| format!("/{}", segs.join("/")))
}

pub fn pattern_path() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just("**".to_string()),
        9 => pattern_segments(),
    ]
}

pub fn selector() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        4 => Just(None),
        1 => Just(Some("**".to_string())),
        1 => Just(Some("/**".to_string())),
        // Glob characters before a trailing `/**` are refused by the strict loader (the
        // reference reads that prefix as literal text): such a selector ends in `/*` instead.
        4 => pattern_segments().prop_map(|s| {
            match s.strip_suffix("/**") {
                Some(prefix) if prefix.contains(['*', '?', '[', '{']) => Some(format!("{prefix}/*")),
                _ => Some(s),
            }
        }),
    ]
}

pub fn query_matchers() -> impl Strategy<Value = Vec<GenQuery>> {
    let one = |key: &'static str| {
        (
            prop::collection::vec(prop::sample::select(QUERY_GLOBS), 1..=2),
            any::<bool>(),
        )
            .prop_map(move |(globs, any_form)| GenQuery {
                key,
                any_form: any_form || globs.len() > 1,
                globs,
            })
    };
    prop_oneof![
        6 => Just(Vec::new()),
        2 => one("q").prop_map(|q| vec![q]),
        1 => one("r").prop_map(|q| vec![q]),
        1 => (one("q"), one("r")).prop_map(|(a, b)| vec![a, b]),
    ]
}

pub fn rule() -> impl Strategy<Value = GenRule> {
    (
        prop::sample::select(RULE_METHODS),
        pattern_path(),
        query_matchers(),
    )
        .prop_map(|(method, path, query)| GenRule {
            method,
            path,
            query,
        })
}

pub fn rest() -> impl Strategy<Value = GenRest> {
    (
        selector(),
        prop::bool::weighted(0.7),
        prop_oneof![
            6 => Just(None),
            1 => prop::sample::select(&["read-only", "read-write", "full"][..]).prop_map(Some),
        ],
        prop::collection::vec(rule(), 1..=3),
        prop::collection::vec(rule(), 0..=2),
    )
        .prop_map(|(selector, enforce, access, rules, deny_rules)| GenRest {
            selector,
            enforce,
            access,
            rules,
            deny_rules,
        })
}

pub fn host_pattern() -> impl Strategy<Value = String> {
    (
        prop::sample::select(FIRST_LABELS),
        prop::collection::vec(
            prop_oneof![4 => prop::sample::select(&["a", "b"][..]), 1 => Just("*")],
            1..=2,
        ),
        prop_oneof![6 => Just("io"), 1 => Just("com"), 1 => Just("*")],
    )
        .prop_map(|(first, mids, tld)| format!("{first}.{}.{tld}", mids.join(".")))
}

pub fn endpoint() -> impl Strategy<Value = GenEndpoint> {
    (
        host_pattern(),
        prop::sample::select(vec![vec![80u16], vec![443], vec![80, 443]]),
        prop::option::weighted(0.6, rest()),
        prop_oneof![
            30 => Just(None),
            1 => Just(Some(("10.0.0.0/24", false))),
            1 => Just(Some(("10.0.0.0/24", true))),
            1 => Just(Some(("10.9.0.0/24", true))),
        ],
    )
        .prop_map(|(host, ports, rest, ips)| GenEndpoint {
            host: if ips.is_some_and(|(_, hostless)| hostless) {
                String::new()
            } else {
                host
            },
            ports,
            allowed_ips: ips.map(|(net, _)| net),
            rest,
        })
}

pub fn entry_body() -> impl Strategy<Value = (Vec<String>, Vec<GenEndpoint>)> {
    (
        prop::collection::vec(
            prop::sample::select(BINARIES).prop_map(str::to_string),
            1..=2,
        ),
        prop::collection::vec(endpoint(), 1..=3),
    )
}

pub fn policy() -> impl Strategy<Value = GenPolicy> {
    (1usize..=3)
        .prop_flat_map(|n| {
            (
                prop::sample::subsequence(KEYS, n).prop_shuffle(),
                prop::collection::vec(entry_body(), n),
            )
        })
        .prop_map(|(keys, bodies)| GenPolicy {
            entries: keys
                .into_iter()
                .zip(bodies)
                .map(|(key, (binaries, endpoints))| GenEntry {
                    key: key.to_string(),
                    binaries,
                    endpoints,
                })
                .collect(),
        })
}

pub fn host_spec() -> impl Strategy<Value = HostSpec> {
    prop_oneof![
        1 => (
            prop::collection::vec(prop::sample::select(REQUEST_LABELS), 1..=3),
            prop::sample::select(TLDS),
        )
            .prop_map(|(labels, tld)| HostSpec::Random(labels, tld)),
        3 => (
            any::<usize>(),
            prop::collection::vec(prop::sample::select(REQUEST_LABELS), 4),
            any::<bool>(),
        )
            .prop_map(|(which, fills, two_for_double_star)| HostSpec::FromEndpoint {
                which,
                fills,
                two_for_double_star,
            }),
    ]
}

pub fn request_path() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(prop::sample::select(PATH_SEGMENTS), 0..=3),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(segs, trailing)| {
            if segs.is_empty() {
                "/".to_string()
            } else if trailing {
                format!("/{}/", segs.join("/"))
            } else {
                format!("/{}", segs.join("/"))
            }
        })
}

pub fn request_query() -> impl Strategy<Value = Option<String>> {
    // Now and then a malformed escape, which refuses the request.
    let value = prop_oneof![
        40 => prop::sample::select(QUERY_VALUES),
        1 => Just("%zz"),
    ];
    let pair = (
        // `%71` is `q`, encoded: names are decoded too.
        prop::sample::select(&["q", "r", "s", "%71"][..]),
        prop::option::weighted(0.9, value),
    )
        .prop_map(|(k, v)| match v {
            Some(v) => format!("{k}={v}"),
            None => k.to_string(),
        });
    prop::option::weighted(
        0.5,
        prop::collection::vec(pair, 1..=3).prop_map(|p| p.join("&")),
    )
}

pub fn request() -> impl Strategy<Value = GenRequest> {
    (
        prop::sample::select(EXES),
        prop::collection::vec(prop::sample::select(EXES), 0..=3),
        host_spec(),
        prop::sample::select(&[80u16, 443, 443, 80, 8080][..]),
        prop::sample::select(REQUEST_METHODS),
        request_path(),
        request_query(),
    )
        .prop_map(
            |(exe, ancestors, host, port, method, path, query)| GenRequest {
                exe,
                ancestors,
                host,
                port,
                method,
                path,
                query,
            },
        )
}

// ---------------------------------------------------------------------------------------------
// YAML rendering.
// ---------------------------------------------------------------------------------------------

pub fn rule_yaml(r: &GenRule) -> String {
    let mut s = format!("method: \"{}\", path: \"{}\"", r.method, r.path);
    if !r.query.is_empty() {
        let items: Vec<String> = r
            .query
            .iter()
            .map(|q| {
                let globs: Vec<String> = q.globs.iter().map(|g| format!("\"{g}\"")).collect();
                if q.any_form {
                    format!("{}: {{any: [{}]}}", q.key, globs.join(", "))
                } else {
                    format!("{}: {}", q.key, globs.join(""))
                }
            })
            .collect();
        let _ = write!(s, ", query: {{{}}}", items.join(", "));
    }
    format!("{{{s}}}")
}

pub fn to_yaml(p: &GenPolicy) -> String {
    let mut y = String::from("version: 1\nnetwork_policies:\n");
    for e in &p.entries {
        let _ = writeln!(y, "  {}:\n    endpoints:", e.key);
        for ep in &e.endpoints {
            let ports: Vec<String> = ep.ports.iter().map(u16::to_string).collect();
            let _ = writeln!(
                y,
                "      - host: \"{}\"\n        ports: [{}]",
                ep.host,
                ports.join(", ")
            );
            if let Some(net) = ep.allowed_ips {
                let _ = writeln!(y, "        allowed_ips: [\"{net}\"]");
            }
            if let Some(r) = &ep.rest {
                y.push_str("        protocol: rest\n");
                let enforcement = if r.enforce { "enforce" } else { "audit" };
                let _ = writeln!(y, "        enforcement: {enforcement}");
                if let Some(sel) = &r.selector {
                    let _ = writeln!(y, "        path: \"{sel}\"");
                }
                match r.access {
                    Some(a) => {
                        let _ = writeln!(y, "        access: {a}");
                    }
                    None => {
                        y.push_str("        rules:\n");
                        for rule in &r.rules {
                            let _ = writeln!(y, "          - allow: {}", rule_yaml(rule));
                        }
                    }
                }
                if !r.deny_rules.is_empty() {
                    y.push_str("        deny_rules:\n");
                    for rule in &r.deny_rules {
                        let _ = writeln!(y, "          - {}", rule_yaml(rule));
                    }
                }
            }
        }
        y.push_str("    binaries:\n");
        for b in &e.binaries {
            let _ = writeln!(y, "      - path: \"{b}\"");
        }
    }
    y
}
