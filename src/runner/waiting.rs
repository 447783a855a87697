//! A busy thread (SPEC section 23): a follow-up of a live run accepted with
//! `multitask` other than `reject` is stored `queued`, waiting for that run
//! (`waiting_for`), and takes the transcript and workspace it continues as
//! it starts (see `RunTask::take_previous`). This watch lets it go once the
//! run it waits for has ended, wherever that ended: every replica looks,
//! and the first to clear the wait in storage queues it (on PostgreSQL, for
//! whichever replica claims it).
//!
//! It looks once a second, and at once when a run of this process ends
//! while some run may be waiting: a server without waiting runs pays one
//! indexed read a second, and nothing a run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use uuid::Uuid;

use super::Runner;
use crate::run::{Run, RunSpec, RunStatus, Tenant};
use crate::store::writer::{Transition, Transitioned};

/// How often the store is asked for runs to let go.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The longest line of follow-ups queued one behind the other that a new
/// one looks along for its place (past it, it goes behind the last seen).
const MAX_QUEUED_BEHIND: usize = 1000;

/// How many times a live run is asked to stop before giving up (it may be
/// between two states: paused, answered, going live again).
const STOP_ATTEMPTS: usize = 10;

/// Whether runs may be waiting, the watch's bell, and the turns follow-ups
/// of live runs take to find their place.
#[derive(Default)]
pub(super) struct Waiting {
    bell: tokio::sync::Notify,
    maybe: AtomicBool,
    /// Held from a follow-up's finding its place to its insert: two sent at
    /// once here go one behind the other, never both behind the same run.
    /// (Replicas on PostgreSQL each have their own: two follow-ups of one
    /// thread sent to two replicas at the same moment may both go behind
    /// the same run.)
    places: std::sync::Arc<tokio::sync::Mutex<()>>,
}

impl Waiting {
    /// A run of this process ended: the watch looks now, if runs may wait.
    pub(super) fn ended(&self) {
        if self.maybe.load(Ordering::Relaxed) {
            self.bell.notify_one();
        }
    }

    /// A run was queued behind another.
    pub(super) fn added(&self) {
        self.maybe.store(true, Ordering::Relaxed);
        self.bell.notify_one();
    }
}

