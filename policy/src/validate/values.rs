//! Checks of single values that need no policy context: a `host` written as a URL (and how to
//! write it instead), DNS-name patterns, and filesystem paths. (Whether an `allowed_ips`
//! network reaches an always-blocked address is the address classifier's question,
//! `sluice_resolver::always_blocked_in`.)

/// For a host written as a URL, `host:port` or `host/path`: how to write it instead.
pub(super) fn url_shaped_host(text: &str) -> Option<String> {
    let (scheme, rest) = match text.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, text),
    };
    let path_at = rest.find('/');
    let authority = &rest[..path_at.unwrap_or(rest.len())];
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) => (h, Some(p)),
        _ => (authority, None),
    };
    if scheme.is_none() && path_at.is_none() && port.is_none() {
        return None;
    }
    if host.is_empty() || !is_dns_pattern(host) {
        return None;
    }
    let port = port.map(str::to_string).or_else(|| match scheme {
        Some(s) if s.eq_ignore_ascii_case("https") || s.eq_ignore_ascii_case("wss") => {
            Some("443".to_string())
        }
        Some(s) if s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("ws") => {
            Some("80".to_string())
        }
        _ => None,
    });
    let mut fix = format!("write `host: {host}`");
    if let Some(p) = port {
        fix.push_str(&format!(" with `port: {p}`"));
    }
    if let Some(i) = path_at {
        let path = &rest[i..];
        if path != "/" {
            fix.push_str(&format!(
                ", and restrict the path with a rule path or the endpoint `path` (`{path}`)"
            ));
        }
    }
    Some(fix)
}

/// Labels of letters, digits, `-`, `_` and `*`, none empty.
pub(super) fn is_dns_pattern(host: &str) -> bool {
    host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'*')
        })
}

pub(super) fn fs_path_problem(path: &str, rw: bool) -> Option<String> {
    if !path.starts_with('/') {
        return Some(format!("`{path}` must be an absolute path"));
    }
    if path.split('/').any(|c| c == "..") {
        return Some(format!("`{path}` must not contain `..`"));
    }
    if path.len() > 4096 {
        return Some("path longer than 4096 bytes".to_string());
    }
    if rw && path.chars().all(|c| c == '/') {
        return Some("`/` cannot be writable".to_string());
    }
    None
}
