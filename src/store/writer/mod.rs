//! The single writer: every write of the service's runs goes through one
//! connection, in batches, each batch one transaction (`BEGIN IMMEDIATE` on
//! SQLite). On PostgreSQL, what a replica writes of its standing among the
//! others (its lease, its claims, a takeover) goes through
//! [`super::cluster`] instead.
//!
//! Senders never wait: a run's observer hands over its events and goes on. The
//! writer drains whatever has accumulated (up to [`MAX_BATCH`] operations),
//! commits it at once, and only then publishes the batch's events to their
//! runs' live channels ([`super::live`]), so whatever a client sees live is
//! already in storage.
//!
//! A write that fails because storage refuses it (the disk is full, an I/O
//! error, the file is read-only or locked) is never dropped: the writer holds
//! it, and everything sent after it, in order, and tries again with backoff
//! until storage takes it; [`Writer::failing_for`] tells the service how
//! long that has lasted. Only a new run's insert is answered with the error
//! at once, so that its client hears of it instead of waiting. A write that
//! fails for any other reason (a constraint: a bug or a race) fails alone,
//! with its own error, and the rest of its batch is written. The one
//! exception is on PostgreSQL, a replica another one took for dead: its
//! writes are dropped (they are no longer its to write), and it stops.
//!
//! On PostgreSQL a transaction that gets no answer within the statement
//! deadline (the server frozen, the network partitioned) is refused too,
//! and its connection given up and opened again. Should the unanswered
//! statement have been its COMMIT, the batch may have been stored after
//! all: it is held whole, new runs' inserts included, until the database
//! tells whether the transaction committed (see [`InDoubt`]), so that
//! nothing is written twice and no client is told of a run that was not
//! stored, or the other way round.
//!
//! - this module: the handle;
//! - [`task`]: the task that writes the batches, and its holding;
//! - [`ops`]: the operations, and what each tells once committed or given
//!   up (its waiters, its run's subscribers, the runs' statuses);
//! - [`health`]: since when storage refuses writes, and what a refusal is;
//! - [`sql`]: the rows and the statements that write a batch (the webhooks'
//!   deliveries of its ends and pauses among them, see
//!   [`super::outbox`]);
//! - [`transition`]: checked changes to paused runs, and [`retention`]:
//!   removing runs that have ended.

mod agents;
mod death;
mod health;
mod ops;
mod retention;
mod run_row;
pub mod schedules;
mod sql;
mod statements;
mod task;
mod transition;
mod transitions;
mod uploads;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use sqlx::AnyConnection;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::StoreError;
use super::cluster::Cluster;
use super::live::Channels;
use death::{Death, watch};
use health::Health;
pub(super) use health::is_refusal;
pub use ops::{Finish, NewEvent, Pause};
use ops::{Op, finish};
pub(crate) use sql::RunRow;
pub(super) use statements::{Placeholders, chunks, values_statement};
use task::Task;
pub use transition::{Transition, Transitioned};

/// Most operations committed in one transaction.
pub const MAX_BATCH: usize = 2048;

/// First pause before a write that storage refused is tried again; it
/// doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(25);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Counters of the writer's work, for metrics and benchmarks.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub batches: AtomicU64,
    pub operations: AtomicU64,
    pub failures: AtomicU64,
}

/// How the writer opens its connection again once it is lost (a PostgreSQL
/// server restarted, the network between broke). A SQLite file's is never
/// lost.
pub(crate) type Reopen = Arc<
    dyn Fn() -> futures_util::future::BoxFuture<'static, Result<AnyConnection, StoreError>>
        + Send
        + Sync,
>;

/// A handle to the writer task; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    sender: mpsc::UnboundedSender<Op>,
    stats: Arc<WriterStats>,
    health: Arc<Health>,
    channels: Arc<Channels>,
    death: Arc<Death>,
}

