//! The ambiguity check (spec §1.10): two endpoints that can match the same connection or
//! request must not disagree on how it is handled.
//!
//! Owns the pairing of endpoints (across and within all policies, regardless of binaries) and
//! the comparison of their connection and request-pipeline settings, with the reference's
//! message shape. Pairs are found through indexes by port and host suffix, not by comparing
//! all n² pairs, so a policy of thousands of endpoints loads in milliseconds.

use std::collections::{BTreeSet, HashMap};

use super::diag::Diagnostics;
use super::glob::HostPattern;
use super::model::{Endpoint, Entry, Protocol, TlsMode};

/// Checks every overlapping pair and reports one error per conflicting pair, at the second
/// endpoint of the pair.
pub fn check(entries: &[Entry], diags: &mut Diagnostics) {
    let all: Vec<(&Entry, &Endpoint)> = entries
        .iter()
        .flat_map(|e| e.endpoints.iter().map(move |ep| (e, ep)))
        .collect();
    let mut by_port: HashMap<u16, Vec<usize>> = HashMap::new();
    for (i, (_, ep)) in all.iter().enumerate() {
        for &p in &ep.ports {
            by_port.entry(p).or_default().push(i);
        }
    }
    let suffix_of: Vec<Option<String>> =
        all.iter().map(|(_, ep)| ep.host.literal_suffix()).collect();
    let mut pairs: BTreeSet<(usize, usize)> = BTreeSet::new();
    for members in by_port.values() {
        candidate_pairs(&all, &suffix_of, members, &mut pairs);
    }
    for (i, j) in pairs {
        let ((le, l), (re, r)) = (all[i], all[j]);
        let conflicts = conflicts(l, r);
        if conflicts.is_empty() {
            continue;
        }
        let shared: Vec<String> = l
            .ports
            .iter()
            .filter(|p| r.ports.contains(p))
            .map(u16::to_string)
            .collect();
        let message = format!(
            "network policies '{}' endpoint[{}] ({}) and '{}' endpoint[{}] ({}) overlap on port(s) {} with conflicting metadata: {} (other endpoint at {})",
            le.name,
            l.index,
            l.describe(),
            re.name,
            r.index,
            r.describe(),
            shared.join(","),
            conflicts.join("; "),
            l.location,
        );
        diags.error(&r.location.file, r.location.pos, r.field(), message);
    }
}

/// Pairs of endpoints on one port whose hosts can match a common name.
fn candidate_pairs(
    all: &[(&Entry, &Endpoint)],
    suffix_of: &[Option<String>],
    members: &[usize],
    out: &mut BTreeSet<(usize, usize)>,
) {
    let mut exact: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut exact_by_suffix: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut wild_by_suffix: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut wild_by_any_suffix: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut unindexed: Vec<usize> = Vec::new();
    for &i in members {
        match (&all[i].1.host, suffix_of[i].as_deref()) {
            (HostPattern::Exact(h), _) => {
                exact.entry(h.as_str()).or_default().push(i);
                for s in suffixes(h) {
                    exact_by_suffix.entry(s).or_default().push(i);
                }
            }
            (HostPattern::Wildcard { .. }, Some(s)) => {
                for t in suffixes(s) {
                    wild_by_any_suffix.entry(t).or_default().push(i);
                }
                wild_by_suffix.entry(s).or_default().push(i);
            }
            _ => unindexed.push(i),
        }
    }
    let mut add = |a: usize, b: usize| {
        if a != b && all[a].1.host.intersects(&all[b].1.host) {
            out.insert((a.min(b), a.max(b)));
        }
    };
    for group in exact.values() {
        for (x, &a) in group.iter().enumerate() {
            for &b in &group[x + 1..] {
                add(a, b);
            }
        }
    }
    for (s, group) in &wild_by_suffix {
        for &w in group {
            // Exact hosts under the wildcard's literal suffix.
            for &e in exact_by_suffix.get(s).into_iter().flatten() {
                add(w, e);
            }
            // Wildcards whose suffix is a suffix of this one's, or the other way round.
            for t in suffixes(s) {
                for &o in wild_by_suffix.get(t).into_iter().flatten() {
                    add(w, o);
                }
            }
            for &o in wild_by_any_suffix.get(s).into_iter().flatten() {
                add(w, o);
            }
        }
    }
    for &u in &unindexed {
        for &m in members {
            add(u, m);
        }
    }
}

