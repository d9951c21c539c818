//! Explanations: a decision with the entry and rule that made it, where they are written,
//! and, for a denial, what would have to change.
//!
//! Owns the question model of `sluice policy explain` (a caller, host:port, and optionally a
//! request inside a TLS-terminated CONNECT tunnel to host:port, as the proxy will see it) and
//! its two renderings: text for people, one JSON object for scripts. It calls the same
//! `decide` functions as the proxy, so an explanation cannot drift from enforcement.

use serde::Serialize;

use super::authority;
use super::canon::{self, CanonError};
use super::compile::Policy;
use super::decide::{Caller, L4Decision, L4DenyKind, Request, RequestBasis, Verdict};
use super::rpc_decide::{Body, receive_stream};

/// One question: may this caller reach host:port, and (optionally) send this request?
#[derive(Clone, Debug)]
pub struct Question {
    pub binary: String,
    pub ancestors: Vec<String>,
    /// The absolute paths on the caller's command line (logged in an L4 denial's reason,
    /// never granting anything).
    pub cmdline_paths: Vec<String>,
    /// A gateway tenant asking (`binary` is then ignored: its program is unknown).
    pub tenant: Option<String>,
    pub host: String,
    pub port: u16,
    pub request: Option<QuestionRequest>,
}

#[derive(Clone, Debug, Default)]
pub struct QuestionRequest {
    pub method: String,
    /// The raw request target, path and query.
    pub target: String,
    pub websocket_upgrade: bool,
    /// The request's body (a JSON-RPC or MCP endpoint judges it).
    pub body: Option<Vec<u8>>,
    /// The request's headers (name, value): MCP's event stream is a `GET` accepting
    /// `text/event-stream`.
    pub headers: Vec<(String, String)>,
    /// A text message sent after the upgrade (then `websocket_upgrade`): the answer is the
    /// message's (`WEBSOCKET_TEXT`), or the upgrade's when it is refused or its messages
    /// are not judged.
    pub ws_text: Option<String>,
}

/// The answer, in the shape `--json` prints.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Explanation {
    /// `allow`, `deny` or `audit`.
    pub decision: &'static str,
    /// `allow` or `deny`.
    pub l4: &'static str,
    /// The deciding policy key.
    pub entry: Option<String>,
    /// The deciding rule, `METHOD path`.
    pub rule: Option<String>,
    pub reason: String,
    /// The canonical path, when there is a request and it could be canonicalised.
    pub canonical: Option<String>,
    /// Where a denial (or audit) came from: `target`, `l4` or `l7`.
    pub stage: Option<&'static str>,
    pub binary: String,
    pub host: String,
    pub port: u16,
    pub method: Option<String>,
    /// The deciding endpoint's field path and location.
    pub endpoint: Option<String>,
    /// Where the deciding rule is written.
    pub rule_location: Option<String>,
    /// What would have to change for a denial to become an allow.
    pub suggestions: Vec<String>,
    /// A question with a WebSocket text message: `upgrade` (the upgrade was refused),
    /// `message` (the message was judged) or `none` (frames are relayed unjudged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ws_stage: Option<&'static str>,
    /// JSON-RPC or MCP: the calls the body makes (`method` or `method tool`), names only;
    /// GraphQL: its operations (`type name`, or `persisted query KEY`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<Vec<String>>,
}

