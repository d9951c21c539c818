//! The server→client half of a WebSocket whose handshake carried (or whose endpoint has bound)
//! a secret: every frame is parsed and written again with its payload scrubbed by the same
//! rules as an HTTP response (`credentials::scrub`): a text message's secrets become the
//! placeholder the client wrote, a binary message's (and a ping's or pong's) become as many
//! `*`. One streaming scrubber spans all the fragments of a message, so a secret split across
//! frames (with control frames between) is still caught; it is flushed at the message's final
//! frame. Output frames carry their new lengths; a control frame stays at most 125 bytes (a
//! close reason made longer by its placeholder is cut at a character boundary, after
//! scrubbing, so no part of a secret is left). Memory is bounded: a frame's payload is
//! scrubbed and passed on in pieces of at most `PIECE` bytes. A frame sluice cannot relay
//! faithfully (`frame::FrameError`) ends the relay, which closes both sides.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};
use zeroize::Zeroizing;

use super::frame::{self, FrameError, Header, MAX_CONTROL, OpCode};
use crate::credentials::ScrubSet;
use crate::credentials::scrub::Scrubber;

/// The most payload of one frame held before it is scrubbed and passed on.
const PIECE: usize = 64 * 1024;

/// The data message being relayed.
struct Message {
    opcode: OpCode,
    scrubber: Scrubber,
    /// Its first frame has gone out (the next ones are continuations).
    started: bool,
}

/// The frame being read.
struct Frame {
    header: Header,
    /// Payload bytes not yet read.
    left: u64,
    payload: Zeroizing<Vec<u8>>,
}

/// Parses server frames and writes them scrubbed.
pub(crate) struct FrameScrubber {
    /// Replaces each secret with its placeholder (text).
    text: Arc<ScrubSet>,
    /// Replaces each secret with as many `*` (binary, ping, pong).
    masked: Arc<ScrubSet>,
    /// Bytes read and not yet consumed (at most a header's worth between pushes).
    input: Zeroizing<Vec<u8>>,
    frame: Option<Frame>,
    message: Option<Message>,
    /// Secrets replaced in finished messages and control frames.
    hits: u64,
}

impl FrameScrubber {
    pub(crate) fn new(set: &ScrubSet) -> FrameScrubber {
        FrameScrubber {
            text: Arc::new(set.clone()),
            masked: Arc::new(set.masked()),
            input: Zeroizing::new(Vec::new()),
            frame: None,
            message: None,
            hits: 0,
        }
    }

    /// Secrets replaced so far.
    pub(crate) fn hits(&self) -> u64 {
        self.hits + self.message.as_ref().map_or(0, |m| m.scrubber.hits())
    }

    /// The next bytes from the upstream; the frames that may go to the client now are
    /// appended to `out`.
    pub(crate) fn push(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), FrameError> {
        self.input.extend_from_slice(data);
        let mut at = 0;
        let result = self.consume(&mut at, out);
        self.input.drain(..at);
        result
    }

    fn consume(&mut self, at: &mut usize, out: &mut Vec<u8>) -> Result<(), FrameError> {
        loop {
            let frame = match self.frame.as_mut() {
                Some(f) => f,
                None => {
                    let Some((header, n)) = frame::parse(&self.input[*at..])? else {
                        return Ok(());
                    };
                    *at += n;
                    self.begin(header)?;
                    self.frame.insert(Frame {
                        header,
                        left: header.len,
                        payload: Zeroizing::new(Vec::new()),
                    })
                }
            };
            let room = if frame.header.opcode.is_control() {
                MAX_CONTROL
            } else {
                PIECE - frame.payload.len()
            };
            let avail = self.input.len() - *at;
            let take = usize::try_from(frame.left)
                .unwrap_or(usize::MAX)
                .min(room)
                .min(avail);
            frame
                .payload
                .extend_from_slice(&self.input[*at..*at + take]);
            *at += take;
            frame.left -= take as u64;
            if frame.left == 0 {
                if let Some(done) = self.frame.take() {
                    self.end(done, out);
                }
            } else if frame.payload.len() >= PIECE {
                let piece = Zeroizing::new(std::mem::take(&mut *frame.payload));
                self.data(&piece, false, out);
            } else {
                return Ok(());
            }
        }
    }

    /// A frame's header: a data frame must fit the message state.
    fn begin(&mut self, header: Header) -> Result<(), FrameError> {
        match header.opcode {
            OpCode::Close | OpCode::Ping | OpCode::Pong => Ok(()),
            OpCode::Continuation if self.message.is_none() => Err(FrameError::Continuation),
            OpCode::Continuation => Ok(()),
            OpCode::Text | OpCode::Binary if self.message.is_some() => Err(FrameError::Interleaved),
            OpCode::Text | OpCode::Binary => {
                let set = if header.opcode == OpCode::Text {
                    &self.text
                } else {
                    &self.masked
                };
                self.message = Some(Message {
                    opcode: header.opcode,
                    scrubber: Scrubber::new(Arc::clone(set)),
                    started: false,
                });
                Ok(())
            }
        }
    }

