//! The upstream-facing TLS side: always verified (invariant 5).
//!
//! Owns the trust roots (Mozilla's, compiled in, plus the system bundle, plus every
//! `--upstream-ca` file) and the client configurations, one per ALPN offer sluice mirrors
//! from a client (`h2`+`http/1.1`, `http/1.1`, `h2`, none), built once and shared.
//!
//! Sharing them is what lets a new client connection resume the TLS session an earlier one
//! got from the same destination (each configuration keeps the last [`UPSTREAM_SESSIONS`]
//! destinations' tickets) instead of paying a full handshake upstream. A resumed session was
//! verified, against these roots, for the same server name when it was first made; nothing
//! of a request travels in it from one client connection to another.

use std::path::Path;
use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// Destinations whose TLS session tickets each upstream configuration keeps.
pub const UPSTREAM_SESSIONS: usize = 256;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamTlsError {
    #[error("cannot read the upstream CA file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{path} holds no usable certificate")]
    Empty { path: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The offer sluice makes upstream, mirroring the client's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Offer {
    H2AndHttp11,
    Http11,
    H2,
    None,
}

impl Offer {
    /// The client's ALPN list reduced to what sluice speaks, in the client's order.
    pub(crate) fn from_client<'a>(alpn: impl Iterator<Item = &'a [u8]>) -> Offer {
        let mut h2 = false;
        let mut h1 = false;
        for p in alpn {
            match p {
                b"h2" => h2 = true,
                b"http/1.1" => h1 = true,
                _ => {}
            }
        }
        match (h2, h1) {
            (true, true) => Offer::H2AndHttp11,
            (true, false) => Offer::H2,
            (false, true) => Offer::Http11,
            (false, false) => Offer::None,
        }
    }

    const ALL: [Offer; 4] = [Offer::H2AndHttp11, Offer::Http11, Offer::H2, Offer::None];

    fn index(self) -> usize {
        match self {
            Offer::H2AndHttp11 => 0,
            Offer::Http11 => 1,
            Offer::H2 => 2,
            Offer::None => 3,
        }
    }

    fn protocols(self) -> Vec<Vec<u8>> {
        match self {
            Offer::H2AndHttp11 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Offer::Http11 => vec![b"http/1.1".to_vec()],
            Offer::H2 => vec![b"h2".to_vec()],
            Offer::None => Vec::new(),
        }
    }
}

/// Upstream client configurations, one per offer (indexed by `Offer::index`).
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    configs: Vec<Arc<ClientConfig>>,
    pub roots: usize,
}

impl UpstreamTls {
    /// Webpki roots, the system bundle, and `extra_cas` (PEM files).
    pub fn new(extra_cas: &[impl AsRef<Path>]) -> Result<UpstreamTls, UpstreamTlsError> {
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(bundle) = super::ca::system_bundle() {
            let certs: Vec<_> = CertificateDer::pem_slice_iter(&bundle.bytes)
                .filter_map(Result::ok)
                .collect();
            roots.add_parsable_certificates(certs);
        }
        for path in extra_cas {
            let path = path.as_ref();
            let shown = path.display().to_string();
            let pem =
                crate::config_file::read(path, crate::config_file::Kind::Pem).map_err(|e| {
                    UpstreamTlsError::Read {
                        path: shown.clone(),
                        reason: e.to_string(),
                    }
                })?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem.bytes)
                .filter_map(Result::ok)
                .collect();
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(UpstreamTlsError::Empty { path: shown });
            }
        }
        let provider = super::provider();
        let roots = Arc::new(roots);
        let mut configs = Vec::with_capacity(Offer::ALL.len());
        for offer in Offer::ALL {
            let mut c = ClientConfig::builder_with_provider(Arc::clone(&provider))
                .with_safe_default_protocol_versions()
                .map_err(|e| UpstreamTlsError::Config(e.to_string()))?
                .with_root_certificates(Arc::clone(&roots))
                .with_no_client_auth();
            c.alpn_protocols = offer.protocols();
            c.resumption = rustls::client::Resumption::in_memory_sessions(UPSTREAM_SESSIONS);
            configs.push(Arc::new(c));
        }
        Ok(UpstreamTls {
            roots: roots.len(),
            configs,
        })
    }

    pub(crate) fn config(&self, offer: Offer) -> Arc<ClientConfig> {
        // `new` built one configuration per offer, in `Offer::ALL` order.
        Arc::clone(&self.configs[offer.index()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_mirror_the_client() {
        let l = |v: &[&[u8]]| Offer::from_client(v.iter().copied());
        assert_eq!(l(&[b"h2", b"http/1.1"]), Offer::H2AndHttp11);
        assert_eq!(l(&[b"http/1.1"]), Offer::Http11);
        assert_eq!(l(&[b"h2"]), Offer::H2);
        assert_eq!(l(&[b"spdy/3"]), Offer::None);
    }

    #[test]
    fn one_configuration_per_offer_is_shared_by_every_connection() {
        let none: [&Path; 0] = [];
        let tls = UpstreamTls::new(&none).unwrap();
        for offer in Offer::ALL {
            assert!(Arc::ptr_eq(&tls.config(offer), &tls.config(offer)));
            assert_eq!(tls.config(offer).alpn_protocols, offer.protocols());
        }
        // A clone (each connection's handle on the TLS state) shares them too.
        let clone = tls.clone();
        assert!(Arc::ptr_eq(
            &tls.config(Offer::Http11),
            &clone.config(Offer::Http11)
        ));
    }

    #[test]
    fn roots_include_webpki_and_extra_cas() {
        let none: [&Path; 0] = [];
        let base = UpstreamTls::new(&none).unwrap();
        assert!(base.roots >= webpki_roots::TLS_SERVER_ROOTS.len());
        let dir = std::env::temp_dir().join(format!("sluice-upca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = super::super::ca::Ca::generate().unwrap();
        let file = dir.join("ca.pem");
        std::fs::write(&file, ca.cert_pem()).unwrap();
        let more = UpstreamTls::new(&[&file]).unwrap();
        assert_eq!(more.roots, base.roots + 1);
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "nothing").unwrap();
        assert!(matches!(
            UpstreamTls::new(&[&empty]),
            Err(UpstreamTlsError::Empty { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
