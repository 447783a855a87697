//! What the service reads of its runs: a run, lists of them, their
//! transcripts and events, and what a paused or stopped run needs to go on.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

use super::{
    IdempotentRun, RunFilter, Store, StoreError, StoredEvent, StoredPause, StoredRecovery, rows,
};
use crate::harness::Message;
use crate::run::{Run, RunStatus, Tenant};

/// How much one read of a run's transcript or events takes at most: rows,
/// and bytes of their bodies (a page stops at the row that reaches them).
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub rows: u32,
    pub bytes: usize,
}

impl Page {
    /// Rows for streaming a large read: many small ones, or a few large ones.
    pub const STREAM: Page = Page {
        rows: 256,
        bytes: 256 * 1024,
    };

    /// One row.
    pub const ONE: Page = Page { rows: 1, bytes: 0 };

    /// Whether a page read with these bounds, whose rows' bodies are
    /// `bodies` bytes long, may have been cut by them: more may follow.
    pub fn is_full(self, bodies: impl ExactSizeIterator<Item = usize>) -> bool {
        bodies.len() == self.rows as usize || bodies.sum::<usize>() >= self.bytes
    }

    /// The rows of `rows` as `decode` makes them (each with its body's
    /// length), until the page is full. The rest of the statement is not
    /// read.
    async fn collect<T>(
        self,
        mut rows: impl futures_util::Stream<Item = Result<sqlx::any::AnyRow, sqlx::Error>> + Unpin,
        decode: impl Fn(&sqlx::any::AnyRow) -> Result<(T, usize), sqlx::Error>,
    ) -> Result<Vec<T>, sqlx::Error> {
        use futures_util::TryStreamExt;
        let mut out = Vec::new();
        let mut bytes = 0usize;
        while let Some(row) = rows.try_next().await? {
            let (decoded, length) = decode(&row)?;
            bytes = bytes.saturating_add(length);
            out.push(decoded);
            if bytes >= self.bytes {
                break;
            }
        }
        Ok(out)
    }
}

impl Store {
    pub async fn get_run(&self, tenant: &Tenant, id: Uuid) -> Result<Option<Run>, StoreError> {
        let row = self
            .read(async |connection| {
                sqlx::query(rows::SELECT_RUN_BY_ID)
                    .bind(id.to_string())
                    .bind(&tenant.0)
                    .fetch_optional(connection)
                    .await
            })
            .await?;
        row.map(|row| rows::run_as_shown(&row)).transpose()
    }

