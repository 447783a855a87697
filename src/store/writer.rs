//! The single writer: every write of the service goes through one connection,
//! in batches, each batch one `BEGIN IMMEDIATE` transaction.
//!
//! Senders never wait: a run's observer hands over its events and goes on. The
//! writer drains whatever has accumulated (up to [`MAX_BATCH`] operations),
//! commits it at once, and only then runs each operation's `after_commit`
//! (which is where live subscribers are told), so whatever a client sees live
//! is already in storage.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection, Executor};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::{NewRun, StoreError};
use crate::harness::{RunStatus, UsageTotals};
use crate::run::format_time;

/// Most operations committed in one transaction.
pub const MAX_BATCH: usize = 2048;

/// Runs once the operation's transaction has committed (or failed: storage
/// errors are logged, and waiters must never hang).
pub type AfterCommit = Box<dyn FnOnce() + Send + Sync>;

/// A row of `runs`, owned, ready to insert.
pub(crate) struct RunRow {
    id: String,
    tenant: String,
    status: &'static str,
    prompt: String,
    limits: String,
    context: String,
    tools: String,
    commands: String,
    model: String,
    metadata: String,
    model_spec: String,
    idempotency_key: Option<String>,
    request_hash: Option<String>,
    created_at: String,
}

impl RunRow {
    pub(crate) fn new(new: NewRun<'_>) -> Result<Self, StoreError> {
        let run = new.run;
        Ok(Self {
            id: run.id.to_string(),
            tenant: new.tenant.0.clone(),
            status: run.status.as_str(),
            prompt: run.prompt.clone(),
            limits: json(&run.limits)?,
            context: json(&run.context)?,
            tools: json(&run.tools)?,
            commands: json(&run.commands)?,
            model: json(&run.model)?,
            metadata: json(&run.metadata)?,
            model_spec: json(&new.spec.model)?,
            idempotency_key: new.idempotency.map(|(key, _)| key.to_owned()),
            request_hash: new.idempotency.map(|(_, hash)| hash.to_owned()),
            created_at: format_time(&run.created_at),
        })
    }
}

/// The end of a run, written with its `run_end` event in one transaction.
pub struct Finish {
    pub run_id: Uuid,
    pub status: RunStatus,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub steps: u32,
    pub tool_calls: u32,
    pub usage: UsageTotals,
    pub finished_at: String,
}

enum Op {
    InsertRun(Box<RunRow>, oneshot::Sender<Result<(), StoreError>>),
    Started {
        run_id: Uuid,
        at: String,
    },
    Event {
        run_id: Uuid,
        sequence: u64,
        kind: &'static str,
        body: String,
        /// The transcript message the event announces: (position, JSON).
        message: Option<(u32, String)>,
        finish: Option<Box<Finish>>,
        after_commit: Option<AfterCommit>,
    },
    Close(oneshot::Sender<()>),
}

/// Counters of the writer's work, for metrics and benchmarks.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub batches: AtomicU64,
    pub operations: AtomicU64,
    pub failures: AtomicU64,
}

/// A handle to the writer task; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    sender: mpsc::UnboundedSender<Op>,
    stats: Arc<WriterStats>,
}

impl Writer {
    pub(super) fn start(connection: SqliteConnection) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        let stats = Arc::new(WriterStats::default());
        tokio::spawn(run(connection, receiver, Arc::clone(&stats)));
        Self { sender, stats }
    }

    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// Inserts a new run and waits for the commit.
    pub(crate) async fn insert_run(&self, row: RunRow) -> Result<(), StoreError> {
        let (done, wait) = oneshot::channel();
        self.sender
            .send(Op::InsertRun(Box::new(row), done))
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
    }

    /// Marks a run `running`.
    pub fn started(&self, run_id: Uuid, at: String) {
        self.send(Op::Started { run_id, at });
    }

    /// Appends an event (and the message it announces, if any). A `run_end`
    /// event carries the run's final state, written in the same transaction.
    #[allow(clippy::too_many_arguments)]
    pub fn event(
        &self,
        run_id: Uuid,
        sequence: u64,
        kind: &'static str,
        body: String,
        message: Option<(u32, String)>,
        finish: Option<Finish>,
        after_commit: Option<AfterCommit>,
    ) {
        self.send(Op::Event {
            run_id,
            sequence,
            kind,
            body,
            message,
            finish: finish.map(Box::new),
            after_commit,
        });
    }

    /// Commits everything sent before, then stops the writer.
    pub async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.sender.send(Op::Close(done)).is_ok() {
            let _ = wait.await;
        }
    }

    fn send(&self, op: Op) {
        if let Err(mpsc::error::SendError(op)) = self.sender.send(op) {
            tracing::error!("write after the store closed; dropped");
            // Never leave a waiter hanging.
            if let Op::Event {
                after_commit: Some(after),
                ..
            } = op
            {
                after();
            }
        }
    }
}

