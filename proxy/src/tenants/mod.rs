//! Gateway tenants (`sluice run --tenants FILE`): on a shared egress gateway the caller is a
//! tenant, known by the address it connects from, the proxy credentials it presents, or the
//! client certificate of its TLS proxy hop, not by a process sluice can see through `/proc`.
//!
//! Owns the table of tenants a running gateway serves (each with its own compiled policy and
//! credential bindings, swapped whole on reload) and the rule that picks a connection's
//! tenant ([`Table::identify`]). The file's schema is `file.rs`; what a client certificate
//! names is `cert.rs`; loading each tenant's policy, profiles and secrets is
//! `cli/config.rs`'s.

pub mod cert;
pub mod file;
pub mod guesses;

use std::net::IpAddr;
use std::sync::Arc;

use base64::Engine as _;
use ipnet::IpNet;

use crate::credentials::Bindings;
use crate::policy::Policy;
use cert::{CertMatch, PeerCert};

/// A tenant of a running gateway: who it is and what it is judged under.
#[derive(Debug)]
pub struct Tenant {
    pub name: Arc<str>,
    sources: Vec<IpNet>,
    auth: Option<ProxyAuth>,
    /// `client_certs`: the tenant is who presents a certificate one of these names (and
    /// only such a client is).
    certs: Vec<CertMatch>,
    pub policy: Arc<Policy>,
    pub credentials: Arc<Bindings>,
}

/// Basic proxy credentials: the username and a SHA-256 digest of the password (the password
/// itself is not kept).
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyAuth {
    username: String,
    digest: [u8; 32],
}

impl std::fmt::Debug for ProxyAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyAuth")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl ProxyAuth {
    pub fn new(username: String, password: &[u8]) -> ProxyAuth {
        ProxyAuth {
            username,
            digest: digest(password),
        }
    }

    /// Whether `username` and the password whose digest is `presented` are these
    /// credentials. The digests are compared every byte, whatever the first difference.
    fn accepts(&self, username: &[u8], presented: &[u8; 32]) -> bool {
        let differ = presented
            .iter()
            .zip(&self.digest)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        (differ == 0) & (username == self.username.as_bytes())
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl Tenant {
    pub fn new(
        name: Arc<str>,
        sources: Vec<IpNet>,
        auth: Option<ProxyAuth>,
        policy: Arc<Policy>,
        credentials: Arc<Bindings>,
    ) -> Tenant {
        Tenant {
            name,
            sources,
            auth,
            certs: Vec::new(),
            policy,
            credentials,
        }
    }

    /// The tenant, identified by a client certificate one of `certs` names.
    pub fn with_certs(mut self, certs: Vec<CertMatch>) -> Tenant {
        self.certs = certs;
        self
    }

    /// Whether a client at `peer` may be this tenant (a tenant without `sources` may connect
    /// from anywhere, with its credentials or certificate).
    fn admits_source(&self, peer: IpAddr) -> bool {
        self.sources.is_empty() || self.sources.iter().any(|n| n.contains(&peer))
    }

    /// Whether `cert` is one of this tenant's.
    fn names_cert(&self, cert: &PeerCert) -> bool {
        self.certs.iter().any(|m| m.matches(cert))
    }

    /// Whether the tenant sends proxy credentials.
    pub fn has_auth(&self) -> bool {
        self.auth.is_some()
    }

    /// Whether the tenant is known by a client certificate (then only by one).
    pub fn has_certs(&self) -> bool {
        !self.certs.is_empty()
    }
}

/// A connection's claim to be a tenant: the tenant as identified, the address the
/// connection comes from, and the client certificate its proxy hop presented.
#[derive(Debug)]
pub struct Claim {
    pub tenant: Arc<Tenant>,
    pub peer: IpAddr,
    pub cert: Option<Arc<PeerCert>>,
}

/// What a connection presents to be a tenant: the address it comes from, and the client
/// certificate of its TLS proxy hop (verified in the handshake), if any.
#[derive(Clone, Copy, Debug)]
pub struct Presented<'a> {
    pub peer: IpAddr,
    pub cert: Option<&'a PeerCert>,
}

