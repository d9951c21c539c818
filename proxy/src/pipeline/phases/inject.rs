//! The credential steps of one inspected request, shared by HTTP/1.1 (`transports/http1.rs`) and
//! HTTP/2 (`transports/http2.rs`): swap the head's placeholders (refusing misuse with its status, code and
//! finding), ask for an unencoded response when a secret went in or any is bound to the
//! endpoint, scrub the response of every such secret (with a finding when one comes back,
//! whether or not its request carried it), and refuse what cannot be inspected
//! (an encoded request body where placeholders must be found, a placeholder in trailers);
//! and, on a `credential_signing` endpoint, sign the request again with the bound AWS keys
//! (`ToSign`; the signature itself is `credentials::sigv4`); set the token of a `token_grant`
//! bound to the destination (`credentials::token_grant`).
//!
//! The rules themselves live in `credentials` (`rewrite`, `binding`, `scrub`); this module
//! only binds them to a request's destination and to audit.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::SystemTime;

use http::Response;
use http_body::Body;

use crate::audit::{self, Engine};
use crate::credentials::sigv4::{self, Payload, SignError};
use crate::credentials::{self, CredentialError, Injected, ScrubSet, Scrubbed, Transport};
use crate::http::respond::Code;
use crate::http::respond::Refusal;
use crate::pipeline::authority::Authority;
use crate::pipeline::caller::identify::Known;
use crate::pipeline::denial::Denial;
use crate::pipeline::state::shared::Shared;
use crate::policy::model::Signing;

/// Where an inspected request goes, as its findings name it.
#[derive(Debug)]
pub(crate) struct Dest<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) conn_id: u64,
    pub(crate) peer: SocketAddr,
    pub(crate) caller: &'a Known,
    pub(crate) dst: &'a Authority,
    pub(crate) ip: Option<IpAddr>,
    pub(crate) policy: Option<String>,
}

impl Dest<'_> {
    fn finding(&self, kind: &str, title: String, credential: Option<String>) -> audit::Event {
        audit::Event::Finding(audit::Finding {
            time: SystemTime::now(),
            id: self.conn_id,
            caller: Some(Arc::clone(&self.caller.audit)),
            src: self.peer,
            dst: audit::Destination::new(self.dst.clone(), self.ip),
            kind: kind.to_string(),
            guard: audit::Guard::Credentials,
            title,
            credential,
            policy: self.policy.clone(),
            severity: audit::Severity::High,
        })
    }

    /// Emits a Detection Finding about this request.
    pub(crate) fn emit_finding(&self, kind: &str, title: String, credential: Option<String>) {
        self.shared
            .audit
            .emit(&self.finding(kind, title, credential));
    }
}

/// Swaps the placeholders of a request head (`target` is the canonical origin-form target,
/// `path` the canonical path policy judged). When a secret went in, or the endpoint has any
/// bound (`Injected::scrub` not empty), the upstream is asked for an unencoded response,
/// which the caller must pass through `scrub`.
pub(crate) fn inject_head(
    d: &Dest<'_>,
    creds: &credentials::Bindings,
    transport: Transport,
    path: &str,
    target: &mut String,
    headers: &mut Vec<(String, Vec<u8>)>,
) -> Result<Injected, Denial> {
    // Whatever the request carries, the response is scrubbed of every secret bound to this
    // endpoint (one stored upstream earlier may come back in any answer).
    let bound = creds.endpoint_secrets(d.dst);
    let scope = credentials::RequestScope {
        dst: d.dst,
        path,
        caller: d.caller.policy_caller(),
        transport,
    };
    let scoped = creds.scoped(scope);
    // A token grant bound here sets its header whatever the client sent (spec §3.7).
    let granted = credentials::refresh::token_grant::set_grant_headers(
        creds.profiles(),
        &scoped,
        (d.dst, path),
        headers,
    )
    .map_err(|e| refuse_credential(d, &e))?;
    if !credentials::head_has_marker(target, headers) {
        if !bound.is_empty() {
            credentials::ask_whole_plain_response(headers);
        }
        return Ok(Injected {
            credentials: granted,
            scrub: bound,
        });
    }
    match credentials::rewrite_request(target, headers, &scoped) {
        Ok(mut injected) => {
            injected.credentials.extend(granted);
            injected.scrub.merge(&bound);
            if !injected.scrub.is_empty() {
                credentials::ask_whole_plain_response(headers);
            }
            Ok(injected)
        }
        Err(e) => Err(refuse_credential(d, &e)),
    }
}

