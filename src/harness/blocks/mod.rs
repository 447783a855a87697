//! Code a model writes in its answer, taken as the file it rewrites.
//!
//! Small models write code better in a fenced block of their answer than
//! inside a tool call's JSON string (Aider measured it for every model it
//! tried: "LLMs are bad at returning code in JSON"), and a small model often
//! answers "here is the updated file" with a block instead of calling
//! `write_file`. With `[runs] write_code_blocks`, the harness reads such a
//! block as a call of the run's whole-file writer ([`ToolRole::Writes`]), which
//! then goes through everything a call of the model's goes through: its
//! schema, the workspace's confinement, approvals, the budget, the
//! transcript and the events.
//!
//! Which file a block is:
//! - the path on the line just before its fence (`solution.py`,
//!   `` `src/app.py`: ``, `**File: a.py**`), or after its language
//!   (```` ```python solution.py ````);
//! - otherwise the one workspace file most of whose lines the block holds
//!   (at least half of its distinct non-blank lines, and strictly more than
//!   any other file): the block is a new version of it (Aider's
//!   single-file rule, without needing the file to be "in the chat");
//! - otherwise the one Python file defining a top-level function or class
//!   the block defines: the block takes the place of those definitions (a
//!   function written without its stub's docstring).
//!
//! A block that starts with a line of the file further down, and holds none
//! of the lines above it, keeps those lines (a function shown without the
//! file's imports); likewise for the lines below its last one. A block that
//! would leave out a top-level definition of its file (a function, a class,
//! a type) that it does not show is an excerpt, not a new version: the
//! definitions it shows take the place of the file's, and the rest of the
//! file is kept (see [`excerpt`]); an excerpt with no place in its file is
//! not applied, so that no block ever wipes what it does not show. A block
//! that would leave its file as it is, and a block that is no file's, are
//! not applied: the answer then stands as an answer. A block left unclosed
//! runs to the end of the answer.
//!
//! - this module: the blocks of an answer, their names, and the writes
//!   they stand for;
//! - [`files`]: which file a block without a name is, and its new content;
//! - [`excerpt`]: a file's top-level definitions, and an excerpt merged
//!   into its file.
//!
//! [`ToolRole::Writes`]: super::tool::ToolRole::Writes

mod excerpt;
mod files;

use serde_json::Value;

use excerpt::{drops_definitions, merge_excerpt};
use files::{adds_lines, is_elided, keep_around, redefined_file, rewritten_file};

/// The files among `files` (path, text) that define at their top level a
/// name `text` mentions (`parse_duration("1h30m") returns 1800` names
/// `parse_duration`): where an issue that names no file is likely fixed.
pub fn defining_files<'f>(text: &str, files: &'f [(String, String)]) -> Vec<&'f str> {
    let words: std::collections::HashSet<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| word.len() >= 3)
        .collect();
    files
        .iter()
        .filter(|(_, content)| {
            excerpt::definitions(content)
                .iter()
                .any(|(name, _)| words.contains(name))
        })
        .map(|(path, _)| path.as_str())
        .collect()
}

/// Blocks applied from one response at most.
const MAX_BLOCKS: usize = 8;

/// Longest path taken from a block's name line.
const MAX_NAME_CHARS: usize = 255;

/// A fenced block of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The path the answer gives it, if any.
    pub name: Option<String>,
    /// Its lines, without the fences, each ending in `\n`.
    pub text: String,
}

/// A file a block rewrites: the arguments of a whole-file write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub path: String,
    pub content: String,
}

/// A block that holds nothing but a tool call written as JSON text
/// (`{"name": "read_file", "arguments": {"path": "a.md"}}`, as a small
/// model writes one when its server does not parse it as a call): the
/// tool's name, which `known` accepts, and its arguments (an object).
pub fn text_call(block: &Block, known: impl Fn(&str) -> bool) -> Option<(String, Value)> {
    let Value::Object(mut call) = serde_json::from_str::<Value>(block.text.trim()).ok()? else {
        return None;
    };
    if call.len() != 2 {
        return None;
    }
    let name = call.remove("name")?.as_str()?.to_owned();
    let arguments = call.remove("arguments")?;
    (arguments.is_object() && known(&name)).then_some((name, arguments))
}

