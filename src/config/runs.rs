//! `[runs]`: how many runs execute and wait, how they stop, what a run's
//! loop does by default, and the bounds of attempts and sub-agents.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunsConfig {
    /// Runs executing at once; more wait, FIFO, as `queued`.
    pub max_concurrent: usize,
    /// Runs allowed to wait; beyond, 429.
    pub max_queued: usize,
    /// The profile a run uses when it names none.
    pub default_model: String,
    /// On SIGTERM, how long running runs may go on before they are interrupted.
    pub shutdown_grace_ms: u64,
    /// On PostgreSQL: how long a replica's claim on its runs lasts without a
    /// heartbeat renewing it. A replica silent for longer is taken for dead:
    /// another one queues its running runs again to resume (within twice
    /// this).
    pub lease_ms: u64,
    /// The instructions of a run with built-in tools that has none of its
    /// own nor of its profile's; `""`: none.
    pub default_instructions: String,
    /// Whether an answer that leaves changed files unchecked (no command
    /// run since), or a failed command unfixed, is questioned before it
    /// ends the run, in a run that has `run_command`. Off by default: a run
    /// that reports a failing command as its answer is common, and a client
    /// replaying a script expects its answers to end the run.
    pub check_answers: bool,
    /// Whether code a model writes in a fenced block of its answer is taken
    /// as a `write_file` of the file it rewrites, in a run that has
    /// `write_file` (a small model writes code better there than in a tool
    /// call's JSON). Off by default.
    pub write_code_blocks: bool,
    /// Whether the first model call of a run that starts a conversation
    /// is made without tool definitions: the model drafts its answer as it
    /// would without tools (with `write_code_blocks`, its code blocks become
    /// files), then goes on with them. Off by default.
    pub draft_first: bool,
    /// Whether an answer that changed no file, in a run that can change
    /// files and whose prompt asks for a change ("fix", "implement", "make
    /// ... pass"), is questioned once before it ends the run: a small model
    /// otherwise tells the user to do the work. Unset: on for a provider's
    /// model, off for a scripted one (whose answers are meant to end its
    /// run).
    pub question_unchanged: Option<bool>,
    /// Most `attempts.n` a run may ask for (SPEC section 27).
    pub max_attempts: u32,
    /// Most attempts of one run executing at once; the rest wait for one
    /// to end.
    pub max_parallel_attempts: u32,
    /// How deep runs may delegate (SPEC section 24): a run this many
    /// `delegate` calls below its root is not offered the tool.
    pub max_depth: u32,
    /// Most children of one batch of `delegate` calls running at once.
    pub max_parallel_subruns: u32,
}

/// What `runs.default_instructions` is unless configured: how to work
/// through the built-in tools, for a model that would otherwise only be
/// told its task.
pub const DEFAULT_INSTRUCTIONS: &str = "You work in a workspace: a directory of files you \
reach only through your tools. The workspace is new to you: never answer from memory. When the \
task names a file, first read it with read_file. Use search only to find which file mentions \
something when no file is named. Change part of a file with edit_file; write a whole file with \
write_file. When you have commands (such as tests), run them to check your work, and when one \
fails, read its output, fix the cause and run it again. When the task is done, stop calling \
tools and answer briefly: the answer asked for, or what you changed.";

impl Default for RunsConfig {
    fn default() -> Self {
        Self {
            max_concurrent: 32,
            max_queued: 1000,
            default_model: "demo".into(),
            shutdown_grace_ms: 10_000,
            lease_ms: 10_000,
            default_instructions: DEFAULT_INSTRUCTIONS.to_owned(),
            check_answers: false,
            write_code_blocks: false,
            draft_first: false,
            question_unchanged: None,
            max_attempts: 8,
            max_parallel_attempts: 4,
            max_depth: 2,
            max_parallel_subruns: 4,
        }
    }
}
