//! A run's drive of the harness: its model (the profile's, or a script
//! from where it stopped), its tools, its settings from its request and its
//! profile, and where it begins (fresh, resumed, recovered).

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use super::{Begin, Left, RunTask};
use crate::harness::output::OutputSchema;
use crate::harness::{
    Answers, Approval, Checkpoint, ContextLimits, Harness, Limits, Model, Progress, RunConfig,
};
use crate::mcp::RunServers;
use crate::models::ScriptedModel;
use crate::run::ModelSpec;
use crate::runner::observer;

impl RunTask {
    /// Builds the run's model and tools and runs the harness, from where
    /// `begin` says; then ends the run's MCP sessions, whatever happened,
    /// before its end is told. Returns how the drive left it (ended,
    /// paused with its checkpoint, or handed over). An error is the service's own failure (the run ends
    /// `failed`).
    pub(super) async fn run_harness(
        &self,
        observer: &Arc<observer::RunObserver>,
        begin: Begin,
    ) -> Result<Left, String> {
        let mut servers = RunServers::default();
        let progress = self.drive(observer, begin, &mut servers).await;
        servers.close().await;
        progress
    }

    async fn drive(
        &self,
        observer: &Arc<observer::RunObserver>,
        begin: Begin,
        servers: &mut RunServers,
    ) -> Result<Left, String> {
        let shared = &self.runner.services;
        let spec = &self.spec;
        if let Some(why) = self.take_failure.get() {
            return Err(why.clone());
        }
        // Its workspace, cloned or unpacked if it must be, before anything
        // of the run starts. A stop meanwhile ends the clone: the harness
        // then ends the run as the stop says.
        tokio::select! {
            biased;
            () = self.live.stop.stopped() => {}
            seeded = self.seed_workspace() => seeded?,
        }
        // A resumed run's counters are as its pause (or its last step)
        // stored them.
        let resumed = match &begin {
            Begin::Resume(_) => Some(
                shared
                    .store
                    .live()
                    .read(self.live.id, |run| (run.steps, run.tool_calls, run.usage))
                    .ok_or("the run is not live")?,
            ),
            // A response lost with the process (its step counted, its
            // message not stored) is asked for again: its step is not
            // counted twice (its tokens, spent, stay counted).
            Begin::Recover(stored) => Some((
                stored.steps.saturating_sub(u32::from(stored.response_lost)),
                stored.tool_calls,
                stored.usage,
            )),
            Begin::Continue(_) => None,
        };
        // A resumed scripted model goes on from the response after the last
        // one it gave (each accepted response is a step; a lost one, not
        // counted above, is given again).
        let answered = resumed.map_or(0, |(steps, _, _)| steps as usize);
        // The loop's switches: the profile's, else the server's.
        let scripted = match &spec.model {
            ModelSpec::Scripted(_) => true,
            ModelSpec::Profile(name) => shared
                .profiles
                .get(name)
                .is_some_and(|profile| profile.kind() == crate::models::ProfileKind::Scripted),
        };
        let (model, loop_settings): (Arc<dyn Model>, _) = match &spec.model {
            ModelSpec::Scripted(script) => (
                Arc::new(ScriptedModel::new(
                    script.get(answered..).unwrap_or_default().to_vec(),
                )),
                shared.loop_defaults,
            ),
            ModelSpec::Profile(name) => shared
                .profiles
                .get(name)
                .map(|profile| {
                    (
                        profile.instantiate_after(answered),
                        profile.loop_settings().or(shared.loop_defaults),
                    )
                })
                .ok_or_else(|| format!("model profile {name:?} is not configured"))?,
        };
        // A resumed run's running time so far.
        let before = match &begin {
            Begin::Resume(stored) => stored.running,
            Begin::Recover(stored) => stored.running,
            Begin::Continue(_) => Duration::ZERO,
        };
        let (registry, connecting) = self.tools(observer, servers, before).await?;
        let (begin, history) = match begin {
            Begin::Continue(history) => (None, history),
            begin => (Some(begin), Vec::new()),
        };
        let price = match &spec.model {
            ModelSpec::Profile(name) => shared.profiles.get(name).and_then(|p| p.price()),
            ModelSpec::Scripted(_) => None,
        };
        let config = RunConfig {
            run_id: self.live.id,
            prompt: spec.prompt.clone(),
            instructions: spec.instructions.clone(),
            default_instructions: spec.instructions.is_some()
                && spec.instructions.as_deref() == shared.default_instructions.as_deref(),
            history,
            limits: Limits {
                max_steps: NonZeroU32::new(spec.limits.max_steps).ok_or("max_steps is zero")?,
                max_tool_calls: spec.limits.max_tool_calls,
                // Starting its MCP servers was running time too.
                timeout: Some(
                    Duration::from_millis(spec.limits.timeout_ms).saturating_sub(connecting),
                ),
                max_cost_usd: spec.limits.max_cost_usd,
            },
            context: ContextLimits {
                max_context_chars: NonZeroUsize::new(spec.context.max_context_chars)
                    .ok_or("max_context_chars is zero")?,
                max_tool_result_chars: NonZeroUsize::new(spec.context.max_tool_result_chars)
                    .ok_or("max_tool_result_chars is zero")?,
                max_run_bytes: NonZeroUsize::new(shared.max_run_bytes)
                    .ok_or("max_run_bytes is zero")?,
            },
            approval: Approval::from_names(&spec.approval.tools),
            check_answers: loop_settings.check_answers(),
            write_code_blocks: loop_settings.write_code_blocks(),
            draft_first: loop_settings.draft_first(),
            question_unchanged: loop_settings.question_unchanged(scripted),
            output: spec
                .output_schema
                .as_ref()
                .map(|schema| OutputSchema::new(Arc::clone(schema), spec.limits.output_retries))
                .transpose()
                .map_err(|why| format!("the output schema does not compile: {why}"))?
                .map(Arc::new),
            temperature: spec.attempt_of.and_then(|of| of.temperature),
            price,
            compaction: spec.context.compaction.as_ref().map(|compaction| {
                let own = compaction
                    .profile
                    .as_deref()
                    .and_then(|name| shared.profiles.get(name));
                crate::harness::Compaction {
                    at: compaction.at,
                    model: own.map(|profile| profile.instantiate()),
                    price: match own {
                        Some(profile) => profile.price(),
                        None => price,
                    },
                }
            }),
            fallback: match &spec.model {
                ModelSpec::Profile(name) => shared.profiles.fallbacks(name),
                ModelSpec::Scripted(_) => None,
            },
            // Attempts share their parent's prefix, and so its cache.
            cache_key: Some(
                spec.attempt_of
                    .map_or(self.live.id, |of| of.parent_run_id)
                    .to_string(),
            ),
        };
        let harness = Harness {
            model: &*model,
            tools: &registry,
            observer: Some(&**observer),
        };
        let progress = match begin.zip(resumed) {
            None | Some((Begin::Continue(_), _)) => harness.start(config, &self.live.stop).await,
            Some((Begin::Recover(stored), (steps, tool_calls, usage))) => {
                let checkpoint = Checkpoint {
                    messages: stored.messages,
                    steps,
                    tool_calls,
                    usage,
                    last_sequence: stored.last_sequence,
                    elapsed: stored.running,
                    pending: Vec::new(),
                };
                harness
                    .recover(config, checkpoint, stored.batch, &self.live.stop)
                    .await
            }
            Some((Begin::Resume(stored), (steps, tool_calls, usage))) => {
                let answers: Answers = stored
                    .answers
                    .iter()
                    .map(|(id, answer)| (id.clone(), answer.to_answer()))
                    .collect();
                let checkpoint = Checkpoint {
                    messages: stored.messages,
                    steps,
                    tool_calls,
                    usage,
                    last_sequence: stored.last_sequence,
                    elapsed: stored.running,
                    pending: stored.pending,
                };
                harness
                    .resume(config, checkpoint, answers, &self.live.stop)
                    .await
            }
        };
        match progress {
            Progress::Ended(result) => {
                tracing::info!(status = %result.status, steps = result.steps, tool_calls = result.tool_calls, "run ended");
                Ok(Left::Ended)
            }
            Progress::Paused(checkpoint) => Ok(Left::Paused(checkpoint)),
            Progress::HandedOver(_) => Ok(Left::HandedOver),
        }
    }
}
