//! `sluice policy suggest`: from the denials of an audit log, the smallest policy entries that
//! would have allowed them, one entry per caller and destination host, as a policy document
//! for a human to review and load next to the running policy (`--policy` again).
//!
//! What "smallest" means here: an L4 denial of a connection (no request seen) becomes that
//! host and port for that executable; a refused HTTP request (L4 or L7) becomes a `rest`
//! endpoint with one `allow` rule for exactly its method and path (glob characters in the
//! path escaped, so the rule matches that path only). Denials a policy entry cannot answer
//! (unidentified callers, blocked addresses, malformed requests, credential misuse) are
//! listed in the header, not drafted.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::read::{Decision, Record};

/// OCSF HTTP Activity: one inspected request.
const HTTP_ACTIVITY: u64 = 4002;

/// One endpoint being drafted: a host and port, open (`None`) or with these
/// (method, path) rules.
type Rules = Option<BTreeSet<(String, String)>>;

/// The draft: entries keyed by (binary, host), each with its ports.
#[derive(Debug, Default)]
pub struct Draft {
    entries: BTreeMap<(String, String), BTreeMap<u16, Rules>>,
    /// Denials not drafted, with why (counted per reason).
    skipped: BTreeMap<String, u64>,
    drafted: u64,
}

impl Draft {
    /// Considers one record; only policy denials at L4 or L7 are drafted.
    pub fn add(&mut self, r: &Record) {
        if r.decision != Some(Decision::Denied) {
            return;
        }
        let engine = r.engine.as_deref().unwrap_or("");
        if engine != "l4" && engine != "l7" {
            let why = format!("refused by `{engine}`, which no policy entry changes");
            *self.skipped.entry(why).or_default() += 1;
            return;
        }
        let (Some(binary), Some(host), Some(port)) = (&r.binary, &r.host, r.port) else {
            *self
                .skipped
                .entry("no caller or destination recorded".to_string())
                .or_default() += 1;
            return;
        };
        let request = r.method.as_ref().zip(r.path.as_ref());
        // A refused request is drafted as exactly that request, never as the whole host: one
        // whose method or path was not recorded, or whose method the policy language reads as
        // something wider (`*` is "any method"), is listed instead.
        let is_request = engine == "l7" || r.class_uid == HTTP_ACTIVITY || r.method.is_some();
        if is_request && request.is_none() {
            let why = "refused a request whose method and path were not recorded, so no entry grants only it";
            *self.skipped.entry(why.to_string()).or_default() += 1;
            return;
        }
        if let Some((m, _)) = request
            && m == "*"
        {
            let why = "refused the method `*`, which a policy rule can only read as every method";
            *self.skipped.entry(why.to_string()).or_default() += 1;
            return;
        }
        self.drafted += 1;
        let ports = self
            .entries
            .entry((binary.clone(), host.to_ascii_lowercase()))
            .or_default();
        match (ports.get_mut(&port), request) {
            // Already open for any request.
            (Some(None), _) => {}
            (Some(Some(rules)), Some((m, p))) => {
                rules.insert((m.to_ascii_uppercase(), p.clone()));
            }
            (None, Some((m, p))) => {
                ports.insert(
                    port,
                    Some(BTreeSet::from([(m.to_ascii_uppercase(), p.clone())])),
                );
            }
            (_, None) => {
                ports.insert(port, None);
            }
        }
    }

    /// How many denials the draft answers.
    pub fn drafted(&self) -> u64 {
        self.drafted
    }

    /// The policy document, headed by a comment saying what it is and what to check.
    pub fn render(&self, source: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# Drafted by `sluice policy suggest` from {}: entries that would have allowed {} denied",
            one_line(source),
            self.drafted
        );
        s.push_str("# request(s) and connection(s), one per program and destination host.\n");
        s.push_str("# REVIEW BEFORE USE: each entry grants exactly what was refused; make sure the program\n");
        s.push_str("# should reach it. Check with `sluice policy check`, then load it next to the running\n");
        s.push_str("# policy (another --policy) and reload.\n");
        for (why, n) in &self.skipped {
            let _ = writeln!(s, "# Not drafted: {n} denial(s) {}.", one_line(why));
        }
        s.push_str("version: 1\n");
        if self.entries.is_empty() {
            s.push_str("network_policies: {}\n");
            return s;
        }
        s.push_str("network_policies:\n");
        let mut names = BTreeSet::new();
        for ((binary, host), ports) in &self.entries {
            let name = unique(&mut names, entry_name(binary, host));
            let _ = writeln!(s, "  {name}:");
            s.push_str("    endpoints:\n");
            for (port, rules) in ports {
                let _ = writeln!(s, "      - host: {}", quoted(host));
                let _ = writeln!(s, "        port: {port}");
                if let Some(rules) = rules {
                    s.push_str(
                        "        protocol: rest\n        enforcement: enforce\n        rules:\n",
                    );
                    for (method, path) in rules {
                        let _ = writeln!(
                            s,
                            "          - allow: {{method: {}, path: {}}}",
                            quoted(method),
                            quoted(&escape_glob(path))
                        );
                    }
                }
            }
            s.push_str("    binaries:\n");
            let _ = writeln!(s, "      - path: {}", quoted(&escape_glob(binary)));
        }
        s
    }
}

/// A YAML double-quoted scalar (JSON string syntax, which YAML reads the same), with the
/// invisible format characters escaped (`\u202E`, which YAML reads back as the character),
/// so the draft a person reviews shows them.
fn quoted(text: &str) -> String {
    let json = serde_json::Value::String(text.to_string()).to_string();
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match u32::from(c) {
            _ if !super::shorthand::is_invisible_format(c) => out.push(c),
            n @ ..=0xFFFF => {
                let _ = write!(out, "\\u{n:04X}");
            }
            n => {
                let _ = write!(out, "\\U{n:08X}");
            }
        }
    }
    out
}

