//! The request phase, written once for every transport: a request on an admitted connection
//! is checked for its authority (it must name the admitted destination), its caller, the L7
//! judgement, the credentials of its head and the policy for its body, then goes upstream;
//! its body's failures and its upstream's are refused the same way. The exchange
//! (`phases/exchange.rs`) calls these steps in its one order, for HTTP/1.1, HTTP/2 and
//! WebSocket handshakes alike; the transports do only what their wire format needs.
//!
//! ```text
//! prepare:  authority → caller → judge → credentials (head) → body plan
//! body:     Guard (stream, stop at a placeholder) | Rewrite (bounded, swapped) | Pass;
//!           a form body that may name another method streams, each field that may be
//!           `_method` held until it is judged (`phases/form.rs`)
//! answer:   the upstream's response, scrubbed where secrets are bound; or a Denial
//! audit:    the request's Record, emitted once when the exchange ends
//! ```

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::connection::{self, Admitted};
use super::inject;
use super::judge::{self, Judged};
use super::protocol_body::{self, HeadFacts, RpcCheck};
use super::record::Record;
use crate::audit::Engine;
use crate::credentials::{self, Bindings, ScrubSet};
use crate::http::body::{self, BodyError};
use crate::http::body_override::{self, BodyKind};
use crate::http::respond::{Code, Refusal};
use crate::pipeline::caller::identify::{self, CallerError, Known};
use crate::pipeline::denial::Denial;
use crate::pipeline::state::live::InForce;
use crate::pipeline::state::shared::Shared;
use crate::policy::{Admission, Policy};

/// A request head as every transport hands it to the phase.
#[derive(Debug)]
pub struct Head<'a> {
    pub method: &'a str,
    /// Path and query, origin-form, as the transport found it.
    pub target: &'a str,
    /// The request's authority (`Host`, `:authority`, an absolute target) names the
    /// admitted destination.
    pub authority_ok: bool,
    pub headers: Vec<(String, Vec<u8>)>,
    /// A WebSocket handshake (judged as a GET upgrade).
    pub websocket: bool,
    /// The request has a body to come.
    pub has_body: bool,
}

/// What becomes of a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyPlan {
    /// Passes as it is.
    Pass,
    /// Streamed, and stopped at the first credential placeholder: a credentialed endpoint
    /// that does not opt in to body rewriting never receives one.
    Guard,
    /// Opt-in (`request_body_credential_rewrite`): buffered (bounded), its placeholders
    /// swapped where bound, its length fixed ([`Exchange::rewrite_body`]).
    Rewrite,
}

/// A request the phase let through, ready for its upstream head.
#[derive(Debug)]
pub struct Prepared {
    /// The canonical origin-form target, its placeholders swapped.
    pub origin_form: String,
    /// The request's headers, their placeholders swapped (hop-by-hop ones still in).
    pub headers: Vec<(String, Vec<u8>)>,
    /// The secrets the response must be scrubbed of (empty: passes as it is).
    pub scrub: ScrubSet,
    pub body: BodyPlan,
    /// The provider bindings this request was prepared with (its body uses the same).
    pub creds: Arc<Bindings>,
    /// A form body whose `_method` fields must be judged before they go upstream (as it
    /// streams, `form::stream`; whole when it is read whole to rewrite).
    pub form: Option<Box<FormCheck>>,
    /// A request to a JSON-RPC or MCP endpoint: judged by its body, read whole (at most the
    /// second field), before any of it goes upstream (`protocol_body`).
    pub rpc: Option<(Box<RpcCheck>, usize)>,
    /// A signature still to make once the body is read whole (`credential_signing`).
    pub sign: Option<inject::ToSign>,
    /// A WebSocket handshake to an endpoint with `websocket_credential_rewrite`.
    pub ws_rewrite: bool,
    /// A WebSocket handshake whose messages sluice reads (judged by its policy, or
    /// rewritten): no extension may be negotiated, a compressed message could not be read.
    pub ws_read: bool,
    /// The body is (or says it is) S3's `aws-chunked` framing: a guarded body is also scanned
    /// as the upstream joins its chunks (`credentials::aws_chunks`).
    pub aws_chunked: bool,
}

