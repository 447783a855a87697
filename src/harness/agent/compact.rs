//! Compaction (SPEC section 22): when what the model would be sent passes
//! `at` x `max_context_chars`, a model is asked, without tools, to
//! summarise everything before the newest group, and from then on that
//! summary, as one user message, stands in for those messages in what is
//! sent. Every message stays in the transcript, which gains a `summary`
//! entry saying how many it replaces; a later compaction summarises the
//! summary with what followed. A summary call that fails leaves the run to
//! the masking of [`crate::harness::context`], and the event says so.
//!
//! What is sent is kept as its own list (`Run::view`) only once a summary
//! exists: a run that never compacts pays for none of this.

use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::fallback::{self, Chain};
use super::{End, Run, millis};
use crate::harness::context::{ContextIndex, bound_tool_result};
use crate::harness::events::EventKind;
use crate::harness::message::{Message, json_string_chars};
use crate::harness::model::{ContextView, ModelRequest, NoDeltas};

/// What the summary request asks, after the messages it summarises.
pub const SUMMARY_ASK: &str = "[agent-runner] The conversation above is too long to continue \
in full. Write a summary of it that will replace it: you will continue the task from your \
summary alone. Keep: what was asked (the task in full, with every exact requirement, name and \
value); what was decided, and why; which files were read, created or changed (their paths, \
and what changed); the facts found that are still needed (names, values, line numbers); what \
failed; and what is left to do, in order. Write it as short notes. Do not call tools.";

/// The longest summary kept, in characters: a summary longer than what it
/// replaces would defeat it.
const MAX_SUMMARY_CHARS: usize = 16_000;

/// What is sent once a summary stands in for the transcript's first
/// messages: the summary as a user message, then the messages after those
/// it replaces.
#[derive(Debug, Clone, Default)]
pub(super) struct View {
    pub(super) messages: Vec<Arc<Message>>,
    /// The transcript index of each of `messages` (the summary's own
    /// entry for the first).
    indices: Vec<usize>,
}

impl View {
    /// Adds a message appended to the transcript at `index`.
    pub(super) fn push(&mut self, message: Arc<Message>, index: usize) {
        self.messages.push(message);
        self.indices.push(index);
    }
}

impl Run<'_, '_> {
    /// What the model is sent from: the transcript, or its view once a
    /// summary stands in for its start.
    pub(super) fn sent(&self) -> &[Arc<Message>] {
        match &self.view {
            Some(view) => &view.messages,
            None => &self.messages,
        }
    }

    /// Builds what is sent from the transcript's latest summary, if it has
    /// one (a follow-up of a compacted run starts from it; so does a run
    /// resumed after one), and measures it again.
    pub(super) fn rebuild_view(&mut self) {
        let Some(at) = self
            .messages
            .iter()
            .rposition(|message| matches!(**message, Message::Summary { .. }))
        else {
            return;
        };
        let Message::Summary { content, replaces } = &*self.messages[at] else {
            return;
        };
        let mut view = View::default();
        view.push(Arc::new(Message::user(content.clone())), at);
        for (index, message) in self.messages.iter().enumerate().skip(*replaces) {
            if !matches!(**message, Message::Summary { .. }) {
                view.push(Arc::clone(message), index);
            }
        }
        let mut context = ContextIndex::default();
        for message in &view.messages {
            context.push(message, message.serialized_chars());
        }
        self.index = context;
        self.view = Some(view);
    }

