//! What becomes of a run once it has ended (or paused): `[webhooks]`, where
//! it is posted, and `[retention]`, how long it is kept.

use serde::{Deserialize, Serialize};

/// Where runs may post their ends and pauses, and how.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// Hosts a run's `webhook.url` may name, each `host` (any port) or
    /// `host:port` (that port alone), compared as a URL's parsing writes
    /// them: none, no webhooks.
    pub allowed_hosts: Vec<String>,
    /// The variable holding the signing secret (`whsec_` and base64, as
    /// Standard Webhooks gives it, or any other text, used as it is).
    /// Required with `allowed_hosts`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// How long a delivery is tried again (with backoff) before it is
    /// given up.
    pub retry_for_ms: u64,
    /// Longest wait for one attempt's answer.
    pub timeout_ms: u64,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            secret_env: None,
            retry_for_ms: 3_600_000,
            timeout_ms: 10_000,
        }
    }
}

/// How long runs that have ended are kept.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Runs that ended this many days ago are removed, with their events,
    /// messages and workspace. None: kept forever.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_days: Option<u32>,
    /// How often the removal looks for runs past `keep_days`.
    pub sweep_interval_ms: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            keep_days: None,
            sweep_interval_ms: 3_600_000,
        }
    }
}
