//! TLS: the ephemeral CA (`ca`), the client-facing side that terminates the sandbox's TLS
//! with cached leaves (`server`), and the upstream side that verifies every server (`upstream`).

pub(crate) mod ca;
pub(crate) mod server;
pub(crate) mod upstream;
