//! `sluice run`: load the policy, start the listeners, serve until a signal.
//!
//! Owns the translation of `run` flags into a running proxy (the high-level config is the
//! `pipeline::Shared` it builds), start-up reporting (what is listening, loud warnings for
//! test-only switches), the policy-load and lifecycle audit events, reloading on SIGHUP and file
//! changes (`reload.rs`), and shutdown on SIGINT or SIGTERM: a drain (`/readyz` 503, the
//! listeners stop accepting, the work in flight finishes within `--drain-timeout`, the rest
//! is stopped with a reason its close events carry), then exit 0. Its parts: binding and
//! serving the listeners (`run/listeners.rs`), refreshed credentials at start-up
//! (`run/refresh.rs`), TLS termination (`run/tls.rs`), the drain (`run/shutdown.rs`).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::{Args, ValueEnum};
use sluice_identity::{IdentityConfig, IdentityResolver};
use sluice_resolver::{Overrides, Resolver};

use super::CompatArg;

mod listeners;
mod refresh;
mod shutdown;
mod tls;

use crate::audit::{self, AuditSink, LogFormat};
use crate::http::body::BodyPace;
use crate::pipeline::{Limits, Parts, Shared};
use crate::policy::Diagnostic;
use listeners::{hop_of, warn_about_the_hop};
pub(super) use listeners::{serve_policy_dns, start_policy_dns};
pub(super) use refresh::keep_refreshed;
use shutdown::{Shutdown, drain};
use tls::tls_state;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormatArg {
    /// One human line per event: `NET:OPEN [INFO] ALLOWED exe(pid) -> host:port [policy:.. engine:..]`.
    #[default]
    Shorthand,
    /// The OCSF JSON object of each event.
    Json,
}

/// `--audit-on-failure`: what a full audit spool does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum AuditOnFailureArg {
    /// Refuse new connections and requests (503 audit_unavailable) until records can be
    /// written again.
    #[default]
    Closed,
    /// Serve on; every record that cannot be kept is lost, and counted.
    Open,
}

impl From<AuditOnFailureArg> for audit::OnFailure {
    fn from(a: AuditOnFailureArg) -> Self {
        match a {
            AuditOnFailureArg::Closed => audit::OnFailure::Closed,
            AuditOnFailureArg::Open => audit::OnFailure::Open,
        }
    }
}

