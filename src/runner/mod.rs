//! The runner: accepts runs, hands them to the scheduler, and executes each
//! as its own task with its own stop signal and workspace. Its events go to
//! the store, which publishes them to live subscribers.
//!
//! - `submit`: accepting a run (admission, its workspace, its row).
//! - [`crate::scheduler`]: which run starts next, and the slots.
//! - `task`: executing one run, from its slot to its stored end or pause;
//!   `observer` hands its events to the store, `tools` builds its tools.
//! - `registry`: the runs live here, for cancels.
//! - `pauses`: answering paused runs, and the watch of their deadlines.
//! - `webhooks`, `retention`: posting ends and pauses; removing old runs.

mod attempts;
mod cancel;
mod changes;
mod observer;
mod pauses;
mod registry;
mod retention;
mod seed;
mod storage_watch;
mod subagents;
mod submit;
mod task;
mod tenant;
mod tools;
mod waiting;
pub mod webhooks;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::config::{Config, TenantPolicy};
use crate::harness::{SchemaCache, Stop, StopReason};
use crate::mcp::McpServers;
use crate::metrics::{Gauges, Metrics};
use crate::models::ModelProfiles;
use crate::run::{Run, RunSpec, RunStatus, Tenant};
use crate::scheduler::{Host, Queued, Refused, Scheduler, Slot, Turn};
use crate::store::{Store, StoreError, Unfinished};
use crate::telemetry::Telemetry;
use crate::tools::{CommandPresets, CommandRunner, Sandbox, WorkspaceOptions, Workspaces};

pub use crate::run::INTERRUPTED;

/// A subscription to a live run's events.
pub type LiveEvents = tokio::sync::broadcast::Receiver<Arc<crate::store::LiveEvent>>;
pub use pauses::{Answered, NO_ANSWER};
pub use registry::LiveRun;
use registry::LiveRuns;
pub use retention::Purged;
use submit::detached;
pub use tenant::TenantReport;

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("the queue is full")]
    QueueFull,
    /// The tenant's rate limit or token quota refuses the run for
    /// `retry_after`: the scheduler's refusal.
    #[error("{refused}")]
    Limited {
        refused: Refused,
        retry_after: Duration,
    },
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
    /// This process takes no work for now (see [`Scheduler::unready`]).
    #[error("{0}")]
    Unready(String),
    /// `previous_run_id` names no run of the tenant.
    #[error("previous_run_id: no such run")]
    PreviousNotFound,
    /// `previous_run_id` names a run that has not ended.
    #[error("previous_run_id: the run is {0}; a run can be continued once it has ended")]
    PreviousLive(RunStatus),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What executing a run needs: storage, its model profiles and its tools'
/// dependencies, shared by every run's task.
pub(crate) struct Services {
    store: Store,
    metrics: Arc<Metrics>,
    profiles: Arc<ModelProfiles>,
    commands: Arc<CommandRunner>,
    mcp: Arc<McpServers>,
    /// The tools' compiled argument validators, shared by all runs.
    schemas: SchemaCache,
    workspaces: Arc<Workspaces>,
    /// `[workspaces]`: clones and uploads.
    repositories: crate::config::WorkspacesConfig,
    /// `limits.max_upload_bytes`.
    max_upload_bytes: u64,
    /// `retention.keep_days`: when uploads expire.
    keep_days: Option<u32>,
    /// `limits.max_run_bytes`.
    max_run_bytes: usize,
    /// `runs.draft_first`, `runs.check_answers` and
    /// `runs.write_code_blocks`: what a run's profile leaves unset.
    loop_defaults: crate::models::profile::LoopSettings,
    /// `runs.default_instructions`, when not empty: a run whose
    /// instructions are these is not sent them in a draft.
    default_instructions: Option<Arc<str>>,
    /// Where runs' spans go, if anywhere.
    telemetry: Arc<Telemetry>,
    /// `runs.max_attempts` and `runs.max_parallel_attempts`.
    max_attempts: u32,
    max_parallel_attempts: u32,
    /// `runs.max_depth` and `runs.max_parallel_subruns`.
    max_depth: u32,
    max_parallel_subruns: u32,
}

