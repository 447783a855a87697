//! The runner: accepts runs, queues them FIFO behind a concurrency limit, and
//! runs each as its own task with its own stop signal and workspace. Its
//! events go to the store, which publishes them to live subscribers.

mod observer;
mod pauses;
mod replicas;
mod retention;
mod submit;
mod task;
mod tools;
pub mod webhooks;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use uuid::Uuid;

use crate::config::Config;
use crate::harness::{SchemaCache, Stop, StopReason};
use crate::mcp::McpServers;
use crate::metrics::{Gauges, Metrics};
use crate::models::ModelProfiles;
use crate::run::{Run, RunSpec, RunStatus, Tenant};
use crate::store::{Store, StoreError, Unfinished};
use crate::tools::{CommandPresets, CommandRunner, Sandbox, WorkspaceOptions, Workspaces};

pub use crate::run::INTERRUPTED;

/// A subscription to a live run's events.
pub type LiveEvents = tokio::sync::broadcast::Receiver<Arc<crate::store::LiveEvent>>;
pub use pauses::{Answered, NO_ANSWER};
pub use retention::Purged;
use submit::detached;

/// A run that is queued or running.
pub struct LiveRun {
    pub id: Uuid,
    pub tenant: Tenant,
    /// Stops it, saying why: a client's cancel, the server stopping, storage
    /// refusing its records.
    stop: Stop,
    /// Set once its start is stored: it is executing.
    executing: AtomicBool,
    /// The run object as stored so far, kept up to date as its start and
    /// its end are handed to storage: what `?wait=true` answers once the
    /// end is stored, without reading it back.
    state: Mutex<Run>,
}

impl LiveRun {
    fn update(&self, change: impl FnOnce(&mut Run)) {
        if let Ok(mut run) = self.state.lock() {
            change(&mut run);
        }
    }

    /// Reads the run as stored so far, without a copy.
    fn peek<R>(&self, read: impl FnOnce(&Run) -> R) -> Option<R> {
        self.state.lock().ok().map(|run| read(&run))
    }