/// A count of at least `min`.
fn at_least(min: usize) -> impl Fn(&str) -> Result<usize, String> + Clone {
    move |s| {
        let n: usize = s
            .parse()
            .map_err(|_| format!("`{s}` is not a whole number"))?;
        if n < min {
            return Err(format!("{n} is less than {min}, the least it may be"));
        }
        Ok(n)
    }
}

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// Policy files (merged); none = the embedded deny-all default.
    #[arg(long = "policy", value_name = "FILE")]
    pub policies: Vec<String>,
    /// How to read constructs NVIDIA OpenShell accepts but silently misreads (the README's
    /// table of differences): refuse them (strict), or accept them as OpenShell does, warning.
    #[arg(long, value_enum, default_value_t = CompatArg::Strict)]
    pub compat: CompatArg,
    /// Explicit proxy listener (CONNECT and absolute-form HTTP); repeat for more.
    /// Default: 127.0.0.1:3128 for `run`, an ephemeral loopback port for `exec`.
    /// `localhost:PORT` means 127.0.0.1:PORT.
    #[arg(long = "listen", value_name = "ADDR", value_parser = parse_listen)]
    pub listen: Vec<SocketAddr>,
    /// Where `ca.pem` (sluice's ephemeral CA) and `ca-bundle.pem` (system roots plus the CA)
    /// are written for clients to trust. Certificates only: the key stays in memory.
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<std::path::PathBuf>,
    /// Extra trust roots (PEM) for upstream TLS: private CAs, test origins. Repeatable.
    #[arg(long = "upstream-ca", value_name = "FILE")]
    pub upstream_cas: Vec<std::path::PathBuf>,
    /// Provider profiles (OpenShell providers-v2 shape; one or more YAML documents per file).
    /// Each with endpoints is also a policy entry, `_provider_<id>` (its endpoints and binaries).
    #[arg(long = "providers", value_name = "FILE")]
    pub providers: Vec<String>,
    /// Secret values as KEY=VALUE lines; refused unless mode 0600 or stricter. Otherwise the
    /// values come from sluice's own environment.
    #[arg(long, value_name = "FILE")]
    pub secrets_file: Option<std::path::PathBuf>,
    /// Secret values as one file per key (a Kubernetes Secret volume, a Vault agent's
    /// output), each checked like --secrets-file; re-read when they change.
    #[arg(long, value_name = "DIR")]
    pub secrets_dir: Option<std::path::PathBuf>,
    /// Static DNS answers, like curl --resolve: HOST=IP[,IP...].
    #[arg(long = "resolve", value_name = "HOST=IP")]
    pub resolve: Vec<String>,
    /// Let policies reach loopback addresses (127.0.0.0/8, ::1). For tests only.
    #[arg(long)]
    pub allow_loopback_upstream: bool,
    /// Where OCSF JSON lines go: a file (appended, mode 0600) or `-` for stdout.
    /// Default: `-` for `run`; for `exec`, `$XDG_STATE_HOME/sluice/exec-audit.jsonl` (else
    /// `~/.local/state/sluice/exec-audit.jsonl`), outside what the command may write.
    #[arg(long, value_name = "PATH|-")]
    pub audit_log: Option<String>,
    /// Format of the lines on stderr.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Shorthand)]
    pub log_format: LogFormatArg,
    /// What sluice does when the audit log cannot take records and its spool is full:
    /// `closed` refuses new connections and requests (503 audit_unavailable) until records can
    /// be written again; `open` serves on and counts every record it loses.
    #[arg(long, value_enum, default_value_t = AuditOnFailureArg::Closed)]
    pub audit_on_failure: AuditOnFailureArg,
    /// Audit records kept in memory, in order, while the audit log cannot take them.
    #[arg(long, value_name = "N", default_value_t = audit::sink::spool::DEFAULT_RECORDS,
          value_parser = at_least(audit::sink::spool::MIN_RECORDS))]
    pub audit_spool_max_records: usize,
    /// Bytes of audit records kept in memory while the audit log cannot take them.
    #[arg(long, value_name = "BYTES", default_value_t = audit::sink::spool::DEFAULT_BYTES,
          value_parser = at_least(audit::sink::spool::MIN_BYTES))]
    pub audit_spool_max_bytes: usize,
    /// Also look for callers in the network namespace of this process (repeat).
    #[arg(long = "identity-netns-pid", value_name = "PID")]
    pub identity_netns_pids: Vec<u32>,
    /// Time allowed for a request head (e.g. 10s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub head_timeout: Duration,
    /// Time allowed to connect to an upstream address.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Time allowed for upstream response headers after the request is sent (then 504).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub upstream_timeout: Duration,
    /// A tunnel or stream silent in both directions for this long is closed.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Time a kept-alive client connection may wait for its next request.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub keepalive_timeout: Duration,
    /// Concurrent client connections (more get 503).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub max_connections: usize,
    /// Concurrent connections of one caller (one executable path; more get 429). Default: a
    /// quarter of --max-connections, at least 64 (or all of them when fewer).
    #[arg(long, value_name = "N")]
    pub max_connections_per_caller: Option<usize>,
    /// New connections one caller may open per second (bursts up to N; more get 429).
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub max_new_connections_per_caller_per_sec: u32,
    /// A CONNECT tunnel whose client sends nothing for this long after `200` is closed.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub unused_tunnel_timeout: Duration,
    /// How often sluice checks that an open connection's socket is still held by the process
    /// it identified (a socket handed to another process is closed).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub caller_recheck_interval: Duration,
    /// Largest request head (bigger ones get 431).
    #[arg(long, value_name = "BYTES", default_value_t = 8192)]
    pub max_head_bytes: usize,
    /// Longest a client may leave a request body silent; the whole body may take this plus
    /// one second per --body-min-rate bytes it sent (then 408).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// Slowest average rate, in bytes a second, at which a request body may keep arriving
    /// past --body-timeout (0: only the silence bound).
    #[arg(long, value_name = "BYTES", default_value_t = 256)]
    pub body_min_rate: u64,
    /// Transparent listener for connections the network fence (`sluice netfence`) redirects:
    /// the destination is the one the client dialled, its name the TLS SNI or HTTP Host
    /// (which must stand for that address). Repeat for more (e.g. 127.0.0.1:15001 and
    /// [::1]:15001, where nftables redirects local traffic). Off unless given.
    #[arg(long = "transparent-listen", value_name = "ADDR", value_parser = parse_listen)]
    pub transparent_listen: Vec<SocketAddr>,
    /// Policy DNS (UDP and TCP) for a sandboxed namespace or pod: answers only names some
    /// policy endpoint allows, with addresses that pass the SSRF check; REFUSED otherwise.
    /// Repeat for more (e.g. 127.0.0.1:15053 and [::1]:15053 behind the network fence).
    #[arg(long = "dns-listen", value_name = "ADDR", value_parser = parse_listen)]
    pub dns_listen: Vec<SocketAddr>,
    /// Questions one client address may ask the policy DNS per second, UDP and TCP together
    /// (bursts up to N; more get REFUSED, counted, and audited once per burst).
    #[arg(long, value_name = "N", default_value_t = crate::dns::limit::DEFAULT_RATE)]
    pub max_dns_queries_per_client_per_sec: u32,
    /// How often the policy, provider and secrets files are checked for changes (a changed
    /// file is reloaded, as on SIGHUP).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub watch_interval: Duration,
    /// Serve Prometheus metrics (`/metrics`), `/healthz` and `/readyz` on this address
    /// (`IP:PORT` or `localhost:PORT`). Off unless given.
    #[arg(long, value_name = "ADDR", value_parser = parse_listen)]
    pub metrics_listen: Option<SocketAddr>,
    /// Export every audit event as an OTLP log record and every request as a span to this
    /// OTLP/HTTP base URL (`/v1/logs`, `/v1/traces` appended). Without it, the standard
    /// `OTEL_EXPORTER_OTLP_*ENDPOINT` variables are read; none set: no export.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Serve as a shared gateway: callers are the tenants this YAML file lists, identified by
    /// client address (`sources`) or proxy credentials (`proxy_auth`), each judged by its own
    /// policy files, provider profiles and secrets (named in the file, not by --policy,
    /// --providers or --secrets-file). Reloaded like the policy.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["policies", "providers", "secrets_file", "secrets_dir", "dns_listen"]
    )]
    pub tenants: Option<String>,
    /// The CA that signs the leaves sluice presents, instead of the ephemeral one: a PEM
    /// file whose first certificate is the CA (a root or an intermediate) and the rest its
    /// chain (served with every leaf and by `GET /ca.pem`). Every replica given the same CA
    /// issues leaves that verify under it. Read again on reload (rotation).
    #[arg(long, value_name = "FILE", requires = "ca_key")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// The CA's private key (PKCS#8 PEM): a regular file owned by sluice's user, mode 0600
    /// or stricter, not a symbolic link. Kept in memory only, never written anywhere.
    #[arg(long, value_name = "FILE", requires = "ca_cert")]
    pub ca_key: Option<std::path::PathBuf>,
    /// Peers (a load balancer) that send a PROXY protocol header (v1 or v2) before each
    /// connection's bytes: the client's address it carries is the one tenants, limits,
    /// audit and metrics see. Required from these peers, refused from every other. Repeat
    /// for more. Needs --tenants.
    #[arg(long = "proxy-protocol-from", value_name = "CIDR", value_parser = parse_cidr, requires = "tenants")]
    pub proxy_protocol_from: Vec<ipnet::IpNet>,
    /// The proxy itself over TLS (`curl --proxy https://...`): the same explicit proxy as
    /// --listen, its hop encrypted with --tls-cert and --tls-key. Repeat for more.
    #[arg(long = "tls-listen", value_name = "ADDR", value_parser = parse_listen, requires_all = ["tls_cert", "tls_key"])]
    pub tls_listen: Vec<SocketAddr>,
    /// The certificate chain (PEM) the TLS listener presents.
    #[arg(long, value_name = "FILE", requires = "tls_listen")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The TLS listener's private key (PEM: PKCS#8, SEC1 or PKCS#1), a private file as for
    /// --ca-key.
    #[arg(long, value_name = "FILE", requires = "tls_listen")]
    pub tls_key: Option<std::path::PathBuf>,
    /// CA certificates (PEM) whose client certificates the TLS listener accepts: a tenant's
    /// `client_certs` then name it by subject or SPIFFE ID. A certificate from another CA is
    /// refused in the handshake.
    #[arg(long, value_name = "FILE", requires = "tls_listen")]
    pub client_ca: Option<std::path::PathBuf>,
    /// On SIGTERM: `/readyz` answers 503 at once, the listeners stop accepting, requests and
    /// tunnels in flight finish for up to this long; the rest are then closed (each close
    /// audited with why) and sluice exits 0.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
}

