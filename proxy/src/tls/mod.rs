//! TLS: the ephemeral CA (`ca`), the client-facing side that terminates the sandbox's TLS
//! with cached leaves (`server`), and the upstream side that verifies every server (`upstream`).

pub mod ca;
pub mod server;
pub mod upstream;