/// The refusal (and the finding, for misuse) of a credential error.
pub(crate) fn refuse_credential(d: &Dest<'_>, e: &CredentialError) -> Denial {
    if let Some(kind) = e.finding() {
        let credential = match e {
            CredentialError::EndpointMismatch { credential, .. }
            | CredentialError::PlacementMismatch { credential, .. }
            | CredentialError::RequiresTls { credential, .. } => Some(credential.to_string()),
            _ => None,
        };
        d.shared.audit.emit(&d.finding(
            kind,
            format!("credential misuse refused on {}: {e}", d.dst),
            credential,
        ));
    }
    let refusal = Refusal::new(e.code(), e.client_message())
        .with("message", e.client_message())
        .with_reason(e.to_string());
    Denial::new(Engine::L7, refusal)
}

/// Scrubs a response to a request that carried injected secrets (see
/// `credentials::scrub_response`); a Detection Finding is emitted at the first secret found.
pub(crate) async fn scrub<B>(
    d: &Dest<'_>,
    set: ScrubSet,
    credentials: &[String],
    response: Response<B>,
) -> Result<Response<Scrubbed<B>>, Denial>
where
    B: Body<Data = bytes::Bytes> + Unpin,
{
    let event = reflected(d, credentials);
    let audit = Arc::clone(&d.shared.audit);
    credentials::scrub_response(
        response,
        Arc::new(set),
        Box::new(move || audit.emit(&event)),
    )
    .await
    .map_err(|e| {
        let refusal = Refusal::new(e.code(), e.to_string()).with_reason(e.to_string());
        Denial::new(Engine::L7, refusal)
    })
}

/// Scrubs the head of a WebSocket handshake's `101` (its frames: `reflected_report`).
pub(crate) fn scrub_head(
    d: &Dest<'_>,
    set: &ScrubSet,
    credentials: &[String],
    headers: &mut http::HeaderMap,
) {
    if credentials::scrub::scrub_headers(headers, set) > 0 {
        d.shared.audit.emit(&reflected(d, credentials));
    }
}

/// Reports, once, a secret found in a WebSocket's frames: the same finding as a response's.
pub(crate) fn reflected_report(d: &Dest<'_>, credentials: &[String]) -> Box<dyn FnOnce() + Send> {
    let event = reflected(d, credentials);
    let audit = Arc::clone(&d.shared.audit);
    Box::new(move || audit.emit(&event))
}

/// Reports a WebSocket closed at a frame that could not be scanned for the secret (the
/// argument says why): a finding that its traffic was uninspectable.
pub(crate) fn uninspectable_report(d: &Dest<'_>) -> Box<dyn FnOnce(String) + Send> {
    let kind = credentials::body::FINDING_TRAFFIC_UNINSPECTABLE;
    let mut event = d.finding(kind, String::new(), None);
    let audit = Arc::clone(&d.shared.audit);
    let hp = d.dst.clone();
    Box::new(move |why| {
        if let audit::Event::Finding(f) = &mut event {
            f.title = format!("WebSocket from {hp} closed: {why}");
        }
        audit.emit(&event);
    })
}

fn reflected(d: &Dest<'_>, credentials: &[String]) -> audit::Event {
    d.finding(
        credentials::scrub::FINDING_REFLECTED,
        format!(
            "the response from {} carried an injected credential; it was replaced by its placeholder",
            d.dst
        ),
        (!credentials.is_empty()).then(|| credentials.join(",")),
    )
}