impl From<IpAddr> for Presented<'_> {
    /// A client with no certificate.
    fn from(peer: IpAddr) -> Self {
        Presented { peer, cert: None }
    }
}

/// The tenants a gateway serves; empty when sluice is not a gateway (callers are then
/// identified by process).
#[derive(Debug, Default)]
pub struct Table {
    tenants: Vec<Arc<Tenant>>,
}

/// Why a connection is no tenant's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoTenant {
    #[error(
        "no tenant connects from {0} without proxy credentials; send the tenant's credentials (Proxy-Authorization: Basic)"
    )]
    CredentialsRequired(IpAddr),
    #[error("no tenant of this gateway connects from {0}")]
    UnknownSource(IpAddr),
    #[error("the proxy credentials are not a tenant's (or not from this address)")]
    BadCredentials,
    #[error("the Proxy-Authorization header is not Basic credentials: {0}")]
    MalformedCredentials(&'static str),
    #[error("a connection serves one tenant; this request presents another's credentials")]
    Switched,
    #[error("more than one Proxy-Authorization header: send one")]
    TwoCredentials,
    /// Too many wrong passwords for this username from this address (`guesses.rs`): not
    /// checked; the next attempt is, after the wait.
    #[error(
        "too many wrong proxy credentials for this username from this address; the next attempt is checked in {} s",
        guesses::retry_after_secs(*.0)
    )]
    Throttled(std::time::Duration),
    /// A verified client certificate that no tenant's `client_certs` names (from this
    /// address): refused, whatever else the client presents.
    #[error("the client certificate ({0}) is no tenant's")]
    UnknownCertificate(String),
    /// A client certificate that more than one tenant's `client_certs` names: which one it
    /// is, is not for sluice to guess.
    #[error("the client certificate ({0}) is more than one tenant's")]
    AmbiguousCertificate(String),
    /// Proxy credentials that are not those of the tenant the client certificate names
    /// (another tenant's or wrong alike, or credentials that tenant does not use).
    #[error("the proxy credentials are not those of the tenant the client certificate names")]
    CertificateMismatch,
}

impl NoTenant {
    /// Whether the client should be asked for credentials (407) rather than refused (403).
    pub fn asks_credentials(&self) -> bool {
        !matches!(
            self,
            NoTenant::UnknownSource(_)
                | NoTenant::Throttled(_)
                | NoTenant::UnknownCertificate(_)
                | NoTenant::AmbiguousCertificate(_)
                | NoTenant::CertificateMismatch
        )
    }
}

impl Table {
    pub fn new(tenants: Vec<Tenant>) -> Table {
        Table {
            tenants: tenants.into_iter().map(Arc::new).collect(),
        }
    }

    /// At a reload: each tenant's bindings take over what the same-named tenant's in
    /// `before` scrubbed responses of (see [`Bindings::retire_from`]). A table just loaded
    /// holds the only reference to each tenant.
    pub fn retire_from(&mut self, before: &Table) {
        for tenant in &mut self.tenants {
            let Some(earlier) = before.get(&tenant.name) else {
                continue;
            };
            let name = Arc::clone(&tenant.name);
            match Arc::get_mut(tenant).and_then(|t| Arc::get_mut(&mut t.credentials)) {
                Some(credentials) => credentials.retire_from(&earlier.credentials),
                // Not expected: said, never silent.
                None => eprintln!(
                    "sluice: tenant {name}: secret values taken out of service by this reload are not kept for scrubbing responses (its credentials are shared)"
                ),
            }
        }
    }

    /// This table with new credentials for each tenant `next` gives some (a refreshed token
    /// swapped in, no reload): that tenant is a new record, the same but for its credentials;
    /// every other tenant is the same record.
    pub fn with_credentials(&self, next: &dyn Fn(&Tenant) -> Option<Bindings>) -> Table {
        let tenants = self
            .tenants
            .iter()
            .map(|t| match next(t) {
                Some(credentials) => Arc::new(Tenant {
                    name: Arc::clone(&t.name),
                    sources: t.sources.clone(),
                    auth: t.auth.clone(),
                    certs: t.certs.clone(),
                    policy: Arc::clone(&t.policy),
                    credentials: Arc::new(credentials),
                }),
                None => Arc::clone(t),
            })
            .collect();
        Table { tenants }
    }

