//! Where OTLP export goes: `--otlp-endpoint URL`, or the standard variables
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL: `/v1/logs` and `/v1/traces` are appended),
//! `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` and `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (whole URLs,
//! used as they are), and `OTEL_EXPORTER_OTLP_PROTOCOL` (only `http/protobuf`). The flag wins
//! over the variables. Nothing set: no export.

/// The signal URLs to export to; `None` leaves that signal off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpConfig {
    pub logs: Option<String>,
    pub traces: Option<String>,
}

/// A configuration sluice cannot export with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "{var}={value}: sluice exports OTLP as http/protobuf only (grpc and http/json are not built in)"
    )]
    Protocol { var: &'static str, value: String },
    #[error(
        "{source_name} `{url}` is not an http:// URL: sluice's OTLP exporter speaks plain HTTP (send to a local collector that forwards over TLS)"
    )]
    Url { source_name: String, url: String },
}

const PROTOCOL_VARS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
];

impl OtlpConfig {
    /// The configuration from the flag and the environment (`env` looks a variable up);
    /// `Ok(None)` when nothing asks for export.
    pub fn resolve(
        flag: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<OtlpConfig>, ConfigError> {
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        for var in PROTOCOL_VARS {
            if let Some(value) = env(var)
                && value.trim() != "http/protobuf"
            {
                return Err(ConfigError::Protocol { var, value });
            }
        }
        let joined = |base: &str, path: &str| format!("{}{path}", base.trim_end_matches('/'));
        let (logs, traces, source) = if let Some(base) = flag {
            (
                Some(joined(base, "/v1/logs")),
                Some(joined(base, "/v1/traces")),
                "--otlp-endpoint",
            )
        } else {
            let base = env("OTEL_EXPORTER_OTLP_ENDPOINT");
            let logs = env("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")
                .or_else(|| base.as_deref().map(|b| joined(b, "/v1/logs")));
            let traces = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .or_else(|| base.as_deref().map(|b| joined(b, "/v1/traces")));
            (logs, traces, "OTEL_EXPORTER_OTLP_*")
        };
        if logs.is_none() && traces.is_none() {
            return Ok(None);
        }
        for url in logs.iter().chain(traces.iter()) {
            if !url.starts_with("http://") || url.len() <= "http://".len() {
                return Err(ConfigError::Url {
                    source_name: source.to_string(),
                    url: url.clone(),
                });
            }
        }
        Ok(Some(OtlpConfig { logs, traces }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_string())
        }
    }

    #[test]
    fn nothing_set_means_no_export() {
        assert_eq!(OtlpConfig::resolve(None, env(&[])), Ok(None));
    }

    #[test]
    fn the_flag_and_the_base_variable_get_signal_paths() {
        let want = Some(OtlpConfig {
            logs: Some("http://c:4318/v1/logs".into()),
            traces: Some("http://c:4318/v1/traces".into()),
        });
        assert_eq!(
            OtlpConfig::resolve(Some("http://c:4318/"), env(&[])),
            Ok(want.clone())
        );
        let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")];
        assert_eq!(OtlpConfig::resolve(None, env(&vars)), Ok(want));
    }

    #[test]
    fn signal_variables_are_used_as_they_are() {
        let vars = [("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://c/logs")];
        assert_eq!(
            OtlpConfig::resolve(None, env(&vars)),
            Ok(Some(OtlpConfig {
                logs: Some("http://c/logs".into()),
                traces: None
            }))
        );
    }

    #[test]
    fn other_protocols_and_schemes_are_refused() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        assert!(matches!(
            OtlpConfig::resolve(None, env(&vars)),
            Err(ConfigError::Protocol { .. })
        ));
        assert!(matches!(
            OtlpConfig::resolve(Some("https://c:4318"), env(&[])),
            Err(ConfigError::Url { .. })
        ));
    }
}
