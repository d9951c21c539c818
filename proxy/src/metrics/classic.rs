//! The Prometheus text format 0.0.4 rendering of the OpenMetrics exposition, for clients
//! that do not ask for OpenMetrics (`curl`, `promtool check metrics`, older scrapers).
//!
//! `prometheus-client` writes OpenMetrics 1.0 only. Both formats carry the same samples; they
//! differ in how a family is named and closed: an OpenMetrics counter family `x` has samples
//! `x_total` (and maybe `x_created`), so its `# HELP x` / `# TYPE x counter` lines name the
//! family, whereas in 0.0.4 the HELP and TYPE lines must name the sample (`x_total`), or
//! `promtool check metrics` reads the counter as one without help. 0.0.4 also has no `# UNIT`,
//! no `# EOF`, no exemplars and no `info`/`stateset` types (they become gauges, as the
//! Prometheus server reads them). Which format a scrape gets is [`wants_openmetrics`]'s to
//! say. Pure.

/// The content type of the 0.0.4 rendering.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Whether an `Accept` header value asks for OpenMetrics (Prometheus sends
/// `application/openmetrics-text;version=1.0.0,...` first); anything else, or none, gets 0.0.4.
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|media| {
            let mut parts = media.split(';');
            let kind = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            kind.eq_ignore_ascii_case("application/openmetrics-text") && !refused
        })
    })
}

/// The family type a `# TYPE` line declares, as far as the renaming cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    /// `info` and `stateset`: 0.0.4 reads them as gauges.
    AsGauge,
    Other,
}

/// `exposition` (OpenMetrics text, as `prometheus-client` writes it) in the 0.0.4 format.
pub fn render(exposition: &str) -> String {
    // HELP precedes TYPE in an OpenMetrics family, so a family's lines are held until its
    // TYPE says how to name them.
    let mut out = String::with_capacity(exposition.len());
    let mut help: Option<(&str, &str)> = None;
    let mut counter_family: Option<&str> = None;
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (kind, written) = match kind.trim() {
                "counter" => (Kind::Counter, "counter"),
                "gauge" => (Kind::Other, "gauge"),
                "histogram" => (Kind::Other, "histogram"),
                "summary" => (Kind::Other, "summary"),
                "info" | "stateset" => (Kind::AsGauge, "gauge"),
                _ => (Kind::Other, "untyped"),
            };
            let sample = match kind {
                Kind::Counter if !name.ends_with("_total") => format!("{name}_total"),
                Kind::AsGauge if kind_is_info(rest) => format!("{name}_info"),
                _ => name.to_string(),
            };
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {sample} {text}\n"));
            }
            out.push_str(&format!("# TYPE {sample} {written}\n"));
            counter_family = (kind == Kind::Counter).then_some(name);
            continue;
        }
        if line.starts_with("# ") || line == "#" {
            // `# UNIT`, `# EOF` and any other descriptor 0.0.4 does not have.
            continue;
        }
        if line.is_empty() {
            continue;
        }
        // A counter's `_created` sample is OpenMetrics only.
        if let Some(family) = counter_family
            && sample_name(line) == format!("{family}_created")
        {
            continue;
        }
        out.push_str(strip_exemplar(line));
        out.push('\n');
    }
    out
}

fn kind_is_info(type_line: &str) -> bool {
    type_line.trim_end().ends_with(" info")
}

/// The metric name a sample line starts with.
fn sample_name(line: &str) -> &str {
    let end = line.find(['{', ' ']).unwrap_or(line.len());
    &line[..end]
}

/// The sample without its exemplar (` # {labels} value [timestamp]` after the value). A `#`
/// inside a quoted label value is not one.
fn strip_exemplar(line: &str) -> &str {
    let mut quoted = false;
    let mut escaped = false;
    for (i, b) in line.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b'#' if !quoted && i > 0 && line.as_bytes()[i - 1] == b' ' => {
                return line[..i].trim_end();
            }
            _ => {}
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPENMETRICS: &str = "# HELP sluice_requests Requests judged.\n\
# TYPE sluice_requests counter\n\
sluice_requests_total{decision=\"allow\",policy=\"a # b\"} 3\n\
sluice_requests_created{decision=\"allow\"} 1700000000.0\n\
# HELP sluice_up Whether it is up.\n\
# TYPE sluice_up gauge\n\
# UNIT sluice_up\n\
sluice_up 1\n\
# HELP sluice_latency_seconds Latency.\n\
# TYPE sluice_latency_seconds histogram\n\
# UNIT sluice_latency_seconds seconds\n\
sluice_latency_seconds_sum 0.5\n\
sluice_latency_seconds_count 2\n\
sluice_latency_seconds_bucket{le=\"+Inf\"} 2 # {trace=\"x\"} 0.4\n\
# HELP sluice_build Build.\n\
# TYPE sluice_build info\n\
sluice_build_info{version=\"1\"} 1\n\
# EOF\n";

    #[test]
    fn counters_are_named_by_their_sample_and_openmetrics_only_lines_go() {
        let text = render(OPENMETRICS);
        assert_eq!(
            text,
            "# HELP sluice_requests_total Requests judged.\n\
# TYPE sluice_requests_total counter\n\
sluice_requests_total{decision=\"allow\",policy=\"a # b\"} 3\n\
# HELP sluice_up Whether it is up.\n\
# TYPE sluice_up gauge\n\
sluice_up 1\n\
# HELP sluice_latency_seconds Latency.\n\
# TYPE sluice_latency_seconds histogram\n\
sluice_latency_seconds_sum 0.5\n\
sluice_latency_seconds_count 2\n\
sluice_latency_seconds_bucket{le=\"+Inf\"} 2\n\
# HELP sluice_build_info Build.\n\
# TYPE sluice_build_info gauge\n\
sluice_build_info{version=\"1\"} 1\n"
        );
    }

    #[test]
    fn only_an_accepted_openmetrics_type_gets_openmetrics() {
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )));
        assert!(wants_openmetrics(Some("Application/OpenMetrics-Text")));
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(Some("text/plain")));
        assert!(!wants_openmetrics(Some(
            "application/openmetrics-text;q=0, text/plain"
        )));
    }
}
