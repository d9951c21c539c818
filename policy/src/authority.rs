//! The request line's target as the proxy receives it inside a tunnel: whether it is a
//! well-formed request target at all, and whether its authority (an absolute-form target's,
//! and the `Host` header's) names the tunnel's own host and port (spec §3.4, §13 row 21).
//!
//! Pure string logic shared by the proxy (`pipeline::target`, `http::head`) and by
//! `policy explain`, so that an explanation applies the checks the wire applies.
use sluice_addr::Authority;

/// Why a request target is refused before anything else looks at it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("empty request target")]
    Empty,
    /// Visible ASCII only: no controls, spaces or non-ASCII (spec §13 row 17).
    #[error("request target contains byte 0x{0:02x}")]
    Byte(u8),
}

/// The request line's rule for a target: not empty, visible ASCII only.
pub fn check_request_target(target: &[u8]) -> Result<(), TargetError> {
    if target.is_empty() {
        return Err(TargetError::Empty);
    }
    match target.iter().find(|&&b| !(0x21..=0x7e).contains(&b)) {
        Some(&b) => Err(TargetError::Byte(b)),
        None => Ok(()),
    }
}

/// A request inside a tunnel to `host:port`: its path and query, and whether its authority
/// names the tunnel. An origin-form target needs a `Host` for host:port (the transport's
/// default port may be left out; HTTP/1.0 may leave `Host` out); an absolute-form target
/// must name the same authority (its scheme's default port applies), and so must a `Host`
/// header beside it.
pub fn tunnel_request(
    target: &str,
    host_header: Option<&[u8]>,
    http10: bool,
    dst: &Authority,
    default_port: u16,
) -> (String, bool) {
    if target.starts_with('/') {
        let ok = match host_header {
            Some(h) => host_matches(h, dst, default_port),
            // HTTP/1.0 without Host: only the tunnel itself can be meant.
            None => http10,
        };
        return (target.to_string(), ok);
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return (target.to_string(), false);
    };
    let scheme_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return (target.to_string(), false),
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(split);
    let ok = host_matches(authority.as_bytes(), dst, scheme_port)
        && host_header.is_none_or(|h| host_matches(h, dst, scheme_port));
    let path = if tail.is_empty() {
        "/".to_string()
    } else if tail.starts_with('?') {
        format!("/{tail}")
    } else {
        tail.to_string()
    };
    (path, ok)
}

/// Whether an authority (`Host` header, URI authority) names `dst`; `default_port` applies
/// when it has none.
pub fn host_matches(header: &[u8], dst: &Authority, default_port: u16) -> bool {
    let Ok(h) = std::str::from_utf8(header) else {
        return false;
    };
    let h = h.trim().to_ascii_lowercase();
    let Ok(named) = Authority::parse(&h, Some(default_port)) else {
        return false;
    };
    // One trailing dot names the same host, as for the target (`canon::normalize_host`).
    let hh = match named.host().strip_suffix('.') {
        Some(h) if !h.is_empty() && !h.ends_with('.') => h,
        _ => named.host(),
    };
    hh == dst.host() && named.port() == dst.port()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_targets() {
        assert_eq!(check_request_target(b""), Err(TargetError::Empty));
        assert_eq!(check_request_target(b"/a b"), Err(TargetError::Byte(0x20)));
        assert_eq!(
            check_request_target("/\u{a0}".as_bytes()),
            Err(TargetError::Byte(0xc2))
        );
        assert_eq!(check_request_target(b"/a?b=c"), Ok(()));
    }

    /// Text after a bracketed host that is not `:port` names no authority (it was once read
    /// as the host on the default port).
    #[test]
    fn a_bracketed_host_is_followed_by_a_port_or_nothing() {
        assert!(host_matches(b"[::1]", &Authority::new("::1", 443), 443));
        assert!(host_matches(b"[::1]:443", &Authority::new("::1", 443), 80));
        assert!(!host_matches(b"[::1]x", &Authority::new("::1", 443), 443));
        assert!(!host_matches(b"[::1", &Authority::new("::1", 443), 443));
        // A port is digits only: `+443` is not 443 (`str::parse` would read it so).
        assert!(!host_matches(
            b"x.test:+443",
            &Authority::new("x.test", 443),
            443
        ));
        assert!(!host_matches(
            b"[::1]:+443",
            &Authority::new("::1", 443),
            80
        ));
    }

    #[test]
    fn tunnel_authority() {
        let h = Some(&b"x.test:443"[..]);
        assert_eq!(
            tunnel_request("/a?q", h, false, &Authority::new("x.test", 443), 443),
            ("/a?q".to_string(), true)
        );
        // Absolute-form http:// means port 80, not the tunnel's 443.
        assert!(
            !tunnel_request(
                "http://x.test/a",
                h,
                false,
                &Authority::new("x.test", 443),
                443
            )
            .1
        );
        assert_eq!(
            tunnel_request(
                "https://x.test/a",
                h,
                false,
                &Authority::new("x.test", 443),
                443
            ),
            ("/a".to_string(), true)
        );
        assert!(
            !tunnel_request(
                "https://other.test/a",
                h,
                false,
                &Authority::new("x.test", 443),
                443
            )
            .1
        );
        assert!(!tunnel_request("/a", None, false, &Authority::new("x.test", 443), 443).1);
        assert!(tunnel_request("/a", None, true, &Authority::new("x.test", 443), 443).1);
        assert!(!tunnel_request("*", h, false, &Authority::new("x.test", 443), 443).1);
        // One trailing dot is the same host; two are not.
        assert!(host_matches(
            b"X.test.:443",
            &Authority::new("x.test", 443),
            443
        ));
        assert!(host_matches(
            b"x.test.",
            &Authority::new("x.test", 443),
            443
        ));
        assert!(!host_matches(
            b"x.test..",
            &Authority::new("x.test", 443),
            443
        ));
    }
}
