//! Request targets: the absolute-form URI of a forward-proxy request
//! (`http://host[:port]/path?query`), and, inside a tunnel, whether a request's authority
//! (its target and `Host` header) names the tunnel's own host and port.

use crate::http::head::RequestHead;
use crate::http::respond::Code;
use crate::http::respond::Refusal;
use crate::pipeline::authority::{Authority, AuthorityError};
use crate::pipeline::phases::connection::Admitted;
use crate::policy::authority;
pub use crate::policy::authority::host_matches;

/// An absolute-form request target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Absolute {
    /// The host as sent (not yet lower-cased) and the port (80 when the URI has none).
    pub authority: Authority,
    /// Path and query as sent (`/` when the URI has none).
    pub path_and_query: String,
}

/// Parses `http://host[:port][/path][?query]`; anything else is a refusal.
pub fn parse_absolute(target: &str) -> Result<Absolute, Refusal> {
    if target.starts_with('/') {
        return Err(Refusal::new(
            Code::NotAProxyRequest,
            "sluice is a proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port",
        ));
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(Refusal::new(
            Code::BadRequest,
            "request target is not an absolute http:// URI",
        ));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "http" => {}
        "https" => {
            return Err(Refusal::new(
                Code::HttpsRequiresConnect,
                "Use CONNECT for HTTPS URLs",
            ));
        }
        other => {
            return Err(Refusal::new(
                Code::UnsupportedProxyScheme,
                format!(
                    "scheme `{other}` is not supported by the forward proxy (http only; use CONNECT)"
                ),
            ));
        }
    }
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    if authority.contains('@') {
        return Err(Refusal::new(
            Code::BadRequest,
            "user information in the request URI is not allowed",
        ));
    }
    let authority = Authority::parse(authority, Some(80)).map_err(|e| {
        let detail = match e {
            AuthorityError::InvalidPort(p) => format!("invalid port `{p}` in the URI"),
            AuthorityError::EmptyHost => "empty host in the URI".to_string(),
            _ => "malformed URI host: an unclosed `[`, or something other than `:port` after `]`"
                .to_string(),
        };
        Refusal::new(Code::BadRequest, detail)
    })?;
    let path_and_query = match tail {
        "" => "/".to_string(),
        t if t.starts_with('?') => format!("/{t}"),
        t => t.to_string(),
    };
    Ok(Absolute {
        authority,
        path_and_query,
    })
}

/// The request target inside a tunnel and whether its authority names the tunnel: an
/// origin-form target with a Host header for host:port (the transport's default port may be
/// left out), or an absolute-form target for the same authority (spec §3.4, §13 row 21).
pub fn tunnel_target(head: &RequestHead, t: &Admitted) -> (String, bool) {
    authority::tunnel_request(
        &head.target,
        head.header("host"),
        head.minor_version == 0,
        &t.dst,
        t.scheme.default_port(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_targets() {
        let a = parse_absolute("http://Example.com:8080/a/b?c=1").unwrap();
        assert_eq!(
            (
                a.authority.host(),
                a.authority.port(),
                a.path_and_query.as_str()
            ),
            ("Example.com", 8080, "/a/b?c=1")
        );
        assert_eq!(parse_absolute("http://x.test").unwrap().path_and_query, "/");
        assert_eq!(
            parse_absolute("http://x.test?q").unwrap().path_and_query,
            "/?q"
        );
        assert_eq!(
            parse_absolute("http://[::1]:81/").unwrap().authority.host(),
            "::1"
        );
        assert_eq!(
            parse_absolute("https://x.test/").unwrap_err().error,
            "https_requires_connect"
        );
        assert_eq!(
            parse_absolute("ftp://x.test/").unwrap_err().error,
            "unsupported_proxy_scheme"
        );
        assert_eq!(
            parse_absolute("/local").unwrap_err().error,
            "not_a_proxy_request"
        );
        assert_eq!(
            parse_absolute("http://u:p@x.test/").unwrap_err().status,
            400
        );
        assert_eq!(parse_absolute("http://x.test:0/").unwrap_err().status, 400);
        // A port is digits only (`str::parse` would read `+80` as 80); each refusal says why.
        for (bad, why) in [
            ("http://x.test:+80/", "invalid port `+80` in the URI"),
            ("http://:80/", "empty host in the URI"),
            ("http://[::1/", "malformed URI host"),
            ("http://[::1]x/", "malformed URI host"),
        ] {
            let refusal = parse_absolute(bad).unwrap_err();
            assert_eq!(refusal.status, 400, "{bad}");
            assert!(refusal.detail.contains(why), "{bad}: {refusal:?}");
        }
    }

    #[test]
    fn host_header_agreement() {
        assert!(host_matches(b"x.test", &Authority::new("x.test", 80), 80));
        assert!(host_matches(
            b"X.test:80",
            &Authority::new("x.test", 80),
            80
        ));
        assert!(host_matches(
            b"x.test:8080",
            &Authority::new("x.test", 8080),
            80
        ));
        assert!(!host_matches(
            b"evil.test",
            &Authority::new("x.test", 80),
            80
        ));
        assert!(!host_matches(
            b"x.test:81",
            &Authority::new("x.test", 80),
            80
        ));
        assert!(host_matches(b"[::1]:81", &Authority::new("::1", 81), 80));
        // An HTTP/2 :authority inside a TLS tunnel: 443 may be left out.
        assert!(host_matches(
            b"API.example.com",
            &Authority::new("api.example.com", 443),
            443
        ));
        assert!(host_matches(
            b"api.example.com:443",
            &Authority::new("api.example.com", 443),
            443
        ));
        assert!(!host_matches(
            b"127.0.0.1",
            &Authority::new("127.0.0.1", 8443),
            443
        ));
        assert!(host_matches(
            b"[::1]:8443",
            &Authority::new("::1", 8443),
            443
        ));
        assert!(!host_matches(b"[::1", &Authority::new("::1", 443), 443));
    }
}
