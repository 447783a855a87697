//! A tenant's rate limit and quotas (SPEC sections 16 and 22), checked when
//! a run is admitted: `runs_per_minute` as a token bucket a minute deep,
//! `max_tokens_per_day` and `max_cost_usd_per_day` as the tokens and the
//! cost of the tenant's runs created in the last 24 hours. Running runs are never stopped by either: only new runs
//! and follow-ups are refused, and a queued run that has not started
//! waits at its turn while its tenant's quota is spent (see
//! [`super::Turn::wait`]; on PostgreSQL, the claim).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::Refused;
use crate::config::{Quota, TenantPolicy};
use crate::run::Tenant;
use crate::store::cluster::Cluster;
use crate::store::{Store, StoreError};

/// The window of `max_tokens_per_day` and `max_cost_usd_per_day`.
const QUOTA_WINDOW: chrono::Duration = chrono::Duration::hours(24);

/// The shortest wait a refusal asks for.
const MIN_RETRY: Duration = Duration::from_secs(1);

/// A server's rate limits and quotas.
pub struct Limits {
    policy: Arc<TenantPolicy>,
    store: Store,
    rates: Rates,
    /// Whether any tenant has a rate or a quota: without, admission does
    /// no such work.
    any: bool,
}

/// Where the buckets of run creations are kept.
enum Rates {
    /// In this process (SQLite: the only one).
    Here(Buckets),
    /// In the database, shared by every replica (PostgreSQL).
    Shared(Arc<Cluster>),
}

/// Each tenant's token bucket of run creations.
#[derive(Default)]
struct Buckets(Mutex<HashMap<String, Bucket>>);

/// A token bucket: `tokens` when last counted, at `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Limits {
    /// Limits whose buckets are this process's, or with `cluster` the
    /// database's.
    pub fn new(policy: Arc<TenantPolicy>, store: Store, cluster: Option<Arc<Cluster>>) -> Self {
        let any = policy.has_rates_or_quotas();
        Self {
            policy,
            store,
            rates: match cluster {
                Some(cluster) => Rates::Shared(cluster),
                None => Rates::Here(Buckets::default()),
            },
            any,
        }
    }

    /// Refuses a run of `tenant` whose runs of the last 24 hours used its
    /// `max_tokens_per_day` or its `max_cost_usd_per_day`.
    pub async fn check_quota(&self, tenant: &Tenant) -> Result<(), Refused> {
        let quota = self.quota(tenant);
        if !quota.is_some() {
            return Ok(());
        }
        let since = Utc::now() - QUOTA_WINDOW;
        let storage = |error: StoreError| Refused::Storage(error.to_string());
        let spent = self
            .store
            .tenant_use(tenant, since)
            .await
            .map_err(storage)?;
        let (frees, spent) = match (quota.tokens, quota.cost_usd) {
            (Some(max), _) if spent.tokens >= max => (
                self.store
                    .tokens_fall_at(tenant, since, QUOTA_WINDOW, max - 1)
                    .await
                    .map_err(storage)?,
                format!("{} tokens of its {max}", spent.tokens),
            ),
            (_, Some(max)) if spent.cost_usd >= max => (
                self.store
                    .cost_falls_at(tenant, since, QUOTA_WINDOW, max)
                    .await
                    .map_err(storage)?,
                format!(
                    "${:.2} of its ${max} (max_cost_usd_per_day)",
                    spent.cost_usd
                ),
            ),
            _ => return Ok(()),
        };
        let retry_after = frees
            .and_then(|at| (at - Utc::now()).to_std().ok())
            .unwrap_or(MIN_RETRY)
            .max(MIN_RETRY);
        Err(Refused::QuotaExceeded { retry_after, spent })
    }

    /// [`Limits::check_quota`] for a queued run whose turn came: after
    /// everything this process handed its writer is stored, so that the
    /// use of the run whose end freed the slot is counted.
    pub async fn check_quota_at_turn(&self, tenant: &Tenant) -> Result<(), Refused> {
        if !self.quota(tenant).is_some() {
            return Ok(());
        }
        self.store.writer().barrier().await;
        self.check_quota(tenant).await
    }

    /// Whether any tenant has a token or cost quota.
    pub fn any_quota(&self) -> bool {
        self.any && self.policy.has_quotas()
    }

    /// `tenant`'s quotas (none when no tenant has any).
    pub fn quota(&self, tenant: &Tenant) -> Quota {
        if self.any {
            self.policy.of(&tenant.0).quota()
        } else {
            Quota::default()
        }
    }

    /// Takes a run creation from `tenant`'s bucket (`runs_per_minute`), the
    /// last check of an admission: a run refused by another never spends
    /// one.
    pub async fn take_rate(&self, tenant: &Tenant) -> Result<(), Refused> {
        let Some(per_minute) = self
            .any
            .then(|| self.policy.of(&tenant.0).runs_per_minute)
            .flatten()
        else {
            return Ok(());
        };
        let wait = match &self.rates {
            Rates::Here(buckets) => buckets.take(&tenant.0, per_minute, Instant::now()),
            Rates::Shared(cluster) => cluster
                .take_run_token(&tenant.0, per_minute)
                .await
                .map_err(|error| Refused::Storage(error.to_string()))?
                .map(Duration::from_secs_f64),
        };
        match wait {
            None => Ok(()),
            Some(wait) => Err(Refused::RateLimited {
                retry_after: wait.max(MIN_RETRY),
                per_minute,
            }),
        }
    }

    /// Each tenant's limits.
    pub fn policy(&self) -> &TenantPolicy {
        &self.policy
    }
}

impl Buckets {
    /// Takes one run creation from `tenant`'s bucket, refilled at
    /// `per_minute` a minute up to `per_minute`: `None` if taken, else how
    /// long until one is back.
    fn take(&self, tenant: &str, per_minute: u32, now: Instant) -> Option<Duration> {
        let capacity = f64::from(per_minute);
        let rate = capacity / 60.0;
        let mut buckets = self.0.lock().expect("rate buckets");
        let bucket = buckets.entry(tenant.to_owned()).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return None;
        }
        Some(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_a_minutes_worth_then_refills_at_its_rate() {
        let buckets = Buckets::default();
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(buckets.take("a", 3, start), None);
        }
        assert_eq!(
            buckets.take("a", 3, start),
            Some(Duration::from_secs(20)),
            "a fourth run in the same instant"
        );
        // Another tenant's bucket is its own.
        assert_eq!(buckets.take("b", 3, start), None);
        // One run comes back every 20 s, never more than the bucket holds.
        assert!(
            buckets
                .take("a", 3, start + Duration::from_secs(19))
                .is_some()
        );
        assert_eq!(buckets.take("a", 3, start + Duration::from_secs(21)), None);
        let later = start + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(buckets.take("a", 3, later), None);
        }
        assert!(buckets.take("a", 3, later).is_some());
    }
}
