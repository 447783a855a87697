//! One run's task: waits for a slot, makes sure its start is stored, builds
//! its model and tools, runs the harness, and lets go of the run once its end
//! (or its pause) is stored. A resumed run's task starts from the checkpoint
//! its pause left in storage.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::FutureExt;

mod drive;

use super::{Entry, LiveRun, Origin, Runner, observer};
use crate::harness::{Checkpoint, Message, Outcome, StopReason};
use crate::run::RunStatus;
use crate::run::{RunSpec, format_time};
use crate::scheduler::Hold;
use crate::store::{Closing, Pause, StoredPause, StoredRecovery, Transition, Transitioned};

/// The first wait before a run's stored state is read again, after a read
/// failed; it doubles up to [`READ_RETRY_MAX`] (the queue's, on
/// PostgreSQL, see [`crate::store::cluster::READ_RETRY_FIRST`]).
const READ_RETRY_FIRST: Duration = Duration::from_millis(500);
const READ_RETRY_MAX: Duration = Duration::from_secs(30);

/// Where a run's transcript starts.
enum Begin {
    /// An answered pause, as stored.
    Resume(StoredPause),
    /// Before its prompt: the transcript it continues (empty for a run of
    /// its own).
    Continue(Vec<Arc<Message>>),
    /// Where its process stopped, as stored.
    Recover(StoredRecovery),
}

/// How a run's drive left it.
pub(super) enum Left {
    /// Its `run_end` was handed to the store.
    Ended,
    /// Paused for a decision.
    Paused(Checkpoint),
    /// Stopped to be handed over: no end.
    HandedOver,
}

pub(super) struct RunTask {
    pub(super) runner: Runner,
    pub(super) live: Arc<LiveRun>,
    pub(super) spec: RunSpec,
    /// Stored `running` from its insert: its start needs no write of its own.
    pub(super) inserted_running: bool,
    /// Where it takes up.
    pub(super) origin: Origin,
    /// Why the workspace of the run it continues could not be taken (see
    /// `take_previous`): the run ends `failed` with it as it starts.
    pub(super) take_failure: std::sync::OnceLock<String>,
    /// Its slot once it executes (see [`super::subagents::SlotCell`]).
    pub(super) slot: std::sync::OnceLock<Arc<super::subagents::SlotCell>>,
}

