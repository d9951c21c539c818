//! What `sluice audit` does with the records it reads: the filters (`Filter`), the readable
//! line of each (the shorthand's grammar, with a timestamp and optional colour), and the
//! summary (counts per decision, top denied hosts and binaries). Pure.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::read::{Decision, Record};
use super::shorthand::{push_clean, push_reason_text, severity_label, utc_timestamp};

/// Which records are shown (all given conditions must hold).
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only refusals.
    pub denied: bool,
    /// The caller's executable: a full path, or a file name (`curl`).
    pub binary: Option<String>,
    /// The destination host (case-insensitive); `*.example.com` for its subdomains.
    pub host: Option<String>,
    /// The deciding policy entry.
    pub policy: Option<String>,
    /// Not before this many milliseconds since the epoch.
    pub since_ms: Option<u64>,
}

impl Filter {
    pub fn matches(&self, r: &Record) -> bool {
        if self.denied && r.decision != Some(Decision::Denied) {
            return false;
        }
        if let Some(b) = &self.binary {
            let Some(exe) = &r.binary else { return false };
            let name = exe.rsplit('/').next().unwrap_or(exe);
            if exe != b && name != b {
                return false;
            }
        }
        if let Some(h) = &self.host {
            let Some(host) = &r.host else { return false };
            let host = host.to_ascii_lowercase();
            // An IPv6 address is asked for with or without its brackets (`[::1]`, `::1`).
            let want = sluice_addr::unbracketed(h).to_ascii_lowercase();
            let ok = match want.strip_prefix("*.") {
                Some(suffix) => host.ends_with(&format!(".{suffix}")),
                None => host == want,
            };
            if !ok {
                return false;
            }
        }
        if let Some(p) = &self.policy
            && r.policy.as_deref() != Some(p.as_str())
        {
            return false;
        }
        if let Some(since) = self.since_ms
            && r.time_ms < since
        {
            return false;
        }
        true
    }
}

/// Why a `--since` value is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "`{0}` is neither an RFC 3339 time (2026-12-01T09:30:00Z) nor a duration back from now (30s, 10m, 2h, 7d)"
)]
pub struct BadSince(pub String);

/// `--since`: an RFC 3339 time, or a duration back from `now` (`30s`, `10m`, `2h`, `7d`).
pub fn parse_since(s: &str, now: SystemTime) -> Result<u64, BadSince> {
    let bad = || BadSince(s.to_string());
    let now_ms = super::ocsf::epoch_millis(now);
    if let Some(unit) = s.chars().last()
        && s.len() > 1
        && s[..s.len() - 1].bytes().all(|b| b.is_ascii_digit())
    {
        let n: u64 = s[..s.len() - 1].parse().map_err(|_| bad())?;
        let secs = match unit {
            's' => Some(n),
            'm' => n.checked_mul(60),
            'h' => n.checked_mul(3600),
            'd' => n.checked_mul(86_400),
            _ => None,
        }
        .ok_or_else(bad)?;
        let back = Duration::from_secs(secs).as_millis();
        return Ok(now_ms.saturating_sub(u64::try_from(back).unwrap_or(u64::MAX)));
    }
    rfc3339_ms(s).ok_or_else(bad)
}

/// `YYYY-MM-DDTHH:MM:SS[.fff...](Z|±HH:MM)` as milliseconds since the epoch (not before it).
fn rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<u64> {
        let part = s.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut millis = 0;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i.min(start + 3)];
        millis = digits.parse::<u64>().ok()? * 10u64.pow(3 - u32::try_from(digits.len()).ok()?);
    }
    let offset_secs: i64 = match s.get(i..)? {
        "Z" | "z" => 0,
        rest if rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && &rest[3..4] == ":" =>
        {
            let h: i64 = rest[1..3].parse().ok()?;
            let m: i64 = rest[4..6].parse().ok()?;
            let v = h * 3600 + m * 60;
            if rest.starts_with('-') { -v } else { v }
        }
        _ => return None,
    };
    let days = days_from_civil(i64::try_from(year).ok()?, month, day);
    let secs =
        days * 86_400 + i64::try_from(hour * 3600 + minute * 60 + second).ok()? - offset_secs;
    let secs = u64::try_from(secs).ok()?;
    secs.checked_mul(1000)?.checked_add(millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u64, day: u64) -> i64 {
    let (m, d) = (month as i64, day as i64);
    let y = if m <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// ANSI colours, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colour {
    On,
    Off,
}

fn paint(s: &mut String, colour: Colour, code: &str, text: &str) {
    if colour == Colour::On {
        let _ = write!(s, "\x1b[{code}m{text}\x1b[0m");
    } else {
        s.push_str(text);
    }
}

