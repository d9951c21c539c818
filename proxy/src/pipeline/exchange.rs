//! The steps of one request's exchange with its upstream that every transport shares
//! (HTTP/1.1 in `forward.rs`, HTTP/2 in `h2.rs`, the WebSocket handshake in `websocket.rs`):
//! the upstream timeout, counted from the end of the request body, the same on every
//! transport.

use std::future::Future;
use std::time::Duration;

use tokio::sync::oneshot;

/// The upstream's answer to `send`, or `None` when none came within `timeout` of the end of
/// the request body: `sent` fires (or its sender is dropped) when the body has gone up whole
/// or stopped. A slow upload is the client's time, not the upstream's delay: a 60 s upload
/// with a 10 s timeout is answered, over HTTP/1.1 and HTTP/2 alike.
pub(super) async fn within<T>(
    send: impl Future<Output = T>,
    sent: oneshot::Receiver<()>,
    timeout: Duration,
) -> Option<T> {
    tokio::select! {
        r = send => Some(r),
        () = async {
            let _ = sent.await;
            tokio::time::sleep(timeout).await;
        } => None,
    }
}

/// A request body with nothing to wait for: already sent (read whole), or none.
pub(super) fn already_sent() -> oneshot::Receiver<()> {
    oneshot::channel().1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_clock_starts_when_the_body_ends() {
        let (tx, rx) = oneshot::channel::<()>();
        let t = Duration::from_secs(10);
        // An upload of 30 s, answered 1 s after it: answered.
        let upload = async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(tx);
        };
        let answer = async {
            tokio::time::sleep(Duration::from_secs(31)).await;
            7
        };
        let (got, ()) = tokio::join!(within(answer, rx, t), upload);
        assert_eq!(got, Some(7));
        // Nothing in the 10 s after the body: no answer.
        let never = std::future::pending::<u8>();
        assert_eq!(within(never, already_sent(), t).await, None);
    }
}