impl RunArgs {
    /// The arguments `sluice doctor` runs its own sluice with: the default policy, CA files
    /// in `ca_dir`, no audit file.
    pub fn for_doctor(ca_dir: std::path::PathBuf) -> RunArgs {
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            run: RunArgs,
        }
        use clap::Parser;
        let dir = ca_dir.display().to_string();
        match Wrap::try_parse_from(["sluice", "--ca-dir", &dir, "--audit-log", "/dev/null"]) {
            Ok(w) => w.run,
            // The flags above are all valid; clap cannot refuse them.
            Err(_) => Wrap::parse_from(["sluice"]).run,
        }
    }
}

/// The default of `--max-connections-per-caller`: a quarter of `--max-connections`, but at
/// least 64 (or all of them, when there are fewer), so a small proxy does not starve its one
/// busy client.
fn default_per_caller(max_connections: usize) -> usize {
    (max_connections / 4).max(max_connections.min(64))
}

/// A listener address: `IP:PORT`, `[IPv6]:PORT`, or `localhost:PORT` (the IPv4 loopback;
/// no name is resolved).
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    match sluice_addr::split_host_port(s) {
        Some((host, Some(port))) if host.eq_ignore_ascii_case("localhost") => {
            // Port 0 asks the kernel for a free port, as it does after an IP.
            let any = (port == "0").then_some(0);
            any.ok_or(())
                .or_else(|()| sluice_addr::parse_port(port))
                .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
                .map_err(|_| format!("invalid port `{port}` in `{s}`"))
        }
        _ => Err(format!(
            "`{s}` is not IP:PORT, [IPv6]:PORT or localhost:PORT"
        )),
    }
}

