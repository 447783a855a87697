//! Tenants across replicas (SPEC section 16): which tenant's queued run a
//! claim takes (round robin over the tenants with runs waiting, oldest
//! first within one, each within its concurrency limit), and each tenant's
//! bucket of run creations, all kept in the database so that every limit
//! holds for the whole database.

use sqlx::AnyConnection;
use sqlx::any::AnyRow;

use super::Cluster;
use crate::store::{StoreError, rows};

/// A tenant's concurrency limit for the whole database, if it has one.
pub type ConcurrencyLimit<'a> = &'a (dyn Fn(&str) -> Option<usize> + Sync);

/// The oldest queued run of the tenant served least recently that has runs
/// waiting and a slot left under its limit, locked for the claim. A
/// limited tenant's turn row is locked while its running runs are counted,
/// so that two replicas never both take its last slot.
pub(super) async fn next_queued(
    tx: &mut AnyConnection,
    limit: ConcurrencyLimit<'_>,
) -> Result<Option<AnyRow>, sqlx::Error> {
    let tenants: Vec<String> = sqlx::query_scalar(
        "SELECT waiting.tenant FROM (SELECT tenant, MIN(id) AS first FROM runs \
         WHERE status = 'queued' GROUP BY tenant) AS waiting \
         LEFT JOIN tenant_turns AS turns ON turns.tenant = waiting.tenant \
         ORDER BY turns.served NULLS FIRST, waiting.first",
    )
    .fetch_all(&mut *tx)
    .await?;
    for tenant in tenants {
        if let Some(max) = limit(&tenant) {
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
        let row = sqlx::query(rows::SELECT_NEXT_QUEUED_OF_TENANT)
            .bind(&tenant)
            .fetch_optional(&mut *tx)
            .await?;
        if row.is_some() {
            return Ok(row);
        }
    }
    Ok(None)
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
