//! Credential bindings (spec §3.4, and sluice's binaries rule): which secret a placeholder
//! may become on a given request.
//!
//! Owns the per-key decision for a request scope (host, port, canonical path, caller): a key
//! resolves only when its profile has an endpoint matching host, port and path, and, when the
//! profile lists `binaries`, the caller or one of its ancestors is one of them. Matching uses
//! the policy engine's `HostPattern`, port lists and `PathSelector`, so a binding means what
//! the same endpoint means in a policy. Also owns "is this destination credentialed?", which
//! the `uninspected_credentials` refusal of L4 and `tls: skip` connections needs (spec §3.6).
//! It rewrites nothing (`rewrite.rs`, `body.rs`) and reads no files.

use std::collections::HashMap;
use std::time::SystemTime;

use sluice_addr::Authority;

use crate::policy::decide::Caller;
use crate::policy::model::Endpoint;

use super::profile::{CredentialRef, EnvKey, Placement, ProfileEndpoint, ProviderProfile};
use super::secrets::{Secret, SecretStore, Unavailability};

/// One request as bindings see it.
#[derive(Clone, Copy, Debug)]
pub struct RequestScope<'a> {
    /// Where the request goes; its host lower-case, as the target parser leaves it.
    pub dst: &'a Authority,
    /// The canonical path, as policy judged it (placeholders still in it); a query, if one
    /// is passed by mistake, is ignored.
    pub path: &'a str,
    pub caller: Caller<'a>,
    /// How the request goes upstream.
    pub transport: Transport,
}

/// How a request reaches its upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// TLS to an upstream whose certificate was verified for the request's host.
    VerifiedTls,
    /// Plain HTTP (an absolute-form `http://` request, or plain HTTP inside a tunnel):
    /// anyone on the path, or whatever answers on that address, reads it.
    Plaintext,
}

/// Why a known credential may not be used on this request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mismatch {
    /// No endpoint of the credential's profile matches host, port and path.
    Endpoint,
    /// The profile lists `binaries`, and neither the caller nor an ancestor is one of them.
    Caller,
}

impl Mismatch {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Mismatch::Endpoint => {
                "the request's host, port and path are outside the credential's profile endpoints"
            }
            Mismatch::Caller => {
                "the calling program is not among the credential's profile binaries"
            }
        }
    }
}

/// What a placeholder's key becomes on one request.
#[derive(Debug)]
pub enum Resolution<'b> {
    /// Swap in this secret, where `placement` allows.
    Allow {
        secret: &'b Secret,
        credential: CredentialRef,
        placement: &'b Placement,
    },
    /// Bound, but the request would carry it in plaintext and no matching endpoint opts in
    /// (`allow_plaintext_credentials`): `403 credential_requires_tls` and a finding.
    RequiresTls { credential: CredentialRef },
    /// A known key, outside its binding: `403 credential_endpoint_mismatch` and a finding.
    OutsideBinding {
        credential: CredentialRef,
        reason: Mismatch,
    },
    /// No credential has this env var.
    Unknown,
    /// Known and bound, but without a usable value.
    Unavailable {
        credential: CredentialRef,
        reason: Unavailability,
    },
}

/// Something that turns a placeholder's key into a `Resolution`: a `Scoped` binding in the
/// proxy, anything in tests.
pub trait Resolve {
    fn resolve(&self, key: &str) -> Resolution<'_>;
}

/// All profiles with their secrets, indexed by env key. Immutable once built; share it
/// behind an `Arc` with the policy snapshot it was loaded with.
#[derive(Debug, Default)]
pub struct Bindings {
    profiles: Vec<ProviderProfile>,
    /// Env key → (profile index, credential index).
    keys: HashMap<EnvKey, (usize, usize)>,
    store: SecretStore,
    /// Values earlier loads bound and this one does not, most recent first.
    retired: Vec<Retired>,
}

