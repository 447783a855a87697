//! Paused runs: answering them (and resuming those fully answered), ending
//! them, and the watch that times out pauses no answer came for. A paused
//! run holds nothing here: each of these starts from what storage holds.

use std::sync::Weak;
use std::time::Duration;

use chrono::Utc;
use uuid::Uuid;

use super::{Runner, Services, SubmitError};
use crate::harness::Outcome;
use crate::run::{ActionAnswer, Run, Tenant};
use crate::store::{Closing, StoreError, Transition, Transitioned, Unfinished};

pub use crate::run::NO_ANSWER;

/// Most paused runs the watch looks at per pass.
const WATCH_PAGE: u32 = 256;
/// Longest the watch sleeps without looking (a pause stored meanwhile wakes
/// it sooner).
const WATCH_IDLE: Duration = Duration::from_secs(5);

/// What became of a client's answers.
#[derive(Debug)]
pub enum Answered {
    /// Stored: the run as it is now (`queued` once every action is
    /// answered, and then it resumes).
    Run(Box<Run>),
    NotFound,
    /// The run does not wait for a decision: its status.
    NotPaused(crate::run::RunStatus),
    /// An answer does not fit (why); nothing of them was stored.
    Refused(String),
}

impl Runner {
    /// Stores a client's answers to a paused run, all or none; once every
    /// pending action is answered, the run resumes (it takes a slot like a
    /// queued run). It goes on in a task of its own: a client that goes
    /// away once its answers are stored never leaves the run unresumed.
    pub async fn answer(
        &self,
        tenant: &Tenant,
        id: Uuid,
        answers: Vec<(String, ActionAnswer)>,
    ) -> Result<Answered, SubmitError> {
        let (runner, tenant) = (self.clone(), tenant.clone());
        super::detached(async move { runner.answered(tenant, id, answers).await }).await
    }

    async fn answered(
        &self,
        tenant: Tenant,
        id: Uuid,
        answers: Vec<(String, ActionAnswer)>,
    ) -> Result<Answered, SubmitError> {
        let transition = Transition::Answer {
            run_id: id,
            tenant: tenant.clone(),
            answers,
            at: Utc::now(),
        };
        let outcome = self
            .services
            .store
            .writer()
            .transition(transition)
            .await
            .map_err(|error| match error {
                StoreError::Refused(why) => SubmitError::StorageRefused(why),
                error => SubmitError::Store(error),
            })?;
        Ok(match outcome {
            Transitioned::Answered {
                run,
                complete,
                model,
                ..
            } => {
                // Queued again, to resume from its checkpoint. A server
                // that is stopping leaves it queued in storage: the next
                // process resumes it (on PostgreSQL, any replica).
                if complete {
                    let _accepting = self.lifecycle.tasks.token();
                    let place = self.scheduler.readmit(&tenant);
                    let queued = Unfinished {
                        run: run.clone(),
                        tenant: tenant.clone(),
                        model,
                        answered_pause: true,
                        recovered: false,
                    };
                    self.queue(queued, place);
                }
                Answered::Run(Box::new(run))
            }
            Transitioned::NotFound => Answered::NotFound,
            Transitioned::NotPaused(status) => Answered::NotPaused(status),
            Transitioned::Refused(why) => Answered::Refused(why),
            // Its pause had run out: it ended `timeout` instead.
            Transitioned::Ended { run, .. } => {
                self.services.metrics.finished(Outcome::Timeout);
                Answered::NotPaused(run.status)
            }
            Transitioned::NotDue
            | Transitioned::Forwarded { .. }
            | Transitioned::Purged
            | Transitioned::Live(_)
            | Transitioned::AgentSaved(_)
            | Transitioned::AgentExists
            | Transitioned::AgentArchived
            | Transitioned::UploadSaved
            | Transitioned::UploadDeleted
            | Transitioned::ScheduleSaved
            | Transitioned::Advanced(_)
            | Transitioned::Released(_)
            | Transitioned::HistoryTaken
            | Transitioned::HandedOver(_)
            | Transitioned::Expired(_) => {
                return Err(SubmitError::Store(StoreError::Corrupt(
                    "an answer was taken for another transition".into(),
                )));
            }
        })
    }

