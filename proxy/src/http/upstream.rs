//! The HTTP/1.1 request sluice sends upstream for a client's request: origin-form target,
//! hop-by-hop, `Connection`-nominated and `Proxy-*` headers removed, `Host` from the target,
//! `Via` added. Pure: no sockets.

use http::{HeaderName, HeaderValue, Request};

use super::body::ChannelBody;
use super::head::RequestHead;
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

/// The upstream request: origin-form target, hop-by-hop and `Proxy-*` headers removed,
/// `Host` the destination's `authority` (its port left out when it is the scheme's default,
/// as a signature over it expects), `Via` added.
pub(crate) fn build_request(
    head: &RequestHead,
    chunked: bool,
    headers: &[(String, Vec<u8>)],
    origin_form: &str,
    authority: &str,
    body: ChannelBody,
) -> Result<Request<ChannelBody>, String> {
    let nominated = head.connection_tokens();
    let mut builder = Request::builder()
        .method(head.method.as_str())
        .uri(origin_form)
        .version(http::Version::HTTP_11);
    builder = builder.header(http::header::HOST, authority);
    for (name, value) in headers {
        if !forwarded(name, value, &nominated, http::Version::HTTP_11) {
            continue;
        }
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("invalid header name `{name}`"))?;
        let v = HeaderValue::from_bytes(value)
            .map_err(|_| format!("invalid value for header `{name}`"))?;
        builder = builder.header(n, v);
    }
    if chunked {
        builder = builder.header(http::header::TRANSFER_ENCODING, "chunked");
    }
    builder = builder.header(http::header::VIA, "1.1 sluice");
    builder.body(body).map_err(|e| e.to_string())
}
