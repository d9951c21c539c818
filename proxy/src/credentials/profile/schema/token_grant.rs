//! The `token_grant` block of a provider profile credential, read: the token endpoint (TLS, or
//! plain HTTP only to a loopback or in-cluster service host), audiences, scopes, the cache
//! TTL, `audience_overrides`, sluice's `grant: token_exchange` and its fields, and the
//! internal key of each grant (`grant_keys`). Part of the profile schema (`schema.rs`); the
//! typed block is `token_grant_block.rs`.

use crate::policy::diag::join_field;
use crate::policy::glob::HostPattern;
use crate::policy::model::PathSelector;
use crate::policy::validate::selector_for;
use crate::policy::yaml::Node;

use super::super::token_grant_block::{
    AudienceOverride, DEFAULT_ASSERTION_TYPE, TokenGrant, Written, issuer_of,
};
use super::super::{CredentialSpec, EnvKey, ProfileId};
use super::Reader;

const TOKEN_GRANT_FIELDS: &[&str] = &[
    "token_endpoint",
    "audience",
    "jwt_svid_audience",
    "client_assertion_type",
    "scopes",
    "cache_ttl_seconds",
    "audience_overrides",
    "grant",
    "resource",
    "requested_token_type",
];

impl Reader<'_> {
    /// `token_grant`: the token endpoint (TLS, or plain HTTP only to a loopback or in-cluster
    /// service host, as the reference allows, with a warning), audiences, scopes, the cache
    /// TTL override and `audience_overrides`.
    pub(super) fn token_grant(&mut self, node: &Node<'_>, path: &str) -> Option<TokenGrant> {
        let fields = self.fields(node, path, TOKEN_GRANT_FIELDS, &[])?;
        let mut ok = true;
        let mut grant = TokenGrant {
            token_endpoint: String::new(),
            audience: String::new(),
            svid_audience: String::new(),
            assertion_type: DEFAULT_ASSERTION_TYPE.to_string(),
            scopes: Vec::new(),
            cache_ttl: None,
            overrides: Vec::new(),
            keys: Vec::new(),
            exchange: None,
        };
        let mut written = Written::default();
        for (key, value) in fields {
            let field = join_field(path, key);
            match key {
                "token_endpoint" => match self.string(value, &field) {
                    Some(url) if url.starts_with("https://") && url.len() > 8 => {
                        grant.token_endpoint = url;
                    }
                    Some(url) if plain_grant_endpoint(&url) => {
                        self.warning(value.pos, &field, format!("`{url}` is plain HTTP: the workload's JWT-SVID travels unencrypted to it (accepted, as the reference does, only for a loopback or in-cluster service host)"));
                        grant.token_endpoint = url;
                    }
                    Some(url) => {
                        self.error(value.pos, &field, format!("`{url}` is not an https:// URL: sluice sends the workload's JWT-SVID only inside TLS (or to a loopback or in-cluster service host)"));
                        ok = false;
                    }
                    None => ok = false,
                },
                "audience" => grant.audience = self.string(value, &field).unwrap_or_default(),
                "jwt_svid_audience" => {
                    grant.svid_audience = self.string(value, &field).unwrap_or_default();
                }
                "client_assertion_type" => match self.string(value, &field) {
                    Some(t) if !t.trim().is_empty() => {
                        grant.assertion_type = t;
                        written.assertion_type = true;
                    }
                    _ => {}
                },
                "grant" => written.grant = self.string(value, &field),
                "resource" => written.resource = self.string(value, &field),
                "requested_token_type" => {
                    written.requested_token_type = self.string(value, &field);
                }
                "scopes" => match self.strings(value, &field) {
                    Some(s) => grant.scopes = s,
                    None => ok = false,
                },
                "cache_ttl_seconds" => match self.int(value, &field) {
                    Some(0) => {}
                    Some(n) if (1..=86_400).contains(&n) => {
                        grant.cache_ttl = Some(std::time::Duration::from_secs(
                            u64::try_from(n).unwrap_or_default(),
                        ));
                    }
                    Some(n) => {
                        self.error(value.pos, &field, format!("{n} seconds is out of range"));
                        ok = false;
                    }
                    None => ok = false,
                },
                _ => match self.audience_overrides(value, &field) {
                    Some(o) => grant.overrides = o,
                    None => ok = false,
                },
            }
        }
        if grant.token_endpoint.is_empty() && ok {
            self.error(node.pos, path, "`token_grant` needs a `token_endpoint`");
            ok = false;
        }
        if grant.svid_audience.is_empty() {
            grant.svid_audience = issuer_of(&grant.token_endpoint);
        }
        match written.exchange() {
            Ok(exchange) => grant.exchange = exchange,
            Err(problems) => {
                for (key, message) in problems {
                    self.error(node.pos, &join_field(path, key), message);
                }
                ok = false;
            }
        }
        ok.then_some(grant)
    }

    pub(super) fn audience_overrides(
        &mut self,
        node: &Node<'_>,
        path: &str,
    ) -> Option<Vec<AudienceOverride>> {
        let items = self.list(node, path)?;
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let field = format!("{path}[{i}]");
            let fields = self.fields(
                item,
                &field,
                &["host", "port", "path", "audience", "scopes"],
                &[],
            )?;
            let mut host = None;
            let mut entry = AudienceOverride {
                host: HostPattern::Any,
                port: None,
                path: PathSelector::All,
                path_text: String::new(),
                audience: String::new(),
                scopes: Vec::new(),
            };
            for (key, value) in fields {
                let f = join_field(&field, key);
                match key {
                    "host" => {
                        let text = self.string(value, &f)?;
                        match HostPattern::new(&text.to_ascii_lowercase()) {
                            Ok(h) => host = Some(h),
                            Err(e) => {
                                self.error(value.pos, &f, e.to_string());
                                return None;
                            }
                        }
                    }
                    "port" => match self.int(value, &f).and_then(|n| u16::try_from(n).ok()) {
                        Some(p) if p > 0 => entry.port = Some(p),
                        _ => {
                            self.error(value.pos, &f, "not a port (1-65535)");
                            return None;
                        }
                    },
                    "path" => {
                        let text = self.string(value, &f)?;
                        if !text.is_empty() {
                            match selector_for(&text) {
                                Ok(s) => entry.path = s,
                                Err(msg) => {
                                    self.error(value.pos, &f, msg);
                                    return None;
                                }
                            }
                        }
                        entry.path_text = text;
                    }
                    "audience" => entry.audience = self.string(value, &f)?,
                    _ => entry.scopes = self.strings(value, &f)?,
                }
            }
            let Some(host) = host else {
                self.error(item.pos, &field, "an audience override needs a `host`");
                return None;
            };
            entry.host = host;
            out.push(entry);
        }
        Some(out)
    }
}

