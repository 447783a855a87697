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

/// How many times a live run is asked to stop before giving up (it may be
/// between two states: paused, answered, going live again).
const STOP_ATTEMPTS: usize = 10;

/// Whether runs may be waiting, and the watch's bell.
#[derive(Default)]
pub(super) struct Waiting {
    bell: tokio::sync::Notify,
    maybe: AtomicBool,
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
            match self.cancel_stored(id).await {
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
        tenant: &Tenant,
        spec: &mut RunSpec,
        previous: &Run,
    ) -> Result<Option<Behind>, crate::store::StoreError> {
        use crate::run::Multitask;
        let (waits_for, continues, stop) = match spec.multitask {
            Multitask::Reject => return Ok(None),
            // Behind the newest live run of the thread (an earlier
            // follow-up queued there included), continuing from it.
            Multitask::Enqueue => {
                let newest = self
                    .services
                    .store
                    .newest_live_of_thread(tenant, previous.thread_id)
                    .await?
                    .map_or(previous.id, |run| run.id);
                (newest, Some(newest), None)
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
        let store = self.runner.store();
        let id = self.live.id;
        let dir = self.runner.workspace_dir(id);
        let from = self
            .spec
            .previous_run_id
            .map(|previous| self.runner.workspace_dir(previous));
        let files = store.seed_files(id).await?;
        tokio::task::spawn_blocking(move || {
            crate::repo::places::remove_tree(&dir).map_err(|e| e.to_string())?;
            if let Some(from) = from {
                crate::tools::copy::copy_workspace(&from, &dir).map_err(|e| e.to_string())?;
            }
            super::seed::write_files(&dir, &files)
        })
        .await
        .map_err(|e| StoreError::Refused(format!("the workspace could not be copied: {e}")))?
        .map_err(|e| StoreError::Refused(format!("the workspace could not be copied: {e}")))?;
        let take = Transition::TakeHistory { run_id: id };
        store.writer().transition(take).await.map(drop)
    }
}