    /// Compacts what is sent when it passes the run's threshold and there
    /// is something before the newest group to summarise. `Err` when the
    /// run was stopped meanwhile.
    pub(super) async fn compact_if_due(
        &mut self,
        token: &CancellationToken,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(), End> {
        let Some(compaction) = &self.config.compaction else {
            return Ok(());
        };
        if self.compaction_failed {
            return Ok(());
        }
        let limit = self.config.context.max_context_chars.get() as f64;
        let instructions = self.sent_instructions().map_or(0, json_string_chars);
        let before = self.index.total() + instructions;
        if (before as f64) <= compaction.at * limit {
            return Ok(());
        }
        // Everything before the newest group; at least one message beside
        // the first (a lone prompt, or the summary, is not worth one).
        let newest = self.index.newest_group().unwrap_or(0);
        if newest < 2 {
            return Ok(());
        }
        let sent = self.sent();
        let replaces = match &self.view {
            Some(view) => view.indices[newest],
            None => newest,
        };
        let text = transcript_text(&sent[..newest], self.config.context.max_context_chars.get());
        let began = Instant::now();
        let summarised = self.summarise(text, token, deadline).await;
        if token.is_cancelled() {
            return Err(End::Stopped);
        }
        let (summary, usage) = match summarised {
            Ok(done) => done,
            Err(error) => {
                tracing::warn!(%error, "a compaction's summary failed: masking instead");
                self.compaction_failed = true;
                self.emitter.emit(|| EventKind::Compaction {
                    replaced_messages: 0,
                    before_chars: before,
                    after_chars: before,
                    duration_ms: millis(began.elapsed()),
                    usage: None,
                    fallback: Some("masking".into()),
                    error: Some(error),
                });
                return Ok(());
            }
        };
        self.append(Message::Summary {
            content: summary,
            replaces,
        });
        self.rebuild_view();
        let after = self.index.total() + instructions;
        self.tell_totals();
        self.emitter.emit(|| EventKind::Compaction {
            replaced_messages: replaces,
            before_chars: before,
            after_chars: after,
            duration_ms: millis(began.elapsed()),
            usage,
            fallback: None,
            error: None,
        });
        Ok(())
    }

    /// Asks the compaction's model (the run's own unless it names one) for
    /// a summary of `text`, without tools. Its usage counts in the run's.
    async fn summarise(
        &mut self,
        text: String,
        token: &CancellationToken,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(String, Option<crate::harness::Usage>), String> {
        let compaction = self.config.compaction.as_ref().ok_or("no compaction")?;
        let messages = [
            Arc::new(Message::user(text)),
            Arc::new(Message::user(SUMMARY_ASK)),
        ];
        let (own, price) = (compaction.model.clone(), compaction.price);
        // The run's own model falls back as its other calls do.
        let mut chain = Chain::new(self.config.fallback.as_ref().filter(|_| own.is_none()));
        let mut response = loop {
            let request = ModelRequest {
                instructions: None,
                messages: ContextView::new(&messages[..1], &messages[1..]),
                tools: &[],
                answer_now: false,
                must_use_tool: false,
                output_schema: None,
                cancel: token,
                deadline,
                traceparent: self.emitter.traceparent(),
                deltas: &NoDeltas,
                temperature: None,
                cache_key: None,
            };
            let model = chain.model(own.as_deref().unwrap_or(self.harness.model));
            let Some(response) = fallback::generate(model, request, token).await else {
                return Err("stopped".into());
            };
            match response {
                Ok(response) => break response,
                Err(error) => match chain.next(error) {
                    Ok(fallback) if !token.is_cancelled() => self.emitter.emit(|| fallback),
                    Ok(_) => return Err("stopped".into()),
                    Err(error) => return Err(format!("the summary call failed: {error}")),
                },
            }
        };
        let price = chain.price(price);
        self.count_usage(response.usage.as_mut(), price)
            .map_err(|error| format!("the summary call's usage: {error}"))?;
        let summary = response.content.trim();
        if summary.is_empty() {
            return Err("the summary call answered nothing".into());
        }
        let summary = bound_tool_result(summary, MAX_SUMMARY_CHARS);
        Ok((summary, response.usage))
    }
}

/// `messages` as text for the summary request, within `limit` characters
/// (its start and end kept when it is longer): each message under its
/// role, calls with their arguments, results under the call they answer.
fn transcript_text(messages: &[Arc<Message>], limit: usize) -> String {
    let mut text = String::new();
    let texts = crate::harness::render::tool_texts(messages.iter().map(|m| &**m));
    for (message, result) in messages.iter().zip(texts) {
        match &**message {
            Message::User { content } | Message::Summary { content, .. } => {
                text.push_str("[user]\n");
                text.push_str(content);
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                text.push_str("[assistant]\n");
                text.push_str(content);
                for call in tool_calls {
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(&format!("-> {}({})", call.name, call.arguments));
                }
            }
            Message::Tool {
                call_id, is_error, ..
            } => {
                let what = if *is_error { "error" } else { "result" };
                text.push_str(&format!("[tool {what} of {call_id}]\n"));
                text.push_str(&result.unwrap_or_default());
            }
        }
        text.push_str("\n\n");
    }
    bound_tool_result(text.trim_end(), limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::ToolCall;
    use serde_json::json;

    #[test]
    fn the_transcript_reads_as_text_with_its_calls_and_results() {
        let messages: Vec<Arc<Message>> = [
            Message::user("Read a.txt"),
            Message::assistant(
                "Reading.",
                vec![ToolCall::new("c1", "read_file", json!({"path": "a.txt"}))],
            ),
            Message::tool("c1", "\"alpha\"", false),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let text = transcript_text(&messages, 10_000);
        assert_eq!(
            text,
            "[user]\nRead a.txt\n\n[assistant]\nReading.\n-> read_file({\"path\":\"a.txt\"})\n\n\
             [tool result of c1]\nalpha"
        );
        // Cut to 80 characters, the marker among them: its start and end.
        let cut = transcript_text(&messages, 80);
        assert_eq!(cut.chars().count(), 80);
        assert!(cut.starts_with("[user]") && cut.ends_with("alpha"), "{cut}");
    }
}
