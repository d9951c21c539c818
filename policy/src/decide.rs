//! Decisions: the L4 question "may this program connect to host:port?" and the L7 question
//! "may this request go through on that connection?".
//!
//! Owns the reference's semantics (spec §1.8, §2.7, §2.8, §2.10) with sluice's fixes (§13
//! rows 3, 12, 18): the smallest matching key decides the reported entry; every matching
//! entry's L7 endpoints apply; among L7 endpoints only the allow rules of those with the most
//! specific matching `path` selector can allow a request, while the deny rules of every
//! endpoint whose selector matches apply; deny rules win; `enforcement: audit` turns a soft
//! denial into `Audit`. Pure: no sockets, no /proc.

use std::fmt;

use sluice_addr::Authority;

use super::canon::{self, CanonError, Target};
use super::compile::{EndpointRef, Policy};
use super::graphql_body::{self, GraphqlRequest};
use super::graphql_decide;
use super::model::{
    Endpoint, Enforcement, PolicyKey, Protocol, QueryMatcher, Rule, Signing, deny_query_matches,
};
use super::rpc_body::RpcBody;
use super::rpc_decide::{self, Body, Found};

pub use super::model::Caller;

/// The L4 answer.
#[derive(Clone, Debug)]
pub enum L4Decision {
    Allow(Admission),
    Deny(L4Denial),
}

/// An admitted connection: the entry that decided (smallest key) and every endpoint of every
/// admitting entry that matches host:port (their L7 settings all apply, spec §13 row 13).
#[derive(Clone, Debug)]
pub struct Admission {
    pub entry: PolicyKey,
    pub endpoint: EndpointRef,
    pub endpoints: Vec<EndpointRef>,
}

impl Admission {
    /// The SigV4 re-signing of a request to `path` (canonical, no query): that of the most
    /// specific admitted endpoint whose path selects it (the ambiguity check keeps endpoints
    /// of the same specificity from disagreeing), if it signs.
    pub fn signing_for<'p>(&self, policy: &'p Policy, path: &str) -> Option<&'p Signing> {
        self.endpoints
            .iter()
            .map(|&r| policy.endpoint(r))
            .filter(|e| e.selector.is_match(path))
            .max_by_key(|e| e.selector.specificity())
            .and_then(|e| e.signing.as_ref())
    }

    /// The endpoints whose requests are inspected (L7 protocol, TLS not skipped).
    pub fn l7_endpoints<'p>(&self, policy: &'p Policy) -> Vec<(EndpointRef, &'p Endpoint)> {
        self.endpoints
            .iter()
            .map(|&r| (r, policy.endpoint(r)))
            .filter(|(_, e)| e.inspects_requests())
            .collect()
    }

    /// Whether requests on this connection are judged one by one.
    pub fn inspects(&self, policy: &Policy) -> bool {
        self.endpoints
            .iter()
            .any(|&r| policy.endpoint(r).inspects_requests())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L4DenyKind {
    /// The policy has no network policies at all.
    NoPolicies,
    /// No endpoint of any policy matches host:port.
    NoEndpoint,
    /// Endpoints match, but neither the exe nor an ancestor is in their policies' binaries.
    Binary { entries: Vec<PolicyKey> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct L4Denial {
    pub kind: L4DenyKind,
    /// The reference's reason wording (spec §2.8).
    pub reason: String,
}

/// Verdict of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny,
    /// Denied by the rules of an `enforcement: audit` endpoint: logged, then forwarded.
    Audit,
}

impl Verdict {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::Audit => "audit",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a request's denial came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The request target was refused before policy (non-canonical, bad encoding).
    Target,
    /// The L7 rules.
    L7,
}

/// A request to judge on an admitted connection.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The method as sent; compared case-insensitively.
    pub method: &'a str,
    /// The raw request target (origin-form, or absolute-form).
    pub target: &'a [u8],
    /// A WebSocket upgrade request (evaluated as `GET`).
    pub websocket_upgrade: bool,
}

/// Why a request was decided as it was.
#[derive(Clone, Debug)]
pub enum RequestBasis<'p> {
    /// The connection is L4 (or `tls: skip`): requests are relayed without inspection.
    Uninspected,
    /// An allow rule matched.
    Allowed(&'p Rule),
    /// A deny rule matched (deny rules win over allow rules).
    DenyRule(&'p Rule),
    /// No allow rule matched.
    NoAllowRule,
    /// No L7 endpoint's `path` selects this request; refused even under audit.
    NoEndpointPath,
    /// A plain request to a `protocol: websocket` endpoint; refused even under audit.
    WebSocketRequired,
    /// The target could not be canonicalised (or its query decoded).
    Target(CanonError),
    /// A request to a JSON-RPC, MCP or GraphQL endpoint judged without its body (the
    /// proxy judges it again with it, [`Policy::decide_rpc_request`]): refused.
    RpcBodyUnread,
    /// A JSON-RPC or MCP body refused even under audit: it does not parse, or (JSON-RPC) it
    /// carries a response.
    RpcRejected,
    /// A GraphQL request refused even under audit: it does not parse.
    GraphqlRejected,
    /// A JSON-RPC or MCP body whose calls the rules allow without naming one (MCP's event
    /// stream and client responses, `allow_all_known_mcp_methods`).
    RpcAllowed,
}

#[derive(Clone, Debug)]
pub struct RequestDecision<'p> {
    pub verdict: Verdict,
    pub basis: RequestBasis<'p>,
    /// `METHOD path not permitted by policy` and the like (spec §2.10 wording).
    pub reason: String,
    /// The canonical target, when it could be computed.
    pub target: Option<Target>,
    /// The endpoints whose settings decided the request (most specific selector).
    pub endpoints: Vec<EndpointRef>,
    /// A JSON-RPC or MCP request: what its body asked (for audit), when it was read.
    pub rpc: Option<RpcBody>,
    /// A GraphQL request: the operations it asked (for audit), when it was read.
    pub graphql: Option<GraphqlRequest>,
}

impl RequestDecision<'_> {
    pub fn stage(&self) -> Option<Stage> {
        if self.verdict == Verdict::Allow {
            return None;
        }
        Some(match self.basis {
            RequestBasis::Target(_) => Stage::Target,
            _ => Stage::L7,
        })
    }

    /// The rule that decided, if one did.
    pub fn rule(&self) -> Option<&Rule> {
        match &self.basis {
            RequestBasis::Allowed(r) | RequestBasis::DenyRule(r) => Some(r),
            _ => None,
        }
    }
}

