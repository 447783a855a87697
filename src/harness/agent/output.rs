//! A final answer under an output schema: its document, or the note that
//! sends it back while retries are left (see [`crate::harness::output`]).

use super::{End, Run};
use crate::harness::message::Message;
use crate::harness::model::ModelResponse;
use crate::harness::output::{self, OUTPUT_NOTE};
use crate::harness::review::NOTE_PREFIX;

impl Run<'_, '_> {
    /// The instructions sent with every step: the run's own, and what the
    /// model is told of its output schema, if it has one.
    pub(super) fn sent_instructions(&self) -> Option<&str> {
        self.told_instructions
            .as_deref()
            .or(self.config.instructions.as_deref())
    }

    /// Whether `response` is a final answer that is the run's output (a
    /// fenced JSON block of it is then the document, not a file's code).
    pub(super) fn is_output(&self, response: &ModelResponse) -> bool {
        self.config.output.is_some()
            && response.tool_calls.is_empty()
            && output::document(&response.content).is_ok()
    }

    /// How the run ends with `answer`: completed, with its document when it
    /// has an output schema and the answer is valid under it. An answer that
    /// is not is sent back with what is wrong (a note; `None`: ask again)
    /// while retries and steps are left, and ends the run `failed` after,
    /// the answer kept.
    pub(super) fn complete(&mut self, answer: String) -> Option<End> {
        let Some(schema) = &self.config.output else {
            return Some(End::Completed(answer, None));
        };
        let errors = match schema.check(&answer) {
            Ok(document) => return Some(End::Completed(answer, Some(document))),
            Err(errors) => errors,
        };
        let retries = schema.retries();
        if self.output_notes() >= retries {
            let error = output::invalid_error(&output::after_retries(retries), &errors);
            return Some(End::OutputInvalid(answer, error));
        }
        if self.steps >= self.config.limits.max_steps.get() {
            let error = output::invalid_error("with no step left for a retry", &errors);
            return Some(End::OutputInvalid(answer, error));
        }
        self.append(Message::user(output::note(&errors)));
        None
    }

    /// The output notes sent since the last message of the run's client
    /// (its prompt; the server's own notes start with [`NOTE_PREFIX`]): the
    /// retries so far, counted from the transcript, so that a resumed run
    /// goes on counting and a continued one starts again.
    fn output_notes(&self) -> u32 {
        let mut notes = 0;
        for message in self.messages.iter().rev() {
            if let Message::User { content } = &**message {
                if content.starts_with(OUTPUT_NOTE) {
                    notes += 1;
                } else if !content.starts_with(NOTE_PREFIX) {
                    break;
                }
            }
        }
        notes
    }
}
