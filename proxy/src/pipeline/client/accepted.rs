//! One accepted client connection: its id, its addresses, the client certificate of its
//! proxy hop, when it began, and the signal that stops it (the caller no longer holds the socket, or a reload revoked it).

use std::net::SocketAddr;

use super::stop;

/// One accepted client connection, and what is known about it so far.
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// The client certificate the proxy hop presented (`--tls-listen` with `--client-ca`).
    pub cert: Option<std::sync::Arc<crate::tenants::cert::PeerCert>>,
    pub started: std::time::Instant,
    /// Raised when the process identified as the caller no longer holds the socket, or a
    /// reloaded policy no longer allows the connection.
    pub stop: stop::Stop,
    /// The raising side of `stop`, for the caller watcher and the live registry.
    pub raise: stop::Raise,
}
