//! The harness's notes to the model about its checks (see
//! [`crate::harness::review`]), under `[runs] check_answers`, and about an
//! answer that changed nothing (see [`crate::harness::unchanged`]), under
//! `[runs] question_unchanged`.

use super::Run;
use crate::harness::tool::Tool;
use crate::harness::{review, unchanged, unread};

impl Run<'_, '_> {
    /// The note questioning the answer the model just gave, if it leaves
    /// work unchecked and a step is left to check it in.
    pub(super) fn review(&self) -> Option<String> {
        let tools = self.harness.tools;
        self.notes_enabled()
            .then(|| {
                let code_blocks = self.block_writer().is_some();
                review::note(&self.messages, tools, code_blocks)
            })
            .flatten()
    }

    /// The note telling the model that the check it just ran passed on its
    /// change, if it did and a step is left to answer in.
    pub(super) fn passed_note(&self) -> Option<String> {
        let tools = self.harness.tools;
        self.notes_enabled()
            .then(|| review::passed_note(&self.messages, tools))
            .flatten()
    }

    /// The note questioning an answer given without any tool call when the
    /// prompt names files of the workspace (see [`unread`]), if the run
    /// can read them and a step is left to.
    pub(super) async fn unread_note(&self) -> Option<String> {
        if !self.config.check_answers
            || self.steps >= self.config.limits.max_steps.get()
            || !unread::may_note(&self.messages)
        {
            return None;
        }
        let reader = self.harness.tools.file_reader()?;
        let files = text_file_paths(&**reader).await;
        unread::note(&self.messages, &files, &reader.definition().name)
    }

    /// The note questioning an answer that changed no file when the prompt
    /// asks for a change (see [`crate::harness::unchanged`]), if the run can
    /// change files, has no output schema (its answer is a document), and
    /// a step is left to.
    pub(super) async fn unchanged_note(&self) -> Option<String> {
        if !self.config.question_unchanged
            || self.config.output.is_some()
            || self.steps >= self.config.limits.max_steps.get()
        {
            return None;
        }
        let tools = self.harness.tools;
        let changers = tools.file_changers();
        if changers.is_empty() {
            return None;
        }
        let named = changers
            .iter()
            .take(2)
            .map(|name| format!("`{name}`"))
            .collect::<Vec<_>>()
            .join(" or ");
        let note = unchanged::note(&self.messages, tools, &named)?;
        // Named, since a model that never listed them edits a file named
        // after the function it was asked to write, which does not exist.
        let files = match tools.file_reader().or_else(|| tools.whole_file_writer()) {
            Some(lister) => text_file_paths(&**lister).await,
            None => Vec::new(),
        };
        Some(unchanged::with_files(note, &files))
    }

    /// Whether notes are on, the run has a check, and a step is left after
    /// a note.
    fn notes_enabled(&self) -> bool {
        self.config.check_answers
            && self.steps < self.config.limits.max_steps.get()
            && self.harness.tools.has_check()
    }
}

/// The paths of the workspace's text files, as `tool` (a reader or a
/// writer of files) shows them.
pub(super) async fn text_file_paths(tool: &dyn Tool) -> Vec<String> {
    let files = tool.text_files().await;
    files.into_iter().map(|(path, _)| path).collect()
}