/// A CIDR block (`10.0.0.0/8`, `fd00::/64`) or one address.
fn parse_cidr(s: &str) -> Result<ipnet::IpNet, String> {
    s.parse::<ipnet::IpNet>()
        .map(|n| n.trunc())
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("`{s}` is not a CIDR block (10.0.0.0/8) or an address"))
}

/// `10s`, `500ms`, `2m`, `1h`, or a number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| (&s[..i], &s[i..]));
    let n: f64 = num.parse().map_err(|_| format!("invalid duration `{s}`"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration unit in `{s}` (use ms, s, m or h)"
            ));
        }
    };
    if !(0.0..=86_400.0 * 365.0).contains(&secs) || secs == 0.0 {
        return Err(format!("duration `{s}` out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn print_diagnostics(diags: &[Diagnostic]) {
    for d in diags {
        eprintln!("{d}");
    }
}

/// Announces a bound listener on stderr (tests and wrappers read the address from it).
pub fn announce(listener: &tokio::net::TcpListener, what: &str) {
    if let Ok(a) = listener.local_addr() {
        eprintln!("sluice: listening on {a} ({what})");
    }
}

/// Threads a serving proxy's runtime may start besides its workers, for work that blocks:
/// identity lookups hand their worker to another thread with `block_in_place`, a reload reads
/// its files, `exec` waits for its command. Few: tokio keeps as many threads as were ever busy
/// at once for as long as a steady trickle of such work keeps them in turn (with its default
/// of 512, a burst of new connections left 70 to 500 threads), each with its stack and, for
/// the first 16, a malloc arena of its own that idle connections' memory then spreads over
/// (1,000 idle intercepted connections: 45-53 KiB each with 512, about 27 KiB with 4). When
/// all are busy, a lookup keeps its worker (tokio takes the worker back when no thread took
/// it over) while the other workers go on.
const BLOCKING_THREADS: usize = 4;

/// The runtime a serving proxy (`sluice run`, `sluice exec`) runs on.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
}

pub fn run(args: RunArgs) -> ExitCode {
    let runtime = match runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(serve(args))
}

/// A proxy ready to serve: shared state built, policy loaded and audited, TLS set up.
#[derive(Debug)]
pub struct Prepared {
    pub shared: Arc<Shared>,
    pub audit: Arc<AuditSink>,
    /// `ca.pem` and `ca-bundle.pem`, when written (`--ca-dir`).
    pub ca_files: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The files the configuration was loaded from (what a reload reads again).
    pub sources: super::config::Sources,
    /// Every secret value loaded (what the audit sink redacts).
    pub redactor: crate::credentials::ScrubSet,
    /// The configuration files as the first load found them (where the watcher starts).
    pub first: super::reload::Seen,
}

/// Everything of `run` before the listeners: audit sink, policy, resolver, identity, TLS.
/// On failure the message is printed and the exit code returned.
pub async fn prepare(args: &RunArgs) -> Result<Prepared, ExitCode> {
    let format = match args.log_format {
        LogFormatArg::Shorthand => LogFormat::Shorthand,
        LogFormatArg::Json => LogFormat::Json,
    };
    let audit_log = args.audit_log.clone().unwrap_or_else(|| "-".to_string());
    let spool = audit::sink::SpoolConfig {
        limits: audit::sink::Limits {
            records: args.audit_spool_max_records,
            bytes: args.audit_spool_max_bytes,
        },
        on_failure: args.audit_on_failure.into(),
    };
    let audit = match AuditSink::open_queued(&audit_log, format, spool) {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("sluice: cannot open the audit log {audit_log}: {e}");
            return Err(ExitCode::from(1));
        }
    };
    let identity = Arc::new(IdentityResolver::new(IdentityConfig {
        namespace_pids: args.identity_netns_pids.clone(),
        ..IdentityConfig::default()
    }));
    // Installed before the first event, so that every audit line is counted.
    if let Some(addr) = args.metrics_listen {
        start_metrics(addr, args.max_connections, &audit, &identity).await?;
    }
    start_otlp(args.otlp_endpoint.as_deref(), &audit)?;
    let mut sources = sources_of(args);
    // Refreshed credentials' first tokens, before the first load needs them.
    sources.refresh = refresh::start_refresh(args, &sources).await?;
    sources.tenant_refresh = refresh::start_tenant_refresh(args, &sources).await?;
    let first = super::reload::seen(&sources);
    let result = super::config::load(&sources);
    // The tenants' refreshers the load read are the ones in force.
    if let Some(r) = &sources.tenant_refresh {
        r.commit();
    }
    audit.emit(&super::config::change_event(&sources, &result));
    let config = match result {
        Ok(c) => c,
        Err(e) => {
            for line in e.lines() {
                eprintln!("{line}");
            }
            eprintln!("sluice: {e}");
            return Err(ExitCode::from(1));
        }
    };
    crate::metrics::policy_loaded(config.policies());
    print_diagnostics(&config.policy_warnings);
    for w in &config.credential_warnings {
        eprintln!("{w}");
    }
    // No known secret value reaches the audit log or stderr, whichever field holds it.
    let redactor = config.redactor;
    audit.set_redactor(Arc::new(redactor.clone()));
    let tenants = config.tenants;
    if tenants.is_gateway() {
        let names: Vec<&str> = tenants.tenants().iter().map(|t| &*t.name).collect();
        eprintln!(
            "sluice: gateway for {} tenant(s): {}",
            names.len(),
            names.join(", ")
        );
    }
    let credentials = Arc::new(config.bindings);
    let loaded_policy = config.policy;
    let overrides = match Overrides::from_args(&args.resolve) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("sluice: --resolve: {e}");
            return Err(ExitCode::from(2));
        }
    };
    let resolver = match Resolver::from_system(overrides) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice: cannot set up DNS resolution: {e}");
            return Err(ExitCode::from(1));
        }
    };
    let limits = Limits {
        max_head_bytes: args.max_head_bytes,
        head_timeout: args.head_timeout,
        keepalive_timeout: args.keepalive_timeout,
        connect_timeout: args.connect_timeout,
        upstream_timeout: args.upstream_timeout,
        idle_timeout: args.idle_timeout,
        max_connections: args.max_connections.max(1),
        body_pace: BodyPace {
            idle: args.body_timeout,
            min_rate: args.body_min_rate,
        },
        max_connections_per_caller: args
            .max_connections_per_caller
            .unwrap_or_else(|| default_per_caller(args.max_connections))
            .max(1),
        max_new_connections_per_caller_per_sec: args.max_new_connections_per_caller_per_sec.max(1),
        unused_tunnel_timeout: args.unused_tunnel_timeout,
        caller_recheck_interval: args.caller_recheck_interval,
    };
    if args.allow_loopback_upstream {
        eprintln!(
            "sluice: WARNING: --allow-loopback-upstream is on: policies may reach loopback addresses (127.0.0.0/8, ::1). This is for tests; never use it in production."
        );
    }
    let operator_ca = config.ca.clone();
    let (tls, ca_files) = match tls_state(args, operator_ca) {
        Ok((t, files)) => (Some(t), files),
        Err(e) => match e.exit_code() {
            Some(code) => {
                eprintln!("sluice: {e}");
                return Err(ExitCode::from(code));
            }
            None => {
                eprintln!(
                    "sluice: WARNING: TLS termination unavailable ({e}); connections to inspected endpoints will be refused with 503"
                );
                (None, None)
            }
        },
    };
    let shared = Arc::new(Shared::new(Parts {
        policy: loaded_policy,
        resolver,
        identity,
        audit: Arc::clone(&audit),
        limits,
        allow_loopback: args.allow_loopback_upstream,
        compat: args.compat.into(),
        tls,
        credentials,
        tenants,
    }));
    Ok(Prepared {
        shared,
        audit,
        ca_files,
        sources,
        redactor,
        first,
    })
}

