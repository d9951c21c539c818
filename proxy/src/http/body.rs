//! Request bodies from an HTTP/1 client, streamed with backpressure.
//!
//! Owns the decoding of `Content-Length` and `chunked` framing (strictly: hex sizes, CRLF
//! after each chunk, bounded size lines and trailers) and the hand-off to the upstream
//! client: the connection task decodes frames and sends them through a bounded channel to a
//! `ChannelBody`, which hyper polls. Nothing is buffered beyond one frame in flight.
//! Every streamed request body, HTTP/1.1's channel and HTTP/2's stream alike, is then
//! judged by one type on its way upstream: [`Checked`], through the [`BodyCheck`].
//!
//! Every read of the body from the client is paced ([`BodyPace`]): a client that goes silent,
//! or trickles its body slower than a minimum rate, is cut off, while a stream that keeps
//! arriving at that rate may last as long as it likes. Time spent waiting for the upstream to
//! take a frame (backpressure) is not the client's and does not count.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, oneshot};

use super::head::BodyFraming;
use crate::http::respond::Code;

/// Longest chunk-size line or trailer line accepted.
const MAX_LINE: usize = 4096;
/// Most trailer bytes accepted in total.
const MAX_TRAILERS: usize = 16 * 1024;
/// Largest frame handed to the upstream at once.
const FRAME: usize = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BodyError {
    #[error("client closed the connection in the middle of the request body")]
    Truncated,
    #[error("malformed chunked encoding: {0}")]
    BadChunk(&'static str),
    #[error("read error: {0}")]
    Io(String),
    /// The upstream side stopped reading (it failed or answered early).
    #[error("upstream stopped reading the request body")]
    Abandoned,
    /// The body carries a credential placeholder to an endpoint that may not receive one
    /// unresolved (spec §3.5); it was stopped before that chunk went upstream.
    #[error("a credential placeholder in the request body would reach the upstream unresolved")]
    Placeholder,
    /// The chunked trailers carry a credential placeholder; they were not sent upstream.
    #[error("a credential placeholder in the request trailers would reach the upstream unresolved")]
    PlaceholderInTrailers,
    /// The client went silent, or sent its body slower than the minimum rate.
    #[error("request body too slow: {0}")]
    TooSlow(String),
    /// A held part of the body was refused (a form field names a method the policy refuses,
    /// or one that is not a method); it never went upstream. The [`Hold`] that refused it
    /// keeps the refusal.
    #[error("a held part of the request body was refused")]
    Held,
}

impl BodyError {
    /// The answer to a client whose body failed: 408 when it was too slow, else 400.
    pub(crate) fn refusal(&self) -> crate::http::respond::Refusal {
        use crate::http::respond::Refusal;
        match self {
            Self::TooSlow(_) => Refusal::new(Code::RequestTimeout, self.to_string()),
            Self::PlaceholderInTrailers => Refusal::new(
                Code::CredentialInTrailers,
                "a credential placeholder in the request trailers would reach the upstream unresolved; sluice swaps placeholders in request headers only",
            ),
            Self::Held => Refusal::new(Code::InvalidMethodOverride, self.to_string()),
            _ => Refusal::new(Code::BadRequest, format!("request body: {self}")),
        }
    }
}

/// A step that sees a request body's payload before it goes upstream and may hold some of it
/// back until it is judged (a form's `_method` fields): both transports run it, after the
/// placeholder guard, on the same bytes.
pub(crate) trait Hold: Send + Sync + std::fmt::Debug {
    /// The next chunk: what may go upstream now is pushed to `out`, in order.
    /// [`BodyError::Held`] stops the body (the step keeps why).
    fn feed(&mut self, chunk: Bytes, out: &mut Vec<Bytes>) -> Result<(), BodyError>;
    /// The body's payload ended: what is still held is pushed to `out`, if it may go.
    fn finish(&mut self, out: &mut Vec<Bytes>) -> Result<(), BodyError>;
}

/// How fast a client must send its request body. Each wait for the client is at most `idle`;
/// in all, the client may keep sluice waiting `idle` plus one second per `min_rate` bytes it
/// sent, so a trickle (a byte a second) is cut after about `idle`, and a stream averaging at
/// least `min_rate` bytes a second never is. `min_rate` 0 leaves only the idle bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyPace {
    pub idle: Duration,
    pub min_rate: u64,
}