impl Policy {
    /// The L4 decision (spec §2.7): allowed iff some entry has an endpoint matching
    /// `dst` (host and port) and a binary matching the exe or an ancestor. `dst`'s host must
    /// have passed `canon::normalize_host`.
    pub fn decide_l4(&self, caller: &Caller<'_>, dst: &Authority) -> L4Decision {
        let (host, port) = (dst.host(), dst.port());
        if self.entries.is_empty() {
            return L4Decision::Deny(L4Denial {
                kind: L4DenyKind::NoPolicies,
                reason: "network connections not allowed by policy".to_string(),
            });
        }
        let candidates = self.endpoints_for(host, port);
        if candidates.is_empty() {
            return L4Decision::Deny(L4Denial {
                kind: L4DenyKind::NoEndpoint,
                reason: format!("endpoint {dst} is not allowed by any policy"),
            });
        }
        let mut admitted: Vec<EndpointRef> = Vec::new();
        let mut refused: Vec<PolicyKey> = Vec::new();
        let mut last_entry: Option<(u32, bool)> = None;
        for r in candidates {
            let admits = match last_entry {
                Some((e, admits)) if e == r.entry => admits,
                _ => {
                    let entry = self.entry_of(r);
                    let admits = entry.admits(caller);
                    if !admits {
                        refused.push(entry.key.clone());
                    }
                    last_entry = Some((r.entry, admits));
                    admits
                }
            };
            if admits {
                admitted.push(r);
            }
        }
        match admitted.first() {
            Some(&first) => L4Decision::Allow(Admission {
                entry: self.entry_of(first).key.clone(),
                endpoint: first,
                endpoints: admitted,
            }),
            None => L4Decision::Deny(L4Denial {
                reason: binary_reason(caller, &refused),
                kind: L4DenyKind::Binary { entries: refused },
            }),
        }
    }

