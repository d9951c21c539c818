//! What a client is still sending when a refusal ends its exchange: read and dropped, within
//! bounds ([`MAX_TIME`], and a number of bytes), so that the client reads the refusal. Left
//! unread, an HTTP/2 stream would be reset under a client still sending its body, and a
//! closed HTTP/1.1 connection would be reset by the kernel when more bytes arrive, which can
//! make the client fail on its next write before it reads the answer (curl's exit 55 or 92).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes of a body read and dropped at most before an HTTP/2 refusal (which waits for them).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// Bytes read and dropped at most after an HTTP/1.1 refusal. Large: a client is told only when
/// it reads, and one that is still writing a large body fails on its next write once the
/// connection is reset (curl's exit 55); stopping after 1 MiB of a 4 MiB upload did that.
pub const MAX_LINGER_BYTES: usize = 64 << 20;
/// Time spent reading them at most.
pub const MAX_TIME: Duration = Duration::from_secs(2);

/// Reads and drops what is left of a refused request's body (HTTP/2: before the refusal is
/// sent on its stream).
pub async fn drain_body<B>(body: &mut B)
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    let _ = tokio::time::timeout(MAX_TIME, async {
        let mut left = MAX_BODY_BYTES;
        while let Some(Ok(frame)) = body.frame().await {
            let n = frame.data_ref().map_or(0, Bytes::len);
            if n >= left {
                break;
            }
            left -= n;
        }
    })
    .await;
}

/// Reads and drops what the client still sends on a connection sluice has answered and
/// shut down its side of, until the client closes its side too (HTTP/1.1's lingering
/// close).
pub async fn linger<R: AsyncRead + Unpin>(rd: &mut R) {
    let _ = tokio::time::timeout(MAX_TIME, async {
        // On the heap: a buffer in the future would make every connection's future (which
        // holds this one's size while it idles) 4 KiB larger.
        let mut sink = vec![0u8; 4096];
        let mut left = MAX_LINGER_BYTES;
        while let Ok(n) = rd.read(&mut sink).await {
            if n == 0 || n >= left {
                break;
            }
            left -= n;
        }
    })
    .await;
}

/// Connections refused past their caller's limits lingering now (they hold a slot of the
/// whole proxy each, but none of their caller's).
static LINGERING_REFUSED: AtomicUsize = AtomicUsize::new(0);

/// [`linger`] for a connection refused past its caller's limits, when fewer than `cap` such
/// connections linger already; else nothing (the connection is closed at once). A caller past
/// its limits could otherwise hold the proxy's other slots with refused connections it keeps
/// open, a lingering close each.
pub async fn linger_refused<R: AsyncRead + Unpin>(rd: &mut R, cap: usize) {
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            LINGERING_REFUSED.fetch_sub(1, Ordering::Relaxed);
        }
    }
    let before = LINGERING_REFUSED.fetch_add(1, Ordering::Relaxed);
    let _counted = Counted;
    if before < cap {
        linger(rd).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `serve_route` holds this future inline, so its size is paid by every idle connection.
    #[test]
    fn a_lingering_close_adds_no_buffer_to_the_connections_future() {
        let mut rd: &[u8] = b"";
        let fut = linger(&mut rd);
        assert!(size_of_val(&fut) < 512, "{} bytes", size_of_val(&fut));
    }
}
