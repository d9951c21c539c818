//! Validation: raw document → typed entries, with the reference's rules (spec §1.9) and
//! sluice's strict/compat table (spec §13).
//!
//! Owns every judgement of a value: port ranges, protocols, presets, `allowed_ips`, the
//! combination rules (`rules` with `access`, `deny_rules` without a base allow set, `tls: skip`
//! with a protocol), and the warnings `policy check` prints (defaulted enforcement, shells and
//! interpreters in `binaries`, glob characters that the reference reads literally). Rules
//! themselves are validated in `rules.rs`; endpoint pairs in `ambiguity.rs`. Findings go out
//! through `report.rs`.
//!
//! In strict mode (the default) a construct the reference silently misreads is an error that
//! says what the reference would do; in `--compat openshell` it is accepted with the
//! reference's interpretation and a warning.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use super::diag::Location;
use super::glob::{Glob, HostPattern, HostPatternError};
use super::model::{
    AllowedIps, Binary, BinaryMatcher, Endpoint, Enforcement, Entry, LandlockCompat, PathSelector,
    PolicyKey, Protocol, RunAs, Sandbox, Signing, SigningMode, TlsMode,
};
use super::raw::{RawBinary, RawDocument, RawEndpoint, RawEntry, Spanned};
use super::report::{Idx, Sub, Validator};
use super::rules;
pub use super::selector::{SelectorError, parse_selector, selector_for};
use values::{fs_path_problem, is_dns_pattern, url_shaped_host};

/// Basenames whose grants pass to everything they run (spec §2.3).
const LAUNCHERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "csh", "tcsh", "ash", "busybox", "env",
    "python", "python2", "python3", "node", "nodejs", "deno", "bun", "perl", "ruby", "php", "lua",
    "java", "pwsh", "tclsh", "sudo", "nohup", "xargs", "timeout", "nice", "make",
];

/// One file's validated content.
#[derive(Debug, Default)]
pub struct Validated {
    pub entries: Vec<Entry>,
    pub sandbox: Sandbox,
    pub sections: Vec<(&'static str, Location)>,
}

impl Validator<'_> {
    pub fn document(&mut self, doc: &RawDocument) -> Validated {
        let mut out = Validated::default();
        match &doc.version {
            // A NemoClaw preset is a fragment merged into a full policy: no `version`.
            None if doc.version_given || !doc.is_mapping || doc.preset.is_some() => {}
            None => self.error(
                doc.root_pos,
                "version",
                "`version` is missing; write `version: 1` (the reference refuses a document without it)",
            ),
            Some(v) if v.value != 1 => {
                let msg = format!(
                    "unsupported policy version {} (write `version: 1`)",
                    v.value
                );
                self.lenient(
                    v.pos,
                    "version",
                    &msg,
                    "never checks it and reads the document as version 1",
                );
            }
            Some(_) => {}
        }
        for entry in &doc.network_policies {
            if let Some(e) = self.entry(entry) {
                out.entries.push(e);
            }
        }
        self.sandbox(doc, &mut out);
        out
    }

    /// A provider profile's entry (`compose.rs`): validated like an entry of a policy file.
    pub fn composed_entry(&mut self, raw: &RawEntry) -> Option<Entry> {
        if raw.binaries.is_empty() {
            self.warning(
                raw.key.pos,
                "binaries",
                format!(
                    "the profile lists no `binaries`: as the policy `{}` it admits no program, so its hosts must be granted by a policy file (its secrets may then be swapped in for any program that policy admits)",
                    raw.key.value
                ),
            );
        }
        self.entry_with(raw, true)
    }

    fn entry(&mut self, raw: &RawEntry) -> Option<Entry> {
        self.entry_with(raw, false)
    }

