//! Swapping placeholders for secrets in a request head (spec §3.3), all or nothing.
//!
//! Owns the substitution sites of a request head and their rules: a header value that is a
//! placeholder, `<scheme> <placeholder>`, or `Basic <base64>` whose `user:pass` holds
//! placeholders (decoded, swapped, re-encoded); a path segment, percent-decoded, with
//! placeholders anywhere in it and a secret that must not change the path's shape (`/ \ ? #`,
//! `..`, control bytes); a query value, percent-decoded, every placeholder swapped and the
//! secret re-encoded. Anything marker-like elsewhere (see `placeholder::contains_marker`) is
//! refused. Nothing changes unless every placeholder resolves; errors name the credential or
//! the env key, never a secret. Also owns `CredentialError`, which `body.rs` shares. Binding
//! decisions come from a `Resolve` (`binding.rs`); the head parser is `http::head`.

use std::fmt;
use std::ops::Range;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use super::binding::{Mismatch, Resolution, Resolve};
use super::placeholder::{self, Placeholder};
use super::profile::{CredentialRef, Placement, TEMPLATE_SLOT};
use super::scrub::ScrubSet;
use super::secrets::Unavailability;

/// Detection Finding type for a known credential used outside its binding (spec §3.5).
const FINDING_ENDPOINT_MISMATCH: &str = "openshell.provider_credential.endpoint_mismatch";
/// Detection Finding type for a credential in a part of the request its profile does not
/// place it in (a header it does not name, the path, the query).
const FINDING_PLACEMENT_MISMATCH: &str = "sluice.provider_credential.placement_mismatch";
/// Detection Finding type for a credential that would have gone upstream in plaintext.
const FINDING_REQUIRES_TLS: &str = "sluice.provider_credential.requires_tls";

/// Where in a request a placeholder was.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Site {
    /// A header, by its name as sent.
    Header(String),
    Path,
    Query,
    Body,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Site::Header(name) => write!(f, "header `{name}`"),
            Site::Path => f.write_str("request path"),
            Site::Query => f.write_str("query string"),
            Site::Body => f.write_str("request body"),
        }
    }
}

/// Why a known, bound credential could not be swapped in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnavailableReason {
    /// No credential has this env var.
    UnknownKey,
    /// The env var has no usable value.
    NoValue(Unavailability),
    /// The value would change the shape of the site (a `/` in a path segment, a control
    /// byte in a header).
    UnsafeForSite,
}

impl fmt::Display for UnavailableReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnavailableReason::UnknownKey => f.write_str("no provider credential has this env var"),
            UnavailableReason::NoValue(u) => u.fmt(f),
            UnavailableReason::UnsafeForSite => {
                f.write_str("its value has characters that are not allowed there")
            }
        }
    }
}

/// Why a request cannot go upstream with its placeholders. Holds names, never values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// A known credential outside its binding: `403 credential_endpoint_mismatch`, and a
    /// Detection Finding.
    #[error("credential `{credential}` in the {site} is not authorized for this request: {}", reason.as_str())]
    EndpointMismatch {
        credential: CredentialRef,
        reason: Mismatch,
        site: Site,
    },
    /// A known, bound credential where its profile does not place it: `403
    /// credential_placement_mismatch`, and a Detection Finding.
    #[error(
        "credential `{credential}` in the {site} is not where its profile places it ({placement})"
    )]
    PlacementMismatch {
        credential: CredentialRef,
        site: Site,
        placement: String,
    },
    /// A bound credential on a request that goes upstream in plaintext, where no matching
    /// profile endpoint opts in (`allow_plaintext_credentials`): `403
    /// credential_requires_tls`, and a Detection Finding.
    #[error(
        "credential `{credential}` in the {site} would be sent in plaintext; it travels only inside TLS to a verified upstream unless its profile endpoint sets allow_plaintext_credentials"
    )]
    RequiresTls {
        credential: CredentialRef,
        site: Site,
    },
    /// An unknown key, or a known one without a usable value: `500 credential_unavailable`.
    #[error("credential placeholder for `{key}` in the {site} could not be resolved: {reason}")]
    Unavailable {
        key: String,
        credential: Option<CredentialRef>,
        reason: UnavailableReason,
        site: Site,
    },
    /// Something marker-like that is not a placeholder in a place sluice swaps:
    /// `500 credential_unavailable` (a forward proxy may answer `400
    /// invalid_credential_placeholder` for the request target).
    #[error(
        "the {site} holds a credential placeholder marker that is malformed or in a position sluice does not substitute"
    )]
    InvalidPlaceholder { site: Site },
}

