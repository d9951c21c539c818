//! Fuzz entry points: each takes bytes a hostile client (or, for `websocket_frames`, a
//! hostile upstream) could send and drives one parser the way the proxy does, checking what
//! must hold of its output. None may panic, whatever the input.
//!
//! Test-facing only: the coverage-guided targets in `fuzz/` (outside the workspace) and the
//! property-test runner in `proxy/tests/fuzz_parsers.rs` both call these, so the two exercise
//! the same code. Nothing in the proxy calls them.

mod files;
mod protocols;
pub use files::{audit_lines, policy_yaml, provider_profile, tenants_file};
pub use protocols::{graphql_body, rpc_body, sigv4_request};

use std::cell::RefCell;

use bytes::BytesMut;
use http_body_util::BodyExt;

use crate::credentials::binding::{Resolution, Resolve};
use crate::credentials::placeholder;
use crate::credentials::profile::{CredentialName, CredentialRef, Placement, ProfileId};
use crate::credentials::rewrite;
use crate::credentials::secrets::Secret;
use crate::http::body::{self, BodySink, ChannelBody};
use crate::http::body_override::{BodyKind, BodyScan};
use crate::http::form_override::FormKind;
use crate::http::form_scan;
use crate::http::head::{self, BodyFraming};
use crate::http::json_scan;
use crate::http::method_override;
use crate::pipeline::authority::Authority;
use crate::pipeline::target;
use crate::policy::canon;
use crate::tls::upstream::Offer;

/// What a body's readers made of it: the methods found (or the refusal), and the bytes
/// handed back.
type Read = (
    Result<Vec<method_override::Override>, method_override::InvalidOverride>,
    Vec<u8>,
);

/// A body of `kind` fed to its streaming readers (form and JSON, chained) in the pieces
/// `pieces` gives: what they found, and the bytes they handed back.
fn body_streamed<'a>(kind: &BodyKind, pieces: impl Iterator<Item = &'a [u8]>) -> Read {
    let mut out = Vec::new();
    let mut scan = match BodyScan::new(kind) {
        Ok(s) => s,
        Err(e) => return (Err(e), out),
    };
    let mut found = Vec::new();
    let mut released = Vec::new();
    for chunk in pieces {
        if let Err(e) = scan.feed(bytes::Bytes::copy_from_slice(chunk), &mut released) {
            return (Err(e), out);
        }
        found.extend(scan.take_new());
        out.extend(released.drain(..).flat_map(|b| b.to_vec()));
    }
    let ended = scan.finish(&mut released);
    found.extend(scan.take_new());
    out.extend(released.drain(..).flat_map(|b| b.to_vec()));
    (ended.map(|()| found), out)
}

/// `body` in two pieces, cut at `at`.
fn cut_at(body: &[u8], at: usize) -> impl Iterator<Item = &[u8]> {
    let (a, b) = body.split_at(at.min(body.len()));
    [a, b].into_iter()
}

/// Every kind of body a `_method` reader reads, the multipart boundary `pick % 4` dashes:
/// a form alone (urlencoded, multipart), JSON alone, and each form chained with JSON.
fn body_kinds(pick: u8) -> [BodyKind; 5] {
    let multipart = FormKind::Multipart(vec![b'-'; usize::from(pick % 4)]);
    [
        BodyKind {
            form: Some(FormKind::Urlencoded),
            json: false,
        },
        BodyKind {
            form: Some(multipart.clone()),
            json: false,
        },
        BodyKind {
            form: None,
            json: true,
        },
        BodyKind {
            form: Some(FormKind::Urlencoded),
            json: true,
        },
        BodyKind {
            form: Some(multipart),
            json: true,
        },
    ]
}

