//! The agent loop: the model proposes, the harness validates, budgets,
//! executes and records.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

mod added;
mod ask;
mod calls;
mod ceiling;
mod compact;
mod config;
mod cut_off;
mod draft;
mod end;
mod fallback;
mod notes;
mod output;
mod recover;
mod transcript;

pub use compact::SUMMARY_ASK;
pub use config::{
    Compaction, ContextLimits, DEFAULT_MAX_CONTEXT_CHARS, DEFAULT_MAX_RUN_BYTES, DEFAULT_MAX_STEPS,
    DEFAULT_MAX_TOOL_CALLS, DEFAULT_MAX_TOOL_RESULT_CHARS, DEFAULT_TIMEOUT_MS, FallbackModel,
    Fallbacks, Limits, RunConfig,
};
pub use recover::StoppedBatch;

use ask::Asked;

use super::context::ContextIndex;
use super::events::{Emitter, EventKind, Observer, Outcome, Totals};
use super::message::Message;
use super::model::Model;
use super::pause::{Answer, Answers, Checkpoint, PendingAction};
use super::registry::ToolRegistry;
use super::stop::{Stop, StopReason};
use crate::harness::usage::UsageTotals;

/// How long a tool may go on after the run's token fired before the harness
/// stops waiting for it (and drops it). Cooperative tools stop well within it.
pub const TOOL_CANCEL_GRACE: Duration = Duration::from_millis(250);

/// Where a run driven by [`Harness::start`] or [`Harness::resume`] stands:
/// ended (its `run_end` emitted), or paused for a decision (no `run_end`;
/// its `actions_required` emitted).
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    Ended(RunResult),
    Paused(Checkpoint),
    /// Stopped to be handed over ([`StopReason::HandOver`]): no `run_end`;
    /// where it stood, to be resumed from what was stored.
    HandedOver(Checkpoint),
}

/// The error of a run handed over by a caller that cannot hand it over.
pub const HANDED_OVER: &str = "The server stopped while the run was running";

/// The result a continued transcript's call that never ran is given.
pub const UNANSWERED: &str = "The run ended before this call ran";

/// What a run that paused tells a caller that cannot pause it.
pub const CANNOT_PAUSE: &str =
    "The run needs a client's decision, but it was started without a way to pause";

/// How a run ended and what it did.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub run_id: Uuid,
    pub status: Outcome,
    /// The final answer, when the run completed.
    pub answer: Option<String>,
    /// What went wrong, for `model_error` and `context_limit`.
    pub error: Option<String>,
    /// The whole transcript, tool results as bounded, nothing trimmed.
    pub messages: Vec<Arc<Message>>,
    /// Model responses accepted.
    pub steps: u32,
    /// Tool calls dispatched (unknown and invalid ones included).
    pub tool_calls: u32,
    pub usage: UsageTotals,
    /// The final answer's JSON document, when the run has an output schema
    /// and completed.
    pub output: Option<Value>,
}

/// The inputs of a run that outlive it: the model, the tools, and who listens.
pub struct Harness<'a> {
    pub model: &'a dyn Model,
    pub tools: &'a ToolRegistry,
    pub observer: Option<&'a dyn Observer>,
}

/// Why the run's token fired, had it fired: the run's own deadline, or a
/// stop from outside (which came first wins).
enum Stopped {
    Deadline,
    From(StopReason),
}

/// How the loop ended, before it is turned into a status.
enum End {
    /// The final answer, and its document when the run has an output
    /// schema.
    Completed(String, Option<Value>),
    /// The last answer was not valid output, and no retry is left: the
    /// answer, and the run's error.
    OutputInvalid(String, String),
    StepLimit,
    ToolLimit,
    /// The run's token fired: its deadline, or a stop from outside.
    Stopped,
    ModelError(String),
    ContextLimit(String),
    /// The run's cost reached its `max_cost_usd`.
    CostLimit(String),
    /// A batch waits for answers to these calls.
    Paused(Vec<PendingAction>),
    /// The caller cannot go on with the run.
    Failed(String),
}

/// How a drive begins: a new run, or a paused one with its answers.
enum Begin {
    Fresh,
    Resume(Checkpoint, Answers),
    /// After its process stopped: what is stored of its last batch.
    Recover(Checkpoint, StoppedBatch),
}

/// The result of a call that was running when the run's process stopped,
/// whose tool is not safe to run twice.
pub const OUTCOME_UNKNOWN: &str = "Outcome unknown: the server stopped while this call was running; \
     check its effects before trying again";