impl CredentialError {
    /// The `error` field of the JSON body (spec §3.5).
    pub fn code(&self) -> crate::refusal_code::Code {
        match self {
            CredentialError::EndpointMismatch { .. } => {
                crate::refusal_code::Code::CredentialEndpointMismatch
            }
            CredentialError::PlacementMismatch { .. } => {
                crate::refusal_code::Code::CredentialPlacementMismatch
            }
            CredentialError::RequiresTls { .. } => crate::refusal_code::Code::CredentialRequiresTls,
            // A refreshed credential whose refresh is failing: the service is what is missing.
            CredentialError::Unavailable {
                reason: UnavailableReason::NoValue(Unavailability::NotRefreshed),
                ..
            } => crate::refusal_code::Code::CredentialRefreshFailed,
            CredentialError::Unavailable { .. } | CredentialError::InvalidPlaceholder { .. } => {
                crate::refusal_code::Code::CredentialUnavailable
            }
        }
    }

    /// The reference's client-facing message (spec §3.5), free of names and values.
    pub(crate) fn client_message(&self) -> &'static str {
        match self {
            CredentialError::EndpointMismatch { .. } => {
                "Credential is not authorized for this request endpoint"
            }
            CredentialError::PlacementMismatch { .. } => {
                "Credential placeholder is not where the provider profile places this credential"
            }
            CredentialError::RequiresTls { .. } => {
                "Credential may only be sent over TLS to a verified upstream"
            }
            CredentialError::Unavailable { .. } | CredentialError::InvalidPlaceholder { .. } => {
                "Credential placeholder could not be resolved"
            }
        }
    }

    /// The Detection Finding to emit, if this is credential misuse.
    pub(crate) fn finding(&self) -> Option<&'static str> {
        match self {
            CredentialError::EndpointMismatch { .. } => Some(FINDING_ENDPOINT_MISMATCH),
            CredentialError::PlacementMismatch { .. } => Some(FINDING_PLACEMENT_MISMATCH),
            CredentialError::RequiresTls { .. } => Some(FINDING_REQUIRES_TLS),
            _ => None,
        }
    }

    pub fn site(&self) -> &Site {
        match self {
            CredentialError::EndpointMismatch { site, .. }
            | CredentialError::PlacementMismatch { site, .. }
            | CredentialError::RequiresTls { site, .. }
            | CredentialError::Unavailable { site, .. }
            | CredentialError::InvalidPlaceholder { site } => site,
        }
    }

    /// Which error to report when a request has several: misuse first (it is the one that
    /// needs a finding), then unresolvable keys, then malformed markers.
    fn rank(&self) -> u8 {
        match self {
            CredentialError::EndpointMismatch { .. } => 5,
            CredentialError::PlacementMismatch { .. } => 4,
            CredentialError::RequiresTls { .. } => 3,
            CredentialError::Unavailable { .. } => 2,
            CredentialError::InvalidPlaceholder { .. } => 1,
        }
    }
}

/// What was swapped in: credential names for the audit event, sorted, each once, and the
/// secrets as written, to scrub from the response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Injected {
    pub credentials: Vec<CredentialRef>,
    pub scrub: ScrubSet,
}

impl Injected {
    /// No credential went in (for the fuzz entry points and tests).
    #[cfg(any(test, feature = "fuzz"))]
    pub(crate) fn is_empty(&self) -> bool {
        self.credentials.is_empty()
    }
}

/// Swaps every placeholder of a request head for its secret: in `target` (the canonical
/// origin-form `path?query` policy judged) and in header values. All or nothing: on error,
/// `target` and `headers` are unchanged.
pub fn rewrite_request(
    target: &mut String,
    headers: &mut [(String, Vec<u8>)],
    resolver: &impl Resolve,
) -> Result<Injected, CredentialError> {
    let mut run = Run::new(resolver);
    let new_target = run.target(target);
    let mut new_headers = Vec::new();
    for (i, (name, value)) in headers.iter().enumerate() {
        if let Some(v) = run.header(name, value) {
            new_headers.push((i, v));
        }
    }
    let injected = run.finish()?;
    if let Some(t) = new_target {
        *target = t;
    }
    for (i, v) in new_headers {
        if let Some((_, value)) = headers.get_mut(i) {
            *value = v;
        }
    }
    Ok(injected)
}

