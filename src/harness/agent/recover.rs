//! Going on after the run's process stopped: the calls of its last batch
//! that have no stored result (see [`super::Harness::recover`]).

use std::collections::HashSet;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{End, Run};
use crate::harness::message::{Message, ToolCall};
use crate::harness::pause::{ActionKind, Answer, Answers};

/// What is stored of the last batch of a run whose process stopped.
#[derive(Debug, Clone, Default)]
pub struct StoppedBatch {
    /// Its calls whose `tool_start` is stored (with or without a result).
    pub started: HashSet<String>,
    /// It was counted whole when the run paused for it (its calls were
    /// being run as answered): its calls are not counted again.
    pub counted: bool,
    /// The answers its paused calls were given, by call id: a denied call
    /// stays denied, an edited one runs with its reviewer's arguments.
    pub answers: Answers,
}

impl Run<'_, '_> {
    /// The calls of the transcript's last batch that have no result, run
    /// (or answered `Outcome unknown`) in call order, counted as every call
    /// is (unless the batch was counted at its pause). A transcript that
    /// ends with an answer ends the run with it.
    pub(super) async fn recover_batch(
        &mut self,
        stopped: &StoppedBatch,
        token: &CancellationToken,
    ) -> Option<End> {
        let started = &stopped.started;
        let batch = self
            .messages
            .iter()
            .rposition(|message| matches!(**message, Message::Assistant { .. }))?;
        let assistant = Arc::clone(&self.messages[batch]);
        if batch + 1 == self.messages.len() && assistant.tool_calls().is_empty() {
            let Message::Assistant { content, .. } = &*assistant else {
                return None;
            };
            return self.complete(content.clone());
        }
        let answered: HashSet<&str> = self.messages[batch + 1..]
            .iter()
            .filter_map(|message| match &**message {
                Message::Tool { call_id, .. } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        let unanswered: Vec<ToolCall> = assistant
            .tool_calls()
            .iter()
            .filter(|call| !answered.contains(call.id.as_str()))
            .cloned()
            .collect();
        drop(answered);
        // A call whose answer is its result (a denial, a client's output
        // or error) is recorded so; one approved runs with the arguments it
        // was approved with.
        let answer_of = |call: &ToolCall| stopped.answers.get(&call.id);
        let runs = |call: &ToolCall| {
            answer_of(call).is_none_or(|answer| {
                matches!(answer, Answer::Approve | Answer::ApproveEdited { .. })
            })
        };
        let rerun = |call: &ToolCall| {
            let arguments = match answer_of(call) {
                Some(Answer::ApproveEdited { arguments }) => arguments,
                _ => &call.arguments,
            };
            !started.contains(&call.id)
                || self
                    .harness
                    .tools
                    .get(&call.name)
                    .is_some_and(|tool| tool.idempotent(arguments))
        };
        let rerun: Vec<bool> = unanswered
            .iter()
            .map(|call| runs(call) && rerun(call))
            .collect();
        self.announce(
            unanswered
                .iter()
                .zip(&rerun)
                // Not an edited one: a batch is told of what runs.
                .filter(|(call, rerun)| {
                    **rerun && matches!(answer_of(call), None | Some(Answer::Approve))
                })
                .map(|(call, _)| call),
        );
        for (call, rerun) in unanswered.iter().zip(rerun) {
            if token.is_cancelled() {
                return Some(End::Stopped);
            }
            if !stopped.counted {
                self.tool_calls += 1;
            }
            let answer = answer_of(call);
            if let Some(answer) = answer.filter(|_| rerun || !runs(call)) {
                let kind = match answer {
                    Answer::Output(_) | Answer::Error(_) => ActionKind::ClientTool,
                    _ => ActionKind::Approval,
                };
                self.answered(call, kind, Some(answer), token).await;
            } else if rerun {
                self.call_tool(call, token).await;
            } else {
                let edited = match answer {
                    Some(Answer::ApproveEdited { arguments }) => Some(arguments.clone()),
                    _ => None,
                };
                self.outcome_unknown(call, edited);
            }
        }
        None
    }
}
