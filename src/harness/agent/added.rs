//! Calls the harness adds to a model's response before it runs: code
//! blocks taken as the files they rewrite, calls written as text, and the
//! checks run after a change. Each is recorded as a call of that response
//! (an id of its own kind) and goes through everything a call of the
//! model's does: its arguments' schema, confinement, approvals, budgets,
//! the transcript and the events.

use std::sync::Arc;

use serde_json::json;
use uuid::Uuid;

use super::Run;
use crate::harness::blocks;
use crate::harness::message::{Message, ToolCall};
use crate::harness::model::ModelResponse;
use crate::harness::review;
use crate::harness::tool::{Tool, ToolRole};

/// How the id of a code block's `write_file` call starts.
pub const CODE_BLOCK_ID: &str = "code_block_";
/// How the id of a call written as text starts.
pub const TEXT_CALL_ID: &str = "text_call_";
/// How the id of a check run after a change starts.
pub const CHECK_ID: &str = "check_";

/// An id of the kind `prefix`: unique in a conversation, and in the
/// characters every provider accepts in an id.
fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", Uuid::now_v7().simple())
}

impl Run<'_, '_> {
    /// The tool code blocks are written with, when this run takes them as
    /// files (`write_code_blocks`, and a whole-file writer among its tools).
    pub(super) fn block_writer(&self) -> Option<&Arc<dyn Tool>> {
        self.config
            .write_code_blocks
            .then(|| self.harness.tools.whole_file_writer())
            .flatten()
    }

    /// With `write_code_blocks`: the files the fenced blocks of the
    /// response rewrite ([`blocks`]), as calls of the run's whole-file
    /// writer (if it has one), put before the response's own calls (which
    /// may run what they wrote). A block for a file one of those calls
    /// changes is left to that call. In a response without calls, a block
    /// that is a call written as text ([`blocks::text_call`]) is that call.
    pub(super) async fn add_block_calls(&self, response: &mut ModelResponse) {
        if !self.config.write_code_blocks {
            return;
        }
        let tools = self.harness.tools;
        let mut found = blocks::parse(&response.content);
        if found.is_empty() {
            return;
        }
        if response.tool_calls.is_empty() {
            let known = |name: &str| tools.get(name).is_some();
            found.retain(|block| match blocks::text_call(block, known) {
                Some((name, arguments)) => {
                    let id = new_id(TEXT_CALL_ID);
                    response.tool_calls.push(ToolCall::new(id, name, arguments));
                    false
                }
                None => true,
            });
        }
        let Some(writer) = self.block_writer() else {
            return;
        };
        let changed: Vec<String> = response
            .tool_calls
            .iter()
            .flat_map(|call| tools.changed_paths(&call.name, &call.arguments))
            .collect();
        let changed: Vec<&str> = changed.iter().map(String::as_str).collect();
        let writes = blocks::writes(&found, &writer.text_files().await, &changed);
        let name = writer.definition().name.clone();
        let calls = writes.into_iter().map(|write| {
            let arguments = json!({"path": write.path, "content": write.content});
            ToolCall::new(new_id(CODE_BLOCK_ID), name.clone(), arguments)
        });
        response.tool_calls.splice(0..0, calls);
    }

    /// The checks of the run's tools marked to run after every change (a
    /// `check = true` preset of `run_command`), put after the response's
    /// calls when one of them changes files and no check follows it. Left
    /// out when the run's `max_tool_calls` has no room for them: the
    /// model's own calls come first.
    pub(super) fn add_check_calls(&self, response: &mut ModelResponse) {
        let tools = self.harness.tools;
        let calls = &response.tool_calls;
        let Some(last_change) = calls
            .iter()
            .rposition(|call| tools.role(&call.name).changes_files())
        else {
            return;
        };
        if calls[last_change..]
            .iter()
            .any(|call| tools.role(&call.name) == ToolRole::Checks)
        {
            return;
        }
        let checks = tools.checks_after_change();
        let room = self
            .config
            .limits
            .max_tool_calls
            .saturating_sub(self.tool_calls) as usize;
        if checks.is_empty() || calls.len() + checks.len() > room {
            return;
        }
        response.tool_calls.extend(
            checks
                .into_iter()
                .map(|(name, arguments)| ToolCall::new(new_id(CHECK_ID), name, arguments)),
        );
    }
}

/// Whether `message` is a block answer: a response that made no call of
/// its own, its calls code blocks taken as files and the checks after
/// them (at least one of each).
pub(super) fn is_block_answer(message: &Message) -> bool {
    let calls = message.tool_calls();
    let added = |prefix: &str| calls.iter().filter(|c| c.id.starts_with(prefix)).count();
    let (blocks, checks) = (added(CODE_BLOCK_ID), added(CHECK_ID));
    blocks > 0 && checks > 0 && blocks + checks == calls.len()
}

/// Whether two block answers wrote the same files with the same text: a
/// model that answers a failed draft with the draft again (at temperature
/// 0 it will, every time it is asked so).
pub(super) fn same_blocks(one: &Message, other: &Message) -> bool {
    let blocks = |message: &'_ Message| -> Vec<(String, serde_json::Value)> {
        message
            .tool_calls()
            .iter()
            .filter(|call| call.id.starts_with(CODE_BLOCK_ID))
            .map(|call| (call.name.clone(), call.arguments.clone()))
            .collect()
    };
    blocks(one) == blocks(other)
}

/// Whether every check of `assistant` passed, by `results`, the tool
/// messages that follow it.
pub(super) fn checks_passed(assistant: &Message, results: &[&Message]) -> bool {
    results.len() == assistant.tool_calls().len()
        && results.iter().all(|message| match message {
            Message::Tool {
                call_id,
                content,
                is_error,
                ..
            } => !call_id.starts_with(CHECK_ID) || (!is_error && review::passed(content)),
            _ => false,
        })
}

/// The answer of the step `assistant` (whose results end `messages`), if it
/// is a checked answer: a block answer ([`is_block_answer`]) whose checks
/// all passed. The model answered with code, which was written and passes:
/// the run ends with that answer, as one given after a passing check would.
pub(super) fn checked_answer(assistant: &Message, messages: &[Arc<Message>]) -> Option<String> {
    let Message::Assistant { content, .. } = assistant else {
        return None;
    };
    let count = assistant.tool_calls().len();
    let results: Vec<&Message> = messages[messages.len().saturating_sub(count)..]
        .iter()
        .map(|message| &**message)
        .collect();
    (is_block_answer(assistant) && checks_passed(assistant, &results)).then(|| content.clone())
}
