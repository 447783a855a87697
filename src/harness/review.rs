//! Unchecked answers: a model that changes files and answers without running
//! the check it has, or answers while its last check fails, hands back work
//! nobody looked at. A small model does it all the time, saying the tests
//! pass when it never ran them. Such an answer is questioned before it ends
//! the run: it stays in the transcript, followed by a user message from the
//! harness (starting with [`NOTE_PREFIX`]) saying what is unchecked, and the
//! loop goes on. SWE-agent asks for a review at submission in the same way.
//!
//! Only an answer that follows a tool step is questioned (an answer given
//! right after a note stands), at most [`MAX_NOTES`] times in a prompt's
//! turn, and never on the run's last step.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;

use super::message::Message;
use super::registry::ToolRegistry;
use super::tool::ToolRole;

/// How every note of the harness starts, so that a reader of the
/// transcript (and the harness itself) tells it from the client's words.
pub const NOTE_PREFIX: &str = "[agent-runner] ";

/// Notes at most in one prompt's turn.
const MAX_NOTES: usize = 3;

/// What a review needs to know of a run's tools, by name: the run's
/// [`ToolRegistry`], or a stand-in in a test.
pub trait Roles {
    /// What the tool `name` does to the work.
    fn role(&self, name: &str) -> ToolRole;

    /// The files a successful call of `name` with `arguments` changes: none
    /// for a tool that changes no file (see [`crate::harness::Tool::changed_paths`]).
    fn changed_paths(&self, name: &str, arguments: &Value) -> Vec<String>;
}

impl Roles for ToolRegistry {
    fn role(&self, name: &str) -> ToolRole {
        ToolRegistry::role(self, name)
    }

    fn changed_paths(&self, name: &str, arguments: &Value) -> Vec<String> {
        ToolRegistry::changed_paths(self, name, arguments)
    }
}

/// The note questioning an answer that `messages` (the transcript before
/// it) leave unchecked; `None` when it stands. `tools` tells what each tool
/// (by name) does; the run must have a [`ToolRole::Checks`] tool.
/// `code_blocks`: whether code in an answer is written to the file it
/// rewrites (see [`crate::harness::blocks`]), a way to fix the note offers.
pub fn note(messages: &[Arc<Message>], tools: &impl Roles, code_blocks: bool) -> Option<String> {
    let turn = noting_turn(messages)?;
    let Scan {
        changed,
        last_check_failed,
        ..
    } = Scan::of(&messages[turn..], tools);
    if !changed.is_empty() {
        let files = changed
            .iter()
            .map(|path| format!("`{path}`"))
            .collect::<Vec<_>>()
            .join(", ");
        return Some(format!(
            "{NOTE_PREFIX}You changed {files} and ran no command since, so your answer is \
             unchecked. Check your work now with `run_command` (a preset that tests it), fix \
             what fails, and answer once it passes."
        ));
    }
    let fix = if code_blocks {
        "by answering with the whole fixed file in a code block, or by calling edit_file or \
         write_file"
    } else {
        "by calling edit_file or write_file (code in an answer changes no file)"
    };
    last_check_failed.then(|| {
        format!(
            "{NOTE_PREFIX}The last command you ran failed, and no file changed since. Fix what \
             it shows {fix}, then run it again; answer once it passes. If the failure is what \
             the task asks for, answer again and say so."
        )
    })
}

/// The note after a tool step whose check passed on a change: the work is
/// checked, and the model may answer. A small model that is not told so
/// goes on rewriting a file its check just passed, and breaks it. `None`
/// unless the step's last call checked a change and passed, and while the
/// turn has notes left.
pub fn passed_note(messages: &[Arc<Message>], tools: &impl Roles) -> Option<String> {
    let turn = noting_turn(messages)?;
    let scan = Scan::of(&messages[turn..], tools);
    scan.last_passed_on_change.then(|| {
        format!(
            "{NOTE_PREFIX}That check passed on your change. If the task is done, stop calling \
             tools and answer now, briefly."
        )
    })
}

/// What the tool steps of a turn left unchecked.
#[derive(Default)]
struct Scan {
    /// Files changed since the last check.
    changed: BTreeSet<String>,
    /// Whether the last check failed.
    last_check_failed: bool,
    /// Whether the last tool result is of a check that passed with files
    /// changed before it.
    last_passed_on_change: bool,
}

