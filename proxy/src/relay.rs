//! Raw byte relay between a client and an upstream, both directions, with byte counts, an
//! idle timeout and half-close.
//!
//! Owns the tunnel of an L4 CONNECT after `200 Connection Established`. A half-close on one
//! side is passed on (shutdown of the other side's write half) and the other direction keeps
//! flowing; the relay ends when both directions are done, on an error, when neither side
//! has sent a byte for the idle timeout (long by default, so SSE pauses survive), when the
//! client has sent nothing at all for the unused-tunnel timeout, or when told to stop. The
//! client's first bytes after the CONNECT wait for a check (that the caller still holds the
//! socket) before they go upstream.

use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

const BUF: usize = 16 * 1024;

/// How a relay ended and what it carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RelayStats {
    /// Bytes from the client to the upstream.
    pub client_to_upstream: u64,
    /// Bytes from the upstream to the client.
    pub upstream_to_client: u64,
    pub end: RelayEnd,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayEnd {
    /// Both sides closed cleanly.
    Closed,
    IdleTimeout,
    ClientError(String),
    UpstreamError(String),
    /// The client sent no byte at all within the unused-tunnel timeout.
    UnusedTimeout,
    /// Stopped from outside, for this reason.
    Stopped(String),
}

impl RelayEnd {
    pub(crate) fn describe(&self) -> String {
        match self {
            RelayEnd::Closed => "closed".to_string(),
            RelayEnd::IdleTimeout => "idle timeout".to_string(),
            RelayEnd::ClientError(e) => format!("client error: {e}"),
            RelayEnd::UpstreamError(e) => format!("upstream error: {e}"),
            RelayEnd::UnusedTimeout => "unused tunnel timeout".to_string(),
            RelayEnd::Stopped(reason) => reason.clone(),
        }
    }
}

/// How long a relay may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// Neither side sent a byte for this long: the relay ends.
    pub idle: Duration,
    /// The client sent no byte at all (not even with its CONNECT) for this long: the relay
    /// ends. `None`: no such limit.
    pub unused: Option<Duration>,
}

/// What a relay checks besides its bounds: `stop` ends it (with the reason) whenever it
/// resolves; `first_use` is awaited before the first bytes read from the client go upstream
/// (those that came with the CONNECT head, `initial`, were checked with it), and an `Err`
/// (its reason) ends the relay instead.
#[derive(Debug)]
pub(crate) struct Checks<S, G> {
    pub stop: S,
    pub first_use: G,
}

/// Relays until both directions finish (see [`relay_until`]), with only an idle timeout.
pub(crate) async fn relay<CR, CW, UR, UW>(
    client_r: CR,
    client_w: CW,
    up_r: UR,
    up_w: UW,
    initial: &[u8],
    idle: Duration,
) -> RelayStats
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    UR: AsyncRead + Unpin,
    UW: AsyncWrite + Unpin,
{
    let bounds = Bounds { idle, unused: None };
    relay_until(
        client_r,
        client_w,
        up_r,
        up_w,
        initial,
        bounds,
        Checks {
            stop: std::future::pending(),
            first_use: async { Ok(()) },
        },
    )
    .await
}