    /// Resolves to a run's final state once it is terminal, across its
    /// pauses: from memory when its end was stored here, `None` when it is
    /// known to be stored (read it), when its end could not be stored, or
    /// when the server stops first.
    pub async fn finished(&self, id: Uuid) -> Option<Run> {
        let channels = self.services.store.live();
        loop {
            if let (Some(_), Some(closed)) = (self.live(id), channels.closed(id)) {
                match closed.await {
                    (Closing::Ended, run) => return run,
                    (Closing::GivenUp, _) => return None,
                    (Closing::Paused, _) => continue,
                }
            }
            // Not live here: ended, paused, or answered and about to resume.
            // The wait is made before looking again, so that a resume after
            // the look is not missed.
            let reopened = channels.until_reopened(id);
            if channels.ended(id).is_some() {
                if self.live(id).is_some() {
                    continue;
                }
                // Open, but its task let go (past shutdown's grace): its
                // channel closes with the store.
                tokio::select! {
                    () = reopened.wait() => continue,
                    () = self.lifecycle.closing.cancelled() => return None,
                }
            }
            match self.services.store.run_status(id).await {
                Ok(Some(status)) if !status.is_terminal() => {
                    tokio::select! {
                        () = reopened.wait() => {}
                        () = self.lifecycle.closing.cancelled() => return None,
                    }
                }
                _ => return None,
            }
        }
    }

    /// Watches the paused runs' deadlines, ending each pause that runs out
    /// `timeout`. Ends with the runner.
    pub(super) fn watch_pauses(&self) {
        tokio::spawn(watch_pauses(
            std::sync::Arc::downgrade(&self.services),
            std::sync::Arc::clone(&self.pauses),
            self.lifecycle.closing.clone(),
        ));
    }
}

async fn end_paused(
    shared: &Services,
    id: Uuid,
    status: Outcome,
    error: Option<String>,
    due: bool,
) -> Result<Option<Run>, StoreError> {
    let transition = Transition::End {
        run_id: id,
        status,
        error,
        at: Utc::now(),
        due,
    };
    match shared.store.writer().transition(transition).await? {
        Transitioned::Ended { run, .. } => {
            shared.metrics.finished(status);
            Ok(Some(run))
        }
        _ => Ok(None),
    }
}

async fn watch_pauses(
    shared: Weak<Services>,
    pauses: std::sync::Arc<tokio::sync::Notify>,
    closing: tokio_util::sync::CancellationToken,
) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let next = match strong.store.pause_deadlines(WATCH_PAGE).await {
            Ok(deadlines) => {
                let now = Utc::now();
                // A full page of due pauses: look again at once.
                let full = deadlines.len() == WATCH_PAGE as usize;
                let mut next = full.then_some(now);
                for (id, deadline) in deadlines {
                    if deadline > now {
                        next = Some(deadline);
                        break;
                    }
                    match end_paused(&strong, id, Outcome::Timeout, Some(NO_ANSWER.into()), true)
                        .await
                    {
                        Ok(Some(_)) => {
                            tracing::info!(run_id = %id, "a pause ran out; the run timed out")
                        }
                        Ok(None) => {}
                        Err(error) => {
                            // Tried again after the idle wait, not at once.
                            tracing::warn!(run_id = %id, %error, "a pause that ran out could not be ended");
                            next = None;
                            break;
                        }
                    }
                }
                next
            }
            Err(error) => {
                tracing::warn!(%error, "reading the paused runs' deadlines failed");
                None
            }
        };
        let sleep = next
            .and_then(|next| (next - Utc::now()).to_std().ok())
            .map_or(WATCH_IDLE, |wait| wait.min(WATCH_IDLE));
        drop(strong);
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            () = pauses.notified() => {}
            () = closing.cancelled() => return,
        }
    }
}