impl Scan {
    fn of(turn: &[Arc<Message>], tools: &impl Roles) -> Self {
        let mut calls: HashMap<&str, (&str, ToolRole, &Value)> = HashMap::new();
        let mut scan = Self::default();
        for message in turn {
            match &**message {
                Message::Assistant { tool_calls, .. } => {
                    for call in tool_calls {
                        let role = tools.role(&call.name);
                        calls.insert(&call.id, (&call.name, role, &call.arguments));
                    }
                }
                Message::Tool {
                    call_id,
                    content,
                    is_error,
                    ..
                } => {
                    scan.last_passed_on_change = false;
                    match calls.get(call_id.as_str()) {
                        Some((name, kind, arguments)) if kind.changes_files() && !is_error => {
                            scan.changed.extend(tools.changed_paths(name, arguments));
                        }
                        Some((_, ToolRole::Checks, _)) => {
                            scan.last_check_failed = *is_error || !passed(content);
                            scan.last_passed_on_change =
                                !scan.last_check_failed && !scan.changed.is_empty();
                            scan.changed.clear();
                        }
                        _ => {}
                    }
                }
                Message::User { .. } | Message::Summary { .. } => {}
            }
        }
        scan
    }
}

/// Where the newest prompt's turn starts, if a note may follow `messages`:
/// they end with a tool step's result, and the turn has notes left.
fn noting_turn(messages: &[Arc<Message>]) -> Option<usize> {
    if !matches!(messages.last().map(|m| &**m), Some(Message::Tool { .. })) {
        return None;
    }
    let turn = turn_start(messages);
    let notes = messages[turn..]
        .iter()
        .filter(|message| is_note(message))
        .count();
    (notes < MAX_NOTES).then_some(turn)
}

/// Whether `message` is a note of the harness.
pub(super) fn is_note(message: &Message) -> bool {
    matches!(message, Message::User { content } if content.starts_with(NOTE_PREFIX))
}

/// Where the newest prompt's turn starts: its user message (not a note).
pub(super) fn turn_start(messages: &[Arc<Message>]) -> usize {
    messages
        .iter()
        .rposition(|message| matches!(**message, Message::User { .. }) && !is_note(message))
        .unwrap_or(0)
}

