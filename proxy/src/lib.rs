//! sluice: an egress proxy appliance for untrusted workloads.
//!
//! The library holds everything the `sluice` binary is made of, so that benchmarks and
//! integration tests exercise the same code: `policy` (the pure policy engine) and `cli`
//! (subcommands and exit codes). Listeners, TLS, credentials and audit join as they are built.
#![forbid(unsafe_code)]

pub mod cli;
pub mod policy;
