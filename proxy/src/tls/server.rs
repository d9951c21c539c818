//! The client-facing TLS side: leaf certificates minted once per name and cached (bounded
//! LRU shared by all connections), and a handful of shared rustls server configurations.
//!
//! Owns the certificate resolver (the ClientHello's SNI picks the leaf) and the choice of
//! server configuration per connection: by the ALPN protocol the upstream agreed to (mirrored
//! to the client: `h2`, `http/1.1`, or none), and, for a client that sends no SNI (an IP
//! literal target), by the CONNECT host. Configurations are built once and shared; only a
//! no-SNI host gets its own (cached) configuration. A new CA (an operator's CA rotated by a
//! reload) replaces the cached leaves at once: no leaf of the old CA is issued after it; a
//! handshake that had already taken one completes with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::ca::{Ca, CaError};

/// Leaves kept; the least recently used is dropped past it (never the whole cache).
pub const LEAF_CACHE: usize = 1024;

/// The protocol agreed with the upstream, mirrored to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Alpn {
    H2,
    Http11,
    None,
}

impl Alpn {
    pub(crate) fn from_protocol(p: Option<&[u8]>) -> Alpn {
        match p {
            Some(b"h2") => Alpn::H2,
            Some(b"http/1.1") => Alpn::Http11,
            _ => Alpn::None,
        }
    }

    fn protocols(self) -> Vec<Vec<u8>> {
        match self {
            Alpn::H2 => vec![b"h2".to_vec()],
            Alpn::Http11 => vec![b"http/1.1".to_vec()],
            Alpn::None => Vec::new(),
        }
    }
}

/// A small LRU: a map plus a use counter per entry.
#[derive(Debug)]
struct Lru<V> {
    map: HashMap<String, (V, u64)>,
    tick: u64,
    capacity: usize,
}

impl<V: Clone> Lru<V> {
    fn new(capacity: usize) -> Self {
        Lru {
            map: HashMap::new(),
            tick: 0,
            capacity: capacity.max(1),
        }
    }

    fn get(&mut self, key: &str) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(v, t)| {
            *t = tick;
            v.clone()
        })
    }

    fn insert(&mut self, key: String, value: V) {
        if self.map.len() >= self.capacity
            && !self.map.contains_key(&key)
            && let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone())
        {
            self.map.remove(&oldest);
        }
        self.tick += 1;
        self.map.insert(key, (value, self.tick));
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

/// Mints and caches leaves.
#[derive(Debug)]
pub struct LeafCache {
    leaves: Mutex<Leaves>,
    capacity: usize,
}

/// The CA and the leaves it signed; a new CA starts a new generation with no leaves.
#[derive(Debug)]
struct Leaves {
    ca: Arc<Ca>,
    generation: u64,
    lru: Lru<Arc<CertifiedKey>>,
}

