//! The one-line human form of an audit event (spec §7.3), for stderr and log files. Pure.
//!
//! ```text
//! NET:OPEN [INFO] ALLOWED /usr/bin/curl(4242) -> api.github.com:443 [policy:github engine:l4]
//! NET:OPEN [MED] DENIED /usr/bin/curl(4242) -> example.com:443 [policy:- engine:l4] [reason:...]
//! NET:CLOSE [INFO] /usr/bin/curl(4242) -> api.github.com:443 [policy:github engine:l4] [bytes_in:4096 bytes_out:517 duration_ms:1250]
//! HTTP:GET [INFO] ALLOWED /usr/bin/curl(88) -> GET http://h:8080/path [policy:p engine:l7]
//! CONFIG:LOADED [INFO] policy loaded from a.yaml (3 entries, 5 endpoints) [hash:sha256:...]
//! CONFIG:FAILED [HIGH] policy load failed: a.yaml:3:5: ...
//! APP:START [INFO] sluice 0.1.0 listening on 127.0.0.1:3128
//! ```
//!
//! The actor is the caller's full executable path and pid; it is left out when the caller is
//! unknown. Where this departs from the reference's grammar, on purpose:
//! - an audited denial (`enforcement: audit`, forwarded) prints `AUDITED` where the reference
//!   prints the action label, and its would-be reason, so that `DENIED` always means a refusal;
//! - `bytes_in`/`bytes_out` use the OCSF orientation of the JSON event (`bytes_out` = sent by
//!   the client), so a line and its JSON agree;
//! - injected credential names appear as `[credentials_injected:A,B]`.
//!
//! Text that can come from the sandboxed side (executable paths, hosts, reasons quoting a
//! request) is printed with control characters neutralised, so no line can forge another.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::ocsf::{self, strip_query, url_string};
use super::{
    Caller, ConnectionClose, ConnectionOpen, Event, HttpRequest, Lifecycle, Outcome, PolicyChange,
    Severity,
};

/// At most this many bytes of a reason are printed, then `...`.
const MAX_REASON: usize = 256;

/// The shorthand of `event`, without a timestamp or newline.
pub fn shorthand(event: &Event) -> String {
    let sev = severity_label(ocsf::severity(event));
    match event {
        Event::ConnectionOpen(e) => open(e, sev),
        Event::ConnectionClose(e) => close(e, sev),
        Event::HttpRequest(e) => request(e, sev),
        Event::PolicyChange(e) => policy(e, sev),
        Event::Lifecycle(e) => lifecycle(e, sev),
        Event::Finding(e) => {
            let mut s = format!("FINDING:BLOCKED {sev} \"");
            push_clean(&mut s, &e.title.chars().take(120).collect::<String>());
            s.push_str("\" [type:");
            push_clean(&mut s, &e.kind);
            if let Some(c) = &e.credential {
                s.push_str(" credential:");
                push_clean(&mut s, c);
            }
            s.push(']');
            s
        }
        Event::Dns(e) => dns(e, sev),
    }
}

/// A log-file line: `<YYYY-MM-DDTHH:MM:SS.mmmZ> OCSF <shorthand>`, without a newline.
pub fn line(event: &Event) -> String {
    format!(
        "{} OCSF {}",
        utc_timestamp(event_time(event)),
        shorthand(event)
    )
}

