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
//! would leave its file as it is, and a block that is no file's, are not
//! applied: the answer then stands as an answer. A block left unclosed runs
//! to the end of the answer.
//!
//! [`ToolRole::Writes`]: super::tool::ToolRole::Writes

use std::collections::HashSet;
use std::ops::Range;

use serde_json::Value;

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
            (None, Some(current)) => keep_around(current, &block.text),
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
        if name.len() > prefix.len() && name[..prefix.len()].eq_ignore_ascii_case(prefix) {
            name = name[prefix.len()..]
                .trim()
                .trim_matches(|c: char| "*`_ ".contains(c));
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

fn distinct_lines(text: &str) -> HashSet<&str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect()
}

/// Whether a line of `block` stands for lines left out (`...`,
/// `# ... rest unchanged`): it is then not a whole file.
fn is_elided(block: &str) -> bool {
    block.lines().map(str::trim).any(|line| {
        let bare = line
            .trim_start_matches(['#', '/', '*', '-', ' '])
            .trim_end_matches(['*', '/', ' ']);
        bare == "..."
            || bare == "…"
            || ((line.starts_with('#') || line.starts_with("//"))
                && (bare.starts_with("...") || bare.starts_with('…')))
    })
}

/// Whether `block` has a non-blank line `file` lacks: one that has none
/// only quotes the file.
fn adds_lines(block: &str, file: &str) -> bool {
    !distinct_lines(block).is_subset(&distinct_lines(file))
}

/// The file the block is a new version of (path, text): the one with the
/// largest share of its distinct non-blank lines in the block, if that is
/// at least half and no other file's share equals it.
fn rewritten_file<'f>(block: &str, files: &'f [(String, String)]) -> Option<(&'f str, &'f str)> {
    let held = distinct_lines(block);
    let mut best: Option<((&str, &str), f64)> = None;
    let mut tied = false;
    for (path, text) in files {
        let lines = distinct_lines(text);
        if lines.is_empty() {
            continue;
        }
        let share = lines.intersection(&held).count() as f64 / lines.len() as f64;
        match best {
            Some((_, top)) if share < top => {}
            Some((_, top)) if share == top => tied = true,
            _ => {
                best = Some(((path, text), share));
                tied = false;
            }
        }
    }
    best.filter(|(_, share)| *share >= 0.5 && !tied)
        .map(|(file, _)| file)
}

/// The top-level definitions of Python `text` (`def`, `async def`,
/// `class`): each one's name and the lines it spans, its decorators
/// included and the blank lines after it not.
fn definitions(text: &str) -> Vec<(&str, Range<usize>)> {
    let lines: Vec<&str> = text.lines().collect();
    let top_level = |line: &str| !line.trim().is_empty() && !line.starts_with(char::is_whitespace);
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let rest = line.strip_prefix("async ").unwrap_or(line);
        let Some(rest) = rest
            .strip_prefix("def ")
            .or_else(|| rest.strip_prefix("class "))
        else {
            continue;
        };
        let name_end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if name_end == 0 {
            continue;
        }
        let mut start = at;
        while start > 0 && lines[start - 1].starts_with('@') {
            start -= 1;
        }
        // A signature over several lines closes at the margin: `) -> int:`.
        let next = (at + 1..lines.len())
            .find(|&later| top_level(lines[later]) && !lines[later].starts_with([')', ']', '}']))
            .unwrap_or(lines.len());
        let end = (at + 1..next)
            .rev()
            .find(|&later| !lines[later].trim().is_empty())
            .map_or(at + 1, |last| last + 1);
        found.push((&rest[..name_end], start..end));
    }
    found
}

