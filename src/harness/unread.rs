//! Answers from memory: a model asked about a file of its workspace that
//! answers without reading it, or anything else, answers from what it
//! imagines the file says (a 1.5B model "quoted" a `docs/team.md` it never
//! opened, with names it made up). Under `[runs] check_answers`, such an
//! answer is questioned once in a prompt's turn, as unchecked work is (see
//! [`crate::harness::review`]): it stays in the transcript, followed by a
//! note of the harness naming the files, and the loop goes on.

use std::sync::Arc;

use super::message::Message;
use super::review::{NOTE_PREFIX, is_note, turn_start};

/// How the note starts after [`NOTE_PREFIX`], to tell it apart.
const UNREAD: &str = "You answered without reading";

/// Files named in the note at most.
const MAX_NAMED: usize = 3;

/// The note questioning an answer given after `messages` without a single
/// tool call in the newest prompt's turn, when that prompt names files of
/// the workspace (`files`, their paths). `reader` is the tool that reads a
/// file. `None` when the answer stands: a tool was used, no workspace file
/// is named, or the turn was noted so already.
pub fn note(messages: &[Arc<Message>], files: &[String], reader: &str) -> Option<String> {
    if !may_note(messages) {
        return None;
    }
    let Some(Message::User { content: prompt }) = messages.get(turn_start(messages)).map(|m| &**m)
    else {
        return None;
    };
    let mut named = named_files(prompt, files);
    if named.is_empty() {
        return None;
    }
    named.truncate(MAX_NAMED);
    let listed = named
        .iter()
        .map(|path| format!("`{path}`"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "{NOTE_PREFIX}{UNREAD} {listed}, which the task names, so your answer is not from the \
         workspace. Read it with {reader} now, then answer from what it says."
    ))
}

/// Whether an answer after `messages` may be questioned so (before the
/// workspace's files are looked at): the newest prompt's turn has no tool
/// result and no such note.
pub fn may_note(messages: &[Arc<Message>]) -> bool {
    let turn = turn_start(messages);
    !messages[turn..].iter().any(|message| {
        matches!(&**message, Message::Tool { .. })
            || matches!(&**message, Message::User { content } if is_note(message)
                && content[NOTE_PREFIX.len()..].starts_with(UNREAD))
    })
}

/// Whether `messages` end with such a note: the model's next call must
/// use a tool (a small model told in words repeats its answer word for
/// word).
pub fn was_noted(messages: &[Arc<Message>]) -> bool {
    matches!(messages.last().map(|m| &**m), Some(Message::User { content })
        if content.starts_with(NOTE_PREFIX) && content[NOTE_PREFIX.len()..].starts_with(UNREAD))
}

/// The files of `files` (workspace paths) that `prompt` names.
pub fn named_files<'f>(prompt: &str, files: &'f [String]) -> Vec<&'f str> {
    files
        .iter()
        .map(String::as_str)
        .filter(|path| names(prompt, path))
        .collect()
}

/// Whether `text` names `path`: holds it, not as part of a longer name
/// (`a.py` is not named by `data.py` nor by `a.pyc`; a sentence's full stop
/// after it does not count).
fn names(text: &str, path: &str) -> bool {
    let in_name = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '/');
    text.match_indices(path).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let mut after = text[at + path.len()..].chars();
        let next = after.next();
        let clear_before = before.is_none_or(|c| !in_name(c) && c != '.');
        let clear_after = match next {
            None => true,
            Some('.') => after.next().is_none_or(|c| !in_name(c)),
            Some(c) => !in_name(c),
        };
        clear_before && clear_after
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::harness::message::ToolCall;

    fn files() -> Vec<String> {
        vec!["docs/team.md".into(), "a.py".into(), "notes.txt".into()]
    }

    fn turn(prompt: &str) -> Vec<Arc<Message>> {
        vec![Arc::new(Message::user(prompt))]
    }

    #[test]
    fn an_answer_without_reading_a_named_file_is_questioned_once() {
        let messages = turn("Who owns billing, according to docs/team.md?");
        let note = note(&messages, &files(), "read_file").unwrap();
        assert_eq!(
            note,
            "[agent-runner] You answered without reading `docs/team.md`, which the task names, \
             so your answer is not from the workspace. Read it with read_file now, then answer \
             from what it says."
        );
        let mut noted = messages.clone();
        noted.push(Arc::new(Message::assistant("Tom.", Vec::new())));
        noted.push(Arc::new(Message::user(note)));
        assert_eq!(super::note(&noted, &files(), "read_file"), None);
    }

    #[test]
    fn a_tool_used_or_no_file_named_lets_the_answer_stand() {
        let mut messages = turn("What does a.py print?");
        messages.push(Arc::new(Message::assistant(
            "",
            vec![ToolCall::new("c1", "search", json!({"pattern": "print"}))],
        )));
        messages.push(Arc::new(Message::tool("c1", "{}", false)));
        assert_eq!(note(&messages, &files(), "read_file"), None);
        assert_eq!(note(&turn("What is 2 + 2?"), &files(), "read_file"), None);
        // A longer name that holds a file's is not that file.
        for prompt in [
            "Read data.py",
            "Fix a.pyc",
            "see old-notes.txt",
            "x/a.py.bak",
        ] {
            assert_eq!(note(&turn(prompt), &files(), "read_file"), None, "{prompt}");
        }
        for prompt in ["Fix a.py.", "In `a.py`, what is x?", "(notes.txt)"] {
            assert!(
                note(&turn(prompt), &files(), "read_file").is_some(),
                "{prompt}"
            );
        }
    }

    #[test]
    fn a_new_prompt_is_a_new_turn() {
        let mut messages = turn("What does a.py print?");
        messages.push(Arc::new(Message::assistant(
            "",
            vec![ToolCall::new("c1", "read_file", json!({"path": "a.py"}))],
        )));
        messages.push(Arc::new(Message::tool("c1", "print(1)", false)));
        messages.push(Arc::new(Message::assistant("1", Vec::new())));
        messages.push(Arc::new(Message::user("And notes.txt?")));
        let note = note(&messages, &files(), "read_file").unwrap();
        assert!(note.contains("`notes.txt`"), "{note}");
    }
}