    fn entry_with(&mut self, raw: &RawEntry, composed: bool) -> Option<Entry> {
        let key = PolicyKey::new(&raw.key.value);
        let path = format!("network_policies.{}", raw.key.value);
        let mut binaries = Vec::new();
        for (i, b) in raw.binaries.iter().enumerate() {
            if let Some(b) = self.binary(b, &format!("{path}.binaries[{i}]")) {
                binaries.push(b);
            }
        }
        let mut endpoints = Vec::new();
        for (i, ep) in raw.endpoints.iter().enumerate() {
            if let Some(ep) = self.endpoint(&key, i, ep, &format!("{path}.endpoints[{i}]")) {
                endpoints.push(ep);
            }
        }
        if raw.binaries.is_empty() && !composed {
            self.warning(
                raw.key.pos,
                &path,
                "no `binaries`: this policy admits no program and grants nothing",
            );
        }
        if raw.endpoints.is_empty() {
            self.warning(
                raw.key.pos,
                &path,
                "no `endpoints`: this policy grants nothing",
            );
        }
        Some(Entry {
            name: raw
                .name
                .as_ref()
                .map_or_else(|| raw.key.value.clone(), |n| n.value.clone()),
            location: self.location(raw.key.pos),
            key,
            endpoints,
            binaries,
        })
    }