impl Default for BodyPace {
    fn default() -> Self {
        BodyPace {
            idle: Duration::from_secs(30),
            min_rate: 256,
        }
    }
}

/// The client's side of one body so far: how long sluice waited for it, how much it sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PaceState {
    waited: Duration,
    received: u64,
}

impl PaceState {
    /// How long the next read may wait, or `None` when the client has used up its time.
    fn allowance(&self, pace: BodyPace) -> Option<Duration> {
        if pace.min_rate == 0 {
            return Some(pace.idle);
        }
        let earned = Duration::from_secs_f64(self.received as f64 / pace.min_rate as f64);
        let left = pace.idle.saturating_add(earned).checked_sub(self.waited)?;
        (!left.is_zero()).then_some(left.min(pace.idle))
    }

    fn record(&mut self, waited: Duration, bytes: usize) {
        self.waited = self.waited.saturating_add(waited);
        self.received = self.received.saturating_add(bytes as u64);
    }
}

/// The pacing of one request body, over HTTP/1 or HTTP/2: the caller times each wait for
/// the client within [`Pacer::allowance`] and reports it with [`Pacer::record`]; waits on
/// the upstream are not the client's and are never recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pacer {
    pace: BodyPace,
    state: PaceState,
}

impl Pacer {
    pub(crate) fn new(pace: BodyPace) -> Pacer {
        Pacer {
            pace,
            state: PaceState::default(),
        }
    }

    /// How long the next wait for the client may last, or [`BodyError::TooSlow`] when the
    /// client has used up its time.
    pub(crate) fn allowance(&self) -> Result<Duration, BodyError> {
        self.state
            .allowance(self.pace)
            .ok_or_else(|| self.too_slow())
    }

    /// One wait for the client that ended with `bytes` of body (0 when it timed out).
    pub(crate) fn record(&mut self, waited: Duration, bytes: usize) {
        self.state.record(waited, bytes);
    }

    /// The error for a client that did not keep up.
    pub(crate) fn too_slow(&self) -> BodyError {
        BodyError::TooSlow(format!(
            "{} bytes in {:.1} s of waiting for the client (at most {} s silent, at least {} bytes/s)",
            self.state.received,
            self.state.waited.as_secs_f64(),
            self.pace.idle.as_secs(),
            self.pace.min_rate
        ))
    }
}

/// What a streamed request body passes on its way upstream, the same over HTTP/1.1
/// ([`BodySink`]) and HTTP/2 (`pipeline::transports::http2`): the guard that stops it at the first
/// credential placeholder (across chunk boundaries), then the [`Hold`]; and its trailers,
/// which never carry a placeholder (they are headers, and only the head's are swapped).
/// The one place a streamed body is judged.
#[derive(Debug, Default)]
pub(crate) struct BodyCheck {
    guard: Option<crate::credentials::BodyGuard>,
    /// The same guard over the joined data of an `aws-chunked` body.
    aws: Option<crate::credentials::aws_chunks::AwsChunks>,
    hold: Option<Box<dyn Hold>>,
}

impl BodyCheck {
    /// Guarded when `guard`, held by `hold` when there is one.
    pub(crate) fn new(guard: bool, hold: Option<Box<dyn Hold>>) -> BodyCheck {
        BodyCheck {
            guard: guard.then(crate::credentials::BodyGuard::new),
            aws: None,
            hold,
        }
    }

    /// A guarded body framed as `aws-chunked` is also scanned as its chunks join.
    pub(crate) fn aws_chunked(mut self, framed: bool) -> BodyCheck {
        if framed && self.guard.is_some() {
            self.aws = Some(crate::credentials::aws_chunks::AwsChunks::default());
        }
        self
    }