/// Whether a token endpoint may be plain HTTP: a loopback host or an in-cluster service name
/// (`<svc>.<ns>.svc`, `<svc>.<ns>.svc.cluster.local`), the reference's rule.
fn plain_grant_endpoint(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let Ok(authority) = sluice_addr::Authority::parse(authority, Some(80)) else {
        return false;
    };
    let host = authority.host().trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" {
        return true;
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let labels: Vec<&str> = host.split('.').collect();
    labels.iter().all(|l| !l.is_empty())
        && ((labels.len() == 3 && labels[2] == "svc")
            || (labels.len() == 5 && labels[2..] == ["svc", "cluster", "local"]))
}

/// The internal key of each grant of each `token_grant` credential, appended to its
/// `env_vars`: `TOKEN_GRANT_<PROFILE>_<CREDENTIAL>_<i>`, upper-cased, `-` and `.` as `_`.
pub(super) fn grant_keys(id: &ProfileId, credentials: &mut [CredentialSpec]) {
    for c in credentials {
        let Some(grant) = &mut c.token_grant else {
            continue;
        };
        let stem = format!("TOKEN_GRANT_{}_{}", id.as_str(), c.name.as_str())
            .to_ascii_uppercase()
            .replace(['-', '.'], "_");
        grant.keys = (0..=grant.overrides.len())
            .filter_map(|i| EnvKey::new(&format!("{stem}_{i}")))
            .collect();
        c.env_vars.extend(grant.keys.iter().cloned());
    }
}
