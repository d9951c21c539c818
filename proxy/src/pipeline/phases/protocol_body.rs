//! Request bodies judged by their protocol, for both transports: a request to a
//! `protocol: json-rpc`, `mcp` or `graphql` endpoint passes its head (the head alone decides
//! nothing there) and is judged when its body has been read whole, at most the endpoint's
//! `max_body_bytes` (`Prepared::reads_whole`), by the calls it makes (`policy::rpc_decide`)
//! or the operations it asks (`policy::graphql_decide`). Its record names the method and
//! tool, or the operation's type and name, judged, never the arguments or variables; a
//! refusal tells the agent which call or operation was refused and the rule it would need;
//! a body that is not JSON-RPC 2.0 is `400 invalid_jsonrpc_request`, a GraphQL request that
//! does not parse (or comes compressed or multipart) `400 invalid_graphql_request`. MCP's
//! event stream (a `GET` without a body accepting `text/event-stream`) and a GraphQL `GET`
//! are judged from their heads.

use std::sync::Arc;

use serde_json::json;

use super::record::Record;
use crate::audit::{Engine, Outcome};
use crate::http::respond::{Code, Refusal};
use crate::pipeline::authority::Authority;
use crate::pipeline::denial::Denial;
use crate::policy::decide::{RequestBasis, Verdict};
use crate::policy::rpc_decide::{Body, receive_stream};
use crate::policy::{Admission, Policy, Request};

/// What judging a request's body needs, kept from its head.
#[derive(Debug)]
pub struct RpcCheck {
    policy: Arc<Policy>,
    admission: Admission,
    /// The request line's method.
    method: String,
    /// Path and query as the client sent them.
    target: String,
    receive_stream: bool,
    /// GraphQL: why the body cannot be read (compressed, multipart).
    unreadable: Option<String>,
    /// The tunnel or forward target.
    dst: Authority,
    /// The caller's executable (for the operator's `policy explain` line).
    binary: String,
}

/// The facts of a request head that decide whether its body is judged.
pub struct HeadFacts<'a> {
    pub method: &'a str,
    pub target: &'a str,
    pub headers: &'a [(String, Vec<u8>)],
    pub has_body: bool,
    pub dst: &'a Authority,
    pub binary: &'a str,
}

impl RpcCheck {
    /// The check of a request to a JSON-RPC or MCP endpoint and the most body bytes read
    /// for it; `None` for any other request.
    pub fn new(
        policy: &Arc<Policy>,
        admission: &Admission,
        head: &HeadFacts<'_>,
    ) -> Option<(RpcCheck, usize)> {
        let req = Request {
            method: head.method,
            target: head.target.as_bytes(),
            websocket_upgrade: false,
        };
        let limit = policy.rpc_body_limit(admission, &req)?;
        let accepts: Vec<String> = head
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("accept"))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect();
        let stream = receive_stream(
            head.method,
            head.has_body,
            accepts.iter().map(String::as_str),
        );
        let unreadable = crate::policy::graphql_body::unreadable(
            head.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
        );
        let check = RpcCheck {
            policy: Arc::clone(policy),
            admission: admission.clone(),
            method: head.method.to_string(),
            target: head.target.to_string(),
            receive_stream: stream,
            unreadable,
            dst: head.dst.clone(),
            binary: head.binary.to_string(),
        };
        Some((check, limit))
    }
}