/// Whether a request head carries anything marker-like (raw, percent-encoded, or inside a
/// `Basic` credential): lets the proxy skip the rewrite on the common path.
pub fn head_has_marker(target: &str, headers: &[(String, Vec<u8>)]) -> bool {
    placeholder::contains_marker(target.as_bytes())
        || headers.iter().any(|(name, value)| {
            placeholder::contains_marker(name.as_bytes())
                || placeholder::contains_marker(value)
                || basic_payload(value).is_some_and(|d| placeholder::contains_marker(&d))
        })
}

// === The substitution core, shared with body.rs ===

/// One request's substitutions: the credentials used, and the worst error so far.
pub(super) struct Run<'r, R: Resolve> {
    resolver: &'r R,
    used: Vec<CredentialRef>,
    scrub: ScrubSet,
    error: Option<CredentialError>,
}

/// Exactly where a placeholder sits, for the placement check.
#[derive(Clone, Copy, Debug)]
pub(super) enum Spot<'a> {
    /// A header value (or a `Basic` credential in it), by header name.
    Header(&'a str),
    /// A path segment, percent-decoded; `before` is the path exactly as sent up to this
    /// segment (ending in `/`), and `last` whether no `/` follows the segment.
    Segment {
        decoded: &'a [u8],
        before: &'a str,
        last: bool,
    },
    /// The value of the query parameter with this (percent-decoded) name.
    Query(&'a [u8]),
    /// A body (swapped only where the endpoint opts in, whatever the profile says).
    Body,
}

/// Whether `placement` allows a placeholder spanning decoded bytes `span` of `spot`.
fn permits(placement: &Placement, spot: Spot<'_>, span: Range<usize>) -> bool {
    match (placement, spot) {
        (_, Spot::Body) | (Placement::AnyHeader, Spot::Header(_)) => true,
        (Placement::Header(name), Spot::Header(h)) => h.eq_ignore_ascii_case(name),
        (Placement::Query(param), Spot::Query(name)) => name == param.as_bytes(),
        (Placement::Path(None), Spot::Segment { .. }) => true,
        (Placement::Path(Some(template)), Spot::Segment { .. }) => {
            fits_template(template, spot, span)
        }
        _ => false,
    }
}

/// Whether a placeholder at `span` of a path segment sits exactly where `template` puts
/// `{credential}`: the path before the segment is the template's directories, written
/// literally; the segment's text before the placeholder is the template's (decoded); and the
/// segment's text after it is exactly the template's up to its next `/`; and the segment
/// ends the path exactly when the template has no `/` after the placeholder.
fn fits_template(template: &str, spot: Spot<'_>, span: Range<usize>) -> bool {
    let Spot::Segment {
        decoded,
        before,
        last,
    } = spot
    else {
        return false;
    };
    let Some((head, tail)) = template.split_once(TEMPLATE_SLOT) else {
        return false;
    };
    let (dirs, lead) = match head.rsplit_once('/') {
        Some((d, l)) => (&head[..=d.len()], l),
        None => ("", head),
    };
    let (rest, ends) = match tail.split_once('/') {
        Some((r, _)) => (r, false),
        None => (tail, true),
    };
    before == dirs
        && decoded.get(..span.start) == Some(lead.as_bytes())
        && decoded.get(span.end..) == Some(rest.as_bytes())
        && last == ends
}

fn describe(placement: &Placement) -> String {
    match placement {
        Placement::AnyHeader => "request headers only".to_string(),
        Placement::Header(h) => format!("header `{h}` only"),
        Placement::Query(q) => format!("query parameter `{q}` only"),
        Placement::Path(Some(t)) => format!("the path, as `{t}`"),
        Placement::Path(None) => "the path only".to_string(),
    }
}

/// How a secret is written into a site, and which secrets the site refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Encoding {
    /// As is (header values, decoded Basic credentials, text bodies, decoded JSON strings).
    Raw,
    /// A header value: visible ASCII, space, tab or non-ASCII bytes only.
    Header,
    /// A path segment: no `/ \ ? #`, no `..`; pchar set kept, the rest `%HH`.
    PathSegment,
    /// A query or form value: unreserved kept, the rest `%HH`.
    QueryValue,
}