/// A request body that cannot be scanned for placeholders where they must be found (it is
/// compressed): refused before anything goes upstream. `aws_chunked`: S3's streaming
/// framing (`aws-chunked`, plain bytes in chunks) is allowed, on a request signed with it.
pub(crate) fn encoded_body<'h>(
    content_encodings: impl Iterator<Item = &'h [u8]>,
    aws_chunked: bool,
) -> Option<Denial> {
    let coding = content_encodings
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|c| c.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .find(|c| !c.is_empty() && c != "identity" && !(aws_chunked && c == "aws-chunked"))?;
    let detail = format!(
        "a request body with Content-Encoding `{coding}` to a credentialed endpoint cannot be scanned for credential placeholders; send it uncompressed"
    );
    let refusal = Refusal::new(Code::CredentialScanEncodedBody, detail.clone()).with_reason(detail);
    Some(Denial::new(Engine::L7, refusal))
}

/// A request to an endpoint with `credential_signing` (spec §3.8), between its head and its
/// signature: what signing needs once the target is final and, for a hashed payload, the
/// body read (see [`credentials::sigv4`]).
#[derive(Debug)]
pub struct ToSign {
    signing: Signing,
    payload: Payload,
    method: String,
    /// The `Host` the upstream receives.
    authority: String,
    transport: Transport,
    /// The canonical path policy judged (for the keys' binding).
    path: String,
}

/// What [`ToSign::begin`] needs of a request.
#[derive(Debug)]
pub(crate) struct SignOf<'a> {
    pub(crate) method: &'a str,
    pub(crate) authority: String,
    pub(crate) transport: Transport,
    pub(crate) path: &'a str,
    /// No body, or one with a known length.
    pub(crate) sized: bool,
}

impl ToSign {
    /// For an endpoint with `signing`: the payload mode chosen, and the client's own
    /// signature dropped from `headers`, before anything else reads the head (it carries
    /// the client's placeholder key id).
    pub(crate) fn begin(
        signing: Option<&Signing>,
        of: SignOf<'_>,
        headers: &mut Vec<(String, Vec<u8>)>,
    ) -> Result<Option<ToSign>, Denial> {
        let Some(signing) = signing else {
            return Ok(None);
        };
        let payload = sigv4::payload_of(signing.mode, headers, of.sized)
            .map_err(|e| refuse_signing(None, &e))?;
        sigv4::strip_client_signature(headers);
        Ok(Some(ToSign {
            signing: signing.clone(),
            payload,
            method: of.method.to_string(),
            authority: of.authority,
            transport: of.transport,
            path: of.path.to_string(),
        }))
    }

    /// The body streams in S3's `aws-chunked` framing, with checksum trailers.
    pub(crate) fn streams_aws_chunked(&self) -> bool {
        self.payload == Payload::StreamingTrailer
    }

    /// The body must be read whole (at most [`sigv4::MAX_SIGNED_BODY_BYTES`]) to be hashed.
    pub(crate) fn needs_body(&self) -> bool {
        self.payload == Payload::Hashed
    }

    /// Signs the request with the keys bound here; returns the credentials used, as the
    /// audit record names them.
    pub(crate) fn sign(
        self,
        d: &Dest<'_>,
        creds: &credentials::Bindings,
        target: &str,
        headers: &mut Vec<(String, Vec<u8>)>,
        body: &[u8],
    ) -> Result<Vec<String>, Denial> {
        let scope = credentials::RequestScope {
            dst: d.dst,
            path: &self.path,
            caller: d.caller.policy_caller(),
            transport: self.transport,
        };
        let req = sigv4::Request {
            method: &self.method,
            host: d.dst.host(),
            authority: &self.authority,
            target,
            body,
        };
        let used = sigv4::sign_request(
            &self.signing,
            self.payload,
            &req,
            headers,
            &creds.scoped(scope),
        )
        .map_err(|e| refuse_signing(Some(d), &e))?;
        Ok(used.iter().map(ToString::to_string).collect())
    }

    /// How the audit record names this signature: `<mode>/<service>`.
    pub(crate) fn describe(&self) -> String {
        format!("{}/{}", self.signing.mode.as_str(), self.signing.service)
    }
}

/// The refusal of a request that could not be signed (a key's misuse with its finding).
fn refuse_signing(d: Option<&Dest<'_>>, e: &SignError) -> Denial {
    match (e, d) {
        (SignError::Credential(c), Some(d)) => refuse_credential(d, c),
        _ => {
            let refusal = Refusal::new(e.code(), e.to_string()).with_reason(e.to_string());
            Denial::new(Engine::L7, refusal)
        }
    }
}
