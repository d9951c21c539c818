//! sluice: an egress proxy appliance for untrusted workloads.
//!
//! The library holds everything the `sluice` binary is made of, so that benchmarks and
//! integration tests exercise the same code: `policy` (the pure policy engine), `cli`
//! (subcommands and exit codes), `listen` and `pipeline` (the proxy: accept, identify,
//! decide, dial, relay), `http` (strict HTTP/1 on the client side), `relay` and `audit`;
//! `transparent` (what a redirected connection is for), `dns` (the policy DNS responder),
//! `netfence` (the nftables fence of a sandboxed namespace or pod);
//! decide, dial, relay), `http` (strict HTTP/1 on the client side), `relay` and `audit`; `metrics` (Prometheus, derived from the audit events);
//! `fuzz` (feature `fuzz`, off in the binary) holds the entry points the fuzz targets and
//! their property-test runner share.
#![forbid(unsafe_code)]

pub mod audit;
pub mod cli;
pub mod config_file;
pub mod credentials;
pub mod dns;
pub mod drain;
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod http;
pub mod listen;
pub mod metrics;
pub mod netfence;
pub mod nofollow;
pub mod otlp;
pub mod pipeline;
pub use sluice_policy as policy;
pub mod proxy_protocol;
pub mod refusal_code;
pub mod relay;
pub mod slots;
pub mod tenants;
pub mod tls;
pub mod transparent;
