//! The service's vocabulary for a run: what a client asked for (`RunSpec`) and
//! what the API shows of it (`Run`). Shared by the API, the runner and the
//! store, and free of all three.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::harness::{PendingAction, ToolDefinition, UsageTotals};
use crate::telemetry::RunTrace;

mod answer;
pub mod attempts;
mod bounds;
mod status;
pub mod subagents;
mod thread;
pub use answer::{ActionAnswer, Decision};
pub use attempts::{AttemptOf, AttemptPolicy, AttemptSummary, Until};
pub use bounds::{
    CompactionSpec, DEFAULT_ACTION_TIMEOUT_MS, DEFAULT_COMPACTION_AT, DEFAULT_CONTEXT,
    DEFAULT_LIMITS, DEFAULT_MAX_RESUMES, RunContext, RunLimits,
};
pub use status::RunStatus;
pub use subagents::{ChildOf, ChildTemplate, SubWorkspace, Subagent, Subagents};
pub use thread::{Multitask, ScheduleOf};

/// The tenant a request authenticated as; every run belongs to one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenant(pub String);

impl Tenant {
    /// The tenant of a server with no tokens configured (loopback only).
    pub fn anonymous() -> Self {
        Self("default".into())
    }
}

/// The `error` of a run that the server stopped while it ran (at shutdown,
/// or found `running` by the next process).
pub const INTERRUPTED: &str = "The server stopped while the run was running";

/// The `error` of a run whose pause for a decision ran out.
pub const NO_ANSWER: &str =
    "No answer came in time: the run waited its limits.action_timeout_ms for a decision";

/// Which model drives a run. Kept (privately) so that a run queued when the
/// server stopped can start again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSpec {
    Profile(String),
    Scripted(Vec<Value>),
}

/// What the run object says of its model: never a secret, never the script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub provider: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The agent a run was made from: its name and the version it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRef {
    pub name: String,
    pub version: u32,
}

/// A validated, accepted request for a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    pub prompt: String,
    pub model: ModelSpec,
    pub model_info: ModelInfo,
    pub tools: Vec<String>,
    pub commands: Vec<String>,
    pub files: BTreeMap<String, String>,
    pub limits: RunLimits,
    pub context: RunContext,
    pub metadata: Map<String, Value>,
    /// Tools whose calls wait for a client's approval (`"*"`: all).
    pub approval: ApprovalSpec,
    /// Tools the client executes.
    pub client_tools: Vec<ToolDefinition>,
    /// The system prompt (the request's, else its profile's, else the
    /// server's default): shared, not copied, by the run's copies.
    pub instructions: Option<Arc<str>>,
    /// The run this one continues: its transcript and workspace.
    pub previous_run_id: Option<Uuid>,
    /// The MCP servers whose tools it uses.
    pub mcp_servers: Vec<String>,
    /// Where its ends and pauses are posted.
    pub webhook: Option<Webhook>,
    /// The trace its spans belong to: the caller's (`traceparent`), or one
    /// of its own.
    pub trace: RunTrace,
    /// The agent whose definition it was made from.
    pub agent: Option<AgentRef>,
    /// The JSON Schema its final answer must be valid under.
    pub output_schema: Option<Arc<Value>>,
    /// Where its workspace comes from besides `files`: a clone, an upload.
    pub seed: crate::repo::Seed,
    /// Tried this many times, each attempt a child run (SPEC section 27).
    pub attempts: Option<AttemptPolicy>,
    /// The run this one is an attempt of.
    pub attempt_of: Option<AttemptOf>,
    /// What it does if the run it continues is live (only as it is
    /// accepted).
    pub multitask: Multitask,
    /// The schedule (and tick) that made it.
    pub schedule: Option<ScheduleOf>,
    /// Its transcript and workspace are still to be taken from the run it
    /// continues (it was queued behind it; see [`Run::copy_pending`]).
    pub copy_pending: bool,
    /// A run it waits for, if live, without continuing it (a schedule's
    /// tick queued behind its previous run in a thread of its own).
    pub after: Option<Uuid>,
    /// The agents it may delegate to (SPEC section 24).
    pub subagents: Option<Arc<Subagents>>,
    /// The run whose `delegate` call started it, and its place in the tree.
    pub child_of: Option<ChildOf>,
}

/// Where a run's ends and pauses are posted (signed; see
/// [`crate::runner::webhooks`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    pub url: String,
}

