//! The certificate authority that signs the leaves sluice presents: the ephemeral one, made
//! in memory at start, or an operator's (`--ca-cert FILE --ca-key FILE`), read from files,
//! so that every replica of a gateway issues leaves under one CA. Never written as a key.
//!
//! Owns CA generation (ECDSA P-256, `sluice ephemeral CA`, CA:TRUE, keyCertSign+cRLSign),
//! loading an operator's CA (a root or an intermediate, with the rest of its chain; checked
//! to be a CA whose key matches, valid now, and able to sign a leaf that verifies under it),
//! the minting of leaf certificates for a host name or IP literal (SAN and CN the name,
//! serverAuth, a fresh key each, presented with the CA's chain), and writing the
//! *certificates* sluice's clients need: `ca.pem` (the CA and its chain) and `ca-bundle.pem`
//! (the system roots plus those). The private key exists only in this process's memory
//! (invariant 4): an operator's key file is read, never copied or written anywhere.

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::config_file::{self, Kind};

/// Where Debian (and most distributions) keep the system trust bundle.
pub const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The first of [`SYSTEM_BUNDLES`] that reads as a PEM file (`config_file`: a regular file
/// within its limit), if any.
pub fn system_bundle() -> Option<config_file::Contents> {
    SYSTEM_BUNDLES
        .iter()
        .find_map(|p| config_file::read(Path::new(p), Kind::Pem).ok())
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaError {
    /// A key could not be generated (the ephemeral CA, or a leaf's): TLS termination is off.
    #[error("generating a key failed: {0}")]
    Key(String),
    /// A certificate could not be made for `name`: that handshake fails.
    #[error("making a certificate for `{name}` failed: {reason}")]
    Certificate { name: String, reason: String },
    /// `--ca-dir` could not be written.
    #[error("writing {path}: {reason}")]
    Write { path: String, reason: String },
    /// An operator CA's file is refused as a file (`config_file`): sluice does not start,
    /// or a reload keeps the CA it has.
    #[error("{path}: {source}")]
    File {
        path: String,
        source: config_file::FileError,
    },
    /// An operator CA's files hold no usable CA: as for `File`.
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
}

/// An operator CA's file as `config_file` reads it, its refusal naming the path.
fn read(path: &Path, kind: Kind) -> Result<zeroize::Zeroizing<Vec<u8>>, CaError> {
    config_file::read(path, kind)
        .map(|c| c.bytes)
        .map_err(|source| CaError::File {
            path: path.display().to_string(),
            source,
        })
}

/// Where the CA comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaSource {
    /// Made at start, in memory, unique to this process.
    Ephemeral,
    /// An operator's, from these files (`--ca-cert`, `--ca-key`).
    Files { cert: PathBuf, key: PathBuf },
}

/// The CA: its certificate and chain (shared freely) and its signing key (never leaves
/// memory).
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    /// The certificates above it that its file holds (intermediates, a root), presented
    /// after it with every leaf.
    chain: Vec<CertificateDer<'static>>,
    /// The CA and its chain, PEM: what clients fetch and trust.
    cert_pem: String,
    /// No leaf outlives its CA.
    not_after: Option<SystemTime>,
    source: CaSource,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Ca")
            .field("cert_pem_len", &self.cert_pem.len())
            .finish_non_exhaustive()
    }
}

/// Validity window: from a day ago (clock skew) to `days` ahead.
fn validity(params: &mut CertificateParams, days: u64) {
    let now = SystemTime::now();
    let start = now
        .checked_sub(Duration::from_secs(86_400))
        .unwrap_or(UNIX_EPOCH);
    let end = now + Duration::from_secs(86_400 * days);
    let (y, m, d) = ymd(start);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = ymd(end);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

/// The UTC calendar date of `t`.
fn ymd(t: SystemTime) -> (i32, u8, u8) {
    let days = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    // Civil-from-days (H. Hinnant), for dates after 1970.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        i32::try_from(y).unwrap_or(2100),
        u8::try_from(m).unwrap_or(1),
        u8::try_from(d).unwrap_or(1),
    )
}