    /// Whether sluice is a gateway (callers are tenants).
    pub fn is_gateway(&self) -> bool {
        !self.tenants.is_empty()
    }

    pub fn tenants(&self) -> &[Arc<Tenant>] {
        &self.tenants
    }

    /// The tenant named `name` in this table (after a reload, the tenant's new
    /// configuration; `None` if the reload removed it).
    pub fn get(&self, name: &str) -> Option<&Arc<Tenant>> {
        self.tenants.iter().find(|t| &*t.name == name)
    }

    /// The tenant `claim` is in this table (after a reload, with its new policy and
    /// credentials): the same name, still claiming the connection's address, with the same
    /// credentials and certificates. `None` when a reload removed the tenant or changed who
    /// may be it (a rotated password, narrowed `sources`, other `client_certs`): its live
    /// connections are then revoked.
    pub fn current(&self, claim: &Claim) -> Option<&Arc<Tenant>> {
        let now = self.get(&claim.tenant.name)?;
        // The table it was identified by (each reload builds new records): it stands.
        if Arc::ptr_eq(now, &claim.tenant) {
            return Some(now);
        }
        let peer = claim.peer.to_canonical();
        // Still the one tenant the certificate names, or still one known without one.
        let by_cert = match &claim.cert {
            Some(cert) => self
                .named_by(peer, cert)
                .is_ok_and(|t| Arc::ptr_eq(&t, now)),
            None => !now.has_certs(),
        };
        let still = by_cert
            && match (&now.auth, &claim.tenant.auth) {
                (Some(a), Some(b)) => a == b && now.admits_source(peer),
                // By its certificate alone: the certificate decided above.
                (None, None) if claim.cert.is_some() => true,
                // A source tenant: still the one tenant without credentials at that address.
                (None, None) => self
                    .identify(peer, None)
                    .is_ok_and(|t| Arc::ptr_eq(&t, now)),
                _ => false,
            };
        still.then_some(now)
    }