/// Judges the whole `body` of a request `check` was made for, into its record: `Ok` lets
/// it go upstream (allowed, or audited), `Err` is the refusal.
pub fn judge(check: &RpcCheck, body: &[u8], rec: &mut Record) -> Result<(), Denial> {
    let req = Request {
        method: &check.method,
        target: check.target.as_bytes(),
        websocket_upgrade: false,
    };
    let body = Body {
        bytes: body,
        receive_stream: check.receive_stream,
        unreadable: check.unreadable.as_deref(),
    };
    let d = check
        .policy
        .decide_rpc_request(&check.admission, &req, body);
    if d.graphql.is_some() {
        let asked = super::graphql_judged::Asked {
            method: &check.method,
            target: &check.target,
            dst: &check.dst,
            binary: &check.binary,
        };
        return super::graphql_judged::judge(&asked, &d, rec);
    }
    let protocol = d
        .endpoints
        .first()
        .map_or("json-rpc", |&r| check.policy.endpoint(r).protocol.as_str());
    let parsed = d.rpc.clone().unwrap_or_default();
    // Which calls were judged (names only): the one refused, else all of them.
    let name = |c: &crate::policy::rpc_body::Call| match &c.tool {
        Some(t) => format!("{} {t}", c.method),
        None => c.method.clone(),
    };
    let refused = parsed.refused.and_then(|i| parsed.calls.get(i));
    let calls: Vec<String> = match refused {
        Some(c) => vec![name(c)],
        None => parsed.calls.iter().map(name).collect(),
    };
    let named = if calls.is_empty() {
        String::new()
    } else {
        format!(" ({protocol}: {})", calls.join(", "))
    };
    rec.engine = Engine::L7;
    rec.rule = d.rule().map(|r| r.summary());
    if let Some(r) = d.rule() {
        rec.policy = Some(r.origin.entry.to_string());
    }
    rec.reason = Some(format!("{}{named}", d.reason));
    rec.outcome = match d.verdict {
        Verdict::Allow => Outcome::Allowed,
        Verdict::Audit => Outcome::Audited,
        Verdict::Deny => Outcome::Denied,
    };
    if d.verdict != Verdict::Deny {
        return Ok(());
    }
    let path = d
        .target
        .as_ref()
        .map_or(check.target.as_str(), |t| t.path.as_str());
    if matches!(d.basis, RequestBasis::RpcRejected) {
        let refusal = Refusal::new(
            Code::InvalidJsonrpcRequest,
            format!("{} {}{path}: {}", check.method, check.dst, d.reason),
        )
        .with_reason(rec.reason.clone().unwrap_or_default())
        .with("protocol", protocol)
        .with("layer", "l7");
        return Err(Denial::new(Engine::L7, refusal));
    }
    let rule_needed = refused.map(|c| match &c.tool {
        Some(t) => json!({"method": c.method, "tool": t}),
        None => json!({"method": c.method}),
    });
    let what = refused.map_or(String::new(), |c| match &c.tool {
        Some(t) => format!("; refused call: {} tool `{t}`", c.method),
        None => format!("; refused call: {}", c.method),
    });
    let policy = rec.policy.clone().unwrap_or_default();
    let step = match (&d.basis, &rule_needed) {
        (RequestBasis::DenyRule(r), _) => format!(
            "a deny rule (`{}`) of policy entry `{}` blocks it; deny rules win over allow rules",
            r.summary(),
            r.origin.entry
        ),
        (_, Some(rule)) => format!(
            "if the task needs it, ask the operator to add the allow rule {rule} to the {protocol} endpoint of policy entry `{policy}` for {}",
            check.dst
        ),
        _ => format!("the {protocol} endpoint of policy entry `{policy}` allows no such request"),
    };
    let refusal = Refusal::new(Code::PolicyDenied,
        format!("{} {}{path} denied by L7 policy: {}{what}", check.method, check.dst, d.reason),
    )
    .with_reason(rec.reason.clone().unwrap_or_default())
    .with("policy", policy)
    .with("rule", rec.rule.clone().map_or(serde_json::Value::Null, Into::into))
    .with("layer", "l7")
    .with("protocol", protocol)
    .with("rpc_method", refused.map(|c| c.method.clone()))
    .with("tool", refused.and_then(|c| c.tool.clone()))
    .with("missing", rule_needed.unwrap_or(serde_json::Value::Null))
    .with("next_steps", json!([
        "this request was refused by policy and retrying it unchanged will be refused again",
        step,
        format!("the operator can check a change with: sluice policy explain --policy FILE --binary {} --method {} https://{}{path}", check.binary, check.method, check.dst),
    ]));
    Err(Denial::new(Engine::L7, refusal))
}
