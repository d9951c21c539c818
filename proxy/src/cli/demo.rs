//! `sluice demo`: an offline tour. It starts a local HTTPS origin with its own certificate,
//! sluice itself with an embedded example policy and a provider whose secret is made up on
//! the spot, and then sends three requests from a separate client process (identity comes
//! from the socket, so the client cannot be sluice itself):
//!
//! 1. one carrying only the placeholder, which the origin receives as the real secret;
//! 2. one the L7 rules refuse;
//! 3. one from a binary the policy does not list.
//!
//! and prints what each side saw and the audit lines. Needs no network and no input files
//! (it writes a temporary directory and removes it).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::audit::ocsf::Context;
use crate::audit::{AuditSink, LogFormat};
use crate::listen;
use crate::pipeline::{Limits, Parts, Shared, TlsState};
use crate::policy::{self, Compat, Source};
use crate::tls::ca::Ca;
use crate::tls::server::Terminator;
use crate::tls::upstream::UpstreamTls;

/// A writer into shared memory (the demo prints audit lines after each request).
#[derive(Clone, Debug, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn take(&self) -> String {
        self.0
            .lock()
            .map(|mut v| String::from_utf8_lossy(&std::mem::take(&mut *v)).into_owned())
            .unwrap_or_default()
    }
}

fn made_up_secret() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "demo-{:016x}",
        (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32)
    )
}

/// The origin: HTTPS with its own CA; records the Authorization header it receives.
async fn start_origin(
    dir: &Path,
) -> Result<(SocketAddr, PathBuf, Arc<Mutex<Vec<String>>>), String> {
    let ca = Ca::generate().map_err(|e| e.to_string())?;
    let leaf = ca.mint("127.0.0.1").map_err(|e| e.to_string())?;
    let ca_file = dir.join("origin-ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).map_err(|e| e.to_string())?;
    let resolver = Arc::new(FixedCert(leaf));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = Arc::clone(&seen2);
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let seen = Arc::clone(&seen);
                        async move {
                            let auth = req
                                .headers()
                                .get(http::header::AUTHORIZATION)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("-")
                                .to_string();
                            if let Ok(mut s) = seen.lock() {
                                s.push(format!(
                                    "{} {} Authorization: {auth}",
                                    req.method(),
                                    req.uri()
                                ));
                            }
                            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                Bytes::from_static(b"hello from the demo origin\n"),
                            )))
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Ok((addr, ca_file, seen))
}

#[derive(Debug)]
struct FixedCert(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for FixedCert {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }
}

const DEMO_CLIENT: &str = "__demo-client";

