//! The doctor endpoint: `doctor.sluice.internal`, answered by sluice itself and never sent
//! anywhere. A tool that gets a page from it went through sluice and trusted sluice's CA,
//! which is exactly what `sluice doctor` checks, inside or outside `sluice exec`, whatever
//! the policy allows. It reveals nothing: the pages are fixed.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// The host name sluice answers itself.
pub const HOST: &str = "doctor.sluice.internal";

/// How long a doctor tunnel may last, whatever it does: `sluice doctor`'s probes take well
/// under a second each.
pub const LIFETIME: std::time::Duration = std::time::Duration::from_secs(30);

/// The marker every plain page carries.
pub const OK_TEXT: &str = "sluice doctor: reached through sluice, CA trusted\n";

/// A fixed page per tool: an npm packument, an empty package index page, an empty git ref
/// list, and plain text for the rest.
pub fn page(path: &str) -> (&'static str, String) {
    if path.starts_with("/npm/") {
        (
            "application/json",
            r#"{"name":"doctor-probe","dist-tags":{"latest":"1.0.0"},"versions":{"1.0.0":{"name":"doctor-probe","version":"1.0.0","description":"sluice doctor"}}}"#.to_string(),
        )
    } else if path.starts_with("/pip/") {
        (
            "text/html",
            "<!DOCTYPE html><html><body></body></html>\n".to_string(),
        )
    } else if path.starts_with("/git/") {
        ("text/plain", String::new())
    } else {
        ("text/plain", OK_TEXT.to_string())
    }
}

/// Serves HTTP/1.1 doctor pages on `io` until the client closes.
pub async fn serve<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: I) {
    let service = hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
        let (content_type, body) = page(req.uri().path());
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        if let Ok(v) = http::HeaderValue::from_str(content_type) {
            resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
        }
        Ok::<_, Infallible>(resp)
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .await;
}

/// A CONNECT to the doctor host: `200`, then TLS with a leaf from sluice's CA (or plain
/// HTTP), then the fixed pages.
pub async fn tunnel(
    shared: &crate::pipeline::state::shared::Shared,
    rd: crate::pipeline::client::stream::ClientRead,
    mut wr: crate::pipeline::client::stream::ClientWrite,
    buf: bytes::BytesMut,
) {
    use tokio::io::AsyncWriteExt;
    if wr
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let Ok(mut stream) = rd.reunite(wr) else {
        return;
    };
    // The first byte: already read with the head (a client that did not wait for the `200`),
    // else the next to arrive (kept, and replayed first).
    let mut buf = buf;
    if buf.is_empty() {
        use tokio::io::AsyncReadExt;
        match stream.read_buf(&mut buf).await {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
    let is_tls = buf.first() == Some(&0x16);
    let stream = crate::pipeline::client::counted::Prefixed::new(buf, stream);
    if !is_tls {
        serve(stream).await;
        return;
    }
    let Some(tls) = &shared.tls else { return };
    let Ok(start) =
        tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream).await
    else {
        return;
    };
    let sni = start
        .client_hello()
        .server_name()
        .map(str::to_ascii_lowercase);
    let Ok(config) =
        tls.terminator
            .config_for(sni.as_deref(), HOST, crate::tls::server::Alpn::Http11)
    else {
        return;
    };
    if let Ok(client) = start.into_stream(config).await {
        serve(client).await;
    }
}

/// The full HTTP/1.1 response for a plain `http://doctor.sluice.internal/...` request.
pub fn plain_response(path: &str) -> Vec<u8> {
    let (content_type, body) = page(path);
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
