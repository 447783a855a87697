//! The writer task: it takes the handles' operations in batches, writes
//! each batch in one transaction, and holds a batch whose COMMIT went
//! unanswered until the database tells whether it committed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::TryFutureExt;
use sqlx::{AnyConnection, Connection};
use tokio::sync::{mpsc, oneshot};

use super::health::{Health, is_refusal};
use super::ops::{self, Op, fail, finish, hold};
use super::sql::{self, apply_all};
use super::transition::Transitioned;
use super::{MAX_BATCH, RETRY_FIRST, RETRY_MAX, Reopen, WriterStats, transition};
use crate::store::StoreError;
use crate::store::cluster::Cluster;
use crate::store::live::{Channels, Closing};

/// The writer task: its connection, and what it tells the handles.
pub(super) struct Task {
    pub(super) connection: AnyConnection,
    pub(super) reopen: Option<Reopen>,
    /// How long a transaction may wait on the database (on PostgreSQL).
    pub(super) deadline: Option<Duration>,
    /// A statement on the connection was given up at its deadline: the
    /// connection is in no known state, and is not used again.
    pub(super) stalled: bool,
    /// A batch whose COMMIT went unanswered, held until the database tells
    /// whether it committed.
    pub(super) in_doubt: Option<InDoubt>,
    /// On PostgreSQL: the replica whose lease every batch holds (see
    /// [`crate::store::cluster`]).
    pub(super) cluster: Option<Arc<Cluster>>,
    pub(super) stats: Arc<WriterStats>,
    pub(super) health: Arc<Health>,
    pub(super) channels: Arc<Channels>,
    pub(super) give_up_after: Duration,
}

/// A batch whose COMMIT was sent but never answered: its operations are the
/// first `ops` held, and `xid` its transaction, to ask about (see
/// [`sql::committed`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct InDoubt {
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
            Err(StoreError::Unavailable(crate::store::no_answer(deadline)))
        }
    }
}

impl Task {
    pub(super) async fn run(mut self, mut receiver: mpsc::UnboundedReceiver<Op>) {
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
            #[cfg(debug_assertions)]
            let crash = super::death::crash_point(pending.range(..take));
            #[cfg(debug_assertions)]
            let take = crash.unwrap_or(take);
            let batch: Vec<Op> = pending.drain(..take).collect();
            #[cfg(debug_assertions)]
            super::death::panic_if_asked(&batch);
            self.stats.batches.fetch_add(1, Ordering::Relaxed);
            self.stats
                .operations
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            let (held, refused) = self.commit(batch).await;
            #[cfg(debug_assertions)]
            if crash.is_some() && held.is_empty() {
                tracing::error!(
                    "stopping dead after the marked event (AGENT_RUNNER_TEST_CRASH_AFTER_MESSAGE)"
                );
                std::process::abort();
            }
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
                .unwrap_or_else(|_| {
                    Err(StoreError::Unavailable(crate::store::no_answer(deadline)))
                }),
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