/// The readers of `body`, as `kind`, read whole: what they found, and the bytes handed back.
fn body_whole(kind: &BodyKind, body: &[u8]) -> Read {
    let whole = crate::http::body_override::from_body(kind, body);
    // The readers alone, as their own `from_body` reads them, agree.
    match kind {
        BodyKind {
            form: Some(form),
            json: false,
        } => {
            assert_eq!(
                whole,
                form_scan::from_body(form, body),
                "the form scan alone"
            );
        }
        BodyKind {
            form: None,
            json: true,
        } => {
            assert_eq!(whole, json_scan::from_body(body), "the JSON scan alone");
        }
        _ => {}
    }
    (whole, body.to_vec())
}

/// The same verdict for `body` read whole and read in `pieces`; a body that is not refused
/// is handed back whole, in order.
fn agrees<'a>(
    kind: &BodyKind,
    body: &[u8],
    whole: &Read,
    pieces: impl Iterator<Item = &'a [u8]>,
    how: std::fmt::Arguments<'_>,
) {
    let (verdict, out) = body_streamed(kind, pieces);
    assert_eq!(verdict, whole.0, "{kind:?} read {how}");
    if verdict.is_ok() {
        assert!(
            out == body,
            "{kind:?} read {how}: the stream handed back other bytes"
        );
    }
}

/// The `_method` readers of request bodies give the same verdict for `body` however it is
/// cut: at every split point in two, and in pieces of every size from 1 to 16 bytes. The
/// body placeholder guard ends a marker at the same byte of the body, and the guard with a
/// reader after it gives the same answer, however the body is cut. `pick` picks the
/// multipart boundary. (The property tests run this; the fuzz target, one cut per input.)
pub fn request_body_splits(pick: u8, body: &[u8]) {
    for kind in body_kinds(pick) {
        let whole = body_whole(&kind, body);
        for at in 0..=body.len() {
            agrees(
                &kind,
                body,
                &whole,
                cut_at(body, at),
                format_args!("cut at {at}"),
            );
        }
        for piece in 1..=16 {
            agrees(
                &kind,
                body,
                &whole,
                body.chunks(piece),
                format_args!("in pieces of {piece}"),
            );
        }
    }
    let whole = marker_end(body.chunks(body.len().max(1)));
    for at in 0..=body.len() {
        assert_eq!(marker_end(cut_at(body, at)), whole, "a guard cut at {at}");
    }
    for piece in [1, 7] {
        assert_eq!(
            marker_end(body.chunks(piece)),
            whole,
            "a guard fed pieces of {piece}"
        );
    }
    for kind in body_kinds(pick) {
        let whole = sink_verdict(&kind, body, body.len().max(1));
        for step in [1, 2, 3, 5, 8, 13] {
            assert_eq!(
                sink_verdict(&kind, body, step),
                whole,
                "{kind:?} pumped {step} bytes at a time"
            );
        }
    }
}

/// Where the body placeholder guard, fed `pieces`, saw a marker end (its last byte's
/// offset in the body).
fn marker_end<'a>(pieces: impl Iterator<Item = &'a [u8]>) -> Option<usize> {
    let mut guard = crate::credentials::BodyGuard::new();
    let mut at = 0;
    for piece in pieces {
        if let Some(before) = guard.feed_until(piece) {
            return Some(at + before);
        }
        at += piece.len();
    }
    None
}

/// A [`body::Hold`] over the `_method` readers, keeping what they found and refused.
#[derive(Debug)]
struct ScanHold {
    scan: BodyScan,
    seen: std::sync::Arc<std::sync::Mutex<Read>>,
}

impl ScanHold {
    fn keep(
        &mut self,
        read: Result<(), method_override::InvalidOverride>,
    ) -> Result<(), body::BodyError> {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Ok(found) = seen.0.as_mut() {
            found.extend(self.scan.take_new());
        }
        read.map_err(|e| {
            seen.0 = Err(e);
            body::BodyError::Held
        })
    }
}

