//! One accepted client connection: its id, its addresses, when it began, and the signal
//! that stops it (the caller no longer holds the socket; later, a reload that revokes it).

use std::net::SocketAddr;

use super::holder;

/// One accepted client connection, and what is known about it so far.
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    pub started: std::time::Instant,
    /// Raised when the process identified as the caller no longer holds the socket.
    pub stop: holder::Stop,
}
