//! The policy each request inside an admitted tunnel is judged by: the one in force when the
//! request arrives, not the one the tunnel was admitted under. When the policy has not been
//! reloaded since, the tunnel's own snapshot and admission are used as they are; after a
//! reload, the caller and destination are decided again at L4 against the new policy, so the
//! next request of a kept-alive HTTP/1.1 connection and the next stream of an HTTP/2
//! connection follow the change. HTTP/1.1 (`forward.rs`) and HTTP/2 (`h2.rs`) both call
//! `tunnel_policy`; both refuse an L4 denial with `l4_refusal`.

use std::sync::Arc;

use super::Shared;
use super::caller::Known;
use crate::http::respond::Refusal;
use crate::policy::Policy;
use crate::policy::decide::{Admission, L4Decision, L4Denial};

/// The policy snapshot and admission for the next request of a tunnel admitted under
/// `snapshot` with `admission`, or the new policy's L4 denial.
pub fn tunnel_policy(
    shared: &Shared,
    snapshot: &Arc<Policy>,
    admission: &Admission,
    known: &Known,
    host: &str,
    port: u16,
) -> Result<(Arc<Policy>, Admission), L4Denial> {
    let now = shared.policy.load_full();
    if Arc::ptr_eq(&now, snapshot) {
        return Ok((now, admission.clone()));
    }
    match now.decide_l4(&known.policy_caller(), host, port) {
        L4Decision::Allow(a) => Ok((now, a)),
        L4Decision::Deny(d) => Err(d),
    }
}

/// The `403 policy_denied` (stage `l4`) of a request `what` (method, authority and path)
/// that the policy does not admit.
pub fn l4_refusal(what: &str, denial: L4Denial, known: &Known, host: &str, port: u16) -> Refusal {
    Refusal::new(
        403,
        "policy_denied",
        format!("{what} not permitted by policy"),
    )
    .with_reason(denial.reason)
    .with("binary", known.exe.clone())
    .with("ancestors", known.ancestors.clone())
    .with("host", host.to_string())
    .with("port", port)
    .with("stage", "l4")
}