impl RunTask {
    pub(super) async fn execute(self, entry: Entry) {
        let shared = Arc::clone(&self.runner.services);
        let Some(begin) = self.read_begin(&entry).await else {
            return;
        };
        let (messages, last_sequence) = match &begin {
            Begin::Resume(stored) => (stored.messages.len(), stored.last_sequence),
            Begin::Recover(stored) => (stored.messages.len(), stored.last_sequence),
            Begin::Continue(history) => (history.len(), 0),
        };
        let messages = u32::try_from(messages).unwrap_or(u32::MAX);
        let observer = Arc::new(
            observer::RunObserver::new(
                Arc::clone(&self.live),
                shared.store.clone(),
                Arc::clone(&shared.metrics),
                messages,
                last_sequence,
            )
            .traced(&shared.telemetry),
        );

        let stop = &self.live.stop;
        let interrupted = || {
            matches!(
                stop.reason(),
                Some(StopReason::Interrupted(_) | StopReason::HandOver)
            )
        };
        let mut slot = match entry {
            // Stored running already: it runs, even if the server began to
            // stop meanwhile (it gets the grace every running run gets).
            Entry::Slot(slot) => slot,
            Entry::Turn(turn) => {
                let acquired = tokio::select! {
                    biased;
                    () = stop.stopped() => None,
                    slot = turn.wait() => slot,
                };
                let stopping = self.runner.is_closing();
                match acquired {
                    Some(slot) if !stopping => slot,
                    // The server is stopping (the run is not cancelled by a
                    // client): it stays queued in storage for the next process
                    // (on PostgreSQL, for any replica).
                    _ if stopping && !stop.is_stopped() || interrupted() => {
                        return self.leave_queued().await;
                    }
                    _ => {
                        tracing::info!("cancelled while queued");
                        self.unchanged(&observer);
                        observer.end_without_harness(Outcome::Aborted, self.superseded());
                        return self.ended(&observer).await;
                    }
                }
            }
        };
        // Executed only once its start is stored, so that a restart finds it
        // `running` and never runs it a second time. A run that had a slot
        // when it was accepted was inserted `running`.
        let at = Utc::now();
        let started = async {
            if self.inserted_running {
                return Ok(());
            }
            shared
                .store
                .writer()
                .started(self.live.id, &self.live.tenant.0, at)
                .await
        };
        tokio::select! {
            stored = started => if let Err(error) = stored {
                tracing::error!(%error, "the run's start could not be stored; it stays queued");
                return self.leave_queued().await;
            },
            () = stop.stopped() => {
                // The server stopping lets it wait for the next process, as
                // every queued run; a client's cancel ends it.
                if interrupted() {
                    return self.leave_queued().await;
                }
                tracing::info!("cancelled before its start was stored");
                self.unchanged(&observer);
                observer.end_without_harness(Outcome::Aborted, self.superseded());
                return self.ended(&observer).await;
            }
        }
        self.live.executing.store(true, Ordering::Release);
        slot.executing();
        let began = Instant::now();
        tracing::debug!(origin = ?self.origin, "run started");
        // A run with MCP servers holds its `run_end` back until they are
        // ended: whoever sees the end sees no server still at work.
        observer.hold_end(!self.spec.mcp_servers.is_empty());
        let attempts = self.spec.attempts.is_some();
        let cell = Arc::new(if attempts {
            // Its attempts execute in slots of their own; it waits for them
            // in none (keeping its hold): its slot is given back now.
            let hold = slot.hold();
            drop(slot);
            super::subagents::SlotCell::new(Err(hold))
        } else {
            // It gives its slot back while it waits on its children.
            super::subagents::SlotCell::new(Ok(slot))
        });
        let _ = self.slot.set(Arc::clone(&cell));
        let outcome = if attempts {
            std::panic::AssertUnwindSafe(self.run_attempts(&observer))
                .catch_unwind()
                .await
        } else {
            std::panic::AssertUnwindSafe(self.run_harness(&observer, begin))
                .catch_unwind()
                .await
        };
        // Its MCP servers are gone by now: its end may be told.
        observer.release_end();
        let (failure, left) = match outcome {
            Ok(Ok(left)) => (None, left),
            Ok(Err(error)) => (Some(error), Left::Ended),
            Err(_) => (Some("the run's task panicked".to_owned()), Left::Ended),
        };
        if let Some(error) = failure
            && observer.ended().is_none()
        {
            tracing::error!(%error, "run failed");
            // Counted if its tools were built (else not told).
            crate::harness::Observer::ending(&*observer).await;
            observer.end_without_harness(Outcome::Failed, Some(error));
        }
        shared.metrics.run_duration(began.elapsed());
        // Kept until the task ends: what it writes next is written under
        // its slot's holding (the slot itself is given back now).
        let (slot, hold) = cell.take();
        drop(slot);
        match left {
            Left::Paused(checkpoint) => self.paused(&observer, checkpoint).await,
            Left::HandedOver if observer.ended().is_none() => self.handed_over(&hold).await,
            Left::Ended | Left::HandedOver => self.ended(&observer).await,
        }
    }

    /// A run that never started changed nothing in its workspace.
    fn unchanged(&self, observer: &observer::RunObserver) {
        if matches!(self.origin, Origin::Start) {
            observer.set_changes(crate::repo::Changes::default());
        }
    }

    /// The server stops: the run, stopped at a safe point without an end,
    /// is queued again to resume (or, past its resumes, ended
    /// `interrupted`), after everything it handed to the writer.
    async fn handed_over(&self, hold: &Hold) {
        let store = &self.runner.services.store;
        if hold.revoked() {
            // This process lost its hold on the run (a PostgreSQL lease
            // lost): it writes nothing more of it; whoever takes it over
            // resumes it.
            tracing::info!("run left to the replica that takes it over");
            store.live().close(self.live.id, Closing::GivenUp);
            self.runner.runs.forget(&self.live);
            return;
        }
        let transition = Transition::HandOver {
            run_id: self.live.id,
            holder: hold.holder().map(str::to_owned),
            at: Utc::now(),
        };
        match store.writer().transition(transition).await {
            Ok(Transitioned::HandedOver(change)) => {
                tracing::info!(status = %change.status, "run handed over");
                if let RunStatus::Ended(outcome) = change.status {
                    self.runner.services.metrics.finished(outcome);
                }
            }
            Ok(_) => tracing::info!("run no longer held here; nothing to hand over"),
            Err(error) => tracing::error!(%error, "the run could not be handed over"),
        }
        store.live().close(self.live.id, Closing::GivenUp);
        self.runner.runs.forget(&self.live);
    }

