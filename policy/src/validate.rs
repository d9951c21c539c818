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
//! This file validates the document, its entries and each endpoint's protocol, path, TLS and
//! enforcement; the parts of an endpoint and entry with rules of their own are in
//! `validate/`: `binary.rs` (`binaries`), `destination.rs` (`host`, `ports`, `allowed_ips`),
//! `signing.rs` (SigV4), `sandbox.rs` (`filesystem_policy`, `landlock`, `process`), and
//! `values.rs` (checks of single values).
//!
//! In strict mode (the default) a construct the reference silently misreads is an error that
//! says what the reference would do; in `--compat openshell` it is accepted with the
//! reference's interpretation and a warning.

use std::fmt;

use super::diag::Location;
use super::model::{
    Endpoint, Enforcement, Entry, PathSelector, PolicyKey, Protocol, Sandbox, TlsMode,
};
use super::raw::{RawDocument, RawEndpoint, RawEntry, Spanned};
use super::report::{Sub, Validator};
use super::rules;
pub use super::selector::{SelectorError, parse_selector, selector_for};

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
}

mod binary;
mod destination;
mod sandbox;
mod signing;
mod values;

fn flag(v: &Option<Spanned<bool>>) -> bool {
    v.as_ref().is_some_and(|b| b.value)
}
