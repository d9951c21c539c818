//! TLS: the ephemeral CA (`ca`), the client-facing side that terminates the sandbox's TLS
//! with cached leaves (`server`), and the upstream side that verifies every server (`upstream`).

pub(crate) mod ca;
pub(crate) mod server;
pub(crate) mod upstream;

use std::sync::Arc;

use rustls::CipherSuite;
use rustls::crypto::CryptoProvider;

/// ring's cipher suites; on a CPU with AES instructions ([`prefers_aes_128`]), AES-128-GCM
/// first (TLS 1.3 and 1.2) and the rest in ring's order. Both sides of sluice prefer it
/// there: the client-facing side chooses it over the client's own order, and the upstream
/// side offers it first. With AES hardware it is the cheapest AEAD, and its SHA-256 key
/// schedule runs on the CPU's SHA instructions where SHA-384's (the AES-256 suite's) does
/// not: a measured 3.6% of sluice's CPU per new intercepted connection went to SHA-512
/// blocks. It is the suite TLS 1.3 requires every implementation to support, and the one
/// Go's TLS prefers on AES hardware; AES-256 and ChaCha20 remain for peers that offer
/// nothing else. Without AES hardware, ring's order stands and the client's choice is
/// followed (ChaCha20 is then the cheaper one).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    if prefers_aes_128() {
        provider
            .cipher_suites
            .sort_by_key(|suite| !aes_128_gcm(suite.suite()));
    }
    Arc::new(provider)
}

/// Whether sluice puts AES-128-GCM first, over its clients' order: where the CPU has AES
/// instructions (x86-64 AES-NI with carry-less multiply, Arm's AES and PMULL).
pub(crate) fn prefers_aes_128() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

fn aes_128_gcm(suite: CipherSuite) -> bool {
    matches!(
        suite,
        CipherSuite::TLS13_AES_128_GCM_SHA256
            | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aes_128_gcm_comes_first_for_each_version_and_nothing_is_lost() {
        if !prefers_aes_128() {
            return;
        }
        let ours: Vec<CipherSuite> = provider().cipher_suites.iter().map(|s| s.suite()).collect();
        let ring: Vec<CipherSuite> = rustls::crypto::ring::default_provider()
            .cipher_suites
            .iter()
            .map(|s| s.suite())
            .collect();
        assert_eq!(ours.len(), ring.len());
        assert!(ring.iter().all(|s| ours.contains(s)));
        assert_eq!(ours[0], CipherSuite::TLS13_AES_128_GCM_SHA256);
        let tls12_first = ours
            .iter()
            .position(|s| *s == CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
            .unwrap_or(usize::MAX);
        assert!(
            ours.iter()
                .position(|s| *s == CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
                .unwrap_or(usize::MAX)
                < tls12_first
        );
    }
}