/// The readable line of `r`: `<UTC time> <LABEL> [SEV] <DECISION> exe(pid) -> target
/// [policy:.. engine:..] [reason:..]`; events that decide nothing print their message.
pub fn line(r: &Record, colour: Colour) -> String {
    let time = SystemTime::UNIX_EPOCH + Duration::from_millis(r.time_ms);
    let mut s = utc_timestamp(time);
    s.push(' ');
    push_clean(&mut s, &r.label);
    s.push(' ');
    let sev = severity_label(r.severity);
    match r.severity {
        super::Severity::High | super::Severity::Critical => paint(&mut s, colour, "1;31", sev),
        _ => s.push_str(sev),
    }
    s.push(' ');
    let Some(decision) = r.decision else {
        push_clean(&mut s, &r.message);
        return s;
    };
    let code = match decision {
        Decision::Allowed => "32",
        Decision::Denied => "1;31",
        Decision::Audited => "33",
    };
    paint(&mut s, colour, code, decision.label());
    s.push(' ');
    match &r.dns {
        Some(dns) => push_dns(&mut s, r, dns),
        None => push_target(&mut s, r),
    }
    s.push_str(" [policy:");
    push_clean(&mut s, r.policy.as_deref().unwrap_or("-"));
    s.push_str(" engine:");
    push_clean(&mut s, r.engine.as_deref().unwrap_or("-"));
    s.push(']');
    if decision != Decision::Allowed
        && let Some(reason) = &r.reason
    {
        push_reason_text(&mut s, reason);
    }
    s
}

/// A policy-DNS question as the shorthand writes it: `10.0.0.5:40000 -> name A REFUSED
/// [answers]`.
fn push_dns(s: &mut String, r: &Record, dns: &super::read::DnsFacts) {
    push_clean(s, &dns.client);
    s.push_str(" -> ");
    push_clean(
        s,
        r.host.as_deref().filter(|h| !h.is_empty()).unwrap_or("-"),
    );
    for part in [&dns.qtype, &dns.rcode].into_iter().chain(&dns.answers) {
        s.push(' ');
        push_clean(s, part);
    }
}

/// `exe(pid) -> ` and the request (`METHOD scheme://host:port/path`) or the destination.
fn push_target(s: &mut String, r: &Record) {
    if let Some(b) = &r.binary {
        push_clean(s, b);
        let _ = write!(s, "({}) -> ", r.pid.unwrap_or(0));
    }
    if let Some(m) = &r.method {
        push_clean(s, m);
        s.push(' ');
        let url = format!(
            "{}://{}{}",
            r.scheme.as_deref().unwrap_or("http"),
            authority(r),
            r.path.as_deref().unwrap_or("/")
        );
        push_clean(s, &url);
    } else {
        push_clean(s, &authority(r));
    }
}

/// `host:port` (`[v6]:port`), `?` for a missing part (a refusal before any destination was
/// known is written with an empty host and port 0).
pub fn authority(r: &Record) -> String {
    let host = r.host.as_deref().filter(|h| !h.is_empty()).unwrap_or("?");
    match r.port.filter(|&p| p != 0) {
        Some(port) => sluice_addr::HostPort(host, port).to_string(),
        None => format!("{}:?", sluice_addr::UriHost(host)),
    }
}

/// How many rows the summary's top lists have.
pub const TOP: usize = 10;

/// Counts for `--summary`.
#[derive(Debug, Default)]
pub struct Summary {
    decisions: HashMap<Decision, u64>,
    denied_hosts: HashMap<String, u64>,
    denied_binaries: HashMap<String, u64>,
}

impl Summary {
    pub fn add(&mut self, r: &Record) {
        let Some(d) = r.decision else { return };
        *self.decisions.entry(d).or_default() += 1;
        if d == Decision::Denied {
            // A policy-DNS refusal counts the name asked for, and no program (the policy DNS
            // does not identify its clients): never the client's own address.
            let (host, unknown) = match &r.dns {
                Some(_) => (
                    r.host.clone().unwrap_or_else(|| "?".to_string()),
                    "(policy DNS client)",
                ),
                None => (authority(r), "(unknown)"),
            };
            *self.denied_hosts.entry(host).or_default() += 1;
            let exe = r.binary.clone().unwrap_or_else(|| unknown.to_string());
            *self.denied_binaries.entry(exe).or_default() += 1;
        }
    }

