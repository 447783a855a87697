//! Going on after the run's process stopped: the calls of its last batch
//! that have no stored result (see [`super::Harness::recover`]).

use std::collections::HashSet;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{End, Run};
use crate::harness::message::{Message, ToolCall};
use crate::harness::pause::{Answer, Answers};

/// What becomes of a call of a stopped batch that has no result.
enum Next<'a> {
    /// Its answer is its result: a denial, a client's output or error.
    Record(&'a Answer),
    /// It runs: as proposed, or as answered (approved, maybe edited).
    Run(Option<&'a Answer>),
    /// It started and is not safe to run again: its outcome is unknown.
    Unknown(Option<&'a Answer>),
}

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
        // was approved with, unless it started and is not safe to run again.
        let next: Vec<Next> = unanswered
            .iter()
            .map(|call| {
                let answer = stopped.answers.get(&call.id);
                let arguments = match answer {
                    None | Some(Answer::Approve) => &call.arguments,
                    Some(Answer::ApproveEdited { arguments }) => arguments,
                    Some(result) => return Next::Record(result),
                };
                let tools = self.harness.tools;
                if !started.contains(&call.id)
                    || tools
                        .get(&call.name)
                        .is_some_and(|tool| tool.idempotent(arguments))
                {
                    Next::Run(answer)
                } else {
                    Next::Unknown(answer)
                }
            })
            .collect();
        // Not an edited one: a batch is told of what runs as proposed.
        self.announce(
            unanswered
                .iter()
                .zip(&next)
                .filter(|(_, next)| matches!(next, Next::Run(None | Some(Answer::Approve))))
                .map(|(call, _)| call),
        );
        for (call, next) in unanswered.iter().zip(next) {
            if token.is_cancelled() {
                return Some(End::Stopped);
            }
            if !stopped.counted {
                self.tool_calls += 1;
            }
            match next {
                Next::Record(answer) | Next::Run(Some(answer)) => {
                    self.answered(call, answer.kind(), Some(answer), token)
                        .await;
                }
                Next::Run(None) => self.call_tool(call, token).await,
                Next::Unknown(answer) => {
                    let edited = match answer {
                        Some(Answer::ApproveEdited { arguments }) => Some(arguments.clone()),
                        _ => None,
                    };
                    self.outcome_unknown(call, edited);
                }
            }
        }
        None
    }
}
