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
//!
//! A draft is shown the files its prompt names (or, naming none, those
//! that define a name it mentions), and a draft whose code
//! failed its check (a preset with `check = true`) is drafted again, shown
//! that code and the check's output, a few times before the tools take
//! over: a small model fixes code better in one shot than through calls.

use std::sync::Arc;

use serde_json::Value;

use super::{Run, added};
use crate::harness::render::tool_result_for_model;
use crate::harness::{Message, stuck, unread};

/// The note that follows a draft that changed nothing, as a user message of
/// the server: the draft stays in the transcript, and the model goes on
/// with its tools.
pub const DRAFT_NOTE: &str = "[agent-runner] That was a draft, written without your tools; it \
changed nothing. Now do the task with your tools, then answer.";

impl Run<'_, '_> {
    /// Whether the model call about to be made is a draft: `draft_first`,
    /// a conversation's start (a follow-up's history may hold tool calls,
    /// which some providers refuse without tools), a run with a tool that
    /// changes files (a draft is code; a run that only reads or delegates
    /// would draft an answer from nothing), and a step left after it to
    /// use them; and either the run's first call, or
    /// a redraft: the last step was a draft's code written as files whose
    /// check failed, and the run has drafted fewer than [`MAX_DRAFTS`]
    /// times.
    pub(super) fn drafting(&self) -> bool {
        self.config.draft_first
            && self.config.history.is_empty()
            && self.harness.tools.changes_files()
            && self.steps + 1 < self.config.limits.max_steps.get()
            && (self.steps == 0 || self.failed_draft().is_some())
    }

    /// The last step, if it is a draft whose code became files and whose
    /// check failed, and another draft is allowed: the draft's message and
    /// the results of its calls, in order. A redraft that wrote what the
    /// draft before it wrote allows none: asked again the same way, the
    /// model repeats itself, so the tools take over at once rather than a
    /// third call writing the same code.
    fn failed_draft(&self) -> Option<(&Message, Vec<&Message>)> {
        let at = stuck::step_start(&self.messages)?;
        let draft = &*self.messages[at];
        let results: Vec<&Message> = self.messages[at + 1..].iter().map(|m| &**m).collect();
        if !added::is_block_answer(draft) || added::checks_passed(draft, &results) {
            return None;
        }
        // The transcript is read last, once the step is a failed draft.
        let repeated = self.messages[..at]
            .iter()
            .rev()
            .find(|message| added::is_block_answer(message))
            .is_some_and(|before| added::same_blocks(before, draft));
        (!repeated && self.drafts() < MAX_DRAFTS).then_some((draft, results))
    }

    /// How many drafts the run made: its first call's, and its block
    /// answers after it.
    fn drafts(&self) -> usize {
        let block_answers = self
            .messages
            .iter()
            .skip(2)
            .filter(|message| added::is_block_answer(message))
            .count();
        1 + block_answers
    }

    /// The prompt a draft is sent. The first: the run's, followed by the
    /// text of the workspace files it names (as the run's file tools show
    /// them, at most [`MAX_SHOWN_CHARS`] in all), since a draft cannot read
    /// them: shown the file, a small model writes its fix whole in a code
    /// block, as it writes code in one shot; not shown, it refuses or
    /// guesses. A redraft: the prompt, the files the failed draft wrote as
    /// they are now, and what its check printed (the files the prompt names
    /// left out: a small model shown a test file echoes it). `None` for a
    /// first draft whose prompt names no file and nothing a file defines (it
    /// is sent as it is). Never
    /// stored: the transcript keeps the prompt as the client gave it.
    pub(super) async fn draft_prompt(&self) -> Option<String> {
        let tools = self.harness.tools;
        let lister = tools.file_reader().or_else(|| tools.whole_file_writer())?;
        let Some(Message::User { content: prompt }) = self.messages.first().map(|m| &**m) else {
            return None;
        };
        let failed = if self.steps == 0 {
            None
        } else {
            self.failed_draft()
        };
        let written: Vec<&str> = failed.as_ref().map_or_else(Vec::new, |(draft, _)| {
            draft
                .tool_calls()
                .iter()
                .filter_map(|call| call.arguments.get("path").and_then(Value::as_str))
                .collect()
        });
        let files = lister.text_files().await;
        let paths: Vec<String> = files.iter().map(|(path, _)| path.clone()).collect();
        let named = unread::named_files(prompt, &paths);
        let mut shown = String::new();
        let mut text = prompt.clone();
        let Some((_, results)) = failed else {
            // A prompt that names no file (an issue: "parse_duration(...)
            // returns 1800") is shown the files that define what it names:
            // a draft shown nothing guesses the file, and its guess written
            // over the real one loses the rest of it.
            let (named, heading) = if named.is_empty() {
                let defining = crate::harness::blocks::defining_files(prompt, &files);
                (defining, "The files that define what it names")
            } else {
                (named, "The files it names")
            };
            for (path, content) in &files {
                if named.contains(&path.as_str()) {
                    show(&mut shown, path, content);
                }
            }
            if shown.is_empty() {
                return None;
            }
            text.push_str(&format!("\n\n{heading}, as they are now:\n"));
            text.push_str(&shown);
            return Some(text);
        };
        for (path, content) in &files {
            if written.contains(&path.as_str()) {
                show(&mut shown, path, content);
            }
        }
        let output: Vec<String> = results
            .iter()
            .filter_map(|result| match result {
                Message::Tool {
                    call_id,
                    content,
                    is_error,
                    ..
                } if call_id.starts_with(added::CHECK_ID) => {
                    Some(tool_result_for_model(content, *is_error).into_owned())
                }
                _ => None,
            })
            .collect();
        let output = output.join("\n");
        let fence = "`".repeat(longest_backtick_run(&output).max(2) + 1);
        let files = written.join(", ");
        text.push_str(&format!(
            "\n\nYour answer was saved as:\n{shown}\nThe check of it failed:\n{fence}\n{}\n{fence}\n\n\
             Answer with the whole fixed {files} in one code block.",
            output.trim_end()
        ));
        Some(text)
    }

    /// The instructions of a model call: a draft is not sent the server's
    /// default ones, which tell how to work through tools it is not given
    /// (a small model told of tools it lacks answers worse than alone); a
    /// client's or a profile's own instructions are the run's, and are sent.
    pub(super) fn instructions(&self, draft: bool) -> Option<&str> {
        if draft && self.config.default_instructions {
            return None;
        }
        self.sent_instructions()
    }
}

/// Drafts at most in a run: its first call's, and redrafts after a draft
/// whose check failed.
const MAX_DRAFTS: usize = 3;

/// The most text of named files a draft is shown, in bytes.
const MAX_SHOWN_CHARS: usize = 24_000;

/// Adds the file `path` with its `text` to `shown`, in a fenced block after
/// its path, if the whole stays within [`MAX_SHOWN_CHARS`].
fn show(shown: &mut String, path: &str, text: &str) {
    let fence = "`".repeat(longest_backtick_run(text).max(2) + 1);
    let block = format!(
        "\n{path}\n{fence}\n{}\n{fence}\n",
        text.trim_end_matches('\n')
    );
    if shown.len() + block.len() <= MAX_SHOWN_CHARS {
        shown.push_str(&block);
    }
}

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
