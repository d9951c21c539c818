//! The listeners of `sluice run`: binding each `--listen`, `--transparent-listen` and
//! `--tls-listen` address (each announced on stderr), the accept loop of each (explicit
//! proxy, possibly behind PROXY protocol; the TLS proxy hop; transparent), the hop itself
//! and what it cannot do as configured, and the policy DNS listeners.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::net::TcpListener;

use super::RunArgs;
use crate::audit::AuditSink;
use crate::listen;
use crate::pipeline::Shared;

/// Every proxy listener of a `run`, bound.
pub(super) struct Bound {
    explicit: Vec<TcpListener>,
    tls: Vec<TcpListener>,
    transparent: Vec<TcpListener>,
}

impl Bound {
    /// Binds every address `args` names (`--listen`, default 127.0.0.1:3128); the first that
    /// cannot be bound is said and stops the start.
    pub(super) fn bind(args: &RunArgs) -> Result<Bound, ExitCode> {
        let defaults = [SocketAddr::from(([127, 0, 0, 1], 3128))];
        let addrs: &[SocketAddr] = if args.listen.is_empty() {
            &defaults
        } else {
            &args.listen
        };
        let explicit = bind_each(addrs, "explicit proxy: CONNECT and http:// requests")?;
        let transparent = bind_each(
            &args.transparent_listen,
            "transparent: connections the network fence redirects",
        )?;
        let tls = bind_each(
            &args.tls_listen,
            "explicit proxy over TLS: curl --proxy https://",
        )?;
        Ok(Bound {
            explicit,
            tls,
            transparent,
        })
    }

    /// The addresses bound: explicit, TLS, then transparent.
    pub(super) fn addrs(&self) -> Vec<SocketAddr> {
        self.explicit
            .iter()
            .chain(&self.tls)
            .chain(&self.transparent)
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Starts each listener's accept loop, all sharing `slots` (one connection limit for
    /// every listener, explicit and transparent); the TLS listeners serve only with `hop`.
    pub(super) fn serve(
        self,
        shared: &Arc<Shared>,
        slots: &Arc<tokio::sync::Semaphore>,
        args: &RunArgs,
        hop: Option<&Arc<listen::hop::Hop>>,
        context: Arc<crate::transparent::listener::Context>,
    ) {
        let (listeners, tls_listeners, transparent) = (self.explicit, self.tls, self.transparent);
        let plain = Arc::new(listen::front::Front {
            proxy_from: args.proxy_protocol_from.clone(),
            hop: None,
        });
        for l in listeners {
            if plain.proxy_from.is_empty() {
                tokio::spawn(listen::accept_entry(
                    l,
                    Arc::clone(shared),
                    Arc::clone(slots),
                    listen::Overload::Answer,
                    crate::pipeline::serve,
                ));
                continue;
            }
            let front = Arc::clone(&plain);
            tokio::spawn(listen::accept_entry(
                l,
                Arc::clone(shared),
                Arc::clone(slots),
                listen::Overload::Answer,
                move |shared, stream, peer, local| {
                    listen::front::serve(shared, Arc::clone(&front), stream, peer, local)
                },
            ));
        }
        if let Some(hop) = hop {
            let front = Arc::new(listen::front::Front {
                proxy_from: args.proxy_protocol_from.clone(),
                hop: Some(Arc::clone(hop)),
            });
            for l in tls_listeners {
                let front = Arc::clone(&front);
                // Past the limit, closed: a TLS client cannot read a plain `503`.
                tokio::spawn(listen::accept_entry(
                    l,
                    Arc::clone(shared),
                    Arc::clone(slots),
                    listen::Overload::Close,
                    move |shared, stream, peer, local| {
                        listen::front::serve(shared, Arc::clone(&front), stream, peer, local)
                    },
                ));
            }
        }
        for l in transparent {
            let context = Arc::clone(&context);
            tokio::spawn(listen::accept_entry(
                l,
                Arc::clone(shared),
                Arc::clone(slots),
                listen::Overload::Close,
                move |shared, stream, peer, local| {
                    crate::transparent::listener::serve(
                        shared,
                        Arc::clone(&context),
                        stream,
                        peer,
                        local,
                    )
                },
            ));
        }
    }
}

/// Binds each of `addrs`, announcing each as `what`.
fn bind_each(addrs: &[SocketAddr], what: &str) -> Result<Vec<TcpListener>, ExitCode> {
    let mut out = Vec::new();
    for addr in addrs {
        match listen::bind(*addr) {
            Ok(l) => {
                let actual = l
                    .local_addr()
                    .map_or_else(|_| addr.to_string(), |a| a.to_string());
                eprintln!("sluice: listening on {actual} ({what})");
                out.push(l);
            }
            Err(e) => {
                eprintln!("sluice: cannot listen on {addr}: {e}");
                return Err(ExitCode::from(1));
            }
        }
    }
    Ok(out)
}

/// The TLS proxy hop of `--tls-listen`, when asked for.
pub(super) fn hop_of(args: &RunArgs) -> Result<Option<listen::hop::Hop>, listen::hop::HopError> {
    if args.tls_listen.is_empty() {
        return Ok(None);
    }
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        // clap requires both with --tls-listen.
        return Ok(None);
    };
    listen::hop::Hop::load(cert, key, args.client_ca.as_deref()).map(Some)
}