    /// The tenant of a client that presented `from` (its address, and its hop's client
    /// certificate) and `proxy_authorization` (the header's value) or nothing. A client
    /// certificate decides first: exactly one tenant's `client_certs` must name it (within
    /// that tenant's `sources`, if any), and credentials, if that tenant has `proxy_auth`,
    /// must be its own (and are required); a tenant without `proxy_auth` takes none. Without
    /// a certificate, credentials decide: they must be a tenant's that needs no certificate,
    /// and that tenant's `sources` (if any) must contain the address. Without either, the
    /// tenant is the one that connects from the address and needs neither (the file allows
    /// at most one).
    pub fn identify<'a>(
        &self,
        from: impl Into<Presented<'a>>,
        proxy_authorization: Option<&[u8]>,
    ) -> Result<Arc<Tenant>, NoTenant> {
        let from = from.into();
        if let Some(value) = proxy_authorization {
            return self.by_credentials(from, &Credentials::parse(value)?);
        }
        let peer = from.peer.to_canonical();
        if let Some(cert) = from.cert {
            let tenant = self.named_by(peer, cert)?;
            return match tenant.auth {
                Some(_) => Err(NoTenant::CredentialsRequired(peer)),
                None => Ok(tenant),
            };
        }
        if let Some(t) = self
            .tenants
            .iter()
            .find(|t| t.auth.is_none() && !t.has_certs() && t.admits_source(peer))
        {
            return Ok(Arc::clone(t));
        }
        if self.tenants.iter().any(|t| t.auth.is_some()) {
            Err(NoTenant::CredentialsRequired(peer))
        } else {
            Err(NoTenant::UnknownSource(peer))
        }
    }

    /// The one tenant whose `client_certs` name `cert`, within its `sources` (if any).
    fn named_by(&self, peer: IpAddr, cert: &PeerCert) -> Result<Arc<Tenant>, NoTenant> {
        let mut named = self
            .tenants
            .iter()
            .filter(|t| t.names_cert(cert) && t.admits_source(peer));
        let tenant = named
            .next()
            .ok_or_else(|| NoTenant::UnknownCertificate(cert.to_string()))?;
        if named.next().is_some() {
            return Err(NoTenant::AmbiguousCertificate(cert.to_string()));
        }
        Ok(Arc::clone(tenant))
    }

    /// The tenant whose `credentials` they are, when that tenant's `sources` (if any)
    /// contain the address; with a client certificate, the tenant it names, whose own
    /// credentials they must be.
    pub fn by_credentials<'a>(
        &self,
        from: impl Into<Presented<'a>>,
        credentials: &Credentials,
    ) -> Result<Arc<Tenant>, NoTenant> {
        let from = from.into();
        let peer = from.peer.to_canonical();
        if let Some(cert) = from.cert {
            let tenant = self.named_by(peer, cert)?;
            let theirs = tenant
                .auth
                .as_ref()
                .is_some_and(|a| a.accepts(&credentials.user, &credentials.digest));
            return if theirs {
                Ok(tenant)
            } else {
                Err(NoTenant::CertificateMismatch)
            };
        }
        self.tenants
            .iter()
            .find(|t| {
                !t.has_certs()
                    && t.auth
                        .as_ref()
                        .is_some_and(|a| a.accepts(&credentials.user, &credentials.digest))
                    && t.admits_source(peer)
            })
            .cloned()
            .ok_or(NoTenant::BadCredentials)
    }

    /// The username `credentials` present when it is a tenant's, else `""`: what failed
    /// logins are counted under (`guesses.rs`; malformed credentials count under `""` too).
    pub fn username_of(&self, credentials: &Credentials) -> &str {
        self.tenants
            .iter()
            .filter_map(|t| t.auth.as_ref())
            .find(|a| a.username.as_bytes() == credentials.user.as_slice())
            .map_or("", |a| a.username.as_str())
    }

    /// Whether some tenant is identified by proxy credentials (then a connection no tenant
    /// claims by its address waits for its first request head's credentials).
    pub fn has_credentials(&self) -> bool {
        self.tenants.iter().any(|t| t.auth.is_some())
    }
}

/// Proxy credentials as presented, read once: the username, and the password's SHA-256
/// (the password itself is zeroized as soon as it is hashed).
#[derive(Debug)]
pub struct Credentials {
    user: Vec<u8>,
    digest: [u8; 32],
}

impl Credentials {
    /// Reads a `Proxy-Authorization` value (`Basic`, RFC 7617).
    pub fn parse(value: &[u8]) -> Result<Credentials, NoTenant> {
        let (user, password) = basic(value)?;
        Ok(Credentials {
            user,
            digest: digest(&password),
        })
    }
}

