//! One run's task: waits for a slot, makes sure its start is stored, builds
//! its model and tools, runs the harness, and lets go of the run once its end
//! is stored.

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::FutureExt;

use super::{LiveRun, Runner, observer};
use crate::harness::{
    Approval, ContextLimits, Harness, Limits, Model, Outcome, RunConfig, StopReason, Tool,
    ToolRegistry,
};
use crate::models::ScriptedModel;
use crate::run::{ModelSpec, RunSpec, RunStatus, format_time};
use crate::tools::builtin_tools;

pub(super) struct RunTask {
    pub(super) runner: Runner,
    pub(super) live: Arc<LiveRun>,
    pub(super) spec: RunSpec,
    /// Stored `running` from its insert: its start needs no write of its own.
    pub(super) inserted_running: bool,
}

impl RunTask {
    pub(super) async fn execute(self, slot: Option<tokio::sync::OwnedSemaphorePermit>) {
        let shared = Arc::clone(&self.runner.shared);
        let observer = observer::RunObserver::new(
            Arc::clone(&self.live),
            shared.store.clone(),
            Arc::clone(&shared.metrics),
        );
        let stop = &self.live.stop;
        let interrupted = || matches!(stop.reason(), Some(StopReason::Interrupted(_)));
        let slot = match slot {
            // Stored running already: it runs, even if the server began to
            // stop meanwhile (it gets the grace every running run gets).
            Some(slot) => slot,
            None => {
                let acquired = tokio::select! {
                    biased;
                    () = stop.stopped() => None,
                    () = self.runner.stop_queue.cancelled() => None,
                    permit = Arc::clone(&self.runner.slots).acquire_owned() => permit.ok(),
                };
                shared.waiting.fetch_sub(1, Ordering::AcqRel);
                let stopping = self.runner.stop_queue.is_cancelled();
                match acquired {
                    Some(permit) if !stopping => permit,
                    // The server is stopping (the run is not cancelled by a
                    // client): it stays queued in storage for the next process.
                    _ if stopping && !stop.is_stopped() || interrupted() => {
                        return self.leave_queued();
                    }
                    _ => {
                        tracing::info!("cancelled while queued");
                        observer.end_without_harness(Outcome::Aborted, None);
                        return self.ended(&observer).await;
                    }
                }
            }
        };
        // Executed only once its start is stored, so that a restart finds it
        // `running` and never runs it a second time. A run that had a slot
        // when it was accepted was inserted `running`.
        let at = Utc::now();
        if !self.inserted_running {
            // Set first: once sent, the start may be stored even if a
            // cancel wins the race below.
            self.live.update(|run| {
                run.status = RunStatus::Running;
                run.started_at = Some(at);
            });
        }
        let started = async {
            if self.inserted_running {
                return Ok(());
            }
            shared
                .store
                .writer()
                .started(self.live.id, format_time(&at))
                .await
        };
        tokio::select! {
            stored = started => if let Err(error) = stored {
                tracing::error!(%error, "the run's start could not be stored; it stays queued");
                return self.leave_queued();
            },
            () = stop.stopped() => {
                // The server stopping lets it wait for the next process, as
                // every queued run; a client's cancel ends it.
                if interrupted() {
                    return self.leave_queued();
                }
                tracing::info!("cancelled before its start was stored");
                observer.end_without_harness(Outcome::Aborted, None);
                return self.ended(&observer).await;
            }
        }
        self.live.executing.store(true, Ordering::Release);
        shared.running.fetch_add(1, Ordering::AcqRel);
        let began = Instant::now();
        tracing::debug!("run started");
        let outcome = std::panic::AssertUnwindSafe(self.run_harness(&observer))
            .catch_unwind()
            .await;
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error),
            Err(_) => Some("the run's task panicked".to_owned()),
        };
        if let Some(error) = failure
            && observer.ended().is_none()
        {
            tracing::error!(%error, "run failed");
            observer.end_without_harness(Outcome::Failed, Some(error));
        }
        shared.metrics.run_duration.record(began.elapsed());
        shared.running.fetch_sub(1, Ordering::AcqRel);
        drop(slot);
        self.ended(&observer).await;
    }

    /// After the run's end was handed to the store: counts it, and waits for
    /// it to be stored before the run stops being live, so that whoever
    /// finds it not live finds its end in storage. Past shutdown's grace it
    /// does not wait (closing the store commits it, or gives it up). Should
    /// its end never have reached the store, its channel is closed here, so
    /// that no waiter is left hanging.
    async fn ended(&self, observer: &observer::RunObserver) {
        let shared = &self.runner.shared;
        match observer.ended() {
            Some(status) => shared.metrics.finished(status),
            None => shared.store.live().close(self.live.id, false),
        }
        if let Some(stored) = shared.store.live().ended(self.live.id) {
            tokio::select! {
                _ = stored => {}
                () = self.runner.past_grace.cancelled() => {}
            }
        }
        shared.forget(self.live.id);
    }

    /// Lets go of a run that never started, leaving it `queued` in storage.
    fn leave_queued(&self) {
        self.runner.shared.store.live().close(self.live.id, false);
        self.runner.shared.forget(self.live.id);
    }

    /// Builds the run's model and tools and runs the harness. An error is the
    /// service's own failure (the run ends `failed`).
    async fn run_harness(&self, observer: &observer::RunObserver) -> Result<(), String> {
        let shared = &self.runner.shared;
        let spec = &self.spec;
        let model: Arc<dyn Model> = match &spec.model {
            ModelSpec::Scripted(script) => Arc::new(ScriptedModel::new(script.clone())),
            ModelSpec::Profile(name) => shared
                .profiles
                .instantiate(name)
                .ok_or_else(|| format!("model profile {name:?} is not configured"))?,
        };
        let workspace = Arc::new(shared.workspaces.run(&self.live.id.to_string()));
        let tools: Vec<Arc<dyn Tool>> = builtin_tools(
            workspace,
            Arc::clone(&shared.commands),
            &spec.tools,
            &spec.commands,
        )
        .map_err(|e| e.to_string())?;
        let registry =
            ToolRegistry::with_cache(tools, &shared.schemas).map_err(|e| e.to_string())?;
        let config = RunConfig {
            run_id: self.live.id,
            prompt: spec.prompt.clone(),
            limits: Limits {
                max_steps: NonZeroU32::new(spec.limits.max_steps).ok_or("max_steps is zero")?,
                max_tool_calls: spec.limits.max_tool_calls,
                timeout: Some(Duration::from_millis(spec.limits.timeout_ms)),
            },
            context: ContextLimits {
                max_context_chars: NonZeroUsize::new(spec.context.max_context_chars)
                    .ok_or("max_context_chars is zero")?,
                max_tool_result_chars: NonZeroUsize::new(spec.context.max_tool_result_chars)
                    .ok_or("max_tool_result_chars is zero")?,
            },
            approval: Approval::None,
        };
        let result = Harness {
            model: &*model,
            tools: &registry,
            observer: Some(observer),
        }
        .run(config, &self.live.stop)
        .await;
        tracing::info!(status = %result.status, steps = result.steps, tool_calls = result.tool_calls, "run ended");
        Ok(())
    }
}
