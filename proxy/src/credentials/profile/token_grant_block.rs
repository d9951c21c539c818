//! A credential's `token_grant` block, typed (spec §3.7): where sluice trades the workload's
//! SPIFFE JWT-SVID for an access token, for which audience and scopes, how long it keeps one,
//! and the per-destination `audience_overrides`. Read by `schema.rs`; carried out by
//! `credentials::token_grant`.

use std::time::Duration;

use sluice_addr::Authority;

use crate::policy::glob::HostPattern;
use crate::policy::model::PathSelector;

use super::EnvKey;

/// The assertion type sent when the profile names none (RFC 7523 §2.2).
pub const DEFAULT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// A credential's `token_grant`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenGrant {
    /// `https://...` (or `http://` to a loopback or in-cluster service name, as the reference
    /// allows; a load warning says so).
    pub token_endpoint: String,
    pub audience: String,
    /// The JWT-SVID's audience: `jwt_svid_audience`, else the token endpoint's issuer.
    pub svid_audience: String,
    pub assertion_type: String,
    pub scopes: Vec<String>,
    /// `cache_ttl_seconds` (> 0): how long a token is kept, whatever the answer says.
    pub cache_ttl: Option<Duration>,
    pub overrides: Vec<AudienceOverride>,
    /// One internal key per grant: `[0]` the default audience, `[i + 1]` override `i`. Each
    /// holds that grant's current token, as a refreshed credential's env var does.
    pub keys: Vec<EnvKey>,
}

/// An `audience_overrides` entry: requests to `host`, `port` and `path` get a token for
/// `audience` and `scopes` instead (the most specific matching entry wins).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AudienceOverride {
    pub host: HostPattern,
    pub port: Option<u16>,
    pub path: PathSelector,
    /// As written, for specificity.
    pub path_text: String,
    pub audience: String,
    pub scopes: Vec<String>,
}

impl TokenGrant {
    /// The key of the grant for a request to `dst` and `path`: the most specific matching
    /// override's (a literal host over a wildcard, a path over none), else the default.
    pub fn key_for(&self, dst: &Authority, path: &str) -> &EnvKey {
        let best = self
            .overrides
            .iter()
            .enumerate()
            .filter(|(_, o)| {
                o.port.is_none_or(|p| p == dst.port())
                    && o.host.is_match(dst.host())
                    && o.path.is_match(path)
            })
            .max_by_key(|(i, o)| (o.specificity(), usize::MAX - i));
        match best {
            Some((i, _)) => &self.keys[i + 1],
            None => &self.keys[0],
        }
    }

    /// The audience and scopes of each grant, in `keys` order.
    pub fn grants(&self) -> Vec<(&EnvKey, &str, &[String])> {
        let mut out = vec![(&self.keys[0], self.audience.as_str(), &self.scopes[..])];
        for (o, key) in self.overrides.iter().zip(&self.keys[1..]) {
            out.push((key, o.audience.as_str(), &o.scopes[..]));
        }
        out
    }
}

impl AudienceOverride {
    fn specificity(&self) -> (bool, usize, bool) {
        let path = !matches!(self.path, PathSelector::All);
        let literal = matches!(self.host, HostPattern::Exact(_));
        (path, self.path_text.len(), literal)
    }
}

/// The issuer of a token endpoint, the JWT-SVID's default audience: for Keycloak's
/// `.../realms/<realm>/protocol/...`, up to the realm; else the endpoint itself.
pub fn issuer_of(token_endpoint: &str) -> String {
    if let Some(i) = token_endpoint.find("/realms/") {
        let after = &token_endpoint[i + "/realms/".len()..];
        if let Some(slash) = after.find('/') {
            return token_endpoint[..i + "/realms/".len() + slash].to_string();
        }
    }
    token_endpoint.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::validate::selector_for;

    fn key(name: &str) -> EnvKey {
        EnvKey::new(name).unwrap()
    }

    fn entry(host: &str, port: Option<u16>, path: &str, audience: &str) -> AudienceOverride {
        AudienceOverride {
            host: HostPattern::new(host).unwrap(),
            port,
            path: if path.is_empty() {
                PathSelector::All
            } else {
                selector_for(path).unwrap()
            },
            path_text: path.to_string(),
            audience: audience.to_string(),
            scopes: Vec::new(),
        }
    }

    #[test]
    fn the_most_specific_override_picks_the_grant() {
        let grant = TokenGrant {
            token_endpoint: "https://t.example.com/token".into(),
            audience: "default".into(),
            svid_audience: String::new(),
            assertion_type: DEFAULT_ASSERTION_TYPE.into(),
            scopes: Vec::new(),
            cache_ttl: None,
            overrides: vec![
                entry("*.example.com", None, "", "wild"),
                entry("api.example.com", Some(443), "", "host"),
                entry("api.example.com", Some(443), "/v2/**", "path"),
            ],
            keys: ["K_0", "K_1", "K_2", "K_3"].map(key).to_vec(),
        };
        let pick = |host, port, path| {
            grant
                .key_for(&Authority::new(host, port), path)
                .as_str()
                .to_string()
        };
        assert_eq!(pick("other.org", 443, "/"), "K_0");
        assert_eq!(pick("www.example.com", 443, "/"), "K_1");
        assert_eq!(pick("api.example.com", 443, "/v1/x"), "K_2");
        assert_eq!(pick("api.example.com", 443, "/v2/x"), "K_3");
        // The port is part of the match.
        assert_eq!(pick("api.example.com", 8443, "/v2/x"), "K_1");
        let audiences: Vec<&str> = grant.grants().iter().map(|g| g.1).collect();
        assert_eq!(audiences, ["default", "wild", "host", "path"]);
    }

    #[test]
    fn the_svid_audience_defaults_to_the_issuer() {
        assert_eq!(
            issuer_of("https://auth.example.com/realms/agents/protocol/openid-connect/token"),
            "https://auth.example.com/realms/agents"
        );
        assert_eq!(
            issuer_of("https://t.example.com/oauth/token"),
            "https://t.example.com/oauth/token"
        );
    }
}