    /// A chunk of payload: what may go upstream now is pushed to `out`.
    pub(crate) fn data(&mut self, chunk: Bytes, out: &mut Vec<Bytes>) -> Result<(), BodyError> {
        let raw = self.guard.as_mut().and_then(|g| g.feed_until(&chunk));
        let joined = self.aws.as_mut().and_then(|a| a.feed_until(&chunk));
        let hit = match (raw, joined) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(before) = hit {
            // The hold reads the bytes before the marker first: what it refuses there is
            // the answer, as it would be had the body been cut at the marker.
            if let Some(hold) = self.hold.as_mut() {
                hold.feed(chunk.slice(..before), &mut Vec::new())?;
            }
            return Err(BodyError::Placeholder);
        }
        match self.hold.as_mut() {
            Some(hold) => hold.feed(chunk, out),
            None => {
                out.push(chunk);
                Ok(())
            }
        }
    }

    /// The payload ended: what the hold still has is pushed to `out`, if it may go.
    pub(crate) fn end(&mut self, out: &mut Vec<Bytes>) -> Result<(), BodyError> {
        match self.hold.take() {
            Some(mut hold) => hold.finish(out),
            None => Ok(()),
        }
    }

    /// Whether something may still be held back (the payload has not ended).
    pub(crate) fn holding(&self) -> bool {
        self.hold.is_some()
    }

    /// The body's trailers: refused when one holds a placeholder.
    pub(crate) fn trailers(trailers: &HeaderMap) -> Result<(), BodyError> {
        let marked = trailers.iter().any(|(n, v)| {
            crate::credentials::placeholder::contains_marker(n.as_str().as_bytes())
                || crate::credentials::placeholder::contains_marker(v.as_bytes())
        });
        if marked {
            return Err(BodyError::PlaceholderInTrailers);
        }
        Ok(())
    }
}

/// Where decoded body bytes go: the channel to the upstream, as they arrive (the
/// [`BodyCheck`] is [`Checked`]'s, on the other side of the channel), each read paced.
#[derive(Debug)]
pub(crate) struct BodySink {
    tx: mpsc::Sender<Result<Frame<Bytes>, BodyError>>,
    pacer: Pacer,
}

impl BodySink {
    /// A sink paced by [`BodyPace::default`]; see [`BodySink::paced`].
    pub(crate) fn new(tx: mpsc::Sender<Result<Frame<Bytes>, BodyError>>) -> BodySink {
        BodySink {
            tx,
            pacer: Pacer::new(BodyPace::default()),
        }
    }

    /// The same sink with the operator's pace (`--body-timeout`, `--body-min-rate`).
    pub(crate) fn paced(mut self, pace: BodyPace) -> BodySink {
        self.pacer = Pacer::new(pace);
        self
    }

