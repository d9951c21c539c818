//! The audit observer that turns events into counts: decisions by entry, engine, executable
//! and host; request latency; injections and scrubs by credential name; findings; live
//! tunnels. Called once for every event the audit sink writes, so each count is a count of
//! audit lines.

use super::{
    BinaryLabels, ClassLabel, CredentialLabel, DecisionLabels, HostLabels, KindLabel, Metrics,
    OutcomeLabel, ResultLabel,
};
use crate::audit::observe::Observer;
use crate::audit::{Caller, Event, Outcome, Via};
use crate::credentials::scrub::FINDING_REFLECTED;

/// Counts events into one registry.
#[derive(Debug)]
pub struct Counting(pub &'static Metrics);

impl Observer for Counting {
    fn observe(&self, event: &Event) {
        self.0.count(event);
    }
}

fn decision(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Allowed => "allowed",
        Outcome::Denied => "denied",
        Outcome::Audited => "audited",
    }
}

/// The policy entry label: the entry's key, or `-` when no entry decided (as the audit's
/// `firewall_rule.name`).
fn policy_label(policy: Option<&String>) -> String {
    policy.map_or_else(|| "-".to_owned(), Clone::clone)
}

impl Metrics {
    /// Counts one audit event.
    pub fn count(&self, event: &Event) {
        let class = match event {
            Event::ConnectionOpen(open) => {
                let d = decision(open.outcome);
                self.connections
                    .get_or_create(&DecisionLabels {
                        decision: d,
                        policy: policy_label(open.policy.as_ref()),
                        engine: open.engine.as_str(),
                    })
                    .inc();
                self.by_caller_and_host("connection", d, open.caller.as_deref(), open.dst.host());
                if open.via == Via::Connect && open.status == 200 && open.outcome != Outcome::Denied
                {
                    self.active_tunnels.inc();
                }
                "connection_open"
            }
            Event::ConnectionClose(close) => {
                if close.via == Via::Connect {
                    self.active_tunnels.dec();
                }
                "connection_close"
            }
            Event::HttpRequest(req) => {
                let d = decision(req.outcome);
                self.requests
                    .get_or_create(&DecisionLabels {
                        decision: d,
                        policy: policy_label(req.policy.as_ref()),
                        engine: req.engine.as_str(),
                    })
                    .inc();
                self.by_caller_and_host("request", d, req.caller.as_deref(), req.dst.host());
                // Audit records whole milliseconds.
                #[allow(clippy::cast_precision_loss)] // below 2^53 ms
                let seconds = req.duration_ms as f64 / 1000.0;
                self.request_seconds
                    .get_or_create(&OutcomeLabel { decision: d })
                    .observe(seconds);
                for name in &req.credentials {
                    self.injections
                        .get_or_create(&CredentialLabel {
                            credential: name.clone(),
                        })
                        .inc();
                }
                "http_request"
            }
            Event::Finding(f) => {
                self.findings
                    .get_or_create(&KindLabel {
                        kind: f.kind.clone(),
                    })
                    .inc();
                if f.kind == FINDING_REFLECTED {
                    for name in f.credential.iter().flat_map(|c| c.split(',')) {
                        self.scrubs
                            .get_or_create(&CredentialLabel {
                                credential: name.to_owned(),
                            })
                            .inc();
                    }
                }
                "finding"
            }
            Event::Dns(q) => {
                let result = if q.outcome == Outcome::Denied {
                    "refused"
                } else {
                    "answered"
                };
                self.dns.get_or_create(&ResultLabel { result }).inc();
                "dns"
            }
            Event::PolicyChange(_) => "policy_change",
            Event::Lifecycle(_) => "lifecycle",
        };
        self.audit_events.get_or_create(&ClassLabel { class }).inc();
    }

    fn by_caller_and_host(
        &self,
        kind: &'static str,
        decision: &'static str,
        caller: Option<&Caller>,
        host: &str,
    ) {
        // Audited traffic was let through: it counts as allowed here.
        let allowed = decision != "denied";
        let binary = match caller {
            // Tenants are few and named by the operator: each its own series.
            Some(c) if let Some(tenant) = &c.tenant => format!("tenant:{tenant}"),
            Some(c) => self
                .named
                .binary_label(&self.binaries, &c.process.exe, allowed),
            None => "_unidentified".to_owned(),
        };
        self.by_binary
            .get_or_create(&BinaryLabels {
                kind,
                decision,
                binary,
            })
            .inc();
        let tenant = caller.and_then(|c| c.tenant.as_deref());
        let host = self.named.host_label(&self.hosts, host, allowed, tenant);
        self.by_host
            .get_or_create(&HostLabels {
                kind,
                decision,
                host,
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::ocsf::samples;

    #[test]
    fn each_event_is_counted_once_by_its_labels() {
        let m = Metrics::new(10, None);
        m.count(&Event::ConnectionOpen(samples::open(Outcome::Allowed)));
        m.count(&Event::ConnectionOpen(samples::open(Outcome::Denied)));
        m.count(&Event::HttpRequest(samples::request(Outcome::Denied)));
        // The allowed CONNECT opened a tunnel; its close ends it.
        assert_eq!(m.active_tunnels.get(), 1);
        m.count(&Event::ConnectionClose(samples::close()));
        let text = m.encode();
        for line in [
            r#"sluice_connections_total{decision="allowed",policy="github",engine="l4"} 1"#,
            r#"sluice_connections_total{decision="denied",policy="-",engine="l4"} 1"#,
            r#"sluice_requests_total{decision="denied",policy="p",engine="l7"} 1"#,
            "sluice_active_tunnels 0",
            r#"sluice_audit_events_total{class="connection_open"} 2"#,
            r#"sluice_audit_events_total{class="http_request"} 1"#,
            r#"sluice_audit_events_total{class="connection_close"} 1"#,
            "sluice_max_connections 10",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