/// Starts counting audit events into the process's registry and serves it on `addr`.
async fn start_metrics(
    addr: SocketAddr,
    max_connections: usize,
    audit: &Arc<AuditSink>,
    identity: &Arc<IdentityResolver>,
) -> Result<(), ExitCode> {
    use crate::metrics;
    let mut made = metrics::Metrics::new(max_connections, Some(Arc::clone(audit)));
    made.read_rechecks_of(Arc::clone(identity));
    metrics::install(made);
    match metrics::serve::start(addr).await {
        Ok(bound) => {
            eprintln!("sluice: metrics on {bound} (/metrics, /healthz, /readyz)");
            Ok(())
        }
        Err(e) => {
            eprintln!("sluice: cannot listen on {addr} for metrics: {e}");
            Err(ExitCode::from(1))
        }
    }
}

/// Starts the OTLP export when the flag or the `OTEL_EXPORTER_OTLP_*` variables ask for it.
fn start_otlp(flag: Option<&str>, audit: &Arc<AuditSink>) -> Result<(), ExitCode> {
    let config = match crate::otlp::OtlpConfig::resolve(flag, |k| std::env::var(k).ok()) {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(()),
        Err(e) => {
            eprintln!("sluice: {e}");
            return Err(ExitCode::from(2));
        }
    };
    if let Err(e) = crate::otlp::start(&config, Arc::clone(audit)) {
        eprintln!("sluice: {e}");
        return Err(ExitCode::from(1));
    }
    eprintln!(
        "sluice: exporting audit events as OTLP logs to {} and requests as spans to {}",
        config.logs.as_deref().unwrap_or("(off)"),
        config.traces.as_deref().unwrap_or("(off)")
    );
    Ok(())
}

