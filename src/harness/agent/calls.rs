//! A run's tool calls: which of a batch wait for an answer, how an answered
//! one is recorded, and how an admitted one is dispatched.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use futures_util::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{OUTCOME_UNKNOWN, Run, TOOL_CANCEL_GRACE, millis, panic_message, serialize_result};
use crate::harness::events::EventKind;
use crate::harness::message::{Message, ToolCall};
use crate::harness::pause::{ActionKind, Answer, PendingAction, denied};

impl Run<'_, '_> {
    /// The calls of a batch that wait for an answer: valid calls of a
    /// client's tool, and valid calls that need approval. Unknown tools and
    /// invalid arguments are answered to the model as usual, never paused.
    pub(super) fn pending_actions(&self, calls: &[ToolCall]) -> Vec<PendingAction> {
        calls
            .iter()
            .filter(|call| call.unparsable_arguments.is_none())
            .filter_map(|call| {
                // What the call would wait for first: the arguments of a call
                // that waits for nothing are checked once, when it runs.
                let tools = self.harness.tools;
                let kind = if tools.get(&call.name)?.is_client() {
                    ActionKind::ClientTool
                } else if self.config.approval.requires(&call.name) {
                    ActionKind::Approval
                } else {
                    return None;
                };
                // Invalid arguments are answered as usual, never paused.
                tools.check(&call.name, &call.arguments).ok()??;
                // An approval may be answered with other arguments, checked
                // against this.
                let input_schema = (kind == ActionKind::Approval)
                    .then(|| tools.schema(&call.name).cloned())
                    .flatten();
                Some(PendingAction {
                    call_id: call.id.clone(),
                    kind,
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    run_id: None,
                    input_schema,
                })
            })
            .collect()
    }

    /// Records a paused call as its answer says: an approved one runs; a
    /// denied one, a client's output or a client's error becomes its result.
    /// A call without a fitting answer never runs: an approval is denied, a
    /// client tool gets an error result.
    pub(super) async fn answered(
        &mut self,
        call: &ToolCall,
        kind: ActionKind,
        answer: Option<&Answer>,
        token: &CancellationToken,
    ) {
        let (content, is_error) = match (kind, answer) {
            (ActionKind::Approval, Some(Answer::Approve)) => {
                return self.call_tool(call, token).await;
            }
            (ActionKind::Approval, Some(Answer::ApproveEdited { arguments })) => {
                return self.call_edited(call, arguments.clone(), token).await;
            }
            (_, Some(Answer::Deny { reason })) => (denied(reason.as_deref()), true),
            (_, Some(Answer::Output(value))) => (serialize_result(value), false),
            (_, Some(Answer::Error(error))) => (error.clone(), true),
            (ActionKind::Approval, _) => (denied(Some("no approval was given")), true),
            (ActionKind::ClientTool, _) => ("No result came from the client".to_owned(), true),
        };
        self.emitter.emit(|| EventKind::ToolStart {
            call_id: call.id.clone(),
            name: call.name.clone(),
            edited: false,
            arguments: None,
        });
        self.ended_call(call, content, is_error, 0.0);
    }

    /// Runs a call a reviewer approved with `arguments` in place of the
    /// model's (SPEC section 25): its `tool_start` and its result say so,
    /// and the result tells the model what ran. The assistant message keeps
    /// the proposal.
    async fn call_edited(&mut self, call: &ToolCall, arguments: Value, token: &CancellationToken) {
        let edited = ToolCall {
            arguments,
            ..call.clone()
        };
        self.dispatch(&edited, true, token).await;
    }

