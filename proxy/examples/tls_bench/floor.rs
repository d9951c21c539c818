//! The floor: the least that any proxy terminating TLS on this stack (tokio, rustls, loopback
//! TCP, this machine) does for a request, so that a per-request target can be read against
//! what is possible at all. `tls_bench floor DIR ADDR` listens on `ADDR`, answers a `CONNECT`
//! head with `200`, terminates the client's TLS with a leaf made by `make-certs` (signed by
//! the proxies' CA, as sluice's cached leaf is), opens TLS to the origin named in the head
//! (verified against the origin CA) and copies plaintext both ways. No HTTP parsing, no
//! caller identity, no policy, no credential, no scrub, no audit: none of what sluice is for.
//! Measured as a comparison proxy (`BENCH_COMPARE=floor=ADDR=proxy-ca.pem=PID`), it is the
//! ceiling of the ratio to direct and the floor of the CPU per request.

use std::path::Path;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

/// Runs the relay until killed.
pub(crate) fn run(dir: &Path, addr: &str) {
    let acceptor = crate::acceptor(dir, "floor", b"http/1.1");
    let upstream = crate::connector(&dir.join("origin-ca.pem"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind(addr).await.unwrap();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let _ = relay(tcp, acceptor, upstream).await;
            });
        }
    });
}

async fn relay(
    mut client: TcpStream,
    acceptor: TlsAcceptor,
    upstream: tokio_rustls::TlsConnector,
) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 4096 {
        client.read_exact(&mut byte).await?;
        head.push(byte[0]);
    }
    let target = String::from_utf8_lossy(&head)
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let origin: std::net::SocketAddr = target
        .parse()
        .map_err(|_| std::io::Error::other("CONNECT target is not ip:port"))?;
    client
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await?;
    let mut client = acceptor.accept(client).await?;
    let tcp = TcpStream::connect(origin).await?;
    tcp.set_nodelay(true)?;
    let mut server = upstream
        .connect(ServerName::IpAddress(origin.ip().into()), tcp)
        .await?;
    tokio::io::copy_bidirectional(&mut client, &mut server).await?;
    Ok(())
}