/// `a.b.c` → `a.b.c`, `b.c`, `c`.
fn suffixes(host: &str) -> impl Iterator<Item = &str> {
    std::iter::once(host).chain(host.match_indices('.').map(move |(i, _)| &host[i + 1..]))
}

fn contributes_metadata(ep: &Endpoint) -> bool {
    (ep.protocol != Protocol::L4 && ep.protocol != Protocol::Tcp)
        || !ep.allowed_ips.is_empty()
        || ep.tls == TlsMode::Skip
        || ep.credential_binding.is_some()
}

fn conflicts(l: &Endpoint, r: &Endpoint) -> Vec<String> {
    let mut out = Vec::new();
    // Values are compared typed; text is made only for a conflict (most pairs agree).
    let mut cmp = |field: &str, same: bool, show: &dyn Fn(&Endpoint) -> String| {
        if !same {
            out.push(format!("{field}={} vs {}", show(l), show(r)));
        }
    };
    let tcp = |e: &Endpoint| (e.protocol == Protocol::Tcp).to_string();
    cmp(
        "transparent_tcp_eligible",
        (l.protocol == Protocol::Tcp) == (r.protocol == Protocol::Tcp),
        &tcp,
    );
    cmp("tls", l.tls == r.tls, &|e| format!("{:?}", e.tls.as_str()));
    cmp(
        "allowed_ips",
        l.allowed_ips == r.allowed_ips || ips(l) == ips(r),
        &ips,
    );
    let request_level = contributes_metadata(l)
        && contributes_metadata(r)
        && l.selector.specificity() == r.selector.specificity()
        && l.selector.intersects(&r.selector);
    if request_level {
        let proto = |e: &Endpoint| match e.protocol {
            Protocol::Tcp => "",
            p => p.as_str(),
        };
        cmp("protocol", proto(l) == proto(r), &|e| {
            format!("{:?}", proto(e))
        });
        cmp(
            "enforcement",
            l.enforcement_for_ambiguity == r.enforcement_for_ambiguity,
            &|e| format!("{:?}", e.enforcement_for_ambiguity.as_str()),
        );
        cmp(
            "allow_encoded_slash",
            l.allow_encoded_slash == r.allow_encoded_slash,
            &|e| e.allow_encoded_slash.to_string(),
        );
        cmp(
            "websocket_credential_rewrite",
            l.websocket_credential_rewrite == r.websocket_credential_rewrite,
            &|e| e.websocket_credential_rewrite.to_string(),
        );
        cmp(
            "request_body_credential_rewrite",
            l.request_body_credential_rewrite == r.request_body_credential_rewrite,
            &|e| e.request_body_credential_rewrite.to_string(),
        );
        let signing = |e: &Endpoint| {
            let s = e.signing.as_ref();
            [
                s.map_or("", |s| s.mode.as_str()).to_string(),
                s.map_or("", |s| s.service.as_str()).to_string(),
                s.and_then(|s| s.region.clone()).unwrap_or_default(),
            ]
        };
        let binding = |e: &Endpoint| e.credential_binding.clone().unwrap_or_default();
        cmp(
            "credential_binding.provider",
            binding(l) == binding(r),
            &|e| format!("{:?}", binding(e)),
        );
        for (i, name) in ["credential_signing", "signing_service", "signing_region"]
            .into_iter()
            .enumerate()
        {
            cmp(name, signing(l)[i] == signing(r)[i], &|e| {
                format!("{:?}", signing(e)[i])
            });
        }
        if l.protocol.is_rpc() && l.protocol == r.protocol {
            cmp(
                "json_rpc_max_body_bytes",
                l.rpc.max_body_bytes == r.rpc.max_body_bytes,
                &|e| e.rpc.max_body_bytes.to_string(),
            );
        }
        if l.protocol == Protocol::Mcp && r.protocol == Protocol::Mcp {
            cmp(
                "mcp.strict_tool_names",
                l.rpc.strict_tool_names == r.rpc.strict_tool_names,
                &|e| e.rpc.strict_tool_names.to_string(),
            );
        }
    }
    out
}

fn ips(ep: &Endpoint) -> String {
    let mut v: Vec<String> = ep
        .allowed_ips
        .nets
        .iter()
        .map(ToString::to_string)
        .collect();
    if ep.allowed_ips.has_invalid {
        v.push("<invalid>".to_string());
    }
    v.sort();
    format!("{v:?}")
}
