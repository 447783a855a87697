//! Following a task: its run read again at each change of its status
//! (told by the store's status channel, the same one `GET /v1/runs/events`
//! follows), until it ends or waits for input.

use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use serde_json::{Value, json};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::task;
use crate::api::error::ApiError;
use crate::api::state::AppState;
use crate::run::{Run, Tenant};
use crate::store::StatusChange;

/// How long a watch goes without reading its run again when no change is
/// told (changes missed by this replica are then seen this late at most).
const LOOK_AGAIN: Duration = Duration::from_secs(2);

/// The changes of one run's status, subscribed to before its run is read.
pub struct Watch {
    state: AppState,
    tenant: Tenant,
    id: Uuid,
    changes: broadcast::Receiver<Arc<StatusChange>>,
    missed: CancellationToken,
    closing: CancellationToken,
}

impl Watch {
    /// Subscribes to the changes of run `id` (before it is read, so that
    /// none goes by unseen).
    pub fn new(state: &AppState, tenant: &Tenant, id: Uuid) -> Self {
        let (changes, missed) = state.runner.store().live().subscribe_statuses();
        Self {
            state: state.clone(),
            tenant: tenant.clone(),
            id,
            changes,
            missed,
            closing: state.runner.closing(),
        }
    }

    /// The run as it is now.
    pub async fn read(&self) -> Result<Run, ApiError> {
        crate::api::tenant_run::read(&self.state, &self.tenant, self.id).await
    }

    /// Waits until the run may have changed: a change of its status was
    /// told, some may have gone by unheard, or a while passed. `false` once
    /// the server is stopping.
    async fn changed(&mut self) -> bool {
        // One timer for the whole wait: other runs' changes do not put it
        // off.
        let look_again = tokio::time::sleep(LOOK_AGAIN);
        tokio::pin!(look_again);
        loop {
            let change = tokio::select! {
                change = self.changes.recv() => change,
                () = self.closing.cancelled() => return false,
                () = &mut look_again => return true,
            };
            match change {
                Ok(change) if change.run_id == self.id => return true,
                // Another run's, or heard before changes were missed.
                Ok(_) if !self.missed.is_cancelled() => {}
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    // Some went by unheard: subscribed again, looked again.
                    (self.changes, self.missed) =
                        self.state.runner.store().live().subscribe_statuses();
                    return true;
                }
                Err(RecvError::Closed) => return false,
            }
        }
    }

    /// The run once `done` holds for it (or the server stops, or `within`
    /// passes: the run as it is then).
    pub async fn until(
        mut self,
        done: impl Fn(&Run) -> bool,
        within: Option<Duration>,
    ) -> Result<Run, ApiError> {
        let deadline = within.map(|within| tokio::time::Instant::now() + within);
        let mut run = self.read().await?;
        while !done(&run) {
            let waited = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, self.changed())
                    .await
                    .unwrap_or(false),
                None => self.changed().await,
            };
            run = self.read().await?;
            if !waited {
                break;
            }
        }
        Ok(run)
    }

    /// The task's stream from `run` (as read before this watch began, or
    /// since) on, as `StreamResponse` results: its snapshot, a
    /// `statusUpdate` at each change of its state (an `artifactUpdate` for
    /// each artifact before the last), until it ends or waits for input.
    /// A failure to read it ends the stream.
    pub fn updates(mut self, run: Run) -> impl Stream<Item = Value> + Send + 'static {
        async_stream::stream! {
            let mut state = task::state(run.status);
            yield json!({"task": task::task(&run, None)});
            let mut settled = task::settled(run.status);
            // Read at once: what changed before this watch subscribed is
            // told by no change to come.
            let mut look = true;
            while !settled && (std::mem::take(&mut look) || self.changed().await) {
                let run = match self.read().await {
                    Ok(run) => run,
                    Err(error) => {
                        tracing::warn!(run_id = %self.id, %error, "an A2A stream could not read its task");
                        break;
                    }
                };
                if task::state(run.status) == state {
                    continue;
                }
                state = task::state(run.status);
                let (task_id, context_id) = (run.id.to_string(), run.thread_id.to_string());
                for artifact in task::artifacts(&run) {
                    yield json!({"artifactUpdate": {
                        "taskId": task_id, "contextId": context_id,
                        "artifact": artifact, "lastChunk": true
                    }});
                }
                yield json!({"statusUpdate": {
                    "taskId": task_id, "contextId": context_id, "status": task::status(&run)
                }});
                settled = task::settled(run.status);
            }
        }
    }
}
