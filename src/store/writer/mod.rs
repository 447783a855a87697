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
//! - this module: the handle, the task and its holding;
//! - [`ops`]: the operations, and what each tells once committed or given
//!   up (its waiters, its run's subscribers, the runs' statuses);
//! - [`health`]: since when storage refuses writes, and what a refusal is;
//! - [`sql`]: the rows and the statements that write a batch (the webhooks'
//!   deliveries of its ends and pauses among them, see
//!   [`super::outbox`]);
//! - [`transition`]: checked changes to paused runs, and [`retention`]:
//!   removing runs that have ended.

mod death;
mod health;
mod ops;
mod retention;
mod sql;
mod transition;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::TryFutureExt;
use sqlx::AnyConnection;
use sqlx::Connection;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::StoreError;
use super::cluster::Cluster;
use super::live::{Channels, Closing};
use death::{Death, watch};
use health::Health;
pub(super) use health::is_refusal;
pub use ops::{Finish, NewEvent, Pause};
use ops::{Op, fail, finish, hold};
pub(crate) use sql::RunRow;
use sql::apply_all;
pub(super) use sql::{Placeholders, chunks, values_statement};
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

/// The writer task: its connection, and what it tells the handles.
struct Task {
    connection: AnyConnection,
    reopen: Option<Reopen>,
    /// How long a transaction may wait on the database (on PostgreSQL).
    deadline: Option<Duration>,
    /// A statement on the connection was given up at its deadline: the
    /// connection is in no known state, and is not used again.
    stalled: bool,
    /// A batch whose COMMIT went unanswered, held until the database tells
    /// whether it committed.
    in_doubt: Option<InDoubt>,
    /// On PostgreSQL: the replica whose lease every batch holds (see
    /// [`super::cluster`]).
    cluster: Option<Arc<Cluster>>,
    stats: Arc<WriterStats>,
    health: Arc<Health>,
    channels: Arc<Channels>,
    give_up_after: Duration,
}

/// A batch whose COMMIT was sent but never answered: its operations are the
/// first `ops` held, and `xid` its transaction, to ask about (see
/// [`sql::committed`]).
#[derive(Debug, Clone, Copy)]
struct InDoubt {
    xid: i64,
    ops: usize,
}

/// Runs `write` within `deadline` (none: as long as it takes), unless the
/// connection it uses is `stalled`; one that runs past it leaves the
/// connection stalled.
async fn within<T>(
    deadline: Option<Duration>,
    stalled: &mut bool,
    write: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    if *stalled {
        return Err(StoreError::Unavailable(
            "the database connection is being opened again".into(),
        ));
    }
    let Some(deadline) = deadline else {
        return write.await;
    };
    match tokio::time::timeout(deadline, write).await {
        Ok(written) => written,
        Err(_) => {
            *stalled = true;
            Err(StoreError::Unavailable(super::no_answer(deadline)))
        }
    }
}

impl Task {
    async fn run(mut self, mut receiver: mpsc::UnboundedReceiver<Op>) {
        // Operations in the order they were sent: what is held after a
        // refused write, then what arrived since.
        let mut pending: VecDeque<Op> = VecDeque::new();
        let mut closing: Vec<oneshot::Sender<()>> = Vec::new();
        let mut retry = RETRY_FIRST;
        let mut closed_at: Option<Instant> = None;
        loop {
            if pending.is_empty() {
                if closed_at.is_some() {
                    break;
                }
                match receiver.recv().await {
                    Some(op) => pending.push_back(op),
                    None => break,
                }
            }
            if closed_at.is_none() {
                while let Ok(op) = receiver.try_recv() {
                    pending.push_back(op);
                }
            }
            // Everything sent before a close is written; nothing after it is
            // expected.
            if let Some(position) = pending.iter().position(|op| matches!(op, Op::Close(_))) {
                for op in pending.split_off(position) {
                    match op {
                        Op::Close(done) => closing.push(done),
                        op => finish(op, false, &self.channels),
                    }
                }
                closed_at.get_or_insert_with(Instant::now);
            }
            if pending.is_empty() {
                continue;
            }
            // Transitions are committed apart from other writes, each
            // seeing what those before it wrote: a batch is either the
            // transitions at the front, or what comes before the next one.
            let is_transition = |op: &Op| matches!(op, Op::Transition(..));
            let front = pending.front().is_some_and(is_transition);
            let take = pending
                .iter()
                .take(MAX_BATCH)
                .position(|op| is_transition(op) != front)
                .unwrap_or_else(|| pending.len().min(MAX_BATCH));
            let batch: Vec<Op> = pending.drain(..take).collect();
            #[cfg(debug_assertions)]
            death::panic_if_asked(&batch);
            self.stats.batches.fetch_add(1, Ordering::Relaxed);
            self.stats
                .operations
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            let (held, refused) = self.commit(batch).await;
            if refused {
                self.health.refused(!held.is_empty());
                self.reopen_if_lost().await;
            } else {
                self.health.recovered();
            }
            if held.is_empty() {
                retry = RETRY_FIRST;
                continue;
            }
            for op in held.into_iter().rev() {
                pending.push_front(op);
            }
            if closed_at.is_some_and(|at| at.elapsed() >= self.give_up_after) {
                tracing::error!(
                    operations = pending.len(),
                    "storage still refuses writes as the writer closes; giving them up"
                );
                self.in_doubt = None;
                for op in pending.drain(..) {
                    finish(op, false, &self.channels);
                }
                break;
            }
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(RETRY_MAX);
        }
        // Whatever was sent after the close (a race with the last run) is
        // told it was not stored rather than left waiting.
        receiver.close();
        while let Ok(op) = receiver.try_recv() {
            finish(op, false, &self.channels);
        }
        if !self.stalled {
            let close = self.connection.close();
            match self.deadline {
                Some(deadline) => drop(tokio::time::timeout(deadline, close).await),
                None => drop(close.await),
            }
        }
        for done in closing {
            let _ = done.send(());
        }
    }

