//! One request's judgement on an admitted connection, shared by every transport (HTTP/1
//! forward and tunnel, HTTP/2 tunnel): the L7 rules of inspected endpoints, canonicalisation
//! of the target (what policy judged is what goes upstream), the methods a request names
//! through override headers, the query or a form body (each judged like the request
//! line's), and the refusal to send
//! when the answer is no.

use crate::audit::{Engine, Outcome};
use crate::http::method_override::{self, InvalidOverride, Override};
use crate::http::respond::Code;
use crate::http::respond::Refusal;
use crate::pipeline::authority::Authority;
use crate::pipeline::caller::identify::Known;
use crate::policy::Policy;
use crate::policy::Request as PolicyRequest;
use crate::policy::canon;
use crate::policy::decide::{Admission, RequestBasis, RequestDecision, Verdict};
use crate::policy::model::MethodMatcher;

/// The method of one request: the request line's, and the ones its override headers name
/// (read by [`method_override::from_headers`], the same for HTTP/1 and HTTP/2).
#[derive(Clone, Debug)]
pub struct Method<'a> {
    pub line: &'a str,
    pub overrides: Result<Vec<Override>, InvalidOverride>,
}

impl<'a> Method<'a> {
    /// The request line's method and the override headers among `headers` (name, value).
    pub fn new<'h>(line: &'a str, headers: impl IntoIterator<Item = (&'h str, &'h [u8])>) -> Self {
        Self {
            line,
            overrides: method_override::from_headers(headers),
        }
    }
}

/// What the judgement found; filled in even for a refusal, for the audit record.
#[derive(Clone, Debug)]
pub struct Judged {
    /// The target to send upstream (canonical path, original query).
    pub origin_form: String,
    /// The canonical path, without the query (for audit).
    pub path: Option<String>,
    pub outcome: Outcome,
    pub engine: Engine,
    pub reason: Option<String>,
    /// `METHOD path` of the deciding rule.
    pub rule: Option<String>,
    /// The policy key that decided (the rule's entry, else the admission's).
    pub policy: String,
}

/// Judges `method path_and_query` on the admitted connection. `Err` carries the refusal and
/// what was found so far (its `engine` is the one that refused).
///
/// On an inspected endpoint, every method the request names through an override header or
/// the `_method` query parameter is judged too, on the same target: the request passes only
/// when each passes, since the upstream may act as any of them.
pub fn judge(
    policy: &Policy,
    admission: &Admission,
    known: &Known,
    method: &Method<'_>,
    path_and_query: &str,
    dst: &Authority,
    websocket_upgrade: bool,
) -> Result<Judged, Box<(Refusal, Judged)>> {
    let overrides = &method.overrides;
    let method = method.line;
    let mut judged = Judged {
        origin_form: path_and_query.to_string(),
        path: None,
        outcome: Outcome::Allowed,
        engine: Engine::L4,
        reason: None,
        rule: None,
        policy: admission.entry.to_string(),
    };
    let method_up = method.to_ascii_uppercase();
    if !admission.inspects(policy) {
        // An L4 endpoint: requests are not judged one by one, but the target still goes
        // upstream in canonical form.
        return match canon::canonicalize(path_and_query.as_bytes(), true) {
            Ok(t) => {
                judged.path = Some(t.path.clone());
                judged.origin_form = t.to_origin_form();
                Ok(judged)
            }
            Err(e) => {
                judged.engine = Engine::HttpParser;
                let refusal = Refusal::new(
                    Code::InvalidRequestTarget,
                    format!("request-target refused: {e}"),
                );
                Err(Box::new((refusal, judged)))
            }
        };
    }
    judged.engine = Engine::L7;
    let decision = policy.decide_request(
        admission,
        &PolicyRequest {
            method,
            target: path_and_query.as_bytes(),
            websocket_upgrade,
        },
    );
    judged.path = decision.target.as_ref().map(|t| t.path.clone());
    judged.rule = decision.rule().map(|r| r.summary());
    if let Some(r) = decision.rule() {
        judged.policy = r.origin.entry.to_string();
    }
    let shown_path = shown_path(&judged, path_and_query);
    if let (Verdict::Deny, RequestBasis::Target(e)) = (decision.verdict, &decision.basis) {
        judged.engine = Engine::HttpParser;
        let refusal = Refusal::new(
            Code::InvalidRequestTarget,
            format!("request-target refused: {e}"),
        );
        return Err(Box::new((refusal, judged)));
    }
    let header_overrides = overrides.as_ref().map_err(Clone::clone);
    let named = header_overrides.and_then(|found| {
        let mut all = found.clone();
        all.extend(method_override::from_query(path_and_query)?);
        Ok(all)
    });
    let named = match named {
        Ok(named) => named,
        Err(e) => {
            judged.engine = Engine::HttpParser;
            let refusal = Refusal::new(Code::InvalidMethodOverride, e.to_string());
            return Err(Box::new((refusal, judged)));
        }
    };
    let line = Named {
        method: &method_up,
        source: None,
    };
    // A JSON-RPC or MCP endpoint: the body decides (`protocol_body`, once it is read); a
    // method an override names is judged as any other (and refused there without a body).
    let body_decides = matches!(decision.basis, RequestBasis::RpcBodyUnread);
    if !body_decides {
        verdict(&mut judged, &decision, line, known, dst, &shown_path)?;
    }
    let also = Also {
        policy,
        admission,
        known,
        line: &method_up,
        path_and_query,
        dst,
    };
    also.judge(&mut judged, &named)?;
    if let Some(t) = decision.target {
        judged.origin_form = t.to_origin_form();
    }
    Ok(judged)
}