/// Where the runner is in its life: taking runs, in shutdown's grace, or
/// past it.
#[derive(Clone, Default)]
struct Lifecycle {
    tasks: TaskTracker,
    /// Fires when the server stops taking runs.
    closing: CancellationToken,
    /// Fires when shutdown's grace is over: running runs are interrupted,
    /// and ended ones no longer wait for their end to be stored.
    past_grace: CancellationToken,
    /// Fires once every run's task is done at shutdown (their ends and
    /// hand-overs stored): the webhooks' dispatcher then tries what is due,
    /// for a while, and stops.
    runs_done: CancellationToken,
    /// The webhooks' dispatcher, waited for before the store closes.
    webhooks: TaskTracker,
}

#[derive(Clone)]
pub struct Runner {
    services: Arc<Services>,
    runs: Arc<LiveRuns>,
    scheduler: Arc<dyn Scheduler>,
    /// Told when a pause is stored: the watch of pause deadlines looks again.
    pauses: Arc<tokio::sync::Notify>,
    /// Where runs' ends and pauses are posted.
    webhooks: Arc<webhooks::Webhooks>,
    lifecycle: Lifecycle,
    /// Each tenant's limits, as `GET /v1/tenant` shows them.
    tenants: Arc<TenantPolicy>,
    /// Runs queued behind live ones (a busy thread's follow-ups).
    waiting: Arc<waiting::Waiting>,
}

/// How a run's task gets its slot.
enum Entry {
    /// It has one: it was admitted to a free slot, or taken from the queue.
    Slot(Slot),
    /// It waits here for its turn.
    Turn(Turn),
}

/// Where a run's task takes it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// From its prompt (after the transcript it continues, if any).
    Start,
    /// From its pause, every action answered.
    Answered,
    /// From what was stored when its process stopped.
    Recovered,
}

impl Origin {
    fn of(queued: &Unfinished) -> Self {
        if queued.answered_pause {
            Self::Answered
        } else if queued.recovered {
            Self::Recovered
        } else {
            Self::Start
        }
    }
}

/// Everything [`Runner::new`] is built from.
pub struct Parts {
    pub store: Store,
    pub scheduler: Arc<dyn Scheduler>,
    pub metrics: Arc<Metrics>,
    pub profiles: Arc<ModelProfiles>,
    pub sandbox: Arc<Sandbox>,
    pub mcp: Arc<McpServers>,
    pub webhooks: Arc<webhooks::Webhooks>,
    pub telemetry: Arc<Telemetry>,
}

impl Runner {
    pub fn new(config: &Config, parts: Parts) -> Self {
        let Parts {
            store,
            scheduler,
            metrics,
            profiles,
            sandbox,
            mcp,
            webhooks,
            telemetry,
        } = parts;
        let runner = Self {
            services: Arc::new(Services {
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
                repositories: config.workspaces.clone(),
                max_upload_bytes: config.limits.max_upload_bytes,
                keep_days: config.retention.keep_days,
                max_run_bytes: config.limits.max_run_bytes,
                loop_defaults: crate::models::profile::LoopSettings::all(
                    config.runs.draft_first,
                    config.runs.check_answers,
                    config.runs.write_code_blocks,
                    config.runs.question_unchanged,
                ),
                default_instructions: (!config.runs.default_instructions.is_empty())
                    .then(|| config.runs.default_instructions.as_str().into()),
                telemetry,
                max_attempts: config.runs.max_attempts,
                max_parallel_attempts: config.runs.max_parallel_attempts,
                max_depth: config.runs.max_depth,
                max_parallel_subruns: config.runs.max_parallel_subruns,
            }),
            runs: Arc::default(),
            scheduler,
            pauses: Arc::default(),
            webhooks: Arc::clone(&webhooks),
            lifecycle: Lifecycle::default(),
            tenants: Arc::new(TenantPolicy::new(&config.tenants, &config.runs)),
            waiting: Arc::default(),
        };
        tokio::spawn(storage_watch::watch_storage(
            runner.services.store.clone(),
            Arc::downgrade(&runner.runs),
            Duration::from_millis(config.storage.write_retry_ms),
        ));
        runner.watch_pauses();
        runner.watch_waiting();
        runner.deliver_webhooks(webhooks);
        runner
    }

    /// Where runs' ends and pauses are posted.
    pub fn webhooks(&self) -> &webhooks::Webhooks {
        &self.webhooks
    }

    pub fn store(&self) -> &Store {
        &self.services.store
    }

    /// The gauges `/metrics` shows, read from the state that owns them.
    pub fn gauges(&self) -> Gauges {
        let stats = self.services.store.writer().stats();
        let counts = self.scheduler.counts();
        Gauges {
            active_runs: counts.executing,
            queued_runs: counts.queued,
            writer_batches: stats.batches.load(Ordering::Relaxed),
            writer_operations: stats.operations.load(Ordering::Relaxed),
        }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.services.metrics
    }