impl body::Hold for ScanHold {
    fn feed(
        &mut self,
        chunk: bytes::Bytes,
        out: &mut Vec<bytes::Bytes>,
    ) -> Result<(), body::BodyError> {
        let read = self.scan.feed(chunk, out);
        self.keep(read)
    }

    fn finish(&mut self, out: &mut Vec<bytes::Bytes>) -> Result<(), body::BodyError> {
        let read = self.scan.finish(out);
        self.keep(read)
    }
}

/// `body` pumped as the proxy pumps a `Content-Length` body, guard on and the readers of
/// `kind` after it, read from the client `step` bytes at a time: how the pump ended, what
/// the readers found or refused, and the bytes that went upstream.
fn sink_verdict(kind: &BodyKind, body: &[u8], step: usize) -> (Result<u64, body::BodyError>, Read) {
    let Ok(scan) = BodyScan::new(kind) else {
        return (Ok(0), (Ok(Vec::new()), Vec::new()));
    };
    let seen = std::sync::Arc::new(std::sync::Mutex::new((Ok(Vec::new()), Vec::new())));
    let hold = ScanHold {
        scan,
        seen: seen.clone(),
    };
    let pumped = block_on(async {
        let (tx, raw) = ChannelBody::channel(None);
        let check = body::BodyCheck::new(true, Some(Box::new(hold)));
        let (upstream, state, _) = body::Checked::new(raw, check, None);
        let collect = async move { upstream.collect().await.map(|c| c.to_bytes().to_vec()) };
        let mut reader = Trickle::new(body, step);
        let mut buf = BytesMut::new();
        let framing = BodyFraming::Length(body.len() as u64);
        let pump = body::pump(&mut reader, &mut buf, framing, BodySink::new(tx));
        let (pumped, sent) = tokio::join!(pump, collect);
        // The check stopped the body (its refusal), else the pump's own result.
        let pumped = match state.stopped() {
            Some(e) => Err(e.clone()),
            None => pumped,
        };
        (pumped, sent.unwrap_or_default())
    });
    let Some((pumped, sent)) = pumped else {
        return (Ok(0), (Ok(Vec::new()), Vec::new()));
    };
    let mut read = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    // What went upstream before a refusal depends on the cut; after none, it is the body.
    read.1 = if pumped.is_ok() { sent } else { Vec::new() };
    (pumped, read)
}

/// A fuzz target's entry point: one input, checked (a failed check panics).
pub type Entry = fn(&[u8]);

/// Every fuzz target: its name (its binary in `fuzz/src/bin/` and its seed directory in
/// `fuzz/seeds/`) and its entry point. The suite replays every seed through this table.
pub const TARGETS: &[(&str, Entry)] = &[
    ("http_head", http_head),
    ("request_body", request_body),
    ("connect_authority", connect_authority),
    ("absolute_target", absolute_target),
    ("credential_rewrite", credential_rewrite),
    ("client_hello", client_hello),
    ("transparent_sniff", transparent_sniff),
    ("websocket_frames", websocket_frames),
    ("proxy_protocol", proxy_protocol),
    ("dns_query", dns_query),
    ("tenants_file", tenants_file),
    ("audit_lines", audit_lines),
    ("policy_yaml", policy_yaml),
    ("provider_profile", provider_profile),
    ("rpc_body", rpc_body),
    ("graphql_body", graphql_body),
    ("sigv4_request", sigv4_request),
];

/// The entry point of the target named `name`.
pub fn target(name: &str) -> Option<Entry> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// Longest head the proxy accepts by default (`--max-head-bytes`).
const MAX_HEAD: usize = 8192;

