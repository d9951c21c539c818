//! The proxy hop over TLS (`--tls-listen ADDR --tls-cert FILE --tls-key FILE`): what
//! `curl --proxy https://...` and Python's HTTPS proxies speak, so that proxy credentials
//! and the requests they carry do not cross the network in the clear.
//!
//! Owns the hop's server configuration (the certificate and key read by `config_file`,
//! HTTP/1.1 by ALPN, and, with `--client-ca`, client certificates verified against those
//! CAs, asked for but not required: a tenant may be known by password alone) and one
//! handshake, which yields the stream and what a verified client certificate says
//! (`tenants::cert::PeerCert`). A certificate from another CA fails the handshake. Which
//! tenant the certificate names is the tenants' to decide, at the connection's arrival.
//! A reload loads the files again and [`Hop::replace`]s what new handshakes use (a renewed
//! certificate); connections already open keep theirs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;

use crate::config_file::{self, Kind};
use crate::pipeline::{HopTls, Prefixed};
use crate::tenants::cert::PeerCert;

/// Why the TLS hop cannot be set up: sluice does not start (exit 2, a usage error: the
/// operator named files that cannot serve).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HopError {
    /// A file is refused as a file (`config_file`).
    #[error("{flag} {path}: {source}")]
    File {
        flag: &'static str,
        path: String,
        source: config_file::FileError,
    },
    /// A file holds no certificate or key sluice can use.
    #[error("{flag} {path}: {reason}")]
    Invalid {
        flag: &'static str,
        path: String,
        reason: String,
    },
}

/// Why one hop's handshake failed (for its audit record).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    #[error("the proxy hop's TLS handshake failed: {0}")]
    Failed(std::io::Error),
    #[error("the proxy hop's TLS handshake did not finish within {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("{0}")]
    Certificate(String),
}

/// The TLS hop of a listener.
pub struct Hop {
    /// What new handshakes use: swapped whole by a reload.
    serving: ArcSwap<Serving>,
    /// Whether client certificates are asked for (`--client-ca`).
    pub verifies_clients: bool,
}

/// The server configuration and the chain it presents.
struct Serving {
    config: Arc<ServerConfig>,
    chain: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for Hop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hop")
            .field("verifies_clients", &self.verifies_clients)
            .finish_non_exhaustive()
    }
}

impl Hop {
    /// The hop presenting the chain in `cert` with `key`; with `client_ca`, asking clients
    /// for a certificate that chains to one of its CAs.
    pub fn load(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Hop, HopError> {
        let invalid = |flag, path: &Path, reason: String| HopError::Invalid {
            flag,
            path: path.display().to_string(),
            reason,
        };
        let chain = certificates(cert, "--tls-cert")?;
        let presented = chain.clone();
        let key_pem = read(key, "--tls-key", Kind::PrivateKey)?;
        let key_der = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            invalid(
                "--tls-key",
                key,
                format!("not a PEM private key (PKCS#8, SEC1 or PKCS#1): {e}"),
            )
        })?;
        let provider = crate::tls::provider();
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("--tls-cert", cert, e.to_string()))?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in certificates(path, "--client-ca")? {
                    roots
                        .add(c)
                        .map_err(|e| invalid("--client-ca", path, e.to_string()))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                )
                // A tenant may be known by its password alone; a certificate, when sent,
                // must verify.
                .allow_unauthenticated()
                .build()
                .map_err(|e| invalid("--client-ca", path, e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key_der)
            .map_err(|e| invalid("--tls-key", key, format!("does not serve --tls-cert: {e}")))?;
        // The proxy speaks HTTP/1.1 to its clients (CONNECT and absolute-form requests).
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Hop {
            serving: ArcSwap::from_pointee(Serving {
                config: Arc::new(config),
                chain: presented,
            }),
            verifies_clients: client_ca.is_some(),
        })
    }

    /// New handshakes use what `new` (the same files, loaded again) holds. Returns whether
    /// the certificate chain it presents changed.
    pub fn replace(&self, new: Hop) -> bool {
        let new = new.serving.into_inner();
        let changed = self.serving.load().chain != new.chain;
        self.serving.store(new);
        changed
    }

    /// The handshake on `stream` (after `read_ahead`, bytes read with a PROXY header), within
    /// `within`: the stream, and the client certificate it presented (verified).
    pub async fn accept(
        &self,
        stream: Prefixed<TcpStream>,
        within: Duration,
    ) -> Result<(HopTls, Option<Arc<PeerCert>>), HandshakeError> {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&self.serving.load().config));
        let tls = match tokio::time::timeout(within, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => return Err(HandshakeError::Failed(e)),
            Err(_) => return Err(HandshakeError::Timeout(within)),
        };
        let cert = match tls.get_ref().1.peer_certificates() {
            Some([leaf, ..]) => Some(Arc::new(
                PeerCert::from_der(leaf).map_err(HandshakeError::Certificate)?,
            )),
            _ => None,
        };
        Ok((tls, cert))
    }
}

/// A file of the hop's as `config_file` reads it, its refusal naming the flag and path.
fn read(
    path: &Path,
    flag: &'static str,
    kind: Kind,
) -> Result<zeroize::Zeroizing<Vec<u8>>, HopError> {
    config_file::read(path, kind)
        .map(|c| c.bytes)
        .map_err(|source| HopError::File {
            flag,
            path: path.display().to_string(),
            source,
        })
}

/// The certificates of a PEM file (at least one).
fn certificates(path: &Path, flag: &'static str) -> Result<Vec<CertificateDer<'static>>, HopError> {
    let invalid = |reason: String| HopError::Invalid {
        flag,
        path: path.display().to_string(),
        reason,
    };
    let pem = read(path, flag, Kind::Pem)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid("holds no certificate".to_string()));
    }
    Ok(certs)
}