    /// The L7 decision for one request on an admitted connection (spec §2.10).
    pub fn decide_request<'p>(
        &'p self,
        admission: &Admission,
        req: &Request<'_>,
    ) -> RequestDecision<'p> {
        self.decide(admission, req, false, None)
    }

    /// The decision on a request with its body, for a JSON-RPC or MCP endpoint (spec §5.6):
    /// the body is read with the selected endpoint's options and each call judged. On any
    /// other endpoint this is [`Policy::decide_request`].
    pub fn decide_rpc_request<'p>(
        &'p self,
        admission: &Admission,
        req: &Request<'_>,
        body: Body<'_>,
    ) -> RequestDecision<'p> {
        self.decide(admission, req, false, Some(body))
    }

    /// Whether a request is judged by its JSON-RPC, MCP or GraphQL body, and then at most
    /// how many bytes of it are read (the selected endpoint's `max_body_bytes` or
    /// `graphql_max_body_bytes`).
    pub fn rpc_body_limit(&self, admission: &Admission, req: &Request<'_>) -> Option<usize> {
        let d = self.decide(admission, req, false, None);
        match d.basis {
            RequestBasis::RpcBodyUnread => d.endpoints.first().map(|&r| {
                let e = self.endpoint(r);
                if e.protocol == Protocol::Graphql {
                    e.graphql.max_body_bytes
                } else {
                    e.rpc.max_body_bytes
                }
            }),
            _ => None,
        }
    }

    /// The decision for one client text message on a WebSocket whose upgrade was `target`
    /// (spec §5.4): judged as the synthetic method `WEBSOCKET_TEXT` on the upgrade's path
    /// and query; its content is not a policy input.
    ///
    /// On a WebSocket endpoint with GraphQL policy the message is classified instead
    /// (graphql-transport-ws `subscribe`, legacy graphql-ws `start`) and its operation
    /// judged by the GraphQL rules; lifecycle messages are allowed.
    pub fn decide_websocket_text<'p>(
        &'p self,
        admission: &Admission,
        target: &[u8],
        message: &[u8],
    ) -> RequestDecision<'p> {
        let req = Request {
            method: "WEBSOCKET_TEXT",
            target,
            websocket_upgrade: false,
        };
        let body = Body {
            bytes: message,
            receive_stream: false,
            unreadable: None,
        };
        self.decide(admission, &req, true, Some(body))
    }

    /// Whether the client's text messages on a WebSocket upgraded by a request so decided
    /// are judged: the endpoints that decided it are `protocol: websocket` (through a
    /// `rest` endpoint frames are relayed as they are, as in the reference).
    pub fn inspects_websocket_messages(&self, decision: &RequestDecision<'_>) -> bool {
        decision
            .endpoints
            .first()
            .is_some_and(|&r| self.endpoint(r).protocol == Protocol::WebSocket)
    }

    /// `text`: a WebSocket text message (`req.method` is `WEBSOCKET_TEXT`); `body`: a
    /// JSON-RPC or MCP request's body.
    fn decide<'p>(
        &'p self,
        admission: &Admission,
        req: &Request<'_>,
        text: bool,
        body: Option<Body<'_>>,
    ) -> RequestDecision<'p> {
        let l7 = admission.l7_endpoints(self);
        if l7.is_empty() {
            return RequestDecision {
                verdict: Verdict::Allow,
                basis: RequestBasis::Uninspected,
                reason: "L4 endpoint: requests are relayed without inspection".to_string(),
                target: canon::canonicalize(req.target, true).ok(),
                endpoints: admission.endpoints.clone(),
                rpc: None,
                graphql: None,
            };
        }
        let hard = |basis: RequestBasis<'p>,
                    reason: String,
                    target: Option<Target>,
                    endpoints: Vec<EndpointRef>| RequestDecision {
            verdict: Verdict::Deny,
            basis,
            reason,
            target,
            endpoints,
            rpc: None,
            graphql: None,
        };

        // Canonicalise strictly; retry with encoded slashes only if some endpoint allows them,
        // then insist that the endpoints that decide the request do (spec §5.2).
        let (target, permissive) = match canon::canonicalize(req.target, false) {
            Ok(t) => (t, false),
            Err(CanonError::EncodedSlashNotAllowed)
                if l7.iter().any(|(_, e)| e.allow_encoded_slash) =>
            {
                match canon::canonicalize(req.target, true) {
                    Ok(t) => (t, true),
                    Err(e) => {
                        return hard(
                            RequestBasis::Target(e.clone()),
                            e.to_string(),
                            None,
                            Vec::new(),
                        );
                    }
                }
            }
            Err(e) => {
                return hard(
                    RequestBasis::Target(e.clone()),
                    e.to_string(),
                    None,
                    Vec::new(),
                );
            }
        };

        let matching: Vec<&(EndpointRef, &Endpoint)> = l7
            .iter()
            .filter(|(_, e)| e.selector.is_match(&target.path))
            .collect();
        let Some(best) = matching.iter().map(|(_, e)| e.selector.specificity()).max() else {
            let reason = format!("no L7 endpoint path matched request {}", target.path);
            return hard(
                RequestBasis::NoEndpointPath,
                reason,
                Some(target),
                Vec::new(),
            );
        };
        let selected: Vec<(EndpointRef, &Endpoint)> = matching
            .iter()
            .filter(|(_, e)| e.selector.specificity() == best)
            .map(|&&x| x)
            .collect();
        let refs: Vec<EndpointRef> = selected.iter().map(|(r, _)| *r).collect();

        if permissive && !selected.iter().all(|(_, e)| e.allow_encoded_slash) {
            let e = CanonError::EncodedSlashNotAllowed;
            return hard(
                RequestBasis::Target(e.clone()),
                e.to_string(),
                Some(target),
                refs,
            );
        }
        let protocol = selected[0].1.protocol;
        if protocol == Protocol::WebSocket && !req.websocket_upgrade && !text {
            let reason =
                "websocket endpoint requires a valid WebSocket upgrade request".to_string();
            return hard(RequestBasis::WebSocketRequired, reason, Some(target), refs);
        }
        let query = match target.query.as_deref().map(canon::parse_query).transpose() {
            Ok(q) => q.unwrap_or_default(),
            Err(e) => {
                return hard(
                    RequestBasis::Target(e.clone()),
                    e.to_string(),
                    Some(target),
                    refs,
                );
            }
        };
        let method = if req.websocket_upgrade {
            "GET".to_string()
        } else {
            req.method.to_ascii_uppercase()
        };
        let path = target.path.as_str();
        // The ambiguity check makes selected endpoints agree on enforcement, except where the
        // reference's spelling rules differ (`Enforce`): then any enforcing one enforces.
        let enforcement = if selected
            .iter()
            .any(|(_, e)| e.enforcement == Enforcement::Enforce)
        {
            Enforcement::Enforce
        } else {
            Enforcement::Audit
        };
        let graphql_ws =
            text && protocol == Protocol::WebSocket && selected[0].1.graphql.websocket_policy;
        if protocol == Protocol::Graphql || graphql_ws {
            let matching: Vec<&Endpoint> = matching.iter().map(|(_, e)| *e).collect();
            let selected: Vec<&Endpoint> = selected.iter().map(|(_, e)| *e).collect();
            let case = rpc_decide::Case {
                matching: &matching,
                selected: &selected,
                method: &method,
                path,
                query: &query,
            };
            let facts = GraphqlFacts {
                websocket: graphql_ws,
                upgrade: req.websocket_upgrade,
                body,
                enforcement,
            };
            return graphql_decision(&case, &facts, target.clone(), refs);
        }
        if protocol.is_rpc() {
            // A WebSocket upgrade has no JSON-RPC body: refused as the reference refuses an
            // empty one (its frames would never be judged).
            let body = if req.websocket_upgrade {
                Some(Body {
                    bytes: b"",
                    receive_stream: false,
                    unreadable: None,
                })
            } else {
                body
            };
            let Some(body) = body else {
                let reason = format!("{method} {path}: a JSON-RPC request is judged by its body");
                return hard(RequestBasis::RpcBodyUnread, reason, Some(target), refs);
            };
            let matching: Vec<&Endpoint> = matching.iter().map(|(_, e)| *e).collect();
            let selected: Vec<&Endpoint> = selected.iter().map(|(_, e)| *e).collect();
            let case = rpc_decide::Case {
                matching: &matching,
                selected: &selected,
                method: &method,
                path,
                query: &query,
            };
            let (found, parsed) = rpc_decide::decide(&case, body);
            let (basis, reason) = match found {
                Found::Allowed(Some(rule)) => (
                    RequestBasis::Allowed(rule),
                    format!("{method} {path} allowed by policy"),
                ),
                Found::Allowed(None) => (
                    RequestBasis::RpcAllowed,
                    format!("{method} {path} allowed by policy"),
                ),
                Found::Denied(rule) => (
                    RequestBasis::DenyRule(rule),
                    format!("{method} {path} blocked by deny rule"),
                ),
                Found::NotAllowed => (
                    RequestBasis::NoAllowRule,
                    format!("{method} {path} not permitted by policy"),
                ),
                Found::Hard(reason) => (RequestBasis::RpcRejected, reason),
            };
            let verdict = match (&basis, enforcement) {
                (RequestBasis::Allowed(_) | RequestBasis::RpcAllowed, _) => Verdict::Allow,
                (RequestBasis::RpcRejected, _) | (_, Enforcement::Enforce) => Verdict::Deny,
                (_, Enforcement::Audit) => Verdict::Audit,
            };
            return RequestDecision {
                verdict,
                basis,
                reason,
                target: Some(target),
                endpoints: refs,
                rpc: parsed,
                graphql: None,
            };
        }
        // Deny rules apply from every endpoint whose selector matches, the broader ones too
        // (as in the reference); allow rules only from the most specific.
        let deny = matching
            .iter()
            .flat_map(|(_, e)| e.deny_rules.iter())
            .find(|r| {
                r.graphql.is_none()
                    && r.method.matches(&method)
                    && r.path.is_match(path)
                    && deny_query_matches(&r.query, &query)
            });
        let (basis, reason) = if let Some(rule) = deny {
            (
                RequestBasis::DenyRule(rule),
                format!("{method} {path} blocked by deny rule"),
            )
        } else if let Some(rule) = selected.iter().flat_map(|(_, e)| e.rules.iter()).find(|r| {
            r.graphql.is_none()
                && r.method.matches(&method)
                && r.path.is_match(path)
                && allow_query_matches(&r.query, &query)
        }) {
            (
                RequestBasis::Allowed(rule),
                format!("{method} {path} allowed by policy"),
            )
        } else {
            (
                RequestBasis::NoAllowRule,
                format!("{method} {path} not permitted by policy"),
            )
        };
        let verdict = match (&basis, enforcement) {
            (RequestBasis::Allowed(_), _) => Verdict::Allow,
            (_, Enforcement::Audit) => Verdict::Audit,
            (_, Enforcement::Enforce) => Verdict::Deny,
        };
        RequestDecision {
            verdict,
            basis,
            reason,
            target: Some(target),
            endpoints: refs,
            rpc: None,
            graphql: None,
        }
    }
}

