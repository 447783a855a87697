//! Changes that depend on what is stored: answering a paused run, and ending
//! one. Each is read, checked and written in one transaction of the single
//! writer, so two clients answering at once, or an answer racing the pause's
//! timeout, each see the other's result and never both apply.

use chrono::{DateTime, Utc};
use sqlx::Executor;
use sqlx::sqlite::SqliteConnection;
use uuid::Uuid;

use crate::harness::{Outcome, PendingAction, check_answers};
use crate::run::{ActionAnswer, ModelSpec, Run, RunStatus, Tenant, format_time};
use crate::store::rows::{self, Answers};
use crate::store::{StoreError, run_end_body};

/// A change to a paused run.
#[derive(Debug)]
pub enum Transition {
    /// A client's answers to some or all of its pending actions: all of
    /// them applied, or none.
    Answer {
        run_id: Uuid,
        tenant: Tenant,
        answers: Vec<(String, ActionAnswer)>,
    },
    /// Ends it with a `run_end` after its last event: a client's cancel,
    /// or (`due`: only if its deadline is at or before that time) its pause
    /// timing out.
    End {
        run_id: Uuid,
        status: Outcome,
        error: Option<String>,
        at: DateTime<Utc>,
        due: bool,
    },
}

/// What a transition found and did.
#[derive(Debug)]
pub enum Transitioned {
    NotFound,
    /// The run is not paused: nothing was written.
    NotPaused(RunStatus),
    /// The answers do not fit its pending actions (why): nothing was written.
    Refused(String),
    /// The answers are stored; `complete`: every pending action is answered
    /// and the run is `queued`, to resume.
    Answered {
        run: Run,
        complete: bool,
        model: ModelSpec,
    },
    /// Its pause is not due yet (an answer came in meanwhile, or the clock).
    NotDue,
    /// It ended: its final state.
    Ended {
        run: Run,
    },
}

pub(super) async fn apply(
    connection: &mut SqliteConnection,
    transition: &Transition,
) -> Result<Transitioned, StoreError> {
    connection.execute("BEGIN IMMEDIATE").await?;
    match decide(connection, transition).await {
        Ok(outcome) => {
            let commit = if matches!(
                outcome,
                Transitioned::Answered { .. } | Transitioned::Ended { .. }
            ) {
                "COMMIT"
            } else {
                "ROLLBACK"
            };
            if let Err(error) = connection.execute(commit).await {
                let _ = connection.execute("ROLLBACK").await;
                return Err(error.into());
            }
            Ok(outcome)
        }
        Err(error) => {
            let _ = connection.execute("ROLLBACK").await;
            Err(error)
        }
    }
}

async fn decide(
    connection: &mut SqliteConnection,
    transition: &Transition,
) -> Result<Transitioned, StoreError> {
    let (run_id, tenant) = match transition {
        Transition::Answer { run_id, tenant, .. } => (*run_id, Some(tenant)),
        Transition::End { run_id, .. } => (*run_id, None),
    };
    let Some(row) = sqlx::query(rows::SELECT_RUN_FOR_UPDATE)
        .bind(run_id.to_string())
        .fetch_optional(&mut *connection)
        .await?
    else {
        return Ok(Transitioned::NotFound);
    };
    if tenant.is_some_and(|tenant| tenant.0 != sqlx::Row::get::<String, _>(&row, "tenant")) {
        return Ok(Transitioned::NotFound);
    }
    let mut run = rows::run_from_row(&row)?;
    if run.status != RunStatus::RequiresAction {
        return Ok(Transitioned::NotPaused(run.status));
    }
    let pending: Vec<PendingAction> = rows::json(&row, "pending_actions")?;
    let mut answered: Answers = rows::json(&row, "answers")?;
    match transition {
        Transition::Answer { answers, .. } => {
            let given: Vec<_> = answers
                .iter()
                .map(|(id, answer)| (id.as_str(), answer.to_answer()))
                .collect();
            if let Err(why) = check_answers(
                &pending,
                |id| answered.contains_key(id),
                given.iter().map(|(id, answer)| (*id, answer)),
            ) {
                return Ok(Transitioned::Refused(why));
            }
            answered.extend(answers.iter().cloned());
            let complete = pending
                .iter()
                .all(|action| answered.contains_key(&action.call_id));
            let text = serde_json::to_string(&answered)
                .map_err(|e| StoreError::Corrupt(format!("cannot serialise answers: {e}")))?;
            sqlx::query(
                "UPDATE runs SET answers = ?, \
                 status = CASE WHEN ? THEN 'queued' ELSE status END, \
                 action_deadline = CASE WHEN ? THEN NULL ELSE action_deadline END \
                 WHERE id = ?",
            )
            .bind(text)
            .bind(complete)
            .bind(complete)
            .bind(run_id.to_string())
            .execute(&mut *connection)
            .await?;
            run.pending_actions
                .retain(|action| !answered.contains_key(&action.call_id));
            if complete {
                run.status = RunStatus::Queued;
            }
            Ok(Transitioned::Answered {
                run,
                complete,
                model: rows::json(&row, "model_spec")?,
            })
        }
        Transition::End {
            status,
            error,
            at,
            due,
            ..
        } => {
            let deadline: Option<String> = sqlx::Row::get(&row, "action_deadline");
            if *due && deadline.is_none_or(|deadline| deadline > format_time(at)) {
                return Ok(Transitioned::NotDue);
            }
            let sequence: i64 = sqlx::query_scalar(
                "SELECT COALESCE(MAX(sequence), 0) + 1 FROM events WHERE run_id = ?",
            )
            .bind(run_id.to_string())
            .fetch_one(&mut *connection)
            .await?;
            let body = run_end_body(&run, sequence, *at, *status, error.clone())?;
            sqlx::query(
                "INSERT INTO events (run_id, sequence, type, body) VALUES (?, ?, 'run_end', ?)",
            )
            .bind(run_id.to_string())
            .bind(sequence)
            .bind(body)
            .execute(&mut *connection)
            .await?;
            sqlx::query(
                "UPDATE runs SET status = ?, error = ?, finished_at = ?, pending_actions = '[]', \
                 answers = '{}', action_deadline = NULL WHERE id = ?",
            )
            .bind(status.as_str())
            .bind(error.as_deref())
            .bind(format_time(at))
            .bind(run_id.to_string())
            .execute(&mut *connection)
            .await?;
            run.status = RunStatus::Ended(*status);
            run.error.clone_from(error);
            run.finished_at = Some(*at);
            run.pending_actions.clear();
            Ok(Transitioned::Ended { run })
        }
    }
}
