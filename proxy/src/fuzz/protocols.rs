//! Fuzz entry points for the bodies and requests the agent protocols and living credentials
//! read: JSON-RPC and MCP request bodies, GraphQL requests and WebSocket messages, and
//! requests signed again with SigV4. Registered in
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

/// A GraphQL request (`protocol: graphql`): the input as a POST body, as a GET's `query`
/// parameter, and as a WebSocket client message, read as the proxy reads them (bounded by
/// the parser's recursion and token limits, root fields gathered without recursion): a
/// refused request has no operation, an accepted one at least one, each an operation type
/// the rules know (or a hash-only persisted query, with its key), its root fields sorted and
/// distinct; a single envelope gives one operation, and the GET reading of a document
/// agrees with the POST reading of the same document.
pub fn graphql_body(data: &[u8]) {
    use crate::policy::graphql_body::{GraphqlRequest, WsMessage, parse, websocket_message};
    let check = |r: &GraphqlRequest| {
        assert!(r.error.is_none() != r.operations.is_empty(), "{r:?}");
        for op in &r.operations {
            let known = ["query", "mutation", "subscription"].contains(&op.operation_type.as_str());
            assert!(
                known || (op.needs_registry() && op.registry_key().is_some()),
                "{op:?}"
            );
            assert!(op.fields.windows(2).all(|w| w[0] < w[1]), "{op:?}");
        }
    };
    let post = parse("POST", &[], data);
    check(&post);
    if let Ok(text) = std::str::from_utf8(data) {
        let get = parse("GET", &[("query".to_string(), text.to_string())], b"");
        check(&get);
        let envelope = serde_json::json!({ "query": text }).to_string();
        let as_post = parse("POST", &[], envelope.as_bytes());
        assert_eq!(get, as_post, "GET and POST read one document differently");
        assert!(as_post.operations.len() <= 1);
    }
    if let WsMessage::Operation(r) = websocket_message(data) {
        check(&r);
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