    /// After the run's end was handed to the store: counts it, and waits for
    /// it to be stored before the run stops being live, so that whoever
    /// finds it not live finds its end in storage. Past shutdown's grace it
    /// does not wait (closing the store commits it, or gives it up). Should
    /// its end never have reached the store, its channel is closed here, so
    /// that no waiter is left hanging.
    async fn ended(&self, observer: &observer::RunObserver) {
        let shared = &self.runner.services;
        match observer.ended() {
            Some(status) => shared.metrics.finished(status),
            None => shared.store.live().close(self.live.id, Closing::GivenUp),
        }
        if let Some(stored) = shared.store.live().ended(self.live.id) {
            tokio::select! {
                _ = stored => {}
                () = self.runner.lifecycle.past_grace.cancelled() => {}
            }
        }
        self.runner.runs.forget(&self.live);
        // A run queued behind this one may go now.
        self.runner.waiting.ended();
    }

    /// The harness paused the run: stores the pause with its
    /// `actions_required`, waits for it to be stored, and lets go of the
    /// run, which from then on lives in storage alone. A client's cancel
    /// that came while the pause was being stored ends it now.
    async fn paused(&self, observer: &observer::RunObserver, checkpoint: Checkpoint) {
        let shared = &self.runner.services;
        // The configured ceiling keeps this within a year.
        let timeout = chrono::TimeDelta::milliseconds(
            i64::try_from(self.spec.limits.action_timeout_ms).unwrap_or(i64::MAX),
        );
        let now = Utc::now();
        let deadline = now.checked_add_signed(timeout).unwrap_or(now);
        let pending = serde_json::to_string(&checkpoint.pending).unwrap_or_else(|_| "[]".into());
        // Taken before the pause is handed over: once it is stored, a
        // client may answer it and the run go live again, with a channel
        // of its own.
        let closed = shared.store.live().ended(self.live.id);
        let handed = observer.pause(Pause {
            tenant: self.live.tenant.0.clone(),
            at: format_time(&Utc::now()),
            steps: checkpoint.steps,
            tool_calls: checkpoint.tool_calls,
            usage: checkpoint.usage,
            pending,
            running_ms: u64::try_from(checkpoint.elapsed.as_millis()).unwrap_or(u64::MAX),
            action_deadline: format_time(&deadline),
            webhook: self.spec.webhook.is_some(),
        });
        if !handed {
            shared.store.live().close(self.live.id, Closing::GivenUp);
        }
        // Past shutdown's grace it is not waited for: closing the store
        // commits it (the next process finds it paused) or gives it up.
        let closing = match closed {
            Some(closed) => tokio::select! {
                how = closed => Some(how),
                () = self.runner.lifecycle.past_grace.cancelled() => None,
            },
            None => Some(Closing::GivenUp),
        };
        match closing {
            Some(Closing::Paused) => {
                tracing::info!(
                    pending = checkpoint.pending.len(),
                    steps = checkpoint.steps,
                    "run paused for a decision"
                );
                shared.metrics.run_paused();
                self.runner.pauses.notify_one();
            }
            Some(_) => tracing::error!("the run's pause could not be stored"),
            None => tracing::info!("the server stopped before the run's pause was known stored"),
        }
        // A client's cancel that came before this let go ends the pause
        // (after it in the writer's order); the run stays registered
        // meanwhile, so that an answer that wins the race starts a run that
        // inherits the cancel.
        if self.runner.runs.forget_unless_cancelled(&self.live) {
            // On PostgreSQL, an answer on another replica may have queued it
            // meanwhile: the cancel ends it there too.
            if let Err(error) = self
                .runner
                .cancel_stored(self.live.id, self.superseded())
                .await
            {
                tracing::error!(%error, "a paused run's cancel could not be stored");
            }
            self.runner.runs.forget(&self.live);
        }
    }