/// A request head: parsed strictly, and, when it parses, every accessor the pipeline uses;
/// also read through `read_head` (the streaming path, with its size limit) in small pieces.
pub fn http_head(data: &[u8]) {
    if let Ok(h) = head::parse(data) {
        // A parsed head's framing is unambiguous and its names are tokens.
        let _ = h.framing();
        let _ = h.keep_alive();
        let _ = h.connection_tokens();
        let _ = h.header("host");
        assert!(h.headers.iter().all(|(n, _)| !n.is_empty()));
        let _ = method_override::from_headers(
            h.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
        );
    }
    block_on(async {
        let mut reader = Trickle::new(data, 7);
        let mut buf = BytesMut::new();
        while let Ok(h) = head::read_head(&mut reader, &mut buf, MAX_HEAD).await {
            // Pipelined heads: each must be a head `parse` accepts too.
            let _ = h.framing();
        }
    });
}

/// The piece sizes `request_body` pumps a body in.
const PUMP_STEPS: [usize; 5] = [1, 3, 8, 61, 512];

/// A request body: the first byte picks the framing (chunked, or a Content-Length), the rest
/// is the body as sent, decoded through the same pump as the proxy, guard on. The first byte
/// also picks one kind of `_method` reader (form alone, urlencoded or multipart; JSON alone;
/// each form chained with JSON), a piece size and a cut: that kind reads the body whole
/// (agreeing with the reader alone), streamed in those pieces and cut in two there, and each
/// must give the same verdict as the whole, and the stream must hand every byte back, in
/// order, when it finds no refusal. The guard with that kind's readers after it gives the same
/// answer pumped whole and in pieces. (One kind and one cut per input: the fuzzer varies the
/// first byte, and every kind at every cut costs a hundred times the time; the property tests
/// stream every kind at every cut, `request_body_splits`.)
pub fn request_body(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let piece = usize::from(pick % 13) + 1;
    let at = usize::from(pick).min(rest.len());
    let kinds = body_kinds(pick);
    let kind = &kinds[usize::from(pick >> 4) % kinds.len()];
    let whole = body_whole(kind, rest);
    agrees(
        kind,
        rest,
        &whole,
        rest.chunks(piece),
        format_args!("in pieces of {piece}"),
    );
    agrees(
        kind,
        rest,
        &whole,
        cut_at(rest, at),
        format_args!("cut at {at}"),
    );
    // The pumps go through the proxy's async body path; a step of one byte is picked one
    // time in five, the rest are coarser so that an input costs what its parsing costs.
    let step = PUMP_STEPS[usize::from(pick % 5)];
    assert_eq!(
        sink_verdict(kind, rest, step),
        sink_verdict(kind, rest, rest.len().max(1)),
        "{kind:?} pumped in pieces of {step}"
    );
    assert_eq!(
        marker_end(rest.chunks(piece)),
        marker_end(cut_at(rest, rest.len())),
        "a guard fed pieces of {piece}"
    );
    let framing = match pick % 4 {
        0 | 1 => BodyFraming::Chunked,
        2 => BodyFraming::Length(u64::from(pick)),
        _ => BodyFraming::Length(rest.len() as u64),
    };
    block_on(async {
        let (tx, raw) = ChannelBody::channel(None);
        let (body, _, _) = body::Checked::new(raw, body::BodyCheck::new(true, None), None);
        let collect = async move { body.collect().await.map(|c| c.to_bytes().len()) };
        let mut reader = Trickle::new(rest, step);
        let mut buf = BytesMut::new();
        let pump = body::pump(&mut reader, &mut buf, framing, BodySink::new(tx));
        let (pumped, collected) = tokio::join!(pump, collect);
        if let (Ok(n), Ok(got)) = (pumped, collected) {
            // What was decoded is what went upstream, and no more than was sent.
            assert_eq!(n, got as u64);
            assert!(got <= rest.len());
        }
    });
}

/// A `CONNECT` authority, then the host normalisation the pipeline applies to it.
pub fn connect_authority(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(a) = Authority::parse_connect(text) {
        assert!(a.port() != 0 && !a.host().is_empty());
        let _ = canon::normalize_host(a.host());
    }
}

