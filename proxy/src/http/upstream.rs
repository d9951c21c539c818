//! The request sluice sends upstream for a client's request, over HTTP/1.1 or HTTP/2:
//! canonical target, the destination named once (`Host` or `:authority`), hop-by-hop,
//! `Connection`-nominated and `Proxy-*` headers removed, `Via` added. Pure: no sockets.

use http::{HeaderName, HeaderValue, Request};

use super::respond::is_hop_by_hop;

/// Whether a client's request header goes upstream, for HTTP/1.1 and HTTP/2 alike:
/// hop-by-hop headers, those the client's `Connection` nominates, `Host` (the target gives
/// it) and `Expect` (sluice answers it itself) stay behind; over HTTP/2, `te: trailers` (gRPC)
/// is the one connection-specific header allowed through.
pub(crate) fn forwarded(
    name: &str,
    value: &[u8],
    nominated: &[String],
    version: http::Version,
) -> bool {
    let lower = name.to_ascii_lowercase();
    if version == http::Version::HTTP_2 && lower == "te" && value == b"trailers" {
        return true;
    }
    !(is_hop_by_hop(&lower) || nominated.contains(&lower) || lower == "host" || lower == "expect")
}

/// What the upstream request is made of besides its headers and body.
#[derive(Debug)]
pub(crate) struct Outgoing<'a> {
    pub(crate) method: &'a str,
    pub(crate) version: http::Version,
    /// `scheme://` for the absolute URI HTTP/2 sends (`:scheme`).
    pub(crate) scheme: &'a str,
    /// The destination as a URI writes it (IPv6 in brackets, the scheme's default port
    /// left out): HTTP/1.1's `Host`, HTTP/2's `:authority`.
    pub(crate) authority: &'a str,
    /// The canonical origin-form target.
    pub(crate) origin_form: &'a str,
    /// The headers the client's `Connection` nominates (hop-by-hop: not forwarded).
    pub(crate) nominated: &'a [String],
    /// HTTP/1.1: the body is sent chunked.
    pub(crate) chunked: bool,
}

/// The upstream request, for HTTP/1.1 and HTTP/2 alike: the target origin-form with `Host`
/// (HTTP/1.1) or absolute (HTTP/2's `:scheme` and `:authority`), both naming the
/// destination the same way; hop-by-hop, `Connection`-nominated and `Proxy-*` headers
/// removed ([`forwarded`]); `Via` added.
pub(crate) fn build_request<B>(
    out: &Outgoing<'_>,
    headers: &[(String, Vec<u8>)],
    body: B,
) -> Result<Request<B>, String> {
    let h2 = out.version == http::Version::HTTP_2;
    let mut builder = Request::builder().method(out.method).version(out.version);
    builder = if h2 {
        let uri = format!("{}://{}{}", out.scheme, out.authority, out.origin_form);
        builder.uri(uri)
    } else {
        builder
            .uri(out.origin_form)
            .header(http::header::HOST, out.authority)
    };
    for (name, value) in headers {
        if !forwarded(name, value, out.nominated, out.version) {
            continue;
        }
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("invalid header name `{name}`"))?;
        let v = HeaderValue::from_bytes(value)
            .map_err(|_| format!("invalid value for header `{name}`"))?;
        builder = builder.header(n, v);
    }
    if out.chunked && !h2 {
        builder = builder.header(http::header::TRANSFER_ENCODING, "chunked");
    }
    let via = if h2 { "2 sluice" } else { "1.1 sluice" };
    builder = builder.header(http::header::VIA, via);
    builder.body(body).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both versions name the destination alike: no default port, IPv6 in brackets.
    #[test]
    fn both_versions_name_the_destination_alike() {
        let headers = vec![
            ("host".to_string(), b"evil.test".to_vec()),
            ("x-a".to_string(), b"1".to_vec()),
            ("connection".to_string(), b"x-b".to_vec()),
            ("x-b".to_string(), b"2".to_vec()),
        ];
        let nominated = vec!["x-b".to_string()];
        let mut out = Outgoing {
            method: "GET",
            version: http::Version::HTTP_11,
            scheme: "https",
            authority: "[::1]",
            origin_form: "/a?b",
            nominated: &nominated,
            chunked: false,
        };
        let h1 = build_request(&out, &headers, ()).unwrap();
        assert_eq!(h1.uri(), "/a?b");
        assert_eq!(h1.headers()["host"], "[::1]");
        assert_eq!(h1.headers()["x-a"], "1");
        assert!(h1.headers().get("x-b").is_none());
        assert_eq!(h1.headers().get_all("host").iter().count(), 1);
        out.version = http::Version::HTTP_2;
        let h2 = build_request(&out, &headers, ()).unwrap();
        assert_eq!(h2.uri().authority().unwrap().as_str(), "[::1]");
        assert_eq!(h2.uri().path_and_query().unwrap().as_str(), "/a?b");
        assert!(h2.headers().get("host").is_none());
        assert!(h2.headers().get("connection").is_none());
    }
}
