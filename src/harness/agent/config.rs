//! What defines one run for the loop: its prompt, instructions, history,
//! budgets and rules.

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::harness::message::Message;
use crate::harness::model::Model;
use crate::harness::pause::Approval;
use crate::harness::usage::Price;

/// The budgets of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Model responses the run may receive.
    pub max_steps: NonZeroU32,
    /// Tool calls the run may request, unknown and invalid ones included.
    pub max_tool_calls: u32,
    /// Deadline of the whole run, from its start.
    pub timeout: Option<Duration>,
    /// What its model calls may cost, in US dollars: the run ends
    /// `cost_limit` after the call that reaches it (its model must have a
    /// price).
    pub max_cost_usd: Option<f64>,
}

/// A run's budgets when it names none: the one home of these numbers, which
/// the service's run defaults are built from.
pub const DEFAULT_MAX_STEPS: u32 = 10;
pub const DEFAULT_MAX_TOOL_CALLS: u32 = 30;
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
pub const DEFAULT_MAX_CONTEXT_CHARS: usize = 32_000;
pub const DEFAULT_MAX_TOOL_RESULT_CHARS: usize = 8_000;

/// Default ceiling of a run's stored transcript, in bytes.
pub const DEFAULT_MAX_RUN_BYTES: usize = 64 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_steps: NonZeroU32::new(DEFAULT_MAX_STEPS).expect("nonzero"),
            max_tool_calls: DEFAULT_MAX_TOOL_CALLS,
            timeout: Some(Duration::from_millis(DEFAULT_TIMEOUT_MS)),
            max_cost_usd: None,
        }
    }
}

/// The context budgets of one run, in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextLimits {
    /// Bound of the serialised messages sent to the model at each step.
    pub max_context_chars: NonZeroUsize,
    /// Bound of every tool result before it enters the transcript.
    pub max_tool_result_chars: NonZeroUsize,
    /// Ceiling of the run's whole transcript (with the history it
    /// continues), as stored: the bytes of its messages' JSON (see
    /// `ceiling`).
    pub max_run_bytes: NonZeroUsize,
}

impl Default for ContextLimits {
    fn default() -> Self {
        Self {
            max_context_chars: NonZeroUsize::new(DEFAULT_MAX_CONTEXT_CHARS).expect("nonzero"),
            max_tool_result_chars: NonZeroUsize::new(DEFAULT_MAX_TOOL_RESULT_CHARS)
                .expect("nonzero"),
            max_run_bytes: NonZeroUsize::new(DEFAULT_MAX_RUN_BYTES).expect("nonzero"),
        }
    }
}

/// Everything that defines one run, apart from its model and tools.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub run_id: Uuid,
    pub prompt: String,
    /// The system prompt, sent on every step, counted against the context
    /// budget, never in the transcript.
    pub instructions: Option<std::sync::Arc<str>>,
    /// Whether `instructions` are the server's default ones, which tell how
    /// to work through the built-in tools: a draft, made without tools, is
    /// not sent them (see [`crate::harness::agent`]'s `draft` note).
    pub default_instructions: bool,
    /// The transcript this run continues (a previous run's), before its
    /// prompt; empty for a run of its own. Not emitted again: it is the
    /// caller's already.
    pub history: Vec<Arc<Message>>,
    pub limits: Limits,
    pub context: ContextLimits,
    /// Which tools' calls wait for a client's approval.
    pub approval: Approval,
    /// Whether an answer that leaves changed files unchecked, or a failed
    /// check unfixed, is questioned before it ends the run (see
    /// [`crate::harness::review`]).
    pub check_answers: bool,
    /// Whether code the model writes in fenced blocks of its response is
    /// taken as whole-file writes (see [`crate::harness::blocks`]).
    pub write_code_blocks: bool,
    /// Whether the run's first model call, when it starts a conversation,
    /// is a draft made without tool definitions (see
    /// [`crate::harness::agent`]'s `draft` note).
    pub draft_first: bool,
    /// Whether an answer that changed no file, when the prompt asks for a
    /// change and the run can make one, is questioned once (see
    /// [`crate::harness::unchanged`]).
    pub question_unchanged: bool,
    /// The JSON Schema its final answer must be valid under, if any (see
    /// [`crate::harness::output`]).
    pub output: Option<Arc<crate::harness::output::OutputSchema>>,
    /// The temperature its model calls ask for instead of the model's own
    /// (an attempt of several), if any.
    pub temperature: Option<f64>,
    /// What its model's tokens cost, if it has a price: each call's
    /// `cost_usd`, and the run's.
    pub price: Option<Price>,
    /// The key its model calls share for the provider's prompt cache (a
    /// conversation's calls share their prefix), if any.
    pub cache_key: Option<String>,
    /// When and by which model what is sent is summarised, if it is (see
    /// `compact`).
    pub compaction: Option<Compaction>,
    /// Where its model calls go when its model is unavailable, if anywhere
    /// (see `fallback`).
    pub fallback: Option<Arc<Fallbacks>>,
}

/// The profiles a run's model calls go to, in turn, when the one before
/// failed in a way that may pass (SPEC section 25).
#[derive(Clone)]
pub struct Fallbacks {
    /// The name of the run's own profile.
    pub from: String,
    pub chain: Vec<FallbackModel>,
}

/// One profile of a run's fallback chain.
#[derive(Clone)]
pub struct FallbackModel {
    pub profile: String,
    pub model: Arc<dyn Model>,
    /// What its tokens cost, if priced.
    pub price: Option<Price>,
}

impl std::fmt::Debug for Fallbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let chain: Vec<&str> = self.chain.iter().map(|m| m.profile.as_str()).collect();
        f.debug_struct("Fallbacks")
            .field("from", &self.from)
            .field("chain", &chain)
            .finish()
    }
}

/// A run's context compaction (SPEC section 22).
#[derive(Clone)]
pub struct Compaction {
    /// The share of `max_context_chars` past which it compacts (0 to 1].
    pub at: f64,
    /// The model that writes the summaries, when not the run's own.
    pub model: Option<Arc<dyn Model>>,
    /// What that model's tokens cost (the run's price for its own).
    pub price: Option<Price>,
}

impl std::fmt::Debug for Compaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compaction")
            .field("at", &self.at)
            .field("own_model", &self.model.is_some())
            .field("price", &self.price)
            .finish()
    }
}

impl RunConfig {
    /// A run with a fresh time-ordered id and the default budgets.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            run_id: Uuid::now_v7(),
            prompt: prompt.into(),
            instructions: None,
            default_instructions: false,
            history: Vec::new(),
            limits: Limits::default(),
            context: ContextLimits::default(),
            approval: Approval::None,
            check_answers: false,
            write_code_blocks: false,
            draft_first: false,
            question_unchanged: false,
            output: None,
            temperature: None,
            price: None,
            cache_key: None,
            compaction: None,
            fallback: None,
        }
    }
}
