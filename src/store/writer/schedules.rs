//! Schedules' writes, and a busy thread's, as transitions of the single
//! writer (see [`super::transition`]). A tick is advanced by a compare on
//! the tick that was due: whichever replica gets there first counts it;
//! a run queued behind another is let go by whoever clears its wait first.

use sqlx::AnyConnection;
use uuid::Uuid;

use super::transition::Transitioned;
use crate::run::{Tenant, format_time};
use crate::schedule::Schedule;
use crate::store::StoreError;

/// How a tick that made no run is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// It made a run (or one was made for it elsewhere).
    Made,
    /// The previous run was live (`overlap: skip`).
    Skipped,
    /// A limit of the tenant refused its run.
    Refused,
}

/// A new schedule (`create`), or an edit of a stored one: its counts stay,
/// and its next tick unless `next` is given (a tick moved on meanwhile by
/// the ticker is not put back).
pub(super) async fn save(
    connection: &mut AnyConnection,
    tenant: &Tenant,
    schedule: &Schedule,
    next: Option<&str>,
    create: bool,
) -> Result<Transitioned, StoreError> {
    let body = serde_json::to_string(&schedule.run)
        .map_err(|e| StoreError::Corrupt(format!("a schedule's body: {e}")))?;
    let query = if create {
        "INSERT INTO schedules (name, cron, timezone, body, thread, overlap, enabled, \
         next_run_at, updated_at, tenant, id, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
    } else {
        "UPDATE schedules SET name = $1, cron = $2, timezone = $3, body = $4, thread = $5, \
         overlap = $6, enabled = $7, next_run_at = COALESCE($8, next_run_at), updated_at = $9 \
         WHERE tenant = $10 AND id = $11 AND $12 IS NOT NULL"
    };
    let written = sqlx::query(query)
        .bind(schedule.name.as_deref())
        .bind(schedule.cron.as_str())
        .bind(schedule.timezone.as_str())
        .bind(body)
        .bind(schedule.thread.as_str())
        .bind(schedule.overlap.as_str())
        .bind(i64::from(schedule.enabled))
        .bind(next)
        .bind(format_time(&schedule.updated_at))
        .bind(&tenant.0)
        .bind(schedule.id.to_string())
        .bind(format_time(&schedule.created_at))
        .execute(&mut *connection)
        .await?;
    Ok(if written.rows_affected() == 1 {
        Transitioned::ScheduleSaved
    } else {
        Transitioned::NotFound
    })
}

pub(super) async fn delete(
    connection: &mut AnyConnection,
    tenant: &Tenant,
    id: Uuid,
) -> Result<Transitioned, StoreError> {
    let deleted = sqlx::query("DELETE FROM schedules WHERE tenant = $1 AND id = $2")
        .bind(&tenant.0)
        .bind(id.to_string())
        .execute(&mut *connection)
        .await?;
    Ok(if deleted.rows_affected() == 1 {
        Transitioned::Purged
    } else {
        Transitioned::NotFound
    })
}

/// Moves a schedule's next tick from `due` to `next`, counting the tick
/// as `counted`; nothing if another replica moved it first.
pub(super) async fn advance(
    connection: &mut AnyConnection,
    id: Uuid,
    due: &str,
    next: &str,
    counted: Counted,
) -> Result<Transitioned, StoreError> {
    let moved = sqlx::query(
        "UPDATE schedules SET next_run_at = $1, skipped_ticks = skipped_ticks + $2, \
         refused_ticks = refused_ticks + $3 WHERE id = $4 AND next_run_at = $5",
    )
    .bind(next)
    .bind(i64::from(counted == Counted::Skipped))
    .bind(i64::from(counted == Counted::Refused))
    .bind(id.to_string())
    .bind(due)
    .execute(&mut *connection)
    .await?;
    Ok(Transitioned::Advanced(moved.rows_affected() == 1))
}

/// Lets go of a run queued behind another: it may be claimed, or queued
/// here. Only the first to clear its wait does (`Released(true)`). A run
/// it waited for that ended without taking over what it continued (it was
/// itself waiting, and was cancelled) stands aside: the run waits instead
/// for what that one waited for, and continues what it would have
/// (`Released(false)` while that is still live).
pub(super) async fn release(
    connection: &mut AnyConnection,
    run_id: Uuid,
) -> Result<Transitioned, StoreError> {
    let id = run_id.to_string();
    let skipped: Option<(Option<String>, Option<String>, String)> = sqlx::query_as(
        "SELECT ahead.waiting_for, ahead.previous_run_id, ahead.id FROM runs AS waiting \
         JOIN runs AS ahead ON ahead.id = waiting.waiting_for \
         WHERE waiting.id = $1 AND waiting.status = 'queued' AND ahead.copy_pending = 1 \
         AND ahead.status NOT IN ('queued', 'running', 'requires_action')",
    )
    .bind(id.as_str())
    .fetch_optional(&mut *connection)
    .await?;
    if let Some((waits_for, continues, ahead)) = skipped {
        sqlx::query(
            "UPDATE runs SET waiting_for = $1, previous_run_id = CASE WHEN previous_run_id = $2 \
             THEN $3 ELSE previous_run_id END WHERE id = $4",
        )
        .bind(waits_for.as_deref())
        .bind(ahead.as_str())
        .bind(continues.as_deref())
        .bind(id.as_str())
        .execute(&mut *connection)
        .await?;
        if waits_for.is_some() {
            return Ok(Transitioned::Released(false));
        }
    }
    let released = sqlx::query(
        "UPDATE runs SET waiting_for = NULL \
         WHERE id = $1 AND waiting_for IS NOT NULL AND status = 'queued'",
    )
    .bind(id.as_str())
    .execute(&mut *connection)
    .await?;
    Ok(Transitioned::Released(released.rows_affected() == 1))
}

/// A run that waited for the run it continues takes its transcript, once:
/// as its first messages, as a follow-up accepted after that run's end
/// would have.
pub(super) async fn take_history(
    connection: &mut AnyConnection,
    run_id: Uuid,
) -> Result<Transitioned, StoreError> {
    let id = run_id.to_string();
    let previous: Option<Option<String>> = sqlx::query_scalar(
        "UPDATE runs SET copy_pending = 0 WHERE id = $1 AND copy_pending = 1 \
         RETURNING previous_run_id",
    )
    .bind(id.as_str())
    .fetch_optional(&mut *connection)
    .await?;
    if let Some(Some(previous)) = previous {
        sqlx::query(
            "INSERT INTO messages (run_id, position, body) \
             SELECT $1, position, body FROM messages WHERE run_id = $2",
        )
        .bind(id.as_str())
        .bind(previous)
        .execute(&mut *connection)
        .await?;
    }
    Ok(Transitioned::HistoryTaken)
}
