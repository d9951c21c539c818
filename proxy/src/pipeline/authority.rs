//! Where a connection goes: a host and a port ([`Authority`]), spelled the one way sluice
//! spells it (`host:port`, an IPv6 literal in brackets), whichever way it arrived (a CONNECT
//! target, an absolute-form URI, an HTTP/2 `:authority`, later an original destination); and
//! a request target's path without its query ([`path_only`]), the only form of a path that
//! reaches a message or a log.

use std::fmt;

/// A host and a port. The host is held without brackets (`::1`, `api.example.com`); every
/// place that writes it as text goes through [`fmt::Display`] or [`Authority::uri_host`], so
/// that an IPv6 literal is always bracketed where a port or a URI follows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Authority {
    host: String,
    port: u16,
}

/// Why a CONNECT target is not an authority.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthorityError {
    #[error("`{0}` is not host:port")]
    NotHostPort(String),
    #[error("unclosed `[`")]
    UnclosedBracket,
    #[error("a port is required (host:port)")]
    NoPort,
    #[error("invalid port `{0}`")]
    InvalidPort(String),
    #[error("empty host")]
    EmptyHost,
}

impl Authority {
    /// `host` without brackets (they are dropped if given) and `port`.
    pub fn new(host: impl Into<String>, port: u16) -> Authority {
        let host = host.into();
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(inner) => inner.to_string(),
            None => host,
        };
        Authority { host, port }
    }

    /// A CONNECT target: `host:port` or `[v6]:port`, port required and not 0, no userinfo
    /// or path.
    pub fn parse_connect(target: &str) -> Result<Authority, AuthorityError> {
        if target.contains('@') || target.contains('/') {
            return Err(AuthorityError::NotHostPort(target.to_string()));
        }
        let (host, port) = if let Some(rest) = target.strip_prefix('[') {
            let (h, after) = rest
                .split_once(']')
                .ok_or(AuthorityError::UnclosedBracket)?;
            (h, after.strip_prefix(':').ok_or(AuthorityError::NoPort)?)
        } else {
            target.rsplit_once(':').ok_or(AuthorityError::NoPort)?
        };
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| AuthorityError::InvalidPort(port.to_string()))?;
        if host.is_empty() {
            return Err(AuthorityError::EmptyHost);
        }
        Ok(Authority::new(host, port))
    }

    /// The host, without brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The same port with another host (the normalised form of this one).
    pub fn with_host(&self, host: impl Into<String>) -> Authority {
        Authority::new(host, self.port)
    }

    /// The host as a URI or a `Host` header writes it: an IPv6 literal in brackets.
    pub fn uri_host(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }

    /// `host[:port]` for a URI or a `Host` header, the port left out when it is the
    /// scheme's `default_port`.
    pub fn to_uri_authority(&self, default_port: u16) -> String {
        if self.port == default_port {
            self.uri_host()
        } else {
            self.to_string()
        }
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A request target's path without its query (queries are never logged nor echoed).
pub fn path_only(path_and_query: &str) -> &str {
    match path_and_query.split('?').next() {
        Some(p) if !p.is_empty() => p,
        _ => "/",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_targets() {
        let a = Authority::parse_connect("api.x.com:443").unwrap();
        assert_eq!((a.host(), a.port()), ("api.x.com", 443));
        let v6 = Authority::parse_connect("[::1]:8443").unwrap();
        assert_eq!((v6.host(), v6.port()), ("::1", 8443));
        assert!(Authority::parse_connect("api.x.com").is_err());
        assert!(Authority::parse_connect("api.x.com:0").is_err());
        assert!(Authority::parse_connect("api.x.com:99999").is_err());
        assert!(Authority::parse_connect("u@api.x.com:443").is_err());
        assert!(Authority::parse_connect(":443").is_err());
        assert_eq!(
            Authority::parse_connect("[::1:443"),
            Err(AuthorityError::UnclosedBracket)
        );
    }

    #[test]
    fn ipv6_literals_are_bracketed_wherever_a_port_or_uri_follows() {
        let v6 = Authority::new("::1", 8443);
        assert_eq!(v6.to_string(), "[::1]:8443");
        assert_eq!(v6.to_uri_authority(443), "[::1]:8443");
        assert_eq!(Authority::new("[::1]", 443).to_uri_authority(443), "[::1]");
        assert_eq!(Authority::new("[::1]", 443).host(), "::1");
        let name = Authority::new("api.x.com", 443);
        assert_eq!(name.to_string(), "api.x.com:443");
        assert_eq!(name.to_uri_authority(443), "api.x.com");
        assert_eq!(name.to_uri_authority(80), "api.x.com:443");
    }

    #[test]
    fn paths_lose_their_query() {
        assert_eq!(path_only("/a/b?c=1"), "/a/b");
        assert_eq!(path_only("/a"), "/a");
        assert_eq!(path_only("?q"), "/");
        assert_eq!(path_only(""), "/");
    }
}
