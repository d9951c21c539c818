//! Static DNS answers given by the operator (`--resolve HOST=IP[,IP...]`, like curl's
//! `--resolve` without the port).
//!
//! An override replaces the lookup of one name (case-insensitive, any port); its addresses are
//! still vetted like any resolved address. This module parses and stores overrides; it does
//! not resolve anything.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use crate::host::{canonical_name, parse_ip_literal};

/// One `HOST=IP[,IP...]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    host: String,
    addrs: Vec<IpAddr>,
}

impl Override {
    /// The host name, lowercased, without a trailing dot.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The addresses, in the order given, without duplicates.
    pub fn addrs(&self) -> &[IpAddr] {
        &self.addrs
    }
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=", self.host)?;
        for (i, ip) in self.addrs.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{ip}")?;
        }
        Ok(())
    }
}

/// Why an override entry was rejected. Each message quotes the whole entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OverrideError {
    /// No `=` in the entry.
    #[error("invalid resolve override `{entry}`: expected HOST=IP[,IP...]")]
    MissingEquals {
        /// The entry as given.
        entry: String,
    },
    /// The entry looks like curl's `HOST:PORT:ADDR`.
    #[error(
        "invalid resolve override `{entry}`: curl's HOST:PORT:ADDR form is not accepted; \
         write HOST=ADDR (an override applies to every port)"
    )]
    CurlForm {
        /// The entry as given.
        entry: String,
    },
    /// Nothing before `=`.
    #[error("invalid resolve override `{entry}`: empty host name")]
    EmptyHost {
        /// The entry as given.
        entry: String,
    },
    /// The host is an IP literal, which is never looked up.
    #[error("invalid resolve override `{entry}`: `{host}` is an IP address, not a host name")]
    HostIsIpLiteral {
        /// The entry as given.
        entry: String,
        /// The host part.
        host: String,
    },
    /// The host is not a DNS name.
    #[error("invalid resolve override `{entry}`: `{host}` is not a valid host name")]
    InvalidHost {
        /// The entry as given.
        entry: String,
        /// The host part.
        host: String,
    },
    /// Nothing after `=`.
    #[error("invalid resolve override `{entry}`: no address after `=`")]
    NoAddresses {
        /// The entry as given.
        entry: String,
    },
    /// An address is not an IP address.
    #[error("invalid resolve override `{entry}`: `{address}` is not an IP address{hint}")]
    InvalidAddress {
        /// The entry as given.
        entry: String,
        /// The offending address text.
        address: String,
        /// Extra advice, empty or starting with `; `.
        hint: &'static str,
    },
}

impl FromStr for Override {
    type Err = OverrideError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let Some((host, list)) = entry.split_once('=') else {
            // curl's `HOST:PORT:ADDR[,ADDR...]` (the host of that form has no colon).
            let mut parts = entry.splitn(3, ':');
            let looks_like_curl = matches!(
                (parts.next(), parts.next(), parts.next()),
                (Some(_), Some(port), Some(_))
                    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
            );
            return Err(if looks_like_curl {
                OverrideError::CurlForm {
                    entry: entry.to_owned(),
                }
            } else {
                OverrideError::MissingEquals {
                    entry: entry.to_owned(),
                }
            });
        };
        let host = host.trim();
        if host.is_empty() {
            return Err(OverrideError::EmptyHost {
                entry: entry.to_owned(),
            });
        }
        if parse_ip_literal(host).is_some() {
            return Err(OverrideError::HostIsIpLiteral {
                entry: entry.to_owned(),
                host: host.to_owned(),
            });
        }
        let Some(name) = canonical_name(host) else {
            return Err(OverrideError::InvalidHost {
                entry: entry.to_owned(),
                host: host.to_owned(),
            });
        };
        if list.trim().is_empty() {
            return Err(OverrideError::NoAddresses {
                entry: entry.to_owned(),
            });
        }
        let mut addrs = Vec::new();
        for text in list.split(',').map(str::trim) {
            let Some(ip) = parse_ip_literal(text) else {
                let hint = if text.parse::<SocketAddr>().is_ok() {
                    "; give no port (an override applies to every port)"
                } else {
                    ""
                };
                return Err(OverrideError::InvalidAddress {
                    entry: entry.to_owned(),
                    address: text.to_owned(),
                    hint,
                });
            };
            if !addrs.contains(&ip) {
                addrs.push(ip);
            }
        }
        Ok(Self { host: name, addrs })
    }
}