    /// Runs newest first, after `cursor` (an id) when given, narrowed by
    /// every filter given (they combine).
    pub async fn list_runs(
        &self,
        tenant: &Tenant,
        filter: RunFilter<'_>,
        cursor: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Run>, StoreError> {
        if let Some(parent) = filter.parent_run_id {
            let query = sqlx::query(rows::SELECT_RUNS_PAGE_BY_PARENT)
                .bind(&tenant.0)
                .bind(cursor.map(|c| c.to_string()))
                .bind(i64::from(limit))
                .bind(parent.to_string())
                .bind(filter.status.map(RunStatus::as_str))
                .bind(filter.thread_id.map(|thread| thread.to_string()))
                .bind(filter.agent)
                .bind(filter.schedule_id.map(|id| id.to_string()));
            let rows = self
                .read(async |connection| query.fetch_all(connection).await)
                .await?;
            return rows.iter().map(rows::run_as_shown).collect();
        }
        if let Some(schedule) = filter.schedule_id {
            let query = sqlx::query(rows::SELECT_RUNS_PAGE_BY_SCHEDULE)
                .bind(&tenant.0)
                .bind(cursor.map(|c| c.to_string()))
                .bind(i64::from(limit))
                .bind(schedule.to_string())
                .bind(filter.status.map(RunStatus::as_str))
                .bind(filter.thread_id.map(|thread| thread.to_string()))
                .bind(filter.agent);
            let rows = self
                .read(async |connection| query.fetch_all(connection).await)
                .await?;
            return rows.iter().map(rows::run_as_shown).collect();
        }
        if let Some(agent) = filter.agent {
            let query = sqlx::query(rows::SELECT_RUNS_PAGE_BY_AGENT)
                .bind(&tenant.0)
                .bind(cursor.map(|c| c.to_string()))
                .bind(i64::from(limit))
                .bind(agent)
                .bind(filter.status.map(RunStatus::as_str))
                .bind(filter.thread_id.map(|thread| thread.to_string()));
            let rows = self
                .read(async |connection| query.fetch_all(connection).await)
                .await?;
            return rows.iter().map(rows::run_as_shown).collect();
        }
        let statement = match (filter.status, filter.thread_id) {
            (None, None) => rows::SELECT_RUNS_PAGE,
            (Some(_), None) => rows::SELECT_RUNS_PAGE_BY_STATUS,
            (None, Some(_)) => rows::SELECT_RUNS_PAGE_BY_THREAD,
            (Some(_), Some(_)) => rows::SELECT_RUNS_PAGE_BY_STATUS_AND_THREAD,
        };
        let mut query = sqlx::query(statement)
            .bind(&tenant.0)
            .bind(cursor.map(|c| c.to_string()))
            .bind(i64::from(limit));
        if let Some(thread) = filter.thread_id {
            query = query.bind(thread.to_string());
        }
        if let Some(status) = filter.status {
            query = query.bind(status.as_str());
        }
        let rows = self
            .read(async |connection| query.fetch_all(connection).await)
            .await?;
        rows.iter().map(rows::run_as_shown).collect()
    }

    /// Every attempt of run `parent`, by number.
    pub async fn attempts_of(&self, parent: Uuid) -> Result<Vec<Run>, StoreError> {
        let query = sqlx::query(rows::SELECT_ATTEMPTS_OF).bind(parent.to_string());
        let rows = self
            .read(async |connection| query.fetch_all(connection).await)
            .await?;
        rows.iter().map(rows::run_from_row).collect()
    }

    /// The attempts run `parent`'s stored `attempt_start` events announce.
    pub async fn attempts_announced(&self, parent: Uuid) -> Result<Vec<u32>, StoreError> {
        let query = sqlx::query(
            "SELECT body FROM events WHERE run_id = $1 AND type = 'attempt_start' ORDER BY sequence",
        )
        .bind(parent.to_string());
        let rows = self
            .read(async |connection| query.fetch_all(connection).await)
            .await?;
        rows.iter()
            .map(|row| {
                let body: String = row.try_get(0)?;
                serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|event| event["attempt"].as_u64())
                    .and_then(|number| u32::try_from(number).ok())
                    .ok_or_else(|| {
                        StoreError::Corrupt("an attempt_start without its attempt".into())
                    })
            })
            .collect()
    }

    /// The child run a parent's `delegate` call `call_id` started, if any
    /// (the runner's own read).
    pub async fn child_of_call(
        &self,
        parent: Uuid,
        call_id: &str,
    ) -> Result<Option<Run>, StoreError> {
        let query = sqlx::query(rows::SELECT_CHILD_OF_CALL)
            .bind(parent.to_string())
            .bind(call_id);
        let row = self
            .read(async |connection| query.fetch_optional(connection).await)
            .await?;
        row.map(|row| rows::run_from_row(&row)).transpose()
    }

    /// A run by id, whoever its tenant (the runner's own read).
    pub async fn run_by_id(&self, id: Uuid) -> Result<Option<Run>, StoreError> {
        let query = sqlx::query(rows::SELECT_RUN_FOR_UPDATE).bind(id.to_string());
        let row = self
            .read(async |connection| query.fetch_optional(connection).await)
            .await?;
        row.map(|row| rows::run_as_shown(&row)).transpose()
    }

    /// The transcript's messages, each as its JSON text, in order.
    pub async fn messages(&self, run_id: Uuid) -> Result<Vec<String>, StoreError> {
        let rows = self
            .read(async |connection| {
                sqlx::query("SELECT body FROM messages WHERE run_id = $1 ORDER BY position")
                    .bind(run_id.to_string())
                    .fetch_all(connection)
                    .await
            })
            .await?;
        Ok(rows.iter().map(|row| row.get::<String, _>(0)).collect())
    }

    /// A page of the transcript: the messages after position `after` (from
    /// the start with `None`), each with its position and as its JSON
    /// text, in order: at most `page.rows` of them, and no more once they
    /// hold `page.bytes` (always one, however large).
    pub async fn messages_page(
        &self,
        run_id: Uuid,
        after: Option<i64>,
        page: Page,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        self.read(async |connection| {
            let rows = sqlx::query(
                "SELECT position, body FROM messages WHERE run_id = $1 AND position > $2 \
                 ORDER BY position LIMIT $3",
            )
            .bind(run_id.to_string())
            .bind(after.unwrap_or(-1))
            .bind(i64::from(page.rows))
            .fetch(connection);
            page.collect(rows, |row| {
                let body: String = row.try_get(1)?;
                let length = body.len();
                Ok(((row.try_get::<i64, _>(0)?, body), length))
            })
            .await
        })
        .await
    }