/// Whether a command's stored result says it passed: exit code 0.
pub(super) fn passed(content: &str) -> bool {
    serde_json::from_str::<Value>(content)
        .ok()
        .and_then(|value| value.get("exit_code").and_then(Value::as_i64))
        == Some(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::harness::message::ToolCall;

    /// The built-in tools' roles, and the files their calls change (a call
    /// of `apply_patch` names them in `files` here; the real tool reads them
    /// from its patch).
    struct Tools;

    impl Roles for Tools {
        fn role(&self, name: &str) -> ToolRole {
            match name {
                "write_file" | "edit_file" | "apply_patch" => ToolRole::Changes,
                "run_command" => ToolRole::Checks,
                _ => ToolRole::Other,
            }
        }

        fn changed_paths(&self, name: &str, arguments: &Value) -> Vec<String> {
            match name {
                "apply_patch" => arguments["files"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
                _ => arguments
                    .get("path")
                    .and_then(Value::as_str)
                    .map(|path| vec![path.to_owned()])
                    .unwrap_or_default(),
            }
        }
    }

    struct Transcript(Vec<Arc<Message>>);

    impl Transcript {
        fn new() -> Self {
            Self(vec![Arc::new(Message::user("Fix it"))])
        }

        fn call(mut self, name: &str, arguments: Value, result: Value, is_error: bool) -> Self {
            let id = format!("c{}", self.0.len());
            self.0.push(Arc::new(Message::assistant(
                "",
                vec![ToolCall::new(&id, name, arguments)],
            )));
            self.0
                .push(Arc::new(Message::tool(id, result.to_string(), is_error)));
            self
        }

        fn write(self, path: &str) -> Self {
            self.call(
                "write_file",
                json!({"path": path, "content": "x"}),
                json!({"path": path, "bytes_written": 1}),
                false,
            )
        }

        fn test(self, exit_code: i64) -> Self {
            self.call(
                "run_command",
                json!({"command": "test"}),
                json!({"exit_code": exit_code, "stdout": "", "stderr": ""}),
                false,
            )
        }

        fn say(mut self, message: Message) -> Self {
            self.0.push(Arc::new(message));
            self
        }

        fn note(&self) -> Option<String> {
            note(&self.0, &Tools, false)
        }
    }

    fn note_with_blocks(messages: &[Arc<Message>]) -> String {
        note(messages, &Tools, true).unwrap()
    }

    #[test]
    fn a_check_passing_on_a_change_is_followed_by_a_note_saying_so() {
        let passed = |t: &Transcript| passed_note(&t.0, &Tools);
        let note = passed(&Transcript::new().write("a.py").test(0)).unwrap();
        assert!(note.starts_with(NOTE_PREFIX), "{note}");
        assert!(note.contains("answer now"), "{note}");
        // A failing check, a check of nothing changed, a change after the
        // check: nothing to say.
        assert_eq!(passed(&Transcript::new().write("a.py").test(1)), None);
        assert_eq!(passed(&Transcript::new().test(0)), None);
        assert_eq!(
            passed(&Transcript::new().write("a.py").test(0).test(0)),
            None
        );
        assert_eq!(
            passed(&Transcript::new().write("a.py").test(0).write("a.py")),
            None
        );
        // After a note, the step's result is no longer the last message.
        let noted = Transcript::new()
            .write("a.py")
            .test(0)
            .say(Message::user(note.clone()));
        assert_eq!(passed(&noted), None);
        // The turn's notes are spent.
        let mut spent = Transcript::new();
        for _ in 0..MAX_NOTES {
            spent = spent.write("a.py").test(0).say(Message::user(note.clone()));
        }
        assert_eq!(passed(&spent.write("a.py").test(0)), None);
    }

    #[test]
    fn a_change_without_a_check_after_it_is_questioned() {
        let note = Transcript::new()
            .write("b.py")
            .write("a.py")
            .note()
            .unwrap();
        assert!(note.starts_with(NOTE_PREFIX), "{note}");
        assert!(note.contains("`a.py`, `b.py`"), "{note}");
        assert!(note.contains("run_command"), "{note}");
    }

    #[test]
    fn every_file_a_call_changes_is_named() {
        let note = Transcript::new()
            .call(
                "apply_patch",
                json!({"files": ["b.py", "a.py"]}),
                json!({"files": []}),
                false,
            )
            .note()
            .unwrap();
        assert!(note.contains("`a.py`, `b.py`"), "{note}");
        let checked = Transcript::new()
            .call("apply_patch", json!({"files": ["a.py"]}), json!({}), false)
            .test(0);
        assert_eq!(checked.note(), None);
    }

    #[test]
    fn a_passing_check_after_the_last_change_lets_the_answer_stand() {
        assert_eq!(Transcript::new().write("a.py").test(0).note(), None);
        let note = Transcript::new().write("a.py").test(0).write("a.py").note();
        assert!(note.is_some(), "a change after the check is unchecked");
    }

    #[test]
    fn a_failing_last_check_is_questioned_and_a_later_pass_clears_it() {
        let failed = Transcript::new().write("a.py").test(1);
        let note = failed.note().unwrap();
        assert!(note.contains("failed"), "{note}");
        assert!(note.contains("code in an answer changes no file"), "{note}");
        let note = note_with_blocks(&failed.0);
        assert!(note.contains("whole fixed file in a code block"), "{note}");
        assert_eq!(Transcript::new().write("a.py").test(1).test(0).note(), None);
        let error = Transcript::new().call(
            "run_command",
            json!({"command": "nope"}),
            json!("Unknown command"),
            true,
        );
        assert!(
            error.note().is_some(),
            "a command that could not run passed nothing"
        );
    }

    #[test]
    fn reading_and_failed_writes_need_no_check() {
        assert_eq!(Transcript::new().note(), None);
        let read =
            Transcript::new().call("read_file", json!({"path": "a.py"}), json!("text"), false);
        assert_eq!(read.note(), None);
        let refused = Transcript::new().call(
            "write_file",
            json!({"path": "../a.py", "content": "x"}),
            json!("Path escapes the workspace"),
            true,
        );
        assert_eq!(refused.note(), None);
    }

    #[test]
    fn an_answer_right_after_a_note_stands_and_notes_are_bounded() {
        let noted = Transcript::new().write("a.py");
        let first = noted.note().unwrap();
        let noted = noted
            .say(Message::assistant("Done", Vec::new()))
            .say(Message::user(first));
        assert_eq!(noted.note(), None, "the answer after a note stands");
        let mut transcript = noted;
        for _ in 1..MAX_NOTES {
            transcript = transcript.write("a.py");
            let note = transcript.note().expect("still under the bound");
            transcript = transcript
                .say(Message::assistant("Done", Vec::new()))
                .say(Message::user(note));
        }
        assert_eq!(transcript.write("a.py").note(), None, "at most MAX_NOTES");
    }

    #[test]
    fn a_new_prompt_starts_a_new_turn() {
        let earlier = Transcript::new().write("a.py").test(1);
        let next = earlier
            .say(Message::assistant("It fails", Vec::new()))
            .say(Message::user("Now list the files"))
            .call("list_dir", json!({}), json!({"entries": []}), false);
        assert_eq!(
            next.note(),
            None,
            "the earlier turn's failure is not this one's"
        );
    }
}
