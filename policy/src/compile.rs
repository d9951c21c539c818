//! The compiled policy: an immutable snapshot with indexes for the per-connection lookup.
//!
//! Owns `Policy` and its endpoint index (by port, then exact host, then literal host suffix
//! for wildcards), so an L4 decision on thousands of endpoints looks at a handful. Decisions
//! themselves are in `decide.rs`. A `Policy` is built once per load and shared behind an
//! `Arc`; nothing in it is re-parsed per request.

use std::collections::HashMap;

use super::glob::HostPattern;
use super::model::{Binary, BinaryMatcher, Endpoint, Entry, Sandbox};

/// One endpoint of one entry: indexes into `Policy::entries`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointRef {
    pub entry: u32,
    pub endpoint: u32,
}

#[derive(Debug, Default)]
struct PortIndex {
    exact: HashMap<Box<str>, Vec<EndpointRef>>,
    /// Wildcards keyed by the literal labels after their last wildcard label.
    by_suffix: HashMap<Box<str>, Vec<EndpointRef>>,
    /// Wildcards with a wildcard last label, and hostless (`allowed_ips`) endpoints.
    scan: Vec<EndpointRef>,
}

/// A loaded, validated and compiled policy.
#[derive(Debug)]
pub struct Policy {
    pub(super) entries: Vec<Entry>,
    by_port: HashMap<u16, PortIndex>,
    sandbox: Sandbox,
    sources: Vec<String>,
}

impl Policy {
    /// A policy with no entries: everything is denied.
    pub fn empty() -> Policy {
        Policy::compile(Vec::new(), Sandbox::default(), Vec::new())
    }

    /// `entries` must be validated and free of ambiguities; they are sorted by key here so
    /// that "the smallest matching key" is the first match (spec §2.7).
    pub(super) fn compile(
        mut entries: Vec<Entry>,
        sandbox: Sandbox,
        sources: Vec<String>,
    ) -> Policy {
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        let mut by_port: HashMap<u16, PortIndex> = HashMap::new();
        for (ei, entry) in entries.iter().enumerate() {
            for (pi, ep) in entry.endpoints.iter().enumerate() {
                let r = EndpointRef {
                    entry: u32::try_from(ei).unwrap_or(u32::MAX),
                    endpoint: u32::try_from(pi).unwrap_or(u32::MAX),
                };
                for &port in &ep.ports {
                    let idx = by_port.entry(port).or_default();
                    match &ep.host {
                        HostPattern::Exact(h) => {
                            idx.exact.entry(h.as_str().into()).or_default().push(r)
                        }
                        w @ HostPattern::Wildcard { .. } => match w.literal_suffix() {
                            Some(s) => idx.by_suffix.entry(s.into()).or_default().push(r),
                            None => idx.scan.push(r),
                        },
                        HostPattern::Any => idx.scan.push(r),
                    }
                }
            }
        }
        Policy {
            entries,
            by_port,
            sandbox,
            sources,
        }
    }

    /// Adds, for every literal binary path that `resolve` maps to a different real path, that
    /// target as a match too: the kernel reports a process's resolved executable, so a policy
    /// naming `/usr/bin/python3` (a symlink) must also match `/usr/bin/python3.11` (spec §2.4).
    /// `resolve` is the impure part (the proxy passes `fs::canonicalize`).
    pub fn add_symlink_targets(&mut self, resolve: impl Fn(&str) -> Option<String>) {
        for entry in &mut self.entries {
            let mut extra = Vec::new();
            for b in &entry.binaries {
                if let BinaryMatcher::Exact(path) = &b.matcher
                    && let Some(target) = resolve(path)
                    && &target != path
                    && !entry
                        .binaries
                        .iter()
                        .any(|o| o.matcher == BinaryMatcher::Exact(target.clone()))
                {
                    extra.push(Binary {
                        source: b.source.clone(),
                        matcher: BinaryMatcher::Exact(target),
                        location: b.location.clone(),
                    });
                }
            }
            entry.binaries.extend(extra);
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn endpoint(&self, r: EndpointRef) -> &Endpoint {
        &self.entries[r.entry as usize].endpoints[r.endpoint as usize]
    }

    pub fn entry_of(&self, r: EndpointRef) -> &Entry {
        &self.entries[r.entry as usize]
    }

    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// The files the policy was loaded from, in order.
    pub fn sources(&self) -> &[String] {
        &self.sources
    }

    pub fn endpoint_count(&self) -> usize {
        self.entries.iter().map(|e| e.endpoints.len()).sum()
    }

    /// Every endpoint matching `host` (lower-case, validated) and `port`, in entry-key order.
    pub fn endpoints_for(&self, host: &str, port: u16) -> Vec<EndpointRef> {
        let Some(idx) = self.by_port.get(&port) else {
            return Vec::new();
        };
        let mut out: Vec<EndpointRef> = Vec::new();
        if let Some(list) = idx.exact.get(host) {
            out.extend_from_slice(list);
        }
        if !idx.by_suffix.is_empty() {
            let mut rest = host;
            loop {
                if let Some(list) = idx.by_suffix.get(rest) {
                    out.extend(
                        list.iter()
                            .filter(|r| self.endpoint(**r).host.is_match(host)),
                    );
                }
                match rest.find('.') {
                    Some(i) => rest = &rest[i + 1..],
                    None => break,
                }
            }
        }
        out.extend(
            idx.scan
                .iter()
                .filter(|r| self.endpoint(**r).host.is_match(host)),
        );
        out.sort_unstable();
        out.dedup();
        out
    }
}
