//! sluice-resolver: turns a policy-approved host name into the addresses sluice may dial.
//!
//! It owns DNS resolution (hickory-resolver with the system configuration), static
//! `--resolve HOST=IP` overrides, the SSRF address classes of the OpenShell semantics (§6.4)
//! and address pinning: only the addresses vetted here are ever dialled. It does not decide
//! whether a host is allowed at all; that is the policy engine's job in the `sluice` crate.
//!
//! The resolver is built with the explicit-proxy issue; until then this crate has no items.
#![forbid(unsafe_code)]