    pub fn profiles(&self) -> &ModelProfiles {
        &self.services.profiles
    }

    pub fn presets(&self) -> &CommandPresets {
        self.services.commands.presets()
    }

    pub fn telemetry(&self) -> &Telemetry {
        &self.services.telemetry
    }

    pub fn mcp(&self) -> &McpServers {
        &self.services.mcp
    }

    /// `[workspaces]`: which repositories runs may be cloned from, and how.
    pub fn repositories(&self) -> &crate::config::WorkspacesConfig {
        &self.services.repositories
    }

    /// `[runs] max_attempts`: most attempts a run may ask for.
    pub fn max_attempts(&self) -> u32 {
        self.services.max_attempts
    }

    /// `[runs] max_depth`: how deep runs may delegate.
    pub fn max_depth(&self) -> u32 {
        self.services.max_depth
    }

    /// `[limits] max_upload_bytes`.
    pub fn max_upload_bytes(&self) -> u64 {
        self.services.max_upload_bytes
    }

    /// `[retention] keep_days`: how long runs and uploads are kept.
    pub fn keep_days(&self) -> Option<u32> {
        self.services.keep_days
    }

    pub fn is_closing(&self) -> bool {
        self.lifecycle.closing.is_cancelled()
    }

    /// Fires when the server stops taking runs: what waits on a paused run
    /// stops waiting then.
    pub fn closing(&self) -> CancellationToken {
        self.lifecycle.closing.clone()
    }

    /// Why this process takes no work now (on PostgreSQL, it lost its
    /// lease and is joining again), if so.
    pub fn unready(&self) -> Option<String> {
        self.scheduler.unready()
    }

    pub fn live(&self, id: Uuid) -> Option<Arc<LiveRun>> {
        self.runs.get(id)
    }

    /// The directory of a run's workspace.
    pub fn workspace_dir(&self, id: Uuid) -> PathBuf {
        self.services.workspaces.dir(&id.to_string())
    }

    /// The directory the runs' workspaces are in (and the trees kept
    /// beside them, see [`crate::repo::places`]).
    pub fn workspaces_root(&self) -> &std::path::Path {
        self.services.workspaces.root()
    }

    /// Starts the scheduler's own work (on PostgreSQL: claims, the lease,
    /// the other replicas' news). Called once the server is bound (a
    /// replica that cannot serve claims nothing) and before it serves.
    pub async fn join(&self) {
        self.scheduler.join(Arc::new(self.clone())).await;
    }

    /// Starts again the runs a previous process left queued, oldest first;
    /// answered pauses resume from their checkpoints.
    pub fn resume(&self, unfinished: Vec<Unfinished>) {
        for queued in unfinished {
            let place = self.scheduler.readmit(&queued.tenant);
            self.queue(queued, place);
        }
    }

    /// A run stored `queued` goes to the scheduler: its task waits here for
    /// its turn, or it waits in the database for any replica.
    fn queue(&self, queued: Unfinished, place: crate::scheduler::Place) {
        let origin = Origin::of(&queued);
        let Unfinished {
            run, tenant, model, ..
        } = queued;
        match self.scheduler.enqueue(place, origin == Origin::Start) {
            Queued::Here(turn) => {
                let spec = RunSpec::of_run(&run, model);
                self.start(run, tenant, spec, Entry::Turn(turn), origin, false);
            }
            Queued::Elsewhere => {}
        }
    }

    fn start(
        &self,
        run: Run,
        tenant: Tenant,
        spec: RunSpec,
        entry: Entry,
        origin: Origin,
        follow: bool,
    ) -> Option<LiveEvents> {
        let live = Arc::new(LiveRun {
            id: run.id,
            tenant,
            stop: Stop::new(),
            executing: std::sync::atomic::AtomicBool::new(false),
        });
        // Registered before its channel opens: whoever finds the channel
        // open finds this run live, not the task of its pause.
        self.runs.register(&live);
        let (id, inserted_running) = (run.id, run.status == RunStatus::Running);
        let channels = self.services.store.live();
        channels.open(id, run);
        let events = follow.then(|| channels.subscribe(id)).flatten();
        // Past shutdown's grace, or in a slot whose hold was revoked (see
        // `stop_all`), it is handed over at once.
        let revoked = matches!(&entry, Entry::Slot(slot) if slot.revoked());
        if self.lifecycle.past_grace.is_cancelled() || revoked {
            live.stop.stop(StopReason::HandOver);
        }
        let span = tracing::info_span!("run", run_id = %id);
        let task = task::RunTask {
            runner: self.clone(),
            live,
            spec,
            inserted_running,
            origin,
            take_failure: std::sync::OnceLock::new(),
            slot: std::sync::OnceLock::new(),
        };
        // Boxed once: spawning moves the task's future through several
        // wrappers, and it is large (the harness's loop is in it).
        self.lifecycle
            .tasks
            .spawn(Box::pin(task.execute(entry)).instrument(span));
        events
    }