    async fn data(&mut self, chunk: Bytes) -> Result<(), BodyError> {
        send(&self.tx, Frame::data(chunk)).await
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body on its way upstream, over HTTP/1.1 and HTTP/2 alike: [`Checked`] as it
/// streams, or whole.
pub(crate) type UpBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// What a [`Checked`] body tells the exchange that answers for it: how many bytes arrived,
/// and why it stopped, if it did.
#[derive(Debug, Default)]
pub(crate) struct BodyState {
    received: AtomicU64,
    stopped: OnceLock<BodyError>,
}

impl BodyState {
    /// Body bytes received from the client so far.
    pub(crate) fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Why the body stopped: a placeholder in it or its trailers, a held part refused, a
    /// client too slow, bad framing.
    pub(crate) fn stopped(&self) -> Option<&BodyError> {
        self.stopped.get()
    }
}

type Polled = Poll<Option<Result<Frame<Bytes>, BoxError>>>;

/// A client's request body on its way upstream, over HTTP/1.1 (the frames [`pump`] decodes)
/// and HTTP/2 (hyper's stream) alike: through the [`BodyCheck`] (the placeholder guard, the
/// hold, the trailers), counted, and told (`sent`) when it has ended or stopped. The one
/// type a streamed body passes. Paced here when its wire is not paced at its reads
/// (HTTP/2: only time spent waiting for the client counts, since hyper polls the body only
/// when the upstream stream has room for it).
#[derive(Debug)]
pub(crate) struct Checked<B> {
    inner: B,
    check: BodyCheck,
    /// What the check let go and is not sent yet, then the trailers it waited for.
    ready: VecDeque<Frame<Bytes>>,
    state: Arc<BodyState>,
    pacer: Option<Pacer>,
    /// The wait for the client under way: when it began, and when its allowance runs out.
    waiting: Option<(tokio::time::Instant, Pin<Box<tokio::time::Sleep>>)>,
    /// Told (or dropped) when the body has ended or stopped: the upstream timeout counts
    /// from then.
    sent: Option<oneshot::Sender<()>>,
}

impl<B> Checked<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    /// `inner` through `check`, paced by `pace` when given; with what it reports, and the
    /// receiver told when it has ended or stopped.
    pub(crate) fn new(
        inner: B,
        check: BodyCheck,
        pace: Option<BodyPace>,
    ) -> (Checked<B>, Arc<BodyState>, oneshot::Receiver<()>) {
        let state = Arc::new(BodyState::default());
        let (sent, told) = oneshot::channel();
        let checked = Checked {
            inner,
            check,
            ready: VecDeque::new(),
            state: Arc::clone(&state),
            pacer: pace.map(Pacer::new),
            waiting: None,
            sent: Some(sent),
        };
        (checked, state, told)
    }

    /// The check the body passes from now on (set once the request is judged).
    pub(crate) fn checking(&mut self, check: BodyCheck) {
        self.check = check;
    }

    /// Stops the body for `e` (kept, for its refusal); the upstream stream is reset.
    fn stop(&mut self, e: BodyError) -> Polled {
        self.sent = None;
        let _ = self.state.stopped.set(e.clone());
        Poll::Ready(Some(Err(Box::new(e))))
    }

    /// Passes a frame from the client through the check into `ready`.
    fn check(&mut self, frame: Frame<Bytes>) -> Result<(), BodyError> {
        let mut out = Vec::new();
        match frame.into_data() {
            Ok(data) => self.check.data(data, &mut out)?,
            Err(trailers) => {
                if let Some(t) = trailers.trailers_ref() {
                    BodyCheck::trailers(t)?;
                }
                // The payload ended: what is held goes (if it may) before the trailers.
                self.check.end(&mut out)?;
                self.ready.extend(out.drain(..).map(Frame::data));
                self.ready.push_back(trailers);
            }
        }
        self.ready.extend(out.into_iter().map(Frame::data));
        Ok(())
    }

    /// The client's body has nothing yet: the wait for it is paced (when this body paces).
    fn pending(&mut self, cx: &mut Context<'_>) -> Polled {
        let Some(pacer) = self.pacer else {
            return Poll::Pending;
        };
        if self.waiting.is_none() {
            let Ok(allowance) = pacer.allowance() else {
                return self.stop(pacer.too_slow());
            };
            let now = tokio::time::Instant::now();
            self.waiting = Some((now, Box::pin(tokio::time::sleep_until(now + allowance))));
        }
        if let Some((since, sleep)) = self.waiting.as_mut()
            && sleep.as_mut().poll(cx).is_ready()
        {
            let waited = since.elapsed();
            self.waiting = None;
            let slow = self.pacer.as_mut().map(|p| {
                p.record(waited, 0);
                p.too_slow()
            });
            return self.stop(slow.unwrap_or(BodyError::TooSlow(String::new())));
        }
        Poll::Pending
    }
}

impl<B> Body for Checked<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Poll::Ready(Some(Ok(frame)));
            }
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => frame,
                Poll::Ready(Some(Err(e))) => {
                    let e: BoxError = e.into();
                    // The wire's own failure of the body (HTTP/1.1's framing, its pace).
                    if let Some(b) = e.downcast_ref::<BodyError>() {
                        let _ = self.state.stopped.set(b.clone());
                    }
                    self.sent = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    if !self.check.holding() {
                        self.sent = None;
                        return Poll::Ready(None);
                    }
                    let mut out = Vec::new();
                    if let Err(e) = self.check.end(&mut out) {
                        return self.stop(e);
                    }
                    self.ready.extend(out.into_iter().map(Frame::data));
                    continue;
                }
                Poll::Pending => return self.pending(cx),
            };
            let this = &mut *self;
            let waited = this
                .waiting
                .take()
                .map_or(Duration::ZERO, |(since, _)| since.elapsed());
            let n = frame.data_ref().map_or(0, Buf::remaining);
            if let Some(p) = this.pacer.as_mut() {
                p.record(waited, n);
            }
            this.state.received.fetch_add(n as u64, Ordering::Relaxed);
            if let Err(e) = this.check(frame) {
                return this.stop(e);
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ready.is_empty() && !self.check.holding() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The request body as hyper sees it: frames arriving from the connection task.
#[derive(Debug)]
pub struct ChannelBody {
    rx: Option<mpsc::Receiver<Result<Frame<Bytes>, BodyError>>>,
    exact: Option<u64>,
}

impl ChannelBody {
    /// A body and the sender the connection task feeds. `exact` is the Content-Length.
    pub(crate) fn channel(
        exact: Option<u64>,
    ) -> (mpsc::Sender<Result<Frame<Bytes>, BodyError>>, ChannelBody) {
        let (tx, rx) = mpsc::channel(2);
        (
            tx,
            ChannelBody {
                rx: Some(rx),
                exact,
            },
        )
    }

    pub(crate) fn empty() -> ChannelBody {
        ChannelBody {
            rx: None,
            exact: Some(0),
        }
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.rx.as_mut() {
            None => Poll::Ready(None),
            Some(rx) => rx.poll_recv(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rx.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.exact {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// Reads the body described by `framing` from `reader` (after the bytes already in `buf`)
/// and sends it frame by frame. Returns the number of body bytes (payload, not framing).
/// Bytes after the body stay in `buf` for the next request.
pub(crate) async fn pump<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    framing: BodyFraming,
    mut sink: BodySink,
) -> Result<u64, BodyError> {
    let result = match framing {
        BodyFraming::None => Ok(0),
        BodyFraming::Length(n) => pump_length(reader, buf, n, &mut sink).await,
        BodyFraming::Chunked => pump_chunked(reader, buf, &mut sink).await,
    };
    if let Err(e) = &result {
        // Tell the upstream side the body is broken, so it does not wait forever.
        let _ = sink.tx.send(Err(e.clone())).await;
    }
    result
}

/// Reads more of the body from the client, within what its pace allows.
async fn fill<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    sink: &mut BodySink,
) -> Result<(), BodyError> {
    let allowance = sink.pacer.allowance()?;
    // A new frame's room only when a quarter of one is left: reserving a whole frame on
    // every read made a client that sends a byte at a time cost a 64 KiB buffer a byte,
    // whenever what was read before still went upstream.
    if buf.capacity() - buf.len() < FRAME / 4 {
        buf.reserve(FRAME);
    }
    let started = tokio::time::Instant::now();
    let read = tokio::time::timeout(allowance, reader.read_buf(buf)).await;
    let waited = started.elapsed();
    match read {
        Err(_) => {
            sink.pacer.record(waited, 0);
            Err(sink.pacer.too_slow())
        }
        Ok(Ok(0)) => Err(BodyError::Truncated),
        Ok(Ok(n)) => {
            sink.pacer.record(waited, n);
            Ok(())
        }
        Ok(Err(e)) => Err(BodyError::Io(e.to_string())),
    }
}

async fn send(
    tx: &mpsc::Sender<Result<Frame<Bytes>, BodyError>>,
    frame: Frame<Bytes>,
) -> Result<(), BodyError> {
    tx.send(Ok(frame)).await.map_err(|_| BodyError::Abandoned)
}

async fn pump_length<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    mut remaining: u64,
    sink: &mut BodySink,
) -> Result<u64, BodyError> {
    let total = remaining;
    while remaining > 0 {
        if buf.is_empty() {
            fill(reader, buf, sink).await?;
        }
        let take = usize::try_from(remaining)
            .unwrap_or(usize::MAX)
            .min(buf.len())
            .min(FRAME);
        let chunk = buf.split_to(take).freeze();
        remaining -= take as u64;
        sink.data(chunk).await?;
    }
    Ok(total)
}

/// Reads one CRLF-terminated line (without the CRLF).
async fn line<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    sink: &mut BodySink,
) -> Result<Bytes, BodyError> {
    loop {
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            if i == 0 || buf[i - 1] != b'\r' {
                return Err(BodyError::BadChunk("bare LF"));
            }
            let l = buf.split_to(i + 1).freeze();
            return Ok(l.slice(..i - 1));
        }
        if buf.len() > MAX_LINE {
            return Err(BodyError::BadChunk("line too long"));
        }
        fill(reader, buf, sink).await?;
    }
}

async fn pump_chunked<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    sink: &mut BodySink,
) -> Result<u64, BodyError> {
    let mut total = 0u64;
    loop {
        let size_line = line(reader, buf, sink).await?;
        let size_part = size_line.split(|&b| b == b';').next().unwrap_or_default();
        let size_text = std::str::from_utf8(size_part).map_err(|_| BodyError::BadChunk("size"))?;
        if size_text.is_empty()
            || size_text.len() > 15
            || !size_text.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(BodyError::BadChunk("invalid chunk size"));
        }
        let mut size =
            u64::from_str_radix(size_text, 16).map_err(|_| BodyError::BadChunk("size"))?;
        if size == 0 {
            break;
        }
        total += size;
        while size > 0 {
            if buf.is_empty() {
                fill(reader, buf, sink).await?;
            }
            let take = usize::try_from(size)
                .unwrap_or(usize::MAX)
                .min(buf.len())
                .min(FRAME);
            let chunk = buf.split_to(take).freeze();
            size -= take as u64;
            sink.data(chunk).await?;
        }
        while buf.len() < 2 {
            fill(reader, buf, sink).await?;
        }
        if &buf[..2] != b"\r\n" {
            return Err(BodyError::BadChunk("missing CRLF after chunk data"));
        }
        buf.advance(2);
    }
    // Trailers, then the empty line.
    let mut trailers = HeaderMap::new();
    let mut trailer_bytes = 0usize;
    loop {
        let l = line(reader, buf, sink).await?;
        if l.is_empty() {
            break;
        }
        trailer_bytes += l.len();
        if trailer_bytes > MAX_TRAILERS {
            return Err(BodyError::BadChunk("trailers too large"));
        }
        let colon = l
            .iter()
            .position(|&b| b == b':')
            .ok_or(BodyError::BadChunk("trailer"))?;
        let name =
            HeaderName::from_bytes(&l[..colon]).map_err(|_| BodyError::BadChunk("trailer name"))?;
        let value = HeaderValue::from_bytes(l[colon + 1..].trim_ascii())
            .map_err(|_| BodyError::BadChunk("trailer value"))?;
        trailers.append(name, value);
    }
    if !trailers.is_empty() {
        send(&sink.tx, Frame::trailers(trailers)).await?;
    }
    Ok(total)
}

/// The refusal of a body to rewrite larger than `max` bytes (413), over any transport.
pub fn too_large(max: usize) -> super::respond::Refusal {
    super::respond::Refusal::new(
        Code::RequestBodyTooLarge,
        format!("a body to rewrite may be at most {max} bytes (request_body_credential_rewrite)"),
    )
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