    /// Stored events with a sequence greater than `after`, in order: at
    /// most `page.rows` of them, and no more once they hold `page.bytes`
    /// (always one, however large).
    pub async fn events_after(
        &self,
        run_id: Uuid,
        after: u64,
        page: Page,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let rows = self
            .read(async |connection| {
                let rows = sqlx::query(
                    "SELECT sequence, type, body FROM events WHERE run_id = $1 AND sequence > $2 \
                     ORDER BY sequence LIMIT $3",
                )
                .bind(run_id.to_string())
                .bind(i64::try_from(after).unwrap_or(i64::MAX))
                .bind(i64::from(page.rows))
                .fetch(connection);
                page.collect(rows, |row| {
                    let body: String = row.try_get(2)?;
                    let length = body.len();
                    Ok(((row.try_get::<i64, _>(0)?, row.try_get(1)?, body), length))
                })
                .await
            })
            .await?;
        rows.into_iter()
            .map(|(sequence, kind, body)| {
                Ok(StoredEvent {
                    sequence: u64::try_from(sequence)
                        .map_err(|_| StoreError::Corrupt("negative event sequence".into()))?,
                    kind,
                    body,
                })
            })
            .collect()
    }

    /// Runs waiting to be started, on the whole database. Read through the
    /// read pool: admissions ask it often, and must not take the
    /// connections that renew a replica's lease.
    pub async fn queued(&self) -> Result<u64, StoreError> {
        let count: i64 = self
            .read(async |connection| {
                sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE status = 'queued'")
                    .fetch_one(connection)
                    .await
            })
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// A run's status, whoever's it is.
    pub async fn run_status(&self, id: Uuid) -> Result<Option<RunStatus>, StoreError> {
        let status: Option<String> = self
            .read(async |connection| {
                sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
                    .bind(id.to_string())
                    .fetch_optional(connection)
                    .await
            })
            .await?;
        status
            .map(|text| {
                RunStatus::parse(&text)
                    .ok_or_else(|| StoreError::Corrupt(format!("unknown run status {text:?}")))
            })
            .transpose()
    }

    /// The pending actions of a paused run as stored (each approval with
    /// its tool's schema), answered or not; none for a run not paused.
    pub async fn stored_pending(
        &self,
        id: Uuid,
    ) -> Result<Vec<crate::harness::PendingAction>, StoreError> {
        let text: Option<String> = self
            .read(async |connection| {
                sqlx::query_scalar("SELECT pending_actions FROM runs WHERE id = $1")
                    .bind(id.to_string())
                    .fetch_optional(connection)
                    .await
            })
            .await?;
        match text {
            None => Ok(Vec::new()),
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(format!("pending actions of run {id}: {e}"))),
        }
    }

    /// The transcript's messages, read back, in order.
    pub async fn transcript(&self, run_id: Uuid) -> Result<Vec<Arc<Message>>, StoreError> {
        self.messages(run_id)
            .await?
            .iter()
            .map(|text| {
                serde_json::from_str::<Message>(text)
                    .map(Arc::new)
                    .map_err(|e| StoreError::Corrupt(format!("a message of run {run_id}: {e}")))
            })
            .collect()
    }