    /// The table: counts per decision, then the top denied hosts and binaries (most first,
    /// then by name).
    pub fn render(&self) -> String {
        let mut s = String::from("decision   count\n");
        for d in [Decision::Allowed, Decision::Denied, Decision::Audited] {
            let n = self.decisions.get(&d).copied().unwrap_or(0);
            let _ = writeln!(s, "{:<10} {n}", d.label().to_ascii_lowercase());
        }
        for (title, counts) in [
            ("top denied hosts", &self.denied_hosts),
            ("top denied binaries", &self.denied_binaries),
        ] {
            let _ = writeln!(s, "\n{title}");
            let mut rows: Vec<(&String, &u64)> = counts.iter().collect();
            rows.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
            if rows.is_empty() {
                s.push_str("  (none)\n");
            }
            for (name, n) in rows.into_iter().take(TOP) {
                let _ = write!(s, "{n:>8}  ");
                push_clean(&mut s, name);
                s.push('\n');
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_accepts_rfc3339_and_relative_durations() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(parse_since("1970-01-01T00:00:00Z", now), Ok(0));
        assert_eq!(
            parse_since("2026-12-01T09:30:00.250Z", now),
            Ok(1_796_117_400_250)
        );
        assert_eq!(
            parse_since("2026-12-01T10:30:00+01:00", now),
            Ok(1_796_117_400_000)
        );
        assert_eq!(parse_since("10m", now), Ok(1_800_000_000_000 - 600_000));
        assert_eq!(parse_since("2d", now), Ok(1_800_000_000_000 - 172_800_000));
        for bad in [
            "",
            "10",
            "10x",
            "m",
            "2026-13-01T00:00:00Z",
            "2026-12-01",
            "yesterday",
            "99999999999999999999d",
        ] {
            assert!(parse_since(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn binary_and_host_filters() {
        let r = Record {
            time_ms: 5,
            class_uid: 4001,
            label: "NET:OPEN".into(),
            severity: super::super::Severity::Medium,
            decision: Some(Decision::Denied),
            binary: Some("/usr/bin/curl".into()),
            pid: Some(1),
            host: Some("api.Example.com".into()),
            port: Some(443),
            scheme: None,
            method: None,
            path: None,
            policy: None,
            engine: Some("l4".into()),
            reason: Some("no\nforged line".into()),
            message: String::new(),
            dns: None,
        };
        let f = |filter: Filter| filter.matches(&r);
        assert!(f(Filter {
            binary: Some("curl".into()),
            ..Filter::default()
        }));
        assert!(f(Filter {
            binary: Some("/usr/bin/curl".into()),
            ..Filter::default()
        }));
        assert!(!f(Filter {
            binary: Some("/bin/curl".into()),
            ..Filter::default()
        }));
        assert!(f(Filter {
            host: Some("*.example.com".into()),
            ..Filter::default()
        }));
        assert!(!f(Filter {
            host: Some("example.com".into()),
            ..Filter::default()
        }));
        assert!(!f(Filter {
            policy: Some("api".into()),
            ..Filter::default()
        }));
        assert!(!f(Filter {
            since_ms: Some(6),
            ..Filter::default()
        }));
        let text = line(&r, Colour::Off);
        assert!(!text.contains('\n'), "{text}");
        assert!(text.ends_with("DENIED /usr/bin/curl(1) -> api.Example.com:443 [policy:- engine:l4] [reason:no forged line]"), "{text}");
        // A refusal before any destination was known (written as host "" and port 0).
        let nowhere = Record {
            host: Some(String::new()),
            port: Some(0),
            ..r
        };
        assert_eq!(authority(&nowhere), "?:?");
        // An IPv6 destination: bracketed before its port, found with or without brackets.
        let v6 = Record {
            host: Some("::1".into()),
            port: Some(8443),
            ..nowhere
        };
        assert_eq!(authority(&v6), "[::1]:8443");
        for host in ["::1", "[::1]"] {
            assert!(
                Filter {
                    host: Some(host.into()),
                    ..Filter::default()
                }
                .matches(&v6),
                "{host}"
            );
        }
    }

    #[test]
    fn policy_dns_refusals_show_the_name_and_never_count_the_client_as_a_host() {
        let r = Record {
            time_ms: 0,
            class_uid: 4003,
            label: "DNS:QUERY".into(),
            severity: super::super::Severity::Medium,
            decision: Some(Decision::Denied),
            binary: None,
            pid: None,
            host: Some("nowhere.example.org".into()),
            port: None,
            scheme: None,
            method: None,
            path: None,
            policy: None,
            engine: Some("dns".into()),
            reason: Some("no policy endpoint allows it".into()),
            message: String::new(),
            dns: Some(super::super::read::DnsFacts {
                client: "127.0.0.1:60891".into(),
                qtype: "A".into(),
                rcode: "REFUSED".into(),
                answers: Vec::new(),
            }),
        };
        let text = line(&r, Colour::Off);
        assert!(
            text.ends_with("DNS:QUERY [MED] DENIED 127.0.0.1:60891 -> nowhere.example.org A REFUSED [policy:- engine:dns] [reason:no policy endpoint allows it]"),
            "{text}"
        );
        let mut summary = Summary::default();
        summary.add(&r);
        let table = summary.render();
        assert!(table.contains("1  nowhere.example.org\n"), "{table}");
        assert!(!table.contains("127.0.0.1"), "{table}");
    }
}
