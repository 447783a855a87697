//! Webhooks: a run with a `webhook` gets its run object posted to that URL
//! when it ends or pauses, signed as Standard Webhooks gives it
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 of
//! HMAC-SHA256 over "id.timestamp.body">`), and retried with backoff until
//! it is answered 2xx or `[webhooks] retry_for_ms` has gone by. Deliveries
//! run on tasks of their own, a few hundred at most at once (more wait
//! their turn): a slow or failing receiver never holds a run back. A pause
//! answered before its delivery was taken is no longer posted: the run
//! moved on, and its end will be.
//!
//! Only hosts of `[webhooks] allowed_hosts` are posted to (checked when the
//! run is accepted, and again before each delivery), and redirects are not
//! followed, so a run cannot make the server call anywhere else. The ends
//! and pauses come from the store's outbox, once committed, on the replica
//! that committed them: each is delivered once (at least once while this
//! process lives; one pending when it dies is not delivered: there is no
//! durable outbox yet).

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::Runner;
use crate::config::WebhooksConfig;
use crate::run::{Run, Tenant};
use crate::store::StatusChange;

/// Deliveries under way at once (each may be waiting between attempts);
/// more wait their turn, in order.
const IN_FLIGHT: usize = 256;

/// First pause before a delivery is tried again; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// Where and how runs' webhooks are delivered.
pub struct Webhooks {
    allowed_hosts: Vec<String>,
    key: Vec<u8>,
    http: reqwest::Client,
    retry_for: Duration,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("allowed_hosts", &self.allowed_hosts)
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    /// From the configuration, the secret read from the variable it names
    /// (`env`): an error says what is missing.
    pub fn new(
        config: &WebhooksConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let key = match &config.secret_env {
            Some(name) if !config.allowed_hosts.is_empty() => {
                let secret = env(name)
                    .filter(|secret| !secret.is_empty())
                    .ok_or_else(|| format!("webhooks.secret_env names {name}, which is not set"))?;
                signing_key(&secret)?
            }
            _ => Vec::new(),
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_millis(config.timeout_ms))
            .user_agent(concat!("agent-runner/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot make the webhooks' HTTP client: {e}"))?;
        Ok(Self {
            allowed_hosts: config.allowed_hosts.clone(),
            key,
            http,
            retry_for: Duration::from_millis(config.retry_for_ms),
        })
    }

    /// Whether runs may have webhooks.
    pub fn enabled(&self) -> bool {
        !self.allowed_hosts.is_empty()
    }

    /// Why `url` is not a webhook this server posts to, if it is not.
    pub fn check(&self, url: &str) -> Result<(), String> {
        if !self.enabled() {
            return Err(
                "webhooks are not enabled on this server ([webhooks] allowed_hosts)".into(),
            );
        }
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!("{url:?} must be http or https"));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(format!("{url:?} must not carry credentials"));
        }
        let host = parsed.host_str().unwrap_or_default();
        if !self.allowed_hosts.iter().any(|allowed| allowed == host) {
            return Err(format!(
                "the host {host:?} is not one of [webhooks] allowed_hosts ({})",
                self.allowed_hosts.join(", ")
            ));
        }
        Ok(())
    }

    /// The `webhook-signature` of a message.
    pub fn sign(&self, id: &str, timestamp: i64, body: &str) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.key) else {
            return String::new();
        };
        mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
        format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
    }

    /// Posts the run of `change` to its webhook until it is taken (2xx) or
    /// the retries run out: the run as stored, read before each attempt. A
    /// pause that was answered meanwhile is no longer posted (its run goes
    /// on, and its end will be). Whether it was taken.
    async fn deliver(&self, runner: &Runner, change: &StatusChange) -> bool {
        // One id for the message, whatever the attempts (receivers dedupe
        // on it), and the same should it be sent again.
        let digest = Sha256::digest(format!("{}.{}", change.status, change.at));
        let id = format!(
            "msg_{}_{}",
            change.run_id.simple(),
            hex::encode(&digest[..8])
        );
        let tenant = Tenant(change.tenant.clone());
        let began = Instant::now();
        let mut pause = RETRY_FIRST;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let why = match runner.services.store.get_run(&tenant, change.run_id).await {
                // Purged, or no webhook: nothing to post.
                Ok(None) => return false,
                Ok(Some(run)) if run.webhook.is_none() => return false,
                Ok(Some(run)) if run.status != change.status => {
                    tracing::info!(run_id = %run.id, was = %change.status, now = %run.status, "a run moved on before its webhook was taken; not posted");
                    return false;
                }
                Ok(Some(run)) => match self.post(&id, &run).await {
                    Ok(()) => {
                        tracing::info!(run_id = %run.id, status = %run.status, attempt, "webhook delivered");
                        return true;
                    }
                    Err(why) => why,
                },
                Err(error) => format!("the run could not be read: {error}"),
            };
            if began.elapsed() + pause > self.retry_for {
                tracing::warn!(run_id = %change.run_id, attempt, %why, "a webhook was not taken in time; given up");
                return false;
            }
            tracing::info!(run_id = %change.run_id, attempt, %why, "a webhook was not taken; tried again later");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
        }
    }

    /// One attempt: `Err` says why it was not taken (never with the URL,
    /// which may hold a secret of the receiver's).
    async fn post(&self, id: &str, run: &Run) -> Result<(), String> {
        let Some(webhook) = &run.webhook else {
            return Ok(());
        };
        self.check(&webhook.url)
            .map_err(|why| format!("no longer allowed: {why}"))?;
        let body = serde_json::to_string(run).map_err(|e| format!("cannot serialise: {e}"))?;
        let timestamp = chrono::Utc::now().timestamp();
        let response = self
            .http
            .post(&webhook.url)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", self.sign(id, timestamp, &body))
            .body(body)
            .send()
            .await
            .map_err(|error| format!("failed: {}", error.without_url()))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("answered {}", response.status()))
        }
    }
}