/// A PROXY protocol header (v1 or v2) as a trusted balancer's connection starts, and the
/// recognition of one on any client's connection: a header that parses is within the bytes
/// given and the length allowed; every cut of the input before its end waits for more
/// (never a different answer), and every cut after it gives the same answer.
pub fn proxy_protocol(data: &[u8]) {
    use crate::proxy_protocol::{MAX_HEADER, is_header, parse};
    let _ = is_header(data);
    let Ok(Some((carried, len))) = parse(data) else {
        return;
    };
    assert!(len <= data.len() && len <= MAX_HEADER);
    for cut in 1..len {
        assert_eq!(parse(&data[..cut]), Ok(None), "cut at {cut} of {len}");
    }
    assert_eq!(parse(&data[..len]), Ok(Some((carried, len))));
}

/// An absolute-form target (`http://host[:port]/path?query`), then what the pipeline does
/// with it: host normalisation, the canonical path, the `_method` parameter, and the tunnel
/// authority check against the parsed host.
pub fn absolute_target(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = target::host_matches(data, &Authority::new("api.example.com", 443), 443);
    let _ = method_override::from_query(text);
    if let Ok(a) = target::parse_absolute(text) {
        let _ = canon::normalize_host(a.authority.host());
        if let Ok(t) = canon::canonicalize(a.path_and_query.as_bytes(), false) {
            assert!(t.path.starts_with('/'));
            let _ = t.to_origin_form();
        }
        let _ = target::host_matches(a.authority.host().as_bytes(), &a.authority, 80);
    }
}

/// Credential placeholders in a request head: the marker scan, the placeholder finder, and
/// the all-or-nothing rewrite with its percent and `Basic` decoding. The first byte splits
/// the rest into a target and header values (one per line).
pub fn credential_rewrite(data: &[u8]) {
    let _ = placeholder::find_in_bytes(data);
    let _ = placeholder::contains_marker(data);
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(rest.len());
    let (target, values) = rest.split_at(at);
    let mut target = String::from_utf8_lossy(target).into_owned();
    let mut headers: Vec<(String, Vec<u8>)> = values
        .split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, v)| {
            let name = [
                "authorization",
                "x-api-key",
                "cookie",
                "proxy-authorization",
            ][i % 4];
            (name.to_owned(), v.to_vec())
        })
        .collect();
    let before = (target.clone(), headers.clone());
    let marked = rewrite::head_has_marker(&target, &headers);
    match rewrite::rewrite_request(&mut target, &mut headers, &FuzzResolver::new()) {
        Ok(injected) => {
            // Nothing is injected where the cheap scan saw no marker.
            assert!(marked || injected.is_empty());
        }
        // All or nothing: a refused head is left as it was.
        Err(_) => assert_eq!((target, headers), before),
    }
}

/// The first bytes of an inspected tunnel as a ClientHello, read by the acceptor the proxy
/// uses, and the SNI and ALPN it takes from it.
pub fn client_hello(data: &[u8]) {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut input = data;
    while !input.is_empty() {
        match acceptor.read_tls(&mut input) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let hello = accepted.client_hello();
                let _ = hello.server_name().map(str::to_ascii_lowercase);
                let _ = hello.alpn().map_or(Offer::None, Offer::from_client);
                return;
            }
            Ok(None) => {}
            Err(_) => return,
        }
    }
}

/// Resolves every key to one secret, except keys starting with `U` (unknown) and `O`
/// (outside their binding), so the rewrite takes each of its paths.
struct FuzzResolver {
    secret: Option<Secret>,
    credential: Option<CredentialRef>,
    /// One of each placement, chosen by the key's second byte.
    placements: [Placement; 5],
}

impl FuzzResolver {
    fn new() -> Self {
        let credential = ProfileId::new("fuzz")
            .zip(CredentialName::new("key"))
            .map(|(profile, name)| CredentialRef { profile, name });
        Self {
            secret: Secret::new("fuzz-secret-value".to_owned()).ok(),
            credential,
            placements: [
                Placement::AnyHeader,
                Placement::Header("authorization".to_owned()),
                Placement::Query("key".to_owned()),
                Placement::Path(None),
                Placement::Path(Some("/v1/{credential}".to_owned())),
            ],
        }
    }
}

