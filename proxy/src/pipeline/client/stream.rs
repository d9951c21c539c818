//! The client's side of a connection as the pipeline reads and writes it: a TCP socket, or
//! the proxy hop's TLS over one (`--tls-listen`), and the two halves each splits into.
//!
//! Owns only the transport: one pipeline serves both (the same head reading, decisions,
//! tunnels and audit), and nothing past this file knows which it has. A TCP socket splits
//! into tokio's owned halves (no lock); a TLS stream, whose reads and writes share one
//! session, splits through `tokio::io::split`. Who the hop's client certificate names is the
//! tenants' business (`tenants::cert`), found when the hop is accepted (`listen::hop`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::counted::Prefixed;

/// The proxy hop's TLS: over the socket, after what the listener read ahead of it (the
/// bytes that followed a PROXY protocol header).
pub type HopTls = tokio_rustls::server::TlsStream<Prefixed<TcpStream>>;

/// A client connection's transport.
#[derive(Debug)]
pub enum ClientStream {
    Tcp(TcpStream),
    /// Boxed: a TLS session is kilobytes, the socket a few words.
    Tls(Box<HopTls>),
}

/// The reading half of a [`ClientStream`].
#[derive(Debug)]
pub enum ClientRead {
    Tcp(OwnedReadHalf),
    Tls(ReadHalf<Box<HopTls>>),
}

/// The writing half of a [`ClientStream`].
#[derive(Debug)]
pub enum ClientWrite {
    Tcp(OwnedWriteHalf),
    Tls(WriteHalf<Box<HopTls>>),
}

/// Two halves that are not of one stream.
#[derive(Debug, thiserror::Error)]
#[error("the two halves are not of one client connection")]
pub struct NotOneStream;

impl ClientStream {
    pub fn into_split(self) -> (ClientRead, ClientWrite) {
        match self {
            ClientStream::Tcp(s) => {
                let (r, w) = s.into_split();
                (ClientRead::Tcp(r), ClientWrite::Tcp(w))
            }
            ClientStream::Tls(s) => {
                let (r, w) = tokio::io::split(s);
                (ClientRead::Tls(r), ClientWrite::Tls(w))
            }
        }
    }
}

impl ClientRead {
    /// The socket, when the client speaks on it directly (what can be read from it without
    /// waiting; a TLS session decides that itself).
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            ClientRead::Tcp(r) => Some(r.as_ref()),
            ClientRead::Tls(_) => None,
        }
    }

    /// The stream again, from both its halves.
    pub fn reunite(self, w: ClientWrite) -> Result<ClientStream, NotOneStream> {
        match (self, w) {
            (ClientRead::Tcp(r), ClientWrite::Tcp(w)) => r
                .reunite(w)
                .map(ClientStream::Tcp)
                .map_err(|_| NotOneStream),
            (ClientRead::Tls(r), ClientWrite::Tls(w)) => {
                if r.is_pair_of(&w) {
                    Ok(ClientStream::Tls(r.unsplit(w)))
                } else {
                    Err(NotOneStream)
                }
            }
            _ => Err(NotOneStream),
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClientStream::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ClientStream::Tcp(s) => s.is_write_vectored(),
            ClientStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl AsyncRead for ClientRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientRead::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            ClientRead::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientWrite::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            ClientWrite::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientWrite::Tcp(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            ClientWrite::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ClientWrite::Tcp(w) => w.is_write_vectored(),
            ClientWrite::Tls(w) => w.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientWrite::Tcp(w) => Pin::new(w).poll_flush(cx),
            ClientWrite::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientWrite::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            ClientWrite::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}
