//! The client→server half of a WebSocket whose messages are judged (`protocol: websocket`,
//! spec §5.4): the client's frames are parsed, each text message is assembled (at most
//! 4 MiB, at most 4096 fragments), checked to be UTF-8 and handed to a judge before it goes
//! upstream as one masked frame; binary messages and control frames pass as they come.
//! Anything else closes the WebSocket with the reference's codes: 1008 refused by policy,
//! 1009 too big, 1007 not UTF-8, 1002 a protocol error, 1012 the policy was reloaded.
//! With `websocket_credential_rewrite` the judge also swaps a text message's placeholders
//! (`Judge::rewrite`), and guards the rest: a placeholder in a binary message (however its
//! frames cut it), a ping, a pong or a close reason closes with 1008 before it goes up whole.
//! Pure: bytes in, bytes out; the relay that moves them is `judged`.

use zeroize::Zeroizing;

use super::frame::{self, ClientHeader, MAX_CONTROL, OpCode};
use crate::credentials::body::BodyGuard;
use crate::credentials::placeholder;

/// The largest text message judged (the reference's middleware payload limit).
pub(crate) const MAX_TEXT_MESSAGE: usize = 4 * 1024 * 1024;
/// The largest binary frame payload relayed.
pub(crate) const MAX_FRAME_PAYLOAD: u64 = 16 * 1024 * 1024;
/// The most frames one message may be cut into.
pub(crate) const MAX_FRAGMENTS: usize = 4096;

/// Why the WebSocket closes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Close {
    /// A text message refused by policy (its reason).
    Policy(String),
    /// A text message over [`MAX_TEXT_MESSAGE`].
    TooBig,
    /// A text message (or a close reason) that is not UTF-8.
    Utf8,
    /// A frame or sequence of frames RFC 6455 forbids.
    Protocol(String),
    /// The policy changed since the upgrade: the client reconnects under the new one.
    Reload,
    /// A credential placeholder where sluice does not swap it (why).
    Placeholder(String),
    /// A credential's value changed since the upgrade: the upstream's frames are scrubbed of
    /// the values bound then, so the client reconnects.
    Rotated,
    /// The process-wide budget of messages being assembled is spent (`budget`).
    Capacity,
}

impl Close {
    /// The close code (RFC 6455 §7.4.1).
    pub(crate) fn code(&self) -> u16 {
        match self {
            Close::Policy(_) | Close::Placeholder(_) => 1008,
            Close::TooBig => 1009,
            Close::Utf8 => 1007,
            Close::Protocol(_) => 1002,
            Close::Reload | Close::Rotated => 1012,
            Close::Capacity => 1013,
        }
    }

    /// Why, for the audit record and the close frame.
    pub(crate) fn reason(&self) -> String {
        match self {
            Close::Policy(r) | Close::Protocol(r) | Close::Placeholder(r) => r.clone(),
            Close::TooBig => {
                format!("websocket text message exceeds {MAX_TEXT_MESSAGE} byte limit")
            }
            Close::Utf8 => "websocket text message is not valid UTF-8".to_string(),
            Close::Reload => "the policy was reloaded".to_string(),
            Close::Rotated => "a credential was rotated; reconnect".to_string(),
            Close::Capacity => {
                "too many websocket messages are being assembled; try again later".to_string()
            }
        }
    }

    /// The close frame's payload: the code, then the reason cut to fit 125 bytes at a
    /// character boundary.
    pub(crate) fn payload(&self) -> Vec<u8> {
        let mut out = self.code().to_be_bytes().to_vec();
        let reason = self.reason();
        let mut end = reason.len().min(MAX_CONTROL - 2);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        out.extend_from_slice(&reason.as_bytes()[..end]);
        out
    }
}

/// Judges one whole text message: `Ok` sends it upstream, `Err` closes the WebSocket.
pub(crate) trait Judge {
    fn text(&mut self, message: &str) -> Result<(), Close>;

    /// The judged message as it goes upstream when it is not the one the client sent (its
    /// placeholders swapped); `None`: as it is.
    fn rewrite(&mut self, _message: &str) -> Result<Option<Zeroizing<Vec<u8>>>, Close> {
        Ok(None)
    }

    /// Whether a placeholder anywhere but in a text message closes the WebSocket
    /// ([`Judge::unswapped`]) rather than going up as it is.
    fn guards(&self) -> bool {
        false
    }