impl Resolve for FuzzResolver {
    fn resolve(&self, key: &str) -> Resolution<'_> {
        let (Some(secret), Some(credential)) = (&self.secret, &self.credential) else {
            return Resolution::Unknown;
        };
        match key.as_bytes().first() {
            Some(b'U') => Resolution::Unknown,
            Some(b'O') => Resolution::OutsideBinding {
                credential: credential.clone(),
                reason: crate::credentials::binding::Mismatch::Endpoint,
            },
            Some(b'T') => Resolution::RequiresTls {
                credential: credential.clone(),
            },
            _ => Resolution::Allow {
                secret,
                credential: credential.clone(),
                placement: &self.placements
                    [usize::from(key.as_bytes().get(1).copied().unwrap_or(0)) % 5],
            },
        }
    }
}

/// A reader that hands out `data` at most `step` bytes at a time, as a slow client would.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl<'a> Trickle<'a> {
    fn new(data: &'a [u8], step: usize) -> Self {
        Self { data, step }
    }
}

impl tokio::io::AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = self.step.min(self.data.len()).min(buf.remaining());
        let (now, later) = self.data.split_at(n);
        buf.put_slice(now);
        self.data = later;
        std::task::Poll::Ready(Ok(()))
    }
}

thread_local! {
    /// One current-thread runtime per fuzzing thread: building one per input would cost more
    /// than the parsing it drives.
    static RUNTIME: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

fn block_on<F: Future>(future: F) -> Option<F::Output> {
    RUNTIME.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .ok();
        }
        slot.as_ref().map(|rt| rt.block_on(future))
    })
}

/// The first bytes of a redirected connection as the transparent listener reads them (the
/// ClientHello's SNI or the request head's `Host`, `crate::transparent::sniff`), then the
/// anti-forgery rule on what they claim. Every byte read is kept for replay, in order, and a
/// claimed name never stands for an address it does not resolve to.
pub fn transparent_sniff(data: &[u8]) {
    use crate::transparent::sniff::{self, Hello, SniffLimits};
    use crate::transparent::target::{TargetInput, decide_target};
    let limits = SniffLimits {
        timeout: std::time::Duration::from_millis(20),
        max_bytes: MAX_HEAD,
    };
    let mut reader = data;
    let Some(Ok(sniffed)) = block_on(sniff::sniff(&mut reader, limits)) else {
        return;
    };
    assert!(data.starts_with(&sniffed.replay));
    let claimed = match &sniffed.hello {
        Hello::Tls { sni: Some(n) } | Hello::Http { host: Some(n) } => Some(n.clone()),
        _ => None,
    };
    if let Some(name) = &claimed {
        assert_eq!(canon::normalize_host(name).as_deref(), Ok(name.as_str()));
    }
    let original = std::net::SocketAddr::from(([198, 51, 100, 7], 443));
    let elsewhere = [std::net::IpAddr::from([203, 0, 113, 9])];
    let verdict = decide_target(&TargetInput {
        original,
        own_listeners: &[],
        hello: &sniffed.hello,
        needs_name: true,
        resolved: &elsewhere,
        dns_names: &[],
    });
    // A claim that resolves elsewhere is refused; only an IP-literal `Host` equal to the
    // original address could stand.
    if let (Some(name), Ok(t)) = (&claimed, &verdict) {
        assert_eq!(name.as_str(), "198.51.100.7", "{t:?}");
    }
}

