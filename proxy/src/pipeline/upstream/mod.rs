//! The upstream side: from an admitted host and port to a vetted, connected socket
//! (`destination`, SSRF-safe), and the verified TLS connection and HTTP/1.1 client over it
//! (`open`).

pub mod destination;
pub(in crate::pipeline) mod open;
