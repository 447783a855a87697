//! Drafts (`draft_first`): a run's first model call made without tool
//! definitions. A small model writes better code with no tools in view:
//! shown their definitions it mixes them into its code (a Python file that
//! starts `from tools import *`), and answers worse than it does alone. The
//! draft is its answer as it would give it without tools; with
//! `write_code_blocks` its code blocks become files, and the run goes on
//! with the tools from there. A draft that changed nothing (no block of it
//! was a file's, or it was cut off) is kept in the transcript but left out
//! of what the model sees next: the run goes on as if it had not drafted,
//! rather than with the model's answer from without its tools (a refusal
//! to read a file it could not see) leading it.

use std::sync::Arc;

use super::{Run, notes};
use crate::harness::{Message, unread};

/// The note that follows a draft that changed nothing, as a user message of
/// the server: the draft stays in the transcript, and the model goes on
/// with its tools.
pub const DRAFT_NOTE: &str = "[agent-runner] That was a draft, written without your tools; it \
changed nothing. Now do the task with your tools, then answer.";

impl Run<'_, '_> {
    /// Whether the model call about to be made is a draft: `draft_first`,
    /// the run's first call, a conversation's start (a follow-up's history
    /// may hold tool calls, which some providers refuse without tools), a
    /// run with tools, a step left after it to use them, and a prompt that
    /// names no file of the workspace (a model that must read a file first
    /// drafts nothing of use: it refuses, or guesses).
    pub(super) async fn drafting(&self) -> bool {
        self.config.draft_first
            && self.steps == 0
            && self.config.history.is_empty()
            && !self.harness.tools.definitions().is_empty()
            && self.config.limits.max_steps.get() > 1
            && !self.prompt_names_a_file().await
    }

    /// Whether the run's prompt names a file of its workspace, as far as
    /// its tools show the workspace's files.
    async fn prompt_names_a_file(&self) -> bool {
        let tools = self.harness.tools;
        let Some(lister) = tools.file_reader().or_else(|| tools.whole_file_writer()) else {
            return false;
        };
        let Some(Message::User { content: prompt }) = self.messages.first().map(|m| &**m) else {
            return false;
        };
        let files = notes::text_file_paths(&**lister).await;
        !unread::named_files(prompt, &files).is_empty()
    }

    /// The instructions of a model call: a draft is not sent the server's
    /// default ones, which tell how to work through tools it is not given
    /// (a small model told of tools it lacks answers worse than alone); a
    /// client's or a profile's own instructions are the run's, and are sent.
    pub(super) fn instructions(&self, draft: bool) -> Option<&str> {
        if draft && self.config.default_instructions {
            return None;
        }
        self.config.instructions.as_deref()
    }
}

/// Where the model's view of `messages` may start, past the prompt: after
/// a draft that changed nothing and its note, which the model does not see
/// again; otherwise just after the prompt.
pub(super) fn view_start(messages: &[Arc<Message>]) -> usize {
    let unchanged_draft = matches!(
        messages.get(1).map(|message| &**message),
        Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty()
    ) && matches!(
        messages.get(2).map(|message| &**message),
        Some(Message::User { content }) if content == DRAFT_NOTE
    );
    if unchanged_draft { 3 } else { 1 }
}