/// The client side, run as a separate process: CONNECT through sluice, TLS trusting sluice's
/// CA, one HTTP/1.1 request; prints the status and body.
pub fn client(args: &[String]) -> ExitCode {
    let [proxy, port, method, path, auth, ca_file] = args else {
        eprintln!("usage: sluice __demo-client PROXY PORT METHOD PATH AUTH CA");
        return ExitCode::from(2);
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::from(1);
    };
    match runtime.block_on(client_request(proxy, port, method, path, auth, ca_file)) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn client_request(
    proxy: &str,
    port: &str,
    method: &str,
    path: &str,
    auth: &str,
    ca_file: &str,
) -> Result<String, String> {
    let mut tcp = TcpStream::connect(proxy).await.map_err(|e| e.to_string())?;
    tcp.write_all(
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tcp.read(&mut byte).await.map_err(|e| e.to_string())? == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let head_text = String::from_utf8_lossy(&head).into_owned();
    if !head_text.starts_with("HTTP/1.1 200") {
        let mut rest = String::new();
        let _ = tcp.read_to_string(&mut rest).await;
        return Ok(format!(
            "{} {}",
            head_text.lines().next().unwrap_or(""),
            rest.trim()
        ));
    }
    let mut roots = rustls::RootCertStore::empty();
    use rustls_pki_types::pem::PemObject;
    for c in rustls_pki_types::CertificateDer::pem_file_iter(ca_file)
        .map_err(|e| e.to_string())?
        .flatten()
    {
        let _ = roots.add(c);
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1".to_string())
        .map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, format!("127.0.0.1:{port}"))
        .header(http::header::AUTHORIZATION, auth)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(format!(
        "{status} {}",
        String::from_utf8_lossy(&body).trim()
    ))
}

pub fn demo() -> ExitCode {
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::from(1);
    };
    match runtime.block_on(run_demo()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice demo: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run_demo() -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("sluice-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let result = tour(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn tour(dir: &Path) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let me = std::fs::canonicalize(&me).unwrap_or(me);
    // Two names for this same program: the one the policy lists, and one it does not. (The
    // demo itself runs as neither, so no ancestor grant muddles the third request.)
    let link = |name: &str| -> Result<PathBuf, String> {
        let p = dir.join(name);
        if std::fs::hard_link(&me, &p).is_err() {
            std::fs::copy(&me, &p).map_err(|e| format!("copy the client: {e}"))?;
        }
        Ok(p)
    };
    let listed = link("demo-client")?;
    let stranger = link("unlisted-client")?;
    let (origin, origin_ca, seen) = start_origin(dir).await?;
    let secret = made_up_secret();
    let policy_text = format!(
        "version: 1\nnetwork_policies:\n  demo_api:\n    name: demo-api\n    endpoints:\n      - host: 127.0.0.1\n        port: {port}\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {{method: GET, path: /v1/**}}\n    binaries:\n      - path: {me}\n",
        port = origin.port(),
        me = listed.display()
    );
    let provider_text = format!(
        "id: demo-api\ncredentials:\n  - name: api-key\n    env_vars: [DEMO_API_KEY]\nendpoints:\n  - host: 127.0.0.1\n    port: {}\n    path: /v1/**\n",
        origin.port()
    );
    let loaded = policy::load(
        &[Source {
            name: "demo-policy.yaml".into(),
            text: policy_text.clone(),
        }],
        Compat::Strict,
    )
    .map_err(|e| format!("{:?}", e.diagnostics))?;
    let providers_file = dir.join("demo-provider.yaml");
    std::fs::write(&providers_file, &provider_text).map_err(|e| e.to_string())?;
    let secret_for_env = secret.clone();
    let creds = crate::credentials::load(
        &[providers_file.display().to_string()],
        move |k| (k == "DEMO_API_KEY").then(|| secret_for_env.clone()),
        None,
    )
    .map_err(|e| e.lines().join("; "))?;

    let ca = Arc::new(Ca::generate().map_err(|e| e.to_string())?);
    let (sluice_ca, _) = ca
        .write_files(&dir.join("sluice-ca"))
        .map_err(|e| e.to_string())?;
    let tls = TlsState {
        terminator: Terminator::new(Arc::clone(&ca)).map_err(|e| e.to_string())?,
        upstream: UpstreamTls::new(&[&origin_ca]).map_err(|e| e.to_string())?,
    };
    let captured = Captured::default();
    let audit = Arc::new(AuditSink::new(
        Box::new(std::io::sink()),
        Box::new(captured.clone()),
        LogFormat::Shorthand,
        Context {
            instance: "demo".into(),
            hostname: "localhost".into(),
        },
        "memory",
    ));
    audit.set_redactor(Arc::new(creds.bindings.redactor()));
    let shared = Arc::new(Shared::new(Parts {
        policy: loaded.policy,
        resolver: sluice_resolver::Resolver::overrides_only(sluice_resolver::Overrides::new()),
        identity: Arc::new(sluice_identity::IdentityResolver::new(
            sluice_identity::IdentityConfig::default(),
        )),
        audit: Arc::clone(&audit),
        limits: Limits::default(),
        allow_loopback: true,
        compat: Compat::Strict,
        tls: Some(tls),
        credentials: Arc::new(creds.bindings),
        tenants: crate::tenants::Table::default(),
    }));
    let listener =
        listen::bind(SocketAddr::from(([127, 0, 0, 1], 0))).map_err(|e| e.to_string())?;
    let proxy = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(listen::accept_loop(listener, Arc::clone(&shared)));

    println!(
        "sluice demo: a local HTTPS origin, sluice, and three requests. Nothing leaves this machine.\n"
    );
    println!(
        "origin  https://127.0.0.1:{} (its own CA, trusted by sluice only)",
        origin.port()
    );
    println!("sluice  {proxy} (its ephemeral CA, trusted by the client only)");
    println!("secret  DEMO_API_KEY={secret}  (made up just now; only sluice holds it)");
    println!("\nthe policy:\n{}", indent(&policy_text));
    println!(
        "the provider profile (binds the secret to the origin's /v1/**):\n{}",
        indent(&provider_text)
    );
    let placeholder = "Bearer openshell:resolve:env:DEMO_API_KEY";
    let steps: [(&str, PathBuf, &str, &str); 3] = [
        (
            "1. the client sends only the placeholder",
            listed.clone(),
            "GET",
            "/v1/hello",
        ),
        (
            "2. a request the L7 rules refuse",
            listed.clone(),
            "DELETE",
            "/v1/hello",
        ),
        (
            "3. a binary the policy does not list",
            stranger.clone(),
            "GET",
            "/v1/hello",
        ),
    ];
    for (title, exe, method, path) in steps {
        println!("{title}: {method} {path}  (Authorization: {placeholder})");
        println!("   client     {}", exe.display());
        let out = Command::new(&exe)
            .args([
                DEMO_CLIENT,
                &proxy.to_string(),
                &origin.port().to_string(),
                method,
                path,
                placeholder,
            ])
            .arg(&sluice_ca)
            .output()
            .map_err(|e| format!("run the client: {e}"))?;
        println!(
            "   client got {}",
            String::from_utf8_lossy(&out.stdout).trim()
        );
        let received: Vec<String> = seen
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default();
        if received.is_empty() {
            println!("   origin got nothing");
        }
        for r in received {
            println!("   origin got {r}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        for line in captured.take().lines() {
            println!("   audit      {line}");
        }
        println!();
    }
    println!(
        "The client only ever held the placeholder; sluice swapped in the secret for the origin it is bound to,"
    );
    println!(
        "refused what the rules do not allow, and refused the program the policy does not list."
    );
    Ok(())
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}

pub fn is_client_invocation(args: &[String]) -> bool {
    args.get(1).is_some_and(|a| a == DEMO_CLIENT)
}