impl RunSpec {
    /// The request a stored run was accepted with, to run it (again) in
    /// another process. Its files are in its workspace already.
    pub fn of_run(run: &Run, model: ModelSpec) -> Self {
        Self {
            prompt: run.prompt.clone(),
            model,
            model_info: run.model.clone(),
            tools: run.tools.clone(),
            commands: run.commands.clone(),
            files: BTreeMap::new(),
            limits: run.limits,
            context: run.context.clone(),
            metadata: run.metadata.clone(),
            approval: run.approval.clone(),
            client_tools: run.client_tools.clone(),
            instructions: run.instructions.clone(),
            previous_run_id: run.previous_run_id,
            mcp_servers: run.mcp_servers.clone(),
            webhook: run.webhook.clone(),
            trace: run.trace(),
            agent: run.agent.clone(),
            output_schema: run.output_schema.clone(),
            seed: run.seed.as_deref().cloned().unwrap_or_default(),
            attempts: run.attempt_policy,
            attempt_of: run
                .parent_run_id
                .zip(run.attempt)
                .map(|(parent_run_id, attempt)| AttemptOf {
                    parent_run_id,
                    attempt,
                    temperature: run.temperature,
                }),
            multitask: Multitask::Reject,
            schedule: run.schedule_id.map(|schedule_id| ScheduleOf {
                schedule_id,
                tick: run.schedule_tick,
            }),
            copy_pending: run.copy_pending,
            after: None,
            subagents: run.subagents.clone(),
            child_of: run.child_of.clone(),
        }
    }

    /// The run whose workspace directory it works in: its own, or its
    /// parent's (or further up) when it shares one.
    pub fn workspace_of(&self, own: Uuid) -> Uuid {
        self.child_of
            .as_ref()
            .and_then(|of| of.workspace_of)
            .unwrap_or(own)
    }

    /// Whether the run's starting tree is kept as it is seeded (see
    /// [`crate::repo::StartingTree`]).
    pub fn starting_tree(&self) -> crate::repo::StartingTree {
        crate::repo::StartingTree::of(Some(&self.seed), self.continues_a_tree())
    }

    /// Whether it starts from a tree made before it: the workspace of the
    /// run it continues, of the run it is an attempt of, or (one with
    /// attempts) its own, kept before its attempts copy it.
    fn continues_a_tree(&self) -> bool {
        self.previous_run_id.is_some()
            || self.attempts.is_some()
            || self.attempt_of.is_some()
            || self.child_of.is_some()
    }
}

/// `approval` as accepted: which tools' calls wait for a decision.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApprovalSpec {
    pub tools: Vec<String>,
}

/// The run object of the API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub id: Uuid,
    pub status: RunStatus,
    pub prompt: String,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub steps: u32,
    pub tool_calls: u32,
    pub usage: UsageTotals,
    /// How often it was resumed after its process stopped.
    #[serde(default)]
    pub resumes: u32,
    pub limits: RunLimits,
    pub context: RunContext,
    pub tools: Vec<String>,
    pub commands: Vec<String>,
    pub model: ModelInfo,
    pub metadata: Map<String, Value>,
    /// The calls it waits on while `requires_action` (empty otherwise):
    /// those still unanswered.
    pub pending_actions: Vec<PendingAction>,
    pub approval: ApprovalSpec,
    pub client_tools: Vec<ToolDefinition>,
    #[serde(default)]
    pub mcp_servers: Vec<String>,
    #[serde(serialize_with = "instructions_json")]
    pub instructions: Option<Arc<str>>,
    /// The first run of its conversation: its own id unless it continues
    /// another.
    pub thread_id: Uuid,
    pub previous_run_id: Option<Uuid>,
    /// Where its ends and pauses are posted (absent from the run object
    /// when nowhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
    /// The agent (and version) it was made from, if any.
    #[serde(default)]
    pub agent: Option<AgentRef>,
    /// The JSON Schema its final answer must be valid under, if any.
    #[serde(default)]
    pub output_schema: Option<Arc<Value>>,
    /// Its final answer's JSON document, once it completed under an output
    /// schema.
    #[serde(default)]
    pub output: Option<Value>,
    /// What it changed in its workspace, once it has ended.
    #[serde(default)]
    pub changes: Option<crate::repo::Changes>,
    /// The run it is an attempt of, and which attempt (from 1).
    #[serde(default)]
    pub parent_run_id: Option<Uuid>,
    #[serde(default)]
    pub attempt: Option<u32>,
    /// The temperature it was sent with, as an attempt (absent: its
    /// profile's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// `attempts` as requested: it runs as several attempts.
    #[serde(default)]
    pub attempt_policy: Option<AttemptPolicy>,
    /// Its attempts so far (null for a run without attempts).
    #[serde(default)]
    pub attempts: Option<Vec<AttemptSummary>>,
    /// The attempt whose answer and workspace it took, once one passed.
    #[serde(default)]
    pub chosen_attempt: Option<u32>,
    /// The schedule that made it (SPEC section 23).
    #[serde(default)]
    pub schedule_id: Option<Uuid>,
    /// The tick it was made for (none for a trigger's run): part of its
    /// identity in storage.
    #[serde(default, serialize_with = "rfc3339_opt")]
    pub schedule_tick: Option<DateTime<Utc>>,
    /// The live run it is queued behind (a busy thread's follow-up).
    #[serde(skip)]
    pub waiting_for: Option<Uuid>,
    /// Its transcript and workspace are taken from `previous_run_id` as it
    /// starts, not as it was accepted (that run had not ended then).
    #[serde(skip)]
    pub copy_pending: bool,
    /// The agents it may delegate to, as accepted (the run object shows
    /// each one's description, workspace and stored agent).
    #[serde(
        default,
        serialize_with = "subagents::subagents_json",
        skip_deserializing
    )]
    pub subagents: Option<Arc<Subagents>>,
    /// The root of its tree of delegations, as a child run.
    #[serde(default)]
    pub root_run_id: Option<Uuid>,
    /// Its usage and its children's, recursively (null for a run that may
    /// not delegate).
    #[serde(default)]
    pub usage_total: Option<UsageTotals>,
    /// What its children used, summed (their `usage_total`).
    #[serde(skip)]
    pub children_usage: Option<UsageTotals>,
    /// What makes it a child of another.
    #[serde(skip)]
    pub child_of: Option<ChildOf>,
    /// Where its workspace came from besides its files (not shown: it is
    /// the request's).
    #[serde(skip)]
    pub seed: Option<Arc<crate::repo::Seed>>,
    #[serde(serialize_with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "rfc3339_opt")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "rfc3339_opt")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The trace of its spans (W3C, 32 hex digits): the one its creator's
    /// `traceparent` named, or its own.
    #[serde(default)]
    pub trace_id: String,
    /// The creator's span its spans are children of, if it sent one.
    #[serde(skip)]
    pub parent_span_id: Option<String>,
    /// The sampled flag of its creator's `traceparent` (true without one:
    /// the sample ratio decides then; see [`RunTrace::sampled`]).
    #[serde(skip, default = "sampled")]
    pub trace_sampled: bool,
}

