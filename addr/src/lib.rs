//! Where a connection goes, spelled the one way sluice spells it, for every crate of the
//! workspace (linkerd2-proxy's `addr` is the model): a host and a port ([`Authority`]),
//! written `host:port` with an IPv6 literal in brackets ([`HostPort`] for a pair not held as
//! one), and the one reader of `host[:port]` text ([`split_host_port`], [`Authority::parse`],
//! [`parse_port`]) whichever way it arrived (a CONNECT target, an absolute-form URI, a `Host`
//! header, an HTTP/2 `:authority`, a command-line flag); a host's brackets are dropped in one
//! place too ([`unbracketed`], [`ip_literal`]).

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

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
        let host = match bracketed(&host) {
            Some(inner) => inner.to_string(),
            None => host,
        };
        Authority { host, port }
    }

    /// `host[:port]` text (a URI's authority, a `Host` header, a listen address): the port
    /// is `default_port` when the text has none (an error when that is `None` too), and
    /// otherwise as [`parse_port`] reads it; the host must not be empty. No userinfo or path
    /// is looked for: the caller cuts those off first.
    pub fn parse(text: &str, default_port: Option<u16>) -> Result<Authority, AuthorityError> {
        let (host, port) = split_host_port(text).ok_or_else(|| {
            if text.starts_with('[') && !text.contains(']') {
                AuthorityError::UnclosedBracket
            } else {
                AuthorityError::NotHostPort(text.to_string())
            }
        })?;
        let port = match (port, default_port) {
            (Some(p), _) => parse_port(p)?,
            (None, Some(d)) => d,
            (None, None) => return Err(AuthorityError::NoPort),
        };
        if host.is_empty() {
            return Err(AuthorityError::EmptyHost);
        }
        Ok(Authority::new(host, port))
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
        let port = parse_port(port)?;
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

    /// The host's class: its address when it is an IP literal, `None` for a name.
    pub fn ip(&self) -> Option<IpAddr> {
        ip_literal(&self.host)
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

/// A port written as text: decimal digits only (no sign, no space), 1 to 65535.
pub fn parse_port(text: &str) -> Result<u16, AuthorityError> {
    let invalid = || AuthorityError::InvalidPort(text.to_string());
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    text.parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(invalid)
}

/// The inside of `[...]`, if `host` is bracketed.
fn bracketed(host: &str) -> Option<&str> {
    host.strip_prefix('[')?.strip_suffix(']')
}

/// `host` without the brackets of an IPv6 literal (`[::1]` is `::1`); any other host as it
/// is. The one place a host's brackets are dropped.
pub fn unbracketed(host: &str) -> &str {
    bracketed(host).unwrap_or(host)
}

/// `host` as an IP address when it is an IP literal: `192.0.2.1`, `2001:db8::1` or
/// `[2001:db8::1]` (brackets around IPv6 only; no zone identifier).
pub fn ip_literal(host: &str) -> Option<IpAddr> {
    match bracketed(host) {
        Some(inner) => inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
        None => host.parse().ok(),
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
    fn authorities_are_read_with_a_default_port() {
        let a = Authority::parse("a.test:8080", Some(80)).unwrap();
        assert_eq!((a.host(), a.port()), ("a.test", 8080));
        assert_eq!(Authority::parse("a.test", Some(80)).unwrap().port(), 80);
        let v6 = Authority::parse("[::1]:81", Some(80)).unwrap();
        assert_eq!((v6.host(), v6.port()), ("::1", 81));
        assert_eq!(Authority::parse("[::1]", Some(443)).unwrap().port(), 443);
        assert_eq!(
            Authority::parse("a.test", None),
            Err(AuthorityError::NoPort)
        );
        assert_eq!(
            Authority::parse(":80", Some(80)),
            Err(AuthorityError::EmptyHost)
        );
        assert_eq!(
            Authority::parse("", Some(80)),
            Err(AuthorityError::EmptyHost)
        );
        assert_eq!(
            Authority::parse("[::1", Some(80)),
            Err(AuthorityError::UnclosedBracket)
        );
        assert_eq!(
            Authority::parse("[::1]x", Some(80)),
            Err(AuthorityError::NotHostPort("[::1]x".to_string()))
        );
        for bad in [
            "a.test:0",
            "a.test:65536",
            "a.test:",
            "a.test:+80",
            "a.test: 80",
        ] {
            assert!(
                matches!(
                    Authority::parse(bad, Some(80)),
                    Err(AuthorityError::InvalidPort(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn ports_are_digits_from_1_to_65535() {
        assert_eq!(parse_port("1"), Ok(1));
        assert_eq!(parse_port("65535"), Ok(65535));
        assert_eq!(parse_port("0443"), Ok(443));
        for bad in [
            "",
            "0",
            "65536",
            "+1",
            "-1",
            " 1",
            "1 ",
            "0x10",
            "99999999999999999999",
        ] {
            assert_eq!(
                parse_port(bad),
                Err(AuthorityError::InvalidPort(bad.to_string())),
                "{bad}"
            );
        }
        assert!(Authority::parse_connect("a.test:+443").is_err());
    }

    #[test]
    fn a_host_is_an_address_or_a_name() {
        assert_eq!(
            Authority::new("[::1]", 443).ip(),
            Some("::1".parse().unwrap())
        );
        assert_eq!(
            Authority::new("::1", 443).ip(),
            Some("::1".parse().unwrap())
        );
        assert_eq!(
            Authority::new("10.0.0.1", 80).ip(),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(Authority::new("api.test", 443).ip(), None);
        assert_eq!(Authority::new("", 0).ip(), None);
    }

    #[test]
    fn brackets_are_dropped_in_one_place() {
        assert_eq!(unbracketed("[::1]"), "::1");
        assert_eq!(unbracketed("::1"), "::1");
        assert_eq!(unbracketed("api.test"), "api.test");
        assert_eq!(unbracketed("[::1"), "[::1");
        assert_eq!(unbracketed("[]"), "");
    }

    #[test]
    fn ip_literals_bracketed_or_not() {
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(ip_literal("::1"), Some(v6));
        assert_eq!(ip_literal("[::1]"), Some(v6));
        assert_eq!(ip_literal("192.0.2.1"), Some("192.0.2.1".parse().unwrap()));
        // Brackets are for IPv6 only.
        assert_eq!(ip_literal("[192.0.2.1]"), None);
        assert_eq!(ip_literal("fe80::1%eth0"), None);
        assert_eq!(ip_literal("api.test"), None);
        assert_eq!(ip_literal("[::1"), None);
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