/// How a follow-up of a live run was accepted.
pub(super) struct Behind {
    /// The live run it waits for.
    pub waits_for: Uuid,
    /// The thread it belongs to (`None`: one of its own).
    pub thread: Option<Uuid>,
    /// The live run to stop (`interrupt`, `rollback`).
    pub stop: Option<Uuid>,
    /// This process's turn to find a place, held until the run is stored.
    pub turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Runner {
    /// Watches for runs to let go, until the runner closes.
    pub(super) fn watch_waiting(&self) {
        let runner = self.clone();
        tokio::spawn(async move {
            let closing = runner.lifecycle.closing.clone();
            loop {
                runner.release_waiting().await;
                tokio::select! {
                    () = tokio::time::sleep(LOOK_EVERY) => {}
                    () = runner.waiting.bell.notified() => {}
                    () = closing.cancelled() => return,
                }
            }
        });
    }

    /// Lets go of every run waiting for one that has ended.
    async fn release_waiting(&self) {
        let store = &self.services.store;
        let found = match store.releasable().await {
            Ok(found) => found,
            Err(error) => {
                tracing::warn!(%error, "reading the runs queued behind others failed");
                return;
            }
        };
        if found.is_empty() {
            // Unless one is stored meanwhile (here: `added` sets it again).
            self.waiting.maybe.store(false, Ordering::Relaxed);
            return;
        }
        self.waiting.maybe.store(true, Ordering::Relaxed);
        for mut queued in found {
            if self.is_closing() {
                return;
            }
            let id = queued.run.id;
            let release = Transition::Release { run_id: id };
            match store.writer().transition(release).await {
                Ok(Transitioned::Released(true)) => {
                    tracing::info!(run_id = %id, "the run it waited for has ended; it is queued");
                    // As let go: what it continues may have changed (the
                    // run it waited for stood aside).
                    if let Ok(Some(run)) = store.get_run(&queued.tenant, id).await {
                        queued.run = run;
                    }
                    queued.run.waiting_for = None;
                    let _accepting = self.lifecycle.tasks.token();
                    let place = self.scheduler.readmit(&queued.tenant);
                    self.queue(queued, place);
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(run_id = %id, %error, "a waiting run could not be let go");
                    return;
                }
            }
        }
    }

    /// Stops a live run as a client's cancel does, for a follow-up that
    /// interrupts it (or rolls it back). A run that ends meanwhile needs
    /// nothing more.
    pub(super) async fn stop_for_follow_up(&self, tenant: &Tenant, id: Uuid) {
        for _ in 0..STOP_ATTEMPTS {
            if self.cancel(tenant, id).is_some() {
                return;
            }
            match self.cancel_stored(id, None).await {
                Ok(Some(_)) => return,
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(run_id = %id, %error, "the run interrupted could not be cancelled");
                    return;
                }
            }
            match self.services.store.get_run(tenant, id).await {
                Ok(Some(run)) if !run.status.is_terminal() => {}
                _ => return,
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tracing::warn!(run_id = %id, "the run interrupted did not stop; the follow-up waits for its end");
    }

    /// Where a follow-up of `previous`, which is live, goes (SPEC 23's
    /// `multitask`): `None` to refuse it (`reject`).
    pub(super) async fn behind(
        &self,
        spec: &mut RunSpec,
        previous: &Run,
    ) -> Result<Option<Behind>, crate::store::StoreError> {
        use crate::run::Multitask;
        if spec.multitask == Multitask::Reject {
            return Ok(None);
        }
        let turn = std::sync::Arc::clone(&self.waiting.places)
            .lock_owned()
            .await;
        let (waits_for, continues, stop) = match spec.multitask {
            Multitask::Reject => return Ok(None),
            // Behind the last follow-up already queued behind the run named
            // (each behind the one before), or behind it, continuing it.
            Multitask::Enqueue => {
                let mut last = previous.id;
                for _ in 0..MAX_QUEUED_BEHIND {
                    match self.services.store.queued_behind(last).await? {
                        Some(next) => last = next,
                        None => break,
                    }
                }
                (last, Some(last), None)
            }
            Multitask::Interrupt => (previous.id, Some(previous.id), Some(previous.id)),
            Multitask::Rollback => (previous.id, previous.previous_run_id, Some(previous.id)),
        };
        spec.previous_run_id = continues;
        spec.copy_pending = true;
        Ok(Some(Behind {
            waits_for,
            thread: Some(previous.thread_id),
            stop,
            turn: Some(turn),
        }))
    }

    /// The run as stored behind another: queued, in its thread, waiting.
    pub(super) fn queued_behind(run: &mut Run, behind: &Behind) {
        run.status = RunStatus::Queued;
        run.started_at = None;
        if let Some(thread) = behind.thread {
            run.thread_id = thread;
        }
        run.waiting_for = Some(behind.waits_for);
    }
}

impl super::task::RunTask {
    /// A run that was queued behind the one it continues takes, as it
    /// starts, that run's workspace as it ended (its own files written
    /// over it) and its transcript. The transcript is taken last, in one
    /// transaction that also marks it done: a process that stops before
    /// leaves it to whichever starts the run next, which copies the
    /// workspace again from the start.
    pub(super) async fn take_previous(&self) -> Result<(), crate::store::StoreError> {
        use crate::store::StoreError;
        use crate::tools::copy::CopyError;
        let store = self.runner.store();
        let id = self.live.id;
        let dir = self.runner.workspace_dir(id);
        // As stored now: what it continues may have changed while it waited.
        let previous = match store.get_run(&self.live.tenant, id).await? {
            Some(run) => run.previous_run_id,
            None => self.spec.previous_run_id,
        };
        let from = previous.map(|previous| self.runner.workspace_dir(previous));
        let files = store.seed_files(id).await?;
        let copied = tokio::task::spawn_blocking(move || {
            crate::repo::places::remove_tree(&dir).map_err(CopyError::Write)?;
            if let Some(from) = from {
                crate::tools::copy::copy_workspace(&from, &dir)?;
            }
            super::seed::write_files(&dir, &files)
                .map_err(|why| CopyError::Write(std::io::Error::other(why)))
        })
        .await
        .map_err(|e| StoreError::Refused(format!("the workspace could not be copied: {e}")))?;
        match copied {
            Ok(()) => {}
            // It will never fit: the run fails (it starts, to end).
            Err(CopyError::TooLarge) => {
                let _ = self.take_failure.set(format!(
                    "previous_run_id: the workspace of the run it continues could not be \
                     copied: {}",
                    CopyError::TooLarge
                ));
            }
            // The server's disk: tried again.
            Err(error) => {
                return Err(StoreError::Refused(format!(
                    "the workspace could not be copied: {error}"
                )));
            }
        }
        let take = Transition::TakeHistory { run_id: id };
        store.writer().transition(take).await.map(drop)
    }
}