    /// Commits `batch` in one transaction, and returns what storage refused
    /// (in order) to be tried again, and whether it refused anything. A new
    /// run's insert that storage refuses is answered with the error instead
    /// (unless its transaction may have committed: see [`InDoubt`]). Should
    /// the transaction fail for another reason, each operation is written in
    /// a transaction of its own, so that one bad write loses nothing else and
    /// gets its own error.
    async fn commit(&mut self, mut batch: Vec<Op>) -> (Vec<Op>, bool) {
        if let Some(Op::Transition(..)) = batch.first() {
            return (Vec::new(), self.transitions(batch).await);
        }
        if let Some(doubt) = self.in_doubt {
            // Held at the front of what is pending, so at the front of the
            // batch, before anything else is written.
            let rest = batch.split_off(doubt.ops.min(batch.len()));
            match self.settle(doubt.xid).await {
                Some(true) => {
                    self.in_doubt = None;
                    tracing::info!(
                        operations = batch.len(),
                        "a batch whose commit went unanswered was stored"
                    );
                    for op in batch {
                        finish(op, true, &self.channels);
                    }
                    if rest.is_empty() {
                        return (Vec::new(), false);
                    }
                    batch = rest;
                }
                Some(false) => {
                    self.in_doubt = None;
                    batch.extend(rest);
                }
                None => {
                    let error = StoreError::Unavailable(
                        "whether an earlier commit went through is not known yet".into(),
                    );
                    batch.extend(hold(rest, &error));
                    return (batch, true);
                }
            }
        }
        let replica = self.cluster.as_ref().map(|cluster| cluster.membership());
        if let Some(membership) = &replica {
            batch = ops::refuse_strays(batch, membership.id(), &self.channels);
            if batch.is_empty() {
                return (Vec::new(), false);
            }
        }
        let mut committing = None;
        let applied = within(
            self.deadline,
            &mut self.stalled,
            apply_all(
                &mut self.connection,
                replica.as_deref(),
                &batch,
                &mut committing,
            ),
        )
        .await;
        let error = match applied {
            Ok(()) => {
                for op in batch {
                    finish(op, true, &self.channels);
                }
                return (Vec::new(), false);
            }
            Err(error) => error,
        };
        if let StoreError::Fenced = error {
            // This replica's membership is lost (its runs are another's to
            // take over): what they would write now is not theirs to write.
            tracing::error!(
                operations = batch.len(),
                "this replica's lease is lost; its writes are dropped"
            );
            for op in batch {
                fail(op, StoreError::Fenced, &self.channels);
            }
            return (Vec::new(), false);
        }
        if is_refusal(&error) {
            tracing::warn!(%error, operations = batch.len(), "storage refused a batch; holding it");
            let sent = batch.len();
            return (self.hold(batch, &error, committing, sent), true);
        }
        tracing::warn!(%error, operations = batch.len(), "batch write failed; writing one by one");
        let mut ops = batch.into_iter();
        while let Some(op) = ops.next() {
            let applied = within(
                self.deadline,
                &mut self.stalled,
                apply_all(
                    &mut self.connection,
                    replica.as_deref(),
                    std::slice::from_ref(&op),
                    &mut committing,
                ),
            )
            .await;
            match applied {
                Ok(()) => finish(op, true, &self.channels),
                Err(error) if is_refusal(&error) => {
                    // Held with everything after it, to keep their order.
                    let rest = std::iter::once(op).chain(ops).collect();
                    return (self.hold(rest, &error, committing, 1), true);
                }
                Err(error) => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(%error, "write failed");
                    fail(op, error, &self.channels);
                }
            }
        }
        (Vec::new(), false)
    }

    /// What is held of `ops`, which storage refused (see [`hold`]). When
    /// the COMMIT of the transaction that wrote the first `sent` of them was
    /// sent (`committing`: its id) and went unanswered, they may have been
    /// stored: they are held whole, new runs' inserts included, until the
    /// database tells (see [`InDoubt`]).
    fn hold(
        &mut self,
        mut ops: Vec<Op>,
        error: &StoreError,
        committing: Option<i64>,
        sent: usize,
    ) -> Vec<Op> {
        let Some(xid) = committing else {
            return hold(ops, error);
        };
        let rest = ops.split_off(sent.min(ops.len()));
        tracing::warn!(
            operations = ops.len(),
            "a commit went unanswered; its writes are held until the database tells whether it went through"
        );
        self.in_doubt = Some(InDoubt {
            xid,
            ops: ops.len(),
        });
        ops.extend(hold(rest, error));
        ops
    }

    /// Whether the transaction `xid`, whose COMMIT went unanswered,
    /// committed; `None` while that cannot be told (it is still in
    /// progress, or the database does not answer).
    async fn settle(&mut self, xid: i64) -> Option<bool> {
        let asked = within(
            self.deadline,
            &mut self.stalled,
            sql::committed(&mut self.connection, xid),
        )
        .await;
        asked
            .inspect_err(|error| {
                tracing::warn!(%error, "whether a commit went through cannot be told yet");
            })
            .ok()
            .flatten()
    }
}

