//! The body guard of an `aws-chunked` body (S3's streaming framing, SigV4 §"streaming"):
//! `<hex size>[;extensions]\r\n<data>\r\n` chunks, a zero-size one, then trailers. The upstream
//! joins the chunks' data, so a placeholder cut by a chunk's framing
//! (`openshell:reso` `\r\n1a\r\n` `lve:env:KEY`) reaches it whole while a scan of the wire
//! bytes never sees it. This guard scans the data as the upstream will join it (the wire
//! bytes are still scanned by the plain `BodyGuard` too: a body whose framing is broken, or
//! its trailers, are covered by that scan). Memory is bounded: a size line longer than
//! [`MAX_SIZE_LINE`] stops the de-framing (the plain scan goes on).

use super::body::BodyGuard;

/// The longest chunk-size line read (a size and a `chunk-signature=` of 64 hex digits fit).
const MAX_SIZE_LINE: usize = 4096;

/// Where in the framing the next byte is.
#[derive(Debug)]
enum State {
    /// In a size line (the bytes so far).
    Size(Vec<u8>),
    /// In a chunk's data (bytes left).
    Data(u64),
    /// After a chunk's data: its `\r\n` (bytes of it still to skip).
    DataEnd(u8),
    /// The zero-size chunk was read (trailers follow), or the framing is not aws-chunked.
    Done,
}

/// Scans an `aws-chunked` body's joined data for a placeholder.
#[derive(Debug)]
pub(crate) struct AwsChunks {
    state: State,
    guard: BodyGuard,
}

impl Default for AwsChunks {
    fn default() -> Self {
        AwsChunks {
            state: State::Size(Vec::new()),
            guard: BodyGuard::new(),
        }
    }
}

impl AwsChunks {
    /// The next wire bytes; `Some(n)` when a marker ends in the joined data: `chunk[..n]`
    /// are the wire bytes before its last byte (as `BodyGuard::feed_until`).
    pub(crate) fn feed_until(&mut self, chunk: &[u8]) -> Option<usize> {
        let mut at = 0;
        while at < chunk.len() {
            match &mut self.state {
                State::Done => return None,
                State::Size(line) => {
                    let b = chunk[at];
                    at += 1;
                    if b != b'\n' {
                        line.push(b);
                        if line.len() > MAX_SIZE_LINE {
                            self.state = State::Done;
                        }
                        continue;
                    }
                    let text = line.strip_suffix(b"\r").unwrap_or(line);
                    let size = text.split(|&c| c == b';').next().unwrap_or_default();
                    let size = std::str::from_utf8(size)
                        .ok()
                        .and_then(|s| u64::from_str_radix(s.trim(), 16).ok());
                    self.state = match size {
                        Some(0) | None => State::Done,
                        Some(n) => State::Data(n),
                    };
                }
                State::Data(left) => {
                    let take = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(chunk.len() - at);
                    if let Some(p) = self.guard.feed_until(&chunk[at..at + take]) {
                        return Some(at + p);
                    }
                    *left -= take as u64;
                    at += take;
                    if *left == 0 {
                        self.state = State::DataEnd(2);
                    }
                }
                State::DataEnd(skip) => {
                    at += 1;
                    *skip -= 1;
                    if *skip == 0 {
                        self.state = State::Size(Vec::new());
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `data` framed as aws-chunked, cut into chunks of `size` bytes.
    fn framed(data: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for piece in data.chunks(size) {
            out.extend_from_slice(
                format!("{:x};chunk-signature={}\r\n", piece.len(), "0".repeat(64)).as_bytes(),
            );
            out.extend_from_slice(piece);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n");
        out
    }

    #[test]
    fn a_placeholder_cut_by_the_chunk_framing_is_found_however_the_wire_is_cut() {
        let data = b"key=openshell:resolve:env:AWS_SECRET_ACCESS_KEY&x=1";
        for size in 1..data.len() {
            let wire = framed(data, size);
            // The plain scan does not see it once the framing cuts it.
            if size < 20 {
                assert!(!BodyGuard::new().feed(&wire), "size {size}");
            }
            for cut in [1, 3, 7, 64] {
                let mut g = AwsChunks::default();
                let mut hit = None;
                let mut sent = 0;
                for piece in wire.chunks(cut) {
                    if let Some(n) = g.feed_until(piece) {
                        hit = Some(sent + n);
                        break;
                    }
                    sent += piece.len();
                }
                let at = hit.unwrap_or_else(|| panic!("size {size} cut {cut}: not found"));
                // What went before it does not hold the whole marker.
                let mut joined = AwsChunks::default();
                assert_eq!(
                    joined.feed_until(&wire[..at]),
                    None,
                    "size {size} cut {cut}"
                );
            }
        }
    }

    #[test]
    fn a_body_without_a_placeholder_or_not_aws_chunked_passes() {
        let mut g = AwsChunks::default();
        assert_eq!(
            g.feed_until(&framed(b"openshell resolve env, not a marker", 5)),
            None
        );
        let mut g = AwsChunks::default();
        assert_eq!(g.feed_until(b"{\"not\": \"framed\"}"), None);
    }
}
