//! Client streams as they are handed on (to TLS, to the request loop): one that counts the
//! bytes read from it and written to it, for the close event of a connection whose stream is
//! handed on before it ends; one that first replays bytes already read from it (a CONNECT
//! client's first bytes, a peeked ClientHello).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes read from the client (`bytes_in`) and written to it (`bytes_out`) so far.
#[derive(Debug, Default)]
pub struct Traffic {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

impl Traffic {
    pub fn add_in(&self, n: u64) {
        self.bytes_in.fetch_add(n, Ordering::Relaxed);
    }

    pub fn bytes_in(&self) -> u64 {
        self.bytes_in.load(Ordering::Relaxed)
    }

    pub fn bytes_out(&self) -> u64 {
        self.bytes_out.load(Ordering::Relaxed)
    }
}

/// `inner`, with every byte through it added to a shared [`Traffic`].
#[derive(Debug)]
pub struct Counted<S> {
    inner: S,
    traffic: Arc<Traffic>,
}

impl<S> Counted<S> {
    pub fn new(inner: S, traffic: Arc<Traffic>) -> Self {
        Counted { inner, traffic }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before);
        self.traffic.add_in(n as u64);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.traffic
                .bytes_out
                .fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    // TLS hands over every record it has ready at once: one system call for all of them.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = &polled {
            self.traffic
                .bytes_out
                .fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A stream that first yields bytes already read from it.
#[derive(Debug)]
pub struct Prefixed<S> {
    prefix: BytesMut,
    inner: S,
}

impl<S> Prefixed<S> {
    pub fn new(prefix: BytesMut, inner: S) -> Self {
        Prefixed { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            if self.prefix.is_empty() {
                // Free the buffer the prefix came in: the stream outlives it by hours.
                self.prefix = BytesMut::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn counts_both_directions() {
        let (a, mut b) = tokio::io::duplex(64);
        let traffic = Arc::new(Traffic::default());
        let mut c = Counted::new(a, Arc::clone(&traffic));
        c.write_all(b"hello").await.unwrap();
        b.write_all(b"abc").await.unwrap();
        drop(b);
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        assert_eq!((traffic.bytes_in(), traffic.bytes_out()), (3, 5));
    }

    /// Both wrappers pass a vectored write through whole (a TLS stream's ready records go out
    /// in one system call), and count it.
    #[tokio::test]
    async fn vectored_writes_pass_through_whole_and_are_counted() {
        let (a, mut b) = tokio::net::UnixStream::pair().unwrap();
        let traffic = Arc::new(Traffic::default());
        let mut w = Prefixed::new(BytesMut::new(), Counted::new(a, Arc::clone(&traffic)));
        assert!(w.is_write_vectored());
        let bufs = [
            IoSlice::new(b"one "),
            IoSlice::new(b"two "),
            IoSlice::new(b"three"),
        ];
        let n = w.write_vectored(&bufs).await.unwrap();
        assert_eq!(n, 13);
        assert_eq!(traffic.bytes_out(), 13);
        drop(w);
        let mut got = String::new();
        b.read_to_string(&mut got).await.unwrap();
        assert_eq!(got, "one two three");
    }

    #[tokio::test]
    async fn prefixed_reads_the_prefix_first() {
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b"world").await.unwrap();
        drop(a);
        let mut p = Prefixed::new(BytesMut::from(&b"hello "[..]), b);
        let mut out = String::new();
        p.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