async fn run(
    mut connection: SqliteConnection,
    mut receiver: mpsc::UnboundedReceiver<Op>,
    stats: Arc<WriterStats>,
) {
    let mut batch = Vec::with_capacity(64);
    let mut closing = None;
    while closing.is_none() {
        let Some(first) = receiver.recv().await else {
            break;
        };
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        if let Some(position) = batch.iter().position(|op| matches!(op, Op::Close(_))) {
            // Everything sent before the close is written; nothing after it is
            // expected.
            let rest = batch.split_off(position);
            for op in rest {
                if let Op::Close(done) = op {
                    closing.get_or_insert(Vec::new()).push(done);
                }
            }
        }
        if !batch.is_empty() {
            stats.batches.fetch_add(1, Ordering::Relaxed);
            stats
                .operations
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            commit(&mut connection, &mut batch, &stats).await;
        }
    }
    let _ = connection.close().await;
    for done in closing.into_iter().flatten() {
        let _ = done.send(());
    }
}

/// Commits `batch` in one transaction. Should the transaction fail, each
/// operation is retried in a transaction of its own, so that one bad write
/// loses nothing else and gets its own error.
async fn commit(connection: &mut SqliteConnection, batch: &mut Vec<Op>, stats: &WriterStats) {
    let outcome = apply_all(connection, batch).await;
    let individual = match outcome {
        Ok(()) => false,
        Err(error) => {
            tracing::warn!(%error, operations = batch.len(), "batch write failed; writing one by one");
            true
        }
    };
    for op in batch.drain(..) {
        let result = if individual {
            apply_all(connection, std::slice::from_ref(&op)).await
        } else {
            Ok(())
        };
        if let Err(error) = &result {
            stats.failures.fetch_add(1, Ordering::Relaxed);
            tracing::error!(%error, "write failed");
        }
        match op {
            Op::InsertRun(_, done) => {
                let _ = done.send(result);
            }
            Op::Event { after_commit, .. } => {
                if let Some(after) = after_commit {
                    after();
                }
            }
            Op::Started { .. } | Op::Close(_) => {}
        }
    }
}

async fn apply_all(connection: &mut SqliteConnection, ops: &[Op]) -> Result<(), StoreError> {
    connection.execute("BEGIN IMMEDIATE").await?;
    for op in ops {
        if let Err(error) = apply(connection, op).await {
            let _ = connection.execute("ROLLBACK").await;
            return Err(error);
        }
    }
    if let Err(error) = connection.execute("COMMIT").await {
        let _ = connection.execute("ROLLBACK").await;
        return Err(error.into());
    }
    Ok(())
}

async fn apply(connection: &mut SqliteConnection, op: &Op) -> Result<(), StoreError> {
    match op {
        Op::InsertRun(row, _) => {
            sqlx::query(
                "INSERT INTO runs (id, tenant, status, prompt, limits, context, tools, commands, \
                 model, metadata, model_spec, idempotency_key, request_hash, created_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&row.id)
            .bind(&row.tenant)
            .bind(row.status)
            .bind(&row.prompt)
            .bind(&row.limits)
            .bind(&row.context)
            .bind(&row.tools)
            .bind(&row.commands)
            .bind(&row.model)
            .bind(&row.metadata)
            .bind(&row.model_spec)
            .bind(&row.idempotency_key)
            .bind(&row.request_hash)
            .bind(&row.created_at)
            .execute(&mut *connection)
            .await?;
        }
        Op::Started { run_id, at } => {
            sqlx::query("UPDATE runs SET status = 'running', started_at = ? WHERE id = ?")
                .bind(at)
                .bind(run_id.to_string())
                .execute(&mut *connection)
                .await?;
        }
        Op::Event {
            run_id,
            sequence,
            kind,
            body,
            message,
            finish,
            ..
        } => {
            let run_id = run_id.to_string();
            if let Some((position, message)) = message {
                sqlx::query("INSERT INTO messages (run_id, position, body) VALUES (?, ?, ?)")
                    .bind(&run_id)
                    .bind(i64::from(*position))
                    .bind(message)
                    .execute(&mut *connection)
                    .await?;
            }
            if let Some(finish) = finish {
                sqlx::query(
                    "UPDATE runs SET status = ?, answer = ?, error = ?, steps = ?, tool_calls = ?, \
                     input_tokens = ?, output_tokens = ?, model_calls_with_usage = ?, \
                     finished_at = ? WHERE id = ?",
                )
                .bind(finish.status.as_str())
                .bind(&finish.answer)
                .bind(&finish.error)
                .bind(i64::from(finish.steps))
                .bind(i64::from(finish.tool_calls))
                .bind(saturate(finish.usage.input_tokens))
                .bind(saturate(finish.usage.output_tokens))
                .bind(saturate(finish.usage.model_calls_with_usage))
                .bind(&finish.finished_at)
                .bind(&run_id)
                .execute(&mut *connection)
                .await?;
            }
            sqlx::query("INSERT INTO events (run_id, sequence, type, body) VALUES (?, ?, ?, ?)")
                .bind(&run_id)
                .bind(saturate(*sequence))
                .bind(*kind)
                .bind(body)
                .execute(&mut *connection)
                .await?;
        }
        Op::Close(_) => {}
    }
    Ok(())
}

fn saturate(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Corrupt(format!("cannot serialise a run: {e}")))
}