impl Harness<'_> {
    /// Runs the loop to its end. Never panics on anything a model or a tool
    /// does, and emits `run_end` exactly once, whatever the path. A run that
    /// would pause (see [`Harness::start`]) ends `failed` instead.
    pub async fn run(&self, config: RunConfig, stop: &Stop) -> RunResult {
        let (run, end, stopped) = self.drive(&config, Begin::Fresh, stop).await;
        let end = match end {
            End::Paused(_) => End::Failed(CANNOT_PAUSE.to_owned()),
            end => end,
        };
        if let Some(observer) = self.observer {
            observer.ending().await;
        }
        run.finish(end, stopped)
    }

    /// Runs the loop until it ends or pauses for a decision: a batch with a
    /// call that needs approval, or a call of a client's tool.
    pub async fn start(&self, config: RunConfig, stop: &Stop) -> Progress {
        let (run, end, stopped) = self.drive(&config, Begin::Fresh, stop).await;
        self.before_end(&end, &stopped).await;
        run.progress(end, stopped)
    }

    /// Continues a paused run: executes its waiting batch in call order with
    /// `answers` (which must answer every pending action), then goes on.
    /// Emits no second `run_start`; its events continue the sequence.
    pub async fn resume(
        &self,
        config: RunConfig,
        checkpoint: Checkpoint,
        answers: Answers,
        stop: &Stop,
    ) -> Progress {
        let (run, end, stopped) = self
            .drive(&config, Begin::Resume(checkpoint, answers), stop)
            .await;
        self.before_end(&end, &stopped).await;
        run.progress(end, stopped)
    }

    /// Continues a run whose process stopped while it ran, from what was
    /// stored (`checkpoint`; no pending actions): the calls of its last
    /// batch without a result run now, except that one of them that was
    /// started (see [`StoppedBatch`]) runs again only if its tool is
    /// idempotent, and otherwise gets the error result [`OUTCOME_UNKNOWN`];
    /// a last answer without calls ends it. Then it goes on. Every call
    /// ends with exactly one result.
    pub async fn recover(
        &self,
        config: RunConfig,
        checkpoint: Checkpoint,
        batch: StoppedBatch,
        stop: &Stop,
    ) -> Progress {
        let (run, end, stopped) = self
            .drive(&config, Begin::Recover(checkpoint, batch), stop)
            .await;
        self.before_end(&end, &stopped).await;
        run.progress(end, stopped)
    }

    /// Tells the observer the run is about to end, unless the drive left it
    /// paused or handed over (see [`Run::progress`]).
    async fn before_end(&self, end: &End, stopped: &Stopped) {
        let continues = match end {
            End::Paused(_) => true,
            End::Stopped => matches!(stopped, Stopped::From(StopReason::HandOver)),
            _ => false,
        };
        if !continues && let Some(observer) = self.observer {
            observer.ending().await;
        }
    }

    async fn drive<'h, 'c>(
        &'h self,
        config: &'c RunConfig,
        begin: Begin,
        stop: &Stop,
    ) -> (Run<'h, 'c>, End, Stopped) {
        let token = stop.token().child_token();
        let began = Instant::now();
        let (mut run, answers) = match begin {
            Begin::Fresh => {
                let mut run = Run::new(self, config, Emitter::new(config.run_id, self.observer));
                for message in &config.history {
                    let size = message.serialized_size();
                    run.index.push(message, size.chars);
                    run.transcript_bytes += size.bytes;
                }
                run.messages.clone_from(&config.history);
                run.rebuild_view();
                run.emitter.emit(|| EventKind::RunStart);
                run.close_unanswered();
                run.append(Message::user(config.prompt.clone()));
                (run, None)
            }
            Begin::Resume(checkpoint, answers) => {
                let emitter =
                    Emitter::continuing(config.run_id, self.observer, checkpoint.last_sequence);
                let mut run = Run::new(self, config, emitter);
                // Only answers to pending calls count, and only ones that
                // fit their kind (see `Run::answered`).
                let answers: Vec<(PendingAction, Option<Answer>)> = checkpoint
                    .pending
                    .iter()
                    .map(|pending| {
                        let answer = answers
                            .get(&pending.call_id)
                            .filter(|answer| answer.fits(pending.kind))
                            .cloned();
                        (pending.clone(), answer)
                    })
                    .collect();
                run.restore(checkpoint);
                (run, Some(Entry::Answers(answers)))
            }
            Begin::Recover(checkpoint, stopped) => {
                let emitter =
                    Emitter::continuing(config.run_id, self.observer, checkpoint.last_sequence);
                let mut run = Run::new(self, config, emitter);
                run.restore(checkpoint);
                (run, Some(Entry::Recovered(stopped)))
            }
        };
        // The deadline counts running time only: what a pause used is not
        // spent.
        let deadline = config.limits.timeout.map(|timeout| {
            tokio::time::Instant::now() + timeout.saturating_sub(run.elapsed_before)
        });
        let timed_out = AtomicBool::new(false);
        // A budget spent before a pause ends the run before anything more.
        let spent = config
            .limits
            .timeout
            .is_some_and(|timeout| timeout <= run.elapsed_before);
        let end = if spent {
            timed_out.store(true, Ordering::Release);
            End::Stopped
        } else {
            let body = run.drive(&token, deadline, answers);
            match deadline {
                Some(deadline) => with_deadline(body, deadline, stop, &token, &timed_out).await,
                None => body.await,
            }
        };
        token.cancel();
        run.elapsed_before += began.elapsed();
        let stopped = if timed_out.load(Ordering::Acquire) {
            Stopped::Deadline
        } else {
            Stopped::From(stop.reason().cloned().unwrap_or(StopReason::Cancelled))
        };
        (run, end, stopped)
    }
}

