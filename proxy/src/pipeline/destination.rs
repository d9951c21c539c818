//! From an admitted host:port to a connected upstream socket, SSRF-safe.
//!
//! Owns the choice of destination plan from the policy match (spec §6.4: `allowed_ips`, an IP
//! literal target, an exact declared host, else public addresses only), the single lookup,
//! the vetting of every address (all must pass), and dialling only vetted addresses, each in
//! turn with a timeout. The address classes and the vetting rules themselves are in the
//! `sluice-resolver` crate.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use sluice_resolver::{DestinationPlan, VetOptions};
use tokio::net::TcpStream;

use super::Shared;
use crate::policy::decide::Admission;
use crate::policy::glob::HostPattern;
use crate::policy::{Compat, Policy};

/// Why no upstream connection was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DialError {
    /// The destination check refused it (403 `ssrf_denied`): the detail names the kind.
    Refused { detail: String, reason: String },
    /// The name did not resolve (502).
    Resolve(String),
    /// Every vetted address refused or failed (502 `upstream_unreachable`).
    Unreachable(String),
    /// Every vetted address timed out (504).
    Timeout,
}

/// The destination plan for an admitted connection.
///
/// By default a name must resolve to public addresses unless an endpoint lists `allowed_ips`
/// (an IP-literal target is its own declaration). The reference also lets an exactly declared
/// host name reach private ranges (spec §6.4 "ExactDeclaredHost"), so a DNS answer can steer
/// an allowed name into the internal network; sluice does that only in `--compat openshell`.
pub fn plan_for(
    policy: &Policy,
    admission: &Admission,
    host: &str,
    compat: Compat,
) -> DestinationPlan {
    let mut nets = Vec::new();
    let mut has_invalid = false;
    let mut exact = false;
    for r in &admission.endpoints {
        let ep = policy.endpoint(*r);
        nets.extend(ep.allowed_ips.nets.iter().copied());
        has_invalid |= ep.allowed_ips.has_invalid;
        exact |= matches!(&ep.host, HostPattern::Exact(h) if h == host);
    }
    if !nets.is_empty() || has_invalid {
        DestinationPlan::ExplicitAllowedIps { nets, has_invalid }
    } else if let Ok(ip) = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        DestinationPlan::ImplicitIpLiteral(ip)
    } else if exact && compat == Compat::OpenShell {
        DestinationPlan::ExactDeclaredHost
    } else {
        DestinationPlan::DefaultPublicOnly
    }
}

/// Resolves, vets and dials. On success returns the stream and the address dialled.
pub async fn connect(
    shared: &Shared,
    plan: &DestinationPlan,
    host: &str,
    port: u16,
) -> Result<(TcpStream, SocketAddr), DialError> {
    if sluice_resolver::is_metadata_host(host) {
        return Err(DialError::Refused {
            detail: "metadata host".to_string(),
            reason: format!("{host} is a cloud metadata service name"),
        });
    }
    let addrs = shared
        .resolver
        .resolve(host)
        .await
        .map_err(|e| DialError::Resolve(e.to_string()))?;
    let vetted = sluice_resolver::vet(
        plan,
        &addrs,
        port,
        VetOptions {
            allow_loopback: shared.allow_loopback,
        },
    )
    .map_err(|r| DialError::Refused {
        detail: r.kind.to_string(),
        reason: r.detail,
    })?;
    crate::metrics::upstream_connect(dial(&vetted, shared.limits.connect_timeout)).await
}

/// Dials each address in turn; a refusal moves on at once, a timeout after `timeout`.
pub async fn dial(
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), DialError> {
    let mut last = String::from("no address to dial");
    let mut all_timed_out = !addrs.is_empty();
    for &addr in addrs {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok((stream, addr));
            }
            Ok(Err(e)) => {
                all_timed_out = false;
                last = format!("{addr}: {e}");
            }
            Err(_) => {
                last = format!(
                    "{addr}: connect timed out after {} s",
                    timeout.as_secs_f32()
                )
            }
        }
    }
    if all_timed_out {
        Err(DialError::Timeout)
    } else {
        Err(DialError::Unreachable(last))
    }
}
