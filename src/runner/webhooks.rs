//! Webhooks: a run with a `webhook` gets its run object posted to that URL
//! when it ends or pauses, signed as Standard Webhooks gives it
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 of
//! HMAC-SHA256 over "id.timestamp.body">`), and retried with backoff until
//! it is answered 2xx or `[webhooks] retry_for_ms` has gone by (counted from
//! when the end or pause was stored). A slow or failing receiver never
//! holds a run back. A pause answered before its delivery was taken is no
//! longer posted: the run moved on, and its end will be.
//!
//! Deliveries are durable: each is a row of the store's outbox
//! ([`crate::store::outbox`]), written in the transaction of the end or
//! pause it tells of, and removed only once delivered or given up. The
//! dispatcher here takes due rows (woken by each end or pause committed,
//! and by the time the next one is due), makes one attempt of each on a
//! task of its own, a few hundred at most at once, and stores the outcome:
//! removed, or tried again later. It goes on through shutdown's grace,
//! until the runs are done and what is due then was tried (for a few
//! seconds at most); whatever is left, and whatever a crash left, the next
//! start delivers (on PostgreSQL, any replica). Delivery is at least once,
//! with the same `webhook-id` on every attempt, for receivers to
//! deduplicate.
//!
//! Only hosts of `[webhooks] allowed_hosts` are posted to (checked when the
//! run is accepted, and again before each attempt), and redirects are not
//! followed, so a run cannot make the server call anywhere else. The URL is
//! never logged (it may hold a secret of the receiver's). A server without
//! webhooks delivers nothing: what its outbox holds waits for one with.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Runner;
use crate::config::{TenantLimits, WebhooksConfig};
use crate::run::{Run, Tenant};
use crate::store::{Delivery, Store, Unreadable};
use crate::telemetry::Telemetry;

/// Deliveries under way at once; more wait their turn in the outbox.
const IN_FLIGHT: usize = 256;

/// First pause before a delivery is tried again; it doubles up to
/// [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// How often the outbox is looked at when nothing else wakes the
/// dispatcher: for deliveries whose replica's claim ran out, and after the
/// outbox could not be read.
const POLL: Duration = Duration::from_secs(1);

/// How long a replica's claim on a delivery outlasts the attempt's own
/// timeout: reading the run before it, storing its outcome after.
const CLAIM_MARGIN: Duration = Duration::from_secs(10);

/// Once the runs are done at shutdown, how long the dispatcher goes on
/// with what is due and under way; what is left is the next start's.
const DRAIN: Duration = Duration::from_secs(5);

/// Where and how runs' webhooks are delivered.
pub struct Webhooks {
    /// As configured, for messages.
    allowed_hosts: Vec<String>,
    /// Each entry's host, as a URL's parsing writes it, and its port when
    /// it pins one.
    allowed: Vec<(String, Option<u16>)>,
    key: Vec<u8>,
    /// The keys of tenants with one of their own
    /// (`[tenants.NAME] webhook_secret_env`).
    tenant_keys: HashMap<String, Vec<u8>>,
    /// Whether tenants are named (the server has tokens): the posted body
    /// names the run's, else it says `null`.
    named_tenants: bool,
    http: reqwest::Client,
    retry_for: Duration,
    /// Longest wait for one attempt's answer.
    timeout: Duration,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhooks")
            .field("allowed_hosts", &self.allowed_hosts)
            .finish_non_exhaustive()
    }
}