    /// Tells each tool that takes batches (see
    /// [`crate::harness::Tool::batch`]) of its valid calls among `calls`,
    /// the batch about to run, when it has several. A batch of one call, or
    /// of tools that take none, costs a lookup per call.
    pub(super) fn announce<'c>(&self, calls: impl IntoIterator<Item = &'c ToolCall>) {
        let tools = self.harness.tools;
        let mut by_tool: Vec<(&str, Vec<(&str, &serde_json::Value)>)> = Vec::new();
        for call in calls {
            if call.unparsable_arguments.is_some()
                || !tools
                    .get(&call.name)
                    .is_some_and(|tool| tool.takes_batches())
                || !matches!(tools.check(&call.name, &call.arguments), Ok(Some(_)))
            {
                continue;
            }
            match by_tool.iter_mut().find(|(name, _)| *name == call.name) {
                Some((_, list)) => list.push((&call.id, &call.arguments)),
                None => by_tool.push((&call.name, vec![(&call.id, &call.arguments)])),
            }
        }
        for (name, list) in by_tool {
            // One call alone gains nothing from being told first.
            if list.len() > 1
                && let Some(tool) = tools.get(name)
            {
                tool.batch(&list);
            }
        }
    }

    /// Dispatches one admitted call and records its result. Every failure here
    /// is the model's to handle: it becomes an error result, never an end.
    pub(super) async fn call_tool(&mut self, call: &ToolCall, token: &CancellationToken) {
        self.dispatch(call, false, token).await;
    }

    /// Dispatches `call`, whose arguments a reviewer gave when `edited`.
    async fn dispatch(&mut self, call: &ToolCall, edited: bool, token: &CancellationToken) {
        self.emitter.emit(|| EventKind::ToolStart {
            call_id: call.id.clone(),
            name: call.name.clone(),
            edited,
            arguments: edited.then(|| call.arguments.clone()),
        });
        let began = Instant::now();
        let (content, is_error) = match self.harness.tools.check(&call.name, &call.arguments) {
            _ if call.unparsable_arguments.is_some() => (
                format!(
                    "Invalid arguments: $: {}",
                    call.unparsable_arguments.as_deref().unwrap_or_default()
                ),
                true,
            ),
            Ok(None) => (format!("Unknown tool: {}", call.name), true),
            Err(errors) => (format!("Invalid arguments: {}", errors.join("; ")), true),
            // A call not safe to run twice runs only once its start is
            // recorded: should the process die while it runs, the resumed
            // run knows it may have had effects.
            Ok(Some(tool))
                if !tool.idempotent(&call.arguments)
                    && !tokio::select! {
                        recorded = self.emitter.recorded() => recorded,
                        () = token.cancelled() => false,
                    } =>
            {
                (
                    "Tool call cancelled: the run was stopped before it started".to_owned(),
                    true,
                )
            }
            Ok(Some(tool)) => {
                let execution =
                    AssertUnwindSafe(tool.execute_call(&call.id, &call.arguments, token))
                        .catch_unwind();
                let abandoned = async {
                    token.cancelled().await;
                    tokio::time::sleep(TOOL_CANCEL_GRACE).await;
                };
                let outcome = tokio::select! {
                    outcome = execution => match outcome {
                        Ok(Ok(value)) => (serialize_result(&value), false),
                        Ok(Err(error)) => (error.message().to_owned(), true),
                        Err(panic) => (format!("Tool panicked: {}", panic_message(&*panic)), true),
                    },
                    () = abandoned => ("Tool call cancelled: the run was stopped".to_owned(), true),
                };
                // Cut short by the run's stop: made again if it resumes (an
                // ended run's follow-up closes it as unanswered).
                if outcome.1 && token.is_cancelled() && tool.resumes_on_stop() {
                    return;
                }
                outcome
            }
        };
        let duration_ms = millis(began.elapsed());
        let content = match edited {
            true => format!("{}\n\n{content}", edited_note(&call.arguments)),
            false => content,
        };
        self.ended(call, content, is_error, duration_ms, edited);
    }

    /// Records a call that was running when its process stopped, and is
    /// not safe to run again, as [`OUTCOME_UNKNOWN`]; `edited`: the
    /// arguments a reviewer approved it with, if any.
    pub(super) fn outcome_unknown(&mut self, call: &ToolCall, edited: Option<Value>) {
        let is_edited = edited.is_some();
        let call = match edited {
            Some(arguments) => ToolCall {
                arguments,
                ..call.clone()
            },
            None => call.clone(),
        };
        self.emitter.emit(|| EventKind::ToolStart {
            call_id: call.id.clone(),
            name: call.name.clone(),
            edited: is_edited,
            arguments: is_edited.then(|| call.arguments.clone()),
        });
        let content = match is_edited {
            true => format!("{}\n\n{OUTCOME_UNKNOWN}", edited_note(&call.arguments)),
            false => OUTCOME_UNKNOWN.to_owned(),
        };
        self.ended(&call, content, true, 0.0, is_edited);
    }

    /// Emits a call's `tool_end` and records its result, bounded.
    pub(super) fn ended_call(
        &mut self,
        call: &ToolCall,
        content: String,
        is_error: bool,
        duration_ms: f64,
    ) {
        self.ended(call, content, is_error, duration_ms, false);
    }

    /// [`Run::ended_call`], for a call whose arguments (`call`'s) a
    /// reviewer gave when `edited`: its result message says so.
    fn ended(
        &mut self,
        call: &ToolCall,
        content: String,
        is_error: bool,
        duration_ms: f64,
        edited: bool,
    ) {
        self.emitter.emit(|| EventKind::ToolEnd {
            call_id: call.id.clone(),
            name: call.name.clone(),
            duration_ms,
            is_error,
        });
        let (mut message, mut json) = self.bounded_result(call, &content, is_error);
        if edited
            && let Message::Tool {
                edited, arguments, ..
            } = &mut message
        {
            *edited = true;
            *arguments = Some(call.arguments.clone());
            json = message.to_json();
        }
        self.tell_totals();
        self.append_json(message, json);
    }
}

/// What the model is told before the result of a call a reviewer approved
/// with other arguments.
fn edited_note(arguments: &serde_json::Value) -> String {
    format!(
        "[A reviewer changed the arguments of this call before approving it. It ran with \
         {arguments}, not with the arguments you proposed; this is its result.]"
    )
}