/// Drives `body`; when `deadline` passes first, marks the run timed out (unless
/// it was stopped from outside first), fires the run's token, and keeps driving `body`
/// so it ends through its ordinary cancellation path.
async fn with_deadline<F: Future>(
    body: F,
    deadline: tokio::time::Instant,
    external: &Stop,
    token: &CancellationToken,
    timed_out: &AtomicBool,
) -> F::Output {
    let mut body = pin!(body);
    tokio::select! {
        biased;
        end = &mut body => return end,
        () = tokio::time::sleep_until(deadline) => {
            if !external.is_stopped() {
                timed_out.store(true, Ordering::Release);
            }
            token.cancel();
        }
    }
    body.await
}

/// What a drive does before its loop, after a pause or a stop.
enum Entry {
    /// The paused batch, with its answers.
    Answers(Vec<(PendingAction, Option<Answer>)>),
    /// The batch its stopped process left (see [`Harness::recover`]).
    Recovered(StoppedBatch),
}

struct Run<'h, 'c> {
    harness: &'h Harness<'h>,
    config: &'c RunConfig,
    emitter: Emitter<'h>,
    messages: Vec<Arc<Message>>,
    index: ContextIndex,
    steps: u32,
    tool_calls: u32,
    usage: UsageTotals,
    /// Running time before this drive (its earlier drives, before pauses);
    /// after the drive, its running time in all.
    elapsed_before: Duration,
    /// What the instructions take of the context budget, measured once,
    /// when it matters (see [`Run::select_context`]).
    instructions_chars: std::sync::OnceLock<usize>,
    /// When this drive began.
    began: Instant,
    /// The bytes of the transcript's JSON (see `ceiling`).
    transcript_bytes: usize,
    /// A result was cut at the ceiling: the batch's other calls are not
    /// run, and the run ends.
    at_ceiling: bool,
    /// The instructions sent, when the run has an output schema: its own
    /// followed by what the model is told of the schema.
    told_instructions: Option<String>,
    /// What is sent, once a summary stands in for the transcript's start
    /// (see `compact`); `index` measures it then.
    view: Option<compact::View>,
    /// A summary failed in this drive: masking does the rest.
    compaction_failed: bool,
    /// What its priced calls cost, in US dollars (what `max_cost_usd`
    /// bounds; the calls whose cost is unknown count nothing).
    spent_usd: f64,
}

impl<'h, 'c> Run<'h, 'c> {
    fn new(harness: &'h Harness<'h>, config: &'c RunConfig, emitter: Emitter<'h>) -> Self {
        Self {
            harness,
            config,
            emitter,
            messages: Vec::new(),
            index: ContextIndex::default(),
            steps: 0,
            tool_calls: 0,
            usage: UsageTotals::starting(config.price.is_some()),
            elapsed_before: Duration::ZERO,
            instructions_chars: std::sync::OnceLock::new(),
            began: Instant::now(),
            transcript_bytes: 0,
            at_ceiling: false,
            view: None,
            compaction_failed: false,
            spent_usd: 0.0,
            told_instructions: config.output.as_ref().map(|output| {
                match config.instructions.as_deref() {
                    Some(own) => format!("{own}\n\n{}", output.told()),
                    None => output.told().to_owned(),
                }
            }),
        }
    }

    /// Tells the observer the run's totals, just before the event that
    /// makes them (a model response's `model_end`, a tool result's
    /// `message`): it stores them with that event.
    fn tell_totals(&self) {
        self.emitter.progress(&Totals {
            steps: self.steps,
            tool_calls: self.tool_calls,
            usage: self.usage,
            elapsed: self.elapsed_before + self.began.elapsed(),
        });
    }
}

