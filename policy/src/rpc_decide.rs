//! The decision on a request to a JSON-RPC or MCP endpoint (spec §1.8, §5.6; the reference's
//! Rego and `evaluate_jsonrpc_l7_request_for_log`): its body is read as JSON-RPC with the
//! selected endpoint's options; what does not parse, and (JSON-RPC) a client response, is
//! refused even under audit; otherwise each call is judged, and one denied call denies the
//! whole batch. A call is denied by a deny rule of any endpoint whose path selects the
//! request and allowed by an allow rule of the most specific ones: `POST` only; MCP also
//! allows client responses, its `GET` event stream, and (`allow_all_known_mcp_methods`)
//! every method but a `tools/call` that rules narrow by tool.

use super::model::{Endpoint, Protocol, RpcMatcher, RpcMethod, Rule};
use super::rpc_body::{self, Call, Reading, RpcBody};

/// What the request's body holds (as the transport read it).
#[derive(Clone, Copy, Debug)]
pub struct Body<'a> {
    pub bytes: &'a [u8],
    /// A `GET` without a body that accepts `text/event-stream` (MCP's receive stream).
    pub receive_stream: bool,
    /// GraphQL: why the body cannot be read (compressed, multipart;
    /// `graphql_body::unreadable`): refused even under audit.
    pub unreadable: Option<&'a str>,
}

/// One thing judged: a call, a client response, or the receive stream.
#[derive(Clone, Copy, Debug)]
enum Unit<'c> {
    Call(&'c Call),
    Response,
    Stream,
}

/// The answer before enforcement.
pub(super) enum Found<'p> {
    Allowed(Option<&'p Rule>),
    Denied(&'p Rule),
    NotAllowed,
    /// Refused even under audit (the reason).
    Hard(String),
}

/// The request as the Rego sees it.
pub(super) struct Case<'a, 'p> {
    /// Endpoints whose `path` selects the request (their deny rules apply).
    pub matching: &'a [&'p Endpoint],
    /// The most specific of them (their allow rules apply).
    pub selected: &'a [&'p Endpoint],
    /// Upper case.
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a [(String, String)],
}

/// How the selected endpoint reads bodies, and at most how many bytes.
pub(super) fn reading(e: &Endpoint) -> Reading {
    Reading {
        mcp: e.protocol == Protocol::Mcp,
        strict_tool_names: e.rpc.strict_tool_names,
    }
}

pub(super) fn decide<'p>(case: &Case<'_, 'p>, body: Body<'_>) -> (Found<'p>, Option<RpcBody>) {
    let Some(first) = case.selected.first() else {
        return (Found::NotAllowed, None);
    };
    let mcp = first.protocol == Protocol::Mcp;
    if body.receive_stream {
        return (unit(case, Unit::Stream), None);
    }
    let parsed = rpc_body::parse(body.bytes, reading(first));
    if let Some(e) = &parsed.error {
        return (
            Found::Hard(format!("JSON-RPC request rejected: {e}")),
            Some(parsed),
        );
    }
    if parsed.has_response && !mcp {
        let reason = "JSON-RPC response frames are not permitted from client to server";
        return (Found::Hard(reason.to_string()), Some(parsed));
    }
    let mut allowed_by = None;
    let units = parsed
        .has_response
        .then_some((None, Unit::Response))
        .into_iter()
        .chain(
            parsed
                .calls
                .iter()
                .enumerate()
                .map(|(i, c)| (Some(i), Unit::Call(c))),
        );
    let mut refused = None;
    for (i, u) in units {
        match unit(case, u) {
            Found::Allowed(r) => allowed_by = allowed_by.or(r),
            other => {
                refused = Some((i, other));
                break;
            }
        }
    }
    let mut parsed = parsed;
    match refused {
        Some((i, found)) => {
            parsed.refused = i;
            (found, Some(parsed))
        }
        None => (Found::Allowed(allowed_by), Some(parsed)),
    }
}

/// Whether a request is MCP's receive stream: a `GET` without a body whose `Accept` values
/// name `text/event-stream` (the reference's `jsonrpc_receive_stream_request`).
pub fn receive_stream<'a>(
    method: &str,
    has_body: bool,
    accept: impl IntoIterator<Item = &'a str>,
) -> bool {
    method.eq_ignore_ascii_case("GET")
        && !has_body
        && accept.into_iter().any(|v| {
            v.split(',').any(|part| {
                part.split(';')
                    .next()
                    .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"))
            })
        })
}

/// One unit, as one evaluation of the Rego.
fn unit<'p>(case: &Case<'_, 'p>, u: Unit<'_>) -> Found<'p> {
    let post = case.method == "POST";
    for e in case.matching {
        let hit = e.deny_rules.iter().find(|r| match (&r.rpc, u) {
            (None, _) => {
                r.graphql.is_none()
                    && r.method.matches(case.method)
                    && r.path.is_match(case.path)
                    && super::model::deny_query_matches(&r.query, case.query)
            }
            (Some(m), Unit::Call(c)) => post && e.protocol.is_rpc() && call_matches(m, c),
            (Some(_), _) => false,
        });
        if let Some(rule) = hit {
            return Found::Denied(rule);
        }
    }
    for e in case.selected {
        let mcp = e.protocol == Protocol::Mcp;
        match u {
            Unit::Stream if mcp && case.method == "GET" => return Found::Allowed(None),
            Unit::Response if mcp && post => return Found::Allowed(None),
            Unit::Call(c) if post => {
                if let Some(rule) = e
                    .rules
                    .iter()
                    .find(|r| r.rpc.as_ref().is_some_and(|m| call_matches(m, c)))
                {
                    return Found::Allowed(Some(rule));
                }
                let narrowed = c.method == "tools/call" && e.rules.iter().any(names_tools);
                if mcp && e.rpc.allow_all_known_methods && !c.method.is_empty() && !narrowed {
                    return Found::Allowed(None);
                }
            }
            _ => {}
        }
    }
    Found::NotAllowed
}

fn names_tools(r: &Rule) -> bool {
    r.rpc
        .as_ref()
        .is_some_and(|m| m.params.iter().any(|p| p.key == "name"))
}

fn call_matches(m: &RpcMatcher, c: &Call) -> bool {
    if c.method.is_empty() {
        return false;
    }
    let method = match &m.method {
        RpcMethod::Any => true,
        RpcMethod::Exact(e) => *e == c.method,
        RpcMethod::Glob(g) => g.is_match(&c.method),
    };
    method
        && m.params
            .iter()
            .all(|p| p.key == "name" && c.tool.as_deref().is_some_and(|t| p.value_matches(t)))
}