    /// The close for a placeholder found in `frame` (a binary message, a ping, ...) when
    /// [`Judge::guards`].
    fn unswapped(&mut self, frame: &str) -> Close {
        Close::Placeholder(unswapped_reason(frame))
    }
}

/// Why a placeholder outside a text message closes the WebSocket.
pub(crate) fn unswapped_reason(frame: &str) -> String {
    format!(
        "a credential placeholder in a WebSocket {frame}: only text messages have their placeholders swapped"
    )
}

/// The frame being read.
struct Current {
    header: ClientHeader,
    /// Payload bytes not yet read.
    left: u64,
    /// Unmasked payload so far (text and control frames; binary payload streams).
    payload: Vec<u8>,
}

/// The message in progress.
enum Message {
    Text { payload: Vec<u8>, fragments: usize },
    Binary { fragments: usize },
}

/// Parses the client's frames and writes what may go upstream.
#[derive(Default)]
pub(crate) struct ClientFrames {
    input: Vec<u8>,
    frame: Option<Current>,
    message: Option<Message>,
    /// The client sent its close frame: nothing may follow.
    closed: bool,
    /// Placeholders outside text messages are refused ([`Judge::guards`]): the scanner of
    /// the binary message in progress.
    guard: Option<Box<BodyGuard>>,
}

impl ClientFrames {
    /// Whether a text message is being assembled (its timeouts run).
    pub(crate) fn assembling(&self) -> bool {
        matches!(self.message, Some(Message::Text { .. }))
    }

    /// The client's next bytes; what may go upstream now is appended to `up`.
    pub(crate) fn push(
        &mut self,
        data: &[u8],
        judge: &mut dyn Judge,
        up: &mut Vec<u8>,
    ) -> Result<(), Close> {
        self.input.extend_from_slice(data);
        let mut at = 0;
        let result = self.consume(&mut at, judge, up);
        self.input.drain(..at);
        result
    }

    fn consume(
        &mut self,
        at: &mut usize,
        judge: &mut dyn Judge,
        up: &mut Vec<u8>,
    ) -> Result<(), Close> {
        loop {
            if self.frame.is_none() {
                let parsed = frame::parse_client(&self.input[*at..])
                    .map_err(|e| Close::Protocol(e.to_string()))?;
                let Some((header, n)) = parsed else {
                    return Ok(());
                };
                self.begin(&header, judge.guards())?;
                if self.streams(&header) {
                    up.extend_from_slice(&self.input[*at..*at + n]);
                }
                *at += n;
                self.frame = Some(Current {
                    header,
                    left: header.len,
                    payload: Vec::new(),
                });
            }
            let streams = self.frame.as_ref().is_some_and(|f| self.streams(&f.header));
            let Some(frame) = self.frame.as_mut() else {
                return Ok(());
            };
            let avail = self.input.len() - *at;
            let take = usize::try_from(frame.left).unwrap_or(usize::MAX).min(avail);
            let bytes = &self.input[*at..*at + take];
            if streams {
                if let Some(guard) = self.guard.as_mut() {
                    // Unmasked to be scanned; the frame goes up as the client masked it.
                    let mut plain = Zeroizing::new(bytes.to_vec());
                    frame::apply_mask(&mut plain, frame.header.mask, frame.header.len - frame.left);
                    if guard.feed(&plain) {
                        return Err(judge.unswapped("binary message"));
                    }
                }
                up.extend_from_slice(bytes);
            } else {
                let offset = frame.header.len - frame.left;
                let start = frame.payload.len();
                frame.payload.extend_from_slice(bytes);
                frame::apply_mask(&mut frame.payload[start..], frame.header.mask, offset);
            }
            *at += take;
            frame.left -= take as u64;
            if frame.left > 0 {
                return Ok(());
            }
            if let Some(done) = self.frame.take() {
                self.end(done, judge, up)?;
            }
        }
    }

    /// Binary frames (and their continuations) pass as they arrive.
    fn streams(&self, header: &ClientHeader) -> bool {
        match header.opcode {
            OpCode::Binary => true,
            OpCode::Continuation => matches!(self.message, Some(Message::Binary { .. })),
            _ => false,
        }
    }

