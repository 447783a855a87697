//! The watch of storage's health: runs whose records cannot be stored
//! must not go on as if they were.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::observer;
use super::registry::LiveRuns;
use crate::harness::StopReason;
use crate::store::Store;

/// How often the storage watch looks.
const STORAGE_WATCH: Duration = Duration::from_millis(100);

/// Stops the executing runs once storage has refused writes for
/// `write_retry`: their records cannot be stored, so they must not go on as
/// if they were. Each ends `failed` (see [`observer::STORAGE_REFUSED`]), and
/// that end is stored once storage takes writes again. Ends with the runner.
pub(super) async fn watch_storage(
    store: Store,
    runs: std::sync::Weak<LiveRuns>,
    write_retry: Duration,
) {
    loop {
        tokio::time::sleep(STORAGE_WATCH).await;
        let Some(runs) = runs.upgrade() else {
            return;
        };
        if store
            .writer()
            .failing_for()
            .is_none_or(|failing| failing < write_retry)
        {
            continue;
        }
        for run in runs.all() {
            if run.executing.load(Ordering::Acquire)
                && run
                    .stop
                    .stop(StopReason::Failed(observer::STORAGE_REFUSED.to_owned()))
            {
                tracing::error!(run_id = %run.id, "storage refuses the run's records; stopping it");
            }
        }
    }
}