/// Raises the soft open-file limit to the hard one (each proxied connection holds up to
/// three descriptors, and distributions start services at 1024), and warns when even that
/// cannot carry `--max-connections`.
fn raise_fd_limit(max_connections: usize) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit.current = limit.maximum;
        }
    }
    if let Some(n) = limit.current {
        // 64 for sluice's own files (listeners, audit log, ...) and what caller
        // identification keeps open across lookups; then per connection the client's socket,
        // the upstream's, and the caller's `/proc/<pid>` kept while it lasts.
        let reserved = 64 + sluice_identity::descriptors_kept(n);
        let room = usize::try_from(n.saturating_sub(reserved) / 3).unwrap_or(usize::MAX);
        if room < max_connections {
            eprintln!(
                "sluice: warning: the open-file limit ({n}) carries about {room} proxied connections, fewer than --max-connections {max_connections}; beyond it, new clients wait in the accept queue"
            );
        }
    }
}

async fn serve(args: RunArgs) -> ExitCode {
    let Prepared {
        shared,
        audit,
        ca_files,
        sources,
        redactor,
        first,
    } = match prepare(&args).await {
        Ok(p) => p,
        Err(code) => return code,
    };
    if ca_files.is_none() && args.ca_cert.is_none() {
        let inspected_in = |policy: &crate::policy::Policy| {
            policy
                .entries()
                .iter()
                .flat_map(|e| e.endpoints.iter())
                .filter(|ep| ep.inspects_requests())
                .count()
        };
        // A gateway's tenants each have their own policy.
        let tenants = shared.tenants.load();
        let inspected = inspected_in(&shared.policy.load())
            + tenants
                .tenants()
                .iter()
                .map(|t| inspected_in(&t.policy))
                .sum::<usize>();
        if inspected > 0 {
            eprintln!(
                "sluice: note: {inspected} endpoint(s) are inspected, so sluice terminates their TLS with its own CA, which exists only in memory; clients will refuse it until they trust it: pass --ca-dir DIR to have DIR/ca.pem and DIR/ca-bundle.pem (the system roots plus sluice's CA) written, then point clients at the bundle (SSL_CERT_FILE, CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS=DIR/ca.pem, GIT_SSL_CAINFO); a client elsewhere can fetch the CA with GET /ca.pem sent to the proxy (curl http://PROXY/ca.pem)"
            );
        }
    }
    raise_fd_limit(args.max_connections);
    let hop = match hop_of(&args) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(2);
        }
    };
    warn_about_the_hop(&args, &shared.tenants.load(), hop.is_some());
    let hop = hop.map(Arc::new);
    let hup = super::reload::hangup();
    let mut shutdown = Shutdown::register();
    let bound = match listeners::Bound::bind(&args) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let addrs: Vec<String> = bound.addrs().iter().map(ToString::to_string).collect();
    audit.emit(&audit::Event::Lifecycle(audit::Lifecycle {
        time: SystemTime::now(),
        started: true,
        version: env!("CARGO_PKG_VERSION"),
        message: format!("sluice started, listening on {}", addrs.join(", ")),
    }));
    let mut own_listeners = bound.addrs();
    own_listeners.extend(args.metrics_listen);
    let mut dns_table = None;
    if !args.dns_listen.is_empty() {
        match start_policy_dns(
            &args.dns_listen,
            args.max_dns_queries_per_client_per_sec,
            &shared,
            &audit,
        ) {
            Ok((table, bound)) => {
                dns_table = Some(table);
                own_listeners.extend(bound);
            }
            Err(e) => {
                eprintln!("sluice: {e}");
                return ExitCode::from(1);
            }
        }
    }
    // One connection limit for every listener, explicit and transparent.
    let slots = Arc::new(tokio::sync::Semaphore::new(shared.limits.max_connections));
    let context = Arc::new(crate::transparent::listener::Context {
        dns_table,
        own_listeners,
    });
    bound.serve(&shared, &slots, &args, hop.as_ref(), context);
    // A reload loads the hop's files again with the rest.
    let mut sources = sources;
    if hop.is_some()
        && let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key)
    {
        sources.hop = Some(super::config::HopFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.client_ca.clone(),
        });
    }
    let refresher = sources.refresh.clone();
    let tenant_refresher = sources.tenant_refresh.clone();
    let reloader = Arc::new(
        super::reload::Reloader::new(Arc::clone(&shared), Arc::clone(&audit), sources, redactor)
            .with_ca_dir(args.ca_dir.clone())
            .with_hop(hop.clone()),
    );
    keep_refreshed(&reloader, refresher.as_deref(), tenant_refresher.as_deref());
    if let Err(e) = super::reload::watch(reloader, hup, args.watch_interval, first) {
        eprintln!("sluice: cannot start the configuration watcher: {e}");
        return ExitCode::from(1);
    }
    crate::metrics::set_ready(true);
    let reason = shutdown.next().await;
    // Not ready at once: a balancer sends no new client here.
    crate::metrics::set_ready(false);
    shared.drain.begin();
    eprintln!(
        "sluice: {reason}: draining: /readyz answers 503, the listeners stop accepting, requests and tunnels in flight have {} s to finish",
        args.drain_timeout.as_secs_f64()
    );
    let drained = drain(&shared, &slots, args.drain_timeout, &mut shutdown).await;
    eprintln!("sluice: {drained}");
    audit.emit(&audit::Event::Lifecycle(audit::Lifecycle {
        time: SystemTime::now(),
        started: false,
        version: env!("CARGO_PKG_VERSION"),
        message: format!("sluice stopped ({reason}); {drained}"),
    }));
    crate::otlp::flush(Duration::from_secs(5));
    // Everything audited is on disk before the process exits (or, when the audit log cannot
    // take it in time, on stderr, counted as lost).
    audit.close(audit::sink::CLOSE_WAIT);
    ExitCode::SUCCESS
}

