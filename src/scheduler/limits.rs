//! A tenant's rate limit and token quota (SPEC section 16), checked when a
//! run is admitted: `runs_per_minute` as a token bucket a minute deep,
//! `max_tokens_per_day` as the tokens of the tenant's runs created in the
//! last 24 hours. Running runs are never stopped by either: only new runs
//! and follow-ups are refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::Refused;
use crate::config::TenantPolicy;
use crate::run::Tenant;
use crate::store::Store;

/// The window of `max_tokens_per_day`.
const QUOTA_WINDOW: chrono::Duration = chrono::Duration::hours(24);

/// The shortest wait a refusal asks for.
const MIN_RETRY: Duration = Duration::from_secs(1);

/// Rate limits and quotas of one process. The buckets are this process's:
/// on PostgreSQL each replica keeps its own (see the README).
pub struct Limits {
    policy: Arc<TenantPolicy>,
    store: Store,
    buckets: Buckets,
    /// Whether any tenant has a rate or a quota: without, admission does
    /// no such work.
    any: bool,
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

/// A run creation taken from its tenant's bucket: given back when dropped
/// unless [`Taken::keep`] is called (the run was not admitted after all).
#[must_use]
pub struct Taken<'l> {
    buckets: &'l Buckets,
    tenant: Option<(String, u32)>,
}

impl Taken<'_> {
    pub fn keep(mut self) {
        self.tenant = None;
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some((tenant, per_minute)) = self.tenant.take() {
            let mut buckets = self.buckets.0.lock().expect("rate buckets");
            if let Some(bucket) = buckets.get_mut(&tenant) {
                bucket.tokens = (bucket.tokens + 1.0).min(f64::from(per_minute));
            }
        }
    }
}

impl Limits {
    pub fn new(policy: Arc<TenantPolicy>, store: Store) -> Self {
        let any = policy.has_rates_or_quotas();
        Self {
            policy,
            store,
            buckets: Buckets::default(),
            any,
        }
    }

    /// Checks `tenant`'s quota, then takes a run creation from its bucket.
    pub async fn admit(&self, tenant: &Tenant) -> Result<Taken<'_>, Refused> {
        let mut taken = Taken {
            buckets: &self.buckets,
            tenant: None,
        };
        if !self.any {
            return Ok(taken);
        }
        let limits = self.policy.of(&tenant.0);
        if let Some(quota) = limits.max_tokens_per_day {
            self.check_quota(tenant, quota).await?;
        }
        if let Some(per_minute) = limits.runs_per_minute {
            self.buckets.take(&tenant.0, per_minute, Instant::now())?;
            taken.tenant = Some((tenant.0.clone(), per_minute));
        }
        Ok(taken)
    }

    async fn check_quota(&self, tenant: &Tenant, quota: u64) -> Result<(), Refused> {
        let since = Utc::now() - QUOTA_WINDOW;
        let storage = |error: crate::store::StoreError| Refused::Storage(error.to_string());
        let spent = self
            .store
            .tenant_use(tenant, since)
            .await
            .map_err(storage)?;
        if spent.tokens < quota {
            return Ok(());
        }
        let frees = self
            .store
            .tokens_fall_at(tenant, since, QUOTA_WINDOW, quota - 1)
            .await
            .map_err(storage)?;
        let retry_after = frees
            .and_then(|at| (at - Utc::now()).to_std().ok())
            .unwrap_or(MIN_RETRY)
            .max(MIN_RETRY);
        Err(Refused::QuotaExceeded {
            retry_after,
            spent: spent.tokens,
            quota,
        })
    }

    /// Each tenant's limits.
    pub fn policy(&self) -> &TenantPolicy {
        &self.policy
    }
}

impl Buckets {
    /// Takes one run creation from `tenant`'s bucket, refilled at
    /// `per_minute` a minute up to `per_minute`.
    fn take(&self, tenant: &str, per_minute: u32, now: Instant) -> Result<(), Refused> {
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
            return Ok(());
        }
        let retry_after = Duration::from_secs_f64((1.0 - bucket.tokens) / rate).max(MIN_RETRY);
        Err(Refused::RateLimited {
            retry_after,
            per_minute,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_a_minutes_worth_then_refills_at_its_rate() {
        let limits = Buckets::default();
        let start = Instant::now();
        for _ in 0..3 {
            limits.take("a", 3, start).unwrap();
        }
        let Err(Refused::RateLimited { retry_after, .. }) = limits.take("a", 3, start) else {
            panic!("a fourth run in the same instant");
        };
        assert_eq!(retry_after, Duration::from_secs(20));
        // Another tenant's bucket is its own.
        limits.take("b", 3, start).unwrap();
        // One run comes back every 20 s, never more than the bucket holds.
        assert!(
            limits
                .take("a", 3, start + Duration::from_secs(19))
                .is_err()
        );
        limits
            .take("a", 3, start + Duration::from_secs(21))
            .unwrap();
        let later = start + Duration::from_secs(3600);
        for _ in 0..3 {
            limits.take("a", 3, later).unwrap();
        }
        assert!(limits.take("a", 3, later).is_err());
    }

    #[test]
    fn a_run_not_admitted_after_all_gives_its_creation_back() {
        let limits = Buckets::default();
        let now = Instant::now();
        limits.take("a", 1, now).unwrap();
        drop(Taken {
            buckets: &limits,
            tenant: Some(("a".into(), 1)),
        });
        limits.take("a", 1, now).unwrap();
        assert!(limits.take("a", 1, now).is_err());
    }
}
