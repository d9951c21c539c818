//! Making an upstream connection of an inspected tunnel or a forwarded request: the
//! verified TLS connection (the server name is the destination's host, the ALPN offer the
//! client's), and the HTTP/1.1 client over a connection, its connection task spawned.

use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::http::body::UpBody;
use crate::pipeline::authority::Authority;
use crate::pipeline::state::shared::{Shared, TlsState};
use crate::tls::upstream::Offer;

/// A verified TLS connection to `dst` over `socket`, offering `offer`.
pub(crate) async fn tls(
    shared: &Shared,
    tls: &TlsState,
    dst: &Authority,
    offer: Offer,
    socket: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let host = dst.host();
    // The upstream is verified against its real name (SNI = the CONNECT host).
    let Ok(server_name) = ServerName::try_from(host.to_string()) else {
        return Err(format!("`{host}` is not a valid TLS server name"));
    };
    let connector = TlsConnector::from(tls.upstream.config(offer));
    match tokio::time::timeout(
        shared.limits.connect_timeout,
        connector.connect(server_name, socket),
    )
    .await
    {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("upstream TLS to {dst} failed: {e}")),
        Err(_) => Err(format!("upstream TLS to {dst} timed out")),
    }
}

/// An HTTP/1.1 client over `io`; its connection runs in its own task (upgrades allowed)
/// until the client is dropped or the connection ends.
pub(crate) async fn http1<T>(io: T) -> Result<SendRequest<UpBody>, hyper::Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    Ok(sender)
}