/// `time` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC; a time before 1970 prints as the epoch).
pub fn utc_timestamp(time: SystemTime) -> String {
    let ms = ocsf::epoch_millis(time);
    let secs = ms / 1000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

fn event_time(event: &Event) -> SystemTime {
    match event {
        Event::ConnectionOpen(e) => e.time,
        Event::ConnectionClose(e) => e.time,
        Event::HttpRequest(e) => e.time,
        Event::PolicyChange(e) => e.time,
        Event::Lifecycle(e) => e.time,
        Event::Finding(e) => e.time,
        Event::Dns(e) => e.time,
    }
}

// === One function per event kind ===

fn open(e: &ConnectionOpen, sev: &str) -> String {
    let mut s = format!("NET:OPEN {sev} {} ", action_label(e.outcome));
    push_actor(&mut s, e.caller.as_deref());
    push_clean(&mut s, &e.dst.authority.to_string());
    push_rule(&mut s, e.policy.as_deref(), e.engine.as_str());
    push_reason(&mut s, e.outcome, e.reason.as_deref());
    s
}

fn close(e: &ConnectionClose, sev: &str) -> String {
    let mut s = format!("NET:CLOSE {sev} ");
    push_actor(&mut s, e.caller.as_deref());
    push_clean(&mut s, &e.dst.authority.to_string());
    push_rule(&mut s, e.policy.as_deref(), e.engine.as_str());
    // OCSF orientation, as in the JSON `traffic` object (see `ocsf::traffic`).
    let _ = write!(
        s,
        " [bytes_in:{} bytes_out:{} duration_ms:{}]",
        e.bytes_out, e.bytes_in, e.duration_ms
    );
    s
}

fn request(e: &HttpRequest, sev: &str) -> String {
    let mut s = String::from("HTTP:");
    push_clean(&mut s, &e.method);
    let _ = write!(s, " {sev} {} ", action_label(e.outcome));
    push_actor(&mut s, e.caller.as_deref());
    push_clean(&mut s, &e.method);
    s.push(' ');
    push_clean(
        &mut s,
        &url_string(e.scheme, &e.dst.authority, strip_query(&e.path)),
    );
    push_rule(&mut s, e.policy.as_deref(), e.engine.as_str());
    if !e.credentials.is_empty() {
        s.push_str(" [credentials_injected:");
        push_clean(&mut s, &e.credentials.join(","));
        s.push(']');
    }
    if let Some(signed) = &e.signed {
        s.push_str(" [re-signed:");
        push_clean(&mut s, signed);
        s.push(']');
    }
    push_reason(&mut s, e.outcome, e.reason.as_deref());
    s
}

fn policy(e: &PolicyChange, sev: &str) -> String {
    let state = if e.result.is_ok() { "LOADED" } else { "FAILED" };
    let mut s = format!("CONFIG:{state} {sev} ");
    push_clean(&mut s, &ocsf::policy_message(e));
    let mut context = Vec::new();
    if let Some(hash) = &e.hash {
        context.push(format!("hash:{hash}"));
    }
    if e.warnings > 0 {
        context.push(format!("warnings:{}", e.warnings));
    }
    if !context.is_empty() {
        s.push_str(" [");
        push_clean(&mut s, &context.join(" "));
        s.push(']');
    }
    s
}

fn lifecycle(e: &Lifecycle, sev: &str) -> String {
    let activity = if e.started { "START" } else { "STOP" };
    let mut s = format!("APP:{activity} {sev} {} {}", ocsf::PRODUCT_NAME, e.version);
    if !e.message.is_empty() {
        s.push(' ');
        push_clean(&mut s, &e.message);
    }
    s
}

/// `DNS:QUERY [INFO] ALLOWED 10.0.0.5:40000 -> api.example.com A NOERROR 203.0.113.7 [policy:api engine:dns]`.
fn dns(e: &super::DnsQuery, sev: &str) -> String {
    let mut s = format!("DNS:QUERY {sev} {} ", action_label(e.outcome));
    let _ = write!(s, "{} -> ", e.src);
    push_clean(&mut s, if e.name.is_empty() { "-" } else { &e.name });
    s.push(' ');
    push_clean(&mut s, &e.qtype);
    let _ = write!(s, " {}", ocsf::dns_rcode_label(e.rcode));
    for ip in &e.answers {
        let _ = write!(s, " {ip}");
    }
    push_rule(&mut s, e.policy.as_deref(), "dns");
    push_reason(&mut s, e.outcome, e.reason.as_deref());
    s
}

// === Pieces ===

/// `<exe>(<pid>) -> `, `tenant:<name> -> ` for a gateway tenant, or nothing for an unknown
/// caller.
fn push_actor(s: &mut String, caller: Option<&Caller>) {
    let Some(caller) = caller else { return };
    if let Some(tenant) = &caller.tenant {
        s.push_str("tenant:");
        push_clean(s, tenant);
        s.push_str(" -> ");
        return;
    }
    let p = &caller.process;
    if p.exe.is_empty() {
        s.push('?');
    } else {
        push_clean(s, &p.exe);
    }
    let _ = write!(s, "({}) -> ", p.pid);
}

fn push_rule(s: &mut String, policy: Option<&str>, engine: &str) {
    s.push_str(" [policy:");
    push_clean(s, policy.unwrap_or("-"));
    let _ = write!(s, " engine:{engine}]");
}

/// ` [reason:...]` for a denial or an audited would-be denial: control characters (CR, LF,
/// ...) become spaces, invisible format characters are written as `\u{..}` (as
/// [`push_clean`] writes them), and more than [`MAX_REASON`] bytes are cut at a character
/// boundary.
fn push_reason(s: &mut String, outcome: Outcome, reason: Option<&str>) {
    if outcome == Outcome::Allowed {
        return;
    }
    let Some(reason) = reason else { return };
    push_reason_text(s, reason);
}

/// ` [reason:...]`, cleaned and cut as `push_reason` says (also for `sluice audit`).
pub(crate) fn push_reason_text(s: &mut String, reason: &str) {
    let mut cut = reason.len().min(MAX_REASON);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    s.push_str(" [reason:");
    for c in reason[..cut].chars() {
        if c.is_control() {
            s.push(' ');
        } else if is_invisible_format(c) {
            // A reason quotes what the client sent (a path, a host): a right-to-left
            // override in it would reorder what the reader sees. Shown, not obeyed.
            let _ = write!(s, "\\u{{{:x}}}", u32::from(c));
        } else {
            s.push(c);
        }
    }
    if cut < reason.len() {
        s.push_str("...");
    }
    s.push(']');
}

/// Appends `text` with each control character written as `\u{..}`.
pub(crate) fn push_clean(s: &mut String, text: &str) {
    for c in text.chars() {
        if c.is_control() || is_invisible_format(c) {
            let _ = write!(s, "\\u{{{:x}}}", u32::from(c));
        } else {
            s.push(c);
        }
    }
}

/// Unicode format characters (general category Cf, Unicode 15.1) and the line and paragraph
/// separators: invisible, and able to reorder or split what a reader sees (a right-to-left
/// override makes `/tmp/evil\u{202e}lru\u{202d}c` read as something else). Escaped like
/// control characters in every line a person reads.
pub fn is_invisible_format(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}

fn action_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allowed => "ALLOWED",
        Outcome::Denied => "DENIED",
        Outcome::Audited => "AUDITED",
    }
}