impl<'r, R: Resolve> Run<'r, R> {
    pub(super) fn new(resolver: &'r R) -> Self {
        Run {
            resolver,
            used: Vec::new(),
            scrub: ScrubSet::default(),
            error: None,
        }
    }

    pub(super) fn fail(&mut self, e: CredentialError) {
        if self.error.as_ref().is_none_or(|old| e.rank() > old.rank()) {
            self.error = Some(e);
        }
    }

    pub(super) fn failed(&self) -> bool {
        self.error.is_some()
    }

    pub(super) fn finish(mut self) -> Result<Injected, CredentialError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.used.sort();
        self.used.dedup();
        Ok(Injected {
            credentials: self.used,
            scrub: self.scrub,
        })
    }

    /// The secret for one placeholder (spelled `text`, starting at decoded byte `start` of
    /// `spot`), encoded for its site; `None` after recording why not.
    fn secret_for(
        &mut self,
        p: &Placeholder<'_>,
        text: &[u8],
        spot: Spot<'_>,
        site: &Site,
        enc: Encoding,
    ) -> Option<Vec<u8>> {
        let unavailable = |credential, reason| CredentialError::Unavailable {
            key: p.key.to_string(),
            credential,
            reason,
            site: site.clone(),
        };
        match self.resolver.resolve(p.key) {
            Resolution::Allow {
                secret,
                credential,
                placement,
            } => {
                if !permits(placement, spot, p.span.clone()) {
                    self.fail(CredentialError::PlacementMismatch {
                        credential,
                        site: site.clone(),
                        placement: describe(placement),
                    });
                    return None;
                }
                let value = secret.expose();
                if !allowed_in(value, enc) {
                    self.fail(unavailable(
                        Some(credential),
                        UnavailableReason::UnsafeForSite,
                    ));
                    return None;
                }
                self.used.push(credential);
                self.scrub.add(value.as_bytes(), text);
                Some(encode(value, enc))
            }
            Resolution::RequiresTls { credential } => {
                self.fail(CredentialError::RequiresTls {
                    credential,
                    site: site.clone(),
                });
                None
            }
            Resolution::OutsideBinding { credential, reason } => {
                self.fail(CredentialError::EndpointMismatch {
                    credential,
                    reason,
                    site: site.clone(),
                });
                None
            }
            Resolution::Unknown => {
                self.fail(unavailable(None, UnavailableReason::UnknownKey));
                None
            }
            Resolution::Unavailable { credential, reason } => {
                self.fail(unavailable(
                    Some(credential),
                    UnavailableReason::NoValue(reason),
                ));
                None
            }
        }
    }

    /// Swaps every placeholder of `decoded`, writing the result over `raw`: `offsets[i]` is
    /// where decoded byte `i` starts in `raw` (`offsets[len]` is `raw.len()`), so that all
    /// bytes around the placeholders keep their original spelling. Marker-like text outside
    /// the placeholders is refused. `None`: nothing swapped (or a failure was recorded).
    pub(super) fn swap(
        &mut self,
        raw: &[u8],
        decoded: &[u8],
        offsets: Option<&[usize]>,
        spot: Spot<'_>,
        site: &Site,
        enc: Encoding,
    ) -> Option<Vec<u8>> {
        let found = placeholder::find_in_bytes(decoded);
        let mut gaps = Vec::with_capacity(found.len() + 1);
        let mut last = 0;
        for p in &found {
            gaps.push(last..p.span.start);
            last = p.span.end;
        }
        gaps.push(last..decoded.len());
        // Resolve the placeholders even next to a malformed marker, so that a misused
        // credential is still reported (and found) as such.
        let mut ok = !gaps
            .iter()
            .any(|g| placeholder::contains_marker(&decoded[g.clone()]));
        if !ok {
            self.fail(CredentialError::InvalidPlaceholder { site: site.clone() });
        }
        let raw_at = |i: usize| offsets.map_or(i, |o| o.get(i).copied().unwrap_or(raw.len()));
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut copied = 0;
        for p in &found {
            let Range { start, end } = p.span;
            let secret = self.secret_for(p, &decoded[start..end], spot, site, enc);
            if let Some(secret) = secret {
                // The spelling sent upstream, if the site encoded it: scrubbed back to what
                // the client wrote there.
                self.scrub.add(&secret, &raw[raw_at(start)..raw_at(end)]);
                out.extend_from_slice(&raw[copied..raw_at(start)]);
                out.extend_from_slice(&secret);
                copied = raw_at(end);
            } else {
                ok = false;
            }
        }
        out.extend_from_slice(&raw[copied..]);
        (ok && !found.is_empty()).then_some(out)
    }

    /// The new target, if it changes.
    fn target(&mut self, target: &str) -> Option<String> {
        if !placeholder::contains_marker(target.as_bytes()) {
            return None;
        }
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        let mut changed = false;
        let mut segments = Vec::new();
        let count = path.split('/').count();
        let mut at = 0;
        for (index, segment) in path.split('/').enumerate() {
            let (decoded, offsets) = percent_decode(segment.as_bytes(), false);
            let spot = Spot::Segment {
                decoded: &decoded,
                before: path.get(..at).unwrap_or(""),
                last: index + 1 == count,
            };
            at += segment.len() + 1;
            match self.swap(
                segment.as_bytes(),
                &decoded,
                Some(&offsets),
                spot,
                &Site::Path,
                Encoding::PathSegment,
            ) {
                Some(new) => {
                    changed = true;
                    segments.push(String::from_utf8_lossy(&new).into_owned());
                }
                None => segments.push(segment.to_string()),
            }
        }
        let mut out = segments.join("/");
        if let Some(q) = query {
            out.push('?');
            match self.pairs(q.as_bytes(), &Site::Query, false) {
                Some(new) => {
                    changed = true;
                    out.push_str(&String::from_utf8_lossy(&new));
                }
                None => out.push_str(q),
            }
        }
        (changed && !self.failed()).then_some(out)
    }

    /// `k=v&k=v` (a query, or a form body with `plus_is_space`): placeholders swapped in
    /// values; a marker in a name, or in a part without `=`, is refused.
    pub(super) fn pairs(
        &mut self,
        raw: &[u8],
        site: &Site,
        plus_is_space: bool,
    ) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut changed = false;
        for (i, pair) in raw.split(|&b| b == b'&').enumerate() {
            if i > 0 {
                out.push(b'&');
            }
            let (name, value) = match pair.iter().position(|&b| b == b'=') {
                Some(eq) => (&pair[..eq], Some(&pair[eq + 1..])),
                None => (pair, None),
            };
            let (decoded_name, _) = percent_decode(name, plus_is_space);
            if placeholder::contains_marker(&decoded_name) {
                self.fail(CredentialError::InvalidPlaceholder { site: site.clone() });
                out.extend_from_slice(pair);
                continue;
            }
            let Some(value) = value else {
                out.extend_from_slice(pair);
                continue;
            };
            let (decoded, offsets) = percent_decode(value, plus_is_space);
            out.extend_from_slice(name);
            out.push(b'=');
            let spot = if *site == Site::Body {
                Spot::Body
            } else {
                Spot::Query(&decoded_name)
            };
            match self.swap(
                value,
                &decoded,
                Some(&offsets),
                spot,
                site,
                Encoding::QueryValue,
            ) {
                Some(new) => {
                    changed = true;
                    out.extend_from_slice(&new);
                }
                None => out.extend_from_slice(value),
            }
        }
        changed.then_some(out)
    }

    /// The new value of one header, if it changes.
    fn header(&mut self, name: &str, value: &[u8]) -> Option<Vec<u8>> {
        let site = Site::Header(name.to_string());
        if placeholder::contains_marker(name.as_bytes()) {
            self.fail(CredentialError::InvalidPlaceholder { site });
            return None;
        }
        let basic = basic_payload(value);
        let basic_marker = basic.as_deref().is_some_and(placeholder::contains_marker);
        if !basic_marker && !placeholder::contains_marker(value) {
            return None;
        }
        let trimmed = trim_ows(value);
        let spot = Spot::Header(name);
        // The whole value.
        if let Some(p) = exact(trimmed) {
            return self.secret_for(&p, trimmed, spot, &site, Encoding::Header);
        }
        // `Basic <base64 of user:pass>`.
        if let (Some(decoded), true) = (basic, basic_marker) {
            let split = scheme_split(trimmed)?;
            let new = self.swap(&decoded, &decoded, None, spot, &site, Encoding::Raw)?;
            let token = BASIC.encode(&new);
            // An echo of the header shows the new token: scrubbed back to the client's.
            self.scrub
                .add(token.as_bytes(), trim_ows(&trimmed[split..]));
            let mut out = trimmed[..split].to_vec();
            out.push(b' ');
            out.extend_from_slice(token.as_bytes());
            return Some(out);
        }
        // `<scheme> <placeholder>`.
        if let Some(split) = scheme_split(trimmed)
            && let Some(p) = exact(trim_ows(&trimmed[split..]))
        {
            let text = trim_ows(&trimmed[split..]);
            let secret = self.secret_for(&p, text, spot, &site, Encoding::Header)?;
            let mut out = trimmed[..split].to_vec();
            out.push(b' ');
            out.extend_from_slice(&secret);
            return Some(out);
        }
        self.fail(CredentialError::InvalidPlaceholder { site });
        None
    }
}

