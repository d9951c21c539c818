//! A credential's `token_grant` block, typed (spec §3.7): where sluice trades the workload's
//! SPIFFE JWT-SVID for an access token, for which audience and scopes, how long it keeps one,
//! and the per-destination `audience_overrides`; and sluice's extension `grant:
//! token_exchange` (RFC 8693: the JWT-SVID is the `subject_token`, [`Exchange`]), with the
//! checks that refuse a misconfigured one at load ([`TokenGrant::problems`]). Read by
//! `schema.rs`; carried out by `credentials::token_grant`.

use std::time::Duration;

use sluice_addr::Authority;

use crate::policy::glob::HostPattern;
use crate::policy::model::PathSelector;

use super::EnvKey;

/// The assertion type sent when the profile names none (RFC 7523 §2.2).
pub const DEFAULT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// RFC 8693's grant type.
pub const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The subject token's type: a JWT-SVID is a JWT (RFC 8693 §3).
pub const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
/// The token types sluice can place in a header, as `requested_token_type` and as the
/// answer's `issued_token_type` (a refresh token, an ID token or a SAML assertion is no
/// credential for an API request).
pub const USABLE_TOKEN_TYPES: [&str; 2] = [
    "urn:ietf:params:oauth:token-type:access_token",
    JWT_TOKEN_TYPE,
];

/// `grant: token_exchange` (sluice's extension, RFC 8693 §2.1): the JWT-SVID is sent as the
/// `subject_token` (no client assertion), with `audience`, `scope` and these.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exchange {
    /// `resource`: an absolute URI without a fragment.
    pub resource: Option<String>,
    /// `requested_token_type`: one of [`USABLE_TOKEN_TYPES`]; the answer's
    /// `issued_token_type` must then be it.
    pub requested_token_type: Option<String>,
}

/// The fields of a `token_grant` as written, for [`TokenGrant::problems`].
#[derive(Debug, Default)]
pub struct Written {
    /// `grant`, if written.
    pub grant: Option<String>,
    pub resource: Option<String>,
    pub requested_token_type: Option<String>,
    /// Whether `client_assertion_type` is written.
    pub assertion_type: bool,
}

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
    /// `grant: token_exchange`: RFC 8693 instead of the RFC 7523 client assertion.
    pub exchange: Option<Exchange>,
}

impl Written {
    /// What `grant`, `resource`, `requested_token_type` and `client_assertion_type` make of
    /// the grant, or every problem (field, message).
    pub fn exchange(self) -> Result<Option<Exchange>, Vec<(&'static str, String)>> {
        let mut problems = Vec::new();
        let exchange = match self.grant.as_deref() {
            None | Some("client_credentials") => false,
            Some("token_exchange") => true,
            Some(other) => {
                problems.push(("grant", format!("`{other}` is not a grant sluice makes: `client_credentials` (the JWT-SVID as an RFC 7523 client assertion, the default) or `token_exchange` (RFC 8693, the JWT-SVID as the subject token)")));
                false
            }
        };
        if !exchange {
            for (field, set) in [
                ("resource", self.resource.is_some()),
                ("requested_token_type", self.requested_token_type.is_some()),
            ] {
                if set {
                    problems.push((field, format!("`{field}` is a token exchange's (RFC 8693): it needs `grant: token_exchange`")));
                }
            }
        }
        if exchange && self.assertion_type {
            problems.push(("client_assertion_type", "a token exchange sends no client assertion (the JWT-SVID is its `subject_token`): remove `client_assertion_type`".to_string()));
        }
        if let Some(r) = &self.resource
            && !is_absolute_uri(r)
        {
            problems.push((
                "resource",
                format!("`{r}` is not an absolute URI without a fragment (RFC 8693 §2.1)"),
            ));
        }
        if let Some(t) = &self.requested_token_type
            && !USABLE_TOKEN_TYPES.contains(&t.as_str())
        {
            problems.push((
                "requested_token_type",
                format!(
                    "`{t}` is not a token sluice can place in a header: `{}` or `{}`",
                    USABLE_TOKEN_TYPES[0], USABLE_TOKEN_TYPES[1]
                ),
            ));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(exchange.then_some(Exchange {
            resource: self.resource,
            requested_token_type: self.requested_token_type,
        }))
    }
}

/// An absolute URI (a scheme, then `:` and more) without a fragment.
fn is_absolute_uri(text: &str) -> bool {
    let Some((scheme, rest)) = text.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && !rest.is_empty()
        && !text.contains('#')
        && !text.chars().any(|c| c.is_whitespace() || c.is_control())
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
            exchange: None,
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
    fn a_misconfigured_token_exchange_is_refused_with_the_field() {
        let fields = |w: Written| -> Vec<&'static str> {
            w.exchange().unwrap_err().iter().map(|(f, _)| *f).collect()
        };
        let exchange = || Written {
            grant: Some("token_exchange".into()),
            ..Written::default()
        };
        assert_eq!(
            fields(Written {
                grant: Some("token-exchange".into()),
                ..Written::default()
            }),
            ["grant"]
        );
        // Exchange fields without the exchange.
        assert_eq!(
            fields(Written {
                resource: Some("https://api.example.com/".into()),
                requested_token_type: Some(USABLE_TOKEN_TYPES[0].into()),
                ..Written::default()
            }),
            ["resource", "requested_token_type"]
        );
        assert_eq!(
            fields(Written {
                assertion_type: true,
                ..exchange()
            }),
            ["client_assertion_type"]
        );
        for bad in [
            "api.example.com",
            "https://api.example.com/#x",
            "1http://x",
            "https:",
        ] {
            let w = Written {
                resource: Some(bad.into()),
                ..exchange()
            };
            assert_eq!(fields(w), ["resource"], "{bad}");
        }
        let w = Written {
            requested_token_type: Some("urn:ietf:params:oauth:token-type:refresh_token".into()),
            ..exchange()
        };
        assert_eq!(fields(w), ["requested_token_type"]);
        // A good one.
        let good = Written {
            resource: Some("https://api.example.com/v1".into()),
            requested_token_type: Some(JWT_TOKEN_TYPE.into()),
            ..exchange()
        };
        assert_eq!(
            good.exchange().unwrap(),
            Some(Exchange {
                resource: Some("https://api.example.com/v1".into()),
                requested_token_type: Some(JWT_TOKEN_TYPE.into()),
            })
        );
        assert_eq!(Written::default().exchange().unwrap(), None);
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