    /// Stops the service's runs: no new run is accepted; running runs get
    /// `grace` to finish, then are handed over at their next safe point
    /// (queued again to resume, see [`StopReason::HandOver`]); queued runs
    /// stay queued, to start again with the next process (on PostgreSQL,
    /// any replica claims them at once). The webhooks' deliveries go on
    /// until the runs are done, then stop (see [`webhooks`]). Returns once
    /// everything is stored.
    pub async fn shutdown(&self, grace: Duration) {
        let lifecycle = &self.lifecycle;
        lifecycle.closing.cancel();
        lifecycle.tasks.close();
        // Waiting runs must not start now: their tasks end at once, so the
        // tracker then waits for the running ones alone. (A replica whose
        // lease is lost meanwhile stops its runs at once: see `stop_all`.)
        self.scheduler.close();
        let finished = tokio::select! {
            () = lifecycle.tasks.wait() => true,
            () = tokio::time::sleep(grace) => false,
        };
        if !finished {
            // Whatever starts after this (accepted during the grace) is
            // handed over by `start` itself.
            lifecycle.past_grace.cancel();
            self.stop_all();
            lifecycle.tasks.wait().await;
        }
        // The runs' ends are stored, and their webhooks with them: the
        // dispatcher tries what is due now, then leaves the rest to the
        // next start.
        lifecycle.runs_done.cancel();
        lifecycle.webhooks.close();
        lifecycle.webhooks.wait().await;
        self.services.store.close().await;
    }
}

impl Host for Runner {
    fn start_taken(&self, run: Unfinished, slot: Slot, cancel: bool) {
        let id = run.run.id;
        let origin = Origin::of(&run);
        let spec = RunSpec::of_run(&run.run, run.model);
        self.start(run.run, run.tenant, spec, Entry::Slot(slot), origin, false);
        if cancel && self.runs.cancel_any(id) {
            tracing::info!(run_id = %id, "cancelled while it was queued");
        }
    }

    fn is_live(&self, id: Uuid) -> bool {
        self.runs.contains(id)
    }

    fn cancel_live(&self, id: Uuid) -> bool {
        self.runs.cancel_any(id)
    }

    /// Every live run is stopped at its next safe point, to be handed over
    /// (see [`StopReason::HandOver`]): by this process, or, when its hold
    /// was revoked, by whoever takes it over.
    fn stop_all(&self) {
        for run in self.runs.all() {
            run.stop.stop(StopReason::HandOver);
        }
    }

    fn hold(&self) -> Option<TaskTrackerToken> {
        (!self.is_closing()).then(|| self.lifecycle.tasks.token())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `finished` answers from the store's copy of the live run once its
    /// end is stored: a final run object (not `None`, which would send
    /// `?wait=true` to storage), equal to what storage then holds.
    #[tokio::test]
    async fn a_finished_run_is_answered_from_memory_as_stored() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.storage.workspaces_dir = dir.path().join("workspaces");
        let url = format!("sqlite://{}/runs.db", dir.path().display());
        let (store, _) = Store::open(&url, Duration::from_secs(1), Duration::from_secs(10))
            .await
            .unwrap();
        let metrics = Arc::new(Metrics::default());
        let runner = Runner::new(
            &config,
            Parts {
                store: store.clone(),
                scheduler: Arc::new(crate::scheduler::Local::new(
                    store.clone(),
                    Arc::clone(&metrics),
                    4,
                    4,
                    crate::config::TenantPolicy::new(&config.tenants, &config.runs),
                )),
                metrics,
                profiles: Arc::new(ModelProfiles::default()),
                sandbox: Arc::new(Sandbox::unconfined()),
                mcp: Arc::default(),
                webhooks: Arc::new(
                    webhooks::Webhooks::new(
                        &config.webhooks,
                        &config.tenants,
                        !config.auth.tokens.is_empty(),
                        |_| None,
                    )
                    .unwrap(),
                ),
                telemetry: Arc::new(Telemetry::off()),
            },
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