/// How many secret values taken out of service by reloads are still scrubbed from responses
/// (the oldest beyond it is forgotten).
pub const RETIRED_KEPT: usize = 64;

/// A secret value a reload took out of service (rotated, or its credential or profile
/// withdrawn), with the endpoints it was bound to and its placeholder: an upstream may have
/// stored it while it was in service, so what comes back from there is still scrubbed of it.
#[derive(Debug)]
struct Retired {
    endpoints: Vec<ProfileEndpoint>,
    placeholder: String,
    secret: Secret,
}

impl Bindings {
    /// `profiles` as loaded (env keys are unique across them: the loader refuses duplicates;
    /// should one slip through, the first credential keeps it).
    pub fn new(profiles: Vec<ProviderProfile>, store: SecretStore) -> Bindings {
        let mut keys = HashMap::new();
        for (p, profile) in profiles.iter().enumerate() {
            for (c, credential) in profile.credentials.iter().enumerate() {
                for key in &credential.env_vars {
                    keys.entry(key.clone()).or_insert((p, c));
                }
            }
        }
        Bindings {
            profiles,
            keys,
            store,
            retired: Vec::new(),
        }
    }

    /// Takes over from `before` (the bindings these replace at a reload) every value it
    /// scrubbed responses of and these would not: its values in service that changed or went,
    /// then what it had retired itself; most recent first, at most [`RETIRED_KEPT`].
    pub fn retire_from(&mut self, before: &Bindings) {
        let mut retired: Vec<Retired> = Vec::new();
        let earlier = before.in_service().chain(
            before
                .retired
                .iter()
                .map(|r| (r.endpoints.as_slice(), r.placeholder.clone(), &r.secret)),
        );
        for (endpoints, placeholder, secret) in earlier {
            // One value scrubbed at one place once (a credential's other env var names give
            // it the same placeholder in the scrub: the first one's).
            let same =
                |e: &[ProfileEndpoint], v: &Secret| e == endpoints && v.expose() == secret.expose();
            let kept = self.in_service().any(|(e, _, v)| same(e, v))
                || retired.iter().any(|r| same(&r.endpoints, &r.secret));
            if kept {
                continue;
            }
            if retired.len() == RETIRED_KEPT {
                break;
            }
            retired.push(Retired {
                endpoints: endpoints.to_vec(),
                placeholder,
                secret: secret.copy(),
            });
        }
        self.retired = retired;
    }

    /// A second copy (the secrets zeroized on drop like the first's).
    pub fn copy(&self) -> Bindings {
        Bindings {
            profiles: self.profiles.clone(),
            keys: self.keys.clone(),
            store: self.store.copy(),
            retired: self
                .retired
                .iter()
                .map(|r| Retired {
                    endpoints: r.endpoints.clone(),
                    placeholder: r.placeholder.clone(),
                    secret: r.secret.copy(),
                })
                .collect(),
        }
    }

    /// Each refreshed credential's env vars take their current token (`token`: the value and
    /// its expiry), which serves until it expires; one without a token serves nothing.
    /// Nothing else changes: what a token refresh swaps in, without a reload.
    pub fn take_tokens(&mut self, token: &dyn Fn(&str) -> Option<(String, SystemTime)>) {
        let keys: Vec<EnvKey> = self
            .profiles
            .iter()
            .flat_map(|p| &p.credentials)
            .filter(|c| c.is_refreshed())
            .flat_map(|c| c.env_vars.iter().cloned())
            .collect();
        for key in keys {
            let current = token(key.as_str())
                .and_then(|(value, expires)| Some((Secret::new(value).ok()?, expires)));
            self.store.set_refreshed(&key, current);
        }
    }

