//! Sub-agents (SPEC section 24): a run's `delegate` calls start child runs,
//! runs of their own that name their parent, and wait for their ends.
//!
//! - [`Runner::start_child`]: a child's row and task, or the child the call
//!   started before (a unique index on the parent and the call makes sure
//!   no call starts two, whoever resumes the parent).
//! - [`SlotCell`]: the parent gives its slot back while it waits for its
//!   children (a tenant allowed one run at a time would otherwise wait for
//!   ever), and takes one again, in its tenant's turn, to go on.
//! - `delegate`: the tool itself.

mod delegate;
mod life;

use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{Runner, SubmitError};
use crate::run::{Run, RunSpec, Tenant};
use crate::scheduler::{Hold, Slot};
pub(super) use delegate::{Delegation, DelegationParts};

/// How often a child is read again from storage without news of it (news
/// can go by unheard: on PostgreSQL, a replica's notice lost).
const LOOK_AGAIN: Duration = Duration::from_secs(5);

impl Runner {
    /// Starts the child run `spec` describes (its `child_of` set), or finds
    /// the one its call started before. Its workspace is its parent's
    /// directory, or a copy of `copy_from` kept as its starting tree (its
    /// diff is against it). It was admitted with its parent: no rate or
    /// quota refuses it, and it waits for a slot of its tenant's as any
    /// run. Nothing is left behind when this fails.
    pub(super) async fn start_child(
        &self,
        tenant: &Tenant,
        spec: RunSpec,
        copy_from: Option<&std::path::Path>,
    ) -> Result<Run, SubmitError> {
        let of = spec
            .child_of
            .clone()
            .ok_or(SubmitError::Workspace("not a child run".into()))?;
        let store = &self.services.store;
        if let Some(run) = store.child_of_call(of.parent_run_id, &of.call_id).await? {
            return Ok(run);
        }
        let copy = copy_from.map(|from| (from, "delegate"));
        match self.insert_child(tenant, spec, copy).await {
            Ok(run) => Ok(run),
            // Another process resuming the parent may have started it
            // meanwhile: that one is the call's child.
            Err(error) => match store.child_of_call(of.parent_run_id, &of.call_id).await {
                Ok(Some(run)) => Ok(run),
                _ => Err(error),
            },
        }
    }

    /// Cancels, in a task of its own, every child of the run `id` that has
    /// not ended (and, through their cancels, theirs): its parent ended
    /// without its own task to do it (cancelled while paused or queued).
    pub(super) fn cancel_children(&self, id: Uuid) {
        let runner = self.clone();
        tokio::spawn(async move {
            let children = match runner.services.store.attempts_of(id).await {
                Ok(children) => children,
                Err(error) => {
                    tracing::warn!(%error, run_id = %id, "a cancelled run's children could not be read");
                    return;
                }
            };
            for child in children.into_iter().filter(|c| !c.status.is_terminal()) {
                runner.cancel_child(child.id).await;
            }
        });
    }

    /// Cancels a child that has not ended: one live here at once; one
    /// paused, queued elsewhere or running on another replica through
    /// storage.
    pub(super) async fn cancel_child(&self, id: Uuid) {
        if let Some(live) = self.live(id) {
            live.stop.stop(crate::harness::StopReason::Cancelled);
            return;
        }
        if let Err(error) = self.cancel_stored(id, None).await {
            tracing::warn!(%error, child_run_id = %id, "a child's cancel could not be stored");
        }
    }

    /// The run `id` once it has ended, as stored; `None` if `stop` fires
    /// first, or it is gone (purged). `meanwhile` is told the run as it is
    /// whenever its status changes before that.
    pub(super) async fn ended_run(
        &self,
        id: Uuid,
        stop: &CancellationToken,
        mut meanwhile: impl FnMut(&Run),
    ) -> Option<Run> {
        let store = &self.services.store;
        // Subscribed before the first read: no end after it goes unheard.
        let (mut statuses, mut missed) = store.live().subscribe_statuses();
        loop {
            match store.run_by_id(id).await {
                Ok(Some(run)) if run.status.is_terminal() => return Some(run),
                Ok(Some(run)) => meanwhile(&run),
                Ok(None) => return None,
                Err(error) => {
                    tracing::warn!(%error, child_run_id = %id, "a child could not be read")
                }
            }
            let look_again = tokio::time::sleep(LOOK_AGAIN);
            tokio::pin!(look_again);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return None,
                    () = missed.cancelled() => {
                        (statuses, missed) = store.live().subscribe_statuses();
                        break;
                    }
                    () = &mut look_again => break,
                    change = statuses.recv() => match change {
                        Ok(change) if change.run_id == id => break,
                        Ok(_) => {}
                        Err(RecvError::Lagged(_)) => break,
                        Err(RecvError::Closed) => return None,
                    },
                }
            }
        }
    }
}

/// A run's slot, which it may give back while it waits on its children,
/// and its share of the slot's holding, which it keeps to its end.
pub(super) struct SlotCell {
    slot: std::sync::Mutex<Option<Slot>>,
    hold: Hold,
}

impl SlotCell {
    pub(super) fn new(slot: Result<Slot, Hold>) -> Self {
        match slot {
            Ok(slot) => Self {
                hold: slot.hold(),
                slot: std::sync::Mutex::new(Some(slot)),
            },
            Err(hold) => Self {
                hold,
                slot: std::sync::Mutex::new(None),
            },
        }
    }

    /// Gives the slot back (to the runs that wait, its children among
    /// them); whether it had one.
    pub(super) fn lend(&self) -> bool {
        crate::sync::lock(&self.slot).take().is_some()
    }

    /// Takes a slot again after [`SlotCell::lend`], in its tenant's turn
    /// (none once the server is stopping: it goes on to its end).
    pub(super) async fn take_back(&self, runner: &Runner, tenant: &Tenant) {
        if let Some(mut slot) = runner.scheduler.slot_again(tenant).await {
            slot.executing();
            crate::sync::lock(&self.slot).get_or_insert(slot);
        }
    }

    /// At the run's end: its slot (if it holds one now), given back as it
    /// is dropped, and its hold.
    pub(super) fn take(&self) -> (Option<Slot>, Hold) {
        (crate::sync::lock(&self.slot).take(), self.hold.clone())
    }
}
