//! Upstream connections of inspected (TLS-terminated) tunnels kept across client
//! connections: a verified TLS connection with its HTTP/1.1 or HTTP/2 client, handed to the
//! next client connection that would make exactly the same one.
//!
//! Owns what makes two upstream connections interchangeable (the [`Key`]), when one may go
//! back (`check_in`: only after a clean end, still ready, under the configuration it was made
//! under) and when one may be taken (`take`: same caller, same destination, an address the
//! taker's own destination plan vetted, the same ALPN offer, the same policy and credential
//! snapshot, younger than the idle timeout, still ready). Every request on a reused
//! connection still goes through the request phase on its own: the pool only saves the TCP
//! and TLS handshakes. A reload closes every idle connection at once (`retire`).
//!
//! Pooled per caller: a connection that once carried one caller's credential is never handed
//! to another caller, even when both may use the same secret (see the README).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::client::conn::{http1, http2};

use crate::credentials::Bindings;
use crate::http::body::UpBody;
use crate::pipeline::authority::Authority;
use crate::policy::Policy;
use crate::tls::server::Alpn;
use crate::tls::upstream::Offer;

/// Idle connections kept for one caller and destination.
const MAX_IDLE_PER_KEY: usize = 4;
/// Idle connections kept in all.
const MAX_IDLE: usize = 256;
/// An idle connection older than this is closed, never reused: shorter than the shortest
/// common server keep-alive (5 s: Node, Apache), so that an origin rarely closes a kept
/// connection just as it is reused (a request on it would then fail).
const IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// How long a returned HTTP/1.1 connection may take to be ready for its next request.
const READY_WAIT: Duration = Duration::from_secs(1);

/// The caller as far as it can tell two callers apart: everything policy matches on, and the
/// uid. Two processes equal in all of these are one caller to policy and credentials alike.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CallerKey {
    uid: u32,
    exe: String,
    ancestors: Vec<String>,
    cmdline_paths: Vec<String>,
}

/// Who and where: the part of a connection's identity known at CONNECT, before the client's
/// ClientHello says which ALPN offer it makes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    caller: CallerKey,
    /// The destination authority; the TLS server name verified upstream is its host.
    dst: Authority,
}

impl Key {
    /// A caller (its uid, executable, ancestor executables and cmdline paths) and a
    /// destination.
    pub(crate) fn new(
        uid: u32,
        exe: &str,
        ancestors: &[String],
        cmdline_paths: &[String],
        dst: &Authority,
    ) -> Key {
        Key {
            caller: CallerKey {
                uid,
                exe: exe.to_string(),
                ancestors: ancestors.to_vec(),
                cmdline_paths: cmdline_paths.to_vec(),
            },
            dst: dst.clone(),
        }
    }
}

/// The configuration a connection was made under: a reload that swaps either retires it.
#[derive(Clone, Debug)]
pub(crate) struct Epoch {
    pub(crate) policy: Arc<Policy>,
    pub(crate) credentials: Arc<Bindings>,
}

impl Epoch {
    fn same(&self, other: &Epoch) -> bool {
        Arc::ptr_eq(&self.policy, &other.policy)
            && Arc::ptr_eq(&self.credentials, &other.credentials)
    }
}

/// An upstream HTTP client over a verified TLS connection.
pub(crate) enum Client {
    H1(http1::SendRequest<UpBody>),
    H2(http2::SendRequest<UpBody>),
}

impl Client {
    fn is_ready(&self) -> bool {
        match self {
            Client::H1(s) => s.is_ready(),
            Client::H2(s) => s.is_ready(),
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Client::H1(_) => "Client::H1",
            Client::H2(_) => "Client::H2",
        })
    }
}

/// A connection going back to the pool, with everything that identifies it.
#[derive(Debug)]
pub(crate) struct Returned {
    pub(crate) key: Key,
    /// The address dialled (vetted by the destination plan of the connection that dialled).
    pub(crate) addr: SocketAddr,
    /// The ALPN offer made upstream (it chose the client configuration and the protocol).
    pub(crate) offer: Offer,
    /// The protocol the upstream chose from the offer (what the client is offered in turn).
    pub(crate) alpn: Alpn,
    pub(crate) epoch: Epoch,
    pub(crate) client: Client,
}