impl Writer {
    /// Starts the writer. `give_up_after`: how long writes still held when
    /// it is closed are tried before they are abandoned. `deadline`: how
    /// long a transaction may wait on the database before it counts as
    /// refused and the connection is opened again (with `reopen`).
    pub(super) fn start(
        connection: AnyConnection,
        reopen: Option<Reopen>,
        deadline: Option<Duration>,
        cluster: Option<Arc<Cluster>>,
        give_up_after: Duration,
        channels: Arc<Channels>,
    ) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        let stats = Arc::new(WriterStats::default());
        let health = Arc::new(Health::default());
        let task = Task {
            connection,
            reopen,
            deadline,
            stalled: false,
            in_doubt: None,
            cluster,
            stats: Arc::clone(&stats),
            health: Arc::clone(&health),
            channels: Arc::clone(&channels),
            give_up_after,
        };
        let death = Arc::new(Death::default());
        tokio::spawn(watch(
            tokio::spawn(task.run(receiver)),
            Arc::clone(&health),
            Arc::clone(&death),
        ));
        Self {
            sender,
            stats,
            health,
            channels,
            death,
        }
    }

    /// Why the writer's task died, once it did.
    pub fn dead(&self) -> Option<&str> {
        self.death.why.get().map(String::as_str)
    }

    /// Fires if the writer's task dies.
    pub fn died(&self) -> CancellationToken {
        self.death.token.clone()
    }

    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// How long storage has refused writes, while it does.
    pub fn failing_for(&self) -> Option<Duration> {
        self.health.failing_for()
    }

    /// Inserts a new run and waits for the commit.
    pub(crate) async fn insert_run(&self, row: RunRow) -> Result<(), StoreError> {
        let (done, wait) = oneshot::channel();
        self.sender
            .send(Op::InsertRun(Box::new(row), done))
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
    }

    /// Marks a run `running`, and waits for the commit: a run executes only
    /// once its start is stored, so that a restart never runs it again.
    pub async fn started(
        &self,
        run_id: Uuid,
        tenant: &str,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        let (done, wait) = oneshot::channel();
        let tenant = tenant.to_owned();
        self.sender
            .send(Op::Started {
                run_id,
                tenant,
                at: crate::run::format_time(&at),
                started_at: at,
                done,
            })
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
    }

    /// Applies `transition` after everything sent before it, deciding on
    /// what is stored then, and waits for the commit.
    pub async fn transition(&self, transition: Transition) -> Result<Transitioned, StoreError> {
        let (done, wait) = oneshot::channel();
        self.sender
            .send(Op::Transition(Box::new(transition), done))
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
    }

    /// Records the tools a run may call, in order with its events: its
    /// built-in and client tools and those its MCP servers listed.
    pub fn tools(&self, run_id: Uuid, names: Vec<String>) -> Result<(), StoreError> {
        let tools = serde_json::to_string(&names)
            .map_err(|e| StoreError::Corrupt(format!("cannot serialise tool names: {e}")))?;
        self.send(Op::Tools {
            run_id,
            tools,
            names,
        });
        Ok(())
    }

    /// Records a run's attempts as they stand, in order with its events
    /// (see [`Op::Attempts`]).
    pub fn attempts(
        &self,
        run_id: Uuid,
        list: Vec<crate::run::AttemptSummary>,
        chosen: Option<u32>,
        transcript_of: Option<Uuid>,
    ) -> Result<(), StoreError> {
        let attempts = serde_json::to_string(&list)
            .map_err(|e| StoreError::Corrupt(format!("cannot serialise attempts: {e}")))?;
        self.send(Op::Attempts {
            run_id,
            attempts,
            list,
            chosen,
            transcript_of,
        });
        Ok(())
    }

    /// The pending actions of a run's children that wait for a decision,
    /// each naming its child (none: none wait).
    pub fn delegated(
        &self,
        run_id: Uuid,
        actions: &[crate::harness::PendingAction],
    ) -> Result<(), StoreError> {
        let json = (!actions.is_empty())
            .then(|| serde_json::to_string(actions))
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("cannot serialise actions: {e}")))?;
        self.send(Op::Delegated { run_id, json });
        Ok(())
    }

    /// What a run's children used, summed: its `usage_total` adds it.
    pub fn children_usage(
        &self,
        run_id: Uuid,
        usage: crate::harness::UsageTotals,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(&usage)
            .map_err(|e| StoreError::Corrupt(format!("cannot serialise usage: {e}")))?;
        self.send(Op::ChildrenUsage {
            run_id,
            json,
            usage,
        });
        Ok(())
    }

    /// Appends an event (and the message it announces, if any); a `run_end`
    /// carries the run's final state, written in the same transaction. Its
    /// subscribers hear of it once it is committed.
    pub fn append(&self, event: NewEvent) {
        self.send(Op::Event(event));
    }

    /// Resolves once everything sent before is committed: `true`, or
    /// `false` when it was given up (the store closed first).
    pub async fn barrier(&self) -> bool {
        let (done, wait) = oneshot::channel();
        self.send(Op::Barrier(done));
        wait.await.unwrap_or(false)
    }

    /// Removes a webhook's delivery from the outbox (it was delivered, or
    /// given up), and waits for the commit: until then it is still due, and
    /// would be taken again.
    pub async fn delivered(&self, id: String) -> Result<(), StoreError> {
        self.settle(id, None).await
    }

    /// Records a failed attempt of a webhook's delivery: it is tried again
    /// from `next_at` (by any replica). Waits for the commit.
    pub async fn retry_delivery(
        &self,
        id: String,
        next_at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        self.settle(id, Some(crate::run::format_time(&next_at)))
            .await
    }

    async fn settle(&self, id: String, next_at: Option<String>) -> Result<(), StoreError> {
        let (done, wait) = oneshot::channel();
        self.sender
            .send(Op::Delivery { id, next_at, done })
            .map_err(|_| StoreError::Closed)?;
        wait.await.map_err(|_| StoreError::Closed)?
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
            finish(op, false, &self.channels);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::run::{Run, RunSpec, Tenant};
    use crate::store::{NewRun, Store};

    fn spec() -> RunSpec {
        RunSpec::scripted(Vec::new())
    }

    fn row(run: &Run, spec: &RunSpec, key: &str) -> RunRow {
        RunRow::new(NewRun {
            run,
            tenant: &Tenant::anonymous(),
            spec,
            idempotency: Some((key, "hash")),
            owner: None,
        })
        .unwrap()
    }

    /// Both inserts reach the writer before it runs (one thread, nothing
    /// awaited in between), so they are one batch: the multi-row insert
    /// fails on the second key, and the retry one by one keeps the first.
    #[tokio::test]
    async fn a_failing_row_fails_alone_and_the_rest_of_its_batch_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/runs.db", dir.path().display());
        let (store, _) = Store::open(&url, Duration::from_secs(1), Duration::from_secs(10))
            .await
            .unwrap();
        let spec = spec();
        let first = Run::queued(Uuid::now_v7(), &spec, chrono::Utc::now());
        let second = Run::queued(Uuid::now_v7(), &spec, chrono::Utc::now());
        let writer = store.writer();
        let (a, b) = tokio::join!(
            writer.insert_run(row(&first, &spec, "same")),
            writer.insert_run(row(&second, &spec, "same")),
        );
        assert!(a.is_ok());
        assert!(b.is_err());
        assert_eq!(writer.stats().batches.load(Ordering::Relaxed), 1);
        assert_eq!(writer.stats().failures.load(Ordering::Relaxed), 1);
        let tenant = Tenant::anonymous();
        assert!(store.get_run(&tenant, first.id).await.unwrap().is_some());
        assert!(store.get_run(&tenant, second.id).await.unwrap().is_none());
        store.close().await;
    }
}