/// The Python file a block redefines a function or class of, when no file
/// holds most of its lines (a function written without the docstring of
/// its stub), and the file's new content: the block in place of the
/// definitions it redefines, the file's other lines kept (a head of
/// only the imports the block repeats left out). Only one file may define what the block
/// does.
fn redefined_file<'f>(block: &str, files: &'f [(String, String)]) -> Option<(&'f str, String)> {
    let defined: HashSet<&str> = definitions(block)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    if defined.is_empty() {
        return None;
    }
    let mut found = files.iter().filter_map(|(path, text)| {
        let spans: Vec<Range<usize>> = definitions(text)
            .into_iter()
            .filter(|(name, _)| defined.contains(name))
            .map(|(_, span)| span)
            .collect();
        let start = spans.iter().map(|span| span.start).min()?;
        let end = spans.iter().map(|span| span.end).max()?;
        path.ends_with(".py").then_some((path, text, start..end))
    });
    let (path, text, span) = found.next()?;
    if found.next().is_some() {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    let held = distinct_lines(block);
    let head = &lines[..span.start];
    let mut content = String::with_capacity(text.len() + block.len());
    // A head of nothing but what the block repeats (the stub's imports)
    // gives way to the block's; any other is kept whole.
    if head
        .iter()
        .any(|line| !line.trim().is_empty() && !held.contains(line.trim()))
    {
        for line in head {
            content.push_str(line);
            content.push('\n');
        }
    }
    content.push_str(block);
    for line in &lines[span.end..] {
        content.push_str(line);
        content.push('\n');
    }
    Some((path, content))
}

/// `block` as the file's new content: the file's lines above the block's
/// first line (when the block starts further down the file and holds none
/// of them), the block, and likewise the file's lines below its last line.
fn keep_around(current: &str, block: &str) -> String {
    let file: Vec<&str> = current.lines().collect();
    let held = distinct_lines(block);
    let shown: Vec<&str> = block
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    let (Some(first), Some(last)) = (shown.first(), shown.last()) else {
        return block.to_owned();
    };
    let unique_at = |wanted: &str| {
        let mut found = file
            .iter()
            .enumerate()
            .filter(|(_, line)| line.trim() == wanted.trim());
        match (found.next(), found.next()) {
            (Some((at, _)), None) => Some(at),
            _ => None,
        }
    };
    let none_held = |lines: &[&str]| lines.iter().all(|line| !held.contains(line.trim()));
    let head = unique_at(first)
        .filter(|&at| at > 0 && none_held(&file[..at]))
        .map_or(&[][..], |at| &file[..at]);
    let tail = unique_at(last)
        .filter(|&at| at + 1 < file.len() && none_held(&file[at + 1..]))
        .map_or(&[][..], |at| &file[at + 1..]);
    let mut content = String::with_capacity(current.len() + block.len());
    for line in head {
        content.push_str(line);
        content.push('\n');
    }
    content.push_str(block);
    for line in tail {
        content.push_str(line);
        content.push('\n');
    }
    content
}

#[cfg(test)]
mod tests {
    use super::*;

    const STUB: &str = "from typing import List\n\n\ndef first(xs: List[int]) -> int:\n    \"\"\"The first.\"\"\"\n";

    fn files() -> Vec<(String, String)> {
        vec![
            ("solution.py".to_owned(), STUB.to_owned()),
            (
                "test_examples.py".to_owned(),
                "from solution import first\nassert first([1]) == 1\n".to_owned(),
            ),
        ]
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
    fn an_unnamed_block_rewrites_the_file_it_mostly_holds() {
        let fixed = format!("{STUB}    return xs[0]\n");
        let blocks = parse(&format!("Fixed:\n```python\n{fixed}```\n"));
        let writes = writes(&blocks, &files(), &[]);
        assert_eq!(
            writes,
            [Write {
                path: "solution.py".into(),
                content: fixed
            }]
        );
    }

    #[test]
    fn a_block_without_the_imports_keeps_them() {
        let blocks = parse(
            "```python\ndef first(xs: List[int]) -> int:\n    \"\"\"The first.\"\"\"\n    return xs[0]\n```",
        );
        let writes = writes(&blocks, &files(), &[]);
        assert_eq!(writes.len(), 1);
        assert_eq!(
            writes[0].content,
            "from typing import List\n\n\ndef first(xs: List[int]) -> int:\n    \"\"\"The first.\"\"\"\n    return xs[0]\n"
        );
    }

    #[test]
    fn a_block_of_the_top_of_a_file_keeps_the_lines_below_it() {
        let file = "import os\n\nTIMEOUT = 5\n\n\ndef main():\n    run(TIMEOUT)\n";
        let files = vec![("app.py".to_owned(), file.to_owned())];
        let blocks = parse("```python\nimport os\n\nTIMEOUT = 30\n\n\ndef main():\n```");
        let writes = writes(&blocks, &files, &[]);
        assert_eq!(writes.len(), 1, "{writes:?}");
        assert_eq!(
            writes[0].content,
            "import os\n\nTIMEOUT = 30\n\n\ndef main():\n    run(TIMEOUT)\n"
        );
    }

    #[test]
    fn unchanged_unmatched_and_skipped_blocks_are_not_written() {
        let same = parse(&format!("```python\n{STUB}```"));
        assert!(writes(&same, &files(), &[]).is_empty());
        let other = parse("```\nTraceback (most recent call last):\nNameError\n```");
        assert!(writes(&other, &files(), &[]).is_empty());
        // A quote of the file, whole or with lines left out, is no rewrite.
        let quote =
            parse("```python\nfrom typing import List\n\n\ndef first(xs: List[int]) -> int:\n```");
        assert!(writes(&quote, &files(), &[]).is_empty());
        let elided = parse(&format!(
            "```python\n{STUB}    # ...\n    return xs[0]\n```"
        ));
        assert!(writes(&elided, &files(), &[]).is_empty());
        let named = parse("solution.py\n```\nx = 2\n```");
        assert!(writes(&named, &files(), &["solution.py"]).is_empty());
        // Two files held equally: which one is meant is not known.
        let twins = vec![
            ("a.py".to_owned(), "x = 1\n".to_owned()),
            ("b.py".to_owned(), "x = 1\n".to_owned()),
        ];
        assert!(writes(&parse("```\nx = 1\ny = 2\n```"), &twins, &[]).is_empty());
    }

    #[test]
    fn a_function_written_without_its_stubs_docstring_replaces_its_definition() {
        let stub = "from typing import List\n\n\ndef first(xs: List[int]) -> int:\n    \"\"\"The first of xs.\n\n    >>> first([1, 2])\n    1\n    \"\"\"\n\n\n@cache\ndef second(\n    xs,\n):\n    pass\n\n\nTAIL = 1\n";
        let files = vec![
            ("solution.py".to_owned(), stub.to_owned()),
            ("notes.md".to_owned(), "def first(x):\n".to_owned()),
        ];
        let blocks =
            parse("```python\nfrom typing import List\n\ndef second(xs):\n    return xs[1]\n```");
        let written = writes(&blocks, &files, &[]);
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(written[0].path, "solution.py");
        assert_eq!(
            written[0].content,
            "from typing import List\n\n\ndef first(xs: List[int]) -> int:\n    \"\"\"The first of xs.\n\n    >>> first([1, 2])\n    1\n    \"\"\"\n\n\nfrom typing import List\n\ndef second(xs):\n    return xs[1]\n\n\nTAIL = 1\n"
        );
        // The stub's head is only the import the block repeats.
        let blocks =
            parse("```python\nfrom typing import List\n\ndef first(xs):\n    return xs[0]\n```");
        assert_eq!(
            writes(&blocks, &files, &[])[0].content,
            "from typing import List\n\ndef first(xs):\n    return xs[0]\n\n\n@cache\ndef second(\n    xs,\n):\n    pass\n\n\nTAIL = 1\n"
        );
        // Defined in two Python files: which one is meant is not known.
        let twins = vec![
            (
                "a.py".to_owned(),
                "def f():\n    \"\"\"Doc.\"\"\"\n".to_owned(),
            ),
            (
                "b.py".to_owned(),
                "def f():\n    \"\"\"Other.\"\"\"\n".to_owned(),
            ),
        ];
        assert!(writes(&parse("```\ndef f():\n    return 1\n```"), &twins, &[]).is_empty());
    }

    #[test]
    fn a_named_block_may_create_a_file_and_the_last_block_of_a_path_wins() {
        let blocks = parse("new.py\n```\na\n```\nnew.py\n```\nb\n```\n");
        assert_eq!(
            writes(&blocks, &files(), &[]),
            [Write {
                path: "new.py".into(),
                content: "b\n".into()
            }]
        );
    }
}
