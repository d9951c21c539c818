//! The HTTP/2 rows of the TLS benchmark: an h2 origin (1 KiB GETs, and a gRPC unary echo:
//! `POST` with `content-type: application/grpc`, one 5-byte length-prefixed message each way,
//! trailers `grpc-status: 0`) and an h2 client that reaches it directly or through a proxy's
//! CONNECT, keeping its connection alive.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::{HeaderMap, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsConnector;

use super::{KeepAlive, PLACEHOLDER, cpu_us, pct};

/// The gRPC message each call sends (and gets back): a 5-byte prefix (not compressed, length)
/// and 100 bytes.
fn grpc_message() -> Bytes {
    let payload = [b'g'; 100];
    let mut m = BytesMut::with_capacity(5 + payload.len());
    m.extend_from_slice(&[0]);
    m.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    m.extend_from_slice(&payload);
    m.freeze()
}

/// A response body: its data, then its trailers.
struct WithTrailers {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl hyper::body::Body for WithTrailers {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(d) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }
}

async fn serve(req: Request<Incoming>) -> Result<Response<WithTrailers>, Infallible> {
    let grpc = req
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if grpc {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        let mut resp = Response::new(WithTrailers {
            data: Some(body),
            trailers: Some(trailers),
        });
        resp.headers_mut()
            .insert("content-type", "application/grpc".parse().unwrap());
        return Ok(resp);
    }
    Ok(Response::new(WithTrailers {
        data: Some(Bytes::from(vec![b'x'; 1024])),
        trailers: None,
    }))
}

/// The h2 origin (ALPN `h2` only), with the same certificate as the HTTP/1.1 one.
pub async fn start_origin(dir: &Path) -> SocketAddr {
    let acceptor = super::origin_acceptor(dir, b"h2");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), hyper::service::service_fn(serve))
                    .await;
            });
        }
    });
    addr
}

/// A client configuration offering only `h2`.
pub fn connector(ca: &Path) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    TlsConnector::from(Arc::new(config))
}

type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

async fn connect(
    proxy: Option<SocketAddr>,
    connector: &TlsConnector,
    origin: SocketAddr,
) -> Sender {
    let mut tcp = TcpStream::connect(proxy.unwrap_or(origin)).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    if proxy.is_some() {
        tcp.write_all(format!("CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            tcp.read_exact(&mut b).await.unwrap();
            head.push(b[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&head)
        );
    }
    let tls = connector
        .connect(ServerName::IpAddress(origin.ip().into()), tcp)
        .await
        .unwrap();
    assert_eq!(
        tls.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "h2 not agreed"
    );
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

/// One request: a 1 KiB GET, or a gRPC unary call (checked: the echoed message and
/// `grpc-status: 0`).
async fn one(s: &mut Sender, origin: SocketAddr, grpc: bool) {
    let builder = Request::builder()
        .uri(format!(
            "https://{origin}/{}",
            if grpc { "bench.Echo/Say" } else { "1k" }
        ))
        .header("authorization", format!("Bearer {PLACEHOLDER}"));
    let req = if grpc {
        builder
            .method("POST")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(grpc_message()))
    } else {
        builder.method("GET").body(Full::new(Bytes::new()))
    }
    .unwrap();
    s.ready().await.unwrap();
    let resp = s.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap();
    if grpc {
        let status = body
            .trailers()
            .and_then(|t| t.get("grpc-status"))
            .map(|v| v.as_bytes().to_vec());
        assert_eq!(status.as_deref(), Some(&b"0"[..]), "grpc-status");
        assert_eq!(body.to_bytes(), grpc_message());
    } else {
        assert_eq!(body.to_bytes().len(), 1024);
    }
}

/// `conc` kept-alive h2 connections, one request at a time on each, for `dur`.
pub async fn keep_alive(
    proxy: Option<SocketAddr>,
    connector: &TlsConnector,
    pid: Option<u32>,
    origin: SocketAddr,
    conc: usize,
    dur: Duration,
    grpc: bool,
) -> KeepAlive {
    let mut tasks = Vec::new();
    let start = Instant::now() + Duration::from_millis(300);
    for _ in 0..conc {
        let connector = connector.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = connect(proxy, &connector, origin).await;
            one(&mut s, origin, grpc).await;
            tokio::time::sleep_until(start.into()).await;
            let mut lat = Vec::new();
            while start.elapsed() < dur {
                let t = Instant::now();
                one(&mut s, origin, grpc).await;
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            lat
        }));
    }
    tokio::time::sleep_until(start.into()).await;
    let cpu_before = pid.and_then(cpu_us);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let cpu_after = pid.and_then(cpu_us);
    all.sort_by(f64::total_cmp);
    KeepAlive {
        rps: all.len() as f64 / dur.as_secs_f64(),
        p50: pct(&all, 0.5),
        p99: pct(&all, 0.99),
        cpu: cpu_before
            .zip(cpu_after)
            .map(|(b, a)| (a - b) / all.len() as f64),
    }
}