/// The HMAC key of a secret: Standard Webhooks' `whsec_<base64>`, or the
/// text itself.
fn signing_key(secret: &str) -> Result<Vec<u8>, String> {
    match secret.strip_prefix("whsec_") {
        Some(encoded) => BASE64
            .decode(encoded)
            .map_err(|_| "the webhook secret after whsec_ is not base64".to_owned()),
        None => Ok(secret.as_bytes().to_vec()),
    }
}

impl Runner {
    /// Delivers the webhooks of the ends and pauses committed here, each on
    /// a task of its own, until the server stops.
    pub(super) fn deliver_webhooks(&self, webhooks: Arc<Webhooks>) {
        if !webhooks.enabled() {
            return;
        }
        let (outbox, mut changes) = mpsc::unbounded_channel::<StatusChange>();
        self.services.store.live().set_outbox(outbox);
        let runner = self.clone();
        let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        tokio::spawn(async move {
            loop {
                let change = tokio::select! {
                    change = changes.recv() => change,
                    () = runner.lifecycle.closing.cancelled() => None,
                };
                let Some(change) = change else { return };
                let slot = tokio::select! {
                    slot = Arc::clone(&slots).acquire_owned() => slot,
                    () = runner.lifecycle.closing.cancelled() => return,
                };
                let Ok(slot) = slot else { return };
                let (runner, webhooks) = (runner.clone(), Arc::clone(&webhooks));
                tokio::spawn(async move {
                    webhooks.deliver(&runner, &change).await;
                    drop(slot);
                });
            }
        });
    }

    /// Ends committed before the outbox was there (a previous process's
    /// runs, brought to rest at start) go to it now.
    pub fn post_ended(&self, changes: Vec<StatusChange>) {
        if let Some(outbox) = self.services.store.live().outbox() {
            for change in changes {
                let _ = outbox.send(change);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard Webhooks' own example: this secret, id, timestamp and body
    /// sign as given in its specification's test vectors.
    #[test]
    fn signatures_follow_standard_webhooks() {
        let config = WebhooksConfig {
            allowed_hosts: vec!["example.com".into()],
            secret_env: Some("S".into()),
            ..WebhooksConfig::default()
        };
        let webhooks = Webhooks::new(&config, |_| {
            Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into())
        })
        .unwrap();
        assert_eq!(
            webhooks.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                r#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        assert!(webhooks.check("https://example.com/hook").is_ok());
        assert!(webhooks.check("https://evil.example/hook").is_err());
        assert!(webhooks.check("https://user:pw@example.com/hook").is_err());
        assert!(webhooks.check("ftp://example.com/hook").is_err());
        let missing = Webhooks::new(&config, |_| None).unwrap_err();
        assert!(missing.contains("not set"), "{missing}");
    }
}
