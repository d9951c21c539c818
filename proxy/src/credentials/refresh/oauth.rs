//! The OAuth 2.0 token request (RFC 6749 §4.4 client credentials, §6 refresh token) sluice
//! makes itself: a form POST over TLS to `token_url`, verified with sluice's upstream trust
//! (webpki roots, the system bundle, `--upstream-ca`), client authentication in the form
//! (`client_secret_post`), the JSON answer read (at most 64 KiB) for `access_token`,
//! `expires_in` and a rotated `refresh_token`. An error names the endpoint and the server's
//! `error` code, never a value it sent or received.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use zeroize::Zeroizing;

use super::{Output, Refresh, Strategy};

/// How long one token request may take, connection to answer.
pub(super) const TIMEOUT: Duration = Duration::from_secs(15);
/// The largest token response read.
const MAX_RESPONSE: usize = 64 * 1024;

/// Why a token could not be obtained. Holds no secret.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("token_url `{0}` is not an https:// URL with a host")]
    Url(String),
    #[error("material `{0}` is not set")]
    Material(String),
    #[error("material `{0}` is not usable: {1}")]
    BadMaterial(String, &'static str),
    #[error("{url}: {reason}")]
    Transport { url: String, reason: String },
    #[error("{url} answered {status}{}", .error.as_ref().map(|e| format!(" ({e})")).unwrap_or_default())]
    Refused {
        url: String,
        status: u16,
        error: Option<String>,
    },
    #[error("{url}: the answer has no usable access_token")]
    Malformed { url: String },
}

/// A granted token.
#[derive(Debug)]
pub struct Granted {
    pub access_token: Zeroizing<String>,
    pub expires_in: Option<Duration>,
    pub refresh_token: Option<Zeroizing<String>>,
    /// Values minted with the token (`additional_outputs`: an AssumeRole's secret key and
    /// session token).
    pub outputs: Vec<(Output, Zeroizing<String>)>,
}

/// The token client: TLS verified with sluice's upstream trust.
#[derive(Clone, Debug)]
pub struct Client {
    tls: Arc<ClientConfig>,
}

impl Client {
    pub fn new(tls: Arc<ClientConfig>) -> Client {
        Client { tls }
    }

    /// Asks `refresh.token_url` for a token with `material`.
    pub async fn request(
        &self,
        refresh: &Refresh,
        material: &HashMap<String, Zeroizing<String>>,
    ) -> Result<Granted, TokenError> {
        let url = refresh.token_url.clone();
        let exchange = async { self.post(&url, form(refresh, material)?).await };
        match tokio::time::timeout(TIMEOUT, exchange).await {
            Ok(r) => r,
            Err(_) => Err(TokenError::Transport {
                url,
                reason: format!("no answer within {} s", TIMEOUT.as_secs()),
            }),
        }
    }

    /// POSTs `form` to `url` over verified TLS with `headers` besides `Host`, `Content-Type`
    /// and `Accept`; the status and the answer (at most 64 KiB).
    pub(super) async fn send_form(
        &self,
        url: &str,
        headers: &[(String, String)],
        form: Zeroizing<String>,
    ) -> Result<(u16, Bytes), TokenError> {
        self.send(url, headers, form, false).await
    }

    /// [`Client::send_form`] without extra headers, to an `https://` URL or, when the profile
    /// loader admitted it (a token grant's loopback or in-cluster endpoint), an `http://` one.
    pub(crate) async fn send_form_any(
        &self,
        url: &str,
        form: Zeroizing<String>,
    ) -> Result<(u16, Bytes), TokenError> {
        match tokio::time::timeout(TIMEOUT, self.send(url, &[], form, true)).await {
            Ok(r) => r,
            Err(_) => Err(TokenError::Transport {
                url: url.to_string(),
                reason: format!("no answer within {} s", TIMEOUT.as_secs()),
            }),
        }
    }

