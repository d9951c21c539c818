//! RFC 6455 frame headers as a server sends them (§5.2): parsed from the start of a buffer
//! (`parse`, which never panics and says when it needs more bytes) and written back around a
//! new payload (`encode`). A frame sluice cannot relay faithfully is an error: a reserved
//! bit set (no extension was negotiated), a reserved opcode, a masked server frame, a length
//! with its top bit set, or a control frame that is fragmented or longer than 125 bytes.
//! What frames mean in sequence (fragmented messages) is `ws_scrub`'s. A client's frames
//! (masked, §5.3) are read by `parse_client`, whose errors close the WebSocket with 1002
//! (`ws_messages`), and written by `encode_masked`.

/// The longest control frame payload (RFC 6455 §5.5).
pub(crate) const MAX_CONTROL: usize = 125;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpCode {
    Continuation,
    Text,
    Binary,
    Close,
    Ping,
    Pong,
}

impl OpCode {
    fn from_bits(b: u8) -> Option<OpCode> {
        Some(match b {
            0x0 => OpCode::Continuation,
            0x1 => OpCode::Text,
            0x2 => OpCode::Binary,
            0x8 => OpCode::Close,
            0x9 => OpCode::Ping,
            0xA => OpCode::Pong,
            _ => return None,
        })
    }

    fn bits(self) -> u8 {
        match self {
            OpCode::Continuation => 0x0,
            OpCode::Text => 0x1,
            OpCode::Binary => 0x2,
            OpCode::Close => 0x8,
            OpCode::Ping => 0x9,
            OpCode::Pong => 0xA,
        }
    }

    pub(crate) fn is_control(self) -> bool {
        matches!(self, OpCode::Close | OpCode::Ping | OpCode::Pong)
    }
}

/// One frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) fin: bool,
    pub(crate) opcode: OpCode,
    /// Payload bytes that follow the header.
    pub(crate) len: u64,
}

/// A server frame sluice does not relay; the WebSocket is closed on both sides.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    #[error(
        "a WebSocket frame from the upstream has reserved bits set ({0:#x}): an extension (compression) nobody negotiated"
    )]
    Reserved(u8),
    #[error("a WebSocket frame from the upstream has the reserved opcode {0:#x}")]
    Opcode(u8),
    #[error("a WebSocket frame from the upstream is masked (RFC 6455 §5.1 forbids it)")]
    Masked,
    #[error("a WebSocket frame from the upstream declares a length with its top bit set")]
    Length,
    #[error("a WebSocket control frame from the upstream is fragmented or over 125 bytes")]
    Control,
    #[error("a WebSocket continuation frame from the upstream continues no message")]
    Continuation,
    #[error("a WebSocket data frame from the upstream starts a message inside another")]
    Interleaved,
}

/// The header at the start of `buf` and its length in bytes, or `None` if `buf` ends
/// inside it.
pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Header, usize)>, FrameError> {
    let (Some(&b0), Some(&b1)) = (buf.first(), buf.get(1)) else {
        return Ok(None);
    };
    if b0 & 0x70 != 0 {
        return Err(FrameError::Reserved(b0 & 0x70));
    }
    let opcode = OpCode::from_bits(b0 & 0x0f).ok_or(FrameError::Opcode(b0 & 0x0f))?;
    if b1 & 0x80 != 0 {
        return Err(FrameError::Masked);
    }
    let fin = b0 & 0x80 != 0;
    let Some((len, n)) = payload_len(buf, b1) else {
        return Ok(None);
    };
    if len >> 63 != 0 {
        return Err(FrameError::Length);
    }
    if opcode.is_control() && (!fin || len > MAX_CONTROL as u64) {
        return Err(FrameError::Control);
    }
    Ok(Some((Header { fin, opcode, len }, n)))
}

/// Appends an unmasked frame (a server's) carrying `payload` to `out`.
pub(crate) fn encode(fin: bool, opcode: OpCode, payload: &[u8], out: &mut Vec<u8>) {
    out.push(if fin { 0x80 } else { 0 } | opcode.bits());
    let len = payload.len();
    if len < 126 {
        // Fits in the 7 bits.
        out.push(len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        out.push(126);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(payload);
}

/// A client frame's header (RFC 6455 §5.2): always masked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClientHeader {
    pub(crate) fin: bool,
    pub(crate) opcode: OpCode,
    pub(crate) len: u64,
    pub(crate) mask: [u8; 4],
}

/// A client frame that breaks RFC 6455 (closed with 1002, as the reference does).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ClientFrameError {
    #[error("a WebSocket frame from the client has reserved bits set: no extension was negotiated")]
    Reserved,
    #[error("a WebSocket frame from the client uses a reserved opcode")]
    Opcode,
    #[error("a WebSocket frame from the client is not masked (RFC 6455 §5.1)")]
    Unmasked,
    #[error("a WebSocket frame from the client declares its length in a non-minimal form")]
    Length,
    #[error("a WebSocket control frame from the client is fragmented or over 125 bytes")]
    Control,
}

