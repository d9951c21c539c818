//! Where a connection goes, spelled the one way sluice spells it, for every crate of the
//! workspace (linkerd2-proxy's `addr` is the model): a host and a port ([`Authority`]),
//! written `host:port` with an IPv6 literal in brackets ([`HostPort`] for a pair not held as
//! one), and the one reader of `host[:port]` text ([`split_host_port`]) whichever way it
//! arrived (a CONNECT target, an absolute-form URI, a `Host` header, an HTTP/2 `:authority`).

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
        UriHost(&self.host).to_string()
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
        write!(f, "{}:{}", UriHost(&self.host), self.port)
    }
}

/// A host as it is written before a port or in a URI: an IPv6 literal in brackets (a host
/// already bracketed is kept), any other host as it is. The one place that brackets.
#[derive(Clone, Copy, Debug)]
pub struct UriHost<'a>(pub &'a str);

impl fmt::Display for UriHost<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let UriHost(host) = *self;
        if host.contains(':') && !host.starts_with('[') {
            write!(f, "[{host}]")
        } else {
            f.write_str(host)
        }
    }
}

/// A host and a port not held as an [`Authority`] (an audit record's), written as
/// [`Authority`] writes it: an IPv6 literal in brackets (a host already bracketed is kept).
#[derive(Clone, Copy, Debug)]
pub struct HostPort<'a>(pub &'a str, pub u16);

impl fmt::Display for HostPort<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let HostPort(host, port) = *self;
        write!(f, "{}:{port}", UriHost(host))
    }
}

/// `host[:port]` split into the host (brackets dropped) and the port text, if any; `None`
/// for an unclosed `[` or text after a bracketed host that is not `:port`.
pub fn split_host_port(text: &str) -> Option<(&str, Option<&str>)> {
    if let Some(v6) = text.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        if after.is_empty() {
            return Some((host, None));
        }
        return Some((host, Some(after.strip_prefix(':')?)));
    }
    Some(match text.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (text, None),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a failed expectation is a failed test
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
    fn hosts_are_bracketed_once() {
        assert_eq!(UriHost("::1").to_string(), "[::1]");
        assert_eq!(UriHost("[::1]").to_string(), "[::1]");
        assert_eq!(UriHost("api.test").to_string(), "api.test");
        assert_eq!(format!("{}:?", UriHost("fe80::1")), "[fe80::1]:?");
    }

    #[test]
    fn pairs_are_written_as_authorities_are() {
        assert_eq!(HostPort("::1", 443).to_string(), "[::1]:443");
        assert_eq!(HostPort("[::1]", 443).to_string(), "[::1]:443");
        assert_eq!(HostPort("api.test", 80).to_string(), "api.test:80");
    }

    #[test]
    fn host_port_text_is_split_one_way() {
        assert_eq!(split_host_port("a.test:80"), Some(("a.test", Some("80"))));
        assert_eq!(split_host_port("a.test"), Some(("a.test", None)));
        assert_eq!(split_host_port("[::1]:443"), Some(("::1", Some("443"))));
        assert_eq!(split_host_port("[::1]"), Some(("::1", None)));
        assert_eq!(split_host_port("[::1"), None);
        assert_eq!(split_host_port("[::1]x"), None);
    }
}