pub fn explain(policy: &Policy, q: &Question) -> Explanation {
    let mut out = Explanation {
        decision: "deny",
        l4: "deny",
        entry: None,
        rule: None,
        reason: String::new(),
        canonical: None,
        stage: None,
        binary: match &q.tenant {
            Some(t) => format!("tenant:{t}"),
            None => q.binary.clone(),
        },
        host: q.host.clone(),
        port: q.port,
        method: q.request.as_ref().map(|r| r.method.to_ascii_uppercase()),
        endpoint: None,
        rule_location: None,
        suggestions: Vec::new(),
        ws_stage: None,
        calls: None,
    };
    let host = match canon::normalize_host(&q.host) {
        Ok(h) => h,
        Err(e) => {
            out.reason = e.to_string();
            out.stage = Some("target");
            out.suggestions
                .push("use a valid DNS host name or IP literal as the target".to_string());
            return out;
        }
    };
    out.host.clone_from(&host);
    let caller = match &q.tenant {
        Some(t) => Caller::tenant(t),
        None => Caller {
            exe: &q.binary,
            ancestors: &q.ancestors,
            cmdline: &q.cmdline_paths,
            tenant: None,
        },
    };
    // What a binaries list must hold for this caller: a tenant's program is unknown.
    let binary = match &q.tenant {
        Some(_) => "/**",
        None => q.binary.as_str(),
    };
    let admission = match policy.decide_l4(&caller, &sluice_addr::Authority::new(&host, q.port)) {
        L4Decision::Deny(d) => {
            out.reason = d.reason;
            out.stage = Some("l4");
            out.canonical = q
                .request
                .as_ref()
                .and_then(|r| canon::canonicalize(r.target.as_bytes(), true).ok())
                .map(|t| t.path);
            match d.kind {
                L4DenyKind::NoPolicies | L4DenyKind::NoEndpoint => out.suggestions.push(format!(
                    "add an endpoint {{host: {host}, port: {}}} to a policy whose binaries include '{binary}' (or one of its ancestors)",
                    q.port
                )),
                L4DenyKind::Binary { entries } => {
                    for key in entries {
                        let at = policy
                            .entries()
                            .iter()
                            .find(|e| e.key == key)
                            .map(|e| format!(" ({})", e.location))
                            .unwrap_or_default();
                        out.suggestions.push(format!(
                            "add {{path: \"{binary}\"}} to the binaries of policy '{key}'{at}"
                        ));
                    }
                }
            }
            return out;
        }
        L4Decision::Allow(a) => a,
    };
    out.l4 = "allow";
    out.entry = Some(admission.entry.to_string());
    let ep = policy.endpoint(admission.endpoint);
    out.endpoint = Some(format!("{} ({})", ep.field(), ep.location));

    let Some(req) = &q.request else {
        out.decision = "allow";
        out.reason = if admission.inspects(policy) {
            format!(
                "connection to {} allowed; each request is judged by the L7 rules",
                sluice_addr::HostPort(&host, q.port)
            )
        } else {
            format!(
                "connection to {} allowed",
                sluice_addr::HostPort(&host, q.port)
            )
        };
        return out;
    };
    // An inspected tunnel parses each request: the request line's target and its authority
    // are checked as the proxy checks them (`authority`), then the L7 rules judge it.
    let mut target = req.target.clone();
    if admission.inspects(policy) {
        let refused = |out: &mut Explanation, reason: String, hint: &str| {
            out.reason = reason;
            out.stage = Some("target");
            out.suggestions.push(hint.to_string());
        };
        if let Err(e) = authority::check_request_target(req.target.as_bytes()) {
            refused(
                &mut out,
                e.to_string(),
                "send a well-formed request target (visible ASCII, percent-encode the rest)",
            );
            return out;
        }
        let host_header = sluice_addr::HostPort(&host, q.port).to_string();
        let (path, authority_ok) = authority::tunnel_request(
            &req.target,
            Some(host_header.as_bytes()),
            false,
            &sluice_addr::Authority::new(host.as_str(), q.port),
            443,
        );
        if !authority_ok {
            refused(
                &mut out,
                "request_authority_mismatch: HTTP request authority does not match the authorized tunnel endpoint".to_string(),
                "inside a tunnel, send origin-form targets (/path) or an absolute-form target for the tunnel's own host and port",
            );
            return out;
        }
        target = path;
    }
    let request = Request {
        method: &req.method,
        target: target.as_bytes(),
        websocket_upgrade: req.websocket_upgrade || req.ws_text.is_some(),
    };
    let mut decision = policy.decide_request(&admission, &request);
    if req.ws_text.is_some() {
        out.ws_stage = Some("upgrade");
        if decision.verdict != Verdict::Deny {
            if policy.inspects_websocket_messages(&decision) {
                out.ws_stage = Some("message");
                out.method = Some("WEBSOCKET_TEXT".to_string());
                let text = req.ws_text.as_deref().unwrap_or_default();
                decision =
                    policy.decide_websocket_text(&admission, target.as_bytes(), text.as_bytes());
            } else {
                out.ws_stage = Some("none");
            }
        }
    } else if let Some(limit) = policy.rpc_body_limit(&admission, &request) {
        let bytes = req.body.as_deref().unwrap_or_default();
        if bytes.len() > limit {
            out.reason = format!("HTTP request body exceeds {limit} byte inspection limit");
            out.stage = Some("target");
            out.suggestions.push(format!(
                "send a body of at most {limit} bytes, or raise the endpoint's max_body_bytes"
            ));
            return out;
        }
        let accepts = req
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("accept"))
            .map(|(_, v)| v.as_str());
        let unreadable = super::graphql_body::unreadable(
            req.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
        );
        let body = Body {
            bytes,
            receive_stream: receive_stream(&req.method, req.body.is_some(), accepts),
            unreadable: unreadable.as_deref(),
        };
        decision = policy.decide_rpc_request(&admission, &request, body);
        out.calls = decision.rpc.as_ref().map(|b| {
            b.calls
                .iter()
                .map(|c| match &c.tool {
                    Some(t) => format!("{} {t}", c.method),
                    None => c.method.clone(),
                })
                .collect()
        });
        if let Some(g) = &decision.graphql {
            out.calls = Some(
                g.operations
                    .iter()
                    .map(super::graphql_body::Operation::describe)
                    .collect(),
            );
        }
    }
    out.decision = decision.verdict.as_str();
    out.reason.clone_from(&decision.reason);
    out.canonical = decision.target.as_ref().map(|t| t.path.clone());
    out.stage = decision.stage().map(|s| match s {
        super::decide::Stage::Target => "target",
        super::decide::Stage::L7 => "l7",
    });
    if let Some(first) = decision.endpoints.first() {
        let ep = policy.endpoint(*first);
        out.endpoint = Some(format!("{} ({})", ep.field(), ep.location));
        // The entry that decided a request is the one owning the deciding rule, else the
        // smallest key among the deciding endpoints.
        out.entry = Some(ep.entry.to_string());
    }
    if let Some(rule) = decision.rule() {
        out.rule = Some(rule.summary());
        out.entry = Some(rule.origin.entry.to_string());
        out.rule_location = Some(format!(
            "{} ({})",
            rule.origin.field(),
            rule.origin.location
        ));
    }
    let method = out.method.clone().unwrap_or_default();
    let path = out.canonical.clone().unwrap_or_default();
    let eps: Vec<String> = decision
        .endpoints
        .iter()
        .map(|r| {
            let e = policy.endpoint(*r);
            format!("{} ({})", e.field(), e.location)
        })
        .collect();
    match &decision.basis {
        RequestBasis::NoAllowRule if decision.graphql.is_some() => {
            let g = decision.graphql.as_ref();
            let op = g.and_then(|g| g.refused.and_then(|i| g.operations.get(i)));
            let at = eps.first().cloned().unwrap_or_default();
            out.suggestions.push(match op {
                Some(op) if op.needs_registry() => format!(
                    "a hash-only persisted query passes only with `persisted_queries: allow_registered` and its key `{}` in `graphql_persisted_queries` of {at}",
                    op.registry_key().unwrap_or_default()
                ),
                Some(op) => format!(
                    "add an allow rule {{operation_type: {}{}, fields: [{}]}} to the rules of {at}",
                    op.operation_type,
                    op.operation_name.as_ref().map(|n| format!(", operation_name: {n}")).unwrap_or_default(),
                    op.fields.join(", ")
                ),
                None => format!("the rules of {at} allow no operation of this request"),
            });
        }
        RequestBasis::NoAllowRule => {
            for e in &eps {
                out.suggestions.push(format!("add an allow rule {{method: {method}, path: {path}}} to the rules of {e}"));
            }
        }
        RequestBasis::DenyRule(rule) => out.suggestions.push(format!(
            "the deny rule {} ({}) blocks it, and deny rules win over allow rules: narrow or remove it",
            rule.origin.field(),
            rule.origin.location
        )),
        RequestBasis::NoEndpointPath => out.suggestions.push(format!(
            "no endpoint on {} has a `path` that selects {path}: add one, or widen an existing `path`",
            sluice_addr::HostPort(&host, q.port)
        )),
        RequestBasis::WebSocketRequired => out
            .suggestions
            .push("this endpoint only takes WebSocket upgrades (ask with a ws:// or wss:// URL)".to_string()),
        RequestBasis::Target(CanonError::EncodedSlashNotAllowed) => {
            let at = eps.first().cloned().unwrap_or_else(|| "the endpoint".to_string());
            out.suggestions.push(format!("set `allow_encoded_slash: true` on {at} if this API needs %2F inside path segments"));
        }
        RequestBasis::Target(_) => out
            .suggestions
            .push("send a well-formed, canonical request target".to_string()),
        RequestBasis::RpcBodyUnread => out.suggestions.push(
            "a JSON-RPC, MCP or GraphQL endpoint judges each request by what its body asks: give the body to judge".to_string(),
        ),
        RequestBasis::GraphqlRejected => out.suggestions.push(
            "send a GraphQL request that parses: a GET with `query` (each parameter once), or a POST of one JSON envelope `{\"query\": ...}` or a non-empty batch of them, naming `operationName` when the document has several operations".to_string(),
        ),
        RequestBasis::RpcRejected => out.suggestions.push(
            "send one JSON-RPC 2.0 message or a non-empty batch of them (`\"jsonrpc\": \"2.0\"`, a string `method`)".to_string(),
        ),
        RequestBasis::Allowed(_) | RequestBasis::RpcAllowed | RequestBasis::Uninspected => {}
    }
    if decision.verdict == Verdict::Audit {
        out.suggestions.push(
            "the endpoint's enforcement is `audit`, so this request is logged and forwarded; with `enforcement: enforce` it would be refused"
                .to_string(),
        );
    }
    out
}

