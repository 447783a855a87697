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

use super::Run;
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
    /// run with tools, and a step left after it to use them.
    pub(super) fn drafting(&self) -> bool {
        self.config.draft_first
            && self.steps == 0
            && self.config.history.is_empty()
            && !self.harness.tools.definitions().is_empty()
            && self.config.limits.max_steps.get() > 1
    }

    /// The prompt a draft is sent: the run's, followed by the text of the
    /// workspace files it names (as the run's file tools show them, at most
    /// [`MAX_SHOWN_CHARS`] in all), since a draft cannot read them: shown
    /// the file, a small model writes its fix whole in a code block, as it
    /// writes code in one shot; not shown, it refuses or guesses. `None`
    /// when the prompt names no such file. Never stored: the transcript
    /// keeps the prompt as the client gave it.
    pub(super) async fn draft_prompt(&self) -> Option<String> {
        let tools = self.harness.tools;
        let lister = tools.file_reader().or_else(|| tools.whole_file_writer())?;
        let Some(Message::User { content: prompt }) = self.messages.first().map(|m| &**m) else {
            return None;
        };
        let files = lister.text_files().await;
        let paths: Vec<String> = files.iter().map(|(path, _)| path.clone()).collect();
        let named = unread::named_files(prompt, &paths);
        let mut shown = String::new();
        for (path, text) in files
            .iter()
            .filter(|(path, _)| named.contains(&path.as_str()))
        {
            let fence = "`".repeat(longest_backtick_run(text).max(2) + 1);
            let block = format!(
                "\n{path}\n{fence}\n{}\n{fence}\n",
                text.trim_end_matches('\n')
            );
            if shown.len() + block.len() > MAX_SHOWN_CHARS {
                continue;
            }
            shown.push_str(&block);
        }
        (!shown.is_empty())
            .then(|| format!("{prompt}\n\nThe files it names, as they are now:\n{shown}"))
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

/// The most text of named files a draft is shown, in bytes.
const MAX_SHOWN_CHARS: usize = 24_000;

/// The longest run of backticks in `text`: a fence around it must be longer.
fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
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