fn sampled() -> bool {
    true
}

impl Run {
    /// A run just accepted: queued, nothing done yet; the first of its
    /// thread (see [`Run::continuing`]).
    pub fn queued(id: Uuid, spec: &RunSpec, created_at: DateTime<Utc>) -> Self {
        Self {
            id,
            status: RunStatus::Queued,
            prompt: spec.prompt.clone(),
            answer: None,
            error: None,
            steps: 0,
            tool_calls: 0,
            usage: UsageTotals::default(),
            resumes: 0,
            limits: spec.limits,
            context: spec.context.clone(),
            tools: spec.tools.clone(),
            commands: spec.commands.clone(),
            model: spec.model_info.clone(),
            metadata: spec.metadata.clone(),
            pending_actions: Vec::new(),
            approval: spec.approval.clone(),
            client_tools: spec.client_tools.clone(),
            mcp_servers: spec.mcp_servers.clone(),
            instructions: spec.instructions.clone(),
            thread_id: id,
            previous_run_id: spec.previous_run_id,
            webhook: spec.webhook.clone(),
            agent: spec.agent.clone(),
            output_schema: spec.output_schema.clone(),
            output: None,
            changes: None,
            parent_run_id: spec
                .attempt_of
                .map(|of| of.parent_run_id)
                .or(spec.child_of.as_ref().map(|of| of.parent_run_id)),
            attempt: spec.attempt_of.map(|of| of.attempt),
            temperature: spec.attempt_of.and_then(|of| of.temperature),
            attempt_policy: spec.attempts,
            attempts: spec.attempts.map(|_| Vec::new()),
            chosen_attempt: None,
            schedule_id: spec.schedule.map(|of| of.schedule_id),
            schedule_tick: spec.schedule.and_then(|of| of.tick),
            waiting_for: None,
            copy_pending: spec.copy_pending,
            subagents: spec.subagents.clone(),
            root_run_id: spec.child_of.as_ref().map(|of| of.root_run_id),
            usage_total: spec.subagents.as_ref().map(|_| UsageTotals::default()),
            children_usage: spec.subagents.as_ref().map(|_| UsageTotals::default()),
            child_of: spec.child_of.clone(),
            seed: (!spec.seed.is_empty()).then(|| Arc::new(spec.seed.clone())),
            created_at,
            started_at: None,
            finished_at: None,
            trace_id: lower_hex(&spec.trace.trace_id.to_bytes()),
            parent_span_id: spec.trace.parent_span_id.map(|id| id.to_string()),
            trace_sampled: spec.trace.sampled,
        }
    }

    /// Whether its starting tree is kept as it is seeded (see
    /// [`crate::repo::StartingTree`]).
    pub fn starting_tree(&self) -> crate::repo::StartingTree {
        let continues = self.previous_run_id.is_some()
            || self.attempt_policy.is_some()
            || self.parent_run_id.is_some();
        crate::repo::StartingTree::of(self.seed.as_deref(), continues)
    }