/// The text rendering.
pub fn render_text(e: &Explanation) -> String {
    let mut s = String::new();
    let mut line = |k: &str, v: &str| {
        s.push_str(&format!("{k:<11}{v}\n"));
    };
    line("decision:", e.decision);
    if let Some(stage) = e.stage {
        line("stage:", stage);
    }
    line(
        "target:",
        &sluice_addr::HostPort(&e.host, e.port).to_string(),
    );
    line("binary:", &e.binary);
    line(
        "l4:",
        &match &e.entry {
            Some(entry) if e.l4 == "allow" => format!("allow (policy '{entry}')"),
            _ => e.l4.to_string(),
        },
    );
    if let Some(ep) = &e.endpoint {
        line("endpoint:", ep);
    }
    if let Some(m) = &e.method {
        line(
            "request:",
            &format!(
                "{m} {}",
                e.canonical.as_deref().unwrap_or("(not canonicalisable)")
            ),
        );
    }
    if let Some(calls) = &e.calls {
        line("asks:", &calls.join(", "));
    }
    if let Some(r) = &e.rule {
        line("rule:", r);
    }
    if let Some(at) = &e.rule_location {
        line("rule at:", at);
    }
    line("reason:", &e.reason);
    for sug in &e.suggestions {
        line(
            if e.decision == "allow" {
                "note:"
            } else {
                "to allow:"
            },
            sug,
        );
    }
    s
}