impl Prepared {
    /// The most body bytes read whole before any goes upstream (opt-in rewriting, a body
    /// judged by its protocol), or `None` when the body streams.
    pub fn reads_whole(&self) -> Option<usize> {
        let rewrite = (self.body == BodyPlan::Rewrite).then_some(MAX_WHOLE_BODY);
        let rpc = self.rpc.as_ref().map(|(_, limit)| *limit);
        let sign = self
            .sign
            .as_ref()
            .filter(|s| s.needs_body())
            .map(|_| credentials::sigv4::MAX_SIGNED_BODY_BYTES);
        [rewrite, rpc, sign].into_iter().flatten().min()
    }
}

/// Largest body sluice reads whole: one to rewrite.
const MAX_WHOLE_BODY: usize = credentials::body::MAX_REWRITE_BODY_BYTES;

/// A form or JSON body to read for `_method` fields (Rack, Symfony, Laravel): what judging the methods they
/// name needs, the same as the request line's judgement had.
#[derive(Debug)]
pub struct FormCheck {
    kind: BodyKind,
    policy: Arc<Policy>,
    admission: Admission,
    judged: Judged,
    /// The request line's method, upper case.
    line: String,
    path_and_query: String,
    hp: String,
}

impl FormCheck {
    pub(crate) fn kind(&self) -> &BodyKind {
        &self.kind
    }

    /// The request line's judgement, before any method the form names.
    pub(crate) fn judged(&self) -> &Judged {
        &self.judged
    }

    pub(crate) fn also<'a>(&'a self, known: &'a Known) -> judge::Also<'a> {
        judge::Also {
            policy: &self.policy,
            admission: &self.admission,
            known,
            line: &self.line,
            path_and_query: &self.path_and_query,
            hp: &self.hp,
        }
    }
}

/// One request's exchange on an admitted connection: what its steps share.
#[derive(Clone, Copy, Debug)]
pub struct Exchange<'a> {
    pub shared: &'a Shared,
    pub admitted: &'a Admitted,
}