impl Webhooks {
    /// From the configuration, the secrets read from the variables it
    /// names (`env`): `[webhooks] secret_env`, and each tenant's
    /// `webhook_secret_env`. `named_tenants`: the server has tokens. An
    /// error says what is missing.
    pub fn new(
        config: &WebhooksConfig,
        tenants: &BTreeMap<String, TenantLimits>,
        named_tenants: bool,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let enabled = !config.allowed_hosts.is_empty();
        let read = |at: &str, name: &str| {
            env(name)
                .filter(|secret| !secret.is_empty())
                .ok_or_else(|| format!("{at} names {name}, which is not set"))
                .and_then(|secret| signing_key(&secret))
        };
        let key = match &config.secret_env {
            Some(name) if enabled => read("webhooks.secret_env", name)?,
            _ => Vec::new(),
        };
        let mut tenant_keys = HashMap::new();
        for (tenant, limits) in tenants {
            if let Some(name) = limits.webhook_secret_env.as_deref().filter(|_| enabled) {
                let at = format!("tenants.{tenant}.webhook_secret_env");
                tenant_keys.insert(tenant.clone(), read(&at, name)?);
            }
        }
        let allowed = config
            .allowed_hosts
            .iter()
            .map(|entry| crate::config::webhook_host(entry))
            .collect::<Result<_, _>>()?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_millis(config.timeout_ms))
            .user_agent(concat!("agent-runner/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot make the webhooks' HTTP client: {e}"))?;
        Ok(Self {
            allowed_hosts: config.allowed_hosts.clone(),
            allowed,
            key,
            tenant_keys,
            named_tenants,
            http,
            retry_for: Duration::from_millis(config.retry_for_ms),
            timeout: Duration::from_millis(config.timeout_ms),
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
        // As the URL's parsing writes it: `0x7f.1` is 127.0.0.1, and the
        // port is the scheme's when none is given.
        let host = parsed.host_str().unwrap_or_default();
        let port = parsed.port_or_known_default();
        let allowed = self.allowed.iter().any(|(allowed, pinned)| {
            allowed == host && pinned.is_none_or(|pinned| Some(pinned) == port)
        });
        if !allowed {
            let port = port
                .map(|port| format!(" (port {port})"))
                .unwrap_or_default();
            return Err(format!(
                "the host {host:?}{port} is not one of [webhooks] allowed_hosts ({})",
                self.allowed_hosts.join(", ")
            ));
        }
        Ok(())
    }

    /// The `webhook-signature` of a message of `tenant`'s: with its own key
    /// when it has one, else the server's.
    pub fn sign(&self, tenant: &str, id: &str, timestamp: i64, body: &str) -> String {
        let key = self.tenant_keys.get(tenant).unwrap_or(&self.key);
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
            return String::new();
        };
        mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
        format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
    }

    /// One attempt of `delivery`: the run as stored now is posted, unless
    /// it is gone, has no webhook, or moved on (a pause answered meanwhile:
    /// its run goes on, and its end will be posted).
    async fn attempt(&self, store: &Store, delivery: &Delivery, telemetry: &Telemetry) -> Attempt {
        let change = &delivery.change;
        let tenant = Tenant(change.tenant.clone());
        let attempt = delivery.attempts.saturating_add(1);
        match store.get_run(&tenant, change.run_id).await {
            // Purged, or no webhook: nothing to post.
            Ok(None) => Attempt::NotPosted,
            Ok(Some(run)) if run.webhook.is_none() => Attempt::NotPosted,
            Ok(Some(run)) if run.status != change.status => {
                tracing::info!(run_id = %run.id, was = %change.status, now = %run.status, "a run moved on before its webhook was taken; not posted");
                Attempt::NotPosted
            }
            Ok(Some(run)) => match self.post(&delivery.id, &tenant, &run, telemetry).await {
                Ok(()) => {
                    tracing::info!(run_id = %run.id, status = %run.status, attempt, "webhook delivered");
                    Attempt::Taken
                }
                Err(why) => Attempt::Failed(why),
            },
            Err(error) => Attempt::Failed(format!("the run could not be read: {error}")),
        }
    }

    /// When `delivery`, whose attempt failed at `now`, is tried again:
    /// `None` once that would be past `retry_for` from when it was stored
    /// (it is given up).
    fn next_attempt(&self, delivery: &Delivery, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let pause = backoff(delivery.attempts.saturating_add(1));
        let waited = (now - delivery.created_at).to_std().unwrap_or_default();
        if waited + pause > self.retry_for {
            return None;
        }
        Some(now + chrono::TimeDelta::from_std(pause).unwrap_or_default())
    }

