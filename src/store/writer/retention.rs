//! Removing runs that have ended: one a client purges, and those older than
//! the retention (`[retention] keep_days`). A run is removed whole, its
//! events and messages with it, in the transaction of its transition; its
//! workspace is the runner's to remove once that is committed.

use sqlx::AnyConnection;
use uuid::Uuid;

use super::transition::Transitioned;
use crate::run::{RunStatus, Tenant};
use crate::store::{StoreError, rows};

/// Removes run `run_id` of `tenant` if it has ended.
pub(super) async fn purge(
    connection: &mut AnyConnection,
    run_id: Uuid,
    tenant: &Tenant,
) -> Result<Transitioned, StoreError> {
    let status: Option<String> =
        sqlx::query_scalar("SELECT status FROM runs WHERE id = $1 AND tenant = $2")
            .bind(run_id.to_string())
            .bind(&tenant.0)
            .fetch_optional(&mut *connection)
            .await?;
    let Some(status) = status else {
        return Ok(Transitioned::NotFound);
    };
    let status = RunStatus::parse(&status)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown run status {status:?}")))?;
    if !status.is_terminal() {
        return Ok(Transitioned::Live(status));
    }
    remove(connection, &[run_id.to_string()]).await?;
    Ok(Transitioned::Purged)
}

/// Removes up to `limit` runs that ended before `before`, oldest first.
pub(super) async fn expire(
    connection: &mut AnyConnection,
    before: &str,
    limit: u32,
) -> Result<Transitioned, StoreError> {
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < $1 \
         AND status NOT IN ('queued', 'running', 'requires_action') \
         ORDER BY finished_at LIMIT $2",
    )
    .bind(before)
    .bind(i64::from(limit))
    .fetch_all(&mut *connection)
    .await?;
    remove(connection, &ids).await?;
    Ok(Transitioned::Expired(
        ids.iter()
            .filter_map(|id| rows::parse_uuid(id).ok())
            .collect(),
    ))
}

/// Deletes runs and what is theirs (foreign keys would, but neither engine
/// is relied on for it).
async fn remove(connection: &mut AnyConnection, ids: &[String]) -> Result<(), StoreError> {
    for id in ids {
        for statement in [
            "DELETE FROM webhook_deliveries WHERE run_id = $1",
            "DELETE FROM events WHERE run_id = $1",
            "DELETE FROM messages WHERE run_id = $1",
            "DELETE FROM run_seed_files WHERE run_id = $1",
            "DELETE FROM runs WHERE id = $1",
        ] {
            sqlx::query(statement)
                .bind(id)
                .execute(&mut *connection)
                .await?;
        }
    }
    Ok(())
}
