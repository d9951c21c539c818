//! Turning a host into addresses: IP literal, `--resolve` override, hosts file, then DNS.
//!
//! [`Resolver`] owns the lookup order of OpenShell semantics §6.5 with one difference: the hosts
//! file is the proxy's own `/etc/hosts` (read once at start), never the sandbox's, so the
//! sandboxed side cannot steer resolution. DNS goes through hickory-resolver with the system
//! configuration (`/etc/resolv.conf`) or one operator-chosen name server. Every lookup is
//! bounded by a deadline. The addresses returned here are not yet vetted: that is
//! [`crate::vet`]'s job.

use std::error::Error;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::NetError;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::op::Query;
use hickory_resolver::proto::rr::{Name, RecordType};
use hickory_resolver::{Hosts, TokioResolver};

use crate::host::{canonical_name, parse_ip_literal};
use crate::overrides::Overrides;

/// The deadline of one [`Resolver::resolve`] call, A and AAAA queries and retries included.
pub const DEFAULT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Upper bound of hickory's per-query timeout (resolv.conf `options timeout:`).
const MAX_QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// Upper bound of hickory's retries after a failed query (resolv.conf `options attempts:`).
const MAX_QUERY_RETRIES: usize = 1;

type BoxError = Box<dyn Error + Send + Sync + 'static>;

