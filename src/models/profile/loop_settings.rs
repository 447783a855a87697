//! How the harness's loop treats a profile's model: the switches a small
//! model needs and a strong one does not (see docs/models.md), set on the
//! profile that serves the model. Each one a profile leaves unset is the
//! server's (`[runs]`), so a server serving a small and a strong model need
//! not choose one behaviour for both.

/// `draft_first`, `check_answers`, `write_code_blocks` and
/// `question_unchanged` of a profile, or of the server when every one is
/// set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopSettings {
    /// The first model call of a run that starts a conversation is made
    /// without tool definitions.
    pub draft_first: Option<bool>,
    /// An answer that leaves changed files unchecked, or a failed command
    /// unfixed, is questioned before it ends the run.
    pub check_answers: Option<bool>,
    /// Code in a fenced block of an answer is taken as a write of the file
    /// it rewrites.
    pub write_code_blocks: Option<bool>,
    /// An answer that changed no file when the prompt asks for a change is
    /// questioned once (on unless set off).
    pub question_unchanged: Option<bool>,
}

impl LoopSettings {
    /// Every switch as given (the server's `[runs]`).
    /// The server's (`[runs]`): every switch set, but `question_unchanged`,
    /// which unset is on for a provider's model and off for a script.
    pub fn all(
        draft_first: bool,
        check_answers: bool,
        write_code_blocks: bool,
        question_unchanged: Option<bool>,
    ) -> Self {
        Self {
            draft_first: Some(draft_first),
            check_answers: Some(check_answers),
            write_code_blocks: Some(write_code_blocks),
            question_unchanged,
        }
    }

    /// Each of these that is set, else `defaults`'s.
    pub fn or(self, defaults: Self) -> Self {
        Self {
            draft_first: self.draft_first.or(defaults.draft_first),
            check_answers: self.check_answers.or(defaults.check_answers),
            write_code_blocks: self.write_code_blocks.or(defaults.write_code_blocks),
            question_unchanged: self.question_unchanged.or(defaults.question_unchanged),
        }
    }

    pub fn draft_first(&self) -> bool {
        self.draft_first.unwrap_or(false)
    }

    pub fn check_answers(&self) -> bool {
        self.check_answers.unwrap_or(false)
    }

    pub fn write_code_blocks(&self) -> bool {
        self.write_code_blocks.unwrap_or(false)
    }

    /// Whether an answer that changed nothing is questioned: as set, else
    /// for a provider's model (`scripted` false) and not for a script,
    /// whose answers are meant to end its run.
    pub fn question_unchanged(&self, scripted: bool) -> bool {
        self.question_unchanged.unwrap_or(!scripted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_setting_wins_and_an_unset_one_is_the_servers() {
        let server = LoopSettings::all(false, true, false, Some(true));
        let profile = LoopSettings {
            draft_first: Some(true),
            check_answers: None,
            write_code_blocks: Some(false),
            question_unchanged: Some(false),
        };
        let picked = profile.or(server);
        assert!(picked.draft_first());
        assert!(picked.check_answers());
        assert!(!picked.write_code_blocks());
        assert!(!picked.question_unchanged(false));
        let unset = LoopSettings::all(false, false, false, None);
        assert!(unset.question_unchanged(false), "on for a provider's model");
        assert!(!unset.question_unchanged(true), "off for a script");
        assert_eq!(LoopSettings::default().or(server), server);
    }
}
