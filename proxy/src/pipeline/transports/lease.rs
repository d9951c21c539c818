//! An inspected HTTP/1.1 tunnel's hold on an upstream connection, kept only while its client
//! is busy: when the client connection goes idle, its upstream connection goes back to the
//! pool (`state/pool.rs`) for any client connection of the same caller and destination; the next
//! request takes one again, or dials.
//!
//! The downstream and upstream lifetimes are separate, as in Envoy or pingora, and nothing
//! else changes: the pool's key (caller, destination), the tunnel's own vetted address, its
//! ALPN offer and the configuration epoch decide what may be taken; a connection is only
//! ever dialled again at the address the tunnel was dialled at, vetted by its own
//! destination plan at CONNECT (never a new lookup of the name), so the live registry's
//! re-vetting of that address on a reload (`connection::hold`) still covers it; every request
//! still goes through the request phase on its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::client::conn::http1::SendRequest;

use crate::http::body::UpBody;
use crate::pipeline::phases::connection::{self, Admitted};
use crate::pipeline::state::pool::{Client, Epoch, Key, Pool, Returned, Wanted};
use crate::pipeline::state::shared::Shared;
use crate::pipeline::upstream::open;
use crate::tls::server::Alpn;
use crate::tls::upstream::Offer;

/// How long a client connection may idle before its upstream connection goes back: long
/// enough that a client sending its requests back to back keeps its connection (no pool
/// round trip per request), short enough that an idle connection holds none.
pub(crate) const RELEASE_AFTER: Duration = Duration::from_millis(250);

/// How an inspected tunnel's upstream connection is made again: whose and where (the pool
/// key, the address dialled at CONNECT), what was offered and agreed, and under which
/// configuration the connection held now was made.
#[derive(Debug)]
pub(crate) struct Lease {
    key: Key,
    addr: SocketAddr,
    offer: Offer,
    alpn: Alpn,
    epoch: Epoch,
}

impl Lease {
    pub(crate) fn new(key: Key, addr: SocketAddr, offer: Offer, alpn: Alpn, epoch: Epoch) -> Lease {
        Lease {
            key,
            addr,
            offer,
            alpn,
            epoch,
        }
    }

    /// The address every upstream connection of the tunnel reaches.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Gives the held connection back: into the pool if its last exchange ended cleanly
    /// (and it is ready again, under the configuration in force now), else closed.
    pub(crate) fn release(
        &self,
        pool: &Arc<Pool>,
        current: Epoch,
        sender: SendRequest<UpBody>,
        reusable: bool,
    ) {
        if !reusable {
            return;
        }
        let returned = Returned {
            key: self.key.clone(),
            addr: self.addr,
            offer: self.offer,
            alpn: self.alpn,
            epoch: self.epoch.clone(),
            client: Client::H1(sender),
        };
        pool.check_in(returned, current);
    }

    /// A connection for the tunnel's next request: one the pool holds for this caller and
    /// destination at the tunnel's address, with the same offer, protocol and configuration;
    /// else a new one dialled at that address.
    pub(crate) async fn acquire(
        &mut self,
        shared: &Shared,
        admitted: &Admitted,
    ) -> Result<SendRequest<UpBody>, String> {
        let epoch = connection::epoch(shared, admitted);
        let vetted = [self.addr];
        let wanted = Wanted {
            vetted: &vetted,
            offer: Some(self.offer),
            alpn: Some(self.alpn),
            epoch: &epoch,
        };
        if let Some(taken) = shared.pool.take(&self.key, &wanted)
            && let Client::H1(sender) = taken.client
        {
            self.epoch = epoch;
            return Ok(sender);
        }
        let Some(tls) = &shared.tls else {
            return Err("TLS termination unavailable".to_string());
        };
        let (socket, _) = connection::dial_vetted(shared, &vetted)
            .await
            .map_err(|e| format!("upstream connection failed: {e}"))?;
        let dst = &admitted.dst;
        let stream = open::tls(shared, tls, dst, self.offer, socket).await?;
        let alpn = Alpn::from_protocol(stream.get_ref().1.alpn_protocol());
        if alpn != self.alpn {
            return Err(format!(
                "the upstream agreed {alpn:?} on a new connection, where the tunnel speaks {:?}",
                self.alpn
            ));
        }
        let sender = open::http1(stream)
            .await
            .map_err(|e| format!("upstream HTTP handshake failed: {e}"))?;
        self.epoch = epoch;
        Ok(sender)
    }
}
