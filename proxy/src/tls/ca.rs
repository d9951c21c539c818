//! The ephemeral certificate authority: made in memory at start, never written as a key.
//!
//! Owns CA generation (ECDSA P-256, `sluice ephemeral CA`, CA:TRUE, keyCertSign+cRLSign),
//! the minting of leaf certificates for a host name or IP literal (SAN and CN the name,
//! serverAuth, a fresh key each), and writing the *certificates* sluice's clients need:
//! `ca.pem` (the CA alone) and `ca-bundle.pem` (the system roots plus the CA). The private
//! key exists only in this process's memory (invariant 4).

use std::fs;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Where Debian (and most distributions) keep the system trust bundle.
pub const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The first of [`SYSTEM_BUNDLES`] that reads as a PEM file (`config_file`: a regular file
/// within its limit), if any.
pub fn system_bundle() -> Option<crate::config_file::Contents> {
    SYSTEM_BUNDLES
        .iter()
        .find_map(|p| crate::config_file::read(Path::new(p), crate::config_file::Kind::Pem).ok())
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaError {
    #[error("generating a key failed: {0}")]
    Key(String),
    #[error("making a certificate for `{name}` failed: {reason}")]
    Certificate { name: String, reason: String },
    #[error("writing {path}: {reason}")]
    Write { path: String, reason: String },
}

/// The CA: its certificate (shared freely) and its signing key (never leaves memory).
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
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
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
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
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|e| fail(e.to_string()))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing =
            rustls::crypto::ring::sign::any_ecdsa_type(&der).map_err(|e| fail(e.to_string()))?;
        Ok(Arc::new(CertifiedKey::new(
            vec![cert.der().clone(), self.cert_der.clone()],
            signing,
        )))
    }

    /// Writes `ca.pem` and `ca-bundle.pem` (system roots, then this CA) into `dir`, mode 0644:
    /// certificates only. Returns the two paths. Links are never followed: a link as `dir`
    /// itself is refused, and a link planted at either file's name is replaced by the file.
    pub fn write_files(
        &self,
        dir: &Path,
    ) -> Result<(std::path::PathBuf, std::path::PathBuf), CaError> {
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
}