    fn binary(&mut self, raw: &RawBinary, field: &str) -> Option<Binary> {
        let source = raw.path.value.clone();
        let pos = raw.path.pos;
        let field = format!("{field}.path");
        let matcher = if source == "*" {
            // Binary globs are segment-bound: `*` does not cross `/`, and every executable
            // the kernel reports is an absolute path.
            if !self.lenient(
                pos,
                &field,
                "`*` does not cross `/`, so it matches no executable (write `/**` to admit every executable)",
                "loads it and it admits no executable",
            ) {
                return None;
            }
            BinaryMatcher::Glob(Glob::new("*", '/').ok()?)
        } else if source.contains('*') {
            match Glob::new(&source, '/') {
                Ok(g) => {
                    if g.is_match("/usr/bin/anything") && g.is_match("/tmp/x") {
                        self.warning(pos, &field, format!("`{source}` admits every executable"));
                    }
                    BinaryMatcher::Glob(g)
                }
                Err(e) => {
                    self.error(pos, &field, e.to_string());
                    return None;
                }
            }
        } else {
            if source.contains(['?', '[', ']', '{', '}']) {
                self.warning(
                    pos,
                    &field,
                    format!(
                        "`{source}` has glob characters but no `*`; like the reference, sluice \
                         reads it as a literal path, so it only matches an executable with \
                         exactly that name"
                    ),
                );
            }
            if !source.starts_with('/') {
                let accepted = self.lenient(
                    pos,
                    &field,
                    &format!(
                        "`{source}` is not an absolute path, so it can never match an executable"
                    ),
                    "accepts it and it never matches",
                );
                if !accepted {
                    return None;
                }
            }
            BinaryMatcher::Exact(source.clone())
        };
        let base = source.rsplit('/').next().unwrap_or(&source);
        let base_trimmed =
            base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '*');
        if LAUNCHERS.contains(&base) || LAUNCHERS.contains(&base_trimmed) {
            self.warning(
                pos,
                &field,
                format!(
                    "`{source}` is a shell or interpreter: every program it runs (curl, pip, \
                     a script) inherits this policy's grants; list the programs that need \
                     the network instead"
                ),
            );
        }
        Some(Binary {
            source,
            matcher,
            location: self.location(pos),
        })
    }

    fn endpoint(
        &mut self,
        entry: &PolicyKey,
        index: usize,
        raw: &RawEndpoint,
        path: &str,
    ) -> Option<Endpoint> {
        let mut ok = true;
        let field = |name: &'static str| Sub(&path, name);

        let protocol = match &raw.protocol {
            None => Protocol::L4,
            Some(p) => match p.value.as_str() {
                "" => Protocol::L4,
                "rest" => Protocol::Rest,
                "websocket" => Protocol::WebSocket,
                "json-rpc" => Protocol::JsonRpc,
                "mcp" => Protocol::Mcp,
                t if t.eq_ignore_ascii_case("tcp") => Protocol::Tcp,
                "graphql" => Protocol::Graphql,
                "sql" => Protocol::Sql,
                other => {
                    let lower = other.to_ascii_lowercase();
                    let known = match lower.as_str() {
                        "rest" => Some(Protocol::Rest),
                        "websocket" => Some(Protocol::WebSocket),
                        "json-rpc" => Some(Protocol::JsonRpc),
                        "mcp" => Some(Protocol::Mcp),
                        "graphql" => Some(Protocol::Graphql),
                        "sql" => Some(Protocol::Sql),
                        _ => None,
                    };
                    match known {
                        Some(proto) => {
                            if !self.lenient(
                                p.pos,
                                field("protocol"),
                                &format!("protocol `{other}` is not lower-case (write `{lower}`)"),
                                &format!("reads it as `{lower}`"),
                            ) {
                                return None;
                            }
                            proto
                        }
                        None => {
                            self.error(
                                p.pos,
                                field("protocol"),
                                format!(
                                    "unknown protocol `{other}`; expected rest, websocket, json-rpc, mcp, graphql, sql or tcp"
                                ),
                            );
                            return None;
                        }
                    }
                }
            },
        };

        let host = self.host(raw, protocol, field("host"));
        ok &= host.is_some();
        let ports = self.ports(raw, path);
        ok &= ports.is_some();
        let tls = self.tls(raw, field("tls"));
        let (enforcement, enforcement_defaulted) = self.enforcement(raw, field("enforcement"));
        if protocol == Protocol::Sql
            && let Some(e) = raw.enforcement.as_ref().filter(|e| e.value == "enforce")
        {
            self.error(
                e.pos,
                field("enforcement"),
                "SQL enforcement requires full SQL parsing, which neither sluice nor the reference has: use `enforcement: audit` (SQL is relayed unjudged and recorded)",
            );
            ok = false;
        }
        if protocol == Protocol::Sql {
            self.warning(
                raw.pos,
                path,
                "`protocol: sql` is relayed as it is, without a SQL parser (as in the reference): its rules are never judged, the connection is recorded",
            );
        }
        let allowed_ips = self.allowed_ips(raw, field("allowed_ips"));
        let l7 = rules::endpoint_rules(self, entry, index, raw, protocol, path);
        ok &= l7.ok;

        let mut selector = PathSelector::All;
        if let Some(p) = &raw.path {
            let glob_prefix = p
                .value
                .strip_suffix("/**")
                .filter(|prefix| prefix.contains(['*', '?', '[', '{', '\\']));
            match parse_selector(&p.value) {
                Ok(_) if glob_prefix.is_some() => {
                    let prefix = glob_prefix.unwrap_or_default();
                    if self.lenient(
                        p.pos,
                        field("path"),
                        &format!("`{}`: glob characters before a trailing `/**`", p.value),
                        &format!("selects only paths below the literal text `{prefix}`"),
                    ) {
                        selector = PathSelector::LiteralPrefix(prefix.to_string());
                    } else {
                        ok = false;
                    }
                }
                Ok(s) => selector = s,
                Err(SelectorError::Glob(e)) => {
                    // The reference warns and matches such a selector as literal text.
                    if self.lenient(
                        p.pos,
                        field("path"),
                        &e.to_string(),
                        "warns and selects only the request path equal to this text",
                    ) {
                        selector = PathSelector::Literal(p.value.clone());
                    } else {
                        ok = false;
                    }
                }
                Err(e) => {
                    self.error(p.pos, field("path"), e.to_string());
                    ok = false;
                }
            }
            if !protocol.is_l7() && !p.value.is_empty() && !self.lenient(
                p.pos,
                field("path"),
                "`path` selects requests for L7 rules and has no effect without `protocol: rest` or `websocket`: the whole host:port is allowed (add `protocol: rest` with rules, or remove `path`)",
                "ignores it and allows every path",
            ) {
                ok = false;
            }
        }

        let mut tls = tls;
        if tls == TlsMode::Skip && protocol.is_l7() {
            if self.lenient(
                raw.tls.as_ref().map_or(raw.pos, |t| t.pos),
                field("tls"),
                "`tls: skip` turns off all L7 inspection: the rules of this endpoint would never be enforced (remove `tls: skip`, or the `protocol` and its rules)",
                "relays the connection uninspected",
            ) {
                tls = TlsMode::Skip;
            } else {
                ok = false;
            }
        }

        if protocol.is_l7() && enforcement_defaulted {
            self.warning(
                raw.pos,
                path,
                "`enforcement` is not set, so it is `audit` (the reference's default): requests the rules deny are logged and still forwarded; write `enforcement: enforce` to block them, or `enforcement: audit` to say you mean it",
            );
        }

        for (flag, value, allowed) in [
            (
                "request_body_credential_rewrite",
                &raw.request_body_credential_rewrite,
                protocol == Protocol::Rest,
            ),
            (
                "websocket_credential_rewrite",
                &raw.websocket_credential_rewrite,
                protocol.is_l7(),
            ),
            (
                "allow_encoded_slash",
                &raw.allow_encoded_slash,
                protocol.is_l7(),
            ),
        ] {
            if let Some(v) = value
                && v.value
                && !allowed
            {
                let need = if flag == "request_body_credential_rewrite" {
                    "`protocol: rest`"
                } else {
                    "`protocol: rest` or `websocket`"
                };
                if !self.lenient(
                    v.pos,
                    field(flag),
                    &format!("`{flag}` only applies with {need}"),
                    "ignores it",
                ) {
                    ok = false;
                }
            }
        }

        let signing = self.signing(raw, protocol, tls, path, &mut ok);
        if !ok {
            return None;
        }
        Some(Endpoint {
            entry: entry.clone(),
            index,
            location: self.location(raw.pos),
            host: host?,
            ports: ports?,
            selector,
            protocol,
            tls,
            enforcement,
            enforcement_defaulted,
            enforcement_for_ambiguity: match &raw.enforcement {
                Some(e) if e.value.eq_ignore_ascii_case("enforce") => Enforcement::Enforce,
                _ => Enforcement::Audit,
            },
            access: l7.access,
            rules: l7.rules,
            deny_rules: l7.deny_rules,
            allowed_ips,
            allow_encoded_slash: flag(&raw.allow_encoded_slash),
            request_body_credential_rewrite: flag(&raw.request_body_credential_rewrite),
            websocket_credential_rewrite: flag(&raw.websocket_credential_rewrite),
            allow_uninspected_credentials: flag(&raw.allow_uninspected_credentials),
            rpc: l7.rpc,
            graphql: l7.graphql,
            signing,
            credential_binding: raw.credential_binding.as_ref().map(|b| b.value.clone()),
        })
    }

    /// `credential_signing`, `signing_service`, `signing_region` (spec §3.8): a known mode,
    /// a service, names that can go into a signature's scope, and a request sluice sees.
    fn signing(
        &mut self,
        raw: &RawEndpoint,
        protocol: Protocol,
        tls: TlsMode,
        path: &str,
        ok: &mut bool,
    ) -> Option<Signing> {
        let field = |name: &'static str| Sub(&path, name);
        let scope_name = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        for (name, value) in [
            ("signing_service", &raw.signing_service),
            ("signing_region", &raw.signing_region),
        ] {
            if let Some(v) = value
                && !scope_name(&v.value)
            {
                self.error(
                    v.pos,
                    field(name),
                    format!(
                        "`{}` is not an AWS {} name (lower-case letters, digits and `-`)",
                        v.value,
                        name.trim_start_matches("signing_")
                    ),
                );
                *ok = false;
            }
        }
        let Some(written) = &raw.credential_signing else {
            for (name, value) in [
                ("signing_service", &raw.signing_service),
                ("signing_region", &raw.signing_region),
            ] {
                if let Some(v) = value {
                    self.warning(
                        v.pos,
                        field(name),
                        format!("`{name}` has no effect without `credential_signing`"),
                    );
                }
            }
            return None;
        };
        let Some(mode) = SigningMode::parse(&written.value) else {
            self.error(
                written.pos,
                field("credential_signing"),
                format!(
                    "unknown credential_signing `{}`; expected one of: sigv4, sigv4:body, sigv4:no_body",
                    written.value
                ),
            );
            *ok = false;
            return None;
        };
        let Some(service) = raw.signing_service.as_ref().filter(|s| !s.value.is_empty()) else {
            self.error(
                written.pos,
                field("credential_signing"),
                "`credential_signing` needs `signing_service` (the AWS service the signature is for: `s3`, `bedrock`, `sts`, ...)",
            );
            *ok = false;
            return None;
        };
        if raw
            .request_body_credential_rewrite
            .as_ref()
            .is_some_and(|v| v.value)
        {
            self.error(
                written.pos,
                field("credential_signing"),
                "`credential_signing` and `request_body_credential_rewrite` cannot both be set: the signature covers the body as it is sent",
            );
            *ok = false;
        }
        if (protocol != Protocol::Rest || tls == TlsMode::Skip)
            && !self.lenient(
                written.pos,
                field("credential_signing"),
                "`credential_signing` signs only requests sluice inspects: it needs `protocol: rest` without `tls: skip`",
                "relays such requests unsigned",
            )
        {
            *ok = false;
        }
        Some(Signing {
            mode,
            service: service.value.clone(),
            region: raw.signing_region.as_ref().map(|r| r.value.clone()),
        })
    }

    fn host(
        &mut self,
        raw: &RawEndpoint,
        protocol: Protocol,
        field: impl fmt::Display + Copy,
    ) -> Option<HostPattern> {
        let (text, pos) = match &raw.host {
            Some(h) => (h.value.as_str(), h.pos),
            None => ("", raw.pos),
        };
        if text.is_empty() {
            if raw.unreadable.contains(&"host") {
                return None;
            }
            if protocol == Protocol::Tcp {
                self.error(
                    pos,
                    field,
                    "a `protocol: tcp` endpoint needs a DNS host name",
                );
                return None;
            }
            if raw
                .allowed_ips
                .as_ref()
                .is_some_and(|ips| !ips.value.is_empty())
                && protocol != Protocol::Tcp
            {
                return Some(HostPattern::Any);
            }
            self.error(
                pos,
                field,
                "`host` is required (only an endpoint with `allowed_ips` may leave it out)",
            );
            return None;
        }
        if text.trim().is_empty() {
            self.error(
                pos,
                field,
                "`host` is only whitespace; write a host name (or leave `host` out and use `allowed_ips`)",
            );
            return None;
        }
        let pattern = match HostPattern::new(text) {
            Ok(p) => p,
            Err(e @ HostPatternError::EmptyLabel(_)) => {
                // The reference loads it; no target can match it, since sluice refuses a
                // target host with an empty label before policy.
                if !self.lenient(
                    pos,
                    field,
                    &format!("{e}, so no request can match it"),
                    "loads it as a pattern that matches nothing",
                ) {
                    return None;
                }
                HostPattern::Exact(text.to_ascii_lowercase())
            }
            Err(e) => {
                // `*github.com` is almost always `*.github.com` with the dot forgotten.
                let message = match text.strip_prefix('*').filter(|rest| {
                    !rest.starts_with(['.', '*']) && is_dns_pattern(rest) && rest.contains('.')
                }) {
                    Some(rest) => format!(
                        "`{text}` is not a valid wildcard host; did you mean `*.{rest}` (any one label under {rest})?"
                    ),
                    None => e.to_string(),
                };
                self.error(pos, field, message);
                return None;
            }
        };
        if protocol == Protocol::Tcp {
            let literal_ip = sluice_addr::ip_literal(text).is_some();
            if literal_ip || text.ends_with('.') || !is_dns_pattern(text) {
                self.error(pos, field, "a `protocol: tcp` endpoint needs a valid DNS host name (not an IP literal, no trailing dot)");
                return None;
            }
        }
        if !pattern.is_wildcard() && text.contains(['?', '[', ']', '{', '}']) {
            self.warning(
                pos,
                field,
                format!("`{text}` has glob characters but no `*`; like the reference, sluice reads it as a literal host name, which no request can have"),
            );
        } else if let Some(fix) = url_shaped_host(text) {
            // A URL (or host:port, host/path) where a host belongs: the reference loads it and
            // it matches nothing, which looks like an allow that silently is not one.
            if !self.lenient(
                pos,
                field,
                &format!("`{text}` is not a host name: {fix}"),
                "loads it, and no request can match it",
            ) {
                return None;
            }
        } else if !pattern.is_wildcard() && !is_dns_pattern(text) && text.parse::<IpAddr>().is_err()
        {
            self.warning(
                pos,
                field,
                format!(
                    "`{text}` is not a valid DNS name or IP literal, so no request can match it"
                ),
            );
        }
        if pattern.has_wildcard_tld() {
            self.warning(pos, field, format!("`{text}` has a wildcard in its last label: it matches that name under every top-level domain"));
        }
        Some(pattern)
    }

    fn ports(&mut self, raw: &RawEndpoint, path: &str) -> Option<Vec<u16>> {
        let mut check = |v: &mut Validator<'_>, p: &Spanned<i128>, field: &str| -> Option<u16> {
            match u16::try_from(p.value) {
                Ok(port) if port != 0 => Some(port),
                _ => {
                    v.error(
                        p.pos,
                        field,
                        format!("port {} is out of range 1-65535", p.value),
                    );
                    None
                }
            }
        };
        let ports_field = format!("{path}.ports");
        match (&raw.port, &raw.ports) {
            (None, None) if raw.unreadable.iter().any(|f| *f == "port" || *f == "ports") => None,
            (None, None) => {
                self.error(raw.pos, path, "an endpoint needs `port` or `ports`");
                None
            }
            (Some(p), Some(list)) => {
                let accepted = self.lenient(
                    p.pos,
                    format!("{path}.port"),
                    "`port` and `ports` are both given (keep only `ports`)",
                    "drops `port` and uses `ports`",
                );
                let ports = self.port_list(list, &ports_field, &mut check);
                if accepted { ports } else { None }
            }
            (Some(p), None) => check(self, p, &format!("{path}.port")).map(|p| vec![p]),
            (None, Some(list)) => self.port_list(list, &ports_field, &mut check),
        }
    }

    fn port_list(
        &mut self,
        list: &Spanned<Vec<Spanned<i128>>>,
        field: &str,
        check: &mut impl FnMut(&mut Validator<'_>, &Spanned<i128>, &str) -> Option<u16>,
    ) -> Option<Vec<u16>> {
        if list.value.is_empty() {
            self.error(list.pos, field, "`ports` must list at least one port");
            return None;
        }
        let mut out = Vec::new();
        let mut ok = true;
        for (i, p) in list.value.iter().enumerate() {
            match check(self, p, &format!("{field}[{i}]")) {
                Some(port) => out.push(port),
                None => ok = false,
            }
        }
        out.sort_unstable();
        out.dedup();
        ok.then_some(out)
    }

    fn tls(&mut self, raw: &RawEndpoint, field: impl fmt::Display + Copy) -> TlsMode {
        let Some(t) = &raw.tls else {
            return TlsMode::Auto;
        };
        match t.value.as_str() {
            "" | "auto" => TlsMode::Auto,
            "skip" => TlsMode::Skip,
            dep @ ("terminate" | "passthrough") => {
                self.warning(
                    t.pos,
                    field,
                    format!("`tls: {dep}` is deprecated and means the default (auto)"),
                );
                TlsMode::Auto
            }
            other => {
                self.lenient(
                    t.pos,
                    field,
                    &format!("unknown `tls` value `{other}` (expected `skip`, or leave it out)"),
                    "treats it as auto (TLS is terminated and inspected)",
                );
                TlsMode::Auto
            }
        }
    }

    fn enforcement(
        &mut self,
        raw: &RawEndpoint,
        field: impl fmt::Display + Copy,
    ) -> (Enforcement, bool) {
        let Some(e) = &raw.enforcement else {
            return (Enforcement::Audit, true);
        };
        match e.value.as_str() {
            "enforce" => (Enforcement::Enforce, false),
            other if other.eq_ignore_ascii_case("enforce") => {
                self.lenient(
                    e.pos,
                    field,
                    &format!("`enforcement: {other}` is not lower-case (write `enforce`)"),
                    "treats it as `audit` when judging requests (denied requests are logged and still forwarded), but as `enforce` when checking endpoints for ambiguity",
                );
                (Enforcement::Audit, false)
            }
            "audit" => (Enforcement::Audit, false),
            other => {
                self.lenient(
                    e.pos,
                    field,
                    &format!(
                        "unknown `enforcement` value `{other}` (expected `enforce` or `audit`)"
                    ),
                    "treats it as `audit`: denied requests are logged and still forwarded",
                );
                (Enforcement::Audit, false)
            }
        }
    }

    fn allowed_ips(&mut self, raw: &RawEndpoint, field: impl fmt::Display + Copy) -> AllowedIps {
        let mut out = AllowedIps::default();
        let Some(list) = &raw.allowed_ips else {
            return out;
        };
        if list.value.is_empty() {
            self.warning(list.pos, field, "`allowed_ips` is empty and has no effect");
        }
        for (i, ip) in list.value.iter().enumerate() {
            let f = Idx(&field, i);
            let text = ip.value.trim();
            let net = text
                .parse::<IpNet>()
                .or_else(|_| text.parse::<IpAddr>().map(IpNet::from));
            match net {
                Err(_) => {
                    self.lenient(
                        ip.pos,
                        f,
                        &format!("`{text}` is not an IP address or CIDR"),
                        "loads it and refuses every connection to this endpoint at CONNECT",
                    );
                    out.has_invalid = true;
                }
                Ok(net) => {
                    if let Some(class) = sluice_resolver::always_blocked_in(net) {
                        self.lenient(
                            ip.pos,
                            f,
                            &format!("`{text}` overlaps {class}, which is always blocked"),
                            "loads it and still refuses those addresses at CONNECT",
                        );
                        out.has_invalid = true;
                        continue;
                    }
                    let broad = match net {
                        IpNet::V4(n) => n.prefix_len() < 16,
                        IpNet::V6(n) => n.prefix_len() < 48,
                    };
                    if broad {
                        self.warning(ip.pos, f, format!("`{text}` is a very broad network (wider than /16 for IPv4, /48 for IPv6)"));
                    }
                    out.nets.push(net);
                }
            }
        }
        out
    }

    fn sandbox(&mut self, doc: &RawDocument, out: &mut Validated) {
        if let Some(fs) = &doc.filesystem_policy {
            out.sections
                .push(("filesystem_policy", self.location(fs.pos)));
            out.sandbox.include_workdir = fs.include_workdir.as_ref().map(|b| b.value);
            let total = fs.read_only.len() + fs.read_write.len();
            if total > 256 {
                self.error(
                    fs.pos,
                    "filesystem_policy",
                    format!("{total} paths listed; at most 256 are allowed"),
                );
            }
            for (name, list, rw) in [
                ("read_only", &fs.read_only, false),
                ("read_write", &fs.read_write, true),
            ] {
                for (i, p) in list.iter().enumerate() {
                    let f = format!("filesystem_policy.{name}[{i}]");
                    if let Some(msg) = fs_path_problem(&p.value, rw) {
                        self.error(p.pos, &f, msg);
                    } else if rw {
                        out.sandbox.read_write.push(p.value.clone());
                    } else {
                        out.sandbox.read_only.push(p.value.clone());
                    }
                }
            }
        }
        if let Some(l) = &doc.landlock {
            out.sections.push(("landlock", self.location(l.pos)));
            out.sandbox.landlock = Some(match l.compatibility.as_ref().map(|c| c.value.as_str()) {
                None | Some("best_effort") => LandlockCompat::BestEffort,
                Some("hard_requirement") => LandlockCompat::HardRequirement,
                Some(other) => {
                    let pos = l.compatibility.as_ref().map_or(l.pos, |c| c.pos);
                    self.lenient(
                        pos,
                        "landlock.compatibility",
                        &format!("unknown `compatibility` value `{other}` (expected best_effort or hard_requirement)"),
                        "treats it as best_effort",
                    );
                    LandlockCompat::BestEffort
                }
            });
        }
        if let Some(p) = &doc.process {
            out.sections.push(("process", self.location(p.pos)));
            out.sandbox.run_as_user = p
                .run_as_user
                .as_ref()
                .and_then(|u| self.run_as(u, "process.run_as_user"));
            out.sandbox.run_as_group = p
                .run_as_group
                .as_ref()
                .and_then(|g| self.run_as(g, "process.run_as_group"));
        }
    }

    fn run_as(&mut self, v: &Spanned<String>, field: &str) -> Option<RunAs> {
        if v.value == "sandbox" {
            return Some(RunAs::Sandbox);
        }
        match v.value.parse::<u32>() {
            Ok(id) if id != 0 && id != u32::MAX => Some(RunAs::Id(id)),
            _ => {
                self.error(
                    v.pos,
                    field,
                    format!(
                        "`{}` must be `sandbox` or a numeric id from 1 to 4294967294 (never root)",
                        v.value
                    ),
                );
                None
            }
        }
    }
}

mod values;

fn flag(v: &Option<Spanned<bool>>) -> bool {
    v.as_ref().is_some_and(|b| b.value)
}