impl Run<'_, '_> {
    async fn drive(
        &mut self,
        token: &CancellationToken,
        deadline: Option<tokio::time::Instant>,
        entry: Option<Entry>,
    ) -> End {
        if let Some(Entry::Recovered(stopped)) = entry {
            if let Some(end) = self.recover_batch(&stopped, token).await {
                return end;
            }
        } else if let Some(Entry::Answers(answers)) = entry {
            // The paused batch, in call order: pending calls as answered,
            // the others (needing no answer) as usual. Counted at the pause.
            let calls = self
                .messages
                .last()
                .map(|last| last.tool_calls().to_vec())
                .unwrap_or_default();
            self.announce(calls.iter().filter(|call| {
                answers
                    .iter()
                    .find(|(pending, _)| pending.call_id == call.id)
                    // Not an edited one: a batch is told of what runs.
                    .is_none_or(|(_, answer)| matches!(answer, Some(Answer::Approve)))
            }));
            for call in &calls {
                if token.is_cancelled() {
                    return End::Stopped;
                }
                match answers
                    .iter()
                    .find(|(pending, _)| pending.call_id == call.id)
                {
                    Some((pending, answer)) => {
                        self.answered(call, pending.kind, answer.as_ref(), token)
                            .await;
                    }
                    None if self.at_ceiling => self.not_run(call),
                    None => self.call_tool(call, token).await,
                }
            }
        }
        let limits = self.config.limits;
        while self.steps < limits.max_steps.get() {
            if token.is_cancelled() {
                return End::Stopped;
            }
            if self.at_ceiling {
                return self.ceiling_end();
            }
            let (mut response, draft) = match self.ask_model(token, deadline).await {
                Asked::Response(response, draft) => (response, draft),
                Asked::Again => continue,
                Asked::End(end) => return end,
            };
            if let Some(end) = self.over_budget(&response) {
                return end;
            }
            if !self.is_output(&response) {
                self.add_block_calls(&mut response).await;
            }
            self.add_check_calls(&mut response);
            let batch = response.tool_calls.len();
            if batch > limits.max_tool_calls.saturating_sub(self.tool_calls) as usize {
                // Refused whole, before anything of it is recorded or run.
                return End::ToolLimit;
            }
            if batch == 0 {
                let note = if draft {
                    Some(draft::DRAFT_NOTE.to_owned())
                } else if let Some(note) = self.review() {
                    Some(note)
                } else if let Some(note) = self.unread_note().await {
                    Some(note)
                } else {
                    self.unchanged_note().await
                };
                let answer = response.content.clone();
                if let Err(end) =
                    self.append_response(Message::assistant(response.content, Vec::new()))
                {
                    return end;
                }
                if let Some(note) = note {
                    self.append(Message::user(note));
                    continue;
                }
                match self.complete(answer) {
                    Some(end) => return end,
                    None => continue,
                }
            }
            let assistant = match self
                .append_response(Message::assistant(response.content, response.tool_calls))
            {
                Ok(assistant) => assistant,
                Err(end) => return end,
            };
            let pending = self.pending_actions(assistant.tool_calls());
            if !pending.is_empty() {
                // Nothing of the batch runs before its answers; the budget
                // counts it now.
                self.tool_calls += batch as u32;
                self.emitter.emit(|| EventKind::ActionsRequired {
                    actions: pending.iter().cloned().map(PendingAction::shown).collect(),
                });
                return End::Paused(pending);
            }
            if !self.at_ceiling {
                self.announce(assistant.tool_calls());
            }
            for call in assistant.tool_calls() {
                if token.is_cancelled() {
                    return End::Stopped;
                }
                self.tool_calls += 1;
                if self.at_ceiling {
                    self.not_run(call);
                } else {
                    self.call_tool(call, token).await;
                }
            }
            if self.at_ceiling {
                return self.ceiling_end();
            }
            if let Some(answer) = added::checked_answer(&assistant, &self.messages) {
                match self.complete(answer) {
                    Some(end) => return end,
                    None => continue,
                }
            }
            if let Some(note) = self.passed_note() {
                self.append(Message::user(note));
            }
        }
        End::StepLimit
    }

    fn model_failed(&mut self, error: String) -> End {
        self.emitter.emit(|| EventKind::ModelError {
            error: error.clone(),
        });
        End::ModelError(error)
    }
}

/// A tool's result as the model sees it: its JSON serialisation (a string
/// result `Hello` becomes `"Hello"`).
fn serialize_result(value: &Value) -> String {
    // Serialising a `Value` cannot fail: its map keys are strings.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

fn millis(duration: Duration) -> f64 {
    (duration.as_nanos() as f64 / 1_000.0).round() / 1_000.0
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}
