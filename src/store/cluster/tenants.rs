//! Tenants across replicas (SPEC section 16): which tenant's queued run a
//! claim takes (round robin over the tenants with runs waiting, oldest
//! first within one, each within its concurrency limit), and each tenant's
//! bucket of run creations, all kept in the database so that every limit
//! holds for the whole database.

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::Cluster;
use crate::config::Quota;
use crate::store::{StoreError, rows};

/// What a claim holds each tenant to across the database.
pub struct ClaimLimits<'a> {
    /// A tenant's concurrency limit, if it has one.
    pub concurrency: &'a (dyn Fn(&str) -> Option<usize> + Sync),
    /// A tenant's `max_tokens_per_day` and `max_cost_usd_per_day`: while
    /// its runs of the last 24 hours used one, its runs that have not
    /// started wait.
    pub quota: &'a (dyn Fn(&str) -> Quota + Sync),
}

/// The window of a token quota.
const QUOTA_WINDOW: chrono::Duration = chrono::Duration::hours(24);

/// The oldest queued run, due now, of the tenant served least recently
/// that has runs waiting and a slot left under its limit, locked for the
/// claim; of a tenant whose token quota is spent, only a run that started
/// before (resumed, or its pause answered). A limited tenant's turn row is
/// locked while its running runs are counted, so that two replicas never
/// both take its last slot.
pub(super) async fn next_queued(
    tx: &mut AnyConnection,
    limits: &ClaimLimits<'_>,
    now: &str,
) -> Result<Option<AnyRow>, sqlx::Error> {
    let tenants: Vec<String> = sqlx::query_scalar(
        "SELECT waiting.tenant FROM (SELECT tenant, MIN(id) AS first FROM runs \
         WHERE status = 'queued' AND (not_before IS NULL OR not_before <= $1) \
         AND waiting_for IS NULL GROUP BY tenant) AS waiting \
         LEFT JOIN tenant_turns AS turns ON turns.tenant = waiting.tenant \
         ORDER BY turns.served NULLS FIRST, waiting.first",
    )
    .bind(now)
    .fetch_all(&mut *tx)
    .await?;
    for tenant in tenants {
        let quota = (limits.quota)(&tenant);
        let fresh_may_start = if quota.is_some() {
            let (tokens, cost) = use_of_window(tx, &tenant).await?;
            quota.tokens.is_none_or(|max| tokens < max)
                && quota.cost_usd.is_none_or(|max| cost < max)
        } else {
            true
        };
        if let Some(max) = (limits.concurrency)(&tenant) {
            sqlx::query(
                "INSERT INTO tenant_turns (tenant) VALUES ($1) ON CONFLICT (tenant) DO NOTHING",
            )
            .bind(&tenant)
            .execute(&mut *tx)
            .await?;
            sqlx::query("SELECT tenant FROM tenant_turns WHERE tenant = $1 FOR UPDATE")
                .bind(&tenant)
                .execute(&mut *tx)
                .await?;
            let running: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM runs WHERE tenant = $1 AND status = 'running'",
            )
            .bind(&tenant)
            .fetch_one(&mut *tx)
            .await?;
            if usize::try_from(running).unwrap_or(usize::MAX) >= max {
                continue;
            }
        }
        let next = if fresh_may_start {
            rows::SELECT_NEXT_QUEUED_OF_TENANT
        } else {
            rows::SELECT_NEXT_STARTED_QUEUED_OF_TENANT
        };
        let row = sqlx::query(next)
            .bind(&tenant)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
        if row.is_some() {
            return Ok(row);
        }
    }
    Ok(None)
}

/// The input and output tokens of `tenant`'s runs created in the last 24
/// hours (as [`crate::store::Store::tenant_use`] counts them).
async fn use_of_window(tx: &mut AnyConnection, tenant: &str) -> Result<(u64, f64), sqlx::Error> {
    let since = crate::store::tenants::first_id_at(chrono::Utc::now() - QUOTA_WINDOW);
    let row = sqlx::query(
        "SELECT CAST(COALESCE(SUM(input_tokens + output_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(cost_usd), 0) AS DOUBLE PRECISION) \
         FROM runs WHERE tenant = $1 AND id >= $2",
    )
    .bind(tenant)
    .bind(since)
    .fetch_one(&mut *tx)
    .await?;
    let tokens: i64 = row.get(0);
    Ok((u64::try_from(tokens).unwrap_or(0), row.get(1)))
}

/// Records that `tenant` was just served: its turn goes to the back.
pub(super) async fn served(tx: &mut AnyConnection, tenant: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO tenant_turns (tenant, served) VALUES ($1, clock_timestamp()) \
         ON CONFLICT (tenant) DO UPDATE SET served = clock_timestamp()",
    )
    .bind(tenant)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The tokens of a bucket refilled at `per_minute` a minute up to
/// `per_minute`, as of now (SQL over the row `bucket`; `$2` is
/// `per_minute`).
macro_rules! refilled {
    () => {
        "LEAST($2, bucket.tokens + \
         CAST(EXTRACT(EPOCH FROM (clock_timestamp() - bucket.at)) AS DOUBLE PRECISION) * $2 / 60.0)"
    };
}

impl Cluster {
    /// Takes one run creation from `tenant`'s bucket (`per_minute` a
    /// minute, as deep): `Ok(None)` if taken, else the seconds until one is
    /// back.
    pub async fn take_run_token(
        &self,
        tenant: &str,
        per_minute: u32,
    ) -> Result<Option<f64>, StoreError> {
        let capacity = f64::from(per_minute);
        let taken: Option<f64> = sqlx::query_scalar(concat!(
            "INSERT INTO tenant_buckets AS bucket (tenant, tokens, at) \
             VALUES ($1, $2 - 1, clock_timestamp()) \
             ON CONFLICT (tenant) DO UPDATE SET tokens = ",
            refilled!(),
            " - 1, at = clock_timestamp() WHERE ",
            refilled!(),
            " >= 1 RETURNING tokens"
        ))
        .bind(tenant)
        .bind(capacity)
        .fetch_optional(&self.pool)
        .await?;
        if taken.is_some() {
            return Ok(None);
        }
        let left: Option<f64> = sqlx::query_scalar(concat!(
            "SELECT ",
            refilled!(),
            " FROM tenant_buckets AS bucket WHERE tenant = $1"
        ))
        .bind(tenant)
        .bind(capacity)
        .fetch_optional(&self.pool)
        .await?;
        let left = left.unwrap_or(0.0).min(1.0);
        Ok(Some((1.0 - left) * 60.0 / capacity))
    }
}