impl<'a> Exchange<'a> {
    /// The audit gate, authority, caller, judgement, credentials of the head and the body plan, in that
    /// order; `rec` is filled in as they go. The caller is returned with the request.
    pub fn prepare<'k>(
        &self,
        caller: Result<&'k Known, &CallerError>,
        head: Head<'_>,
        rec: &mut Record,
    ) -> Result<(&'k Known, Prepared), Denial> {
        let Admitted { dst, scheme, .. } = self.admitted;
        rec.dst = dst.clone();
        rec.scheme = scheme.as_str();
        rec.policy = Some(self.admitted.admission.entry.to_string());
        // No request goes on while it could not be audited (the connection was admitted
        // before the audit log stopped taking records).
        crate::pipeline::denial::audit_gate(&self.shared.audit)?;
        if head.websocket && head.has_body {
            // Bytes after the head would be body to one reader and the first frames to
            // another; nothing would judge or scan them as either.
            let refusal = Refusal::new(
                Code::BadRequest,
                "a WebSocket handshake carries no body (RFC 6455 §4.1): send no Content-Length or Transfer-Encoding with `Upgrade: websocket`",
            );
            return Err(Denial::new(Engine::HttpParser, refusal));
        }
        if !head.authority_ok {
            // Host-header redirection of credentials is the attack this stops (spec §3.4).
            let refusal = Refusal::new(
                Code::RequestAuthorityMismatch,
                "HTTP request authority does not match the authorized tunnel endpoint",
            )
            .with("host", dst.host().to_string())
            .with("port", dst.port());
            return Err(Denial::new(Engine::HttpParser, refusal));
        }
        let known = match caller {
            Ok(k) => k,
            Err(e) => {
                let what = format!("{} {dst}{}", rec.method, rec.path);
                return Err(identify::denial(&what, e));
            }
        };
        // Judged by the policy in force now, not the one the connection was admitted under:
        // after a reload the next request of a kept-alive connection (and the next HTTP/2
        // stream) is decided again, at L4 first.
        let current;
        let Admitted {
            policy, admission, ..
        } = if Arc::ptr_eq(&self.shared.policy(known.claim()), &self.admitted.policy) {
            self.admitted
        } else {
            let what = format!("{} {dst}{}", rec.method, rec.path);
            current = match connection::admit(self.shared, Ok(known), dst, *scheme, &what) {
                Ok((_, admitted)) => admitted,
                Err(denied) => {
                    // No entry admits it any more.
                    rec.policy = None;
                    return Err(denied);
                }
            };
            rec.policy = Some(current.admission.entry.to_string());
            &current
        };
        let method = judge::Method::new(
            head.method,
            head.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
        );
        let judged = judge::judge(
            policy,
            admission,
            known,
            &method,
            head.target,
            &dst.to_string(),
            head.websocket,
        );
        let mut judged = match judged {
            Ok(j) => j,
            Err(boxed) => {
                let (refusal, j) = *boxed;
                rec.judged(&j);
                return Err(Denial::new(j.engine, refusal));
            }
        };
        rec.judged(&judged);
        let facts = HeadFacts {
            method: head.method,
            target: head.target,
            headers: &head.headers,
            has_body: head.has_body,
            hp: dst.to_string(),
            binary: &known.exe,
        };
        let rpc = RpcCheck::new(policy, admission, &facts).filter(|_| !head.websocket);
        let rpc = match rpc {
            // No body to come: judged now.
            Some((check, _)) if !head.has_body => {
                protocol_body::judge(&check, b"", rec)?;
                None
            }
            other => other.map(|(check, limit)| (Box::new(check), limit)),
        };
        let form = match rpc {
            Some(_) => None,
            None => self.form_check(&judged, &head, policy, admission, known)?,
        };
        let origin_form = std::mem::take(&mut judged.origin_form);

        // Credentials: placeholders become secrets only where each is bound and placed (spec
        // §3.3, §3.4), and only over verified TLS unless the binding opts in to plaintext.
        // From here on the head may hold a secret: it is never logged or shown.
        let mut headers = head.headers;
        let mut origin_form = origin_form;
        // A `credential_signing` endpoint: the client's own signature goes before anything
        // reads the head (spec §3.8).
        let signing = admission.signing_for(policy, &rec.path);
        let sign_of = inject::SignOf {
            method: head.method,
            authority: dst.to_uri_authority(scheme.default_port()),
            transport: scheme.transport(),
            path: &rec.path,
            sized: !head.has_body
                || headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case("content-length")),
        };
        let mut to_sign = inject::ToSign::begin(signing, sign_of, &mut headers)?;
        let aws_chunked = to_sign
            .as_ref()
            .is_some_and(inject::ToSign::streams_aws_chunked);
        // Framed as aws-chunked by the signing mode, or by what the client says.
        let aws_framed = aws_chunked
            || headers.iter().any(|(n, v)| {
                (n.eq_ignore_ascii_case("content-encoding")
                    && String::from_utf8_lossy(v)
                        .to_ascii_lowercase()
                        .contains("aws-chunked"))
                    || (n.eq_ignore_ascii_case("x-amz-content-sha256")
                        && v.to_ascii_uppercase().starts_with(b"STREAMING-"))
            });
        let dest = rec.dest(self.shared, known);
        // One credentials snapshot for the whole request (a reload applies from the next).
        let creds = self.shared.credentials(known.claim());
        let injected = inject::inject_head(
            &dest,
            &creds,
            scheme.transport(),
            &rec.path,
            &mut origin_form,
            &mut headers,
        )?;
        // Signed now, unless the signature needs a body still to come.
        let mut signed = None;
        let mut signers = Vec::new();
        if let Some(s) = to_sign.take_if(|s| !(s.needs_body() && head.has_body)) {
            signed = Some(s.describe());
            signers = s.sign(&dest, &creds, &origin_form, &mut headers, b"")?;
        }
        rec.signed = signed;
        rec.credentials = injected
            .credentials
            .iter()
            .map(ToString::to_string)
            .chain(signers)
            .collect();
        rec.credentials.sort();
        rec.credentials.dedup();

        // A credentialed endpoint that does not opt in to body rewriting must never receive a
        // placeholder in a body (spec §3.5); bodies elsewhere pass as they are.
        let rewrite = admission
            .endpoints
            .iter()
            .any(|r| policy.endpoint(*r).request_body_credential_rewrite);
        let ws_rewrite = head.websocket
            && admission
                .endpoints
                .iter()
                .any(|r| policy.endpoint(*r).websocket_credential_rewrite);
        let ws_read = ws_rewrite
            || (head.websocket && {
                let text = policy.decide_websocket_text(admission, head.target.as_bytes(), b"");
                policy.inspects_websocket_messages(&text)
            });
        let body = match (rewrite, head.websocket) {
            (true, false) => BodyPlan::Rewrite,
            (true, true) => BodyPlan::Pass,
            (false, _) if creds.is_credentialed(dst.host(), dst.port()) => BodyPlan::Guard,
            (false, _) => BodyPlan::Pass,
        };
        // Where placeholders must be found in the body, a compressed body would hide them.
        if (rewrite || body == BodyPlan::Guard) && head.has_body {
            let encodings = headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("content-encoding"))
                .map(|(_, v)| v.as_slice());
            if let Some(denied) = inject::encoded_body(encodings, aws_chunked) {
                return Err(denied);
            }
        }
        Ok((
            known,
            Prepared {
                origin_form,
                headers,
                scrub: injected.scrub,
                body,
                creds,
                form,
                rpc,
                sign: to_sign,
                ws_rewrite,
                ws_read,
                aws_chunked: aws_framed,
            },
        ))
    }

    /// Whether the request's body is a form (or JSON) that must be read for `_method` fields
    /// (or members): an inspected endpoint, such a body, and some other method refused on
    /// this target (else no method it names could change the answer). Such a body must
    /// arrive uncompressed.
    fn form_check(
        &self,
        judged: &Judged,
        head: &Head<'_>,
        policy: &Arc<Policy>,
        admission: &Admission,
        known: &Known,
    ) -> Result<Option<Box<FormCheck>>, Denial> {
        if !head.has_body || head.websocket || !admission.inspects(policy) {
            return Ok(None);
        }
        let of_kind = |name: &'static str| {
            head.headers
                .iter()
                .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_slice())
        };
        let content_types: Vec<&[u8]> = of_kind("content-type").collect();
        let Some(kind) = BodyKind::of(head.method, &content_types) else {
            return Ok(None);
        };
        let check = FormCheck {
            kind,
            policy: Arc::clone(policy),
            admission: admission.clone(),
            judged: judged.clone(),
            line: head.method.to_ascii_uppercase(),
            path_and_query: head.target.to_string(),
            hp: self.admitted.dst.to_string(),
        };
        if !check.also(known).any_denied() {
            return Ok(None);
        }
        if let Some(coding) = of_kind("content-encoding").find_map(|v| {
            let c = String::from_utf8_lossy(v).trim().to_ascii_lowercase();
            (!c.is_empty() && c != "identity").then_some(c)
        }) {
            let detail = format!(
                "a form or JSON body with Content-Encoding `{coding}` cannot be read for its {} field on an endpoint that refuses some methods; send it uncompressed",
                "_method"
            );
            let refusal = Refusal::new(Code::FormBodyEncoded, detail);
            return Err(Denial::new(Engine::L7, refusal));
        }
        Ok(Some(Box::new(check)))
    }

    /// The refusal of a body larger than `max`, what [`Prepared::reads_whole`] allows.
    pub fn too_large(&self, max: usize) -> Denial {
        Denial::new(Engine::HttpParser, body::too_large(max))
    }

    /// A body read whole (at most [`Prepared::reads_whole`] bytes): its form's `_method`
    /// fields judged, then rewritten (opt-in), or guarded and passed; the head's length is
    /// fixed to what goes upstream; then signed, on a `credential_signing` endpoint.
    pub fn whole_body(
        &self,
        known: &Known,
        rec: &mut Record,
        prepared: &mut Prepared,
        body: Bytes,
    ) -> Result<Bytes, Denial> {
        if let Some((check, _)) = prepared.rpc.take() {
            protocol_body::judge(&check, &body, rec)?;
        }
        let body = self.checked_body(known, rec, prepared, body)?;
        if let Some(s) = prepared.sign.take() {
            let described = s.describe();
            let dest = rec.dest(self.shared, known);
            let used = s.sign(
                &dest,
                &prepared.creds,
                &prepared.origin_form,
                &mut prepared.headers,
                &body,
            )?;
            rec.credentials.extend(used);
            rec.credentials.sort();
            rec.credentials.dedup();
            rec.signed = Some(described);
        }
        Ok(body)
    }

    /// [`Exchange::whole_body`] before its signature.
    fn checked_body(
        &self,
        known: &Known,
        rec: &mut Record,
        prepared: &mut Prepared,
        body: Bytes,
    ) -> Result<Bytes, Denial> {
        if let Some(check) = prepared.form.take() {
            let named = body_override::from_body(&check.kind, &body).map_err(|e| {
                let refusal = Refusal::new(Code::InvalidMethodOverride, e.to_string());
                Denial::new(Engine::HttpParser, refusal)
            })?;
            let mut judged = check.judged.clone();
            let verdict = check.also(known).judge(&mut judged, &named);
            if let Err(boxed) = verdict {
                let (refusal, j) = *boxed;
                rec.judged(&j);
                return Err(Denial::new(j.engine, refusal));
            }
            rec.judged(&judged);
        }
        match prepared.body {
            BodyPlan::Rewrite => self.rewrite_body(known, rec, prepared, body),
            plan => {
                let framed = || {
                    prepared.aws_chunked
                        && credentials::aws_chunks::AwsChunks::default()
                            .feed_until(&body)
                            .is_some()
                };
                if plan == BodyPlan::Guard
                    && (credentials::BodyGuard::new().feed(&body) || framed())
                {
                    return Err(self.body_failed(known, rec, &BodyError::Placeholder));
                }
                credentials::set_content_length(&mut prepared.headers, body.len());
                Ok(body)
            }
        }
    }

    /// Opt-in body rewriting: the whole body (read by the transport, at most
    /// [`credentials::body::MAX_REWRITE_BODY_BYTES`]) with its placeholders swapped where
    /// bound; the head's length is fixed and the response scrubbed of what went in.
    pub fn rewrite_body(
        &self,
        known: &Known,
        rec: &mut Record,
        prepared: &mut Prepared,
        body: Bytes,
    ) -> Result<Bytes, Denial> {
        let out = if credentials::placeholder::contains_marker(&body) {
            let scope = credentials::RequestScope {
                host: self.admitted.dst.host(),
                port: self.admitted.dst.port(),
                path: &rec.path,
                caller: known.policy_caller(),
                transport: self.admitted.scheme.transport(),
            };
            let scoped = prepared.creds.scoped(scope);
            let mut types = prepared
                .headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("content-type"))
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
            let content_type = types.next();
            if types.next().is_some() {
                // Which one the upstream reads decides where the secret lands: refused,
                // not guessed.
                let refusal = Refusal::new(
                    Code::BadRequest,
                    "more than one Content-Type: the body's kind is ambiguous, so its placeholders are not swapped",
                );
                return Err(Denial::new(Engine::L7, refusal));
            }
            match credentials::rewrite_body(content_type.as_deref(), &body, &scoped) {
                Ok(done) => {
                    rec.credentials
                        .extend(done.injected.credentials.iter().map(ToString::to_string));
                    rec.credentials.sort();
                    rec.credentials.dedup();
                    if !done.injected.scrub.is_empty() {
                        if prepared.scrub.is_empty() {
                            credentials::ask_whole_plain_response(&mut prepared.headers);
                        }
                        prepared.scrub.merge(&done.injected.scrub);
                    }
                    Bytes::from(done.body.into_owned())
                }
                Err(credentials::BodyError::Credential(e)) => {
                    return Err(inject::refuse_credential(&rec.dest(self.shared, known), &e));
                }
                Err(e) => {
                    let refusal = Refusal::new(e.code(), e.to_string());
                    return Err(Denial::new(Engine::L7, refusal));
                }
            }
        } else {
            body
        };
        credentials::set_content_length(&mut prepared.headers, out.len());
        Ok(out)
    }

    /// The refusal of a request whose body stopped: a placeholder where none may go (with
    /// a finding), in its trailers, a client too slow, or a malformed body.
    pub fn body_failed(&self, known: &Known, rec: &Record, e: &BodyError) -> Denial {
        match e {
            BodyError::Placeholder => {
                rec.dest(self.shared, known).emit_finding(
                    "openshell.credentials.traffic_uninspectable",
                    format!(
                        "request body with a credential placeholder stopped before {}",
                        self.admitted.dst
                    ),
                    None,
                );
                Denial::new(
                    Engine::L7,
                    Refusal::new(
                        Code::CredentialInBody,
                        "a credential placeholder in the request body would reach the upstream unresolved; this endpoint does not allow body rewriting (request_body_credential_rewrite)",
                    ),
                )
            }
            BodyError::PlaceholderInTrailers => Denial::new(Engine::L7, e.refusal()),
            other => Denial::new(Engine::Proxy, other.refusal()),
        }
    }

    /// The refusal of a request whose upstream failed before answering.
    pub fn upstream_failed(&self, reason: impl Into<String>) -> Denial {
        Denial::new(
            Engine::Proxy,
            Refusal::new(
                Code::UpstreamUnreachable,
                format!("connection to {} failed", self.admitted.dst),
            )
            .with_reason(reason),
        )
    }

    /// The refusal of a request whose upstream sent no response head in time.
    pub fn upstream_timeout(&self, timeout: Duration) -> Denial {
        Denial::new(
            Engine::Proxy,
            Refusal::new(
                Code::UpstreamTimeout,
                format!(
                    "{} sent no response within {} s",
                    self.admitted.dst,
                    timeout.as_secs_f32()
                ),
            ),
        )
    }
}