    async fn send(
        &self,
        url: &str,
        headers: &[(String, String)],
        form: Zeroizing<String>,
        plain_ok: bool,
    ) -> Result<(u16, Bytes), TokenError> {
        let uri: http::Uri = url.parse().map_err(|_| TokenError::Url(url.to_string()))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") if plain_ok => false,
            _ => return Err(TokenError::Url(url.to_string())),
        };
        let Some(host) = uri.host() else {
            return Err(TokenError::Url(url.to_string()));
        };
        let host = sluice_addr::unbracketed(host).to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let transport = |reason: String| TokenError::Transport {
            url: url.to_string(),
            reason,
        };
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| transport(format!("connect: {e}")))?;
        let authority = uri.authority().map_or(host.clone(), ToString::to_string);
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut request = http::Request::post(path)
            .header(http::header::HOST, authority)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json");
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request = request
            .body(Full::new(Bytes::from(form.as_bytes().to_vec())))
            .map_err(|e| transport(e.to_string()))?;
        if !tls {
            return exchange(tcp, request, url).await;
        }
        let name =
            ServerName::try_from(host.clone()).map_err(|_| TokenError::Url(url.to_string()))?;
        let stream = tokio_rustls::TlsConnector::from(Arc::clone(&self.tls))
            .connect(name, tcp)
            .await
            .map_err(|e| transport(format!("TLS: {e}")))?;
        exchange(stream, request, url).await
    }

    async fn post(&self, url: &str, form: Zeroizing<String>) -> Result<Granted, TokenError> {
        let (status, body) = self.send_form(url, &[], form).await?;
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if status != 200 {
            // Only the error code, and only if it is a plain code: nothing else the server
            // wrote is repeated.
            let error = json["error"]
                .as_str()
                .filter(|e| e.len() <= 64 && e.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
                .map(ToString::to_string);
            return Err(TokenError::Refused {
                url: url.to_string(),
                status,
                error,
            });
        }
        let access_token = json["access_token"]
            .as_str()
            .filter(|t| !t.is_empty() && !t.bytes().any(|b| b.is_ascii_control()))
            .map(|t| Zeroizing::new(t.to_string()))
            .ok_or_else(|| TokenError::Malformed {
                url: url.to_string(),
            })?;
        let expires_in = json["expires_in"]
            .as_u64()
            .or_else(|| json["expires_in"].as_str().and_then(|s| s.parse().ok()))
            .map(Duration::from_secs);
        let refresh_token = json["refresh_token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(|t| Zeroizing::new(t.to_string()));
        Ok(Granted {
            access_token,
            expires_in,
            refresh_token,
            outputs: Vec::new(),
        })
    }
}

/// One HTTP/1.1 request on `io`: the status and the answer (at most 64 KiB).
async fn exchange<T>(
    io: T,
    request: http::Request<Full<Bytes>>,
    url: &str,
) -> Result<(u16, Bytes), TokenError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let transport = |reason: String| TokenError::Transport {
        url: url.to_string(),
        reason,
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| transport(format!("HTTP: {e}")))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| transport(format!("HTTP: {e}")))?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MAX_RESPONSE)
        .collect()
        .await
        .map_err(|e| transport(format!("reading the answer: {e}")))?
        .to_bytes();
    Ok((status, body))
}

/// The form of the grant: `grant_type`, the strategy's material, `scope`.
fn form(
    refresh: &Refresh,
    material: &HashMap<String, Zeroizing<String>>,
) -> Result<Zeroizing<String>, TokenError> {
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    let get = |name: &str| {
        material
            .get(name)
            .map(|v| v.as_str())
            .ok_or_else(|| TokenError::Material(name.to_string()))
    };
    let assertion;
    match refresh.strategy {
        Strategy::RefreshToken => {
            pairs.push(("grant_type", "refresh_token"));
            pairs.push(("refresh_token", get("refresh_token")?));
        }
        Strategy::ClientCredentials => pairs.push(("grant_type", "client_credentials")),
        // Neither asks an OAuth endpoint (`refresh::refresh_once` sends STS its own;
        // `external` mints nothing).
        Strategy::AwsStsAssumeRole | Strategy::External => {
            return Err(TokenError::Url(refresh.token_url.clone()));
        }
        Strategy::ServiceAccountJwt => {
            // The scopes go in the assertion, not the form.
            assertion = super::jwt::assertion(refresh, material).map_err(|e| match e {
                super::jwt::JwtError::Missing(name) => TokenError::Material(name.to_string()),
                super::jwt::JwtError::BadKey(why) => {
                    TokenError::BadMaterial("private_key".to_string(), why)
                }
            })?;
            pairs.push(("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"));
            pairs.push(("assertion", assertion.as_str()));
            return Ok(encode_form(&pairs));
        }
    }
    pairs.push(("client_id", get("client_id")?));
    if let Some(secret) = material.get("client_secret") {
        pairs.push(("client_secret", secret.as_str()));
    } else if refresh.strategy == Strategy::ClientCredentials {
        return Err(TokenError::Material("client_secret".to_string()));
    }
    let scope = refresh.scopes.join(" ");
    if !scope.is_empty() {
        pairs.push(("scope", &scope));
    }
    Ok(encode_form(&pairs))
}

/// `k=v&...`, each value encoded.
pub(crate) fn encode_form(pairs: &[(&str, &str)]) -> Zeroizing<String> {
    let mut out = Zeroizing::new(String::new());
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        encode_into(&mut out, v);
    }
    out
}

/// `application/x-www-form-urlencoded`: unreserved bytes kept, the rest `%XX`.
fn encode_into(out: &mut String, value: &str) {
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}
