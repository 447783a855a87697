//! Changes that depend on what is stored: answering a paused run, and ending
//! one. Each is read, checked and written in one transaction of the single
//! writer, so two clients answering at once, or an answer racing the pause's
//! timeout, each see the other's result and never both apply.

use chrono::{DateTime, Utc};
use sqlx::AnyConnection;
use sqlx::Executor;
use uuid::Uuid;

use crate::harness::{Outcome, PendingAction, check_answers};
use crate::run::{NO_ANSWER, Run, RunStatus, format_time};
use crate::store::rows::{self, Answers};
use crate::store::{Engine, ResumeReason, StatusChange, StoreError, cluster, outbox, run_end_body};

pub use super::transitions::{Transition, Transitioned};

/// Applies `transitions` in order in one transaction, each deciding on
/// what the ones before it wrote; all of it is committed, or none.
/// On PostgreSQL, the other replicas hear of it once it is committed: of
/// the runs it ended, of the runs it queued, of the cancels it forwarded
/// (`replica`: this one).
pub(super) async fn apply_all(
    connection: &mut AnyConnection,
    replica: Option<&str>,
    transitions: &[Box<Transition>],
) -> Result<(Vec<Transitioned>, Vec<StatusChange>), StoreError> {
    super::sql::begin(connection).await?;
    let mut outcomes = Vec::with_capacity(transitions.len());
    let mut changes = Vec::new();
    for transition in transitions {
        match decide(connection, transition, &mut changes).await {
            Ok(outcome) => outcomes.push(outcome),
            Err(error) => {
                let _ = connection.execute("ROLLBACK").await;
                return Err(error);
            }
        }
    }
    // The webhooks of the runs it ended, in the same transaction.
    if let Err(error) = outbox::enqueue(connection, &changes).await {
        let _ = connection.execute("ROLLBACK").await;
        return Err(error);
    }
    if let Some(replica) = replica
        && let Err(error) = announce(connection, replica, &outcomes, &changes).await
    {
        let _ = connection.execute("ROLLBACK").await;
        return Err(error);
    }
    if let Err(error) = connection.execute("COMMIT").await {
        let _ = connection.execute("ROLLBACK").await;
        return Err(error.into());
    }
    Ok((outcomes, changes))
}

/// The run's row, locked for the transaction: SQLite's writer holds the
/// database's write lock already; PostgreSQL locks the row, against another
/// replica's claim or transition.
async fn lock_run(
    connection: &mut AnyConnection,
    run_id: Uuid,
) -> Result<Option<sqlx::any::AnyRow>, StoreError> {
    let select = match Engine::of_connection(connection) {
        Engine::Postgres => rows::SELECT_RUN_FOR_UPDATE_LOCKED,
        Engine::Sqlite => rows::SELECT_RUN_FOR_UPDATE,
    };
    Ok(sqlx::query(select)
        .bind(run_id.to_string())
        .fetch_optional(&mut *connection)
        .await?)
}

/// See [`Transition::HandOver`].
async fn hand_over(
    connection: &mut AnyConnection,
    run_id: Uuid,
    holder: Option<&str>,
    at: DateTime<Utc>,
) -> Result<Transitioned, StoreError> {
    let Some(row) = lock_run(connection, run_id).await? else {
        return Ok(Transitioned::NotFound);
    };
    let run = rows::run_from_row(&row)?;
    let owner: Option<String> = sqlx::Row::get(&row, "owner");
    if run.status != RunStatus::Running || owner.as_deref() != holder {
        return Ok(Transitioned::NotPaused(run.status));
    }
    let tenant: String = sqlx::Row::get(&row, "tenant");
    let change = crate::store::rest(connection, &run, tenant, ResumeReason::Shutdown, at).await?;
    Ok(Transitioned::HandedOver(change))
}

/// Tells the other replicas what `outcomes` changed.
async fn announce(
    connection: &mut AnyConnection,
    replica: &str,
    outcomes: &[Transitioned],
    changes: &[StatusChange],
) -> Result<(), StoreError> {
    cluster::notify_statuses(connection, replica, changes).await?;
    let ended = outcomes.iter().filter_map(|outcome| match outcome {
        Transitioned::Ended { run, .. } => Some(run.id.to_string()),
        Transitioned::HandedOver(change) => Some(change.run_id.to_string()),
        _ => None,
    });
    cluster::notify_events(connection, replica, ended).await?;
    let queued = outcomes.iter().any(|outcome| {
        matches!(outcome, Transitioned::Answered { complete: true, .. })
            || matches!(outcome, Transitioned::HandedOver(change) if change.status == RunStatus::Queued)
    });
    if queued {
        cluster::notify(connection, cluster::QUEUED, "").await?;
    }
    for outcome in outcomes {
        if let Transitioned::Forwarded { run } = outcome {
            cluster::notify(connection, cluster::CANCEL, &run.id.to_string()).await?;
        }
    }
    Ok(())
}