impl Task {
    /// Opens the connection again if storage refused writes because it is
    /// gone, or because a statement on it was given up at its deadline (what
    /// is held is then tried on the new one). The look and the opening are
    /// bounded by the deadline too.
    async fn reopen_if_lost(&mut self) {
        let Some(reopen) = &self.reopen else {
            return;
        };
        if !self.stalled {
            let ping = sqlx::Connection::ping(&mut self.connection).map_err(StoreError::from);
            if within(self.deadline, &mut self.stalled, ping).await.is_ok() {
                return;
            }
        }
        let reopened = match self.deadline {
            Some(deadline) => tokio::time::timeout(deadline, reopen())
                .await
                .unwrap_or_else(|_| Err(StoreError::Unavailable(super::no_answer(deadline)))),
            None => reopen().await,
        };
        match reopened {
            Ok(connection) => {
                tracing::info!("the writer's database connection was lost; it is open again");
                self.connection = connection;
                self.stalled = false;
            }
            Err(error) => {
                tracing::warn!(%error, "the writer's database connection is lost and cannot be opened yet");
            }
        }
    }

    /// Commits a batch of transitions in one transaction, in order; should
    /// that fail for a reason of its own, each is tried alone, so that one
    /// bad transition fails alone. Each is answered at once, refusal or
    /// not (its client tries again). Whether storage refused any.
    async fn transitions(&mut self, batch: Vec<Op>) -> bool {
        let (transitions, waiters): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .filter_map(|op| match op {
                Op::Transition(transition, done) => Some((transition, done)),
                // Never so (see `Task::run`), and never lost if it were.
                other => {
                    tracing::error!("a write in a batch of transitions; not stored");
                    finish(other, false, &self.channels);
                    None
                }
            })
            .unzip();
        let replica = self.cluster.as_ref().map(|cluster| cluster.id().to_owned());
        let replica = replica.as_deref();
        // Published once committed, whichever way.
        let mut changes = Vec::new();
        let applied = within(
            self.deadline,
            &mut self.stalled,
            transition::apply_all(&mut self.connection, replica, &transitions),
        )
        .await;
        let outcomes = match applied {
            Ok((outcomes, made)) => {
                changes = made;
                outcomes.into_iter().map(Ok).collect()
            }
            Err(error) if transitions.len() == 1 || is_refusal(&error) => {
                let refused = is_refusal(&error);
                let message = error.to_string();
                let mut first = Some(error);
                (0..transitions.len())
                    .map(|_| {
                        Err(match first.take() {
                            Some(error) if !refused => error,
                            _ => StoreError::Refused(message.clone()),
                        })
                    })
                    .collect()
            }
            Err(_) => {
                let mut outcomes = Vec::with_capacity(transitions.len());
                for transition in &transitions {
                    let one = within(
                        self.deadline,
                        &mut self.stalled,
                        transition::apply_all(
                            &mut self.connection,
                            replica,
                            std::slice::from_ref(transition),
                        ),
                    )
                    .await;
                    outcomes.push(one.map(|(mut one, made)| {
                        changes.extend(made);
                        one.remove(0)
                    }));
                }
                outcomes
            }
        };
        self.channels.publish_statuses(changes);
        let mut refused = false;
        for (outcome, done) in outcomes.into_iter().zip(waiters) {
            refused |= outcome.as_ref().err().is_some_and(is_refusal);
            if let Ok(Transitioned::Ended { run, .. }) = &outcome {
                self.channels.close(run.id, Closing::Ended);
            }
            let _ = done.send(outcome);
        }
        refused
    }
}

#[cfg(test)]
mod tests {
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