/// Padded or not on input (clients differ); padded on output, as RFC 7617 writes it.
const BASIC: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The decoded `user:pass` of a `Basic` credential.
fn basic_payload(value: &[u8]) -> Option<Vec<u8>> {
    let trimmed = trim_ows(value);
    let split = scheme_split(trimmed)?;
    if !trimmed[..split].eq_ignore_ascii_case(b"basic") {
        return None;
    }
    BASIC.decode(trim_ows(&trimmed[split..])).ok()
}

/// Where the first word of a header value ends, if something follows it.
fn scheme_split(value: &[u8]) -> Option<usize> {
    let split = value.iter().position(|&b| b == b' ' || b == b'\t')?;
    (split > 0).then_some(split)
}

/// The placeholder that is the whole of `bytes`.
fn exact(bytes: &[u8]) -> Option<Placeholder<'_>> {
    let found = placeholder::find_in_bytes(bytes);
    match found.as_slice() {
        [p] if p.span == (0..bytes.len()) => found.into_iter().next(),
        _ => None,
    }
}

fn trim_ows(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |e| e + 1);
    &value[start..end.max(start)]
}

/// Decodes `%HH` once (and `+` as a space for forms), keeping where each decoded byte began;
/// a `%` without two hex digits stays as it is.
pub(super) fn percent_decode(raw: &[u8], plus_is_space: bool) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::with_capacity(raw.len());
    let mut offsets = Vec::with_capacity(raw.len() + 1);
    let mut i = 0;
    while i < raw.len() {
        offsets.push(i);
        match raw[i] {
            b'%' => match (
                raw.get(i + 1).and_then(|&b| hex(b)),
                raw.get(i + 2).and_then(|&b| hex(b)),
            ) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                }
                _ => {
                    out.push(b'%');
                    i += 1;
                }
            },
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    offsets.push(raw.len());
    (out, offsets)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn allowed_in(value: &str, enc: Encoding) -> bool {
    let bytes = value.as_bytes();
    match enc {
        Encoding::Raw | Encoding::QueryValue => true,
        Encoding::Header => {
            bytes.iter().all(|&b| b == b'\t' || b >= 0x20) && !bytes.contains(&0x7f)
        }
        Encoding::PathSegment => {
            !bytes
                .iter()
                .any(|&b| matches!(b, b'/' | b'\\' | b'?' | b'#') || b < 0x20 || b == 0x7f)
                && !value.contains("..")
        }
    }
}

fn encode(value: &str, enc: Encoding) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let keep = |b: u8| match enc {
        Encoding::Raw | Encoding::Header => true,
        Encoding::PathSegment => b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b),
        Encoding::QueryValue => b.is_ascii_alphanumeric() || b"-._~".contains(&b),
    };
    let mut out = Vec::with_capacity(value.len());
    for b in value.bytes() {
        if keep(b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
        }
    }
    out
}

#[cfg(test)]
mod tests;
