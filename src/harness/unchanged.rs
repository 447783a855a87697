//! Answers that change nothing: asked to fix or implement something in its
//! workspace, a small model runs the failing test and then tells the user
//! to implement the function, and the run ends `completed` having changed
//! nothing (measured: with the server's defaults, a 1.5B model "solved" 0
//! of 20 problems that way). Such an answer is questioned once in a
//! prompt's turn, as unchecked work is (see [`crate::harness::review`]):
//! it stays in the transcript, followed by a note of the harness saying
//! that nothing changed, and the loop goes on. An answer given after the
//! note stands: the model may have a reason (the code was right already).
//!
//! Only a prompt that asks for a change is concerned: one with a sentence
//! that starts with a verb of changing ("Fix ...", "Implement ...", "Make
//! the tests pass"). A question ("Why does this fail?") is answered as it
//! is.

use std::collections::HashMap;
use std::sync::Arc;

use super::message::Message;
use super::review::{NOTE_PREFIX, Roles, is_note, turn_start};

/// How the note starts after [`NOTE_PREFIX`], to tell it apart.
const UNCHANGED: &str = "You changed no file";

/// The verbs whose imperative asks for a change of the workspace.
const CHANGING_VERBS: [&str; 22] = [
    "add",
    "change",
    "complete",
    "convert",
    "correct",
    "create",
    "delete",
    "edit",
    "finish",
    "fix",
    "implement",
    "make",
    "modify",
    "patch",
    "refactor",
    "remove",
    "rename",
    "repair",
    "replace",
    "resolve",
    "update",
    "write",
];

/// The note questioning an answer given after `messages` when the newest
/// prompt asks for a change and its turn changed no file (no successful
/// call of a tool that changes files). `writer` names the tools that
/// change files, for the note. `None` when the answer stands.
pub fn note(messages: &[Arc<Message>], tools: &impl Roles, writer: &str) -> Option<String> {
    let turn = turn_start(messages);
    let Some(Message::User { content: prompt }) = messages.get(turn).map(|m| &**m) else {
        return None;
    };
    if !asks_for_change(prompt) {
        return None;
    }
    let mut calls: HashMap<&str, &str> = HashMap::new();
    for message in &messages[turn..] {
        match &**message {
            Message::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    calls.insert(&call.id, &call.name);
                }
            }
            Message::Tool {
                call_id, is_error, ..
            } if !is_error => {
                let changed = calls
                    .get(call_id.as_str())
                    .is_some_and(|name| tools.role(name).changes_files());
                if changed {
                    return None;
                }
            }
            Message::User { content }
                if is_note(message) && content[NOTE_PREFIX.len()..].starts_with(UNCHANGED) =>
            {
                return None;
            }
            _ => {}
        }
    }
    Some(format!(
        "{NOTE_PREFIX}{UNCHANGED}, but the task asks for a change. Do not tell the user to make \
         it: make it yourself now with {writer}, then check it. If nothing needs to change, \
         answer again and say why."
    ))
}

/// Files named in the note at most.
const MAX_NAMED: usize = 8;

/// `note`, followed by the workspace's files (`files`, their paths; at
/// most [`MAX_NAMED`] of them), if it has any.
pub fn with_files(mut note: String, files: &[String]) -> String {
    if files.is_empty() {
        return note;
    }
    let mut named: Vec<String> = files
        .iter()
        .take(MAX_NAMED)
        .map(|path| format!("`{path}`"))
        .collect();
    if files.len() > MAX_NAMED {
        named.push(format!("and {} more", files.len() - MAX_NAMED));
    }
    note.push_str(&format!(" The workspace's files: {}.", named.join(", ")));
    note
}