/// All overrides, keyed by canonical host name. Entries for the same host are merged in the
/// order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides(BTreeMap<String, Vec<IpAddr>>);

impl Overrides {
    /// No overrides.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses every `--resolve` value; the first bad entry is the error.
    pub fn from_args<S: AsRef<str>>(args: &[S]) -> Result<Self, OverrideError> {
        let mut overrides = Self::new();
        for arg in args {
            overrides.insert(arg.as_ref().parse()?);
        }
        Ok(overrides)
    }

    /// Adds an entry; the addresses of an existing entry for the same host are kept first.
    pub fn insert(&mut self, entry: Override) {
        let addrs = self.0.entry(entry.host).or_default();
        for ip in entry.addrs {
            if !addrs.contains(&ip) {
                addrs.push(ip);
            }
        }
    }

    /// The addresses for `host` (case-insensitive, trailing dot tolerated), if overridden.
    pub fn get(&self, host: &str) -> Option<&[IpAddr]> {
        let key = canonical_name(host)?;
        self.0.get(&key).map(Vec::as_slice)
    }

    /// Number of overridden hosts.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when nothing is overridden.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Overridden hosts and their addresses, sorted by host (for the start-up log).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[IpAddr])> {
        self.0
            .iter()
            .map(|(host, addrs)| (host.as_str(), addrs.as_slice()))
    }
}

impl FromIterator<Override> for Overrides {
    fn from_iter<I: IntoIterator<Item = Override>>(iter: I) -> Self {
        let mut overrides = Self::new();
        overrides.extend(iter);
        overrides
    }
}