/// The client frame header at the start of `buf` and its length in bytes, or `None` if
/// `buf` ends inside it.
pub(crate) fn parse_client(buf: &[u8]) -> Result<Option<(ClientHeader, usize)>, ClientFrameError> {
    let (Some(&b0), Some(&b1)) = (buf.first(), buf.get(1)) else {
        return Ok(None);
    };
    if b0 & 0x70 != 0 {
        return Err(ClientFrameError::Reserved);
    }
    let opcode = OpCode::from_bits(b0 & 0x0f).ok_or(ClientFrameError::Opcode)?;
    if b1 & 0x80 == 0 {
        return Err(ClientFrameError::Unmasked);
    }
    let fin = b0 & 0x80 != 0;
    let Some((len, n)) = payload_len(buf, b1) else {
        return Ok(None);
    };
    let minimal = match n {
        4 => len >= 126,
        10 => len >> 63 == 0 && u16::try_from(len).is_err(),
        _ => true,
    };
    if !minimal {
        return Err(ClientFrameError::Length);
    }
    if opcode.is_control() && (!fin || len > MAX_CONTROL as u64) {
        return Err(ClientFrameError::Control);
    }
    let Some(mask) = buf.get(n..n + 4).and_then(|b| <[u8; 4]>::try_from(b).ok()) else {
        return Ok(None);
    };
    Ok(Some((
        ClientHeader {
            fin,
            opcode,
            len,
            mask,
        },
        n + 4,
    )))
}

/// XORs `data` with `mask`, `data` starting `offset` bytes into its frame's payload.
pub(crate) fn apply_mask(data: &mut [u8], mask: [u8; 4], offset: u64) {
    for (i, b) in data.iter_mut().enumerate() {
        // The index modulo 4 fits in usize.
        *b ^= mask[((offset + i as u64) % 4) as usize];
    }
}

/// Appends a masked frame (a client's) carrying `payload` to `out`.
pub(crate) fn encode_masked(
    fin: bool,
    opcode: OpCode,
    payload: &[u8],
    mask: [u8; 4],
    out: &mut Vec<u8>,
) {
    let start = out.len();
    encode(fin, opcode, payload, out);
    // The header is 2, 4 or 10 bytes: the mask goes after it and the mask bit is set.
    let header = out.len() - start - payload.len();
    out[start + 1] |= 0x80;
    out.splice(start + header..start + header, mask);
    apply_mask(&mut out[start + header + 4..], mask, 0);
}

/// The payload length a frame's second byte `b1` announces (RFC 6455 §5.2: 7 bits, or 16 or
/// 64 more after it) and the header bytes read so far to learn it; `None` until `buf` holds
/// them. The one reading of the length for the upstream's frames and the client's.
fn payload_len(buf: &[u8], b1: u8) -> Option<(u64, usize)> {
    match b1 & 0x7f {
        126 => buf
            .get(2..4)
            .map(|b| (u64::from(u16::from_be_bytes([b[0], b[1]])), 4)),
        127 => buf
            .get(2..10)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(|b| (u64::from_be_bytes(b), 10)),
        short => Some((u64::from(short), 2)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_at_every_length_encoding() {
        for (len, hlen) in [
            (0usize, 2usize),
            (125, 2),
            (126, 4),
            (65535, 4),
            (65536, 10),
        ] {
            let payload = vec![7u8; len];
            let mut out = Vec::new();
            encode(false, OpCode::Binary, &payload, &mut out);
            assert_eq!(out.len(), hlen + len);
            let (h, n) = parse(&out).unwrap().unwrap();
            assert_eq!(
                (h.fin, h.opcode, h.len, n),
                (false, OpCode::Binary, len as u64, hlen)
            );
            // Every proper prefix of the header asks for more.
            for cut in 0..hlen {
                assert_eq!(parse(&out[..cut]), Ok(None), "{len} cut at {cut}");
            }
        }
    }

    #[test]
    fn client_frames_round_trip_and_break_rfc6455_as_errors() {
        for len in [0usize, 5, 125, 126, 65535, 65536] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut out = Vec::new();
            encode_masked(true, OpCode::Text, &payload, [1, 2, 3, 4], &mut out);
            let (h, n) = parse_client(&out).unwrap().unwrap();
            assert_eq!(
                (h.fin, h.opcode, h.len, h.mask),
                (true, OpCode::Text, len as u64, [1, 2, 3, 4])
            );
            let mut body = out[n..].to_vec();
            apply_mask(&mut body, h.mask, 0);
            assert_eq!(body, payload);
            for cut in 0..n {
                assert_eq!(parse_client(&out[..cut]), Ok(None), "{len} cut at {cut}");
            }
        }
        assert_eq!(parse_client(&[0x81, 0]), Err(ClientFrameError::Unmasked));
        assert_eq!(parse_client(&[0xC1, 0x80]), Err(ClientFrameError::Reserved));
        assert_eq!(parse_client(&[0x83, 0x80]), Err(ClientFrameError::Opcode));
        assert_eq!(parse_client(&[0x09, 0x80]), Err(ClientFrameError::Control));
        assert_eq!(
            parse_client(&[0x81, 0xFE, 0, 5]),
            Err(ClientFrameError::Length)
        );
        let mut long = vec![0x82, 0xFF];
        long.extend_from_slice(&300u64.to_be_bytes());
        assert_eq!(parse_client(&long), Err(ClientFrameError::Length));
    }

    #[test]
    fn frames_sluice_cannot_relay_faithfully_are_errors() {
        assert_eq!(parse(&[0xC1, 0]), Err(FrameError::Reserved(0x40)));
        assert_eq!(parse(&[0x83, 0]), Err(FrameError::Opcode(3)));
        assert_eq!(parse(&[0x81, 0x80, 1, 2, 3, 4]), Err(FrameError::Masked));
        assert_eq!(parse(&[0x09, 0]), Err(FrameError::Control));
        assert_eq!(parse(&[0x89, 126, 0, 126]), Err(FrameError::Control));
        let mut huge = vec![0x82, 127];
        huge.extend_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(parse(&huge), Err(FrameError::Length));
    }
}