impl Ca {
    /// A new CA, unique to this process.
    pub fn generate() -> Result<Ca, CaError> {
        let key = KeyPair::generate().map_err(|e| CaError::Key(e.to_string()))?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "sluice ephemeral CA");
        dn.push(DnType::OrganizationName, "sluice");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params, 365);
        let cert = params.self_signed(&key).map_err(|e| CaError::Certificate {
            name: "sluice ephemeral CA".into(),
            reason: e.to_string(),
        })?;
        Ok(Ca {
            cert_der: cert.der().clone(),
            chain: Vec::new(),
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
            not_after: None,
            source: CaSource::Ephemeral,
        })
    }

    /// An operator's CA: the first certificate of the PEM file `cert` is the CA that signs
    /// (a root or an intermediate), the rest its chain; `key` its private key (PKCS#8 PEM,
    /// a private file: see `config_file`). Refused unless the certificate is a CA allowed to
    /// sign certificates, valid now, its key is the one given, and a leaf it signs verifies
    /// under it.
    pub fn load(cert: &Path, key: &Path) -> Result<Ca, CaError> {
        let invalid = |path: &Path, reason: String| CaError::Invalid {
            path: path.display().to_string(),
            reason,
        };
        let pem = read(cert, Kind::Pem)?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .map_err(|e| invalid(cert, format!("not PEM certificates: {e}")))?;
        let Some((first, chain)) = certs.split_first() else {
            return Err(invalid(cert, "holds no certificate".to_string()));
        };
        let not_after = check_ca(first).map_err(|r| invalid(cert, r))?;
        let key_pem = read(key, Kind::PrivateKey)?;
        let key_text = std::str::from_utf8(&key_pem)
            .map_err(|_| invalid(key, "not a PEM private key".to_string()))?;
        let pair = KeyPair::from_pem(key_text).map_err(|_| {
            invalid(
                key,
                "not a PKCS#8 PEM private key (`BEGIN PRIVATE KEY`; convert one with `openssl pkcs8 -topk8 -nocrypt`) of a kind sluice signs with (ECDSA P-256 or P-384, Ed25519, RSA)".to_string(),
            )
        })?;
        if spki_key(first).as_deref() != Some(pair.public_key_raw()) {
            return Err(invalid(
                key,
                format!("is not the key of the CA certificate in {}", cert.display()),
            ));
        }
        let issuer = Issuer::from_ca_cert_der(first, pair)
            .map_err(|e| invalid(cert, format!("cannot issue under it: {e}")))?;
        let cert_pem = std::iter::once(first)
            .chain(chain)
            .map(|c| pem_of(c))
            .collect::<String>();
        let ca = Ca {
            issuer,
            cert_der: first.clone(),
            chain: chain.to_vec(),
            cert_pem,
            not_after: Some(not_after),
            source: CaSource::Files {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
            },
        };
        ca.self_test().map_err(|r| invalid(cert, r))?;
        Ok(ca)
    }

    /// A leaf minted now verifies under this CA: its name chains and its signature holds
    /// (an issuer name re-encoded differently would otherwise fail every client).
    fn self_test(&self) -> Result<(), String> {
        const NAME: &str = "ca-self-test.sluice.invalid";
        let leaf = self.mint(NAME).map_err(|e| e.to_string())?;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.cert_der.clone())
            .map_err(|e| format!("not usable as a trust anchor: {e}"))?;
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            super::provider(),
        )
        .build()
        .map_err(|e| e.to_string())?;
        let name = rustls_pki_types::ServerName::try_from(NAME).map_err(|e| e.to_string())?;
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            &*verifier,
            &leaf.cert[0],
            &[],
            &name,
            &[],
            rustls_pki_types::UnixTime::now(),
        )
        .map(|_| ())
        .map_err(|e| format!("a leaf it signs does not verify under it: {e}"))
    }

    /// The CA and its chain (PEM): what clients trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn source(&self) -> &CaSource {
        &self.source
    }

    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// A leaf for `name` (a DNS name, or an IP literal as an IP SAN), chained to this CA.
    pub(crate) fn mint(&self, name: &str) -> Result<Arc<CertifiedKey>, CaError> {
        let fail = |reason: String| CaError::Certificate {
            name: name.to_string(),
            reason,
        };
        let key = KeyPair::generate().map_err(|e| CaError::Key(e.to_string()))?;
        let mut params = CertificateParams::default();
        params.subject_alt_names = vec![match name.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                name.to_string()
                    .try_into()
                    .map_err(|e: rcgen::Error| fail(e.to_string()))?,
            ),
        }];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, 30);
        if let Some(end) = self.not_after
            && let Ok(since) = end.duration_since(UNIX_EPOCH)
            && params.not_after.unix_timestamp()
                > i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        {
            // Midnight (UTC) of the day the CA expires: no later than it.
            let (y, m, d) = ymd(end);
            params.not_after = rcgen::date_time_ymd(y, m, d);
        }
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| fail(e.to_string()))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing =
            rustls::crypto::ring::sign::any_ecdsa_type(&der).map_err(|e| fail(e.to_string()))?;
        let mut chain = Vec::with_capacity(2 + self.chain.len());
        chain.push(cert.der().clone());
        chain.push(self.cert_der.clone());
        chain.extend(self.chain.iter().cloned());
        Ok(Arc::new(CertifiedKey::new(chain, signing)))
    }

    /// Writes `ca.pem` and `ca-bundle.pem` (system roots, then this CA) into `dir`, mode 0644:
    /// certificates only. Returns the two paths. Links are never followed: a link as `dir`
    /// itself is refused, and a link planted at either file's name is replaced by the file.
    pub fn write_files(&self, dir: &Path) -> Result<(PathBuf, PathBuf), CaError> {
        let err = |path: &Path, e: std::io::Error| CaError::Write {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
        let dir = crate::nofollow::Dir::open(dir).map_err(|e| err(dir, e))?;
        let system = system_bundle()
            .map(|b| String::from_utf8_lossy(&b.bytes).into_owned())
            .unwrap_or_default();
        let bundle_text = format!("{}\n{}", system.trim_end(), self.cert_pem);
        let write = |name: &str, text: &str| {
            dir.replace_file(name, text.as_bytes(), 0o644)
                .map_err(|e| err(&dir.path().join(name), e))
        };
        let ca = write("ca.pem", &self.cert_pem)?;
        let bundle = write("ca-bundle.pem", &bundle_text)?;
        Ok((ca, bundle))
    }
}