impl LeafCache {
    pub fn new(ca: Arc<Ca>, capacity: usize) -> LeafCache {
        LeafCache {
            leaves: Mutex::new(Leaves {
                ca,
                generation: 0,
                lru: Lru::new(capacity),
            }),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Leaves> {
        // A panic while holding the lock leaves a consistent map (each step is one insert or
        // removal): keep using it.
        self.leaves
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The leaf for `name` (lower-case host or IP literal), minted on first use.
    fn leaf(&self, name: &str) -> Result<Arc<CertifiedKey>, CaError> {
        let (hit, ca, generation) = {
            let mut l = self.lock();
            (l.lru.get(name), Arc::clone(&l.ca), l.generation)
        };
        crate::metrics::leaf_cache(hit.is_some());
        if let Some(hit) = hit {
            return Ok(hit);
        }
        // Mint outside the lock: two racing connections may both mint; one wins the slot. A
        // leaf of a CA rotated out meanwhile serves its one handshake and is not kept.
        let leaf = ca.mint(name)?;
        let mut l = self.lock();
        if l.generation == generation {
            l.lru.insert(name.to_string(), Arc::clone(&leaf));
        }
        Ok(leaf)
    }

    /// The CA the leaves are minted by now.
    pub fn ca(&self) -> Arc<Ca> {
        Arc::clone(&self.lock().ca)
    }

    /// Mints every later leaf with `ca`; the leaves of the one before are dropped.
    fn rotate(&self, ca: Arc<Ca>) {
        let mut l = self.lock();
        l.ca = ca;
        l.generation += 1;
        l.lru = Lru::new(self.capacity);
    }

    pub fn len(&self) -> usize {
        self.lock().lru.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Picks the leaf by SNI.
#[derive(Debug)]
struct BySni(Arc<LeafCache>);

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name()?.to_ascii_lowercase();
        self.0.leaf(&name).ok()
    }
}

/// Always the leaf for one name (clients that send no SNI).
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

/// The shared client-facing TLS state.
#[derive(Debug)]
pub struct Terminator {
    leaves: Arc<LeafCache>,
    by_sni: HashMap<Alpn, Arc<ServerConfig>>,
    no_sni: Mutex<Lru<Arc<ServerConfig>>>,
}

fn server_config(
    resolver: Arc<dyn ResolvesServerCert>,
    alpn: Alpn,
) -> Result<ServerConfig, rustls::Error> {
    let mut c = ServerConfig::builder_with_provider(super::provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    c.alpn_protocols = alpn.protocols();
    // Our order (see `super::provider`), not the client's, where it puts AES-128-GCM first.
    c.ignore_client_order = super::prefers_aes_128();
    Ok(c)
}

impl Terminator {
    pub fn new(ca: Arc<Ca>) -> Result<Terminator, rustls::Error> {
        let leaves = Arc::new(LeafCache::new(ca, LEAF_CACHE));
        let mut by_sni = HashMap::new();
        for alpn in [Alpn::H2, Alpn::Http11, Alpn::None] {
            let resolver: Arc<dyn ResolvesServerCert> = Arc::new(BySni(Arc::clone(&leaves)));
            by_sni.insert(alpn, Arc::new(server_config(resolver, alpn)?));
        }
        Ok(Terminator {
            leaves,
            by_sni,
            no_sni: Mutex::new(Lru::new(LEAF_CACHE)),
        })
    }

    pub fn leaves(&self) -> &LeafCache {
        &self.leaves
    }

    /// The CA that signs the leaves now; its certificate and chain (PEM) are what clients
    /// must trust: public, the key stays in memory.
    pub fn ca(&self) -> Arc<Ca> {
        self.leaves.ca()
    }

    /// Signs every later leaf with `ca` (a reload's rotated operator CA): the cached leaves
    /// and the no-SNI configurations made with the old one are dropped.
    pub fn rotate(&self, ca: Arc<Ca>) {
        self.leaves.rotate(ca);
        if let Ok(mut c) = self.no_sni.lock() {
            *c = Lru::new(LEAF_CACHE);
        }
    }

    /// The configuration for a handshake: by SNI when the client sent one, else with the
    /// leaf of `fallback_host` (the CONNECT target); ALPN mirrors the upstream's choice.
    pub(crate) fn config_for(
        &self,
        sni: Option<&str>,
        fallback_host: &str,
        alpn: Alpn,
    ) -> Result<Arc<ServerConfig>, String> {
        if sni.is_some() {
            return self
                .by_sni
                .get(&alpn)
                .cloned()
                .ok_or_else(|| "no TLS configuration".to_string());
        }
        let key = format!("{fallback_host}|{alpn:?}");
        if let Some(hit) = self.no_sni.lock().ok().and_then(|mut c| c.get(&key)) {
            crate::metrics::leaf_cache(true);
            return Ok(hit);
        }
        let leaf = self.leaves.leaf(fallback_host).map_err(|e| e.to_string())?;
        let config =
            Arc::new(server_config(Arc::new(Fixed(leaf)), alpn).map_err(|e| e.to_string())?);
        if let Ok(mut c) = self.no_sni.lock() {
            c.insert(key, Arc::clone(&config));
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_keeps_the_recent() {
        let mut l = Lru::new(2);
        l.insert("a".into(), 1);
        l.insert("b".into(), 2);
        assert_eq!(l.get("a"), Some(1));
        l.insert("c".into(), 3);
        assert_eq!(l.get("b"), None);
        assert_eq!(l.get("a"), Some(1));
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn leaves_are_minted_once() {
        let cache = LeafCache::new(Arc::new(Ca::generate().unwrap()), 8);
        let a = cache.leaf("a.example.com").unwrap();
        let again = cache.leaf("a.example.com").unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn after_a_rotation_no_leaf_of_the_old_ca_is_issued() {
        let old = Arc::new(Ca::generate().unwrap());
        let terminator = Terminator::new(Arc::clone(&old)).unwrap();
        let before = terminator.leaves.leaf("a.example.com").unwrap();
        assert_eq!(&before.cert[1], old.cert_der());
        let _ = terminator
            .config_for(None, "b.example.com", Alpn::None)
            .unwrap();
        let new = Arc::new(Ca::generate().unwrap());
        terminator.rotate(Arc::clone(&new));
        assert!(terminator.leaves.is_empty());
        let after = terminator.leaves.leaf("a.example.com").unwrap();
        assert_eq!(&after.cert[1], new.cert_der());
        assert!(!Arc::ptr_eq(&before, &after));
        assert_eq!(terminator.ca().cert_pem(), new.cert_pem());
        assert!(terminator.no_sni.lock().unwrap().len() == 0);
    }
}