    /// A frame read whole (the rest of its payload, for a data frame).
    fn end(&mut self, frame: Frame, out: &mut Vec<u8>) {
        if frame.header.opcode.is_control() {
            let payload = self.control(frame.header.opcode, &frame.payload);
            frame::encode(true, frame.header.opcode, &payload, out);
        } else {
            self.data(&frame.payload, frame.header.fin, out);
        }
    }

    /// Payload of the current message; `last`: its final bytes.
    fn data(&mut self, payload: &[u8], last: bool, out: &mut Vec<u8>) {
        let Some(message) = self.message.as_mut() else {
            // `begin` opened a message for every data frame.
            return;
        };
        let mut scrubbed = message
            .scrubber
            .feed(bytes::Bytes::copy_from_slice(payload))
            .to_vec();
        if last {
            scrubbed.extend_from_slice(&message.scrubber.finish());
        }
        if !scrubbed.is_empty() || last {
            let opcode = if message.started {
                OpCode::Continuation
            } else {
                message.opcode
            };
            message.started = true;
            frame::encode(last, opcode, &scrubbed, out);
        }
        if last {
            self.hits += message.scrubber.hits();
            self.message = None;
        }
    }

    /// A control frame's payload scrubbed, at most 125 bytes: a close frame's as text (its
    /// status code too, so a secret cannot start there), a ping's or pong's masked (same
    /// length).
    fn control(&mut self, opcode: OpCode, payload: &[u8]) -> Vec<u8> {
        let set = if opcode == OpCode::Close {
            &self.text
        } else {
            &self.masked
        };
        let mut scrubber = Scrubber::new(Arc::clone(set));
        let mut out = scrubber
            .feed(bytes::Bytes::copy_from_slice(payload))
            .to_vec();
        out.extend_from_slice(&scrubber.finish());
        self.hits += scrubber.hits();
        if out.len() > MAX_CONTROL {
            out.truncate(MAX_CONTROL);
            if opcode == OpCode::Close {
                // A reason cut inside a character: cut before it, the reason stays UTF-8.
                if let Err(e) = std::str::from_utf8(out.get(2..).unwrap_or_default())
                    && e.error_len().is_none()
                {
                    out.truncate(2 + e.valid_up_to());
                }
            }
        }
        out
    }
}

/// What a scrubbed WebSocket reports (to audit).
pub(crate) struct Reports {
    /// At the first secret found.
    pub(crate) hit: Box<dyn FnOnce() + Send>,
    /// At a frame that ends the relay (why).
    pub(crate) refused: Box<dyn FnOnce(String) + Send>,
}

/// The upstream's read half of a WebSocket, yielding its frames scrubbed; a frame sluice
/// cannot relay faithfully is an `InvalidData` error (the relay then closes both sides).
pub(crate) struct ScrubbedFrames<R> {
    inner: R,
    frames: FrameScrubber,
    out: Vec<u8>,
    /// Bytes of `out` already read.
    sent: usize,
    read: Box<[u8]>,
    done: bool,
    hit: Option<Box<dyn FnOnce() + Send>>,
    refused: Option<Box<dyn FnOnce(String) + Send>>,
}

impl<R> ScrubbedFrames<R> {
    pub(crate) fn new(inner: R, set: &ScrubSet, reports: Reports) -> ScrubbedFrames<R> {
        ScrubbedFrames {
            inner,
            frames: FrameScrubber::new(set),
            out: Vec::new(),
            sent: 0,
            read: vec![0u8; 16 * 1024].into_boxed_slice(),
            done: false,
            hit: Some(reports.hit),
            refused: Some(reports.refused),
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for ScrubbedFrames<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.sent < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.sent);
                buf.put_slice(&this.out[this.sent..this.sent + n]);
                this.sent += n;
                if this.sent == this.out.len() {
                    this.out.clear();
                    this.sent = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.done {
                return Poll::Ready(Ok(()));
            }
            let mut rb = ReadBuf::new(&mut this.read);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            let got = rb.filled();
            if got.is_empty() {
                // The upstream closed; a message it left unfinished ends here, its held
                // bytes dropped.
                this.done = true;
                continue;
            }
            if let Err(e) = this.frames.push(got, &mut this.out) {
                this.done = true;
                this.out.clear();
                if let Some(report) = this.refused.take() {
                    report(e.to_string());
                }
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
            if this.frames.hits() > 0
                && let Some(report) = this.hit.take()
            {
                report();
            }
        }
    }
}

#[cfg(test)]
mod tests;