/// What a GraphQL decision reads besides the rules.
struct GraphqlFacts<'a> {
    /// A text message on a WebSocket with GraphQL policy (else an HTTP request).
    websocket: bool,
    /// An HTTP WebSocket upgrade to a GraphQL endpoint: judged with no body.
    upgrade: bool,
    body: Option<Body<'a>>,
    enforcement: Enforcement,
}

/// The decision on a GraphQL request, or on a client message of a WebSocket with GraphQL
/// policy (spec §5.4, §5.5).
fn graphql_decision<'p>(
    case: &rpc_decide::Case<'_, 'p>,
    facts: &GraphqlFacts<'_>,
    target: Target,
    refs: Vec<EndpointRef>,
) -> RequestDecision<'p> {
    let (method, path) = (case.method, case.path);
    let decided = |verdict, basis, reason, graphql| RequestDecision {
        verdict,
        basis,
        reason,
        target: Some(target.clone()),
        endpoints: refs.clone(),
        rpc: None,
        graphql,
    };
    let parsed = match (facts.websocket, facts.upgrade, facts.body) {
        (true, _, body) => {
            let message = body.map_or(&b""[..], |b| b.bytes);
            match graphql_body::websocket_message(message) {
                graphql_body::WsMessage::Control(kind) => {
                    let reason = format!("GraphQL WebSocket control message {kind}");
                    return decided(Verdict::Allow, RequestBasis::RpcAllowed, reason, None);
                }
                graphql_body::WsMessage::Operation(mut g) => {
                    if let Some(e) = g.error.take() {
                        let reason = format!("GraphQL WebSocket message rejected: {e}");
                        g.error = Some(e);
                        return decided(
                            Verdict::Deny,
                            RequestBasis::GraphqlRejected,
                            reason,
                            Some(g),
                        );
                    }
                    g
                }
            }
        }
        (false, true, _) => graphql_body::parse(method, case.query, b""),
        (false, false, Some(b)) => match b.unreadable {
            Some(why) => GraphqlRequest {
                error: Some(why.to_string()),
                ..GraphqlRequest::default()
            },
            None => graphql_body::parse(method, case.query, b.bytes),
        },
        (false, false, None) => {
            let reason = format!("{method} {path}: a GraphQL request is judged by its operations");
            return RequestDecision {
                verdict: Verdict::Deny,
                basis: RequestBasis::RpcBodyUnread,
                reason,
                target: Some(target),
                endpoints: refs,
                rpc: None,
                graphql: None,
            };
        }
    };
    let (found, refused) = graphql_decide::decide(case, &parsed);
    let refused_reason = case.selected.first().map_or(graphql_decide::BLOCKED, |e| {
        graphql_decide::reason(&parsed, e)
    });
    let (basis, reason) = match found {
        Found::Allowed(Some(rule)) => (
            RequestBasis::Allowed(rule),
            format!("{method} {path} allowed by policy"),
        ),
        Found::Allowed(None) => (
            RequestBasis::RpcAllowed,
            format!("{method} {path} allowed by policy"),
        ),
        Found::Denied(rule) => (RequestBasis::DenyRule(rule), refused_reason.to_string()),
        Found::NotAllowed => (RequestBasis::NoAllowRule, refused_reason.to_string()),
        Found::Hard(reason) => (RequestBasis::GraphqlRejected, reason),
    };
    let verdict = match (&basis, facts.enforcement) {
        (RequestBasis::Allowed(_) | RequestBasis::RpcAllowed, _) => Verdict::Allow,
        (RequestBasis::GraphqlRejected, _) | (_, Enforcement::Enforce) => Verdict::Deny,
        (_, Enforcement::Audit) => Verdict::Audit,
    };
    let mut parsed = parsed;
    parsed.refused = refused;
    decided(verdict, basis, reason, Some(parsed))
}

