//! Cancels: of a run live here, and of one only in storage.

use std::sync::Arc;

use uuid::Uuid;

use super::{LiveRun, Runner};
use crate::run::{Run, Tenant};
use crate::scheduler::Cancelled;
use crate::store::StoreError;

impl Runner {
    /// Cancels a live run. `None` when it is not live (terminal or unknown).
    pub fn cancel(&self, tenant: &Tenant, id: Uuid) -> Option<Arc<LiveRun>> {
        self.runs.cancel(tenant, id)
    }

    /// A cancel (a client's, or a parent's of its attempt or child) of a
    /// run that is not live here: a paused one ends `aborted`; on
    /// PostgreSQL so does a queued one, and a running one's replica is told
    /// to cancel it. The run as it is then; `Ok(None)` when it is none of
    /// these (any more). `why` is the error a run this ends ends with:
    /// `None` for a client's cancel.
    pub async fn cancel_stored(
        &self,
        id: Uuid,
        why: Option<String>,
    ) -> Result<Option<Run>, StoreError> {
        Ok(match self.scheduler.cancel_elsewhere(id, why).await? {
            Cancelled::Ended(run) => {
                // Ended here, not by its own task: its children are
                // cancelled here too (a live parent cancels its own).
                if run.subagents.is_some() || run.attempt_policy.is_some() {
                    self.cancel_children(id);
                }
                Some(*run)
            }
            Cancelled::Forwarded(run) => Some(*run),
            Cancelled::Not => None,
        })
    }
}