/// A certificate as PEM.
fn pem_of(der: &CertificateDer<'_>) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The raw public key of a certificate (its SubjectPublicKeyInfo's bit string).
fn spki_key(der: &CertificateDer<'_>) -> Option<Vec<u8>> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.public_key().subject_public_key.data.to_vec())
}

/// Checks that `der` is a CA certificate that may sign certificates and is valid now;
/// returns when it expires.
fn check_ca(der: &CertificateDer<'_>) -> Result<SystemTime, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the first certificate does not parse: {e}"))?;
    let subject = cert.subject().to_string();
    let is_ca = cert
        .basic_constraints()
        .ok()
        .flatten()
        .is_some_and(|bc| bc.value.ca);
    if !is_ca {
        return Err(format!(
            "the first certificate ({subject}) is not a CA (basicConstraints CA:TRUE); put the CA that signs first"
        ));
    }
    if let Ok(Some(ku)) = cert.key_usage()
        && !ku.value.key_cert_sign()
    {
        return Err(format!(
            "the CA certificate ({subject}) may not sign certificates (its keyUsage lacks keyCertSign)"
        ));
    }
    if !cert.validity().is_valid() {
        return Err(format!(
            "the CA certificate ({subject}) is not valid now (valid from {} to {})",
            cert.validity().not_before,
            cert.validity().not_after
        ));
    }
    let end = cert.validity().not_after.timestamp();
    Ok(UNIX_EPOCH + Duration::from_secs(u64::try_from(end).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ymd_is_civil() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_045_909); // 2026-11-30
        assert_eq!(ymd(t), (2026, 11, 30));
        assert_eq!(ymd(UNIX_EPOCH), (1970, 1, 1));
    }

    #[test]
    fn mints_dns_and_ip_leaves_chained_to_the_ca() {
        let ca = Ca::generate().unwrap();
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let leaf = ca.mint("api.example.com").unwrap();
        assert_eq!(leaf.cert.len(), 2);
        assert_eq!(&leaf.cert[1], ca.cert_der());
        let ip = ca.mint("127.0.0.1").unwrap();
        assert_eq!(ip.cert.len(), 2);
        // Two CAs are different: new at every start.
        assert_ne!(Ca::generate().unwrap().cert_der(), ca.cert_der());
        assert!(!format!("{ca:?}").contains("PRIVATE"));
    }

    // === Operator CAs ===

    /// A directory for one test's files.
    fn dir() -> PathBuf {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "sluice-ca-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(path: &Path, text: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        fs::write(path, text).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn ca_params(cn: &str) -> CertificateParams {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        dn.push(DnType::OrganizationName, "fleet test");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        validity(&mut params, 30);
        params
    }

    /// A root CA: (certificate PEM, key PEM, issuer).
    fn root() -> (String, String, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().unwrap();
        let params = ca_params("fleet root");
        let cert = params.self_signed(&key).unwrap();
        let key_pem = key.serialize_pem();
        (cert.pem(), key_pem, Issuer::new(params, key))
    }

    fn verifies_under(root_pem: &str, leaf: &CertifiedKey, name: &str) -> Result<(), String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(root_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            crate::tls::provider(),
        )
        .build()
        .unwrap();
        rustls::client::danger::ServerCertVerifier::verify_server_cert(
            &*verifier,
            &leaf.cert[0],
            &leaf.cert[1..],
            &rustls_pki_types::ServerName::try_from(name.to_string()).unwrap(),
            &[],
            rustls_pki_types::UnixTime::now(),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    }

    #[test]
    fn an_operator_root_ca_signs_leaves_that_verify_under_it() {
        let d = dir();
        let (cert, key, _) = root();
        write(&d.join("ca.pem"), &cert, 0o644);
        write(&d.join("ca.key"), &key, 0o600);
        let ca = Ca::load(&d.join("ca.pem"), &d.join("ca.key")).unwrap();
        assert_eq!(ca.cert_pem().trim(), cert.trim());
        let leaf = ca.mint("api.example.com").unwrap();
        assert_eq!(leaf.cert.len(), 2);
        verifies_under(&cert, &leaf, "api.example.com").unwrap();
        // Another load of the same files (another replica) signs leaves under the same CA.
        let again = Ca::load(&d.join("ca.pem"), &d.join("ca.key")).unwrap();
        verifies_under(
            &cert,
            &again.mint("b.example.com").unwrap(),
            "b.example.com",
        )
        .unwrap();
        assert!(!format!("{ca:?}").contains("PRIVATE"));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn an_intermediate_is_served_with_its_chain_and_leaves_verify_under_the_root() {
        let d = dir();
        let (root_pem, _, root_issuer) = root();
        let key = KeyPair::generate().unwrap();
        let inter = ca_params("fleet intermediate")
            .signed_by(&key, &root_issuer)
            .unwrap();
        write(
            &d.join("chain.pem"),
            &format!("{}{}", inter.pem(), root_pem),
            0o644,
        );
        write(&d.join("inter.key"), &key.serialize_pem(), 0o600);
        let ca = Ca::load(&d.join("chain.pem"), &d.join("inter.key")).unwrap();
        // The chain is what clients fetch, the intermediate first.
        assert!(ca.cert_pem().starts_with(inter.pem().trim()));
        assert!(ca.cert_pem().contains(root_pem.trim()));
        let leaf = ca.mint("api.example.com").unwrap();
        assert_eq!(leaf.cert.len(), 3);
        // A client that trusts only the root verifies the leaf through the intermediate.
        verifies_under(&root_pem, &leaf, "api.example.com").unwrap();
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn what_is_not_a_usable_ca_is_refused_with_why() {
        let d = dir();
        let (cert, key, _) = root();
        let (other_cert, other_key, _) = root();
        write(&d.join("ca.pem"), &cert, 0o644);
        write(&d.join("ca.key"), &key, 0o600);
        write(&d.join("other.key"), &other_key, 0o600);
        let err = |cert: &str, key: &str| {
            Ca::load(&d.join(cert), &d.join(key))
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        // Another CA's key.
        assert!(
            err("ca.pem", "other.key").contains("is not the key of the CA certificate"),
            "{}",
            err("ca.pem", "other.key")
        );
        let _ = other_cert;
        // A leaf is not a CA.
        let leaf = Ca::load(&d.join("ca.pem"), &d.join("ca.key"))
            .unwrap()
            .mint("leaf.example")
            .unwrap();
        write(&d.join("leaf.pem"), &pem_of(&leaf.cert[0]), 0o644);
        assert!(err("leaf.pem", "ca.key").contains("is not a CA"));
        // No certificate at all; a key in another encoding.
        write(&d.join("empty.pem"), "nothing here\n", 0o644);
        assert!(err("empty.pem", "ca.key").contains("holds no certificate"));
        write(
            &d.join("sec1.key"),
            "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIA==\n-----END EC PRIVATE KEY-----\n",
            0o600,
        );
        assert!(err("ca.pem", "sec1.key").contains("PKCS#8"));
        // A key others may read, or one reached through a link, is refused as a file.
        write(&d.join("loose.key"), &key, 0o644);
        assert!(err("ca.pem", "loose.key").contains("mode 0644"));
        std::os::unix::fs::symlink(d.join("ca.key"), d.join("link.key")).unwrap();
        assert!(err("ca.pem", "link.key").contains("symbolic link"));
        let _ = fs::remove_dir_all(&d);
    }
}
