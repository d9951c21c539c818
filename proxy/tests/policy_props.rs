//! Property test of the policy engine against a from-scratch reference implementation of the
//! matching and decision semantics (spec `openshell-semantics.md` §1.8, §2.7, §2.10 and §13
//! rows 12, 13, 15, 18, 19).
//!
//! Random small policies are written as YAML text and loaded with the real loader (cases the
//! loader rejects, e.g. for an ambiguity conflict, are skipped and counted); random requests are
//! then decided by the compiled engine and by the reference below, and the two must agree on:
//!
//! - L4: allow or deny; the deciding entry (smallest admitting key); the set of admitted
//!   endpoints (every endpoint of every admitting entry that matches host:port); the kind of
//!   denial (no endpoint, or binary mismatch with the list of refusing entries).
//! - L7 (on each admitted connection): the verdict (allow, deny, audit), its basis
//!   (uninspected, allow rule, deny rule, no allow rule, no endpoint path, malformed query) and
//!   the endpoints whose selectors decided.
//! - The ambiguity check (spec §1.10): a policy loads iff the reference finds no two endpoints
//!   that share a port and a host name and differ in `allowed_ips`, and no two that both carry
//!   request-level settings (REST, or `allowed_ips`), select a common canonical path with equal
//!   specificity and differ in protocol or enforcement. The reference searches bounded sets of
//!   witness hosts and paths rather than intersecting patterns.
//!
//! The reference's glob matcher is a naive recursive matcher written here, independent of the
//! engine's: `*` stays inside a segment; `**` follows globset with `literal_separator(true)`:
//! `**/` prefix, `/**` suffix, `/**/` middle, `**` alone matches everything, elsewhere `**` is
//! like `*`. Hosts: `*` within one label, `**` as the whole first label for one or more
//! labels; a hostless endpoint (`allowed_ips` only) matches every host. Request paths are
//! generated canonical (segments of letters, no dots, no percent), so the engine's
//! canonicalisation is the identity on them; queries carry `+` and `%XX` escapes, now and then
//! a malformed one.
//!
//! Further properties check the glob languages alone, on patterns that are not
//! segment-aligned: `Glob::is_match` and `new_covering_prefix` against the reference matcher,
//! `Glob::intersects` against a product-NFA search built from the reference tokens, and
//! `HostPattern::is_match`/`intersects` against the reference host matcher.
//!
//! Run with more cases to hunt: `PROPTEST_CASES=20000 cargo test -p sluice --test policy_props`.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sluice::policy::canon::CanonError;
use sluice::policy::decide::{L4DenyKind, RequestBasis};
use sluice::policy::glob::{Glob, HostPattern};
use sluice::policy::{Caller, Compat, L4Decision, Policy, Request, Source, Verdict, load};

// ---------------------------------------------------------------------------------------------
// The generated policy and requests.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct GenPolicy {
    entries: Vec<GenEntry>,
}

#[derive(Clone, Debug)]
struct GenEntry {
    key: String,
    binaries: Vec<String>,
    endpoints: Vec<GenEndpoint>,
}

#[derive(Clone, Debug)]
struct GenEndpoint {
    /// Empty: a hostless endpoint (it has `allowed_ips`), which matches every host.
    host: String,
    ports: Vec<u16>,
    /// `allowed_ips: [net]`: a connection setting every overlapping endpoint must share.
    allowed_ips: Option<&'static str>,
    /// `None`: a plain L4 endpoint.
    rest: Option<GenRest>,
}

#[derive(Clone, Debug)]
struct GenRest {
    /// The endpoint `path` selector, when written.
    selector: Option<String>,
    enforce: bool,
    /// `access` preset instead of `rules`.
    access: Option<&'static str>,
    rules: Vec<GenRule>,
    deny_rules: Vec<GenRule>,
}

#[derive(Clone, Debug)]
struct GenRule {
    method: &'static str,
    path: String,
    query: Vec<GenQuery>,
}

#[derive(Clone, Debug)]
struct GenQuery {
    key: &'static str,
    globs: Vec<&'static str>,
    /// Written as `{any: [...]}` rather than a plain string.
    any_form: bool,
}

#[derive(Clone, Debug)]
enum HostSpec {
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
struct GenRequest {
    exe: &'static str,
    ancestors: Vec<&'static str>,
    host: HostSpec,
    port: u16,
    method: &'static str,
    path: String,
    query: Option<String>,
}

const KEYS: &[&str] = &["alpha", "beta", "gamma", "delta"];
/// First labels of policy hosts (`B`: hosts compare case-insensitively).
const FIRST_LABELS: &[&str] = &["a", "b", "*", "**", "a*", "*b", "B"];
const REQUEST_LABELS: &[&str] = &["a", "b", "ab", "c"];
const TLDS: &[&str] = &["io", "com", "net"];
const BINARIES: &[&str] = &[
    "/usr/bin/curl",
    "/usr/bin/python3",
    "/bin/sh",
    "/usr/bin/*",
    "/usr/bin/py*",
    "/usr/**",
    "/**/sh",
    "/usr/*/curl",
    "*",
];
const EXES: &[&str] = &[
    "/usr/bin/curl",
    "/usr/bin/python3",
    "/bin/sh",
    "/usr/local/bin/curl",
    "/opt/app/run",
    "/usr/bin/pyx/y",
];
const RULE_METHODS: &[&str] = &["GET", "POST", "HEAD", "*", "DELETE"];
const REQUEST_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "DELETE", "PUT", "OPTIONS", "get", "Post",
];
const PATTERN_SEGMENTS: &[&str] = &["a", "b", "c", "*", "**"];
/// Rarer pattern segments: a star inside a segment, and `**` next to a letter (which is `*`).
const ODD_PATTERN_SEGMENTS: &[&str] = &["a*", "a**"];
const PATH_SEGMENTS: &[&str] = &["a", "b", "c", "ab"];
const QUERY_GLOBS: &[&str] = &["*", "a*", "b", "a.*", "*.b"];
/// Raw query values: `%61` decodes to `a`, `+` to a space.
const QUERY_VALUES: &[&str] = &["", "a", "ab", "b", "a.b", "b.b", "%61", "a+b", "%61.b"];