    /// Every value in service: its profile's endpoints, its placeholder, the value.
    fn in_service(&self) -> impl Iterator<Item = (&[ProfileEndpoint], String, &Secret)> {
        self.credentialed_profiles().flat_map(move |profile| {
            profile
                .credentials
                .iter()
                .flat_map(|c| &c.env_vars)
                .filter_map(move |key| match self.store.get(key.as_str()) {
                    Some(Ok(secret)) => Some((
                        profile.endpoints.as_slice(),
                        format!("{}{}", super::placeholder::CANONICAL_PREFIX, key.as_str()),
                        secret,
                    )),
                    _ => None,
                })
        })
    }

    pub fn profiles(&self) -> &[ProviderProfile] {
        &self.profiles
    }

    pub fn store(&self) -> &SecretStore {
        &self.store
    }

    /// Whether any profile declares a credential.
    pub fn has_credentials(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The decision for one key on one request.
    pub(super) fn resolve(&self, key: &str, scope: &RequestScope<'_>) -> Resolution<'_> {
        let Some(&(p, c)) = self.keys.get(key) else {
            return Resolution::Unknown;
        };
        let Some(profile) = self.profiles.get(p) else {
            return Resolution::Unknown;
        };
        let (Some(credential), Some(placement)) = (profile.credential_ref(c), profile.placement(c))
        else {
            return Resolution::Unknown;
        };
        let path = scope.path.split('?').next().unwrap_or(scope.path);
        if !profile.binds(scope.dst, path) {
            return Resolution::OutsideBinding {
                credential,
                reason: Mismatch::Endpoint,
            };
        }
        if !profile.admits(&scope.caller) {
            return Resolution::OutsideBinding {
                credential,
                reason: Mismatch::Caller,
            };
        }
        if scope.transport == Transport::Plaintext && !profile.binds_plaintext(scope.dst, path) {
            return Resolution::RequiresTls { credential };
        }
        match self.store.serving(key) {
            Some(Ok(secret)) => Resolution::Allow {
                secret,
                credential,
                placement,
            },
            Some(Err(reason)) => Resolution::Unavailable { credential, reason },
            None => Resolution::Unavailable {
                credential,
                reason: Unavailability::Unset,
            },
        }
    }

    /// These bindings, scoped to one request: what `rewrite_request` and `rewrite_body` take.
    pub(crate) fn scoped<'b>(&'b self, scope: RequestScope<'b>) -> Scoped<'b> {
        Scoped {
            bindings: self,
            scope,
        }
    }

    /// Whether a connection to `dst` reaches a credentialed endpoint: one of a profile
    /// that declares credentials (all its endpoints count, whatever their path, spec §3.6),
    /// or one where a value a reload took out of service was bound (an upstream may have
    /// stored it: what comes back is still scrubbed, so it is still reached inspected only).
    pub(crate) fn is_credentialed(&self, dst: &Authority) -> bool {
        self.credentialed_profiles()
            .any(|p| p.endpoints.iter().any(|e| e.covers(dst)))
            || self
                .retired
                .iter()
                .any(|r| r.endpoints.iter().any(|e| e.covers(dst)))
    }

    /// Every secret of a profile with an endpoint at `dst` (whatever its path), each
    /// with its placeholder: what any response from there is scrubbed of, whether or not its
    /// request carried a secret (a secret stored upstream by one request must not come back
    /// raw in the answer to another).
    /// Values a reload took out of service count too (see [`Bindings::retire_from`]).
    pub(crate) fn endpoint_secrets(&self, dst: &Authority) -> super::scrub::ScrubSet {
        let mut set = super::scrub::ScrubSet::default();
        let covers = |endpoints: &[ProfileEndpoint]| endpoints.iter().any(|e| e.covers(dst));
        for profile in self.credentialed_profiles() {
            if !covers(&profile.endpoints) {
                continue;
            }
            for key in profile.credentials.iter().flat_map(|c| &c.env_vars) {
                if let Some(Ok(secret)) = self.store.get(key.as_str()) {
                    let placeholder =
                        format!("{}{}", super::placeholder::CANONICAL_PREFIX, key.as_str());
                    set.add(secret.expose().as_bytes(), placeholder.as_bytes());
                }
            }
        }
        for r in self.retired.iter().filter(|r| covers(&r.endpoints)) {
            set.add(r.secret.expose().as_bytes(), r.placeholder.as_bytes());
        }
        set
    }

    /// Whether a policy endpoint overlaps a credentialed profile endpoint: host patterns that
    /// can match a common name and a shared port. For refusing L4 and `tls: skip` endpoints
    /// without `allow_uninspected_credentials`, at load or at connect.
    pub fn endpoint_is_credentialed(&self, endpoint: &Endpoint) -> bool {
        self.credentialed_profiles().any(|p| {
            p.endpoints.iter().any(|e| {
                e.ports.iter().any(|port| endpoint.ports.contains(port))
                    && e.host.intersects(&endpoint.host)
            })
        })
    }

    /// `NAME=openshell:resolve:env:NAME` for every env var with a usable value, sorted by
    /// name: what `sluice exec` puts in the sandboxed side's environment.
    pub fn child_env(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .keys
            .keys()
            .filter(|k| self.store.is_available(k.as_str()))
            .map(|k| (k.as_str().to_string(), k.placeholder()))
            .collect();
        out.sort();
        out
    }

    /// Every known secret value (as is, and as JSON writes it) → `[redacted:<credential>]`:
    /// what the audit sink removes from every line, whatever field holds it.
    pub fn redactor(&self) -> super::scrub::ScrubSet {
        let mut set = super::scrub::ScrubSet::default();
        let mut keys: Vec<(&EnvKey, &(usize, usize))> = self.keys.iter().collect();
        keys.sort();
        for (key, &(p, c)) in keys {
            let (Some(Ok(secret)), Some(credential)) = (
                self.store.get(key.as_str()),
                self.profiles.get(p).and_then(|pr| pr.credential_ref(c)),
            ) else {
                continue;
            };
            let label = format!("[redacted:{credential}]");
            let value = secret.expose();
            set.add(value.as_bytes(), label.as_bytes());
            if let Ok(json) = serde_json::to_string(value) {
                let escaped = zeroize::Zeroizing::new(json);
                let inner = &escaped[1..escaped.len() - 1];
                set.add(inner.as_bytes(), label.as_bytes());
            }
            for core in base64_cores(value.as_bytes()) {
                set.add(core.as_bytes(), label.as_bytes());
            }
        }
        set
    }

    fn credentialed_profiles(&self) -> impl Iterator<Item = &ProviderProfile> {
        self.profiles.iter().filter(|p| !p.credentials.is_empty())
    }
}

/// The base64 text that encodes `secret` wherever it sits in a longer string (a `Basic`
/// token of `user:secret`): for each of the three alignments, the characters whose six bits
/// all come from the secret. A few characters at either end, which mix in the neighbours'
/// bits, stay unredacted. Secrets too short to leave eight such characters give none.
fn base64_cores(secret: &[u8]) -> Vec<zeroize::Zeroizing<String>> {
    use base64::Engine as _;
    const MIN: usize = 8;
    let mut cores = Vec::new();
    for pad in 0..3 {
        let mut bytes = zeroize::Zeroizing::new(vec![0u8; pad]);
        bytes.extend_from_slice(secret);
        for engine in [
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ] {
            let text = zeroize::Zeroizing::new(engine.encode(&*bytes));
            // Characters from the first wholly after the pad to the last wholly inside.
            let from = (pad * 8).div_ceil(6);
            let to = (bytes.len() * 8) / 6;
            if let Some(core) = text.get(from..to)
                && core.len() >= MIN
            {
                cores.push(zeroize::Zeroizing::new(core.to_string()));
            }
        }
    }
    cores
}

/// `Bindings` for one request.
#[derive(Clone, Copy, Debug)]
pub struct Scoped<'b> {
    bindings: &'b Bindings,
    scope: RequestScope<'b>,
}

impl Resolve for Scoped<'_> {
    fn resolve(&self, key: &str) -> Resolution<'_> {
        self.bindings.resolve(key, &self.scope)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::credentials::profile;
    use crate::policy::Source;

