//! A final answer under an output schema: its document, or the note that
//! sends it back while retries are left (see [`crate::harness::output`]).

use super::{End, Run};
use crate::harness::message::Message;
use crate::harness::model::ModelResponse;
use crate::harness::output::{self, OUTPUT_NOTE};

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
    /// while retries are left, and ends the run `failed` after.
    pub(super) fn complete(&mut self, answer: String) -> Option<End> {
        let Some(schema) = &self.config.output else {
            return Some(End::Completed(answer, None));
        };
        match schema.check(&answer) {
            Ok(document) => Some(End::Completed(answer, Some(document))),
            Err(errors) if self.output_notes() >= schema.retries() => Some(End::OutputInvalid(
                answer,
                output::invalid_error(schema.retries(), &errors),
            )),
            Err(errors) => {
                self.append(Message::user(output::note(&errors)));
                None
            }
        }
    }

    /// The output notes sent since the run's prompt (its retries so far,
    /// counted from the transcript: a resumed run goes on counting).
    fn output_notes(&self) -> u32 {
        let prompt = &self.config.prompt;
        let start = self
            .messages
            .iter()
            .rposition(
                |message| matches!(&**message, Message::User { content } if content == prompt),
            )
            .unwrap_or(0);
        self.messages[start..]
            .iter()
            .filter(|message| matches!(&***message, Message::User { content } if content.starts_with(OUTPUT_NOTE)))
            .count() as u32
    }
}
