//! The run's transcript: appending to it, and choosing what of it the
//! model is sent (within the context budget); taking up a stored one.

use std::sync::Arc;

use super::{Run, UNANSWERED};
use crate::harness::context::{ContextError, Selection};
use crate::harness::events::EventKind;
use crate::harness::message::{Message, json_string_chars};
use crate::harness::pause::Checkpoint;

impl Run<'_, '_> {
    /// A continued transcript may end with calls that never ran (its run
    /// was stopped, or timed out, mid-batch): each gets an error result, so
    /// that the conversation is whole again before its next prompt (a
    /// provider refuses calls without results).
    pub(super) fn close_unanswered(&mut self) {
        let Some(batch) = self
            .messages
            .iter()
            .rposition(|message| matches!(**message, Message::Assistant { .. }))
        else {
            return;
        };
        let answered: Vec<String> = self.messages[batch + 1..]
            .iter()
            .filter_map(|message| match &**message {
                Message::Tool { call_id, .. } => Some(call_id.clone()),
                _ => None,
            })
            .collect();
        let unanswered: Vec<String> = self.messages[batch]
            .tool_calls()
            .iter()
            .map(|call| call.id.clone())
            .filter(|id| !answered.contains(id))
            .collect();
        for id in unanswered {
            self.append(Message::tool(id, UNANSWERED, true));
        }
    }

    /// Selects the context within `max_context_chars`, the instructions
    /// counted in it (the characters of their JSON string).
    pub(super) fn select_context(&self) -> Result<Selection, ContextError> {
        let limit = self.config.context.max_context_chars.get();
        let text = self.sent_instructions().unwrap_or_default();
        // As a JSON string the instructions take at most six characters a
        // byte (`\u00XX`), and their quotes: when the whole transcript fits
        // beside that, nothing is left out, and they need not be measured.
        let at_most = 2 + 6 * text.len();
        let instructions = if self.index.total() + at_most <= limit {
            at_most
        } else {
            *self
                .instructions_chars
                .get_or_init(|| self.sent_instructions().map_or(0, json_string_chars))
        };
        self.index
            .select(limit.saturating_sub(instructions))
            .map_err(|error| match error {
                ContextError::TooSmall { required, .. } => ContextError::TooSmall {
                    limit,
                    required: required + instructions,
                },
                error => error,
            })
    }

    /// Takes up where a paused run stood.
    pub(super) fn restore(&mut self, checkpoint: Checkpoint) {
        for message in &checkpoint.messages {
            let size = message.serialized_size();
            self.index.push(message, size.chars);
            self.transcript_bytes += size.bytes;
        }
        self.messages = checkpoint.messages;
        self.steps = checkpoint.steps;
        self.tool_calls = checkpoint.tool_calls;
        self.usage = checkpoint.usage;
        // What was spent before is known as far as the stored cost is.
        self.spent_usd = checkpoint.usage.cost_usd.unwrap_or(0.0);
        self.elapsed_before = checkpoint.elapsed;
        self.rebuild_view();
    }

    pub(super) fn append(&mut self, message: Message) -> Arc<Message> {
        let json = message.to_json();
        self.append_json(message, json)
    }

    /// Appends `message`, whose JSON is `json`.
    pub(super) fn append_json(&mut self, message: Message, json: String) -> Arc<Message> {
        let message = Arc::new(message);
        // Serialised once: the context is measured in this JSON, and the
        // observer records and sends the same bytes.
        let json: Arc<str> = json.into();
        self.transcript_bytes += json.len();
        // A summary changes what is sent as a whole (see `compact`).
        if !matches!(*message, Message::Summary { .. }) {
            self.index.push(&message, json.chars().count());
            if let Some(view) = &mut self.view {
                view.push(Arc::clone(&message), self.messages.len());
            }
        }
        self.messages.push(Arc::clone(&message));
        self.emitter.emit(|| EventKind::Message {
            message: Arc::clone(&message),
            json,
        });
        message
    }
}
