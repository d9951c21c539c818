//! Fuzz entry points for the bodies and requests the agent protocols and living credentials
//! read: JSON-RPC and MCP request bodies, and requests signed again with SigV4. Registered in
//! [`super::TARGETS`] like the rest; the resolver of keys is the parent's.

/// A JSON-RPC or MCP request body (`protocol: json-rpc`, `mcp`), read as the proxy reads it
/// under each reading: a refused body names no call, a single message at most one, a
/// JSON-RPC reading no tool; MCP's reading is JSON-RPC's and stricter, so what JSON-RPC
/// refuses MCP refuses too, and where both accept they find the same methods.
pub fn rpc_body(data: &[u8]) {
    use crate::policy::rpc_body::{Reading, parse};
    let plain = parse(
        data,
        Reading {
            mcp: false,
            strict_tool_names: false,
        },
    );
    assert!(plain.calls.iter().all(|c| c.tool.is_none()));
    for strict_tool_names in [false, true] {
        let mcp = parse(
            data,
            Reading {
                mcp: true,
                strict_tool_names,
            },
        );
        for body in [&plain, &mcp] {
            assert!(body.error.is_none() || body.calls.is_empty(), "{body:?}");
            assert!(body.is_batch || body.calls.len() <= 1, "{body:?}");
        }
        if plain.error.is_some() {
            assert!(
                mcp.error.is_some(),
                "MCP accepted what JSON-RPC refused: {mcp:?}"
            );
        }
        if plain.error.is_none() && mcp.error.is_none() {
            let methods = |b: &crate::policy::rpc_body::RpcBody| {
                b.calls.iter().map(|c| c.method.clone()).collect::<Vec<_>>()
            };
            assert_eq!(methods(&plain), methods(&mcp));
        }
    }
}

/// A request to sign again with SigV4 (`credential_signing`): the first line is the host,
/// the second the origin-form target, then header lines (`name: value`) up to an empty
/// line, then the body. The client's signature headers are dropped, the payload mode read,
/// the region read from the host, and the request signed with fixed keys under each mode:
/// a signature is made or refused, never a panic, and a signed request carries exactly one
/// `Authorization` and no header of the client's signature.
pub fn sigv4_request(data: &[u8]) {
    use crate::credentials::sigv4::{
        Request, payload_of, region_from_host, sign_request, strip_client_signature,
    };
    use crate::policy::model::{Signing, SigningMode};
    let (text, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let mut lines = text.split('\n');
    let host = lines.next().unwrap_or_default().trim().to_ascii_lowercase();
    let target = lines.next().unwrap_or("/");
    let client: Vec<(String, Vec<u8>)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().as_bytes().to_vec()))
        .filter(|(n, _)| !n.is_empty())
        .collect();
    let _ = region_from_host(&host);
    let keys = super::FuzzResolver::new();
    for mode in [SigningMode::Auto, SigningMode::Body, SigningMode::NoBody] {
        let Ok(payload) = payload_of(mode, &client, true) else {
            continue;
        };
        let mut headers = client.clone();
        strip_client_signature(&mut headers);
        let signing = Signing {
            mode,
            service: "s3".to_string(),
            region: (body.first() == Some(&b'r')).then(|| "us-east-1".to_string()),
        };
        let req = Request {
            method: "PUT",
            host: &host,
            authority: &host,
            target,
            body,
        };
        if sign_request(&signing, payload, &req, &mut headers, &keys).is_ok() {
            let count = |name: &str| {
                headers
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                    .count()
            };
            assert_eq!(count("authorization"), 1, "{headers:?}");
            assert_eq!(count("x-amz-date"), 1, "{headers:?}");
        }
    }
}
