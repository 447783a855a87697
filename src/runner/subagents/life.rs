//! A child's life, followed by a task of its own (its start in its turn
//! among its batch's, its end, what its parent's stream is told of both,
//! its usage added to its parent's), and the pending actions of the
//! children that wait for a decision, which their parent lists.

use std::sync::{Arc, Mutex};

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::delegate::Ended;
use crate::harness::{EventKind, PendingAction, StopReason, UsageTotals};
use crate::run::{Run, RunSpec, RunStatus};
use crate::runner::{LiveRun, Runner};

/// The pending actions of a run's children that wait for a decision, by
/// child, which the run lists as its own while they wait.
#[derive(Clone)]
pub(super) struct Waiting {
    parent: Uuid,
    by_child: Arc<Mutex<std::collections::BTreeMap<Uuid, Vec<PendingAction>>>>,
}

impl Waiting {
    pub(super) fn new(parent: Uuid) -> Self {
        Self {
            parent,
            by_child: Arc::default(),
        }
    }

    /// `child` as it is now: its actions listed while it waits for a
    /// decision, and no longer once it does not. Stored when that changes.
    pub(super) fn update(&self, runner: &Runner, child: &Run) {
        let actions: Vec<PendingAction> = if child.status == RunStatus::RequiresAction {
            child
                .pending_actions
                .iter()
                .map(|action| PendingAction {
                    // A grandchild's keeps its own run.
                    run_id: Some(action.run_id.unwrap_or(child.id)),
                    ..action.clone()
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut by_child = crate::sync::lock(&self.by_child);
        let before = by_child.get(&child.id).cloned().unwrap_or_default();
        if before == actions {
            return;
        }
        if actions.is_empty() {
            by_child.remove(&child.id);
        } else {
            by_child.insert(child.id, actions);
        }
        let all: Vec<PendingAction> = by_child.values().flatten().cloned().collect();
        // Sent under the lock: stored in the order they were made.
        if let Err(error) = runner.services.store.writer().delegated(self.parent, &all) {
            tracing::warn!(%error, "a child's pending actions could not be listed on its parent");
        }
        drop(by_child);
    }
}

/// One child's life, in a task of its own: its start (in its turn among
/// the batch's), its end, and what the parent's stream is told of both.
pub(super) struct ChildLife {
    pub(super) runner: Runner,
    pub(super) tenant: crate::run::Tenant,
    pub(super) parent: Arc<LiveRun>,
    pub(super) parallel: Arc<Semaphore>,
    pub(super) news: mpsc::UnboundedSender<EventKind>,
    pub(super) cancel: CancellationToken,
    pub(super) gone: CancellationToken,
    pub(super) call_id: String,
    pub(super) agent: String,
    pub(super) waiting: Waiting,
    pub(super) counting: Arc<tokio::sync::Mutex<()>>,
}

impl ChildLife {
    pub(super) async fn live(self, spec: RunSpec, copy_from: Option<std::path::PathBuf>) -> Ended {
        let stopped = CancellationToken::new();
        let _permit = tokio::select! {
            permit = Arc::clone(&self.parallel).acquire_owned() => permit.map_err(|e| e.to_string())?,
            () = self.cancel.cancelled() => return Err("the run was stopped".into()),
            () = self.gone.cancelled() => return Err("the run went on without it".into()),
        };
        let run = self
            .runner
            .start_child(&self.tenant, spec, copy_from.as_deref())
            .await
            .map_err(|error| error.to_string())?;
        tracing::info!(call_id = %self.call_id, child_run_id = %run.id, agent = %self.agent, "sub-agent started");
        let _ = self.news.send(EventKind::SubrunStart {
            call_id: self.call_id.clone(),
            run_id: run.id,
            agent: self.agent.clone(),
        });
        let runner = self.runner.clone();
        let waiting = self.waiting.clone();
        let meanwhile = |child: &Run| waiting.update(&runner, child);
        let ended = tokio::select! {
            ended = self.runner.ended_run(run.id, &stopped, meanwhile) => ended,
            () = self.cancel.cancelled() => self.stop_child(run.id).await,
            () = self.gone.cancelled() => self.stop_child(run.id).await,
        };
        if let Some(ended) = &ended {
            self.waiting.update(&self.runner, ended);
        }
        let Some(ended) = ended else {
            return Err("the run was stopped".into());
        };
        tracing::info!(call_id = %self.call_id, child_run_id = %ended.id, status = %ended.status, "sub-agent ended");
        let _ = self.news.send(EventKind::SubrunEnd {
            call_id: self.call_id.clone(),
            run_id: ended.id,
            status: ended.status.as_str().to_owned(),
        });
        self.count_usage().await;
        Ok(ended)
    }

    /// The parent stopped (its stop, or its drive ended: see
    /// `Delegation::gone`) before its child ended: a client's cancel, its
    /// deadline, or its end cancels the child, and the child's end is
    /// waited for; a parent handed over (the server stopping) leaves its
    /// children to go on, and whoever resumes it waits for them again.
    async fn stop_child(&self, id: Uuid) -> Option<Run> {
        if matches!(
            self.parent.stop.reason(),
            Some(StopReason::HandOver | StopReason::Interrupted(_))
        ) {
            return None;
        }
        self.runner.cancel_child(id).await;
        let never = CancellationToken::new();
        self.runner.ended_run(id, &never, |_| {}).await
    }

    /// The parent's `usage_total`: what its children used, summed again
    /// from storage (each child's own total), so that a child is counted
    /// once whoever tells it.
    async fn count_usage(&self) {
        // One count at a time: a later read is never stored before an
        // earlier one.
        let _counting = self.counting.lock().await;
        let store = &self.runner.services.store;
        let Ok(children) = store.attempts_of(self.parent.id).await else {
            return;
        };
        let mut usage = UsageTotals::starting(true);
        for child in children.iter().filter(|c| c.status.is_terminal()) {
            usage = usage.plus(&child.usage_total.unwrap_or(child.usage));
        }
        if let Err(error) = store.writer().children_usage(self.parent.id, usage) {
            tracing::warn!(%error, "the children's usage could not be stored");
        }
    }
}