/// The path a refusal names: the canonical one, else the target's without its query.
fn shown_path(judged: &Judged, path_and_query: &str) -> String {
    judged
        .path
        .clone()
        .unwrap_or_else(|| path_and_query.split('?').next().unwrap_or("/").to_string())
}

/// The methods a request names besides its request line's (override headers, the `_method`
/// query parameter, its form body's `_method` fields), judged on the target and admission
/// its request line was judged on.
#[derive(Clone, Copy)]
pub struct Also<'a> {
    pub policy: &'a Policy,
    pub admission: &'a Admission,
    pub known: &'a Known,
    /// The request line's method, upper case.
    pub line: &'a str,
    pub path_and_query: &'a str,
    /// The tunnel or forward target.
    pub dst: &'a Authority,
}

impl Also<'_> {
    /// Judges each of `named` (but the request line's own) into `judged`; the first denial
    /// is the refusal, naming the override.
    pub fn judge(
        &self,
        judged: &mut Judged,
        named: &[Override],
    ) -> Result<(), Box<(Refusal, Judged)>> {
        let shown_path = shown_path(judged, self.path_and_query);
        for o in named.iter().filter(|o| o.method != self.line) {
            let decision = self.policy.decide_request(
                self.admission,
                // Judged as the method it names: a WebSocket upgrade is judged as `GET`.
                &PolicyRequest {
                    method: &o.method,
                    target: self.path_and_query.as_bytes(),
                    websocket_upgrade: false,
                },
            );
            let named = Named {
                method: self.line,
                source: Some(o),
            };
            verdict(judged, &decision, named, self.known, self.dst, &shown_path)?;
        }
        Ok(())
    }

    /// Whether some method other than the request line's would be refused here (see
    /// [`any_other_denied`]).
    pub fn any_denied(&self) -> bool {
        any_other_denied(self.policy, self.admission, self.line, self.path_and_query)
    }
}

