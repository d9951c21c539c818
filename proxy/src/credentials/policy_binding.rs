//! `credential_binding` (spec §3.4): a policy endpoint that names a provider profile binds
//! that profile's credentials there, as the profile's own endpoints do. This is how an
//! endpointless profile (OpenShell's `aws-bedrock`, `aws`) is bound at all.
//!
//! Owns the step "loaded profiles + loaded policy → profiles with the endpoints that bind
//! them": each such policy endpoint's host, ports and path become an endpoint of the named
//! profile (so matching, scrubbing and `uninspected_credentials` treat it as one), a name
//! that no loaded profile has is an error at the endpoint's line, and a profile with
//! credentials bound nowhere is a warning. It decides nothing per request (`binding.rs`).

use crate::policy::Policy;

use super::profile::{ProfileEndpoint, ProviderProfile};

/// What binding found: warnings to print, or errors that refuse the load.
#[derive(Debug, Default)]
pub struct Bound {
    pub warnings: Vec<String>,
    pub errors: Vec<String>,
}

/// Adds to each profile the policy endpoints whose `credential_binding.provider` names it.
pub fn bind_from_policy(profiles: &mut [ProviderProfile], policy: &Policy) -> Bound {
    let mut out = Bound::default();
    for entry in policy.entries() {
        for ep in &entry.endpoints {
            let Some(id) = &ep.credential_binding else {
                continue;
            };
            let field = format!("{}.credential_binding.provider", ep.field());
            let Some(profile) = profiles.iter_mut().find(|p| p.id.as_str() == id) else {
                out.errors.push(format!(
                    "{}: {field}: no provider profile `{id}` is loaded (--providers)",
                    ep.location
                ));
                continue;
            };
            if profile.credentials.is_empty() {
                out.warnings.push(format!(
                    "{}: warning: {field}: provider profile `{id}` declares no credentials, so this binds nothing",
                    ep.location
                ));
            }
            profile.endpoints.push(ProfileEndpoint {
                host: ep.host.clone(),
                ports: ep.ports.clone(),
                selector: ep.selector.clone(),
                allow_plaintext: false,
                location: ep.location.clone(),
            });
        }
    }
    for p in profiles.iter() {
        if !p.credentials.is_empty() && p.endpoints.is_empty() {
            out.warnings.push(format!(
                "{}: warning: provider profile `{}` has credentials but no endpoints, and no policy endpoint names it in `credential_binding: {{provider: {}}}`: its secrets are swapped in nowhere",
                p.location, p.id, p.id
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests;
