//! Where an endpoint connects: its `host` (a name, a wildcard pattern, or none with
//! `allowed_ips`), its `port` or `ports`, and its `allowed_ips` networks.
//!
//! Owns the judgement of each of these values as written. Checks of a single value that need
//! no endpoint (is this a DNS pattern, is this host a URL) are in `values.rs`; whether an
//! address is always blocked is `sluice_resolver::always_blocked_in`.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::glob::{HostPattern, HostPatternError};
use crate::model::{AllowedIps, Protocol};
use crate::raw::{RawEndpoint, Spanned};
use crate::report::{Idx, Validator};

use super::values::{is_dns_pattern, url_shaped_host};

impl Validator<'_> {
    pub(super) fn host(
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

    pub(super) fn ports(&mut self, raw: &RawEndpoint, path: &str) -> Option<Vec<u16>> {
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

    pub(super) fn allowed_ips(
        &mut self,
        raw: &RawEndpoint,
        field: impl fmt::Display + Copy,
    ) -> AllowedIps {
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
}