/// `/` and 1 to 3 segments.
fn pattern_segments() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        12 => prop::sample::select(PATTERN_SEGMENTS),
        1 => prop::sample::select(ODD_PATTERN_SEGMENTS),
    ];
    prop::collection::vec(segment, 1..=3).prop_map(|segs| format!("/{}", segs.join("/")))
}

fn pattern_path() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just("**".to_string()),
        9 => pattern_segments(),
    ]
}

fn selector() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        4 => Just(None),
        1 => Just(Some("**".to_string())),
        1 => Just(Some("/**".to_string())),
        4 => pattern_segments().prop_map(Some),
    ]
}

fn query_matchers() -> impl Strategy<Value = Vec<GenQuery>> {
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

fn rule() -> impl Strategy<Value = GenRule> {
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

fn rest() -> impl Strategy<Value = GenRest> {
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

fn host_pattern() -> impl Strategy<Value = String> {
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

fn endpoint() -> impl Strategy<Value = GenEndpoint> {
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

fn entry_body() -> impl Strategy<Value = (Vec<String>, Vec<GenEndpoint>)> {
    (
        prop::collection::vec(
            prop::sample::select(BINARIES).prop_map(str::to_string),
            1..=2,
        ),
        prop::collection::vec(endpoint(), 1..=3),
    )
}

fn policy() -> impl Strategy<Value = GenPolicy> {
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

fn host_spec() -> impl Strategy<Value = HostSpec> {
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

fn request_path() -> impl Strategy<Value = String> {
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

fn request_query() -> impl Strategy<Value = Option<String>> {
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

fn request() -> impl Strategy<Value = GenRequest> {
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

fn rule_yaml(r: &GenRule) -> String {
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

fn to_yaml(p: &GenPolicy) -> String {
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

// ---------------------------------------------------------------------------------------------
// The reference implementation.
// ---------------------------------------------------------------------------------------------

/// Tokens of a glob, after globset's (literal_separator) treatment of `**`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GTok {
    Lit(u8),
    /// `*`: any run without the delimiter.
    Star,
    /// `**/` at the start: ``, `/`, or anything ending in `/` (regex `(?:/?|.*/)`).
    RecPrefix,
    /// `/**` at the end: `/` then anything (regex `/.*`).
    RecSuffix,
    /// `/**/` in the middle: `/`, or `/` anything `/` (regex `(?:/|/.*/)`).
    RecZeroOrMore,
}

/// globset's parser for `*` and `**` (every other character is literal in our patterns).
fn tokenize(pattern: &str, delim: u8) -> Vec<GTok> {
    let p = pattern.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < p.len() {
        if p[i] != b'*' {
            toks.push(GTok::Lit(p[i]));
            i += 1;
            continue;
        }
        if p.get(i + 1) != Some(&b'*') {
            toks.push(GTok::Star);
            i += 1;
            continue;
        }
        // `**` at i.
        let prev = if i > 0 { Some(p[i - 1]) } else { None };
        let next = p.get(i + 2).copied();
        if toks.is_empty() {
            match next {
                None => {
                    toks.push(GTok::RecPrefix);
                    i += 2;
                }
                Some(c) if c == delim => {
                    toks.push(GTok::RecPrefix);
                    i += 3;
                }
                Some(_) => {
                    toks.push(GTok::Star);
                    toks.push(GTok::Star);
                    i += 2;
                }
            }
            continue;
        }
        if prev != Some(delim) {
            toks.push(GTok::Star);
            toks.push(GTok::Star);
            i += 2;
            continue;
        }
        let is_suffix = match next {
            None => true,
            Some(c) if c == delim => false,
            Some(_) => {
                toks.push(GTok::Star);
                toks.push(GTok::Star);
                i += 2;
                continue;
            }
        };
        i += if is_suffix { 2 } else { 3 };
        // The delimiter before `**` (or the recursive token that absorbed it) is replaced.
        let replaced = match toks.pop() {
            Some(GTok::RecPrefix) => GTok::RecPrefix,
            Some(GTok::RecSuffix) => GTok::RecSuffix,
            _ if is_suffix => GTok::RecSuffix,
            _ => GTok::RecZeroOrMore,
        };
        toks.push(replaced);
    }
    toks
}

fn match_toks(t: &[GTok], s: &[u8], d: u8) -> bool {
    let Some((first, rest)) = t.split_first() else {
        return s.is_empty();
    };
    match *first {
        GTok::Lit(c) => s.first() == Some(&c) && match_toks(rest, &s[1..], d),
        GTok::Star => {
            for k in 0..=s.len() {
                if match_toks(rest, &s[k..], d) {
                    return true;
                }
                if k < s.len() && s[k] == d {
                    break;
                }
            }
            false
        }
        GTok::RecPrefix => {
            (0..=s.len()).any(|k| (k == 0 || s[k - 1] == d) && match_toks(rest, &s[k..], d))
        }
        GTok::RecSuffix => {
            s.first() == Some(&d) && (1..=s.len()).any(|k| match_toks(rest, &s[k..], d))
        }
        GTok::RecZeroOrMore => {
            s.first() == Some(&d)
                && (match_toks(rest, &s[1..], d)
                    || (2..=s.len()).any(|k| s[k - 1] == d && match_toks(rest, &s[k..], d)))
        }
    }
}

fn glob_match(pattern: &str, delim: u8, input: &str) -> bool {
    let toks = tokenize(pattern, delim);
    if toks == [GTok::RecPrefix] {
        // globset: a pattern that is only `**` matches everything.
        return true;
    }
    match_toks(&toks, input.as_bytes(), delim)
}

/// What an NFA edge accepts.
#[derive(Clone, Copy, Debug)]
enum Class {
    Char(u8),
    Any,
    NotDelim,
}

/// A Thompson-style NFA of a token list: state 0 starts, `accept` accepts.
struct Nfa {
    eps: Vec<Vec<usize>>,
    edges: Vec<Vec<(Class, usize)>>,
    accept: usize,
}

impl Nfa {
    fn new(toks: &[GTok], d: u8) -> Nfa {
        let mut nfa = Nfa {
            eps: vec![Vec::new()],
            edges: vec![Vec::new()],
            accept: 0,
        };
        let add = |nfa: &mut Nfa| {
            nfa.eps.push(Vec::new());
            nfa.edges.push(Vec::new());
            nfa.eps.len() - 1
        };
        if toks == [GTok::RecPrefix] {
            nfa.edges[0].push((Class::Any, 0));
            return nfa;
        }
        let mut cur = 0;
        for t in toks {
            let out = add(&mut nfa);
            match *t {
                GTok::Lit(c) => nfa.edges[cur].push((Class::Char(c), out)),
                GTok::Star => {
                    nfa.edges[cur].push((Class::NotDelim, cur));
                    nfa.eps[cur].push(out);
                }
                GTok::RecPrefix => {
                    // `(?:/?|.*/)`
                    let m = add(&mut nfa);
                    nfa.eps[cur].push(out);
                    nfa.edges[cur].push((Class::Char(d), out));
                    nfa.eps[cur].push(m);
                    nfa.edges[m].push((Class::Any, m));
                    nfa.edges[m].push((Class::Char(d), out));
                }
                GTok::RecSuffix => {
                    // `/.*`
                    let m = add(&mut nfa);
                    nfa.edges[cur].push((Class::Char(d), m));
                    nfa.edges[m].push((Class::Any, m));
                    nfa.eps[m].push(out);
                }
                GTok::RecZeroOrMore => {
                    // `(?:/|/.*/)`
                    let m = add(&mut nfa);
                    nfa.edges[cur].push((Class::Char(d), out));
                    nfa.edges[cur].push((Class::Char(d), m));
                    nfa.edges[m].push((Class::Any, m));
                    nfa.edges[m].push((Class::Char(d), out));
                }
            }
            cur = out;
        }
        nfa.accept = cur;
        nfa
    }
}

fn class_accepts(c: Class, ch: u8, d: u8) -> bool {
    match c {
        Class::Char(x) => x == ch,
        Class::Any => true,
        Class::NotDelim => ch != d,
    }
}

/// Whether two globs match a common string: reachability in the product of their NFAs, over
/// the characters of both patterns, the delimiter and one stand-in for every other character.
fn reference_intersects(a: &str, b: &str, d: u8) -> bool {
    let (na, nb) = (Nfa::new(&tokenize(a, d), d), Nfa::new(&tokenize(b, d), d));
    let mut alphabet: Vec<u8> = a.bytes().chain(b.bytes()).filter(|&c| c != b'*').collect();
    alphabet.extend([d, b'~']);
    alphabet.sort_unstable();
    alphabet.dedup();
    let mut seen = BTreeSet::new();
    let mut stack = vec![(0usize, 0usize)];
    while let Some((x, y)) = stack.pop() {
        if !seen.insert((x, y)) {
            continue;
        }
        if x == na.accept && y == nb.accept {
            return true;
        }
        stack.extend(na.eps[x].iter().map(|&x2| (x2, y)));
        stack.extend(nb.eps[y].iter().map(|&y2| (x, y2)));
        for &ch in &alphabet {
            for &(ca, x2) in &na.edges[x] {
                for &(cb, y2) in &nb.edges[y] {
                    if class_accepts(ca, ch, d) && class_accepts(cb, ch, d) {
                        stack.push((x2, y2));
                    }
                }
            }
        }
    }
    false
}

/// Selectors and deny rules: `/x/**` (and `/x/**/**`, which matches the same paths) also
/// covers `/x` (spec §13 rows 12, 18).
fn covering_match(pattern: &str, path: &str) -> bool {
    if glob_match(pattern, b'/', path) {
        return true;
    }
    let mut stripped = pattern.strip_suffix("/**");
    while let Some(p) = stripped.and_then(|p| p.strip_suffix("/**")) {
        stripped = Some(p);
    }
    match stripped {
        Some(prefix) if !prefix.is_empty() && !prefix.ends_with('/') => {
            glob_match(prefix, b'/', path)
        }
        _ => false,
    }
}

fn host_match(pattern: &str, host: &str) -> bool {
    if pattern.is_empty() {
        // A hostless endpoint: any host (its addresses are checked after DNS).
        return true;
    }
    let pattern = pattern.to_ascii_lowercase();
    if !pattern.contains('*') {
        return pattern == host;
    }
    let pl: Vec<&str> = pattern.split('.').collect();
    let hl: Vec<&str> = host.split('.').collect();
    let label = |p: &str, h: &str| glob_match(p, b'.', h);
    if pl[0] == "**" {
        let fixed = &pl[1..];
        hl.len() > fixed.len()
            && fixed
                .iter()
                .zip(&hl[hl.len() - fixed.len()..])
                .all(|(p, h)| label(p, h))
    } else {
        pl.len() == hl.len() && pl.iter().zip(&hl).all(|(p, h)| label(p, h))
    }
}

fn binary_match(pattern: &str, exe: &str) -> bool {
    if pattern == "*" {
        true
    } else if pattern.contains('*') {
        glob_match(pattern, b'/', exe)
    } else {
        pattern == exe
    }
}

fn method_match(rule: &str, method: &str) -> bool {
    match rule {
        "*" => true,
        "GET" => method == "GET" || method == "HEAD",
        other => other == method,
    }
}

/// `+` is a space and `%XX` a byte; a malformed escape is an error (spec §1.8).
fn decode_query_part(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Decoded (name, value) pairs; `None` when an escape is malformed.
fn parse_query(q: Option<&str>) -> Option<Vec<(String, String)>> {
    let Some(q) = q else {
        return Some(Vec::new());
    };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((decode_query_part(k)?, decode_query_part(v)?))
        })
        .collect()
}

fn query_value_match(q: &GenQuery, v: &str) -> bool {
    q.globs.iter().any(|g| glob_match(g, b'.', v))
}

/// Allow side: every key present with at least one value, and every value matching.
fn allow_query(matchers: &[GenQuery], query: &[(String, String)]) -> bool {
    matchers.iter().all(|m| {
        let values: Vec<&str> = query
            .iter()
            .filter(|(k, _)| k == m.key)
            .map(|(_, v)| v.as_str())
            .collect();
        !values.is_empty() && values.iter().all(|v| query_value_match(m, v))
    })
}

/// Deny side: every key present, and for each some value matching.
fn deny_query(matchers: &[GenQuery], query: &[(String, String)]) -> bool {
    matchers.iter().all(|m| {
        query
            .iter()
            .any(|(k, v)| k == m.key && query_value_match(m, v))
    })
}

/// An endpoint, named as the engine names it: (entry key, endpoint index).
type EpId = (String, usize);

#[derive(Clone, Debug, PartialEq, Eq)]
enum RefL4 {
    Allow {
        entry: String,
        endpoints: BTreeSet<EpId>,
    },
    NoEndpoint,
    Binary {
        entries: Vec<String>,
    },
}

fn reference_l4(p: &GenPolicy, exe: &str, ancestors: &[String], host: &str, port: u16) -> RefL4 {
    let mut entries: Vec<&GenEntry> = p.entries.iter().collect();
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    let mut any_endpoint = false;
    let mut refused = Vec::new();
    let mut admitted: Vec<(&GenEntry, Vec<usize>)> = Vec::new();
    for e in entries {
        let eps: Vec<usize> = e
            .endpoints
            .iter()
            .enumerate()
            .filter(|(_, ep)| ep.ports.contains(&port) && host_match(&ep.host, host))
            .map(|(i, _)| i)
            .collect();
        if eps.is_empty() {
            continue;
        }
        any_endpoint = true;
        let admits = e
            .binaries
            .iter()
            .any(|b| binary_match(b, exe) || ancestors.iter().any(|a| binary_match(b, a)));
        if admits {
            admitted.push((e, eps));
        } else {
            refused.push(e.key.clone());
        }
    }
    if !any_endpoint {
        return RefL4::NoEndpoint;
    }
    match admitted.first() {
        None => RefL4::Binary { entries: refused },
        Some((first, _)) => RefL4::Allow {
            entry: first.key.clone(),
            endpoints: admitted
                .iter()
                .flat_map(|(e, eps)| eps.iter().map(|&i| (e.key.clone(), i)))
                .collect(),
        },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Basis {
    Uninspected,
    Allowed,
    DenyRule,
    NoAllowRule,
    NoEndpointPath,
    BadQuery,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct RefL7 {
    verdict: Verdict,
    basis: Basis,
    /// The endpoints whose selectors decided (empty when uninspected or no path matched).
    decided: BTreeSet<EpId>,
}

fn find_endpoint<'p>(p: &'p GenPolicy, id: &EpId) -> &'p GenEndpoint {
    let entry = p.entries.iter().find(|e| e.key == id.0);
    match entry.and_then(|e| e.endpoints.get(id.1)) {
        Some(ep) => ep,
        None => panic!("no endpoint {id:?}"),
    }
}

fn selector_matches(sel: Option<&str>, path: &str) -> bool {
    match sel {
        None | Some("" | "**" | "/**") => true,
        Some(s) => covering_match(s, path),
    }
}

/// Specificity: the number of characters that are not `*` (`path_specificity`); a selector
/// that selects everything (none, `**`, `/**`) has none.
fn selector_specificity(sel: Option<&str>) -> usize {
    match sel {
        None | Some("" | "**" | "/**") => 0,
        Some(s) => s.chars().filter(|&c| c != '*').count(),
    }
}

fn preset_methods(access: &str) -> &'static [&'static str] {
    match access {
        "read-only" => &["GET", "HEAD", "OPTIONS"],
        "read-write" => &["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"],
        _ => &["*"],
    }
}

fn reference_l7(
    p: &GenPolicy,
    admitted: &BTreeSet<EpId>,
    method: &str,
    path: &str,
    query: Option<&str>,
) -> Result<RefL7, String> {
    let l7: Vec<(&EpId, &GenRest)> = admitted
        .iter()
        .filter_map(|id| find_endpoint(p, id).rest.as_ref().map(|r| (id, r)))
        .collect();
    if l7.is_empty() {
        return Ok(RefL7 {
            verdict: Verdict::Allow,
            basis: Basis::Uninspected,
            decided: BTreeSet::new(),
        });
    }
    let matching: Vec<&(&EpId, &GenRest)> = l7
        .iter()
        .filter(|(_, r)| selector_matches(r.selector.as_deref(), path))
        .collect();
    let Some(best) = matching
        .iter()
        .map(|(_, r)| selector_specificity(r.selector.as_deref()))
        .max()
    else {
        return Ok(RefL7 {
            verdict: Verdict::Deny,
            basis: Basis::NoEndpointPath,
            decided: BTreeSet::new(),
        });
    };
    let selected: Vec<(&EpId, &GenRest)> = matching
        .into_iter()
        .filter(|(_, r)| selector_specificity(r.selector.as_deref()) == best)
        .copied()
        .collect();
    let enforce = selected[0].1.enforce;
    if selected.iter().any(|(_, r)| r.enforce != enforce) {
        return Err(format!(
            "the selected endpoints {:?} disagree on enforcement: the ambiguity check should have refused this policy",
            selected.iter().map(|(id, _)| id).collect::<Vec<_>>()
        ));
    }
    let method = method.to_ascii_uppercase();
    let Some(query) = parse_query(query) else {
        // A malformed query refuses the request, even under audit.
        return Ok(RefL7 {
            verdict: Verdict::Deny,
            basis: Basis::BadQuery,
            decided: selected.iter().map(|(id, _)| (*id).clone()).collect(),
        });
    };
    let denied = selected
        .iter()
        .flat_map(|(_, r)| &r.deny_rules)
        .any(|rule| {
            method_match(rule.method, &method)
                && (rule.path == "**" || covering_match(&rule.path, path))
                && deny_query(&rule.query, &query)
        });
    let allowed = selected.iter().any(|(_, r)| match r.access {
        Some(a) => preset_methods(a).iter().any(|m| method_match(m, &method)),
        None => r.rules.iter().any(|rule| {
            method_match(rule.method, &method)
                && (rule.path == "**" || glob_match(&rule.path, b'/', path))
                && allow_query(&rule.query, &query)
        }),
    });
    let basis = if denied {
        Basis::DenyRule
    } else if allowed {
        Basis::Allowed
    } else {
        Basis::NoAllowRule
    };
    let verdict = match (basis, enforce) {
        (Basis::Allowed, _) => Verdict::Allow,
        (_, true) => Verdict::Deny,
        (_, false) => Verdict::Audit,
    };
    Ok(RefL7 {
        verdict,
        basis,
        decided: selected.iter().map(|(id, _)| (*id).clone()).collect(),
    })
}

/// Every string over `alphabet` of `min..=max` symbols, joined by `sep`.
fn all_strings(alphabet: &[&str], min: usize, max: usize, sep: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut layer: Vec<Vec<&str>> = vec![Vec::new()];
    for len in 0..=max {
        if len >= min {
            out.extend(layer.iter().map(|v| v.join(sep)));
        }
        layer = layer
            .iter()
            .flat_map(|v| {
                alphabet.iter().map(move |a| {
                    let mut w = v.clone();
                    w.push(a);
                    w
                })
            })
            .collect();
    }
    out
}

/// Request hosts that can tell every generated host pattern apart: 2 to 4 labels, then a
/// top-level label.
fn witness_hosts() -> Vec<String> {
    let labels = all_strings(REQUEST_LABELS, 2, 4, ".");
    TLDS.iter()
        .flat_map(|tld| labels.iter().map(move |h| format!("{h}.{tld}")))
        .collect()
}

/// Canonical request paths of up to 4 segments, with and without a trailing slash.
fn witness_paths() -> Vec<String> {
    let mut out = vec!["/".to_string()];
    for p in all_strings(PATH_SEGMENTS, 1, 4, "/") {
        out.push(format!("/{p}"));
        out.push(format!("/{p}/"));
    }
    out
}

/// The ambiguity check's question (spec §1.10) for what the generator can vary: two REST
/// endpoints (of any entries, regardless of binaries) sharing a port, whose hosts match a
/// common name and whose selectors select a common canonical path with equal specificity,
/// conflict when their enforcement differs. Answered by searching a bounded set of witnesses.
fn reference_conflict(p: &GenPolicy, hosts: &[String], paths: &[String]) -> Option<String> {
    let all: Vec<(&str, usize, &GenEndpoint)> = p
        .entries
        .iter()
        .flat_map(|e| {
            e.endpoints
                .iter()
                .enumerate()
                .map(move |(i, ep)| (e.key.as_str(), i, ep))
        })
        .collect();
    for (x, a) in all.iter().enumerate() {
        for b in &all[x + 1..] {
            if !a.2.ports.iter().any(|port| b.2.ports.contains(port)) {
                continue;
            }
            let Some(h) = hosts
                .iter()
                .find(|h| host_match(&a.2.host, h) && host_match(&b.2.host, h))
            else {
                continue;
            };
            let name = format!("{}.endpoints[{}] and {}.endpoints[{}]", a.0, a.1, b.0, b.1);
            if a.2.allowed_ips != b.2.allowed_ips {
                return Some(format!("{name} both take {h} with different allowed_ips"));
            }
            let (Some((ra, ea, sa)), Some((rb, eb, sb))) = (request_level(a.2), request_level(b.2))
            else {
                continue;
            };
            if (ra, ea) == (rb, eb) || selector_specificity(sa) != selector_specificity(sb) {
                continue;
            }
            if let Some(q) = paths
                .iter()
                .find(|q| selector_matches(sa, q) && selector_matches(sb, q))
            {
                return Some(format!(
                    "{name} both decide {h} {q} with different protocol or enforcement"
                ));
            }
        }
    }
    None
}

/// Request-level settings, for an endpoint that contributes them (REST, or `allowed_ips`):
/// (is REST, enforcement is `enforce`, selector). An L4 endpoint leaves `enforcement` out, so
/// it is the reference's default, audit; its selector is everything.
fn request_level(ep: &GenEndpoint) -> Option<(bool, bool, Option<&str>)> {
    match &ep.rest {
        Some(r) => Some((true, r.enforce, r.selector.as_deref())),
        None if ep.allowed_ips.is_some() => Some((false, false, None)),
        None => None,
    }
}

/// Instantiates a request host from a policy host pattern.
fn instantiate(pattern: &str, fills: &[&str], two: bool) -> String {
    let mut out = Vec::new();
    for (i, label) in pattern.split('.').enumerate() {
        let fill = fills[i % fills.len()];
        match label {
            "**" if two => out.push(format!("{fill}.{}", fills[(i + 1) % fills.len()])),
            "**" | "*" => out.push(fill.to_string()),
            l if l.contains('*') => out.push(l.replace('*', if fill == "c" { "" } else { fill })),
            // Request hosts are lower-case (the target parser lower-cases them).
            l => out.push(l.to_ascii_lowercase()),
        }
    }
    out.join(".")
}

fn request_host(p: &GenPolicy, spec: &HostSpec) -> String {
    match spec {
        HostSpec::Random(labels, tld) => format!("{}.{tld}", labels.join(".")),
        HostSpec::FromEndpoint {
            which,
            fills,
            two_for_double_star,
        } => {
            let hosts: Vec<&str> = p
                .entries
                .iter()
                .flat_map(|e| e.endpoints.iter().map(|ep| ep.host.as_str()))
                .collect();
            match hosts[which % hosts.len()] {
                "" => "hostless.io".to_string(),
                pattern => instantiate(pattern, fills, *two_for_double_star),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Engine side and comparison.
// ---------------------------------------------------------------------------------------------

fn ep_id(policy: &Policy, r: sluice::policy::EndpointRef) -> EpId {
    let ep = policy.endpoint(r);
    (ep.entry.as_str().to_string(), ep.index)
}

fn engine_basis(b: &RequestBasis<'_>) -> Basis {
    match b {
        RequestBasis::Uninspected => Basis::Uninspected,
        RequestBasis::Allowed(_) => Basis::Allowed,
        RequestBasis::DenyRule(_) => Basis::DenyRule,
        RequestBasis::NoAllowRule => Basis::NoAllowRule,
        RequestBasis::NoEndpointPath => Basis::NoEndpointPath,
        RequestBasis::Target(CanonError::InvalidQueryEncoding) => Basis::BadQuery,
        other => panic!("unexpected basis for a canonical REST request: {other:?}"),
    }
}

#[derive(Debug, Default)]
struct Stats {
    cases: usize,
    loaded: usize,
    rejected_ambiguity: usize,
    l4_allow: usize,
    l4_no_endpoint: usize,
    l4_binary: usize,
    l7: [usize; 6],
    audit: usize,
}

struct Witnesses {
    hosts: Vec<String>,
    paths: Vec<String>,
}

fn check(
    p: &GenPolicy,
    requests: &[GenRequest],
    witnesses: &Witnesses,
    stats: &RefCell<Stats>,
) -> Result<(), TestCaseError> {
    stats.borrow_mut().cases += 1;
    let yaml = to_yaml(p);
    let sources = [Source {
        name: "prop.yaml".to_string(),
        text: yaml.clone(),
    }];
    let conflict = reference_conflict(p, &witnesses.hosts, &witnesses.paths);
    let policy = match load(&sources, Compat::Strict) {
        Ok(l) => l.policy,
        Err(e) => {
            // The generator writes only valid constructs; the one legitimate refusal is an
            // ambiguity conflict (two overlapping REST endpoints disagreeing on enforcement).
            let errors: Vec<String> = e.errors().map(ToString::to_string).collect();
            let other: Vec<&String> = errors
                .iter()
                .filter(|d| !d.contains("conflicting metadata"))
                .collect();
            prop_assert!(
                other.is_empty(),
                "unexpected load errors {other:#?}\n--- policy ---\n{yaml}"
            );
            prop_assert!(
                conflict.is_some(),
                "the loader reports an ambiguity the reference finds no witness for: {errors:#?}\n--- policy ---\n{yaml}"
            );
            stats.borrow_mut().rejected_ambiguity += 1;
            return Ok(());
        }
    };
    prop_assert!(
        conflict.is_none(),
        "the loader accepted a policy with an ambiguity: {}\n--- policy ---\n{yaml}",
        conflict.unwrap_or_default()
    );
    stats.borrow_mut().loaded += 1;

    for req in requests {
        let host = request_host(p, &req.host);
        let ancestors: Vec<String> = req.ancestors.iter().map(|a| (*a).to_string()).collect();
        let caller = Caller {
            exe: req.exe,
            ancestors: &ancestors,
            cmdline: &[],
        };
        let context = || {
            format!(
                "\n--- request ---\nexe {} ancestors {:?} -> {host}:{}  {} {}{}\n--- policy ---\n{yaml}",
                req.exe,
                req.ancestors,
                req.port,
                req.method,
                req.path,
                req.query
                    .as_deref()
                    .map(|q| format!("?{q}"))
                    .unwrap_or_default(),
            )
        };
        let want = reference_l4(p, req.exe, &ancestors, &host, req.port);
        let got = policy.decide_l4(&caller, &host, req.port);
        let admission = match (&want, got) {
            (RefL4::Allow { entry, endpoints }, L4Decision::Allow(a)) => {
                let got_eps: BTreeSet<EpId> =
                    a.endpoints.iter().map(|&r| ep_id(&policy, r)).collect();
                prop_assert_eq!(
                    a.entry.as_str(),
                    entry.as_str(),
                    "L4 deciding entry{}",
                    context()
                );
                prop_assert_eq!(&got_eps, endpoints, "L4 admitted endpoints{}", context());
                stats.borrow_mut().l4_allow += 1;
                a
            }
            (RefL4::NoEndpoint, L4Decision::Deny(d)) => {
                prop_assert_eq!(
                    d.kind,
                    L4DenyKind::NoEndpoint,
                    "L4 denial kind{}",
                    context()
                );
                stats.borrow_mut().l4_no_endpoint += 1;
                continue;
            }
            (RefL4::Binary { entries }, L4Decision::Deny(d)) => {
                let got: Option<Vec<String>> = match &d.kind {
                    L4DenyKind::Binary { entries } => {
                        Some(entries.iter().map(|k| k.as_str().to_string()).collect())
                    }
                    _ => None,
                };
                prop_assert_eq!(got.as_ref(), Some(entries), "L4 denial kind{}", context());
                stats.borrow_mut().l4_binary += 1;
                continue;
            }
            (want, got) => {
                return Err(TestCaseError::fail(format!(
                    "L4 disagreement: reference {want:?}, engine {got:?}{}",
                    context()
                )));
            }
        };
        let RefL4::Allow { endpoints, .. } = &want else {
            continue;
        };

        let target = match &req.query {
            Some(q) => format!("{}?{q}", req.path),
            None => req.path.clone(),
        };
        let want = match reference_l7(p, endpoints, req.method, &req.path, req.query.as_deref()) {
            Ok(w) => w,
            Err(msg) => return Err(TestCaseError::fail(format!("{msg}{}", context()))),
        };
        let got = policy.decide_request(
            &admission,
            &Request {
                method: req.method,
                target: target.as_bytes(),
                websocket_upgrade: false,
            },
        );
        let got_basis = engine_basis(&got.basis);
        let got_decided: BTreeSet<EpId> = match got_basis {
            Basis::Uninspected | Basis::NoEndpointPath => BTreeSet::new(),
            _ => got.endpoints.iter().map(|&r| ep_id(&policy, r)).collect(),
        };
        let got = RefL7 {
            verdict: got.verdict,
            basis: got_basis,
            decided: got_decided,
        };
        prop_assert_eq!(
            &got,
            &want,
            "L7 (left: engine, right: reference){}",
            context()
        );
        let mut s = stats.borrow_mut();
        s.l7[want.basis as usize] += 1;
        if want.verdict == Verdict::Audit {
            s.audit += 1;
        }
    }
    Ok(())
}

#[test]
fn engine_agrees_with_reference() {
    // 256 cases by default; `PROPTEST_CASES` overrides (for longer hunts).
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let config = Config {
        failure_persistence: None,
        ..Config::with_cases(cases)
    };
    let cases = config.cases as usize;
    let mut runner = TestRunner::new(config);
    let stats = RefCell::new(Stats::default());
    let strategy = (policy(), prop::collection::vec(request(), 16));
    let witnesses = Witnesses {
        hosts: witness_hosts(),
        paths: witness_paths(),
    };
    let result = runner.run(&strategy, |(p, requests)| {
        check(&p, &requests, &witnesses, &stats)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let s = stats.into_inner();
    println!("{s:#?}");
    assert!(s.cases >= cases, "{s:?}");
    // The generator is tuned so that most policies load; a drop means it (or the loader) changed.
    assert!(
        s.loaded * 2 >= s.cases,
        "too few generated policies load: {s:?}"
    );
    assert!(
        s.l4_allow > 0 && s.l4_no_endpoint > 0 && s.l4_binary > 0,
        "{s:?}"
    );
    assert!(
        s.l7.iter().all(|&n| n > 0),
        "every L7 basis should occur: {s:?}"
    );
    assert!(s.audit > 0, "{s:?}");
}

/// The reference matcher itself, on the spec's examples.
#[test]
fn reference_matcher_examples() {
    let m = |p: &str, s: &str| glob_match(p, b'/', s);
    assert!(m("/v1/*", "/v1/a") && !m("/v1/*", "/v1/a/b") && m("/v1/*", "/v1/"));
    assert!(m("/x/**", "/x/a/b") && m("/x/**", "/x/") && !m("/x/**", "/x"));
    assert!(covering_match("/x/**", "/x") && !covering_match("/x/**", "/xy"));
    assert!(
        m("**/foo", "foo") && m("**/foo", "/foo") && m("**/foo", "a/b/foo") && !m("**/foo", "afoo")
    );
    assert!(m("/a/**/z", "/a/z") && m("/a/**/z", "/a/b/c/z") && !m("/a/**/z", "/az"));
    assert!(m("**", "") && m("**", "/a/b") && m("/**", "/a/b/c"));
    assert!(m("/a**", "/abc") && !m("/a**", "/ab/c"));
    assert!(m("/**/**", "/a/b") && m("/a/**/**", "/a/b") && !m("/a/**/**", "/a"));
    assert!(glob_match("v1.*", b'.', "v1.2") && !glob_match("v*", b'.', "v1.2"));
    assert!(
        host_match("*.example.com", "api.example.com")
            && !host_match("*.example.com", "example.com")
    );
    assert!(
        !host_match("*.example.com", "a.b.example.com")
            && host_match("**.example.com", "a.b.example.com")
    );
    assert!(!host_match("**.example.com", "example.com"));
    assert!(host_match("*-ai.g.com", "us-ai.g.com") && !host_match("*-ai.g.com", "us.ai.g.com"));
    assert!(host_match(
        "*.s3.*.amazonaws.com",
        "b.s3.us-east-1.amazonaws.com"
    ));
    assert!(!host_match(
        "*.s3.*.amazonaws.com",
        "s3.us-east-1.amazonaws.com"
    ));
    assert!(
        binary_match("/usr/bin/py*", "/usr/bin/python3")
            && !binary_match("/usr/bin/py*", "/usr/bin/py/x")
    );
    assert!(binary_match("*", "") && binary_match("/usr/**", "/usr/bin/curl"));
    assert_eq!(
        parse_query(Some("a=1&b&&c=%61+b")),
        Some(vec![
            ("a".into(), "1".into()),
            ("b".into(), String::new()),
            ("c".into(), "a b".into())
        ])
    );
    assert_eq!(parse_query(Some("a=%g1")), None);
    assert_eq!(parse_query(Some("a=%4")), None);
}

// ---------------------------------------------------------------------------------------------
// The glob languages on their own: the engine's `Glob` and `HostPattern` against the reference
// matcher, on patterns that are not segment-aligned (`a**`, `**b/`, `/**/**`, ...).
// ---------------------------------------------------------------------------------------------

fn raw_pattern() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(&["a", "b", "/", "*", "**"][..]), 1..=6)
        .prop_map(|t| t.concat())
}

/// Every string of up to 7 characters over the patterns' alphabet.
fn raw_witnesses() -> Vec<String> {
    all_strings(&["a", "b", "/"], 0, 7, "")
}

fn run(name: &str, test: impl Fn(&mut TestRunner) -> Result<(), String>) {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let mut runner = TestRunner::new(Config {
        failure_persistence: None,
        ..Config::with_cases(cases)
    });
    if let Err(e) = test(&mut runner) {
        panic!("{name}: {e}");
    }
}

#[test]
fn glob_matching_agrees_with_reference() {
    let inputs = raw_witnesses();
    run("glob matching", |runner| {
        runner
            .run(&(raw_pattern(), any::<bool>()), |(pattern, dot)| {
                let (delim, d) = if dot { ('.', b'.') } else { ('/', b'/') };
                // The same patterns with `.` as the delimiter, for query values.
                let pattern = if dot {
                    pattern.replace('/', ".")
                } else {
                    pattern
                };
                let glob =
                    Glob::new(&pattern, delim).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let covering = Glob::new_covering_prefix(&pattern, delim)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                for input in &inputs {
                    let input = if dot {
                        input.replace('/', ".")
                    } else {
                        input.clone()
                    };
                    let want = glob_match(&pattern, d, &input);
                    prop_assert_eq!(
                        glob.is_match(&input),
                        want,
                        "pattern {:?} input {:?}",
                        pattern,
                        input
                    );
                    if !dot {
                        let want = covering_match(&pattern, &input);
                        prop_assert_eq!(
                            covering.is_match(&input),
                            want,
                            "covering pattern {:?} input {:?}",
                            pattern,
                            input
                        );
                    }
                }
                Ok(())
            })
            .map_err(|e| e.to_string())
    });
}

#[test]
fn glob_intersection_agrees_with_reference() {
    let inputs = raw_witnesses();
    run("glob intersection", |runner| {
        runner
            .run(&(raw_pattern(), raw_pattern()), |(a, b)| {
                let ga = Glob::new(&a, '/').map_err(|e| TestCaseError::fail(e.to_string()))?;
                let gb = Glob::new(&b, '/').map_err(|e| TestCaseError::fail(e.to_string()))?;
                let want = reference_intersects(&a, &b, b'/');
                // The two references agree with each other: a short witness means an intersection.
                let witness = inputs
                    .iter()
                    .find(|s| glob_match(&a, b'/', s) && glob_match(&b, b'/', s));
                prop_assert!(
                    want || witness.is_none(),
                    "reference NFA misses witness {:?} of {:?} and {:?}",
                    witness,
                    a,
                    b
                );
                prop_assert_eq!(
                    ga.intersects(&gb),
                    want,
                    "{:?} and {:?}: witness {:?}",
                    a,
                    b,
                    witness
                );
                prop_assert_eq!(gb.intersects(&ga), want, "{:?} and {:?} (swapped)", b, a);
                Ok(())
            })
            .map_err(|e| e.to_string())
    });
}

fn raw_host_pattern() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&["a", "b", "*", "**", "a*", "*b", "A"][..]),
        prop::collection::vec(prop::sample::select(&["a", "b", "*"][..]), 1..=3),
    )
        .prop_map(|(first, rest)| format!("{first}.{}", rest.join(".")))
}

#[test]
fn host_patterns_agree_with_reference() {
    let hosts = all_strings(&["a", "b", "ab", "c"], 1, 5, ".");
    run("host patterns", |runner| {
        runner
            .run(&(raw_host_pattern(), raw_host_pattern()), |(a, b)| {
                // Patterns the loader refuses (`*.a`: too broad) are out of scope here.
                let (Ok(ha), Ok(hb)) = (HostPattern::new(&a), HostPattern::new(&b)) else {
                    return Ok(());
                };
                for h in &hosts {
                    prop_assert_eq!(
                        ha.is_match(h),
                        host_match(&a, h),
                        "pattern {:?} host {:?}",
                        a,
                        h
                    );
                }
                let witness = hosts
                    .iter()
                    .find(|h| host_match(&a, h) && host_match(&b, h));
                prop_assert_eq!(
                    ha.intersects(&hb),
                    witness.is_some(),
                    "{:?} and {:?}: witness {:?}",
                    a,
                    b,
                    witness
                );
                prop_assert_eq!(
                    hb.intersects(&ha),
                    witness.is_some(),
                    "{:?} and {:?} (swapped)",
                    b,
                    a
                );
                Ok(())
            })
            .map_err(|e| e.to_string())
    });
}