/// The fenced blocks of `answer`, in order (a block left unclosed runs to
/// the end of the answer).
pub fn parse(answer: &str) -> Vec<Block> {
    let lines: Vec<&str> = answer.lines().collect();
    let mut blocks = Vec::new();
    let mut index = 0;
    while index < lines.len() {
        let Some((fence, info)) = opening(lines[index]) else {
            index += 1;
            continue;
        };
        // Unclosed, it runs to the end of the answer: a small model often
        // stops without the closing fence (an answer cut off at the token
        // limit never gets here: it is a model error).
        let close = (index + 1..lines.len())
            .find(|&at| closes(lines[at], fence))
            .unwrap_or_else(|| {
                let last = (index + 1..lines.len())
                    .rev()
                    .find(|&at| !lines[at].trim().is_empty());
                last.map_or(lines.len(), |at| at + 1)
            });
        let name = name_in_info(info).or_else(|| {
            index
                .checked_sub(1)
                .and_then(|before| name_in_line(lines[before]))
        });
        let text: String = lines[index + 1..close]
            .iter()
            .map(|line| format!("{line}\n"))
            .collect();
        blocks.push(Block { name, text });
        index = close + 1;
    }
    blocks
}

/// The writes `blocks` stand for, given the workspace's text files (path,
/// text): at most one per path (the last block wins), none that would leave
/// a file unchanged, none for a path in `skip` (files the response's own
/// calls already write).
pub fn writes(blocks: &[Block], files: &[(String, String)], skip: &[&str]) -> Vec<Write> {
    let mut writes: Vec<Write> = Vec::new();
    for block in blocks {
        if block.text.trim().is_empty() || is_elided(&block.text) {
            continue;
        }
        let (path, content) = match &block.name {
            Some(name) => (name.clone(), None),
            None => match rewritten_file(&block.text, files) {
                Some((path, text)) if adds_lines(&block.text, text) => (path.to_owned(), None),
                Some(_) => continue,
                None => match redefined_file(&block.text, files) {
                    Some((path, content)) => (path.to_owned(), Some(content)),
                    None => continue,
                },
            },
        };
        if skip.contains(&path.as_str()) {
            continue;
        }
        let current = files
            .iter()
            .find(|(file, _)| *file == path)
            .map(|(_, text)| text.as_str());
        let content = match (content, current) {
            (Some(content), _) => content,
            (None, Some(current)) => {
                let whole = keep_around(current, &block.text);
                if !drops_definitions(current, &whole) {
                    whole
                } else if let Some(merged) = merge_excerpt(current, &block.text, &path) {
                    merged
                } else {
                    // An excerpt with no place in its file: never a reason
                    // to lose the rest of it.
                    continue;
                }
            }
            (None, None) => block.text.clone(),
        };
        if current == Some(content.as_str()) {
            continue;
        }
        writes.retain(|write| write.path != path);
        writes.push(Write { path, content });
    }
    writes.truncate(MAX_BLOCKS);
    writes
}

/// A fence opening: its character and length, and the info string after it.
fn opening(line: &str) -> Option<((char, usize), &str)> {
    let trimmed = line.trim_start();
    let fence = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let count = trimmed.chars().take_while(|c| *c == fence).count();
    if count < 3 {
        return None;
    }
    let info = trimmed[count..].trim();
    // A backtick fence's info string has no backtick (CommonMark).
    if fence == '`' && info.contains('`') {
        return None;
    }
    Some(((fence, count), info))
}

fn closes(line: &str, (fence, count): (char, usize)) -> bool {
    let trimmed = line.trim();
    trimmed.len() >= count && trimmed.chars().all(|c| c == fence)
}

/// A path in a fence's info string: ```` ```python solution.py ```` or
/// ```` ```solution.py ````.
fn name_in_info(info: &str) -> Option<String> {
    info.split_whitespace()
        .map(|word| word.trim_start_matches("file=").trim_matches('"'))
        .find(|word| looks_like_path(word))
        .map(normalize)
}

