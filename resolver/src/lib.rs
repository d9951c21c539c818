//! sluice-resolver: turns a policy-approved host name into the addresses sluice may dial.
//!
//! It owns DNS resolution (hickory-resolver with the system configuration), static
//! `--resolve HOST=IP` overrides, the SSRF address classes of the OpenShell semantics (§6.4)
//! and address pinning: only the addresses vetted here are ever dialled. It does not decide
//! whether a host is allowed at all; that is the policy engine's job in the `sluice` crate.
//!
//! The proxy's walk for one destination:
//!
//! 1. [`screen_host`] refuses cloud metadata host names before anything is looked up;
//! 2. [`Resolver::resolve`] returns every address of the host (IP literal, `--resolve`
//!    override, `/etc/hosts`, then DNS, within a deadline);
//! 3. [`vet`] checks **all** of them against the [`DestinationPlan`] the policy match chose and
//!    returns the socket addresses to dial; the proxy dials only those (no second lookup).
//!
//! Modules: `class` (address classes, pure), `embedded` (the IPv6 forms that carry an IPv4
//! address, pure), `vet` (plans and the check, pure), `overrides`
//! (`--resolve` parsing), `resolve` (the lookup, the only I/O).
#![forbid(unsafe_code)]

mod class;
mod embedded;
mod host;
mod overrides;
mod resolve;
#[cfg(test)]
mod test_dns;
mod vet;

pub use class::{
    AddressClass, BlockedOverlap, CLOUD_METADATA_ADDRESSES, always_blocked_in, classify,
};
pub use overrides::{Override, OverrideError, Overrides};
pub use resolve::{DEFAULT_LOOKUP_TIMEOUT, Resolver, ResolverError};
pub use vet::{
    CONTROL_PLANE_PORTS, DestinationPlan, Refusal, RefusalKind, VetOptions, is_metadata_host,
    screen_host, vet,
};