    fn snapshot(&self) -> Option<Run> {
        self.state.lock().ok().map(|run| run.clone())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the queue is full")]
    QueueFull,
    /// The request's files do not fit together (a file where another
    /// needs a directory).
    #[error("{0}")]
    Workspace(String),
    /// The disk is full (or over quota): the server's failure.
    #[error("{0}")]
    StorageFull(String),
    /// Storage refuses writes (the database's disk full, an I/O error).
    #[error("storage refuses writes: {0}")]
    StorageRefused(String),
    /// `previous_run_id` names no run of the tenant.
    #[error("previous_run_id: no such run")]
    PreviousNotFound,
    /// `previous_run_id` names a run that has not ended.
    #[error("previous_run_id: the run is {0}; a run can be continued once it has ended")]
    PreviousLive(RunStatus),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// State every run task shares.
pub(crate) struct Shared {
    store: Store,
    metrics: Arc<Metrics>,
    profiles: Arc<ModelProfiles>,
    commands: Arc<CommandRunner>,
    mcp: Arc<McpServers>,
    /// The tools' compiled argument validators, shared by all runs.
    schemas: SchemaCache,
    workspaces: Arc<Workspaces>,
    live: Mutex<HashMap<Uuid, Arc<LiveRun>>>,
    /// Runs waiting for a slot: the queue's length, which admission checks
    /// against `max_queued`.
    waiting: AtomicUsize,
    /// Runs executing now.
    running: AtomicUsize,
    /// On PostgreSQL: the database's waiting runs, as of the last sweep.
    queued_in_database: std::sync::atomic::AtomicU64,
    /// Told when a pause is stored: the watch of pause deadlines looks again.
    pauses: Arc<tokio::sync::Notify>,
    /// On PostgreSQL: told when a run may wait to be claimed.
    claims: tokio::sync::Notify,
    /// On PostgreSQL: the claimer holds a slot while it looks for a queued
    /// run (a submit that finds no slot then waits for it a moment).
    claiming: AtomicBool,
    /// Where runs' ends and pauses are posted.
    webhooks: Arc<webhooks::Webhooks>,
}

impl Shared {
    /// Lets go of a run that paused, unless a client cancelled it (checked
    /// under the lock that cancels take): that one stays registered until
    /// its pause is ended, so that an answer racing the cancel starts a run
    /// that inherits it. Whether it was cancelled.
    fn forget_unless_cancelled(&self, run: &Arc<LiveRun>) -> bool {
        let Ok(mut live) = self.live.lock() else {
            return false;
        };
        if matches!(run.stop.reason(), Some(StopReason::Cancelled)) {
            return true;
        }
        if live
            .get(&run.id)
            .is_some_and(|registered| Arc::ptr_eq(registered, run))
        {
            live.remove(&run.id);
        }
        false
    }

    /// Lets go of a live run, unless its id is live again as another one
    /// (a paused run answered and resumed before its first task let go).
    fn forget(&self, run: &Arc<LiveRun>) {
        if let Ok(mut live) = self.live.lock()
            && live
                .get(&run.id)
                .is_some_and(|registered| Arc::ptr_eq(registered, run))
        {
            live.remove(&run.id);
        }
    }
}

#[derive(Clone)]
pub struct Runner {
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    max_queued: usize,
    tasks: TaskTracker,
    /// Fires when the server stops taking runs.
    closing: CancellationToken,
    /// Fires when waiting runs must stop waiting (they stay `queued`).
    stop_queue: CancellationToken,
    /// Fires when shutdown's grace is over: running runs are interrupted,
    /// and ended ones no longer wait for their end to be stored.
    past_grace: CancellationToken,
}

impl Runner {
    pub fn new(
        config: &Config,
        store: Store,
        metrics: Arc<Metrics>,
        profiles: Arc<ModelProfiles>,
        sandbox: Arc<Sandbox>,
        mcp: Arc<McpServers>,
        webhooks: Arc<webhooks::Webhooks>,
    ) -> Self {
        let runner = Self {
            shared: Arc::new(Shared {
                store,
                metrics,
                profiles,
                commands: Arc::new(CommandRunner::new(
                    config.commands.clone().into_iter().collect(),
                    sandbox,
                )),
                mcp,
                schemas: SchemaCache::default(),
                workspaces: Arc::new(Workspaces::new(
                    &config.storage.workspaces_dir,
                    WorkspaceOptions::default(),
                )),
                live: Mutex::new(HashMap::new()),
                waiting: AtomicUsize::new(0),
                running: AtomicUsize::new(0),
                queued_in_database: std::sync::atomic::AtomicU64::new(0),
                pauses: Arc::default(),
                claims: tokio::sync::Notify::new(),
                claiming: AtomicBool::new(false),
                webhooks: Arc::clone(&webhooks),
            }),
            slots: Arc::new(Semaphore::new(config.runs.max_concurrent)),
            max_queued: config.runs.max_queued,
            tasks: TaskTracker::new(),
            closing: CancellationToken::new(),
            stop_queue: CancellationToken::new(),
            past_grace: CancellationToken::new(),
        };
        tokio::spawn(watch_storage(
            Arc::downgrade(&runner.shared),
            Duration::from_millis(config.storage.write_retry_ms),
        ));
        runner.watch_pauses();
        runner.deliver_webhooks(webhooks);
        runner
    }

    /// Where runs' ends and pauses are posted.
    pub fn webhooks(&self) -> &webhooks::Webhooks {
        &self.shared.webhooks
    }

    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// The gauges `/metrics` shows, read from the state that owns them.
    pub fn gauges(&self) -> Gauges {
        let stats = self.shared.store.writer().stats();
        let count = |n: &AtomicUsize| u64::try_from(n.load(Ordering::Relaxed)).unwrap_or(u64::MAX);
        Gauges {
            active_runs: count(&self.shared.running),
            queued_runs: match self.shared.store.cluster() {
                Some(_) => self.shared.queued_in_database.load(Ordering::Relaxed),
                None => count(&self.shared.waiting),
            },
            writer_batches: stats.batches.load(Ordering::Relaxed),
            writer_operations: stats.operations.load(Ordering::Relaxed),
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    pub fn profiles(&self) -> &ModelProfiles {
        &self.shared.profiles
    }

    pub fn presets(&self) -> &CommandPresets {
        self.shared.commands.presets()
    }

    pub fn mcp(&self) -> &McpServers {
        &self.shared.mcp
    }

    pub fn is_closing(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// Fires when the server stops taking runs: what waits on a paused run
    /// stops waiting then.
    pub fn closing(&self) -> CancellationToken {
        self.closing.clone()
    }

    pub fn live(&self, id: Uuid) -> Option<Arc<LiveRun>> {
        self.shared.live.lock().ok()?.get(&id).cloned()
    }

    /// The directory of a run's workspace.
    pub fn workspace_dir(&self, id: Uuid) -> PathBuf {
        self.shared.workspaces.dir(&id.to_string())
    }

    /// Starts again the runs a previous process left queued, oldest first;
    /// answered pauses resume from their checkpoints.
    pub fn resume(&self, unfinished: Vec<Unfinished>) {
        for Unfinished {
            run,
            tenant,
            model,
            answered_pause,
        } in unfinished
        {
            self.shared.waiting.fetch_add(1, Ordering::AcqRel);
            let spec = RunSpec::of_run(&run, model);
            self.start(run, tenant, spec, None, answered_pause, false);
        }
    }

    fn start(
        &self,
        run: Run,
        tenant: Tenant,
        spec: RunSpec,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
        resuming: bool,
        follow: bool,
    ) -> Option<LiveEvents> {
        let live = Arc::new(LiveRun {
            id: run.id,
            tenant,
            stop: Stop::new(),
            executing: AtomicBool::new(false),
            state: Mutex::new(run.clone()),
        });
        // Registered before its channel opens: whoever finds the channel
        // open finds this run live, not the task of its pause.
        if let Ok(mut registry) = self.shared.live.lock()
            && let Some(paused) = registry.insert(run.id, Arc::clone(&live))
            && matches!(paused.stop.reason(), Some(StopReason::Cancelled))
        {
            // Cancelled while its pause was letting go, after the answer.
            live.stop.cancel();
        }
        self.shared.store.live().open(run.id);
        let events = follow
            .then(|| self.shared.store.live().subscribe(run.id))
            .flatten();
        if self.past_grace.is_cancelled() {
            live.stop
                .stop(StopReason::Interrupted(INTERRUPTED.to_owned()));
        }
        let span = tracing::info_span!("run", run_id = %run.id);
        let task = task::RunTask {
            runner: self.clone(),
            live,
            spec,
            inserted_running: run.status == RunStatus::Running,
            resuming,
        };
        self.tasks.spawn(task.execute(slot).instrument(span));
        events
    }

    /// Cancels a live run. `None` when it is not live (terminal or unknown).
    pub fn cancel(&self, tenant: &Tenant, id: Uuid) -> Option<Arc<LiveRun>> {
        // Under the registry's lock: a pausing run's task decides under it
        // whether it was cancelled (see `Shared::forget_unless_cancelled`).
        let registry = self.shared.live.lock().ok()?;
        let live = registry.get(&id).filter(|live| &live.tenant == tenant)?;
        live.stop.cancel();
        Some(Arc::clone(live))
    }

    /// Stops the service's runs: no new run is accepted; running runs get
    /// `grace` to finish, then end `interrupted`; queued runs stay queued, to
    /// start again with the next process (on PostgreSQL, any replica claims
    /// them). Returns once everything is stored.
    pub async fn shutdown(&self, grace: Duration) {
        self.closing.cancel();
        self.tasks.close();
        // Waiting runs must not start now: their tasks end at once, so the
        // tracker then waits for the running ones alone.
        self.stop_queue.cancel();
        // A replica whose lease is lost meanwhile stops at once: its runs
        // are another replica's to end.
        let lost = self.lease_lost();
        let grace_over = async {
            match &lost {
                Some(lost) => {
                    tokio::select! {
                        () = tokio::time::sleep(grace) => {}
                        () = lost.cancelled() => {}
                    }
                }
                None => tokio::time::sleep(grace).await,
            }
        };
        let finished = tokio::select! {
            () = self.tasks.wait() => true,
            () = grace_over => false,
        };
        if finished {
            self.shared.store.close().await;
            return;
        }
        // Whatever starts after this (accepted during the grace) is
        // interrupted by `start` itself.
        self.past_grace.cancel();
        let live: Vec<_> = self
            .shared
            .live
            .lock()
            .map(|live| live.values().cloned().collect())
            .unwrap_or_default();
        for run in live {
            run.stop
                .stop(StopReason::Interrupted(INTERRUPTED.to_owned()));
        }
        self.tasks.wait().await;
        self.shared.store.close().await;
    }
}

/// How often the storage watch looks.
const STORAGE_WATCH: Duration = Duration::from_millis(100);

/// Stops the executing runs once storage has refused writes for
/// `write_retry`: their records cannot be stored, so they must not go on as
/// if they were. Each ends `failed` (see [`observer::STORAGE_REFUSED`]), and
/// that end is stored once storage takes writes again. Ends with the runner.
async fn watch_storage(shared: std::sync::Weak<Shared>, write_retry: Duration) {
    loop {
        tokio::time::sleep(STORAGE_WATCH).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared
            .store
            .writer()
            .failing_for()
            .is_none_or(|failing| failing < write_retry)
        {
            continue;
        }
        let live: Vec<Arc<LiveRun>> = shared
            .live
            .lock()
            .map(|live| live.values().cloned().collect())
            .unwrap_or_default();
        for run in live {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `finished` answers from the live run once its end is stored: a final
    /// run object (not `None`, which would send `?wait=true` to storage),
    /// equal to what storage then holds.
    #[tokio::test]
    async fn a_finished_run_is_answered_from_memory_as_stored() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.storage.workspaces_dir = dir.path().join("workspaces");
        let url = format!("sqlite://{}/runs.db", dir.path().display());
        let (store, _) = Store::open(&url, Duration::from_secs(1), Duration::from_secs(10))
            .await
            .unwrap();
        let runner = Runner::new(
            &config,
            store.clone(),
            Arc::new(Metrics::default()),
            Arc::new(ModelProfiles::default()),
            Arc::new(Sandbox::unconfined()),
            Arc::default(),
            Arc::new(webhooks::Webhooks::new(&config.webhooks, |_| None).unwrap()),
        );
        let spec = RunSpec::scripted(vec![json!({"delay_ms": 100, "content": "done"})]);
        let tenant = Tenant::anonymous();
        let run = runner.submit(&tenant, spec, None).await.unwrap();
        let finished = runner
            .finished(run.id)
            .await
            .expect("its end is stored and kept");
        assert_eq!(finished.status.as_str(), "completed");
        assert_eq!(finished.answer.as_deref(), Some("done"));
        let stored = store.get_run(&tenant, run.id).await.unwrap().unwrap();
        assert_eq!(
            serde_json::to_value(&finished).unwrap(),
            serde_json::to_value(&stored).unwrap()
        );
        runner.shutdown(Duration::from_secs(1)).await;
    }
}
