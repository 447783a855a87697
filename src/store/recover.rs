//! Bringing a dead server's runs to rest: a SQLite server's previous
//! process at start (its `running` runs end `interrupted`, its `queued`
//! ones start again), and on PostgreSQL a dead replica's, in its sweep.

use chrono::{DateTime, Utc};
use sqlx::{AnyConnection, Connection};

use super::{StatusChange, StoreError, Unfinished, rows, run_end_body};
use crate::harness::Outcome;
use crate::run::{Run, RunStatus, format_time};

/// What [`recover`] found.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Runs that were running: now `interrupted` (their changes of
    /// status, for the webhooks' outbox).
    pub interrupted: Vec<StatusChange>,
    /// Runs that were waiting, oldest first: to be started again.
    pub queued: Vec<Unfinished>,
}

/// Ends a running run whose server is gone `interrupted`: a `run_end` after
/// its last event, its final state (its pause, if it resumed from one, is
/// over too).
pub(super) async fn interrupt(
    connection: &mut AnyConnection,
    run: &Run,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let sequence: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(sequence), 0) + 1 FROM events WHERE run_id = $1")
            .bind(run.id.to_string())
            .fetch_one(&mut *connection)
            .await?;
    let error = crate::run::INTERRUPTED.to_owned();
    let body = run_end_body(
        run,
        sequence,
        now,
        Outcome::Interrupted,
        Some(error.clone()),
    )?;
    sqlx::query("INSERT INTO events (run_id, sequence, type, body) VALUES ($1, $2, 'run_end', $3)")
        .bind(run.id.to_string())
        .bind(sequence)
        .bind(body)
        .execute(&mut *connection)
        .await?;
    sqlx::query(
        "UPDATE runs SET status = $1, error = $2, finished_at = $3, owner = NULL, \
         pending_actions = '[]', answers = '{}', action_deadline = NULL WHERE id = $4",
    )
    .bind(Outcome::Interrupted.as_str())
    .bind(&error)
    .bind(format_time(&now))
    .bind(run.id.to_string())
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// Brings the previous process's live runs to rest: `running` ones become
/// `interrupted` with a `run_end` event after their last one; `queued` ones
/// are returned, oldest first, to be started (or resumed) again. Paused runs
/// stay paused: they hold nothing but their row.
pub(super) async fn recover(
    connection: &mut AnyConnection,
    now: DateTime<Utc>,
) -> Result<Recovered, StoreError> {
    let mut tx = connection.begin().await?;
    let running = sqlx::query(rows::SELECT_LIVE_RUNS)
        .bind(RunStatus::Running.as_str())
        .fetch_all(&mut *tx)
        .await?;
    let mut interrupted = Vec::new();
    for row in &running {
        let run = rows::run_from_row(row)?;
        interrupt(&mut tx, &run, now).await?;
        interrupted.push(StatusChange {
            run_id: run.id,
            tenant: sqlx::Row::get(row, "tenant"),
            status: RunStatus::Ended(Outcome::Interrupted),
            at: format_time(&now),
        });
    }
    let queued = sqlx::query(rows::SELECT_LIVE_RUNS)
        .bind(RunStatus::Queued.as_str())
        .fetch_all(&mut *tx)
        .await?;
    let queued = queued
        .iter()
        .map(rows::unfinished_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    tx.commit().await?;
    Ok(Recovered {
        interrupted,
        queued,
    })
}