    /// Where an answered pause stands, to resume it: its transcript, its
    /// last event, its running time, what it waited on and the answers.
    pub async fn paused(&self, id: Uuid) -> Result<StoredPause, StoreError> {
        let row = self
            .read(async |connection| {
                sqlx::query(
                    "SELECT pending_actions, answers, running_ms, \
                     (SELECT COALESCE(MAX(sequence), 0) FROM events WHERE run_id = runs.id) \
                     AS last FROM runs WHERE id = $1",
                )
                .bind(id.to_string())
                .fetch_optional(connection)
                .await
            })
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("run {id} vanished")))?;
        let messages = self.transcript(id).await?;
        let count = |column: &str| {
            u64::try_from(row.get::<i64, _>(column))
                .map_err(|_| StoreError::Corrupt(format!("{column} out of range")))
        };
        Ok(StoredPause {
            messages,
            last_sequence: count("last")?,
            running: Duration::from_millis(count("running_ms")?),
            pending: rows::json(&row, "pending_actions")?,
            answers: rows::json(&row, "answers")?,
        })
    }

    /// Where a run whose process stopped stands (see [`StoredRecovery`]).
    pub async fn recovery(&self, id: Uuid) -> Result<StoredRecovery, StoreError> {
        let row = self
            .read(async |connection| {
                sqlx::query(
                    "SELECT steps, tool_calls, input_tokens, output_tokens, \
                     model_calls_with_usage, cached_input_tokens, cache_write_tokens, \
                     cost_usd, running_ms, answers, \
                     (SELECT COALESCE(MAX(sequence), 0) FROM events WHERE run_id = runs.id) \
                     AS last, \
                     (SELECT COUNT(*) FROM events AS model_end \
                      WHERE model_end.run_id = runs.id AND model_end.type = 'model_end' \
                      AND model_end.sequence = (SELECT MAX(sequence) FROM events \
                        WHERE run_id = runs.id AND type IN ('model_end', 'message'))) \
                     AS response_lost \
                     FROM runs WHERE id = $1",
                )
                .bind(id.to_string())
                .fetch_optional(connection)
                .await
            })
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("run {id} vanished")))?;
        let count = |column: &str| {
            u64::try_from(row.get::<i64, _>(column))
                .map_err(|_| StoreError::Corrupt(format!("{column} out of range")))
        };
        let narrow = |column: &str| {
            u32::try_from(count(column)?)
                .map_err(|_| StoreError::Corrupt(format!("{column} out of range")))
        };
        // The calls started since the last model response (its batch), and
        // whether the run paused for that batch (which counted it whole).
        let started = self
            .read(async |connection| {
                sqlx::query(
                    "SELECT type, body FROM events WHERE run_id = $1 \
                     AND type IN ('tool_start', 'actions_required') \
                     AND sequence > (SELECT COALESCE(MAX(sequence), 0) FROM events \
                     WHERE run_id = $1 AND type = 'model_end')",
                )
                .bind(id.to_string())
                .fetch_all(connection)
                .await
            })
            .await?;
        let counted = started
            .iter()
            .any(|row| row.get::<String, _>(0) == "actions_required");
        let started = started
            .iter()
            .filter_map(|row| {
                let body: serde_json::Value =
                    serde_json::from_str(&row.get::<String, _>(1)).ok()?;
                body.get("call_id")?.as_str().map(str::to_owned)
            })
            .collect();
        Ok(StoredRecovery {
            messages: self.transcript(id).await?,
            last_sequence: count("last")?,
            steps: narrow("steps")?,
            // A response's message is the first message after its model_end.
            response_lost: count("response_lost")? > 0,
            tool_calls: narrow("tool_calls")?,
            usage: rows::usage_totals(&row)?,
            running: Duration::from_millis(count("running_ms")?),
            batch: crate::harness::StoppedBatch {
                started,
                counted,
                // What the batch's pending calls were answered (kept from
                // the answered pause until the run pauses or ends again):
                // only for the batch that paused, whose call ids they name.
                answers: if counted {
                    rows::json::<rows::Answers>(&row, "answers")?
                        .into_iter()
                        .map(|(call_id, answer)| (call_id, answer.to_answer()))
                        .collect()
                } else {
                    Default::default()
                },
            },
        })
    }

    /// Paused runs by their deadline, soonest first.
    pub async fn pause_deadlines(
        &self,
        limit: u32,
    ) -> Result<Vec<(Uuid, DateTime<Utc>)>, StoreError> {
        let rows = self
            .read(async |connection| {
                sqlx::query(
                    "SELECT id, action_deadline FROM runs WHERE status = 'requires_action' \
                     AND action_deadline IS NOT NULL ORDER BY action_deadline LIMIT $1",
                )
                .bind(i64::from(limit))
                .fetch_all(connection)
                .await
            })
            .await?;
        // A row that does not parse is logged and passed over, never in the
        // way of the others' deadlines.
        Ok(rows
            .iter()
            .filter_map(|row| {
                let id = row.get::<String, _>(0);
                let at = row.get::<String, _>(1);
                match (rows::parse_uuid(&id), rows::time(&at)) {
                    (Ok(id), Ok(at)) => Some((id, at)),
                    _ => {
                        tracing::error!(run_id = %id, deadline = %at, "a paused run's deadline is unreadable");
                        None
                    }
                }
            })
            .collect())
    }

    pub async fn find_idempotent(
        &self,
        tenant: &Tenant,
        key: &str,
    ) -> Result<Option<IdempotentRun>, StoreError> {
        let row = self
            .read(async |connection| {
                sqlx::query(rows::SELECT_RUN_BY_IDEMPOTENCY_KEY)
                    .bind(&tenant.0)
                    .bind(key)
                    .fetch_optional(connection)
                    .await
            })
            .await?;
        row.map(|row| {
            Ok(IdempotentRun {
                run: rows::run_from_row(&row)?,
                request_hash: row
                    .get::<Option<String>, _>("request_hash")
                    .unwrap_or_default(),
            })
        })
        .transpose()
    }
}