/// A connection taken from the pool.
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) addr: SocketAddr,
    pub(crate) alpn: Alpn,
    pub(crate) client: Client,
}

#[derive(Debug)]
struct Idle {
    addr: SocketAddr,
    offer: Offer,
    alpn: Alpn,
    epoch: Epoch,
    client: Client,
    since: Instant,
}

impl Idle {
    fn usable(&self, now: Instant) -> bool {
        now.duration_since(self.since) < IDLE_TIMEOUT && self.client.is_ready()
    }
}

/// What a taker may accept: addresses its own plan vetted, its offer, the protocol its
/// client already speaks (once it does), its epoch.
#[derive(Debug)]
pub(crate) struct Wanted<'a> {
    pub(crate) vetted: &'a [SocketAddr],
    pub(crate) offer: Option<Offer>,
    pub(crate) alpn: Option<Alpn>,
    pub(crate) epoch: &'a Epoch,
}

impl Wanted<'_> {
    fn fits(&self, idle: &Idle) -> bool {
        self.vetted.contains(&idle.addr)
            && self.offer.is_none_or(|o| o == idle.offer)
            && self.alpn.is_none_or(|a| a == idle.alpn)
            && self.epoch.same(&idle.epoch)
    }
}

/// The idle upstream connections of a running proxy.
#[derive(Debug, Default)]
pub struct Pool {
    idle: Mutex<HashMap<Key, Vec<Idle>>>,
    /// The configurations of the last reload ([`Pool::retire`]: the local one and each
    /// gateway tenant's): a connection made under another never goes in. Locked before
    /// `idle` wherever both are.
    reloaded: Mutex<Option<Vec<Epoch>>>,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Vec<Idle>>> {
        // The map holds no invariant a panicking holder could break half-way.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The address of a connection `take` would hand over now (any offer), if any: the
    /// caller of a CONNECT may then skip dialling. Stale entries are dropped on the way.
    pub(crate) fn candidate(&self, key: &Key, wanted: &Wanted<'_>) -> Option<SocketAddr> {
        let now = Instant::now();
        let mut idle = self.lock();
        let list = idle.get_mut(key)?;
        list.retain(|i| i.usable(now));
        let found = list.iter().rev().find(|i| wanted.fits(i)).map(|i| i.addr);
        if list.is_empty() {
            idle.remove(key);
        }
        found
    }

    /// The most recently returned connection that fits, still ready; `None`: dial.
    pub(crate) fn take(&self, key: &Key, wanted: &Wanted<'_>) -> Option<Taken> {
        let now = Instant::now();
        let mut idle = self.lock();
        let list = idle.get_mut(key)?;
        list.retain(|i| i.usable(now));
        let at = list.iter().rposition(|i| wanted.fits(i));
        let found = at.map(|at| list.remove(at));
        if list.is_empty() {
            idle.remove(key);
        }
        if found.is_some() {
            crate::metrics::upstream_reused();
        }
        found.map(|i| Taken {
            addr: i.addr,
            alpn: i.alpn,
            client: i.client,
        })
    }

    /// Puts a connection back once it is ready for another request (an HTTP/1.1 connection
    /// whose response ended with `Connection: close`, or with bytes after it, never is), and
    /// only if the configuration it was made under is still `current`.
    pub(crate) fn check_in(self: &Arc<Self>, returned: Returned, current: Epoch) {
        let pool = Arc::clone(self);
        tokio::spawn(async move {
            let Returned {
                key,
                addr,
                offer,
                alpn,
                epoch,
                client,
            } = returned;
            let client = match client {
                Client::H1(mut s) => match tokio::time::timeout(READY_WAIT, s.ready()).await {
                    Ok(Ok(())) => Client::H1(s),
                    _ => return,
                },
                Client::H2(s) => Client::H2(s),
            };
            if !epoch.same(&current) || !client.is_ready() {
                return;
            }
            pool.insert(
                key,
                Idle {
                    addr,
                    offer,
                    alpn,
                    epoch,
                    client,
                    since: Instant::now(),
                },
            );
            // Closes it once it has idled too long, even if no one asks for it again.
            let pool = Arc::downgrade(&pool);
            tokio::spawn(async move {
                tokio::time::sleep(IDLE_TIMEOUT).await;
                if let Some(pool) = pool.upgrade() {
                    pool.sweep();
                }
            });
        });
    }

    /// Closes every idle connection at a reload to `current`, and keeps out any made before
    /// it that is still on its way back: none could be taken again (a taker's configuration
    /// is `current` from now on), and an origin should not hold them open until they time out.
    pub(crate) fn retire(&self, current: Vec<Epoch>) {
        let mut reloaded = self.reloaded.lock().unwrap_or_else(PoisonError::into_inner);
        *reloaded = Some(current);
        // Dropping each client closes its connection.
        self.lock().clear();
    }

    fn insert(&self, key: Key, entry: Idle) {
        let now = Instant::now();
        let reloaded = self.reloaded.lock().unwrap_or_else(PoisonError::into_inner);
        if reloaded
            .as_ref()
            .is_some_and(|now| !now.iter().any(|e| e.same(&entry.epoch)))
        {
            return;
        }
        let mut idle = self.lock();
        let total: usize = idle.values().map(Vec::len).sum();
        if total >= MAX_IDLE {
            for list in idle.values_mut() {
                list.retain(|i| i.usable(now));
            }
            idle.retain(|_, l| !l.is_empty());
            if idle.values().map(Vec::len).sum::<usize>() >= MAX_IDLE {
                return;
            }
        }
        let list = idle.entry(key).or_default();
        if list.len() >= MAX_IDLE_PER_KEY {
            // The oldest goes (dropping the client closes its connection).
            list.remove(0);
        }
        list.push(entry);
    }

    /// Closes every idle connection past its timeout or no longer ready.
    fn sweep(&self) {
        let now = Instant::now();
        let mut idle = self.lock();
        for list in idle.values_mut() {
            list.retain(|i| i.usable(now));
        }
        idle.retain(|_, l| !l.is_empty());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use hyper_util::rt::TokioIo;

    use super::*;
    use crate::policy::{Compat, Source, load};

    fn policy() -> Arc<Policy> {
        let text = "version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - {host: h.test, port: 443}\n    binaries:\n      - path: /usr/bin/curl\n";
        let sources = [Source {
            name: "p.yaml".to_string(),
            text: text.to_string(),
        }];
        Arc::new(load(&sources, Compat::Strict).unwrap().policy)
    }

    /// A ready HTTP/1.1 client over an in-memory pipe (the far end kept open).
    async fn client() -> (Client, tokio::io::DuplexStream) {
        let (near, far) = tokio::io::duplex(1024);
        let (mut sender, conn) = http1::handshake::<_, UpBody>(TokioIo::new(near))
            .await
            .unwrap();
        tokio::spawn(conn);
        sender.ready().await.unwrap();
        (Client::H1(sender), far)
    }

    fn key(exe: &str) -> Key {
        Key::new(0, exe, &[], &[], &Authority::new("h.test".to_string(), 443))
    }

    #[tokio::test]
    async fn only_a_connection_made_exactly_alike_is_taken() {
        let pool = Pool::default();
        let epoch = Epoch {
            policy: policy(),
            credentials: Arc::new(Bindings::default()),
        };
        let addr: SocketAddr = "192.0.2.1:443".parse().unwrap();
        let (c, _far) = client().await;
        pool.insert(
            key("/usr/bin/curl"),
            Idle {
                addr,
                offer: Offer::Http11,
                alpn: Alpn::Http11,
                epoch: epoch.clone(),
                client: c,
                since: Instant::now(),
            },
        );
        let vetted = [addr];
        let fits = Wanted {
            vetted: &vetted,
            offer: Some(Offer::Http11),
            alpn: Some(Alpn::Http11),
            epoch: &epoch,
        };
        // Another caller, an address the taker's plan did not vet, another offer, another
        // policy or credential snapshot: never.
        assert!(pool.take(&key("/usr/bin/python3"), &fits).is_none());
        let other: [SocketAddr; 1] = ["192.0.2.2:443".parse().unwrap()];
        let checks = [
            Wanted {
                vetted: &other,
                ..fits
            },
            Wanted {
                offer: Some(Offer::H2AndHttp11),
                ..fits
            },
            Wanted {
                alpn: Some(Alpn::H2),
                ..fits
            },
        ];
        for w in &checks {
            assert!(pool.candidate(&key("/usr/bin/curl"), w).is_none());
            assert!(pool.take(&key("/usr/bin/curl"), w).is_none());
        }
        let reloaded = Epoch {
            policy: policy(),
            credentials: Arc::clone(&epoch.credentials),
        };
        let rotated = Epoch {
            policy: Arc::clone(&epoch.policy),
            credentials: Arc::new(Bindings::default()),
        };
        for e in [&reloaded, &rotated] {
            let w = Wanted { epoch: e, ..fits };
            assert!(pool.take(&key("/usr/bin/curl"), &w).is_none());
        }
        // The same caller, address, offer and snapshot: taken once.
        assert_eq!(pool.candidate(&key("/usr/bin/curl"), &fits), Some(addr));
        let taken = pool.take(&key("/usr/bin/curl"), &fits).unwrap();
        assert_eq!((taken.addr, taken.alpn), (addr, Alpn::Http11));
        assert!(pool.take(&key("/usr/bin/curl"), &fits).is_none());
    }

    #[tokio::test]
    async fn a_reload_closes_idle_connections_and_keeps_older_ones_out() {
        let pool = Pool::default();
        let old = Epoch {
            policy: policy(),
            credentials: Arc::new(Bindings::default()),
        };
        let addr: SocketAddr = "192.0.2.1:443".parse().unwrap();
        let idle = |client, epoch: &Epoch| Idle {
            addr,
            offer: Offer::Http11,
            alpn: Alpn::Http11,
            epoch: epoch.clone(),
            client,
            since: Instant::now(),
        };
        let (c, mut far) = client().await;
        pool.insert(key("/usr/bin/curl"), idle(c, &old));
        let new = Epoch {
            policy: policy(),
            credentials: Arc::clone(&old.credentials),
        };
        pool.retire(vec![new.clone()]);
        // The origin's end sees the connection closed.
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::io::AsyncReadExt::read(&mut far, &mut byte),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(n, 0);
        // One made before the reload, returned after it, stays out; one made after goes in.
        let (c, _far) = client().await;
        pool.insert(key("/usr/bin/curl"), idle(c, &old));
        assert!(pool.lock().is_empty());
        let (c, _far2) = client().await;
        pool.insert(key("/usr/bin/curl"), idle(c, &new));
        assert_eq!(pool.lock().len(), 1);
    }

    #[tokio::test]
    async fn a_closed_connection_is_never_taken() {
        let pool = Pool::default();
        let epoch = Epoch {
            policy: policy(),
            credentials: Arc::new(Bindings::default()),
        };
        let addr: SocketAddr = "192.0.2.1:443".parse().unwrap();
        let (c, far) = client().await;
        pool.insert(
            key("/usr/bin/curl"),
            Idle {
                addr,
                offer: Offer::Http11,
                alpn: Alpn::Http11,
                epoch: epoch.clone(),
                client: c,
                since: Instant::now(),
            },
        );
        // The origin closes the idle connection.
        drop(far);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let vetted = [addr];
        let w = Wanted {
            vetted: &vetted,
            offer: Some(Offer::Http11),
            alpn: None,
            epoch: &epoch,
        };
        assert!(pool.take(&key("/usr/bin/curl"), &w).is_none());
    }
}