impl Extend<Override> for Overrides {
    fn extend<I: IntoIterator<Item = Override>>(&mut self, iter: I) {
        for entry in iter {
            self.insert(entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn good_entries() {
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "api.example.com=192.0.2.1",
                "api.example.com",
                &["192.0.2.1"],
            ),
            (
                "API.Example.COM.=192.0.2.1",
                "api.example.com",
                &["192.0.2.1"],
            ),
            ("svc=10.0.0.1,10.0.0.2", "svc", &["10.0.0.1", "10.0.0.2"]),
            (
                "svc=10.0.0.1, ::1 ,[2001:db8::1]",
                "svc",
                &["10.0.0.1", "::1", "2001:db8::1"],
            ),
            ("svc=10.0.0.1,10.0.0.1", "svc", &["10.0.0.1"]),
            (" svc =127.0.0.1", "svc", &["127.0.0.1"]),
            (
                "under_score.test=::ffff:127.0.0.1",
                "under_score.test",
                &["::ffff:127.0.0.1"],
            ),
        ];
        for &(entry, host, addrs) in cases {
            let parsed: Override = entry.parse().unwrap_or_else(|e| panic!("{entry}: {e}"));
            assert_eq!(parsed.host(), host, "{entry}");
            assert_eq!(parsed.addrs(), ips(addrs), "{entry}");
        }
        let shown: Override = "svc=10.0.0.1,[::1]".parse().unwrap();
        assert_eq!(shown.to_string(), "svc=10.0.0.1,::1");
    }

    #[test]
    fn bad_entries_have_exact_messages() {
        let cases: &[(&str, &str)] = &[
            (
                "example.com",
                "invalid resolve override `example.com`: expected HOST=IP[,IP...]",
            ),
            ("", "invalid resolve override ``: expected HOST=IP[,IP...]"),
            (
                "example.com:443:192.0.2.1",
                "invalid resolve override `example.com:443:192.0.2.1`: curl's HOST:PORT:ADDR \
                 form is not accepted; write HOST=ADDR (an override applies to every port)",
            ),
            (
                "example.com:443:[::1]",
                "invalid resolve override `example.com:443:[::1]`: curl's HOST:PORT:ADDR form \
                 is not accepted; write HOST=ADDR (an override applies to every port)",
            ),
            (
                "=192.0.2.1",
                "invalid resolve override `=192.0.2.1`: empty host name",
            ),
            (
                "192.0.2.9=192.0.2.1",
                "invalid resolve override `192.0.2.9=192.0.2.1`: `192.0.2.9` is an IP address, \
                 not a host name",
            ),
            (
                "[::1]=192.0.2.1",
                "invalid resolve override `[::1]=192.0.2.1`: `[::1]` is an IP address, not a \
                 host name",
            ),
            (
                "*.example.com=192.0.2.1",
                "invalid resolve override `*.example.com=192.0.2.1`: `*.example.com` is not a \
                 valid host name",
            ),
            (
                "a..b=192.0.2.1",
                "invalid resolve override `a..b=192.0.2.1`: `a..b` is not a valid host name",
            ),
            (
                "example.com=",
                "invalid resolve override `example.com=`: no address after `=`",
            ),
            (
                "example.com= ",
                "invalid resolve override `example.com= `: no address after `=`",
            ),
            (
                "example.com=192.0.2.1,",
                "invalid resolve override `example.com=192.0.2.1,`: `` is not an IP address",
            ),
            (
                "example.com=example.org",
                "invalid resolve override `example.com=example.org`: `example.org` is not an IP \
                 address",
            ),
            (
                "example.com=192.0.2.1:443",
                "invalid resolve override `example.com=192.0.2.1:443`: `192.0.2.1:443` is not \
                 an IP address; give no port (an override applies to every port)",
            ),
            (
                "example.com=[::1]:443",
                "invalid resolve override `example.com=[::1]:443`: `[::1]:443` is not an IP \
                 address; give no port (an override applies to every port)",
            ),
            (
                "example.com=[192.0.2.1]",
                "invalid resolve override `example.com=[192.0.2.1]`: `[192.0.2.1]` is not an IP \
                 address",
            ),
            (
                "example.com=fe80::1%eth0",
                "invalid resolve override `example.com=fe80::1%eth0`: `fe80::1%eth0` is not an \
                 IP address",
            ),
        ];
        for &(entry, message) in cases {
            let err = entry.parse::<Override>().unwrap_err();
            assert_eq!(err.to_string(), message, "{entry}");
        }
    }

    #[test]
    fn from_args_merges_and_looks_up_case_insensitively() {
        // As clap hands them over: a `Vec<String>`.
        let args = vec![
            "svc.test=10.0.0.1".to_owned(),
            "SVC.test.=10.0.0.2,10.0.0.1".to_owned(),
            "other=::1".to_owned(),
        ];
        let overrides = Overrides::from_args(&args).unwrap();
        assert_eq!(overrides.len(), 2);
        assert_eq!(
            overrides.get("svc.test"),
            Some(&ips(&["10.0.0.1", "10.0.0.2"])[..])
        );
        assert_eq!(
            overrides.get("Svc.Test."),
            Some(&ips(&["10.0.0.1", "10.0.0.2"])[..])
        );
        assert_eq!(overrides.get("other"), Some(&ips(&["::1"])[..]));
        assert_eq!(overrides.get("missing"), None);
        assert_eq!(overrides.get("not a name"), None);
        let hosts: Vec<&str> = overrides.iter().map(|(h, _)| h).collect();
        assert_eq!(hosts, ["other", "svc.test"]);
    }

    #[test]
    fn from_args_reports_the_first_bad_entry() {
        let err = Overrides::from_args(&["ok=10.0.0.1", "bad", "also:1:bad"]).unwrap_err();
        assert_eq!(
            err,
            OverrideError::MissingEquals {
                entry: "bad".to_owned()
            }
        );
        assert!(Overrides::from_args::<&str>(&[]).unwrap().is_empty());
    }
}