/// The files a `run` loads and watches (policies, provider profiles, secrets).
pub(super) fn sources_of(args: &RunArgs) -> super::config::Sources {
    super::config::Sources {
        policies: args.policies.clone(),
        providers: args.providers.clone(),
        secrets_file: args.secrets_file.clone(),
        secrets_dir: args.secrets_dir.clone(),
        compat: args.compat,
        tenants: args.tenants.clone(),
        ca: match (&args.ca_cert, &args.ca_key) {
            (Some(cert), Some(key)) => Some(super::config::CaFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        },
        hop: None,
        refresh: None,
        tenant_refresh: None,
    }
}

#[cfg(test)]
mod tests {
    use super::tls::TlsSetupError;
    use super::*;
    use crate::tls::ca::CaError;

    fn run_args(args: &[&str]) -> RunArgs {
        #[derive(clap::Parser)]
        struct Cmd {
            #[command(flatten)]
            run: RunArgs,
        }
        let argv = std::iter::once("sluice-run").chain(args.iter().copied());
        <Cmd as clap::Parser>::try_parse_from(argv).unwrap().run
    }

    #[test]
    fn an_unusable_upstream_ca_stops_the_proxy_with_a_usage_error() {
        let err =
            tls_state(&run_args(&["--upstream-ca", "/nonexistent/ca.pem"]), None).unwrap_err();
        assert!(matches!(err, TlsSetupError::UpstreamCa(_)), "{err:?}");
        assert_eq!(err.exit_code(), Some(2));
        assert!(err.to_string().starts_with("--upstream-ca: "), "{err}");
    }

    #[test]
    fn an_unwritable_ca_dir_stops_the_proxy_naming_the_directory_and_the_reason() {
        let err = tls_state(&run_args(&["--ca-dir", "/dev/null/ca"]), None).unwrap_err();
        assert!(
            matches!(
                &err,
                TlsSetupError::CaDir {
                    source: CaError::Write { .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.exit_code(), Some(2));
        let text = err.to_string();
        assert!(
            text.starts_with("--ca-dir /dev/null/ca: ") && text.contains("Not a directory"),
            "{text}"
        );
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("localhost:3128").unwrap(),
            "127.0.0.1:3128".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            parse_listen("[::1]:8080").unwrap(),
            "[::1]:8080".parse::<SocketAddr>().unwrap()
        );
        assert!(parse_listen("localhost:x").is_err());
        assert!(parse_listen("localhost:+80").is_err());
        assert_eq!(parse_listen("LOCALHOST:0").unwrap().port(), 0);
        assert!(parse_listen("example.com:3128").is_err());
        assert!(parse_listen("3128").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn the_per_caller_default_is_a_quarter_but_at_least_64() {
        assert_eq!(default_per_caller(4096), 1024);
        assert_eq!(default_per_caller(100), 64);
        assert_eq!(default_per_caller(2), 2);
    }
}
