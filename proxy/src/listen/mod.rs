//! Listeners: binding, the accept loop, the connection limit, and what a listener reads
//! before the pipeline (a load balancer's PROXY header, the TLS proxy hop).
//!
//! Owns what happens between the kernel's accept queue and `pipeline::serve`: a bounded
//! number of connections in flight (past it, a `503` with a JSON body and close), an accept
//! loop that survives running out of file descriptors (back off, keep going) instead of
//! exiting, and stops accepting when sluice drains (the connections already queued are taken
//! and served first). `front.rs` receives an explicit-proxy connection (a PROXY header,
//! `crate::proxy_protocol`; the TLS hop, `hop.rs`) before handing it to the pipeline.

pub mod front;
pub mod hop;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;

use crate::http::respond::Code;
use crate::http::respond::Refusal;
use crate::pipeline::{self, Shared};

/// Binds a listening socket (IPv6 sockets are v6-only so `[::]` and `0.0.0.0` can coexist).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => {
            let s = TcpSocket::new_v6()?;
            socket2::SockRef::from(&s).set_only_v6(true)?;
            s
        }
    };
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// What a listener does with a connection past `--max-connections`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overload {
    /// Answer `503` with a JSON body (the explicit proxy's clients speak HTTP to sluice).
    Answer,
    /// Close it unanswered (a redirected client believes it talks to the origin).
    Close,
}

/// A connection the kernel already queued, taken without waiting; `None` when there is none.
fn queued(listener: &TcpListener) -> Option<std::io::Result<(tokio::net::TcpStream, SocketAddr)>> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match listener.poll_accept(&mut cx) {
        std::task::Poll::Ready(Ok(x)) => Some(Ok(x)),
        // An error taking a queued one ends the drain's accepting: nothing waits for it.
        std::task::Poll::Ready(Err(_)) | std::task::Poll::Pending => None,
    }
}

/// Accepts connections until the process ends.
pub async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(shared.limits.max_connections));
    accept_entry(listener, shared, slots, Overload::Answer, pipeline::serve).await;
}

/// Accepts connections until the process ends, each served by `serve` (an entry into the
/// pipeline: `pipeline::serve`, the transparent listener's); `slots` is the connection limit,
/// shared by every listener given the same one.
pub async fn accept_entry<S, F>(
    listener: TcpListener,
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    overload: Overload,
    serve: S,
) where
    S: Fn(Arc<Shared>, tokio::net::TcpStream, SocketAddr, SocketAddr) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let serve = Arc::new(serve);
    let mut backoff = Duration::from_millis(10);
    let drain = shared.drain.clone();
    loop {
        let accepted = tokio::select! {
            biased;
            () = drain.started() => {
                // What the kernel queued before the drain is a client that connected while
                // sluice was serving: taken and served. Then the listener closes.
                match queued(&listener) {
                    Some(x) => x,
                    None => return,
                }
            }
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(x) => {
                backoff = Duration::from_millis(10);
                x
            }
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: the queue keeps the clients; wait for fds to free up.
                eprintln!(
                    "sluice: accept failed: {e}; retrying in {} ms",
                    backoff.as_millis()
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let local = match stream.local_addr() {
            Ok(a) => a,
            Err(_) => continue,
        };
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(permit) => {
                // Boxed: the task then holds the connection's future once (an `async move`
                // block awaiting a captured future stores it twice, 18 KiB more per
                // connection).
                let served = Box::pin(serve(Arc::clone(&shared), stream, peer, local));
                tokio::spawn(async move {
                    served.await;
                    drop(permit);
                });
            }
            Err(_) if shared.callers.displace_oldest_awaiting() => {
                // On a gateway, the connection that has waited longest for its credentials
                // is refused to make room, and this one takes its slot as it is given back:
                // clients that send nothing cannot keep out one that says who it is.
                let (slots, serve, shared) =
                    (Arc::clone(&slots), Arc::clone(&serve), Arc::clone(&shared));
                tokio::spawn(async move {
                    let freed = tokio::time::timeout(DISPLACED_WAIT, slots.acquire_owned());
                    match freed.await {
                        Ok(Ok(permit)) => {
                            Box::pin(serve(shared, stream, peer, local)).await;
                            drop(permit);
                        }
                        _ => overloaded(&shared, stream, overload).await,
                    }
                });
            }
            Err(_) if overload == Overload::Close => drop(stream),
            Err(_) => {
                let shared = Arc::clone(&shared);
                tokio::spawn(async move { overloaded(&shared, stream, overload).await });
            }
        }
    }
}

/// How long a connection past the limit waits for the slot of the one it displaced (which
/// is given back as soon as that one has been answered).
const DISPLACED_WAIT: Duration = Duration::from_secs(1);

/// Answers a connection past `--max-connections` as its listener does (`overload`).
async fn overloaded(shared: &Shared, mut stream: tokio::net::TcpStream, overload: Overload) {
    if overload == Overload::Close {
        return;
    }
    let max = shared.limits.max_connections;
    let refusal = Refusal::new(
        Code::TooManyConnections,
        format!("sluice is at its limit of {max} concurrent connections; retry later"),
    );
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        stream.write_all(&refusal.to_bytes()),
    )
    .await;
    let _ = stream.shutdown().await;
}