    /// Its `usage_total` again, after its usage or its children's changed.
    pub fn refresh_total(&mut self) {
        if let Some(children) = &self.children_usage {
            self.usage_total = Some(self.usage.plus(children));
        }
    }

    /// The trace its spans belong to.
    pub fn trace(&self) -> RunTrace {
        RunTrace::stored(
            &self.trace_id,
            self.parent_span_id.as_deref(),
            self.trace_sampled,
        )
    }
}

/// RFC 3339 UTC with millisecond precision, the form every timestamp of the
/// API takes.
pub fn format_time(time: &DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `bytes` as lowercase hex digits (a trace id as its Display writes it,
/// without the formatting machinery).
fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
        hex.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    hex
}

/// A run's instructions, written as the JSON string they are, made once
/// per text rather than once per run object: the server's default
/// instructions (several hundred characters) are one shared text for every
/// run made here, and escaping them again for every run object was a
/// visible share of the run path.
fn instructions_json<S: Serializer>(
    instructions: &Option<Arc<str>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::Error;
    use serde_json::value::RawValue;
    static LAST: std::sync::Mutex<Option<(Arc<str>, Arc<RawValue>)>> = std::sync::Mutex::new(None);
    let Some(text) = instructions else {
        return serializer.serialize_none();
    };
    let cached = crate::sync::lock(&LAST)
        .as_ref()
        .filter(|(last, _)| Arc::ptr_eq(last, text))
        .map(|(_, json)| Arc::clone(json));
    let json = match cached {
        Some(json) => json,
        None => {
            let json = serde_json::to_string(&**text).map_err(S::Error::custom)?;
            let json: Arc<RawValue> = RawValue::from_string(json)
                .map_err(S::Error::custom)?
                .into();
            *crate::sync::lock(&LAST) = Some((Arc::clone(text), Arc::clone(&json)));
            json
        }
    };
    serializer.serialize_some(&*json)
}

pub(crate) fn rfc3339<S: Serializer>(
    time: &DateTime<Utc>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_time(time))
}

pub(crate) fn rfc3339_opt<S: Serializer>(
    time: &Option<DateTime<Utc>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match time {
        Some(time) => rfc3339(time, serializer),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
impl RunSpec {
    /// A small run of `script`, for the service's own tests.
    pub(crate) fn scripted(script: Vec<Value>) -> Self {
        Self {
            prompt: "p".into(),
            model: ModelSpec::Scripted(script),
            model_info: ModelInfo {
                provider: "scripted".into(),
                profile: None,
                name: None,
            },
            tools: Vec::new(),
            commands: Vec::new(),
            files: Default::default(),
            limits: RunLimits {
                max_steps: 1,
                max_tool_calls: 0,
                timeout_ms: 10_000,
                action_timeout_ms: 10_000,
                max_resumes: 0,
                output_retries: 0,
                max_cost_usd: None,
            },
            context: RunContext {
                max_context_chars: 1000,
                max_tool_result_chars: 1000,
                compaction: None,
            },
            metadata: Default::default(),
            approval: ApprovalSpec::default(),
            client_tools: Vec::new(),
            instructions: None,
            previous_run_id: None,
            mcp_servers: Vec::new(),
            webhook: None,
            trace: RunTrace::new(),
            agent: None,
            output_schema: None,
            seed: Default::default(),
            attempts: None,
            attempt_of: None,
            multitask: Multitask::Reject,
            schedule: None,
            copy_pending: false,
            after: None,
            subagents: None,
            child_of: None,
        }
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;

    #[test]
    fn a_trace_id_is_written_as_its_display_writes_it() {
        let id = opentelemetry::trace::TraceId::from_bytes(*b"\x00\x01\xfe\xff0123456789ab");
        assert_eq!(lower_hex(&id.to_bytes()), id.to_string());
    }

    #[test]
    fn instructions_are_written_as_their_json_string_whatever_the_cache_holds() {
        let spec = RunSpec::scripted(Vec::new());
        let mut run = Run::queued(Uuid::now_v7(), &spec, Utc::now());
        for text in [
            "Do \"this\"\nthen that.",
            "Do \"this\"\nthen that.",
            "other ü\u{1}",
        ] {
            run.instructions = Some(Arc::from(text));
            for _ in 0..2 {
                let json = serde_json::to_value(&run).unwrap();
                assert_eq!(json["instructions"], text);
                let text_json: Value =
                    serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
                assert_eq!(text_json["instructions"], text);
            }
        }
        run.instructions = None;
        assert_eq!(
            serde_json::to_value(&run).unwrap()["instructions"],
            Value::Null
        );
    }
}
