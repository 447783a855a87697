//! The ceiling of a run's transcript (`max_run_bytes`): the bytes of its
//! messages' JSON, with the conversation it continues. Checked before a
//! message is appended, so nothing past it is ever recorded:
//! - a tool result that would cross it is cut to what fits, with a note
//!   saying so; the calls of its batch after it are not run (each still
//!   gets a short error result, as a provider wants one for every call);
//!   and the run then ends `context_limit`;
//! - a model response that would cross it is not recorded, and the run ends
//!   `context_limit` there.
//!
//! So a run's stored transcript is at most the ceiling, plus a few hundred
//! bytes for each call of the batch that reached it.

use std::sync::Arc;

use super::{End, Run};
use crate::harness::context::bound_tool_result;
use crate::harness::message::{Message, ToolCall};

/// The result of a call that did not run because the run reached its
/// ceiling.
const NOT_RUN: &str = "Not run: the run's transcript reached its size ceiling";

/// How often a cut result is shortened to fit (each try by what its JSON's
/// escapes took more than planned); past that, only the note is kept.
const CUT_TRIES: usize = 4;

impl Run<'_, '_> {
    /// Whether `bytes` more still fit under the ceiling.
    pub(super) fn fits(&self, bytes: usize) -> bool {
        self.transcript_bytes.saturating_add(bytes) <= self.config.context.max_run_bytes.get()
    }

    /// The end of a run that reached its ceiling.
    pub(super) fn ceiling_end(&self) -> End {
        End::ContextLimit(format!(
            "the run's transcript reached its ceiling of {} bytes ([limits] max_run_bytes): \
             the result that crossed it was cut, and calls after it in its batch were not run",
            self.config.context.max_run_bytes
        ))
    }

    /// Appends the model's response `message`, or, when it would take the
    /// transcript past the ceiling, records nothing and gives the run's end.
    pub(super) fn append_response(&mut self, message: Message) -> Result<Arc<Message>, End> {
        let json = message.to_json();
        if !self.fits(json.len()) {
            return Err(End::ContextLimit(format!(
                "the model's response ({} bytes) would take the run's transcript past its \
                 ceiling of {} bytes ([limits] max_run_bytes); it was not recorded",
                json.len(),
                self.config.context.max_run_bytes
            )));
        }
        Ok(self.append_json(message, json))
    }

    /// A tool result as it is appended, with its JSON: bounded by
    /// `max_tool_result_chars`, and cut to what fits under the ceiling
    /// (which the run then has reached) when it would cross it.
    pub(super) fn bounded_result(
        &mut self,
        call: &ToolCall,
        content: &str,
        is_error: bool,
    ) -> (Message, String) {
        let limit = self.config.context.max_tool_result_chars.get();
        let message = Message::tool(call.id.clone(), bound_tool_result(content, limit), is_error);
        let json = message.to_json();
        if self.at_ceiling || self.fits(json.len()) {
            return (message, json);
        }
        self.at_ceiling = true;
        let ceiling = self.config.context.max_run_bytes.get();
        let note = format!(
            "\n[cut: the run's transcript reached its ceiling of {ceiling} bytes; the run ends \
             here]"
        );
        let room = ceiling.saturating_sub(self.transcript_bytes);
        // What the message takes besides its content (its id, its keys).
        let frame = Message::tool(call.id.clone(), String::new(), is_error)
            .to_json()
            .len();
        let mut keep = room.saturating_sub(frame + note.len());
        for _ in 0..CUT_TRIES {
            if keep == 0 {
                break;
            }
            let mut cut = bound_tool_result(content, keep.min(limit));
            cut.push_str(&note);
            let message = Message::tool(call.id.clone(), cut, is_error);
            let json = message.to_json();
            if self.fits(json.len()) {
                return (message, json);
            }
            // Escapes made it longer than its characters: shorten by as
            // much, and an eighth more.
            let over = json.len().saturating_sub(room);
            keep = keep.saturating_sub(over).saturating_sub(keep / 8);
        }
        let message = Message::tool(call.id.clone(), note.trim_start().to_owned(), true);
        let json = message.to_json();
        (message, json)
    }

    /// Records `call` as not run, the run being at its ceiling.
    pub(super) fn not_run(&mut self, call: &ToolCall) {
        self.emitter
            .emit(|| crate::harness::events::EventKind::ToolStart {
                edited: false,
                arguments: None,
                call_id: call.id.clone(),
                name: call.name.clone(),
            });
        self.ended_call(call, NOT_RUN.to_owned(), true, 0.0);
    }
}