/// Decides on `transition` and writes what it does, adding the change of
/// status it makes (if any) to `changes`.
async fn decide(
    connection: &mut AnyConnection,
    transition: &Transition,
    changes: &mut Vec<StatusChange>,
) -> Result<Transitioned, StoreError> {
    let outcome = decide_one(connection, transition).await?;
    let (run, tenant) = match &outcome {
        Transitioned::Answered {
            run,
            complete: true,
            tenant,
            ..
        }
        | Transitioned::Ended { run, tenant } => (run, tenant),
        Transitioned::HandedOver(change) => {
            changes.push(change.clone());
            return Ok(outcome);
        }
        _ => return Ok(outcome),
    };
    let at = match run.status {
        RunStatus::Ended(_) => run.finished_at.unwrap_or_else(Utc::now),
        _ => Utc::now(),
    };
    changes.push(StatusChange {
        run_id: run.id,
        tenant: tenant.clone(),
        status: run.status,
        at: format_time(&at),
    });
    Ok(outcome)
}

async fn decide_one(
    connection: &mut AnyConnection,
    transition: &Transition,
) -> Result<Transitioned, StoreError> {
    let (run_id, tenant) = match transition {
        Transition::Answer { run_id, tenant, .. } => (*run_id, Some(tenant)),
        Transition::End { run_id, .. }
        | Transition::Cancel { run_id, .. }
        | Transition::CancelWaiting { run_id, .. } => (*run_id, None),
        Transition::Purge { run_id, tenant } => {
            return super::retention::purge(connection, *run_id, tenant).await;
        }
        Transition::Expire { before, limit } => {
            return super::retention::expire(connection, before, *limit).await;
        }
        Transition::HandOver { run_id, holder, at } => {
            return hand_over(connection, *run_id, holder.as_deref(), *at).await;
        }
        Transition::SaveAgent {
            tenant,
            version,
            create,
        } => return super::agents::save(connection, tenant, version, *create).await,
        Transition::ArchiveAgent { tenant, name } => {
            return super::agents::archive(connection, tenant, name).await;
        }
        Transition::SaveUpload { tenant, upload } => {
            return super::uploads::save(connection, tenant, upload).await;
        }
        Transition::DeleteUpload { tenant, id } => {
            return super::uploads::delete(connection, tenant, *id).await;
        }
        Transition::ExpireUploads { before, limit } => {
            return super::uploads::expire(connection, before, *limit).await;
        }
        Transition::SaveSchedule {
            tenant,
            schedule,
            next,
            create,
        } => {
            return super::schedules::save(connection, tenant, schedule, next.as_deref(), *create)
                .await;
        }
        Transition::DeleteSchedule { tenant, id } => {
            return super::schedules::delete(connection, tenant, *id).await;
        }
        Transition::AdvanceSchedule {
            id,
            due,
            next,
            counted,
        } => return super::schedules::advance(connection, *id, due, next, *counted).await,
        Transition::Release { run_id } => {
            return super::schedules::release(connection, *run_id).await;
        }
        Transition::TakeHistory { run_id } => {
            return super::schedules::take_history(connection, *run_id).await;
        }
    };
    let Some(row) = lock_run(connection, run_id).await? else {
        return Ok(Transitioned::NotFound);
    };
    let owner: String = sqlx::Row::get(&row, "tenant");
    if tenant.is_some_and(|tenant| tenant.0 != owner) {
        return Ok(Transitioned::NotFound);
    }
    let mut run = rows::run_from_row(&row)?;
    let end =
        |connection, run, status, error, at| end(connection, run, owner.clone(), status, error, at);
    if let Transition::CancelWaiting { at, error, .. } = transition {
        return if run.status == RunStatus::Queued && run.waiting_for.is_some() {
            end(connection, run, Outcome::Aborted, error.clone(), *at).await
        } else {
            Ok(Transitioned::NotPaused(run.status))
        };
    }
    if let Transition::Cancel { at, error, .. } = transition {
        match run.status {
            RunStatus::Queued => {
                return end(connection, run, Outcome::Aborted, error.clone(), *at).await;
            }
            RunStatus::Running => {
                sqlx::query("UPDATE runs SET cancel_requested = TRUE WHERE id = $1")
                    .bind(run_id.to_string())
                    .execute(&mut *connection)
                    .await?;
                return Ok(Transitioned::Forwarded { run });
            }
            _ => {}
        }
    }
    if run.status != RunStatus::RequiresAction {
        return Ok(Transitioned::NotPaused(run.status));
    }
    let pending: Vec<PendingAction> = rows::json(&row, "pending_actions")?;
    let mut answered: Answers = rows::json(&row, "answers")?;
    let deadline: Option<String> = sqlx::Row::get(&row, "action_deadline");
    let due_by = |at: &DateTime<Utc>| {
        deadline
            .as_deref()
            .is_some_and(|deadline| deadline <= format_time(at).as_str())
    };
    match transition {
        Transition::Answer { at, .. } if due_by(at) => {
            end(
                connection,
                run,
                Outcome::Timeout,
                Some(NO_ANSWER.into()),
                *at,
            )
            .await
        }
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
                "UPDATE runs SET answers = $1, \
                 status = CASE WHEN $2 THEN 'queued' ELSE status END, \
                 action_deadline = CASE WHEN $2 THEN NULL ELSE action_deadline END \
                 WHERE id = $3",
            )
            .bind(text)
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
                tenant: owner,
            })
        }
        Transition::Cancel { at, error, .. } | Transition::CancelWaiting { at, error, .. } => {
            end(connection, run, Outcome::Aborted, error.clone(), *at).await
        }
        // Decided before the run is read.
        Transition::Purge { .. }
        | Transition::Expire { .. }
        | Transition::HandOver { .. }
        | Transition::SaveAgent { .. }
        | Transition::ArchiveAgent { .. }
        | Transition::SaveUpload { .. }
        | Transition::DeleteUpload { .. }
        | Transition::ExpireUploads { .. }
        | Transition::SaveSchedule { .. }
        | Transition::DeleteSchedule { .. }
        | Transition::AdvanceSchedule { .. }
        | Transition::Release { .. }
        | Transition::TakeHistory { .. } => Ok(Transitioned::NotDue),
        Transition::End {
            status,
            error,
            at,
            due,
            ..
        } => {
            if *due && !due_by(at) {
                return Ok(Transitioned::NotDue);
            }
            end(connection, run, *status, error.clone(), *at).await
        }
    }
}