/// Relays until both directions finish, a bound passes, or a check says stop.
/// Buffers are 16 KiB: measured faster than 64 KiB on loopback (they stay in cache), and
/// cheap for thousands of idle tunnels. `initial` is sent to the upstream first (bytes the
/// client sent right after its CONNECT head).
pub(crate) async fn relay_until<CR, CW, UR, UW, S, G>(
    mut client_r: CR,
    mut client_w: CW,
    mut up_r: UR,
    mut up_w: UW,
    initial: &[u8],
    bounds: Bounds,
    checks: Checks<S, G>,
) -> RelayStats
where
    CR: AsyncRead + Unpin,
    CW: AsyncWrite + Unpin,
    UR: AsyncRead + Unpin,
    UW: AsyncWrite + Unpin,
    S: Future<Output = String>,
    G: Future<Output = Result<(), String>>,
{
    let idle = bounds.idle;
    let Checks { stop, first_use } = checks;
    tokio::pin!(stop);
    // Bytes that came with the CONNECT head were checked with it; the check still runs
    // before the first bytes read here, which may come from another program the socket was
    // handed to after the `200`.
    let mut first_use = Some(Box::pin(first_use));
    let mut stats = RelayStats {
        client_to_upstream: 0,
        upstream_to_client: 0,
        end: RelayEnd::Closed,
    };
    if !initial.is_empty() {
        if let Err(e) = up_w.write_all(initial).await {
            stats.end = RelayEnd::UpstreamError(e.to_string());
            return stats;
        }
        stats.client_to_upstream += initial.len() as u64;
    }
    let mut cbuf = vec![0u8; BUF];
    let mut ubuf = vec![0u8; BUF];
    let mut client_open = true;
    let mut upstream_open = true;
    let mut deadline = Instant::now() + idle;
    // Far enough never to fire when there is no such bound, or once the client has spoken.
    let never = Instant::now() + Duration::from_secs(86_400 * 365);
    let mut unused_deadline = match bounds.unused {
        Some(unused) if initial.is_empty() => Instant::now() + unused,
        _ => never,
    };
    while client_open || upstream_open {
        tokio::select! {
            r = client_r.read(&mut cbuf), if client_open => match r {
                Ok(0) => {
                    client_open = false;
                    let _ = up_w.shutdown().await;
                }
                Ok(n) => {
                    if let Some(check) = first_use.take()
                        && let Err(reason) = check.await
                    {
                        stats.end = RelayEnd::Stopped(reason);
                        break;
                    }
                    if let Err(e) = up_w.write_all(&cbuf[..n]).await {
                        stats.end = RelayEnd::UpstreamError(e.to_string());
                        break;
                    }
                    stats.client_to_upstream += n as u64;
                    deadline = Instant::now() + idle;
                    unused_deadline = never;
                }
                Err(e) => {
                    stats.end = RelayEnd::ClientError(e.to_string());
                    break;
                }
            },
            r = up_r.read(&mut ubuf), if upstream_open => match r {
                Ok(0) => {
                    upstream_open = false;
                    let _ = client_w.shutdown().await;
                }
                Ok(n) => {
                    if let Err(e) = client_w.write_all(&ubuf[..n]).await {
                        stats.end = RelayEnd::ClientError(e.to_string());
                        break;
                    }
                    stats.upstream_to_client += n as u64;
                    deadline = Instant::now() + idle;
                }
                Err(e) => {
                    stats.end = RelayEnd::UpstreamError(e.to_string());
                    break;
                }
            },
            () = tokio::time::sleep_until(deadline) => {
                stats.end = RelayEnd::IdleTimeout;
                break;
            }
            () = tokio::time::sleep_until(unused_deadline) => {
                stats.end = RelayEnd::UnusedTimeout;
                break;
            }
            reason = &mut stop => {
                stats.end = RelayEnd::Stopped(reason);
                break;
            }
        }
    }
    let _ = client_w.shutdown().await;
    let _ = up_w.shutdown().await;
    stats
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    #[tokio::test]
    async fn relays_both_ways_and_counts() {
        let (client, mut client_peer) = duplex(1024);
        let (upstream, mut upstream_peer) = duplex(1024);
        let (cr, cw) = tokio::io::split(client);
        let (ur, uw) = tokio::io::split(upstream);
        let task = tokio::spawn(relay(cr, cw, ur, uw, b"early", Duration::from_secs(5)));
        client_peer.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 9];
        upstream_peer.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"earlyping");
        upstream_peer.write_all(b"pong!").await.unwrap();
        let mut back = [0u8; 5];
        client_peer.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"pong!");
        drop(client_peer);
        drop(upstream_peer);
        let stats = task.await.unwrap();
        assert_eq!(stats.client_to_upstream, 9);
        assert_eq!(stats.upstream_to_client, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tunnel_the_client_never_used_ends_at_the_unused_timeout() {
        let (client, _client_peer) = duplex(64);
        let (upstream, mut upstream_peer) = duplex(64);
        let (cr, cw) = tokio::io::split(client);
        let (ur, uw) = tokio::io::split(upstream);
        // The upstream talking does not make the tunnel used.
        upstream_peer.write_all(b"banner").await.unwrap();
        let bounds = Bounds {
            idle: Duration::from_secs(3600),
            unused: Some(Duration::from_secs(30)),
        };
        let stats = relay_until(cr, cw, ur, uw, b"", bounds, unchecked()).await;
        assert_eq!(stats.end, RelayEnd::UnusedTimeout);
        assert_eq!(stats.end.describe(), "unused tunnel timeout");
    }

    #[tokio::test(start_paused = true)]
    async fn a_used_tunnel_is_not_unused() {
        let (client, mut client_peer) = duplex(64);
        let (upstream, _upstream_peer) = duplex(64);
        let (cr, cw) = tokio::io::split(client);
        let (ur, uw) = tokio::io::split(upstream);
        client_peer.write_all(b"x").await.unwrap();
        let bounds = Bounds {
            idle: Duration::from_secs(100),
            unused: Some(Duration::from_secs(30)),
        };
        let stats = relay_until(cr, cw, ur, uw, b"", bounds, unchecked()).await;
        assert_eq!(stats.end, RelayEnd::IdleTimeout);
    }

    #[tokio::test]
    async fn a_stop_ends_the_relay_with_its_reason() {
        let (client, _client_peer) = duplex(64);
        let (upstream, _upstream_peer) = duplex(64);
        let (cr, cw) = tokio::io::split(client);
        let (ur, uw) = tokio::io::split(upstream);
        let bounds = Bounds {
            idle: Duration::from_secs(3600),
            unused: None,
        };
        let checks = Checks {
            stop: async { "caller changed".to_string() },
            first_use: async { Ok(()) },
        };
        let stats = relay_until(cr, cw, ur, uw, b"", bounds, checks).await;
        assert_eq!(stats.end, RelayEnd::Stopped("caller changed".into()));
    }

    /// Relays with a first-use check that fails, the client having sent `later` (after
    /// `initial`, the bytes that came with its CONNECT head): what the relay reports, and
    /// what reached the upstream.
    async fn failing_first_use(initial: &[u8], later: &[u8]) -> (RelayStats, Vec<u8>) {
        let (client, mut client_peer) = duplex(64);
        let (upstream, mut upstream_peer) = duplex(64);
        let (cr, cw) = tokio::io::split(client);
        let (ur, uw) = tokio::io::split(upstream);
        client_peer.write_all(later).await.unwrap();
        let bounds = Bounds {
            idle: Duration::from_secs(3600),
            unused: None,
        };
        let checks = Checks {
            stop: std::future::pending(),
            first_use: async { Err("caller changed".to_string()) },
        };
        let relayed = relay_until(cr, cw, ur, uw, initial, bounds, checks);
        let stats = tokio::time::timeout(Duration::from_secs(10), relayed)
            .await
            .expect("the relay stops at the check");
        let mut got = Vec::new();
        upstream_peer.read_to_end(&mut got).await.unwrap();
        (stats, got)
    }

    #[tokio::test]
    async fn first_bytes_wait_for_their_check_and_go_nowhere_when_it_fails() {
        let (stats, got) = failing_first_use(b"", b"secret").await;
        assert_eq!(stats.end, RelayEnd::Stopped("caller changed".into()));
        assert_eq!(stats.client_to_upstream, 0);
        assert!(got.is_empty(), "{got:?}");
    }

    /// Bytes that came with the CONNECT head go upstream at once (checked with it); the
    /// next bytes the client sends still wait for the first-use check, and go nowhere when
    /// it fails (the socket may have been handed over after the `200`).
    #[tokio::test]
    async fn bytes_after_those_sent_with_the_head_still_wait_for_their_check() {
        let (stats, got) = failing_first_use(b"with-head", b"later").await;
        assert_eq!(stats.end, RelayEnd::Stopped("caller changed".into()));
        assert_eq!(stats.client_to_upstream, 9);
        assert_eq!(got, b"with-head");
    }

    fn unchecked() -> Checks<std::future::Pending<String>, std::future::Ready<Result<(), String>>> {
        Checks {
            stop: std::future::pending(),
            first_use: std::future::ready(Ok(())),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timeout_ends_the_relay() {
        let (client, _client_peer) = duplex(64);
        let (upstream, _upstream_peer) = duplex(64);
        let (cr, cw) = tokio::io::split(client);
        let (ur, uw) = tokio::io::split(upstream);
        let stats = relay(cr, cw, ur, uw, b"", Duration::from_secs(30)).await;
        assert_eq!(stats.end, RelayEnd::IdleTimeout);
    }
}
