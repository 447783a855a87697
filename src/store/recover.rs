//! Bringing a dead server's runs to rest: a SQLite server's previous
//! process at start (its `running` runs are queued again to resume, or end
//! `interrupted` past their resumes; its `queued` ones start again), and on
//! PostgreSQL a dead replica's, in its sweep.

use chrono::{DateTime, Utc};
use sqlx::{AnyConnection, Connection};

use super::{StatusChange, StoreError, Unfinished, rows, run_end_body};
use crate::harness::Outcome;
use crate::run::{Run, RunStatus, format_time};

/// What [`recover`] found.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Runs that were running and may not resume: now `interrupted`
    /// (their changes of status; their webhooks are in the outbox).
    pub interrupted: Vec<StatusChange>,
    /// Runs that were waiting, oldest first: to be started again.
    pub queued: Vec<Unfinished>,
}

/// Why a run is resumed (the `reason` of its `run_resumed` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeReason {
    /// Its server stopped without handing it over (SQLite's next start).
    Crash,
    /// Its server stopped after shutdown's grace and handed it over.
    Shutdown,
    /// Its replica's lease ran out (PostgreSQL's takeover).
    LeaseLost,
}

impl ResumeReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Crash => "crash",
            Self::Shutdown => "shutdown",
            Self::LeaseLost => "lease_lost",
        }
    }
}

/// Brings a running run whose process is gone to rest: queued again, to be
/// resumed from what was stored, with a `run_resumed` event after its last
/// one, while it has resumes left (`limits.max_resumes`); otherwise ended
/// `interrupted` as before. Its change of status.
pub(super) async fn rest(
    connection: &mut AnyConnection,
    run: &Run,
    tenant: String,
    reason: ResumeReason,
    now: DateTime<Utc>,
) -> Result<StatusChange, StoreError> {
    let started: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE run_id = $1")
        .bind(run.id.to_string())
        .fetch_one(&mut *connection)
        .await?;
    let status = if started == 0 {
        // Nothing of it happened: it starts as if it had never left the
        // queue.
        sqlx::query(
            "UPDATE runs SET status = 'queued', started_at = NULL, owner = NULL WHERE id = $1",
        )
        .bind(run.id.to_string())
        .execute(&mut *connection)
        .await?;
        RunStatus::Queued
    } else if run.resumes < run.limits.max_resumes {
        requeue(connection, run, reason, now).await?;
        RunStatus::Queued
    } else {
        interrupt(connection, run, now).await?;
        RunStatus::Ended(Outcome::Interrupted)
    };
    Ok(StatusChange {
        run_id: run.id,
        tenant,
        status,
        at: format_time(&now),
    })
}

/// Queues a run again, to resume, after a `run_resumed` event.
async fn requeue(
    connection: &mut AnyConnection,
    run: &Run,
    reason: ResumeReason,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let sequence: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(sequence), 0) + 1 FROM events WHERE run_id = $1")
            .bind(run.id.to_string())
            .fetch_one(&mut *connection)
            .await?;
    let attempt = run.resumes + 1;
    let body = serde_json::json!({
        "run_id": run.id,
        "sequence": sequence,
        "timestamp": now.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "type": "run_resumed",
        "attempt": attempt,
        "reason": reason.as_str(),
    })
    .to_string();
    sqlx::query(
        "INSERT INTO events (run_id, sequence, type, body) VALUES ($1, $2, 'run_resumed', $3)",
    )
    .bind(run.id.to_string())
    .bind(sequence)
    .bind(body)
    .execute(&mut *connection)
    .await?;
    sqlx::query("UPDATE runs SET status = 'queued', resumes = $1, owner = NULL WHERE id = $2")
        .bind(i64::from(attempt))
        .bind(run.id.to_string())
        .execute(&mut *connection)
        .await?;
    Ok(())
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
    let error = match run.resumes {
        0 => crate::run::INTERRUPTED.to_owned(),
        resumes => format!(
            "{} It was resumed {resumes} time(s) already (limits.max_resumes).",
            crate::run::INTERRUPTED
        ),
    };
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

/// Brings the previous process's live runs to rest: `running` ones are
/// queued again to resume (see [`rest`]), or past their resumes end
/// `interrupted` (their webhooks' deliveries written with their ends);
/// `queued` ones (these among them) are returned, oldest first, to be
/// started (or resumed) again. Paused runs stay paused: they hold nothing
/// but their row.
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
        let change = rest(
            &mut tx,
            &run,
            sqlx::Row::get(row, "tenant"),
            ResumeReason::Crash,
            now,
        )
        .await?;
        if change.status.is_terminal() {
            interrupted.push(change);
        }
    }
    // The webhooks of the runs it ended, in the same transaction.
    super::outbox::enqueue(&mut tx, &interrupted).await?;
    let queued = sqlx::query(rows::SELECT_LIVE_RUNS)
        .bind(RunStatus::Queued.as_str())
        .fetch_all(&mut *tx)
        .await?;
    // Not those queued behind a live run: they are let go when it ends
    // (see `crate::runner::waiting`).
    let queued = queued
        .iter()
        .map(rows::unfinished_from_row)
        .filter(|unfinished| {
            unfinished
                .as_ref()
                .map_or(true, |unfinished| unfinished.run.waiting_for.is_none())
        })
        .collect::<Result<Vec<_>, _>>()?;
    tx.commit().await?;
    Ok(Recovered {
        interrupted,
        queued,
    })
}