/// Ends a paused run: its `run_end` after its last event, its final state.
async fn end(
    connection: &mut AnyConnection,
    mut run: Run,
    tenant: String,
    status: Outcome,
    error: Option<String>,
    at: DateTime<Utc>,
) -> Result<Transitioned, StoreError> {
    let run_id = run.id.to_string();
    let sequence: i64 =
        sqlx::query_scalar("SELECT COALESCE(MAX(sequence), 0) + 1 FROM events WHERE run_id = $1")
            .bind(&run_id)
            .fetch_one(&mut *connection)
            .await?;
    let body = run_end_body(&run, sequence, at, status, error.clone())?;
    sqlx::query("INSERT INTO events (run_id, sequence, type, body) VALUES ($1, $2, 'run_end', $3)")
        .bind(&run_id)
        .bind(sequence)
        .bind(body)
        .execute(&mut *connection)
        .await?;
    // A run that never started changed nothing; one paused has changes its
    // task did not count (left unknown).
    let changes = run.started_at.is_none().then(crate::repo::Changes::default);
    sqlx::query(
        "UPDATE runs SET status = $1, error = $2, finished_at = $3, pending_actions = '[]', \
         answers = '{}', action_deadline = NULL, changes = $5 WHERE id = $4",
    )
    .bind(status.as_str())
    .bind(error.as_deref())
    .bind(format_time(&at))
    .bind(&run_id)
    .bind(changes.map(|c| serde_json::json!(c).to_string()))
    .execute(&mut *connection)
    .await?;
    run.changes = changes;
    run.status = RunStatus::Ended(status);
    run.error = error;
    run.finished_at = Some(at);
    run.pending_actions.clear();
    Ok(Transitioned::Ended { run, tenant })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::run::{ActionAnswer, Tenant};
    use chrono::TimeDelta;
    use serde_json::json;

    use super::*;
    use crate::harness::{ActionKind, UsageTotals};
    use crate::run::{Decision, RunSpec};
    use crate::store::writer::{Pause, RunRow};
    use crate::store::{NewEvent, NewRun, Store};

    /// A run stored paused, its pause's deadline `deadline` from now.
    async fn paused(store: &Store, deadline: TimeDelta) -> Uuid {
        let spec = RunSpec::scripted(Vec::new());
        let mut run = Run::queued(Uuid::now_v7(), &spec, Utc::now());
        run.status = RunStatus::Running;
        let tenant = Tenant::anonymous();
        let row = RunRow::new(NewRun {
            run: &run,
            tenant: &tenant,
            spec: &spec,
            idempotency: None,
            owner: None,
        })
        .unwrap();
        store.writer().insert_run(row).await.unwrap();
        let pending = vec![PendingAction {
            call_id: "1".into(),
            kind: ActionKind::Approval,
            name: "list_dir".into(),
            arguments: json!({}),
            run_id: None,
            input_schema: None,
        }];
        store.writer().append(NewEvent {
            run_id: run.id,
            sequence: 1,
            kind: "actions_required",
            body: Arc::from("{}"),
            message: None,
            finish: None,
            progress: None,
            first: None,
            pause: Some(Box::new(Pause {
                tenant: tenant.0.clone(),
                at: format_time(&Utc::now()),
                steps: 1,
                tool_calls: 1,
                usage: UsageTotals::default(),
                pending: serde_json::to_string(&pending).unwrap(),
                running_ms: 5,
                action_deadline: format_time(&(Utc::now() + deadline)),
                webhook: false,
            })),
        });
        run.id
    }

    fn approve(run_id: Uuid) -> Transition {
        Transition::Answer {
            run_id,
            tenant: Tenant::anonymous(),
            answers: vec![(
                "1".into(),
                ActionAnswer::Decision {
                    decision: Decision::Approve,
                    reason: None,
                    arguments: None,
                },
            )],
            at: Utc::now(),
        }
    }

    /// Both reach the writer before it runs (nothing awaited in between),
    /// so they are one transaction: the second sees what the first wrote.
    #[tokio::test]
    async fn transitions_in_one_batch_each_see_the_ones_before() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/runs.db", dir.path().display());
        let (store, _) = Store::open(&url, Duration::from_secs(1), Duration::from_secs(10))
            .await
            .unwrap();
        let run = paused(&store, TimeDelta::minutes(1)).await;
        let writer = store.writer();
        // Everything before is committed first (the pause's event).
        let due = Transition::End {
            run_id: run,
            status: Outcome::Timeout,
            error: None,
            at: Utc::now(),
            due: true,
        };
        assert!(matches!(
            writer.transition(due).await.unwrap(),
            Transitioned::NotDue
        ));
        let before = writer
            .stats()
            .batches
            .load(std::sync::atomic::Ordering::Relaxed);
        let (first, second) = tokio::join!(
            writer.transition(approve(run)),
            writer.transition(approve(run))
        );
        let after = writer
            .stats()
            .batches
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(after - before, 1, "one transaction");
        assert!(
            matches!(
                first.unwrap(),
                Transitioned::Answered { complete: true, .. }
            ),
            "the first is taken"
        );
        assert!(
            matches!(second.unwrap(), Transitioned::NotPaused(RunStatus::Queued)),
            "the second sees the run resuming"
        );
        store.close().await;
    }

    #[tokio::test]
    async fn an_answer_after_the_deadline_ends_the_run_timeout_instead() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/runs.db", dir.path().display());
        let (store, _) = Store::open(&url, Duration::from_secs(1), Duration::from_secs(10))
            .await
            .unwrap();

        let in_time = paused(&store, TimeDelta::minutes(1)).await;
        let answered = store.writer().transition(approve(in_time)).await.unwrap();
        assert!(
            matches!(&answered, Transitioned::Answered { complete: true, run, .. } if run.status == RunStatus::Queued),
            "{answered:?}"
        );

        let late = paused(&store, TimeDelta::milliseconds(-1)).await;
        match store.writer().transition(approve(late)).await.unwrap() {
            Transitioned::Ended { run, .. } => {
                assert_eq!(run.status, RunStatus::Ended(Outcome::Timeout));
                assert_eq!(run.error.as_deref(), Some(NO_ANSWER));
            }
            other => panic!("a late answer was taken: {other:?}"),
        }
        let stored = store.get_run(&Tenant::anonymous(), late).await.unwrap();
        assert_eq!(
            stored.map(|run| run.status),
            Some(RunStatus::Ended(Outcome::Timeout))
        );
        let again = store.writer().transition(approve(late)).await.unwrap();
        assert!(matches!(again, Transitioned::NotPaused(_)), "{again:?}");
        store.close().await;
    }
}
