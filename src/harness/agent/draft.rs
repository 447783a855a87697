//! Drafts (`draft_first`): a run's first model call made without tool
//! definitions. A small model writes better code with no tools in view:
//! shown their definitions it mixes them into its code (a Python file that
//! starts `from tools import *`), and answers worse than it does alone. The
//! draft is its answer as it would give it without tools; with
//! `write_code_blocks` its code blocks become files, and the run goes on
//! with the tools from there.

use super::Run;

/// The note that follows a draft that changed nothing, as a user message of
/// the server: the draft stays in the transcript, and the model goes on
/// with its tools.
pub const DRAFT_NOTE: &str = "[agent-runner] That was a draft, written without your tools; it \
changed nothing. Now do the task with your tools, then answer.";

impl Run<'_, '_> {
    /// Whether the model call about to be made is a draft: `draft_first`,
    /// the run's first call, a conversation's start (a follow-up's history
    /// may hold tool calls, which some providers refuse without tools), a
    /// run with tools, and a step left after it to use them.
    pub(super) fn drafting(&self) -> bool {
        self.config.draft_first
            && self.steps == 0
            && self.config.history.is_empty()
            && !self.harness.tools.definitions().is_empty()
            && self.config.limits.max_steps.get() > 1
    }
}