/// Whether some method other than `line` (upper case) would be refused on `path_and_query`:
/// only then can a method named in a body change the answer, and only then must sluice read
/// it. Every method that decides differently is tried: the registered ones, each extension
/// method a rule of these endpoints names, and one no rule names.
fn any_other_denied(
    policy: &Policy,
    admission: &Admission,
    line: &str,
    path_and_query: &str,
) -> bool {
    const KNOWN: [&str; 8] = [
        "GET",
        "HEAD",
        "POST",
        "PUT",
        "DELETE",
        "PATCH",
        "OPTIONS",
        // Stands for every method no rule names.
        "SLUICE-UNNAMED-METHOD",
    ];
    let endpoints = admission.l7_endpoints(policy);
    let named_by_rules = endpoints
        .iter()
        .flat_map(|(_, e)| e.rules.iter().chain(e.deny_rules.iter()))
        .filter_map(|r| match &r.method {
            MethodMatcher::Other(m) => Some(&**m),
            _ => None,
        });
    KNOWN
        .into_iter()
        .chain(named_by_rules)
        .filter(|m| *m != line)
        .any(|method| {
            let decision = policy.decide_request(
                admission,
                &PolicyRequest {
                    method,
                    target: path_and_query.as_bytes(),
                    websocket_upgrade: false,
                },
            );
            decision.verdict == Verdict::Deny
        })
}

/// The method one decision judged: the request line's, or one named by an override.
#[derive(Clone, Copy)]
struct Named<'a> {
    /// The request line's method, upper case.
    method: &'a str,
    source: Option<&'a Override>,
}

/// Applies one decision's verdict to `judged`: a denial becomes the refusal (naming the
/// override when one was judged), an audit verdict marks the request audited.
fn verdict(
    judged: &mut Judged,
    decision: &RequestDecision<'_>,
    named: Named<'_>,
    known: &Known,
    dst: &Authority,
    shown_path: &str,
) -> Result<(), Box<(Refusal, Judged)>> {
    match decision.verdict {
        Verdict::Deny => {
            if let Some(r) = decision.rule() {
                judged.policy = r.origin.entry.to_string();
            }
            judged.rule = decision.rule().map(|r| r.summary());
            let (judged_method, how) = match named.source {
                None => (named.method, String::new()),
                Some(o) => (
                    o.method.as_str(),
                    format!(" as {} ({})", o.method, o.source),
                ),
            };
            let refusal = l7_denial(&L7Denial {
                judged,
                decision,
                line: named.method,
                method: judged_method,
                how: &how,
                override_source: named.source.map(|o| o.source.to_string()),
                binary: &known.exe,
                dst,
                path: shown_path,
            });
            judged.reason = Some(decision.reason.clone());
            Err(Box::new((refusal, judged.clone())))
        }
        Verdict::Audit => {
            judged.outcome = Outcome::Audited;
            if judged.reason.is_none() {
                judged.reason = Some(decision.reason.clone());
            }
            Ok(())
        }
        Verdict::Allow => Ok(()),
    }
}

/// What a 403 for an L7 denial is made of.
struct L7Denial<'a> {
    judged: &'a Judged,
    decision: &'a RequestDecision<'a>,
    /// The request line's method, upper case.
    line: &'a str,
    /// The method that was denied (the request line's or one an override named).
    method: &'a str,
    /// ` as M (header)` when an override's method was the one denied, else empty.
    how: &'a str,
    override_source: Option<String>,
    binary: &'a str,
    /// The tunnel or forward target.
    dst: &'a Authority,
    /// The canonical path (no query).
    path: &'a str,
}