/// Says at start what the hop cannot do as configured: tenants' passwords sent in the clear
/// to a listener other clients can reach, and tenants known by certificates nobody can
/// present.
pub(super) fn warn_about_the_hop(args: &RunArgs, tenants: &crate::tenants::Table, has_hop: bool) {
    let by_password = tenants.tenants().iter().filter(|t| t.has_auth()).count();
    let open: Vec<String> = args
        .listen
        .iter()
        .filter(|a| !a.ip().is_loopback())
        .map(ToString::to_string)
        .collect();
    if by_password > 0 && !open.is_empty() {
        eprintln!(
            "sluice: WARNING: {by_password} tenant(s) send proxy passwords (Proxy-Authorization: Basic), and {} accepts them in cleartext from other hosts: use --tls-listen for them",
            open.join(", ")
        );
    }
    let client_ca = has_hop && args.client_ca.is_some();
    for t in tenants.tenants().iter().filter(|t| t.has_certs()) {
        if !client_ca {
            eprintln!(
                "sluice: WARNING: tenant {} is known by client certificates, and no --tls-listen with --client-ca asks for one: it cannot connect",
                t.name
            );
        }
    }
}

/// Binds every `--dns-listen` address (UDP and TCP) and serves the policy DNS there,
/// following policy reloads. Returns the table of handed-out addresses (one for all) and
/// the addresses bound.
#[allow(clippy::type_complexity)] // (table, bound addresses)
pub(in crate::cli) fn start_policy_dns(
    addrs: &[SocketAddr],
    rate: u32,
    shared: &Arc<Shared>,
    audit: &Arc<AuditSink>,
) -> Result<(Arc<crate::dns::table::HandedOut>, Vec<SocketAddr>), String> {
    use crate::dns::server;
    let mut sockets = Vec::new();
    let mut bound = Vec::new();
    for addr in addrs {
        let (udp, tcp) =
            server::bind(*addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        if let Ok(a) = udp.local_addr() {
            eprintln!("sluice: listening on {a} (policy DNS, UDP and TCP)");
            bound.push(a);
        }
        sockets.push((udp, tcp));
    }
    let table = serve_policy_dns(sockets, rate, shared, audit);
    Ok((table, bound))
}

/// Serves the policy DNS on bound sockets, following policy reloads, answering each client
/// address at most `rate` questions a second; returns its table.
pub(in crate::cli) fn serve_policy_dns(
    sockets: Vec<(tokio::net::UdpSocket, TcpListener)>,
    rate: u32,
    shared: &Arc<Shared>,
    audit: &Arc<AuditSink>,
) -> Arc<crate::dns::table::HandedOut> {
    use crate::dns::{answer, limit, server, table};
    let table = Arc::new(table::HandedOut::default());
    let policy_of = Arc::clone(shared);
    let dns = Arc::new(server::DnsServer {
        responder: answer::Responder {
            policy: Arc::new(move || policy_of.policy.load_full()),
            resolver: shared.resolver.clone(),
            compat: shared.compat,
            vet: sluice_resolver::VetOptions {
                allow_loopback: shared.allow_loopback,
            },
            table: Arc::clone(&table),
            ttl: answer::DEFAULT_TTL,
        },
        audit: Arc::clone(audit),
        limit: limit::RateLimit::new(rate),
    });
    for (udp, tcp) in sockets {
        tokio::spawn(Arc::clone(&dns).serve_udp(udp));
        tokio::spawn(Arc::clone(&dns).serve_tcp(tcp));
    }
    table
}