/// Why a resolver could not be built or a host could not be resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolverError {
    /// `/etc/resolv.conf` is missing, unreadable or names no name server.
    #[error("cannot use the system DNS configuration (/etc/resolv.conf)")]
    SystemConfig(#[source] BoxError),
    /// `/etc/hosts` exists but cannot be read.
    #[error("cannot read /etc/hosts")]
    HostsFile(#[source] io::Error),
    /// hickory-resolver refused the configuration.
    #[error("cannot build the DNS resolver")]
    Build(#[source] BoxError),
    /// The host is neither an IP literal nor a DNS name.
    #[error("`{host}` is not a valid host name")]
    InvalidName {
        /// The host as given.
        host: String,
    },
    /// An overrides-only resolver was asked for a name it has no override for.
    #[error("`{host}` has no --resolve override and this resolver does not use DNS")]
    NoOverride {
        /// The host as given.
        host: String,
    },
    /// The name does not exist (`NXDOMAIN`).
    #[error("`{host}` does not exist (NXDOMAIN)")]
    NotFound {
        /// The host as given.
        host: String,
    },
    /// The name exists but has no A or AAAA record.
    #[error("`{host}` has no A or AAAA records")]
    NoRecords {
        /// The host as given.
        host: String,
    },
    /// No answer within the deadline.
    #[error("resolving `{host}` timed out after {} ms", .after.as_millis())]
    Timeout {
        /// The host as given.
        host: String,
        /// How long the lookup ran.
        after: Duration,
    },
    /// Any other failure (SERVFAIL, REFUSED, no reachable name server, ...).
    #[error("resolving `{host}` failed")]
    Lookup {
        /// The host as given.
        host: String,
        /// hickory-resolver's error.
        #[source]
        source: BoxError,
    },
}

/// Resolves hosts for the proxy. Cheap to clone (shared state behind `Arc`s), `Send + Sync`.
///
/// Build it inside the Tokio runtime that will use it: hickory spawns its connection tasks on
/// the runtime of the first lookups.
#[derive(Debug, Clone)]
pub struct Resolver {
    overrides: Arc<Overrides>,
    dns: Option<Dns>,
    lookup_timeout: Duration,
}

/// The DNS part: hickory plus the hosts file consulted before it.
#[derive(Debug, Clone)]
struct Dns {
    resolver: TokioResolver,
    hosts: Arc<Hosts>,
}

impl Resolver {
    /// The system configuration: name servers, search domains and options from
    /// `/etc/resolv.conf`, static entries from `/etc/hosts` (absent is fine), and `overrides`.
    pub fn from_system(overrides: Overrides) -> Result<Self, ResolverError> {
        let (config, opts) = hickory_resolver::system_conf::read_system_conf()
            .map_err(|err| ResolverError::SystemConfig(Box::new(err)))?;
        let hosts = match Hosts::from_system() {
            Ok(hosts) => hosts,
            Err(err) if err.kind() == io::ErrorKind::NotFound => Hosts::default(),
            Err(err) => return Err(ResolverError::HostsFile(err)),
        };
        Self::from_parts(config, opts, hosts, overrides)
    }

    /// One name server (UDP, TCP on truncation) and `overrides`; no hosts file, no search
    /// domains. For operators who point sluice at a specific resolver, and for tests.
    pub fn with_nameserver(
        server: SocketAddr,
        overrides: Overrides,
    ) -> Result<Self, ResolverError> {
        let mut name_server = NameServerConfig::udp_and_tcp(server.ip());
        for connection in &mut name_server.connections {
            connection.port = server.port();
        }
        let config = ResolverConfig::from_name_servers(vec![name_server]);
        Self::from_parts(config, ResolverOpts::default(), Hosts::default(), overrides)
    }

    /// Overrides (and IP literals) only: a name without an override is an error, and nothing
    /// is ever sent to the network.
    pub fn overrides_only(overrides: Overrides) -> Self {
        Self {
            overrides: Arc::new(overrides),
            dns: None,
            lookup_timeout: DEFAULT_LOOKUP_TIMEOUT,
        }
    }

    /// Replaces the deadline of each [`Resolver::resolve`] call (default
    /// [`DEFAULT_LOOKUP_TIMEOUT`]). Each DNS query also has its own timeout of at most 2 s with
    /// at most one retry; a deadline shorter than that can end a lookup whose A answer has
    /// arrived while its AAAA question is still unanswered.
    #[must_use]
    pub fn with_lookup_timeout(mut self, timeout: Duration) -> Self {
        self.lookup_timeout = timeout;
        self
    }

    /// The deadline of each [`Resolver::resolve`] call.
    pub fn lookup_timeout(&self) -> Duration {
        self.lookup_timeout
    }

    /// The static overrides.
    pub fn overrides(&self) -> &Overrides {
        &self.overrides
    }

    /// True when names without an override are looked up (hosts file and DNS).
    pub fn uses_dns(&self) -> bool {
        self.dns.is_some()
    }

    fn from_parts(
        config: ResolverConfig,
        mut opts: ResolverOpts,
        hosts: Hosts,
        overrides: Overrides,
    ) -> Result<Self, ResolverError> {
        // The hosts file is consulted here, before hickory, so that a name it lists is
        // answered from it alone (as glibc does), never mixed with DNS answers.
        opts.use_hosts_file = ResolveHosts::Never;
        // A and AAAA in parallel, A first: many sandboxes have no IPv6 route, and the proxy
        // dials in the order returned.
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        // hickory waits for both families; with resolv.conf's defaults (5 s, 2 attempts) a
        // server that drops AAAA questions would hold an answered A past the deadline. Capped,
        // one family's silence costs at most 2 × 2 s, inside DEFAULT_LOOKUP_TIMEOUT.
        opts.timeout = opts.timeout.min(MAX_QUERY_TIMEOUT);
        opts.attempts = opts.attempts.min(MAX_QUERY_RETRIES);
        let mut builder =
            TokioResolver::builder_with_config(config, TokioRuntimeProvider::default());
        *builder.options_mut() = opts;
        let resolver = builder
            .build()
            .map_err(|err| ResolverError::Build(Box::new(err)))?;
        Ok(Self {
            overrides: Arc::new(overrides),
            dns: Some(Dns {
                resolver,
                hosts: Arc::new(hosts),
            }),
            lookup_timeout: DEFAULT_LOOKUP_TIMEOUT,
        })
    }

    /// The addresses of `host`, deduplicated, in resolver order:
    /// an IP literal (`[v6]` accepted) is itself, with no lookup; else an override; else the
    /// hosts file; else DNS (A and AAAA, within the deadline).
    pub async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolverError> {
        if let Some(ip) = parse_ip_literal(host) {
            return Ok(vec![ip]);
        }
        let Some(key) = canonical_name(host) else {
            return Err(ResolverError::InvalidName {
                host: host.to_owned(),
            });
        };
        if let Some(addrs) = self.overrides.get(&key) {
            return Ok(addrs.to_vec());
        }
        let Some(dns) = &self.dns else {
            return Err(ResolverError::NoOverride {
                host: host.to_owned(),
            });
        };
        if let Some(addrs) = dns.hosts_entry(&key) {
            return Ok(addrs);
        }
        dns.lookup(host, self.lookup_timeout).await
    }
}

impl Dns {
    /// The hosts-file addresses of a canonical name (A then AAAA), if it is listed.
    fn hosts_entry(&self, key: &str) -> Option<Vec<IpAddr>> {
        let name = Name::from_ascii(key).ok()?;
        let mut addrs = Vec::new();
        for record_type in [RecordType::A, RecordType::AAAA] {
            let query = Query::query(name.clone(), record_type);
            if let Some(lookup) = self.hosts.lookup_static_host(&query) {
                let ips = lookup.answers().iter().filter_map(|r| r.data.ip_addr());
                push_unique(&mut addrs, ips);
            }
        }
        (!addrs.is_empty()).then_some(addrs)
    }

    async fn lookup(&self, host: &str, deadline: Duration) -> Result<Vec<IpAddr>, ResolverError> {
        // The name keeps a trailing dot if it had one: an absolute name skips search domains.
        let name = Name::from_ascii(host.to_ascii_lowercase()).map_err(|_| {
            ResolverError::InvalidName {
                host: host.to_owned(),
            }
        })?;
        let started = Instant::now();
        let lookup = match tokio::time::timeout(deadline, self.resolver.lookup_ip(name)).await {
            Err(_elapsed) => {
                return Err(ResolverError::Timeout {
                    host: host.to_owned(),
                    after: deadline,
                });
            }
            Ok(Err(err)) => return Err(lookup_error(host, err, started.elapsed())),
            Ok(Ok(lookup)) => lookup,
        };
        let mut addrs = Vec::new();
        push_unique(&mut addrs, lookup.iter());
        if addrs.is_empty() {
            return Err(ResolverError::NoRecords {
                host: host.to_owned(),
            });
        }
        Ok(addrs)
    }
}

fn lookup_error(host: &str, err: NetError, elapsed: Duration) -> ResolverError {
    let host = host.to_owned();
    if err.is_nx_domain() {
        ResolverError::NotFound { host }
    } else if err.is_no_records_found() {
        ResolverError::NoRecords { host }
    } else if matches!(err, NetError::Timeout) {
        ResolverError::Timeout {
            host,
            after: elapsed,
        }
    } else {
        ResolverError::Lookup {
            host,
            source: Box::new(err),
        }
    }
}

fn push_unique(addrs: &mut Vec<IpAddr>, new: impl IntoIterator<Item = IpAddr>) {
    for ip in new {
        if !addrs.contains(&ip) {
            addrs.push(ip);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;
    use crate::test_dns::{Reply, TestDns};

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn overrides(args: &[&str]) -> Overrides {
        Overrides::from_args(args).unwrap()
    }

    fn udp_server(server: &TestDns) -> NameServerConfig {
        let mut name_server = NameServerConfig::udp(server.addr().ip());
        name_server.connections[0].port = server.addr().port();
        name_server
    }

    /// A resolver on a local test server with a hosts file given as text.
    fn with_hosts(server: &TestDns, hosts_text: &str) -> Resolver {
        let mut hosts = Hosts::default();
        hosts.read_hosts_conf(hosts_text.as_bytes()).unwrap();
        let config = ResolverConfig::from_name_servers(vec![udp_server(server)]);
        Resolver::from_parts(config, ResolverOpts::default(), hosts, Overrides::new()).unwrap()
    }

    #[test]
    fn resolver_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Resolver>();
    }

    #[tokio::test]
    async fn ip_literals_are_themselves() {
        let resolver = Resolver::overrides_only(Overrides::new());
        for (host, want) in [
            ("192.0.2.1", "192.0.2.1"),
            ("127.0.0.1", "127.0.0.1"),
            ("::1", "::1"),
            ("[::1]", "::1"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("::ffff:10.0.0.1", "::ffff:10.0.0.1"),
        ] {
            assert_eq!(
                resolver.resolve(host).await.unwrap(),
                ips(&[want]),
                "{host}"
            );
        }
    }

    #[tokio::test]
    async fn overrides_answer_without_lookup() {
        let resolver = Resolver::overrides_only(overrides(&[
            "svc.test=10.0.0.2,10.0.0.1",
            "v6.test=[2001:db8::1],10.0.0.3",
        ]));
        assert_eq!(
            resolver.resolve("svc.test").await.unwrap(),
            ips(&["10.0.0.2", "10.0.0.1"])
        );
        assert_eq!(
            resolver.resolve("SVC.Test.").await.unwrap(),
            ips(&["10.0.0.2", "10.0.0.1"])
        );
        assert_eq!(
            resolver.resolve("v6.test").await.unwrap(),
            ips(&["2001:db8::1", "10.0.0.3"])
        );
        assert!(!resolver.uses_dns());
        assert_eq!(resolver.overrides().len(), 2);
    }

    #[tokio::test]
    async fn overrides_only_refuses_other_names() {
        let resolver = Resolver::overrides_only(overrides(&["svc.test=10.0.0.1"]));
        let err = resolver.resolve("other.test").await.unwrap_err();
        assert!(matches!(err, ResolverError::NoOverride { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "`other.test` has no --resolve override and this resolver does not use DNS"
        );
    }

    #[tokio::test]
    async fn invalid_names_are_refused_before_any_lookup() {
        let server = TestDns::start(Reply::Zone(vec![]));
        let resolver = Resolver::with_nameserver(server.addr(), Overrides::new()).unwrap();
        for host in [
            "",
            "a..b",
            "*.example.com",
            "bad host",
            "[10.0.0.1]",
            "fe80::1%lo",
        ] {
            let err = resolver.resolve(host).await.unwrap_err();
            assert!(
                matches!(err, ResolverError::InvalidName { .. }),
                "{host}: {err:?}"
            );
        }
        assert_eq!(
            resolver.resolve("a..b").await.unwrap_err().to_string(),
            "`a..b` is not a valid host name"
        );
        assert!(server.queries().is_empty());
    }

    #[tokio::test]
    async fn dns_answer_from_a_local_server() {
        let server = TestDns::start(Reply::Zone(vec![(
            "svc.test",
            IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
        )]));
        let resolver = Resolver::with_nameserver(server.addr(), Overrides::new()).unwrap();
        assert!(resolver.uses_dns());
        assert_eq!(
            resolver.resolve("svc.test").await.unwrap(),
            ips(&["10.1.2.3"])
        );
        let mut queries = server.queries();
        queries.sort();
        assert_eq!(
            queries,
            [
                ("svc.test".to_owned(), RecordType::A),
                ("svc.test".to_owned(), RecordType::AAAA)
            ]
        );
    }

    #[tokio::test]
    async fn dns_a_and_aaaa_are_ordered_a_first_and_deduplicated() {
        let server = TestDns::start(Reply::Zone(vec![
            (
                "dual.test",
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            ),
            ("dual.test", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
            ("dual.test", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
            ("dual.test", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
        ]));
        let resolver = Resolver::with_nameserver(server.addr(), Overrides::new()).unwrap();
        assert_eq!(
            resolver.resolve("Dual.Test.").await.unwrap(),
            ips(&["10.0.0.2", "10.0.0.1", "2001:db8::1"])
        );
    }

    #[tokio::test]
    async fn overrides_win_over_dns() {
        let server = TestDns::start(Reply::Zone(vec![(
            "svc.test",
            IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
        )]));
        let resolver =
            Resolver::with_nameserver(server.addr(), overrides(&["svc.test=10.9.9.9"])).unwrap();
        assert_eq!(
            resolver.resolve("svc.test").await.unwrap(),
            ips(&["10.9.9.9"])
        );
        assert!(server.queries().is_empty());
    }

    #[tokio::test]
    async fn nxdomain_is_not_found() {
        let server = TestDns::start(Reply::Zone(vec![]));
        let resolver = Resolver::with_nameserver(server.addr(), Overrides::new()).unwrap();
        let err = resolver.resolve("missing.test").await.unwrap_err();
        assert!(matches!(err, ResolverError::NotFound { .. }), "{err:?}");
        assert_eq!(err.to_string(), "`missing.test` does not exist (NXDOMAIN)");
    }

    #[tokio::test]
    async fn a_name_without_addresses_is_no_records() {
        // NOERROR with an empty answer section for both A and AAAA.
        let server = TestDns::start(Reply::NoData);
        let resolver = Resolver::with_nameserver(server.addr(), Overrides::new()).unwrap();
        let err = resolver.resolve("empty.test").await.unwrap_err();
        assert!(matches!(err, ResolverError::NoRecords { .. }), "{err:?}");
        assert_eq!(err.to_string(), "`empty.test` has no A or AAAA records");
    }

    #[tokio::test]
    async fn servfail_is_a_lookup_error() {
        let server = TestDns::start(Reply::ServFail);
        let resolver = Resolver::with_nameserver(server.addr(), Overrides::new()).unwrap();
        let err = resolver.resolve("broken.test").await.unwrap_err();
        assert!(matches!(err, ResolverError::Lookup { .. }), "{err:?}");
        assert_eq!(err.to_string(), "resolving `broken.test` failed");
        assert!(err.source().is_some());
    }

    #[tokio::test]
    async fn a_silent_server_times_out_within_the_deadline() {
        let server = TestDns::start(Reply::Silent);
        let resolver = Resolver::with_nameserver(server.addr(), Overrides::new())
            .unwrap()
            .with_lookup_timeout(Duration::from_millis(300));
        let started = Instant::now();
        let err = resolver.resolve("slow.test").await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(matches!(err, ResolverError::Timeout { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "resolving `slow.test` timed out after 300 ms"
        );
        assert!(
            !server.queries().is_empty(),
            "the query did reach the server"
        );
    }

    #[tokio::test]
    async fn an_unanswered_aaaa_question_does_not_lose_the_a_answer() {
        let server = TestDns::start(Reply::ZoneSilentOnAaaa(vec![(
            "v4only.test",
            IpAddr::V4(Ipv4Addr::new(10, 1, 2, 4)),
        )]));
        let config = ResolverConfig::from_name_servers(vec![udp_server(&server)]);
        let mut opts = ResolverOpts::default();
        opts.timeout = Duration::from_millis(200);
        let resolver =
            Resolver::from_parts(config, opts, Hosts::default(), Overrides::new()).unwrap();
        assert_eq!(
            resolver.resolve("v4only.test").await.unwrap(),
            ips(&["10.1.2.4"])
        );
        let aaaa = server
            .queries()
            .iter()
            .filter(|(_, t)| *t == RecordType::AAAA)
            .count();
        assert_eq!(
            aaaa,
            1 + MAX_QUERY_RETRIES,
            "one AAAA question and one retry"
        );
    }

    #[test]
    fn system_timeouts_are_capped() {
        let (config, opts) = hickory_resolver::system_conf::parse_resolv_conf(
            "nameserver 127.0.0.1\noptions timeout:30 attempts:5\n",
        )
        .unwrap();
        assert_eq!(opts.timeout, Duration::from_secs(30));
        let resolver =
            Resolver::from_parts(config, opts, Hosts::default(), Overrides::new()).unwrap();
        let Some(dns) = &resolver.dns else {
            panic!("a DNS resolver")
        };
        assert_eq!(dns.resolver.options().timeout, MAX_QUERY_TIMEOUT);
        assert_eq!(dns.resolver.options().attempts, MAX_QUERY_RETRIES);
        assert_eq!(dns.resolver.options().use_hosts_file, ResolveHosts::Never);
        let worst = MAX_QUERY_TIMEOUT * (1 + MAX_QUERY_RETRIES as u32);
        assert!(worst < DEFAULT_LOOKUP_TIMEOUT);
    }

    #[tokio::test]
    async fn hosts_file_entries_are_answered_alone() {
        // The DNS server also knows pinned.test; the hosts file must win without a query.
        let server = TestDns::start(Reply::Zone(vec![(
            "pinned.test",
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9)),
        )]));
        let resolver = with_hosts(
            &server,
            "# comment\n10.9.8.7 Pinned.test alias.test # trailing\n::1 six.test\n\
             10.9.8.8 six.test\n",
        );
        assert_eq!(
            resolver.resolve("pinned.test").await.unwrap(),
            ips(&["10.9.8.7"])
        );
        assert_eq!(
            resolver.resolve("PINNED.TEST.").await.unwrap(),
            ips(&["10.9.8.7"])
        );
        assert_eq!(
            resolver.resolve("alias.test").await.unwrap(),
            ips(&["10.9.8.7"])
        );
        assert_eq!(
            resolver.resolve("six.test").await.unwrap(),
            ips(&["10.9.8.8", "::1"])
        );
        assert!(server.queries().is_empty(), "{:?}", server.queries());
    }

    #[tokio::test]
    async fn system_configuration_resolves_localhost_without_the_network() {
        // `localhost` comes from /etc/hosts, or from hickory's RFC 6761 answer when the file
        // does not list it; neither sends a query.
        let resolver = Resolver::from_system(Overrides::new()).unwrap();
        let addrs = resolver.resolve("localhost").await.unwrap();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(IpAddr::is_loopback), "{addrs:?}");
        assert!(
            addrs.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "{addrs:?}"
        );
    }
}
