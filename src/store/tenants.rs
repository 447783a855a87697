//! What a tenant has used: its runs and tokens over a recent window, and
//! its runs executing and waiting. Read from the runs themselves, so that
//! on PostgreSQL every replica reads the same use: a run's id is a UUID v7,
//! whose text sorts by the time it was created, so a window is a range of
//! the `(tenant, id)` index.

use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

use super::{Store, StoreError};
use crate::run::Tenant;

/// A tenant's use of the server.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TenantUse {
    /// Runs created in the window.
    pub runs: u64,
    /// Input and output tokens of the runs created in the window.
    pub tokens: u64,
    /// What the runs created in the window cost, in US dollars (those
    /// whose cost is known).
    pub cost_usd: f64,
}

/// Its runs executing and waiting now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantLive {
    pub running: u64,
    pub queued: u64,
}

impl Store {
    /// The runs `tenant` created since `since`, and their tokens.
    pub async fn tenant_use(
        &self,
        tenant: &Tenant,
        since: DateTime<Utc>,
    ) -> Result<TenantUse, StoreError> {
        let row = self
            .read(async |connection| {
                sqlx::query(
                    "SELECT COUNT(*), CAST(COALESCE(SUM(input_tokens + output_tokens), 0) AS BIGINT), \
                     CAST(COALESCE(SUM(cost_usd), 0) AS DOUBLE PRECISION) \
                     FROM runs WHERE tenant = $1 AND id >= $2",
                )
                .bind(&tenant.0)
                .bind(first_id_at(since))
                .fetch_one(connection)
                .await
            })
            .await?;
        Ok(TenantUse {
            runs: count(row.get::<i64, _>(0)),
            tokens: count(row.get::<i64, _>(1)),
            cost_usd: row.get::<f64, _>(2),
        })
    }

    /// When the tokens of `tenant`'s runs created since `since` fall to
    /// `below` or under, as its oldest runs leave a window of `window`:
    /// the creation of the first run whose leaving is enough, plus the
    /// window. `None` if they are under already.
    pub async fn tokens_fall_at(
        &self,
        tenant: &Tenant,
        since: DateTime<Utc>,
        window: chrono::Duration,
        below: u64,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let statement = "SELECT id FROM (SELECT id, \
             SUM(input_tokens + output_tokens) OVER (ORDER BY id) AS spent, \
             SUM(input_tokens + output_tokens) OVER () AS total \
             FROM runs WHERE tenant = $1 AND id >= $2) AS window_runs \
             WHERE total - spent <= $3 ORDER BY id LIMIT 1";
        let below = i64::try_from(below).unwrap_or(i64::MAX);
        self.use_falls_at(statement, tenant, since, window, below)
            .await
    }

    /// [`Store::tokens_fall_at`] for the cost of the runs: when it falls
    /// under `below` US dollars.
    pub async fn cost_falls_at(
        &self,
        tenant: &Tenant,
        since: DateTime<Utc>,
        window: chrono::Duration,
        below: f64,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let statement = "SELECT id FROM (SELECT id, \
             SUM(COALESCE(cost_usd, 0)) OVER (ORDER BY id) AS spent, \
             SUM(COALESCE(cost_usd, 0)) OVER () AS total \
             FROM runs WHERE tenant = $1 AND id >= $2) AS window_runs \
             WHERE total - spent < $3 ORDER BY id LIMIT 1";
        self.use_falls_at(statement, tenant, since, window, below)
            .await
    }

    /// Runs `statement`, which picks the first run of the window whose
    /// leaving takes the use under `below`, and gives the time it leaves.
    async fn use_falls_at<'q, T>(
        &self,
        statement: &'q str,
        tenant: &Tenant,
        since: DateTime<Utc>,
        window: chrono::Duration,
        below: T,
    ) -> Result<Option<DateTime<Utc>>, StoreError>
    where
        T: 'q + Send + sqlx::Encode<'q, sqlx::Any> + sqlx::Type<sqlx::Any> + Copy,
    {
        let row = self
            .read(async |connection| {
                sqlx::query(statement)
                    .bind(tenant.0.clone())
                    .bind(first_id_at(since))
                    .bind(below)
                    .fetch_optional(connection)
                    .await
            })
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let id: String = row.get(0);
        let created = Uuid::parse_str(&id)
            .ok()
            .and_then(|id| id.get_timestamp())
            .and_then(|at| {
                let (seconds, nanos) = at.to_unix();
                DateTime::from_timestamp(i64::try_from(seconds).ok()?, nanos)
            })
            .ok_or_else(|| StoreError::Corrupt(format!("run id {id} is not a UUID v7")))?;
        Ok(Some(created + window))
    }

    /// `tenant`'s runs executing (or paused between steps) and waiting.
    pub async fn tenant_live(&self, tenant: &Tenant) -> Result<TenantLive, StoreError> {
        let rows = self
            .read(async |connection| {
                sqlx::query(
                    "SELECT status, COUNT(*) FROM runs WHERE tenant = $1 \
                     AND status IN ('queued', 'running') GROUP BY status",
                )
                .bind(&tenant.0)
                .fetch_all(connection)
                .await
            })
            .await?;
        let mut live = TenantLive::default();
        for row in rows {
            let n = count(row.get::<i64, _>(1));
            match row.get::<String, _>(0).as_str() {
                "running" => live.running = n,
                _ => live.queued = n,
            }
        }
        Ok(live)
    }
}

/// The smallest run id created at `at` or later, as stored.
pub(super) fn first_id_at(at: DateTime<Utc>) -> String {
    let millis = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &[0; 10])
        .into_uuid()
        .to_string()
}

fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_id_of_a_time_sorts_before_every_id_made_from_then_on() {
        let at = Utc::now();
        let first = first_id_at(at);
        let later = Uuid::now_v7().to_string();
        assert!(first <= later, "{first} {later}");
        let before = first_id_at(at - chrono::Duration::milliseconds(1));
        assert!(before < first);
        let earlier = Uuid::now_v7().to_string();
        assert!(first_id_at(Utc::now() + chrono::Duration::milliseconds(2)) > earlier);
    }
}
