//! HTTP/1.1's upstream connections for one client connection: a tunnel's (kept for its
//! life, or leased from the pool while a request is in flight) or, for absolute-form
//! requests, one per destination, reused only at an address the plan in force still
//! allows; and the pick or dial of the one a request goes over (`upstream_for`).

use std::collections::HashMap;
use std::net::SocketAddr;

use hyper::client::conn::http1::SendRequest;

use super::lease::Lease;
use crate::http::body::UpBody;
use crate::pipeline::authority::Authority;
use crate::pipeline::denial::Denial;
use crate::pipeline::phases::connection::{self, Admitted};
use crate::pipeline::phases::request::Exchange;
use crate::pipeline::state::shared::Shared;
use crate::pipeline::upstream::open;

/// Upstream connections kept per client connection.
const MAX_UPSTREAMS: usize = 8;

/// An upstream HTTP/1.1 connection and the address it reached.
pub(crate) struct Upstream {
    pub(crate) sender: SendRequest<UpBody>,
    pub(crate) addr: SocketAddr,
    /// Its last exchange ended cleanly: the request body sent whole, the response read whole
    /// and not delimited by the close, no upgrade. Only then may it serve another client.
    pub(crate) reusable: bool,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// How requests on this connection find their upstream.
#[derive(Debug)]
pub enum Route {
    /// Absolute-form requests: each names its own host, admitted and dialled per request.
    Forward,
    /// Requests inside an admitted CONNECT tunnel (TLS-terminated, or plaintext HTTP).
    Tunnel(Box<Tunnel>),
}

/// An admitted tunnel: its destination and admission, and its upstream connection: one for
/// its whole life (plaintext HTTP), or, under a [`Lease`], held only while a request is in
/// flight (TLS).
#[derive(Debug)]
pub struct Tunnel {
    pub(crate) admitted: Admitted,
    /// `None` while the lease has given it back.
    pub(crate) upstream: Option<Upstream>,
    lease: Option<Lease>,
}

impl Tunnel {
    /// A tunnel that keeps `sender`'s connection for its whole life.
    pub fn new(admitted: Admitted, sender: SendRequest<UpBody>, addr: SocketAddr) -> Tunnel {
        Tunnel {
            admitted,
            upstream: Some(Upstream {
                sender,
                addr,
                reusable: false,
            }),
            lease: None,
        }
    }

    /// A tunnel whose upstream connection, first `sender`'s, goes back to the pool whenever
    /// its client idles.
    pub(crate) fn leased(admitted: Admitted, sender: SendRequest<UpBody>, lease: Lease) -> Tunnel {
        Tunnel {
            admitted,
            upstream: Some(Upstream {
                sender,
                addr: lease.addr(),
                reusable: false,
            }),
            lease: Some(lease),
        }
    }

    /// Gives a leased upstream connection back (pooled if its last exchange ended cleanly);
    /// an unleased one is kept.
    pub(crate) fn release(&mut self, shared: &Shared) {
        if let Some(lease) = &self.lease
            && let Some(u) = self.upstream.take()
        {
            let current = connection::current_epoch(shared, &self.admitted);
            lease.release(&shared.pool, current, u.sender, u.reusable);
        }
    }
}

/// The upstream for a request: the tunnel's one connection, or this client's connection to
/// the forward target (reused, else dialled). `Ok(None)`: the tunnel's upstream is gone.
pub(crate) async fn upstream_for<'u>(
    x: &Exchange<'_>,
    route: &'u mut Route,
    upstreams: &'u mut HashMap<Authority, Upstream>,
    verb: &str,
) -> Result<Option<&'u mut Upstream>, Denial> {
    match route {
        Route::Tunnel(t) => {
            if let Some(u) = &mut t.upstream
                && u.sender.ready().await.is_err()
            {
                t.upstream = None;
            }
            // Gone (closed by the upstream while the client idled) or given back: a leased
            // tunnel takes another for this request, else the tunnel ends.
            if t.upstream.is_none() {
                let Some(lease) = &mut t.lease else {
                    return Ok(None);
                };
                // Boxed, as the dials below: a handshake's state (kilobytes) would otherwise
                // be part of every request's.
                let sender = Box::pin(lease.acquire(x.shared, &t.admitted))
                    .await
                    .map_err(|e| x.upstream_failed(e))?;
                t.upstream = Some(Upstream {
                    sender,
                    addr: lease.addr(),
                    reusable: false,
                });
            }
            Ok(t.upstream.as_mut())
        }
        Route::Forward => {
            let key = &x.admitted.dst;
            // Each request is admitted again: its upstream connection is reused only at an
            // address the destination plan in force still allows.
            let reusable = match upstreams.get_mut(key) {
                Some(u) => {
                    connection::still_allows(x.shared, x.admitted, u.addr)
                        && u.sender.ready().await.is_ok()
                }
                None => false,
            };
            if !reusable {
                upstreams.remove(key);
                if upstreams.len() >= MAX_UPSTREAMS {
                    upstreams.clear();
                }
                let (stream, addr) = Box::pin(connection::dial(x.shared, x.admitted, verb)).await?;
                match Box::pin(open::http1(stream)).await {
                    Ok(sender) => {
                        upstreams.insert(
                            key.clone(),
                            Upstream {
                                sender,
                                addr,
                                reusable: false,
                            },
                        );
                    }
                    Err(e) => return Err(x.upstream_failed(e.to_string())),
                }
            }
            Ok(upstreams.get_mut(key))
        }
    }
}