/// A path alone on the line before a fence, perhaps marked up:
/// `solution.py`, `` `a/b.py`: ``, `**File: a.py**`, `### a.py`.
fn name_in_line(line: &str) -> Option<String> {
    let mut name = line.trim().trim_matches(|c: char| "*#`:_ ".contains(c));
    for prefix in ["file:", "filename:", "path:"] {
        // By `get`: the line is the model's text, and a byte index may fall
        // inside a character (`Here’s the fix:`).
        if let Some(rest) = name
            .get(..prefix.len())
            .filter(|head| name.len() > prefix.len() && head.eq_ignore_ascii_case(prefix))
            .and_then(|_| name.get(prefix.len()..))
        {
            name = rest.trim().trim_matches(|c: char| "*`_ ".contains(c));
        }
    }
    looks_like_path(name).then(|| normalize(name))
}

/// A relative path with an extension, in the characters of paths models
/// write: not prose that happens to precede a block.
fn looks_like_path(word: &str) -> bool {
    let Some((stem, extension)) = word.rsplit_once('.') else {
        return false;
    };
    word.len() <= MAX_NAME_CHARS
        && !stem.is_empty()
        && !stem.ends_with('/')
        && !extension.is_empty()
        && extension.chars().all(|c| c.is_ascii_alphanumeric())
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c))
}

fn normalize(path: &str) -> String {
    path.trim_start_matches("./").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_defining_what_a_text_names_are_found() {
        let files = vec![
            (
                "d/parser.py".to_owned(),
                "import re\n\ndef parse_duration(text):\n    return 0\n".to_owned(),
            ),
            (
                "d/format.py".to_owned(),
                "def format_duration(s):\n    return ''\n".to_owned(),
            ),
            (
                "t/test_d.py".to_owned(),
                "class T:\n    def test_parse_duration(self):\n        pass\n".to_owned(),
            ),
        ];
        let text = "parse_duration(\"1h30m\") returns 1800 instead of 5400. Fix it.";
        assert_eq!(defining_files(text, &files), ["d/parser.py"]);
        assert!(defining_files("Fix the total.", &files).is_empty());
    }

    #[test]
    fn a_block_of_a_call_written_as_text_is_that_call() {
        let known = |name: &str| name == "read_file";
        let block = |text: &str| Block {
            name: None,
            text: text.to_owned(),
        };
        let call = text_call(
            &block("{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.md\"}}\n"),
            known,
        );
        assert_eq!(
            call,
            Some(("read_file".to_owned(), serde_json::json!({"path": "a.md"})))
        );
        for text in [
            "{\"name\": \"rm\", \"arguments\": {}}",
            "{\"name\": \"read_file\", \"arguments\": \"a.md\"}",
            "{\"name\": \"read_file\", \"arguments\": {}, \"id\": 1}",
            "print('read_file')",
        ] {
            assert_eq!(text_call(&block(text), known), None, "{text}");
        }
    }

    #[test]
    fn blocks_are_read_with_their_names() {
        let answer = "Here it is:\n\nsolution.py\n```python\nx = 1\n```\n\n\
                      ```python notes/a.md\ny\n```\n**File: `b.txt`**\n~~~\nz\n~~~\n\
                      Done.\n```\nno name\n```\n";
        let blocks = parse(answer);
        let names: Vec<Option<&str>> = blocks.iter().map(|b| b.name.as_deref()).collect();
        assert_eq!(
            names,
            [Some("solution.py"), Some("notes/a.md"), Some("b.txt"), None]
        );
        assert_eq!(blocks[0].text, "x = 1\n");
    }

    #[test]
    fn prose_is_not_a_name_and_an_unclosed_block_runs_to_the_end() {
        let blocks = parse("Run it like this:\n```\npython3 x.py\n```\nthen\n```python\nx = 1\n\n");
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].name, None);
        assert_eq!(blocks[1].text, "x = 1\n");
        assert!(!looks_like_path("e.g."));
        assert!(!looks_like_path("Here is the file"));
        assert!(!looks_like_path("dir/.py"));
        assert!(looks_like_path("src/main.rs"));
    }

    #[test]
    fn a_name_line_of_any_text_is_read_without_panicking() {
        // A curly apostrophe puts a character across the fifth byte, where
        // the line is compared with `file:`.
        let blocks = parse("Here\u{2019}s the fix:\n```python\nx = 1\n```\n");
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].name, None);
        for line in [
            "Fil\u{e9}: a.py",
            "\u{1f600}\u{1f600}",
            "path\u{2019}",
            "file:\u{2019}",
        ] {
            let _ = name_in_line(line);
        }
        assert_eq!(name_in_line("File: `a.py`").as_deref(), Some("a.py"));
    }
}