/// What the frame scrubber writes for an upstream's bytes read in `pieces`, and the error
/// that ended the relay, if one did.
fn ws_scrubbed<'a>(
    pieces: impl Iterator<Item = &'a [u8]>,
) -> (
    Vec<u8>,
    Option<crate::pipeline::transports::websocket::frame::FrameError>,
) {
    let mut scrubber =
        crate::pipeline::transports::websocket::scrub::FrameScrubber::new(ws_scrub_set());
    let mut out = Vec::new();
    for piece in pieces {
        if let Err(e) = scrubber.push(piece, &mut out) {
            return (out, Some(e));
        }
    }
    (out, None)
}

/// The frame scrubber writes the same frames, and stops at the same error, for an
/// upstream's bytes however they are cut: at every split point in two, and in pieces of
/// every size from 1 to 16 bytes. (The property tests run this; the fuzz target, one cut
/// per input.)
pub fn websocket_frames_splits(data: &[u8]) {
    let whole = ws_scrubbed(cut_at(data, data.len()));
    for at in 0..=data.len() {
        assert_eq!(ws_scrubbed(cut_at(data, at)), whole, "frames cut at {at}");
    }
    for piece in 1..=16 {
        assert_eq!(
            ws_scrubbed(data.chunks(piece)),
            whole,
            "frames read {piece} bytes at a time"
        );
    }
}

/// The secret the WebSocket target scrubs (short, so mutations meet it often).
pub const WS_SECRET: &str = "Zq7SECRET";

/// What `websocket_frames` scrubs: [`WS_SECRET`], bound to `ws.example.com:443`.
fn ws_scrub_set() -> &'static crate::credentials::ScrubSet {
    static SET: std::sync::OnceLock<crate::credentials::ScrubSet> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        let source = crate::policy::Source {
            name: "ws.yaml".into(),
            text: "id: ws\ncredentials:\n  - {name: key, env_vars: [WS_KEY]}\nendpoints:\n  - {host: ws.example.com, port: 443}\n".into(),
        };
        let Ok(loaded) = crate::credentials::profile::load(&[source]) else {
            panic!("the fixed profile loads");
        };
        let secrets = crate::credentials::SecretStore::load(
            &loaded.profiles,
            |_| Some(WS_SECRET.to_string()),
            None,
        );
        let Ok(secrets) = secrets else {
            panic!("the fixed secret loads");
        };
        crate::credentials::Bindings::new(loaded.profiles, secrets.store)
            .endpoint_secrets(&Authority::new("ws.example.com", 443))
    })
}

/// What a hostile upstream sends after a WebSocket `101` on a credentialed endpoint: the
/// first byte picks the read size, the rest goes through the frame scrubber as the proxy
/// reads it. What comes out (until the first error) is whole, valid server frames, and no
/// control frame or message a client reassembles from them holds the secret.
pub fn websocket_frames(data: &[u8]) {
    use crate::pipeline::transports::websocket::frame::{self as ws_frame, OpCode};
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let piece = usize::from(pick % 32) + 1;
    let (out, ended) = ws_scrubbed(rest.chunks(piece));
    let whole = ws_scrubbed(cut_at(rest, rest.len()));
    assert_eq!(
        (&out, &ended),
        (&whole.0, &whole.1),
        "frames read {piece} bytes at a time"
    );
    let at = usize::from(pick).min(rest.len());
    assert_eq!(
        ws_scrubbed(cut_at(rest, at)),
        (out.clone(), ended),
        "frames cut at {at}"
    );
    let holds_secret = |b: &[u8]| {
        b.windows(WS_SECRET.len())
            .any(|w| w == WS_SECRET.as_bytes())
    };
    let mut bytes = out.as_slice();
    let mut message: Option<Vec<u8>> = None;
    while !bytes.is_empty() {
        let (h, n) = match ws_frame::parse(bytes) {
            Ok(Some(frame)) => frame,
            other => panic!("sluice wrote an invalid frame: {other:?}"),
        };
        let len = usize::try_from(h.len).unwrap_or(usize::MAX);
        let end = n.saturating_add(len);
        let Some(payload) = bytes.get(n..end) else {
            panic!("sluice wrote a partial frame");
        };
        bytes = &bytes[end..];
        match h.opcode {
            OpCode::Continuation => match message.as_mut() {
                Some(m) => m.extend_from_slice(payload),
                None => panic!("sluice wrote a continuation outside a message"),
            },
            OpCode::Text | OpCode::Binary => {
                assert!(message.is_none(), "sluice wrote a message inside another");
                message = Some(payload.to_vec());
            }
            OpCode::Close | OpCode::Ping | OpCode::Pong => {
                assert!(h.fin && payload.len() <= ws_frame::MAX_CONTROL);
                assert!(!holds_secret(payload), "a control frame holds the secret");
                continue;
            }
        }
        if h.fin {
            let whole = message.take().unwrap_or_default();
            assert!(!holds_secret(&whole), "a message holds the secret");
        }
    }
}

