//! The SPIFFE Workload API client: one `FetchJWTSVID` call (the published `workload.proto`)
//! over gRPC on the agent's Unix socket, for a JWT-SVID of one audience.
//!
//! gRPC here is a small framing over HTTP/2 (hyper's client, already in the tree) with the
//! two messages encoded by `prost` (also already in the tree): a 5-byte length prefix per
//! message, `content-type: application/grpc`, the `workload.spiffe.io: true` header the API
//! demands, and `grpc-status` read from the trailers (or the headers of a trailers-only
//! answer). `tonic` would add its transport, tower and codegen to a 2-core build for one
//! unary call. The socket is sluice's own (`SPIFFE_ENDPOINT_SOCKET` in its environment,
//! absolute); nothing the sandboxed side sends chooses it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use zeroize::Zeroizing;

use super::GrantError;

/// The environment variable naming the Workload API socket (the SPIFFE convention).
pub const SOCKET_ENV: &str = "SPIFFE_ENDPOINT_SOCKET";
/// How long one fetch may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read.
const MAX_ANSWER: usize = 64 * 1024;

/// `JWTSVIDRequest` (workload.proto).
#[derive(Clone, PartialEq, prost::Message)]
struct JwtSvidRequest {
    #[prost(string, repeated, tag = "1")]
    audience: Vec<String>,
    #[prost(string, tag = "2")]
    spiffe_id: String,
}

/// `JWTSVIDResponse` (workload.proto).
#[derive(Clone, PartialEq, prost::Message)]
struct JwtSvidResponse {
    #[prost(message, repeated, tag = "1")]
    svids: Vec<JwtSvid>,
}

/// `JWTSVID` (workload.proto).
#[derive(Clone, PartialEq, prost::Message)]
struct JwtSvid {
    #[prost(string, tag = "1")]
    spiffe_id: String,
    #[prost(string, tag = "2")]
    svid: String,
}

/// The socket path of a `SPIFFE_ENDPOINT_SOCKET` value: `unix:///path`, `unix:/path` or
/// `/path`; anything else (a relative path, `tcp:`) is refused.
pub fn socket_path(value: &str) -> Option<PathBuf> {
    let path = value
        .strip_prefix("unix://")
        .or_else(|| value.strip_prefix("unix:"))
        .unwrap_or(value);
    let path = Path::new(path);
    (path.is_absolute()).then(|| path.to_path_buf())
}

/// A JWT-SVID for `audience` from the Workload API at `socket`.
pub async fn fetch_jwt_svid(
    socket: &Path,
    audience: &str,
) -> Result<Zeroizing<String>, GrantError> {
    match tokio::time::timeout(TIMEOUT, fetch(socket, audience)).await {
        Ok(r) => r,
        Err(_) => Err(GrantError::Workload(format!(
            "no answer within {} s",
            TIMEOUT.as_secs()
        ))),
    }
}

async fn fetch(socket: &Path, audience: &str) -> Result<Zeroizing<String>, GrantError> {
    let err = |what: &str, e: &dyn std::fmt::Display| GrantError::Workload(format!("{what}: {e}"));
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| err(&format!("connect {}", socket.display()), &e))?;
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| err("HTTP/2", &e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let message = prost::Message::encode_to_vec(&JwtSvidRequest {
        audience: vec![audience.to_string()],
        spiffe_id: String::new(),
    });
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.put_u8(0);
    frame.put_u32(u32::try_from(message.len()).map_err(|e| err("request", &e))?);
    frame.put_slice(&message);
    let request = http::Request::post("http://localhost/SpiffeWorkloadAPI/FetchJWTSVID")
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .header("workload.spiffe.io", "true")
        .body(Full::new(frame.freeze()))
        .map_err(|e| err("request", &e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| err("HTTP/2", &e))?;
    let (head, body) = response.into_parts();
    let collected = Limited::new(body, MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| err("reading the answer", &e))?;
    let status = collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| head.headers.get("grpc-status"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("missing")
        .to_string();
    if head.status != http::StatusCode::OK || status != "0" {
        return Err(GrantError::Workload(format!(
            "answered HTTP {} with grpc-status {status}",
            head.status.as_u16()
        )));
    }
    let body: Bytes = collected.to_bytes();
    let malformed = || GrantError::Workload("malformed answer".to_string());
    if body.len() < 5 || body[0] != 0 {
        return Err(malformed());
    }
    let len = usize::try_from(u32::from_be_bytes([body[1], body[2], body[3], body[4]]))
        .map_err(|_| malformed())?;
    let payload = body.get(5..5 + len).ok_or_else(malformed)?;
    let answer: JwtSvidResponse = prost::Message::decode(payload).map_err(|_| malformed())?;
    answer
        .svids
        .into_iter()
        .map(|s| Zeroizing::new(s.svid))
        .find(|s| !s.is_empty())
        .ok_or_else(|| GrantError::Workload("no JWT-SVID in the answer".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_absolute_unix_socket_is_taken() {
        assert_eq!(
            socket_path("unix:///run/spire/agent.sock"),
            Some(PathBuf::from("/run/spire/agent.sock"))
        );
        assert_eq!(
            socket_path("/run/a.sock"),
            Some(PathBuf::from("/run/a.sock"))
        );
        for bad in ["tcp:127.0.0.1:8081", "unix:relative.sock", "agent.sock", ""] {
            assert_eq!(socket_path(bad), None, "{bad}");
        }
    }
}
