//! The reference implementation: a naive glob matcher and the decision semantics of the
//! spec, written independently of the engine.

use std::collections::BTreeSet;

use sluice::policy::Verdict;

use super::generate::*;

// ---------------------------------------------------------------------------------------------
// The reference implementation.
// ---------------------------------------------------------------------------------------------

/// Tokens of a glob, after globset's (literal_separator) treatment of `**`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GTok {
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
pub fn tokenize(pattern: &str, delim: u8) -> Vec<GTok> {
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

pub fn match_toks(t: &[GTok], s: &[u8], d: u8) -> bool {
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

pub fn glob_match(pattern: &str, delim: u8, input: &str) -> bool {
    let toks = tokenize(pattern, delim);
    if toks == [GTok::RecPrefix] {
        // globset: a pattern that is only `**` matches everything.
        return true;
    }
    match_toks(&toks, input.as_bytes(), delim)
}

/// What an NFA edge accepts.
#[derive(Clone, Copy, Debug)]
pub enum Class {
    Char(u8),
    Any,
    NotDelim,
}

/// A Thompson-style NFA of a token list: state 0 starts, `accept` accepts.
pub struct Nfa {
    pub eps: Vec<Vec<usize>>,
    pub edges: Vec<Vec<(Class, usize)>>,
    pub accept: usize,
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

pub fn class_accepts(c: Class, ch: u8, d: u8) -> bool {
    match c {
        Class::Char(x) => x == ch,
        Class::Any => true,
        Class::NotDelim => ch != d,
    }
}

/// Whether two globs match a common string: reachability in the product of their NFAs, over
/// the characters of both patterns, the delimiter and one stand-in for every other character.
pub fn reference_intersects(a: &str, b: &str, d: u8) -> bool {
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
pub fn covering_match(pattern: &str, path: &str) -> bool {
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

pub fn host_match(pattern: &str, host: &str) -> bool {
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

/// A binary pattern is a glob when it contains `*` (segment-bound, so `*` alone matches no
/// absolute path), else literal text.
pub fn binary_match(pattern: &str, exe: &str) -> bool {
    if pattern.contains('*') {
        glob_match(pattern, b'/', exe)
    } else {
        pattern == exe
    }
}

pub fn method_match(rule: &str, method: &str) -> bool {
    match rule {
        "*" => true,
        "GET" => method == "GET" || method == "HEAD",
        other => other == method,
    }
}

/// `+` is a space and `%XX` a byte; a malformed escape is an error (spec §1.8).
pub fn decode_query_part(s: &str) -> Option<String> {
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
pub fn parse_query(q: Option<&str>) -> Option<Vec<(String, String)>> {
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

pub fn query_value_match(q: &GenQuery, v: &str) -> bool {
    q.globs.iter().any(|g| glob_match(g, b'.', v))
}

/// Allow side: every key present with at least one value, and every value matching.
pub fn allow_query(matchers: &[GenQuery], query: &[(String, String)]) -> bool {
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
pub fn deny_query(matchers: &[GenQuery], query: &[(String, String)]) -> bool {
    matchers.iter().all(|m| {
        query
            .iter()
            .any(|(k, v)| k == m.key && query_value_match(m, v))
    })
}

/// An endpoint, named as the engine names it: (entry key, endpoint index).
pub type EpId = (String, usize);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefL4 {
    Allow {
        entry: String,
        endpoints: BTreeSet<EpId>,
    },
    NoEndpoint,
    Binary {
        entries: Vec<String>,
    },
}

pub fn reference_l4(
    p: &GenPolicy,
    exe: &str,
    ancestors: &[String],
    host: &str,
    port: u16,
) -> RefL4 {
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
pub enum Basis {
    Uninspected,
    Allowed,
    DenyRule,
    NoAllowRule,
    NoEndpointPath,
    BadQuery,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefL7 {
    pub verdict: Verdict,
    pub basis: Basis,
    /// The endpoints whose selectors decided (empty when uninspected or no path matched).
    pub decided: BTreeSet<EpId>,
}

pub fn find_endpoint<'p>(p: &'p GenPolicy, id: &EpId) -> &'p GenEndpoint {
    let entry = p.entries.iter().find(|e| e.key == id.0);
    match entry.and_then(|e| e.endpoints.get(id.1)) {
        Some(ep) => ep,
        None => panic!("no endpoint {id:?}"),
    }
}

/// Selectors have the meaning of rule paths: `/x/**` selects below `/x`, not `/x`.
pub fn selector_matches(sel: Option<&str>, path: &str) -> bool {
    match sel {
        None | Some("" | "**") => true,
        Some(s) => glob_match(s, b'/', path),
    }
}

/// Specificity: the number of characters that are not `*` (`path_specificity`), so `/**`
/// (one) is more specific than none or `**` (zero).
pub fn selector_specificity(sel: Option<&str>) -> usize {
    match sel {
        None => 0,
        Some(s) => s.chars().filter(|&c| c != '*').count(),
    }
}

pub fn preset_methods(access: &str) -> &'static [&'static str] {
    match access {
        "read-only" => &["GET", "HEAD", "OPTIONS"],
        "read-write" => &["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"],
        _ => &["*"],
    }
}

pub fn reference_l7(
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
        .iter()
        .filter(|(_, r)| selector_specificity(r.selector.as_deref()) == best)
        .map(|&&x| x)
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
    // Deny rules of every endpoint whose selector matches apply, broader ones too.
    let denied = matching
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
pub fn all_strings(alphabet: &[&str], min: usize, max: usize, sep: &str) -> Vec<String> {
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
pub fn witness_hosts() -> Vec<String> {
    let labels = all_strings(REQUEST_LABELS, 2, 4, ".");
    TLDS.iter()
        .flat_map(|tld| labels.iter().map(move |h| format!("{h}.{tld}")))
        .collect()
}

/// Canonical request paths of up to 4 segments, with and without a trailing slash.
pub fn witness_paths() -> Vec<String> {
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
pub fn reference_conflict(p: &GenPolicy, hosts: &[String], paths: &[String]) -> Option<String> {
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
pub fn request_level(ep: &GenEndpoint) -> Option<(bool, bool, Option<&str>)> {
    match &ep.rest {
        Some(r) => Some((true, r.enforce, r.selector.as_deref())),
        None if ep.allowed_ips.is_some() => Some((false, false, None)),
        None => None,
    }
}

/// Instantiates a request host from a policy host pattern.
pub fn instantiate(pattern: &str, fills: &[&str], two: bool) -> String {
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

pub fn request_host(p: &GenPolicy, spec: &HostSpec) -> String {
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