/// Allow side: every configured key present with at least one value, and every value
/// matching (spec §1.8).
fn allow_query_matches(matchers: &[QueryMatcher], query: &[(String, String)]) -> bool {
    matchers.iter().all(|m| {
        let mut values = query.iter().filter(|(k, _)| *k == m.key).peekable();
        values.peek().is_some() && values.all(|(_, v)| m.value_matches(v))
    })
}

/// The caller's cmdline paths for a reason, joined with `, `: the caller chooses them, so at
/// most 16 paths of at most 256 bytes each are named and the rest counted (a reason is
/// repeated per matching entry and logged with every refusal).
fn bounded_paths(paths: &[String]) -> String {
    const MAX_PATHS: usize = 16;
    const MAX_PATH: usize = 256;
    let mut out: Vec<String> = paths
        .iter()
        .take(MAX_PATHS)
        .map(|p| match p.char_indices().nth(MAX_PATH) {
            Some((end, _)) => format!("{}…", &p[..end]),
            None => p.clone(),
        })
        .collect();
    if paths.len() > MAX_PATHS {
        out.push(format!("+{} more", paths.len() - MAX_PATHS));
    }
    out.join(", ")
}

/// `binary '<exe>' not allowed in policy '<key>' (ancestors: [...], cmdline: [...]). SYMLINK
/// HINT: ...`, one clause per policy whose endpoint matched, joined with `; ` (spec §2.8).
fn binary_reason(caller: &Caller<'_>, entries: &[PolicyKey]) -> String {
    if let Some(tenant) = caller.tenant {
        return entries
            .iter()
            .map(|key| {
                format!(
                    "policy '{key}' does not apply to tenant '{tenant}': the gateway cannot see a tenant's program, \
                     so only entries whose binaries include a pattern matching every program (`/**`) apply to tenants"
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
    }
    let ancestors = caller.ancestors.join(" -> ");
    let cmdline = bounded_paths(caller.cmdline);
    entries
        .iter()
        .map(|key| {
            format!(
                "binary '{}' not allowed in policy '{key}' (ancestors: [{ancestors}], cmdline: [{cmdline}]). \
                 SYMLINK HINT: binaries are matched by their real path; if the policy names a symlink, \
                 list its target (readlink -f)",
                caller.exe
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::bounded_paths;

    #[test]
    fn a_reason_names_at_most_sixteen_paths_each_cut() {
        let few = vec!["/a".to_string(), "/b".to_string()];
        assert_eq!(bounded_paths(&few), "/a, /b");
        let many: Vec<String> = (0..1000).map(|i| format!("/{}", "x".repeat(i))).collect();
        let text = bounded_paths(&many);
        assert!(text.ends_with(", +984 more"), "{text}");
        assert!(text.len() < 17 * 260, "{}", text.len());
        let long = vec!["/é".repeat(300)];
        assert!(bounded_paths(&long).ends_with('…'));
    }
}