/// `Basic <base64(user:password)>` (RFC 7617): the user and the password.
fn basic(value: &[u8]) -> Result<(Vec<u8>, zeroize::Zeroizing<Vec<u8>>), NoTenant> {
    let value = value.trim_ascii();
    let split = value
        .iter()
        .position(u8::is_ascii_whitespace)
        .ok_or(NoTenant::MalformedCredentials("no scheme"))?;
    let (scheme, token) = value.split_at(split);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return Err(NoTenant::MalformedCredentials("the scheme is not Basic"));
    }
    let decoded = zeroize::Zeroizing::new(
        base64::engine::general_purpose::STANDARD
            .decode(token.trim_ascii())
            .map_err(|_| NoTenant::MalformedCredentials("the token is not base64"))?,
    );
    let colon = decoded
        .iter()
        .position(|&b| b == b':')
        .ok_or(NoTenant::MalformedCredentials(
            "no `:` between user and password",
        ))?;
    let user = decoded[..colon].to_vec();
    let password = zeroize::Zeroizing::new(decoded[colon + 1..].to_vec());
    Ok((user, password))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str, sources: &[&str], auth: Option<(&str, &str)>) -> Tenant {
        let policy = crate::policy::load_default().unwrap().policy;
        Tenant::new(
            Arc::from(name),
            sources.iter().map(|s| s.parse().unwrap()).collect(),
            auth.map(|(u, p)| ProxyAuth::new(u.to_string(), p.as_bytes())),
            Arc::new(policy),
            Arc::new(Bindings::default()),
        )
    }

    fn basic_of(user_pass: &str) -> Vec<u8> {
        let b = base64::engine::general_purpose::STANDARD.encode(user_pass);
        format!("Basic {b}").into_bytes()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_reload_keeps_scrubbing_each_tenants_values_taken_out_of_service() {
        use crate::credentials::binding::tests::bindings;
        let with = |name: &str, key: &str| {
            let mut t = tenant(name, &[], None);
            t.credentials = Arc::new(bindings(&[("GH_TOKEN", key)]));
            t
        };
        let before = Table::new(vec![with("a", "ghp_a_old"), with("b", "ghp_b")]);
        let mut after = Table::new(vec![with("a", "ghp_a_new"), with("b", "ghp_b")]);
        after.retire_from(&before);
        let scrub = |table: &Table, name: &str, text: &str| {
            let mut out = Vec::new();
            let t = table.get(name).unwrap();
            t.credentials
                .endpoint_secrets(&sluice_addr::Authority::new("api.github.com", 443))
                .replace_all(text.as_bytes(), &mut out);
            String::from_utf8(out).unwrap()
        };
        let gh = "openshell:resolve:env:GITHUB_TOKEN";
        assert_eq!(scrub(&after, "a", "ghp_a_old"), gh);
        // Each tenant keeps its own: b never had a's old value.
        assert_eq!(scrub(&after, "b", "ghp_a_old"), "ghp_a_old");
    }

    #[test]
    fn a_tenant_is_its_address_or_its_credentials() {
        let table = Table::new(vec![
            tenant("alpha", &["10.1.0.0/16"], None),
            tenant("beta", &["10.2.0.0/16"], None),
            tenant("gamma", &[], Some(("gamma", "s3cret"))),
            tenant("delta", &["10.9.0.0/16"], Some(("delta", "pw"))),
        ]);
        let name = |r: Result<Arc<Tenant>, NoTenant>| r.map(|t| t.name.to_string());
        assert_eq!(
            name(table.identify(ip("10.1.2.3"), None)),
            Ok("alpha".into())
        );
        assert_eq!(
            name(table.identify(ip("10.2.0.1"), None)),
            Ok("beta".into())
        );
        // An IPv4 client of a dual-stack listener.
        assert_eq!(
            name(table.identify(ip("::ffff:10.1.2.3"), None)),
            Ok("alpha".into())
        );
        let gamma = basic_of("gamma:s3cret");
        assert_eq!(
            name(table.identify(ip("192.0.2.1"), Some(&gamma))),
            Ok("gamma".into())
        );
        // Credentials decide even from another tenant's address.
        assert_eq!(
            name(table.identify(ip("10.1.2.3"), Some(&gamma))),
            Ok("gamma".into())
        );
        // Wrong password, unknown user, right credentials from the wrong address.
        let wrong = basic_of("gamma:s3cre");
        assert_eq!(
            name(table.identify(ip("192.0.2.1"), Some(&wrong))),
            Err(NoTenant::BadCredentials)
        );
        let delta = basic_of("delta:pw");
        assert_eq!(
            name(table.identify(ip("10.9.0.1"), Some(&delta))),
            Ok("delta".into())
        );
        assert_eq!(
            name(table.identify(ip("10.1.0.1"), Some(&delta))),
            Err(NoTenant::BadCredentials)
        );
        // delta needs its credentials even from its own addresses.
        assert_eq!(
            name(table.identify(ip("10.9.0.1"), None)),
            Err(NoTenant::CredentialsRequired(ip("10.9.0.1")))
        );
    }

    #[test]
    fn after_a_reload_a_claim_stands_only_while_the_tenant_still_is_who_it_was() {
        let before = Table::new(vec![
            tenant("alpha", &["10.1.0.0/16"], None),
            tenant("gamma", &[], Some(("gamma", "old"))),
        ]);
        let claim = |table: &Table, peer: &str, auth: Option<&[u8]>| Claim {
            tenant: table.identify(ip(peer), auth).unwrap(),
            peer: ip(peer),
            cert: None,
        };
        let alpha = claim(&before, "10.1.0.9", None);
        let gamma = claim(&before, "192.0.2.1", Some(&basic_of("gamma:old")));
        // The table they were identified by: they stand at once.
        assert!(before.current(&alpha).is_some() && before.current(&gamma).is_some());
        // Reloaded unchanged: both stand, with the new table's records.
        let same = Table::new(vec![
            tenant("alpha", &["10.1.0.0/16"], None),
            tenant("gamma", &[], Some(("gamma", "old"))),
        ]);
        assert!(
            same.current(&alpha)
                .is_some_and(|t| Arc::ptr_eq(t, &same.tenants()[0]))
        );
        assert!(same.current(&gamma).is_some());
        // A rotated password, narrowed sources, a removed tenant: none stands.
        let changed = Table::new(vec![
            tenant("alpha", &["10.1.1.0/24"], None),
            tenant("gamma", &[], Some(("gamma", "new"))),
        ]);
        assert!(changed.current(&alpha).is_none());
        assert!(changed.current(&gamma).is_none());
        let removed = Table::new(vec![tenant("other", &["10.9.0.0/16"], None)]);
        assert!(removed.current(&alpha).is_none());
        // The address now another tenant's: alpha's claim no longer stands.
        let moved = Table::new(vec![
            tenant("beta", &["10.1.0.0/16"], None),
            tenant("alpha", &["10.1.0.0/16"], None),
        ]);
        assert!(moved.current(&alpha).is_none());
    }

    #[test]
    fn without_credential_tenants_an_unknown_address_is_refused_not_asked() {
        let table = Table::new(vec![tenant("alpha", &["127.0.0.2/32"], None)]);
        let e = table.identify(ip("127.0.0.3"), None).unwrap_err();
        assert_eq!(e, NoTenant::UnknownSource(ip("127.0.0.3")));
        assert!(!e.asks_credentials());
    }

    #[test]
    fn malformed_credentials_are_named_and_never_panic() {
        let table = Table::new(vec![tenant("g", &[], Some(("g", "p")))]);
        for bad in [
            &b"Basic"[..],
            b"Bearer abc",
            b"Basic !!!",
            b"Basic Zw==",
            b"",
            b"Basic \xff\xfe",
        ] {
            let e = table.identify(ip("192.0.2.1"), Some(bad)).unwrap_err();
            assert!(
                matches!(e, NoTenant::MalformedCredentials(_)),
                "{bad:?}: {e:?}"
            );
        }
        // A password with a colon keeps it (only the first colon splits).
        let t = Table::new(vec![tenant("g", &[], Some(("g", "a:b")))]);
        assert!(
            t.identify(ip("192.0.2.1"), Some(&basic_of("g:a:b")))
                .is_ok()
        );
        assert!(
            t.identify(ip("192.0.2.1"), Some(b"basic   Zzph OmI="))
                .is_err()
        );
    }

    // === Client certificates ===

    fn peer_cert(cn: &str, spiffe: Option<&str>) -> PeerCert {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.subject_alt_names = spiffe
            .iter()
            .map(|u| rcgen::SanType::URI(u.to_string().try_into().unwrap()))
            .collect();
        PeerCert::from_der(params.self_signed(&key).unwrap().der()).unwrap()
    }

    fn cert_table() -> Table {
        Table::new(vec![
            tenant("svid", &[], None).with_certs(vec![
                CertMatch::spiffe_id("spiffe://example.org/ci").unwrap(),
            ]),
            tenant("both", &[], Some(("both", "pw-both")))
                .with_certs(vec![CertMatch::subject("agent-1").unwrap()]),
            tenant("pw", &[], Some(("pw", "pw-pw"))),
            tenant("src", &["10.1.0.0/16"], None),
        ])
    }

    #[test]
    fn a_client_certificate_names_its_tenant_and_credentials_must_agree() {
        let table = cert_table();
        let name = |r: Result<Arc<Tenant>, NoTenant>| r.map(|t| t.name.to_string());
        fn at<'c>(peer: &str, cert: &'c PeerCert) -> Presented<'c> {
            Presented {
                peer: ip(peer),
                cert: Some(cert),
            }
        }
        let svid = peer_cert("runner", Some("spiffe://example.org/ci"));
        assert_eq!(
            name(table.identify(at("192.0.2.1", &svid), None)),
            Ok("svid".into())
        );
        // From a source tenant's address the certificate still decides.
        assert_eq!(
            name(table.identify(at("10.1.2.3", &svid), None)),
            Ok("svid".into())
        );
        // Password and certificate naming different tenants: refused, however right the
        // password is for the other.
        for creds in ["pw:pw-pw", "pw:wrong", "svid:x"] {
            let e = table.identify(at("192.0.2.1", &svid), Some(&basic_of(creds)));
            assert_eq!(name(e), Err(NoTenant::CertificateMismatch), "{creds}");
        }
        // A tenant with both needs both.
        let agent = peer_cert("agent-1", None);
        assert_eq!(
            name(table.identify(at("192.0.2.1", &agent), None)),
            Err(NoTenant::CredentialsRequired(ip("192.0.2.1")))
        );
        assert_eq!(
            name(table.identify(at("192.0.2.1", &agent), Some(&basic_of("both:pw-both")))),
            Ok("both".into())
        );
        assert_eq!(
            name(table.identify(at("192.0.2.1", &agent), Some(&basic_of("pw:pw-pw")))),
            Err(NoTenant::CertificateMismatch)
        );
        // Its password without its certificate is no tenant's.
        assert_eq!(
            name(table.identify(ip("192.0.2.1"), Some(&basic_of("both:pw-both")))),
            Err(NoTenant::BadCredentials)
        );
        // A verified certificate no tenant names is refused, from any address, with or
        // without credentials that would otherwise be a tenant's.
        let nobody = peer_cert("nobody", Some("spiffe://example.org/other"));
        for (peer, auth) in [
            ("10.1.2.3", None),
            ("192.0.2.1", Some(basic_of("pw:pw-pw"))),
        ] {
            let e = table
                .identify(at(peer, &nobody), auth.as_deref())
                .unwrap_err();
            assert!(matches!(e, NoTenant::UnknownCertificate(_)), "{e:?}");
            assert!(!e.asks_credentials());
        }
    }

    #[test]
    fn a_certificate_two_tenants_name_is_neither() {
        let table = Table::new(vec![
            tenant("a", &[], None).with_certs(vec![CertMatch::subject("agent").unwrap()]),
            tenant("b", &[], None).with_certs(vec![CertMatch::subject("CN=agent").unwrap()]),
        ]);
        let agent = peer_cert("agent", None);
        let e = table
            .identify(
                Presented {
                    peer: ip("192.0.2.1"),
                    cert: Some(&agent),
                },
                None,
            )
            .unwrap_err();
        assert!(matches!(e, NoTenant::AmbiguousCertificate(_)), "{e:?}");
    }

    #[test]
    fn after_a_reload_a_certificate_claim_stands_only_while_the_tenant_still_names_it() {
        let before = cert_table();
        let svid = Arc::new(peer_cert("runner", Some("spiffe://example.org/ci")));
        let claim = Claim {
            tenant: before
                .identify(
                    Presented {
                        peer: ip("192.0.2.1"),
                        cert: Some(&svid),
                    },
                    None,
                )
                .unwrap(),
            peer: ip("192.0.2.1"),
            cert: Some(Arc::clone(&svid)),
        };
        assert!(cert_table().current(&claim).is_some());
        let moved = Table::new(vec![tenant("svid", &[], None).with_certs(vec![
            CertMatch::spiffe_id("spiffe://example.org/other").unwrap(),
        ])]);
        assert!(moved.current(&claim).is_none());
    }
}