/// The body of an L7 denial: what the reference's 403 carries (`policy`, `rule`, `detail`,
/// `layer`, `protocol`, `method`, `path`, `host` without the port, `port`, `binary`,
/// `rule_missing`, `next_steps`), with sluice's `reason` and `stage`. Written for the agent
/// that hit it: what was refused, by what, and what would have to change. The query string
/// is never echoed (it may carry data the agent should not see in a log it forwards).
fn l7_denial(d: &L7Denial<'_>) -> Refusal {
    use serde_json::{Value, json};
    let (host, port) = (d.dst.host(), d.dst.port());
    let reason = &d.decision.reason;
    let policy = &d.judged.policy;
    let rule = d.judged.rule.clone().map_or(Value::Null, Value::from);
    let missing = json!({
        "type": "rest_allow",
        "layer": "l7",
        "method": d.method,
        "path": d.path,
        "host": host,
        "port": port,
        "binary": d.binary,
    });
    let mut next_steps = vec![
        "this request was refused by policy and retrying it unchanged will be refused again"
            .to_string(),
    ];
    match &d.decision.basis {
        RequestBasis::DenyRule(r) => next_steps.push(format!(
            "a deny rule (`{}`) of policy entry `{}` blocks {} {}; deny rules win over allow rules, so only removing or narrowing that rule would allow it",
            r.summary(),
            r.origin.entry,
            d.method,
            d.path
        )),
        RequestBasis::NoEndpointPath => next_steps.push(format!(
            "no endpoint of policy entry `{policy}` for {} selects the path {}; the operator would have to add one whose `path` covers it",
            d.dst, d.path
        )),
        RequestBasis::WebSocketRequired => next_steps.push(
            "this endpoint only accepts WebSocket upgrade requests (GET with `Upgrade: websocket`)"
                .to_string(),
        ),
        _ => next_steps.push(format!(
            "if the task needs it, ask the operator to add an allow rule {{method: {}, path: {}}} to policy entry `{policy}` for {}",
            d.method, d.path, d.dst
        )),
    }
    next_steps.push(format!(
        "the operator can check a change with: sluice policy explain --policy FILE --binary {} --method {} https://{}{}",
        d.binary, d.method, d.dst, d.path
    ));
    let mut refusal = Refusal::new(
        Code::PolicyDenied,
        format!(
            "{} {}{}{} denied by L7 policy: {reason}",
            d.line, d.dst, d.path, d.how
        ),
    )
    .with_reason(reason.clone())
    .denied_by_entry(policy)
    .with("rule", rule)
    .with("layer", "l7")
    .with("protocol", "rest")
    .with("method", d.method.to_owned())
    .with("path", d.path.to_owned())
    .with("host", host)
    .with("port", port)
    .with("binary", d.binary.to_owned())
    .with("rule_missing", missing)
    .with("next_steps", next_steps)
    .with("stage", "l7");
    if let Some(source) = &d.override_source {
        refusal = refusal.with("method_override", source.clone());
    }
    refusal
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::any_other_denied;
    use crate::policy::{Caller, Compat, L4Decision, Source, load};

    /// Whether a method other than POST is refused on `/a` under an endpoint with `rules`.
    fn other_denied(rules: &str) -> bool {
        let text = format!(
            "version: 1\nnetwork_policies:\n  p:\n    endpoints:\n      - host: h.test\n        port: 443\n        protocol: rest\n        enforcement: enforce\n{rules}    binaries:\n      - path: /usr/bin/curl\n"
        );
        let sources = [Source {
            name: "p.yaml".to_string(),
            text,
        }];
        let policy = load(&sources, Compat::Strict).unwrap().policy;
        let caller = Caller {
            exe: "/usr/bin/curl",
            ancestors: &[],
            cmdline: &[],
            tenant: None,
        };
        let L4Decision::Allow(admission) =
            policy.decide_l4(&caller, &sluice_addr::Authority::new("h.test", 443))
        else {
            panic!("not admitted");
        };
        any_other_denied(&policy, &admission, "POST", "/a?x=1")
    }

    #[test]
    fn overrides_matter_only_where_another_method_is_refused() {
        assert!(!other_denied(
            "        rules:\n          - allow: {method: \"*\", path: /**}\n"
        ));
        assert!(other_denied(
            "        rules:\n          - allow: {method: GET, path: /**}\n          - allow: {method: POST, path: /**}\n"
        ));
        // Only an extension method a deny rule names is refused: it is tried too.
        assert!(other_denied(
            "        rules:\n          - allow: {method: \"*\", path: /**}\n        deny_rules:\n          - {method: PURGE, path: /a}\n"
        ));
        // Refused elsewhere only: no method named here could change the answer.
        assert!(!other_denied(
            "        rules:\n          - allow: {method: \"*\", path: /**}\n        deny_rules:\n          - {method: DELETE, path: /b}\n"
        ));
    }
}