    /// One attempt: `Err` says why it was not taken (never with the URL,
    /// which may hold a secret of the receiver's).
    async fn post(
        &self,
        id: &str,
        tenant: &Tenant,
        run: &Run,
        telemetry: &Telemetry,
    ) -> Result<(), String> {
        let Some(webhook) = &run.webhook else {
            return Ok(());
        };
        self.check(&webhook.url)
            .map_err(|why| format!("no longer allowed: {why}"))?;
        // The run object, and whose run it is: a receiver shared by several
        // tenants tells them apart (and each tenant's key signs its own).
        let mut body = serde_json::to_value(run).map_err(|e| format!("cannot serialise: {e}"))?;
        if let Some(object) = body.as_object_mut() {
            let named = self.named_tenants.then(|| tenant.0.clone());
            object.insert("tenant".into(), named.into());
        }
        let body = body.to_string();
        let timestamp = chrono::Utc::now().timestamp();
        let mut span = telemetry.client_span("POST webhook", &run.trace());
        let mut request = self
            .http
            .post(&webhook.url)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header(
                "webhook-signature",
                self.sign(&tenant.0, id, timestamp, &body),
            );
        if let Some(span) = &span {
            request = request.header("traceparent", span.traceparent());
        }
        let outcome = match request.body(body).send().await {
            Err(error) => Err(format!("failed: {}", error.without_url())),
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(format!("answered {}", response.status())),
        };
        if let (Some(span), Err(why)) = (&mut span, &outcome) {
            span.failed(why);
        }
        outcome
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

/// The pause after the `failed`-th failed attempt of a delivery: half a
/// second, doubling, at most a minute.
fn backoff(failed: u32) -> Duration {
    let doublings = failed.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1 << doublings).min(RETRY_MAX)
}

/// How an attempt went.
enum Attempt {
    /// Answered 2xx.
    Taken,
    /// Not to be posted (any more): its run is gone or moved on.
    NotPosted,
    /// Not taken, why (never with the URL).
    Failed(String),
}

impl Runner {
    /// Delivers the webhooks in the store's outbox, until the runs are done
    /// at shutdown (see [`Runner::shutdown`]). (A replica that lost its
    /// lease goes on delivering: deliveries are claimed for a time, not
    /// under its lease, and made at least once.)
    pub(super) fn deliver_webhooks(&self, webhooks: Arc<Webhooks>) {
        if !webhooks.enabled() {
            return;
        }
        let dispatcher = Dispatcher {
            store: self.services.store.clone(),
            webhooks,
            telemetry: Arc::clone(&self.services.telemetry),
            runs_done: self.lifecycle.runs_done.clone(),
            scheduler: Arc::clone(&self.scheduler),
        };
        self.lifecycle.webhooks.spawn(dispatcher.run());
    }
}

/// Takes the outbox's due deliveries and makes them, each on a task of its
/// own.
struct Dispatcher {
    store: Store,
    webhooks: Arc<Webhooks>,
    /// Each attempt is a span of its run's trace.
    telemetry: Arc<Telemetry>,
    /// Fires once the runs are done at shutdown: what is due then is tried,
    /// for [`DRAIN`] at most, and the dispatcher stops.
    runs_done: CancellationToken,
    /// Asked before deliveries are taken: a replica that lost its lease
    /// takes none until it joined again (it could not store their outcome,
    /// so each would be made twice).
    scheduler: Arc<dyn crate::scheduler::Scheduler>,
}

impl Dispatcher {
    async fn run(self) {
        let mut deliveries = JoinSet::new();
        // The deliveries under way, by their tasks' ids: never taken again
        // until their outcome is stored (on SQLite nothing else marks them).
        let mut under_way: HashMap<tokio::task::Id, String> = HashMap::new();
        let claim = self.webhooks.timeout + CLAIM_MARGIN;
        let mut drain_until: Option<tokio::time::Instant> = None;
        loop {
            let free = IN_FLIGHT.saturating_sub(deliveries.len());
            // Whether as many were due as could be taken (more may be).
            let mut full = false;
            let mut unread = false;
            if free > 0 && self.scheduler.unready().is_none() {
                let skip: HashSet<String> = under_way.values().cloned().collect();
                match self.store.take_deliveries(free, &skip, claim).await {
                    Ok(taken) => {
                        full = taken.len() == free;
                        for delivery in taken {
                            let id = match &delivery {
                                Ok(delivery) => delivery.id.clone(),
                                Err(unreadable) => unreadable.id.clone(),
                            };
                            let task = deliveries.spawn(settle(
                                self.store.clone(),
                                Arc::clone(&self.webhooks),
                                Arc::clone(&self.telemetry),
                                delivery,
                            ));
                            under_way.insert(task.id(), id);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the webhooks' outbox could not be read; looked at again later");
                        unread = true;
                    }
                }
            }
            if drain_until.is_some() && deliveries.is_empty() && !full && !unread {
                // Nothing under way, and nothing due: the rest is the next
                // start's.
                break;
            }
            let wait = if full {
                Duration::ZERO
            } else if unread || free == 0 {
                POLL
            } else {
                match self.store.next_delivery().await {
                    Ok(Some(at)) => (at - Utc::now()).to_std().unwrap_or_default().min(POLL),
                    _ => POLL,
                }
            };
            let drained = async {
                match drain_until {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = self.store.live().outbox_changed() => {}
                Some(joined) = deliveries.join_next_with_id(), if !deliveries.is_empty() => {
                    let task = match joined {
                        Ok((task, ())) => task,
                        Err(error) => {
                            tracing::error!(%error, "a webhook's delivery task failed");
                            error.id()
                        }
                    };
                    under_way.remove(&task);
                }
                () = tokio::time::sleep(wait) => {}
                () = self.runs_done.cancelled(), if drain_until.is_none() => {
                    drain_until = Some(tokio::time::Instant::now() + DRAIN);
                }
                () = drained => break,
            }
        }
        if !deliveries.is_empty() {
            tracing::info!(
                deliveries = deliveries.len(),
                "webhooks still under way as the server stops; delivered by the next start"
            );
        }
        deliveries.shutdown().await;
    }
}

/// Makes one attempt of a delivery taken from the outbox, and stores what
/// became of it: removed once taken or not to be posted (or given up),
/// otherwise tried again later. An unreadable row is removed.
async fn settle(
    store: Store,
    webhooks: Arc<Webhooks>,
    telemetry: Arc<Telemetry>,
    delivery: Result<Delivery, Unreadable>,
) {
    let writer = store.writer();
    let delivery = match delivery {
        Ok(delivery) => delivery,
        Err(unreadable) => {
            tracing::error!(id = %unreadable.id, why = %unreadable.why, "a webhook's delivery is unreadable; removed");
            if let Err(error) = writer.delivered(unreadable.id).await {
                tracing::warn!(%error, "an unreadable webhook's delivery could not be removed");
            }
            return;
        }
    };
    let run_id = delivery.change.run_id;
    let pause = backoff(delivery.attempts.saturating_add(1));
    let settled = match webhooks.attempt(&store, &delivery, &telemetry).await {
        Attempt::Taken | Attempt::NotPosted => writer.delivered(delivery.id).await,
        Attempt::Failed(why) => {
            let attempt = delivery.attempts.saturating_add(1);
            match webhooks.next_attempt(&delivery, Utc::now()) {
                Some(next) => {
                    tracing::info!(%run_id, attempt, %why, "a webhook was not taken; tried again later");
                    writer.retry_delivery(delivery.id, next).await
                }
                None => {
                    tracing::warn!(%run_id, attempt, %why, "a webhook was not taken in time; given up");
                    writer.delivered(delivery.id).await
                }
            }
        }
    };
    if let Err(error) = settled {
        tracing::warn!(%run_id, %error, "what became of a webhook could not be stored; it may be posted again");
        // Its row is still due: it stays under way here for a while rather
        // than being taken (and posted) again at once. (On PostgreSQL its
        // claim keeps it from every replica meanwhile.)
        tokio::time::sleep(pause).await;
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
        let webhooks = Webhooks::new(&config, &BTreeMap::new(), false, |_| {
            Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into())
        })
        .unwrap();
        assert_eq!(
            webhooks.sign(
                "default",
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
        let missing = Webhooks::new(&config, &BTreeMap::new(), false, |_| None).unwrap_err();
        assert!(missing.contains("not set"), "{missing}");
    }

    /// The pause doubles from half a second up to a minute, and a delivery
    /// is given up once the next attempt would come past `retry_for` from
    /// when it was stored.
    #[test]
    fn a_failed_delivery_backs_off_until_its_time_is_up() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(8), Duration::from_secs(60));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(60));
        let config = WebhooksConfig {
            allowed_hosts: vec!["example.com".into()],
            retry_for_ms: 10_000,
            ..WebhooksConfig::default()
        };
        let webhooks = Webhooks::new(&config, &BTreeMap::new(), false, |_| None).unwrap();
        let stored = Utc::now();
        let delivery = |attempts| Delivery {
            id: "msg".into(),
            change: crate::store::StatusChange {
                run_id: uuid::Uuid::now_v7(),
                tenant: String::new(),
                status: crate::run::RunStatus::RequiresAction,
                at: String::new(),
            },
            created_at: stored,
            attempts,
        };
        let now = stored + chrono::TimeDelta::seconds(5);
        assert_eq!(
            webhooks.next_attempt(&delivery(0), now),
            Some(now + chrono::TimeDelta::milliseconds(500))
        );
        assert_eq!(
            webhooks.next_attempt(&delivery(3), now),
            Some(now + chrono::TimeDelta::seconds(4))
        );
        assert_eq!(webhooks.next_attempt(&delivery(4), now), None, "5 + 8 s");
    }
}
