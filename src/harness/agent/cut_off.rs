//! Responses cut off at the model's token limit. A small model that starts
//! repeating itself (a tool call's argument padded with thousands of blank
//! lines) runs into `max_tokens`; so does a large model writing a long file
//! in one call. Nothing of such a response can be used, but the run need not
//! fail: the step is counted, the model is told its response was cut off
//! and dropped, and it answers again, shorter. Once only in a row: a second
//! cut-off right after the note ends the run `model_error`, as does one on
//! the run's last step. (Claude Code recovers from its output limit alike.)

use std::time::Instant;

use super::{Run, millis};
use crate::harness::review::NOTE_PREFIX;
use crate::harness::{EventKind, Message};

/// The note after a response cut off at the token limit, as a user message
/// of the server.
pub const CUT_OFF_NOTE: &str = "[agent-runner] Your last response was cut off at the token \
limit and dropped: it changed nothing. Respond again, shorter: one tool call at a time, edits of \
only the lines that change, and no repeated text.";

impl Run<'_, '_> {
    /// Whether a response cut off at the token limit is followed by
    /// [`CUT_OFF_NOTE`] rather than a failed run: the last message is not
    /// that note already, and a step is left after this one.
    pub(super) fn may_note_cut_off(&self) -> bool {
        let noted = matches!(
            self.messages.last().map(|message| &**message),
            Some(Message::User { content }) if content == CUT_OFF_NOTE
        );
        !noted && self.steps + 1 < self.config.limits.max_steps.get()
    }

    /// A response cut off, counted as a step that changed nothing; with
    /// `note`, followed by [`CUT_OFF_NOTE`] (a draft's is not: the run goes
    /// on as if it had not drafted). `profile`: the fallback that answered,
    /// if one did.
    pub(super) fn cut_off(
        &mut self,
        why: &str,
        began: Instant,
        note: bool,
        profile: Option<String>,
    ) {
        tracing::debug!(%why, "a response was cut off");
        self.steps += 1;
        self.tell_totals();
        let duration_ms = millis(began.elapsed());
        self.emitter.emit(|| EventKind::ModelEnd {
            duration_ms,
            usage: None,
            finish_reason: None,
            profile,
        });
        if note {
            debug_assert!(CUT_OFF_NOTE.starts_with(NOTE_PREFIX));
            self.append(Message::user(CUT_OFF_NOTE));
        }
    }
}
