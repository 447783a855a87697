//! What bounds a run, as the API shows it: its budgets ([`RunLimits`]) and
//! its context ([`RunContext`]), with the defaults of a run that names
//! none.

use serde::{Deserialize, Serialize};

use crate::harness::agent;

/// Budgets of a run as the API shows them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RunLimits {
    pub max_steps: u32,
    pub max_tool_calls: u32,
    /// Running time only: never while queued or paused.
    pub timeout_ms: u64,
    /// How long each pause waits for its answers.
    #[serde(default = "default_action_timeout")]
    pub action_timeout_ms: u64,
    /// How often it may be resumed after its process stopped (0: it ends
    /// `interrupted` instead).
    #[serde(default = "default_max_resumes")]
    pub max_resumes: u32,
    /// How often a final answer that is not valid under the run's
    /// `output_schema` is sent back before the run fails.
    #[serde(default = "default_output_retries")]
    pub output_retries: u32,
    /// What its model calls may cost, in US dollars, if bounded (SPEC
    /// section 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

fn default_output_retries() -> u32 {
    crate::harness::output::DEFAULT_OUTPUT_RETRIES
}

/// How often a run is resumed after its process stopped, when the request
/// names no bound.
pub const DEFAULT_MAX_RESUMES: u32 = 3;

fn default_max_resumes() -> u32 {
    DEFAULT_MAX_RESUMES
}

/// How long a pause waits for its answers when the request names no bound.
pub const DEFAULT_ACTION_TIMEOUT_MS: u64 = 3_600_000;

fn default_action_timeout() -> u64 {
    DEFAULT_ACTION_TIMEOUT_MS
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunContext {
    pub max_context_chars: usize,
    pub max_tool_result_chars: usize,
    /// Whether, when and by which model what is sent is summarised (SPEC
    /// section 22); absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionSpec>,
}

/// A run's `context.compaction`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionSpec {
    /// The share of `max_context_chars` past which it compacts (0 to 1].
    pub at: f64,
    /// The model profile that writes the summaries; absent: the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// `context.compaction.at` when a run asks for compaction without one.
pub const DEFAULT_COMPACTION_AT: f64 = 0.8;

/// Budgets of a run that names none (capped by the server's ceilings), made
/// of the harness's own defaults, their one home.
pub const DEFAULT_LIMITS: RunLimits = RunLimits {
    max_steps: agent::DEFAULT_MAX_STEPS,
    max_tool_calls: agent::DEFAULT_MAX_TOOL_CALLS,
    timeout_ms: agent::DEFAULT_TIMEOUT_MS,
    action_timeout_ms: DEFAULT_ACTION_TIMEOUT_MS,
    max_resumes: DEFAULT_MAX_RESUMES,
    output_retries: crate::harness::output::DEFAULT_OUTPUT_RETRIES,
    max_cost_usd: None,
};
pub const DEFAULT_CONTEXT: RunContext = RunContext {
    max_context_chars: agent::DEFAULT_MAX_CONTEXT_CHARS,
    max_tool_result_chars: agent::DEFAULT_MAX_TOOL_RESULT_CHARS,
    compaction: None,
};