    pub(crate) const PROFILES: &str = "\
id: telegram
credentials:
  - {name: bot-token, env_vars: [TELEGRAM_BOT_TOKEN], auth_style: path, path_template: '/bot{credential}/'}
endpoints:
  - {host: api.telegram.org, port: 443, path: '/bot*/**'}
---
id: maps
credentials:
  - {name: api-key, env_vars: [MAPS_KEY], query_param: key}
endpoints:
  - {host: maps.example.com, port: 443}
  - {host: plain.example.com, port: 8080, allow_plaintext_credentials: true}
---
id: github
credentials:
  - {name: token, env_vars: [GITHUB_TOKEN, GH_TOKEN]}
  - {name: unset, env_vars: [GITHUB_UNSET]}
endpoints:
  - {host: api.github.com, port: 443}
  - {host: '*.githubusercontent.com', ports: [443, 8443], path: /repos/**}
binaries: [/usr/bin/gh, /usr/lib/git-core/*]
---
id: docs
endpoints: [{host: docs.example.com, port: 443}]
";

    pub(crate) fn bindings(values: &[(&str, &str)]) -> Bindings {
        let loaded = profile::load(&[Source {
            name: "p.yaml".into(),
            text: PROFILES.into(),
        }])
        .unwrap();
        let values: Vec<(String, String)> = values
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let store = SecretStore::load(
            &loaded.profiles,
            |k| values.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            None,
        )
        .unwrap()
        .store;
        Bindings::new(loaded.profiles, store)
    }

    pub(crate) const NO_ANCESTORS: &[String] = &[];

    pub(crate) fn scope<'a>(
        host: &'a str,
        port: u16,
        path: &'a str,
        exe: &'a str,
    ) -> RequestScope<'a> {
        RequestScope {
            // A scope borrows its destination; a test's few are left to the process's end.
            dst: Box::leak(Box::new(Authority::new(host, port))),
            path,
            caller: Caller {
                exe,
                ancestors: NO_ANCESTORS,
                cmdline: &[],
                tenant: None,
            },
            transport: Transport::VerifiedTls,
        }
    }

    fn outcome(r: Resolution<'_>) -> String {
        match r {
            Resolution::Allow {
                secret, credential, ..
            } => {
                format!("allow {credential} {}", secret.expose())
            }
            Resolution::RequiresTls { credential } => format!("requires-tls {credential}"),
            Resolution::OutsideBinding { credential, reason } => {
                format!("outside {credential} {reason:?}")
            }
            Resolution::Unknown => "unknown".into(),
            Resolution::Unavailable { credential, reason } => {
                format!("unavailable {credential} {reason:?}")
            }
        }
    }

    #[test]
    fn the_redactor_catches_encoded_spellings() {
        use crate::audit::Redact as _;
        use base64::Engine as _;
        let secret = "Sk/Abc+Def=ghi-jkl";
        let b = bindings(&[("GH_TOKEN", secret)]);
        let r = b.redactor();
        let label = "[redacted:github/token]";
        for spelled in [
            secret.to_string(),
            "Sk%2FAbc%2BDef%3Dghi-jkl".into(),
            "Sk%2fAbc%2bDef%3dghi-jkl".into(),
            r"Sk\/Abc\u002bDef\u003Dghi-jkl".into(),
        ] {
            let line = format!(r#"{{"url":"/v1/{spelled}/x"}}"#);
            let out = String::from_utf8(r.redact(line.as_bytes()).unwrap_or_default()).unwrap();
            assert_eq!(out, format!(r#"{{"url":"/v1/{label}/x"}}"#), "{spelled}");
        }
        // A `Basic` token of `user:secret`, whatever the user's length: nothing that encodes
        // only the secret's bytes is left.
        let core = |t: &str, pad: usize| {
            // The characters of `t` that encode only bytes from `pad` on (the secret).
            t.get((pad * 8).div_ceil(6)..((pad + secret.len()) * 8) / 6)
                .unwrap_or_default()
                .to_string()
        };
        for user in ["", "u", "us", "usr", "x-access-token"] {
            let raw = format!("{user}:{secret}");
            let token = base64::engine::general_purpose::STANDARD.encode(&raw);
            let line = format!("curl -H 'Authorization: Basic {token}'");
            let out = String::from_utf8(r.redact(line.as_bytes()).unwrap_or_default()).unwrap();
            assert!(out.contains(label), "{user}: {out}");
            let inner = core(&token, user.len() + 1);
            assert!(inner.len() > 16);
            // At most two characters of the secret's own encoding survive at either end.
            assert!(!out.contains(&inner[2..inner.len() - 2]), "{user}: {out}");
        }
        // Too short to redact as base64 without hitting unrelated text.
        assert!(base64_cores(b"abcd").is_empty());
    }

    #[test]
    fn a_credentialed_endpoint_scrubs_all_its_secrets() {
        let b = bindings(&[
            ("TELEGRAM_BOT_TOKEN", "123:abc-tok"),
            ("GH_TOKEN", "ghp_s3cret"),
        ]);
        let scrub = |host, port, text: &str| {
            let mut out = Vec::new();
            b.endpoint_secrets(&Authority::new(host, port))
                .replace_all(text.as_bytes(), &mut out);
            String::from_utf8(out).unwrap()
        };
        let text = "a 123:abc-tok b ghp_s3cret c";
        // Whatever the path: the host and port decide.
        assert_eq!(
            scrub("api.telegram.org", 443, text),
            "a openshell:resolve:env:TELEGRAM_BOT_TOKEN b ghp_s3cret c"
        );
        assert_eq!(
            scrub("api.github.com", 443, text),
            // The primary name of the credential whose value it is.
            "a 123:abc-tok b openshell:resolve:env:GITHUB_TOKEN c"
        );
        assert!(
            b.endpoint_secrets(&Authority::new("api.github.com", 80))
                .is_empty()
        );
        assert!(
            b.endpoint_secrets(&Authority::new("docs.example.com", 443))
                .is_empty()
        );
    }

    #[test]
    fn values_a_reload_took_out_of_service_are_still_scrubbed_where_they_were_bound() {
        let scrub = |b: &Bindings, host, text: &str| {
            let mut out = Vec::new();
            b.endpoint_secrets(&Authority::new(host, 443))
                .replace_all(text.as_bytes(), &mut out);
            String::from_utf8(out).unwrap()
        };
        let first = bindings(&[("GH_TOKEN", "ghp_first"), ("MAPS_KEY", "maps_1")]);
        // Rotated: the old value comes back as the placeholder too.
        let mut second = bindings(&[("GH_TOKEN", "ghp_second"), ("MAPS_KEY", "maps_1")]);
        second.retire_from(&first);
        let gh = "openshell:resolve:env:GITHUB_TOKEN";
        assert_eq!(
            scrub(&second, "api.github.com", "ghp_first ghp_second"),
            format!("{gh} {gh}")
        );
        // Only where it was bound.
        assert_eq!(
            scrub(&second, "maps.example.com", "ghp_first maps_1"),
            "ghp_first openshell:resolve:env:MAPS_KEY"
        );
        // Withdrawn (no value at all now): both earlier values still go, over two reloads.
        let mut third = bindings(&[("MAPS_KEY", "maps_1")]);
        third.retire_from(&second);
        // Every profile withdrawn: the endpoints of the values taken out of service still
        // count as credentialed (no uninspected tunnel to them) and are still scrubbed.
        let mut none = Bindings::default();
        none.retire_from(&second);
        assert!(none.is_credentialed(&Authority::new("api.github.com", 443)));
        assert!(!Bindings::default().is_credentialed(&Authority::new("api.github.com", 443)));
        assert_eq!(scrub(&none, "api.github.com", "ghp_first"), gh);
        assert_eq!(
            scrub(&third, "api.github.com", "ghp_first ghp_second"),
            format!("{gh} {gh}")
        );
        // A value still in service is not kept twice.
        assert_eq!(third.retired.len(), 2);
        // Bounded: the oldest beyond RETIRED_KEPT is forgotten.
        let mut last = third;
        for i in 0..RETIRED_KEPT + 5 {
            let mut next = bindings(&[("GH_TOKEN", &format!("ghp_{i:04}"))]);
            next.retire_from(&last);
            last = next;
        }
        assert_eq!(last.retired.len(), RETIRED_KEPT);
        // In service: ghp_0068; retired: ghp_0067 down to ghp_0004.
        assert_eq!(scrub(&last, "api.github.com", "ghp_0004"), gh);
        assert_eq!(scrub(&last, "api.github.com", "ghp_0003"), "ghp_0003");
        assert_eq!(scrub(&last, "api.github.com", "ghp_first"), "ghp_first");
    }

    #[test]
    fn binding_by_host_port_and_path() {
        let b = bindings(&[("TELEGRAM_BOT_TOKEN", "123:abc"), ("GH_TOKEN", "ghp")]);
        let r = |host, port, path| {
            outcome(b.resolve(
                "TELEGRAM_BOT_TOKEN",
                &scope(host, port, path, "/usr/bin/python3"),
            ))
        };
        assert_eq!(
            r(
                "api.telegram.org",
                443,
                "/botopenshell:resolve:env:TELEGRAM_BOT_TOKEN/sendMessage"
            ),
            "allow telegram/bot-token 123:abc"
        );
        assert_eq!(
            r("api.telegram.org", 443, "/bot"),
            "allow telegram/bot-token 123:abc"
        );
        assert_eq!(
            r("api.telegram.org", 443, "/getMe"),
            "outside telegram/bot-token Endpoint"
        );
        assert_eq!(
            r("api.telegram.org", 80, "/botX/getMe"),
            "outside telegram/bot-token Endpoint"
        );
        assert_eq!(
            r("evil.example.com", 443, "/botX/getMe"),
            "outside telegram/bot-token Endpoint"
        );
        assert_eq!(
            r("api.telegram.org", 443, "/botX/getMe?x=/y"),
            "allow telegram/bot-token 123:abc"
        );
    }

    #[test]
    fn binding_by_binaries_and_ancestors() {
        let b = bindings(&[("GH_TOKEN", "ghp")]);
        let gh = scope("api.github.com", 443, "/user", "/usr/bin/gh");
        assert_eq!(
            outcome(b.resolve("GH_TOKEN", &gh)),
            "allow github/token ghp"
        );
        // The other env var of the credential shares its value.
        assert_eq!(
            outcome(b.resolve("GITHUB_TOKEN", &gh)),
            "allow github/token ghp"
        );
        let git = scope(
            "api.github.com",
            443,
            "/user",
            "/usr/lib/git-core/git-remote-https",
        );
        assert_eq!(
            outcome(b.resolve("GH_TOKEN", &git)),
            "allow github/token ghp"
        );
        let py = scope("api.github.com", 443, "/user", "/usr/bin/python3");
        assert_eq!(
            outcome(b.resolve("GH_TOKEN", &py)),
            "outside github/token Caller"
        );
        let ancestors = vec!["/bin/bash".to_string(), "/usr/bin/gh".to_string()];
        let child = RequestScope {
            caller: Caller {
                exe: "/usr/bin/python3",
                ancestors: &ancestors,
                cmdline: &[],
                tenant: None,
            },
            ..py
        };
        assert_eq!(
            outcome(b.resolve("GH_TOKEN", &child)),
            "allow github/token ghp"
        );
        // Endpoint mismatch is reported before the caller.
        let elsewhere = scope("example.com", 443, "/", "/usr/bin/python3");
        assert_eq!(
            outcome(b.resolve("GH_TOKEN", &elsewhere)),
            "outside github/token Endpoint"
        );
        // The telegram profile lists no binaries: any caller.
        let tg = scope("api.telegram.org", 443, "/botX/getMe", "/anything");
        assert_eq!(
            outcome(b.resolve("TELEGRAM_BOT_TOKEN", &tg)),
            "unavailable telegram/bot-token Unset"
        );
    }

    #[test]
    fn unknown_and_unavailable() {
        let b = bindings(&[("GH_TOKEN", "ghp")]);
        let gh = scope("api.github.com", 443, "/", "/usr/bin/gh");
        assert_eq!(outcome(b.resolve("NOPE", &gh)), "unknown");
        assert_eq!(
            outcome(b.resolve("GITHUB_UNSET", &gh)),
            "unavailable github/unset Unset"
        );
        let outside = scope("x.example.com", 443, "/", "/usr/bin/gh");
        assert_eq!(
            outcome(b.resolve("GITHUB_UNSET", &outside)),
            "outside github/unset Endpoint"
        );
        let scoped = b.scoped(gh);
        assert!(matches!(
            scoped.resolve("GH_TOKEN"),
            Resolution::Allow { .. }
        ));
    }

    #[test]
    fn credentialed_destinations() {
        let b = bindings(&[]);
        assert!(b.has_credentials());
        assert!(b.is_credentialed(&Authority::new("api.telegram.org", 443)));
        assert!(b.is_credentialed(&Authority::new("raw.githubusercontent.com", 8443)));
        assert!(!b.is_credentialed(&Authority::new("raw.githubusercontent.com", 80)));
        assert!(!b.is_credentialed(&Authority::new("api.telegram.org", 80)));
        // A profile without credentials makes nothing credentialed.
        assert!(!b.is_credentialed(&Authority::new("docs.example.com", 443)));
        assert!(!Bindings::default().is_credentialed(&Authority::new("api.telegram.org", 443)));
    }

    #[test]
    fn policy_endpoints_overlapping_credentialed_ones() {
        let b = bindings(&[]);
        let policy = "\
version: 1
network_policies:
  p:
    endpoints:
      - {host: '*.telegram.org', port: 443}
      - {host: '**.githubusercontent.com', ports: [8443]}
      - {host: api.telegram.org, port: 80}
      - {host: docs.example.com, port: 443}
      - {host: '*.example.org', port: 443}
    binaries: [{path: /usr/bin/curl}]
";
        let loaded = crate::policy::load(
            &[Source {
                name: "policy.yaml".into(),
                text: policy.into(),
            }],
            crate::policy::Compat::Strict,
        )
        .unwrap();
        let endpoints: Vec<&Endpoint> = loaded
            .policy
            .entries()
            .iter()
            .flat_map(|e| e.endpoints.iter())
            .collect();
        let got: Vec<bool> = endpoints
            .iter()
            .map(|e| b.endpoint_is_credentialed(e))
            .collect();
        assert_eq!(got, [true, true, false, false, false]);
    }

    #[test]
    fn child_env_lists_available_keys() {
        let b = bindings(&[("GH_TOKEN", "ghp")]);
        assert_eq!(
            b.child_env(),
            [
                (
                    "GH_TOKEN".to_string(),
                    "openshell:resolve:env:GH_TOKEN".to_string()
                ),
                (
                    "GITHUB_TOKEN".to_string(),
                    "openshell:resolve:env:GITHUB_TOKEN".to_string()
                ),
            ]
        );
    }
}