pub(crate) fn severity_label(severity: Severity) -> &'static str {
    match severity {
        Severity::Informational => "[INFO]",
        Severity::Low => "[LOW]",
        Severity::Medium => "[MED]",
        Severity::High => "[HIGH]",
        Severity::Critical => "[CRIT]",
    }
}

/// (year, month, day) of a count of days since 1970-01-01, in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::ocsf::samples;
    use super::super::{Engine, Outcome};
    use super::*;

    #[test]
    fn invisible_format_characters_are_escaped_like_control_characters() {
        // Bidi overrides and isolates, zero-width characters, line separators, the BOM.
        let mut s = String::new();
        push_clean(
            &mut s,
            "/tmp/\u{202a}a\u{202e}b\u{2066}c\u{2069}d\u{200b}e\u{200f}f\u{2028}g\u{2029}h\u{feff}i\u{e0041}",
        );
        assert_eq!(
            s,
            "/tmp/\\u{202a}a\\u{202e}b\\u{2066}c\\u{2069}d\\u{200b}e\\u{200f}f\\u{2028}g\\u{2029}h\\u{feff}i\\u{e0041}"
        );
        let mut plain = String::new();
        push_clean(&mut plain, "/usr/bin/cürl – ok");
        assert_eq!(plain, "/usr/bin/cürl – ok");
    }

    #[test]
    fn allowed_open() {
        assert_eq!(
            shorthand(&Event::ConnectionOpen(samples::open(Outcome::Allowed))),
            "NET:OPEN [INFO] ALLOWED /usr/bin/curl(4242) -> api.github.com:443 \
             [policy:github engine:l4]"
        );
    }

    #[test]
    fn denied_open_carries_the_reason() {
        assert_eq!(
            shorthand(&Event::ConnectionOpen(samples::open(Outcome::Denied))),
            "NET:OPEN [MED] DENIED /usr/bin/curl(4242) -> example.com:443 \
             [policy:- engine:l4] [reason:endpoint example.com:443 is not allowed by any policy]"
        );
    }

    #[test]
    fn audited_open_is_marked_and_explained() {
        let mut e = samples::open(Outcome::Audited);
        e.reason = Some("would deny".into());
        assert_eq!(
            shorthand(&Event::ConnectionOpen(e)),
            "NET:OPEN [LOW] AUDITED /usr/bin/curl(4242) -> api.github.com:443 \
             [policy:github engine:l4] [reason:would deny]"
        );
    }

    #[test]
    fn unknown_caller_has_no_actor() {
        let mut e = samples::open(Outcome::Denied);
        e.caller = None;
        e.engine = Engine::Identity;
        e.reason = Some("failed to resolve peer binary".into());
        assert_eq!(
            shorthand(&Event::ConnectionOpen(e)),
            "NET:OPEN [MED] DENIED example.com:443 [policy:- engine:identity] \
             [reason:failed to resolve peer binary]"
        );
    }

    #[test]
    fn reason_is_one_line_and_bounded() {
        let mut e = samples::open(Outcome::Denied);
        e.reason = Some("a\r\nb".into());
        assert!(shorthand(&Event::ConnectionOpen(e.clone())).ends_with("[reason:a  b]"));

        e.reason = Some("é".repeat(200)); // 400 bytes; 256 is a char boundary
        let s = shorthand(&Event::ConnectionOpen(e.clone()));
        assert!(
            s.ends_with(&format!("[reason:{}...]", "é".repeat(128))),
            "{s}"
        );

        // Found by the `audit_lines` fuzz target: a format character in a reason (which
        // quotes the client's path) reached the reader's terminal as it was.
        e.reason = Some("GET /a\u{202e}gnp.exe not\u{70f}permitted".into());
        assert!(
            shorthand(&Event::ConnectionOpen(e.clone()))
                .ends_with("[reason:GET /a\\u{202e}gnp.exe not\\u{70f}permitted]")
        );

        e.reason = Some(format!("x{}", "é".repeat(200))); // 256 is mid-character
        let s = shorthand(&Event::ConnectionOpen(e));
        assert!(
            s.ends_with(&format!("[reason:x{}...]", "é".repeat(127))),
            "{s}"
        );
    }

    #[test]
    fn control_characters_cannot_forge_a_line() {
        let mut e = samples::open(Outcome::Allowed);
        if let Some(c) = e.caller.as_mut().map(std::sync::Arc::make_mut) {
            c.process.exe = "/tmp/x\nNET:OPEN [INFO] ALLOWED".into();
        }
        let s = shorthand(&Event::ConnectionOpen(e));
        assert!(!s.contains('\n'));
        assert!(
            s.starts_with("NET:OPEN [INFO] ALLOWED /tmp/x\\u{a}NET:OPEN"),
            "{s}"
        );
    }

    #[test]
    fn close_reports_bytes_and_duration() {
        assert_eq!(
            shorthand(&Event::ConnectionClose(samples::close())),
            "NET:CLOSE [INFO] /usr/bin/curl(4242) -> api.github.com:443 \
             [policy:github engine:l4] [bytes_in:4096 bytes_out:517 duration_ms:1250]"
        );
    }

    #[test]
    fn http_request_lines() {
        let mut e = samples::request(Outcome::Allowed);
        e.credentials.clear();
        assert_eq!(
            shorthand(&Event::HttpRequest(e)),
            "HTTP:GET [INFO] ALLOWED /usr/bin/curl(88) -> GET http://h:8080/path \
             [policy:p engine:l7]"
        );
        assert_eq!(
            shorthand(&Event::HttpRequest(samples::request(Outcome::Denied))),
            "HTTP:GET [MED] DENIED /usr/bin/curl(88) -> GET http://h:8080/path \
             [policy:p engine:l7] [credentials_injected:GITHUB_TOKEN] \
             [reason:GET /path not permitted by policy]"
        );
    }

    #[test]
    fn http_url_omits_default_port_and_query() {
        let mut e = samples::request(Outcome::Allowed);
        e.scheme = "https";
        e.dst.authority = crate::Authority::new("api.github.com", 443);
        e.path = "/repos?token=hunter2".into();
        e.method = "POST".into();
        e.caller = None;
        e.credentials = vec!["A".into(), "B".into()];
        assert_eq!(
            shorthand(&Event::HttpRequest(e)),
            "HTTP:POST [INFO] ALLOWED POST https://api.github.com/repos \
             [policy:p engine:l7] [credentials_injected:A,B]"
        );
    }

    #[test]
    fn config_lines() {
        assert_eq!(
            shorthand(&Event::PolicyChange(samples::policy_loaded())),
            "CONFIG:LOADED [INFO] policy loaded from a.yaml, b.yaml (3 entries, 5 endpoints) \
             [hash:sha256:abc123]"
        );
        let mut failed = samples::policy_failed();
        failed.warnings = 2;
        assert_eq!(
            shorthand(&Event::PolicyChange(failed)),
            "CONFIG:FAILED [HIGH] policy load failed: a.yaml:3:5: unknown field `hots` \
             [warnings:2]"
        );
    }

    #[test]
    fn lifecycle_lines() {
        assert_eq!(
            shorthand(&Event::Lifecycle(samples::start())),
            "APP:START [INFO] sluice 0.1.0 listening on 127.0.0.1:3128"
        );
        let mut stop = samples::start();
        stop.started = false;
        stop.message = String::new();
        assert_eq!(
            shorthand(&Event::Lifecycle(stop)),
            "APP:STOP [INFO] sluice 0.1.0"
        );
    }

    #[test]
    fn file_line_has_a_utc_millisecond_timestamp() {
        assert_eq!(
            line(&Event::Lifecycle(samples::start())),
            "2024-03-09T16:05:07.123Z OCSF APP:START [INFO] sluice 0.1.0 listening on 127.0.0.1:3128"
        );
    }

    #[test]
    fn utc_timestamps() {
        let at = |ms: u64| utc_timestamp(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(951_868_799_999), "2000-02-29T23:59:59.999Z");
        assert_eq!(at(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
        assert_eq!(at(1_709_251_199_001), "2024-02-29T23:59:59.001Z");
        assert_eq!(
            utc_timestamp(SystemTime::UNIX_EPOCH - Duration::from_secs(1)),
            "1970-01-01T00:00:00.000Z"
        );
    }
}
