//! TLS termination for `sluice run`: the CA (the operator's, else an ephemeral one, its
//! certificates written to `--ca-dir`), the leaf cache, the upstream trust roots
//! (`--upstream-ca`), and why setting them up failed (`TlsSetupError`).

use std::sync::Arc;

use super::RunArgs;
use crate::tls::ca::CaError;
use crate::tls::upstream::UpstreamTlsError;

/// Why TLS termination could not be set up, and whether that stops `sluice run`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(super) enum TlsSetupError {
    /// A `--upstream-ca` file is unreadable or holds no certificate: the user asked for trust
    /// that cannot be given, so the proxy does not start (exit 2, a usage error).
    #[error("--upstream-ca: {0}")]
    UpstreamCa(UpstreamTlsError),
    /// The CA's certificates cannot be written to `--ca-dir`: clients were to be pointed at
    /// files that will not exist, so the proxy does not start (exit 2), naming the
    /// directory and the reason.
    #[error(
        "--ca-dir {dir}: cannot write the CA certificate there ({source}); sluice does not start without it"
    )]
    CaDir {
        dir: String,
        #[source]
        source: CaError,
    },
    /// The in-memory CA could not be made: the proxy runs on and refuses inspected endpoints
    /// with 503.
    #[error("{0}")]
    Ca(#[from] CaError),
    /// The terminating server configuration could not be built: as for `Ca`.
    #[error("TLS server configuration: {0}")]
    Terminator(#[from] rustls::Error),
}

impl TlsSetupError {
    /// The exit code when this failure stops `sluice run`; None when the proxy runs on
    /// without TLS termination.
    pub(super) fn exit_code(&self) -> Option<u8> {
        match self {
            TlsSetupError::UpstreamCa(_) | TlsSetupError::CaDir { .. } => Some(2),
            TlsSetupError::Ca(_) | TlsSetupError::Terminator(_) => None,
        }
    }
}

/// The CA (the operator's `operator`, else an ephemeral one; its certificates written to
/// `--ca-dir`), the leaf cache and the upstream trust roots.
#[allow(clippy::type_complexity)] // (state, written files)
pub(super) fn tls_state(
    args: &RunArgs,
    operator: Option<Arc<crate::tls::ca::Ca>>,
) -> Result<
    (
        crate::pipeline::TlsState,
        Option<(std::path::PathBuf, std::path::PathBuf)>,
    ),
    TlsSetupError,
> {
    use crate::tls::{ca::Ca, server::Terminator, upstream::UpstreamTls};
    let upstream = UpstreamTls::new(&args.upstream_cas).map_err(TlsSetupError::UpstreamCa)?;
    let ca = match operator {
        Some(ca) => ca,
        None => Arc::new(Ca::generate()?),
    };
    let mut files = None;
    if let Some(dir) = &args.ca_dir {
        let (ca_file, bundle) = ca.write_files(dir).map_err(|source| TlsSetupError::CaDir {
            dir: dir.display().to_string(),
            source,
        })?;
        eprintln!(
            "sluice: CA certificate in {} (bundle with the system roots: {})",
            ca_file.display(),
            bundle.display()
        );
        files = Some((ca_file, bundle));
    }
    let terminator = Terminator::new(ca)?;
    Ok((
        crate::pipeline::TlsState {
            terminator,
            upstream,
        },
        files,
    ))
}