    /// Where its transcript starts: a paused run's checkpoint, where its
    /// stopped process left it, or the transcript a continued run inherited
    /// (stored as its first messages when it was accepted). A read that
    /// fails (the database's failure) is tried again, with a wait that
    /// doubles, and never holds up the runs behind it: on PostgreSQL a run
    /// claimed here is set aside in the queue for that wait (see
    /// [`crate::scheduler::Scheduler::set_aside`]), elsewhere its task
    /// waits, holding its place in the queue. `None` when the task is done
    /// with the run (set aside, or stopped meanwhile).
    async fn read_begin(&self, entry: &Entry) -> Option<Begin> {
        let store = &self.runner.services.store;
        let id = self.live.id;
        let mut wait = READ_RETRY_FIRST;
        loop {
            let read = match (self.origin, self.spec.previous_run_id) {
                (Origin::Answered, _) => store.paused(id).await.map(Begin::Resume),
                (Origin::Recovered, _) => store.recovery(id).await.map(Begin::Recover),
                (Origin::Start, _) if self.spec.copy_pending => match self.take_previous().await {
                    Ok(()) => store.transcript(id).await.map(Begin::Continue),
                    Err(error) => Err(error),
                },
                (Origin::Start, Some(_)) => store.transcript(id).await.map(Begin::Continue),
                (Origin::Start, None) => Ok(Begin::Continue(Vec::new())),
            };
            let error = match read {
                Ok(begin) => return Some(begin),
                Err(error) => error,
            };
            if matches!(entry, Entry::Slot(_)) && self.runner.scheduler.set_aside(id).await {
                tracing::warn!(%error, "the run's stored state could not be read; set aside in the queue");
                self.forget(Closing::GivenUp);
                return None;
            }
            tracing::warn!(
                %error,
                retry_in_ms = wait.as_millis() as u64,
                "the run's stored state could not be read; trying again"
            );
            let stop = &self.live.stop;
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stop.stopped() => {
                    if matches!(stop.reason(), Some(StopReason::Interrupted(_) | StopReason::HandOver)) {
                        self.leave_queued().await;
                    } else {
                        self.cancel_unread(entry).await;
                    }
                    return None;
                }
            }
            wait = (wait * 2).min(READ_RETRY_MAX);
        }
    }

    /// Why a run stopped before it started is ended: an attempt another
    /// attempt superseded says so, as a running one does; a cancel says
    /// nothing.
    fn superseded(&self) -> Option<String> {
        self.live.stop.reason().and_then(StopReason::superseded)
    }

    /// Ends `aborted` a run whose client cancelled it while its stored
    /// state could not be read: one waiting for its turn is `queued` in
    /// storage, and ends as a queued run's cancel ends it; one in a slot
    /// was admitted to it, so it has not started and has no event yet.
    async fn cancel_unread(&self, entry: &Entry) {
        tracing::info!("cancelled while its stored state could not be read");
        match entry {
            Entry::Turn(_) => {
                let cancel = Transition::Cancel {
                    run_id: self.live.id,
                    at: Utc::now(),
                    error: self.superseded(),
                };
                match self.runner.services.store.writer().transition(cancel).await {
                    Ok(Transitioned::Ended { .. }) => {
                        self.runner.services.metrics.finished(Outcome::Aborted);
                    }
                    Ok(_) => {}
                    Err(error) => tracing::error!(%error, "the run's cancel could not be stored"),
                }
                self.forget(Closing::GivenUp);
            }
            Entry::Slot(_) => {
                let shared = &self.runner.services;
                let observer = observer::RunObserver::new(
                    Arc::clone(&self.live),
                    shared.store.clone(),
                    Arc::clone(&shared.metrics),
                    0,
                    0,
                );
                observer.end_without_harness(Outcome::Aborted, None);
                self.ended(&observer).await;
            }
        }
    }

    /// The run is no longer live here: its channel closed `how`.
    fn forget(&self, how: Closing) {
        self.runner.services.store.live().close(self.live.id, how);
        self.runner.runs.forget(&self.live);
    }

    /// Lets go of a run that never started, leaving it `queued` in storage.
    /// On PostgreSQL, one stored `running` here already (claimed, or
    /// inserted running) is given back to the queue, for any replica.
    async fn leave_queued(&self) {
        self.runner.scheduler.release(self.live.id).await;
        self.forget(Closing::GivenUp);
    }
}