    /// A frame's header: it must fit the sequence so far and the limits.
    fn begin(&mut self, header: &ClientHeader, guards: bool) -> Result<(), Close> {
        if self.closed {
            return Err(Close::Protocol(
                "websocket frame received after close frame".to_string(),
            ));
        }
        let protocol = |m: &str| Err(Close::Protocol(m.to_string()));
        match (header.opcode, &mut self.message) {
            (OpCode::Close | OpCode::Ping | OpCode::Pong, _) => Ok(()),
            (OpCode::Text | OpCode::Binary, Some(_)) => protocol(
                "websocket data frame started before previous fragmented message completed",
            ),
            (OpCode::Continuation, None) => {
                protocol("websocket continuation frame without active fragmented message")
            }
            (OpCode::Text, None) => {
                if header.len > MAX_TEXT_MESSAGE as u64 {
                    return Err(Close::TooBig);
                }
                self.message = Some(Message::Text {
                    payload: Vec::new(),
                    fragments: 1,
                });
                Ok(())
            }
            (OpCode::Binary, None) => {
                if header.len > MAX_FRAME_PAYLOAD {
                    return protocol("websocket binary frame exceeds 16777216 byte relay limit");
                }
                self.message = Some(Message::Binary { fragments: 1 });
                self.guard = guards.then(|| Box::new(BodyGuard::new()));
                Ok(())
            }
            (OpCode::Continuation, Some(Message::Text { payload, fragments })) => {
                *fragments += 1;
                if *fragments > MAX_FRAGMENTS {
                    return protocol("websocket message exceeds 4096 fragment limit");
                }
                if (payload.len() as u64).saturating_add(header.len) > MAX_TEXT_MESSAGE as u64 {
                    return Err(Close::TooBig);
                }
                Ok(())
            }
            (OpCode::Continuation, Some(Message::Binary { fragments })) => {
                *fragments += 1;
                if *fragments > MAX_FRAGMENTS {
                    return protocol("websocket message exceeds 4096 fragment limit");
                }
                if header.len > MAX_FRAME_PAYLOAD {
                    return protocol("websocket binary frame exceeds 16777216 byte relay limit");
                }
                Ok(())
            }
        }
    }

    /// A frame read whole.
    fn end(
        &mut self,
        frame: Current,
        judge: &mut dyn Judge,
        up: &mut Vec<u8>,
    ) -> Result<(), Close> {
        let ClientHeader {
            fin, opcode, mask, ..
        } = frame.header;
        if opcode.is_control() {
            if opcode == OpCode::Close {
                check_close(&frame.payload)?;
            }
            if judge.guards() && placeholder::contains_marker(&frame.payload) {
                let what = match opcode {
                    OpCode::Ping => "ping",
                    OpCode::Pong => "pong",
                    _ => "close frame",
                };
                return Err(judge.unswapped(what));
            }
            if opcode == OpCode::Close {
                self.closed = true;
            }
            frame::encode_masked(true, opcode, &frame.payload, mask, up);
            return Ok(());
        }
        if matches!(self.message, Some(Message::Binary { .. })) {
            if fin {
                self.message = None;
                self.guard = None;
            }
            return Ok(());
        }
        let Some(Message::Text { payload, .. }) = self.message.as_mut() else {
            // `begin` opened a message for every data frame.
            return Ok(());
        };
        payload.extend_from_slice(&frame.payload);
        if !fin {
            return Ok(());
        }
        let whole = std::mem::take(payload);
        self.message = None;
        let text = std::str::from_utf8(&whole).map_err(|_| Close::Utf8)?;
        judge.text(text)?;
        match judge.rewrite(text)? {
            Some(swapped) => frame::encode_masked(true, OpCode::Text, &swapped, mask, up),
            None => frame::encode_masked(true, OpCode::Text, &whole, mask, up),
        }
        Ok(())
    }
}

/// A client close frame's payload: empty, or a valid code and a UTF-8 reason.
fn check_close(payload: &[u8]) -> Result<(), Close> {
    match payload {
        [] => Ok(()),
        [_] => Err(Close::Protocol(
            "websocket close frame payload cannot be exactly one byte".to_string(),
        )),
        [a, b, reason @ ..] => {
            let code = u16::from_be_bytes([*a, *b]);
            let valid = (matches!(code, 1000..=1014) && !matches!(code, 1004..=1006))
                || (3000..=4999).contains(&code);
            if !valid {
                return Err(Close::Protocol(
                    "websocket close frame uses invalid close code".to_string(),
                ));
            }
            std::str::from_utf8(reason).map_err(|_| Close::Utf8)?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