/// `text` with the glob characters escaped, so a pattern matches it alone.
fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || super::shorthand::is_invisible_format(c) {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// `suggested_<program>_<host>`, lower case, letters, digits and `_` only.
fn entry_name(binary: &str, host: &str) -> String {
    let program = binary.rsplit('/').next().unwrap_or(binary);
    let raw = format!("suggested_{program}_{host}");
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(100);
    name
}

fn unique(taken: &mut BTreeSet<String>, name: String) -> String {
    let mut candidate = name.clone();
    let mut n = 2;
    while !taken.insert(candidate.clone()) {
        candidate = format!("{name}_{n}");
        n += 1;
    }
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Severity;

    fn denied(engine: &str, binary: &str, port: u16, request: Option<(&str, &str)>) -> Record {
        Record {
            time_ms: 0,
            class_uid: if request.is_some() { 4002 } else { 4001 },
            label: String::new(),
            severity: Severity::Medium,
            decision: Some(Decision::Denied),
            binary: Some(binary.into()),
            pid: Some(1),
            host: Some("API.example.com".into()),
            port: Some(port),
            scheme: Some("https".into()),
            method: request.map(|r| r.0.to_string()),
            path: request.map(|r| r.1.to_string()),
            policy: None,
            engine: Some(engine.into()),
            reason: None,
            message: String::new(),
            dns: None,
        }
    }

    #[test]
    fn invisible_format_characters_are_escaped_in_the_draft_and_read_back() {
        let mut d = Draft::default();
        let sneaky = "/tmp/\u{202e}lruc\u{202d}\u{200b}/x\u{feff}";
        d.add(&denied("l4", sneaky, 443, None));
        let text = d.render("audit.jsonl");
        assert!(
            text.contains("\"/tmp/\\u202Elruc\\u202D\\u200B/x\\uFEFF\""),
            "{text}"
        );
        assert!(
            !text
                .chars()
                .any(super::super::shorthand::is_invisible_format),
            "{text}"
        );
        let source = sluice_policy::Source {
            name: "draft.yaml".into(),
            text,
        };
        let loaded = sluice_policy::load(&[source], sluice_policy::Compat::Strict).unwrap();
        let entry = &loaded.policy.entries()[0];
        assert!(
            format!("{entry:?}").contains(&format!("{sneaky:?}")),
            "{entry:?}"
        );
    }

    #[test]
    fn a_draft_never_grants_more_than_the_refused_request() {
        // The finding: an L7 refusal of an extension method read back without its method and
        // became an uninspected grant of the whole host and port.
        let mut d = Draft::default();
        d.add(&denied(
            "l7",
            "/usr/bin/curl",
            443,
            Some(("PROPFIND", "/dav/")),
        ));
        d.add(&denied("l7", "/usr/bin/curl", 443, Some(("*", "/x"))));
        let mut unrecorded = denied("l7", "/usr/bin/curl", 8443, None);
        unrecorded.class_uid = 4002;
        d.add(&unrecorded);
        let text = d.render("audit.jsonl");
        assert_eq!(d.drafted(), 1, "{text}");
        let body = text.split("version: 1\n").nth(1).unwrap();
        assert_eq!(
            body,
            "network_policies:\n  suggested_curl_api_example_com:\n    endpoints:\n      - host: \"api.example.com\"\n        port: 443\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {method: \"PROPFIND\", path: \"/dav/\"}\n    binaries:\n      - path: \"/usr/bin/curl\"\n"
        );
        assert!(
            text.contains("# Not drafted: 1 denial(s) refused the method `*`"),
            "{text}"
        );
        assert!(text.contains("# Not drafted: 1 denial(s) refused a request whose method and path were not recorded"), "{text}");
        // What it drafts loads, and allows exactly the refused request.
        let source = sluice_policy::Source {
            name: "draft.yaml".into(),
            text,
        };
        sluice_policy::load(&[source], sluice_policy::Compat::Strict).unwrap();
    }

    #[test]
    fn requests_become_exact_rules_and_connections_open_endpoints() {
        let mut d = Draft::default();
        d.add(&denied(
            "l7",
            "/usr/bin/curl",
            443,
            Some(("get", "/v1/a*b")),
        ));
        d.add(&denied("l7", "/usr/bin/curl", 443, Some(("POST", "/v1/x"))));
        d.add(&denied("l7", "/usr/bin/curl", 443, Some(("POST", "/v1/x"))));
        d.add(&denied("l4", "/usr/bin/curl", 8443, None));
        d.add(&denied(
            "l4",
            "/usr/bin/curl",
            8443,
            Some(("GET", "/ignored")),
        ));
        d.add(&denied("identity", "/usr/bin/curl", 443, None));
        let text = d.render("audit.jsonl");
        assert_eq!(d.drafted(), 5);
        let body = text.split("version: 1\n").nth(1).unwrap();
        assert_eq!(
            body,
            "network_policies:\n  suggested_curl_api_example_com:\n    endpoints:\n      - host: \"api.example.com\"\n        port: 443\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {method: \"GET\", path: \"/v1/a\\\\*b\"}\n          - allow: {method: \"POST\", path: \"/v1/x\"}\n      - host: \"api.example.com\"\n        port: 8443\n    binaries:\n      - path: \"/usr/bin/curl\"\n"
        );
        assert!(text.contains("# Not drafted: 1 denial(s) refused by `identity`"));
        assert!(text.contains("REVIEW BEFORE USE"));
    }
}