/// Whether `prompt` asks for a change: one of its sentences (or lines)
/// starts with a verb of [`CHANGING_VERBS`], as an imperative does.
pub fn asks_for_change(prompt: &str) -> bool {
    prompt
        .split(['.', '!', '?', '\n', ':', ';'])
        .filter_map(|sentence| {
            let word = sentence
                .trim_start_matches(|c: char| !c.is_alphanumeric())
                .split(|c: char| !c.is_alphanumeric())
                .next()?;
            Some(word.to_ascii_lowercase())
        })
        .any(|word| CHANGING_VERBS.contains(&word.as_str()))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::harness::message::ToolCall;
    use crate::harness::tool::ToolRole;

    struct Tools;

    impl Roles for Tools {
        fn role(&self, name: &str) -> ToolRole {
            match name {
                "write_file" => ToolRole::Writes,
                "run_command" => ToolRole::Checks,
                _ => ToolRole::Other,
            }
        }

        fn changed_paths(&self, _: &str, _: &Value) -> Vec<String> {
            Vec::new()
        }
    }

    fn turn(prompt: &str, calls: &[(&str, bool)]) -> Vec<Arc<Message>> {
        let mut messages = vec![Arc::new(Message::user(prompt))];
        for (i, (name, is_error)) in calls.iter().enumerate() {
            let id = format!("c{i}");
            messages.push(Arc::new(Message::assistant(
                "",
                vec![ToolCall::new(id.clone(), *name, json!({}))],
            )));
            messages.push(Arc::new(Message::tool(id, "result", *is_error)));
        }
        messages.push(Arc::new(Message::assistant(
            "Implement it like this: ...",
            Vec::new(),
        )));
        messages
    }

    #[test]
    fn a_prompt_that_asks_for_a_change_is_told_apart_from_a_question() {
        for asking in [
            "Fix the failing test in test_slug.py.",
            "The CLI crashes on empty input. Make it print usage instead",
            "implement `parse_version` in versions.py",
            "Task:\n- Add a --max-length option",
        ] {
            assert!(asks_for_change(asking), "{asking}");
        }
        for asking in [
            "Why does test_slug.py fail?",
            "What is in this workspace?",
            "Summarise the README. Do not fix anything",
            "Which files make up the parser?",
        ] {
            assert!(!asks_for_change(asking), "{asking}");
        }
    }

    #[test]
    fn an_answer_that_changed_nothing_is_questioned_once() {
        let messages = turn("Fix the bug in cart.py", &[("run_command", false)]);
        let note = note(&messages, &Tools, "write_file").expect("questioned");
        assert!(note.starts_with(NOTE_PREFIX), "{note}");
        assert!(note.contains("write_file"), "{note}");
        let mut again = messages.clone();
        again.push(Arc::new(Message::user(note)));
        again.push(Arc::new(Message::assistant(
            "It is right already.",
            Vec::new(),
        )));
        assert_eq!(
            super::note(&again, &Tools, "write_file"),
            None,
            "once a turn"
        );
    }

    #[test]
    fn the_note_names_the_workspace_s_files() {
        let files: Vec<String> = (1..=10).map(|i| format!("f{i}.py")).collect();
        let note = with_files("Changed nothing.".into(), &files[..2]);
        assert_eq!(
            note,
            "Changed nothing. The workspace's files: `f1.py`, `f2.py`."
        );
        let note = with_files("Changed nothing.".into(), &files);
        assert!(note.ends_with("`f8.py`, and 2 more."), "{note}");
        assert_eq!(
            with_files("Changed nothing.".into(), &[]),
            "Changed nothing."
        );
    }

    #[test]
    fn a_change_a_question_or_a_failed_write_decide_it() {
        let changed = turn("Fix the bug in cart.py", &[("write_file", false)]);
        assert_eq!(note(&changed, &Tools, "write_file"), None);
        let failed = turn("Fix the bug in cart.py", &[("write_file", true)]);
        assert!(
            note(&failed, &Tools, "write_file").is_some(),
            "a failed write changed nothing"
        );
        let question = turn("Why does cart.py fail?", &[]);
        assert_eq!(note(&question, &Tools, "write_file"), None);
    }
}