/// The policy DNS every `dns_query` input is asked of: one entry allowing
/// `a.example.com`, answered from a fixed override (no lookup leaves the process), no audit
/// log, no rate limit a fuzzer reaches.
fn dns_server() -> &'static crate::dns::server::DnsServer {
    static SERVER: std::sync::OnceLock<crate::dns::server::DnsServer> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| {
        use crate::dns::answer::Responder;
        let source = crate::policy::Source {
            name: "dns.yaml".into(),
            text: "version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - { host: a.example.com, port: 443 }\n      - { host: \"*.wild.example\", port: 443 }\n    binaries:\n      - { path: /usr/bin/curl }\n".into(),
        };
        let Ok(loaded) = crate::policy::load(&[source], crate::policy::Compat::Strict) else {
            panic!("the fixed policy loads");
        };
        let policy = std::sync::Arc::new(loaded.policy);
        let names = ["a.example.com=93.184.215.7".to_string(), "x.wild.example=10.0.0.1".to_string()];
        let Ok(overrides) = sluice_resolver::Overrides::from_args(&names) else {
            panic!("the fixed overrides parse");
        };
        crate::dns::server::DnsServer {
            responder: Responder {
                policy: std::sync::Arc::new(move || std::sync::Arc::clone(&policy)),
                resolver: sluice_resolver::Resolver::overrides_only(overrides),
                compat: crate::policy::Compat::Strict,
                vet: sluice_resolver::VetOptions::default(),
                table: std::sync::Arc::new(crate::dns::table::HandedOut::default()),
                ttl: std::time::Duration::from_secs(30),
            },
            audit: std::sync::Arc::new(crate::audit::AuditSink::disabled()),
            limit: crate::dns::limit::RateLimit::new(u32::MAX),
        }
    })
}

/// A message to the policy DNS (the first byte picks UDP or TCP), through the server's
/// whole answer path. What comes back, if anything, is a DNS response with the question's
/// id, no larger over UDP than the client may take.
pub fn dns_query(data: &[u8]) {
    use crate::dns::server::{UDP_EDNS_MAX, UDP_PLAIN_MAX};
    use hickory_proto::op::{Message, MessageType};
    let Some((&pick, packet)) = data.split_first() else {
        return;
    };
    let udp = pick & 1 == 0;
    let Some(reply) = block_on(dns_server().answer_loopback(packet, udp)).flatten() else {
        return;
    };
    if udp {
        assert!(
            reply.len() <= usize::from(UDP_EDNS_MAX).max(UDP_PLAIN_MAX),
            "a UDP reply of {} bytes",
            reply.len()
        );
    }
    let m = match Message::from_vec(&reply) {
        Ok(m) => m,
        Err(e) => panic!("sluice sent a reply that does not parse: {e}"),
    };
    assert_eq!(m.metadata.message_type, MessageType::Response);
    assert!(packet.len() >= 2 && m.metadata.id == u16::from_be_bytes([packet[0], packet[1]]));
}
