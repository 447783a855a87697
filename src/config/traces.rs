//! `[tracing]`: where a run's spans go (SPEC section 17).

use serde::{Deserialize, Serialize};

/// The standard variables, read when the table leaves a key unset.
pub const OTLP_ENDPOINT_VARIABLE: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub const SERVICE_NAME_VARIABLE: &str = "OTEL_SERVICE_NAME";

/// The service name spans carry by default.
pub const DEFAULT_SERVICE_NAME: &str = "agent-runner";

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// An OTLP over HTTP receiver (`http://host:4318`; spans go to its
    /// `/v1/traces`). Unset, and without `OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// nothing is exported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the spans (default `agent-runner`, or
    /// `OTEL_SERVICE_NAME`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Whether prompts, answers, tool arguments and results go into spans.
    pub record_content: bool,
    /// The share of traces recorded (0 to 1), decided from the trace id,
    /// for runs and requests whose caller sent no `traceparent`; with one,
    /// its sampled flag decides.
    pub sample_ratio: f64,
}

impl Default for TracingConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: None,
            record_content: false,
            sample_ratio: 1.0,
        }
    }
}

impl TracingConfig {
    /// Where spans are sent (`.../v1/traces`), if anywhere: the table's
    /// endpoint, else the standard variable's.
    pub fn traces_url(&self, env: impl Fn(&str) -> Option<String>) -> Option<String> {
        let endpoint = self
            .otlp_endpoint
            .clone()
            .or_else(|| env(OTLP_ENDPOINT_VARIABLE))
            .filter(|endpoint| !endpoint.trim().is_empty())?;
        let endpoint = endpoint.trim().trim_end_matches('/');
        Some(if endpoint.ends_with("/v1/traces") {
            endpoint.to_owned()
        } else {
            format!("{endpoint}/v1/traces")
        })
    }

    /// The spans' `service.name`.
    pub fn service(&self, env: impl Fn(&str) -> Option<String>) -> String {
        self.service_name
            .clone()
            .or_else(|| env(SERVICE_NAME_VARIABLE))
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned())
    }

    /// What is wrong with the table, if anything.
    pub(super) fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(format!(
                "tracing.sample_ratio must be from 0 to 1: {}",
                self.sample_ratio
            ));
        }
        if let Some(endpoint) = &self.otlp_endpoint {
            let parsed = reqwest::Url::parse(endpoint).map_err(|error| {
                format!("tracing.otlp_endpoint must be an http(s) URL ({error}): {endpoint:?}")
            })?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                return Err(format!(
                    "tracing.otlp_endpoint must be an http(s) URL with a host: {endpoint:?}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_wins_over_the_standard_variables_and_traces_go_to_v1_traces() {
        let env = |name: &str| match name {
            OTLP_ENDPOINT_VARIABLE => Some("http://collector:4318/".to_owned()),
            SERVICE_NAME_VARIABLE => Some("from-env".to_owned()),
            _ => None,
        };
        let unset = TracingConfig::default();
        assert_eq!(
            unset.traces_url(env).as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(unset.service(env), "from-env");
        assert_eq!(unset.traces_url(|_| None), None);
        assert_eq!(unset.service(|_| None), "agent-runner");
        let set = TracingConfig {
            otlp_endpoint: Some("http://127.0.0.1:6006/v1/traces".into()),
            service_name: Some("mine".into()),
            ..TracingConfig::default()
        };
        assert_eq!(
            set.traces_url(env).as_deref(),
            Some("http://127.0.0.1:6006/v1/traces")
        );
        assert_eq!(set.service(env), "mine");
        assert!(set.check().is_ok());
        let bad = TracingConfig {
            otlp_endpoint: Some("collector:4318".into()),
            ..TracingConfig::default()
        };
        assert!(bad.check().unwrap_err().contains("tracing.otlp_endpoint"));
        for ratio in [-0.1, 1.5, f64::NAN] {
            let bad = TracingConfig {
                sample_ratio: ratio,
                ..TracingConfig::default()
            };
            assert!(bad.check().unwrap_err().contains("tracing.sample_ratio"));
        }
    }
}
