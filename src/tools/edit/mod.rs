//! `edit_file`: replace exact text in a file, and show the model what the
//! file now says around the change.
//!
//! `edit_file {path, old_text, new_text, replace_all?}` →
//! `{"path": PATH, "replacements": N, "snippet": TEXT}`. `old_text` must
//! occur exactly once unless `replace_all` is set: an edit of the wrong
//! occurrence is worse than none. When it does not, the error says what
//! the model can do next: for text not found, the lines of the file most
//! like it, with their numbers; for text found several times, the lines it
//! is on.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::definitions::shared;
use super::error::WorkspaceError;
use super::files::{Access, blocking, string_argument};
use super::run_workspace::RunWorkspace;
use super::suggest::{Want, explain};
use super::text::{LineIndex, digits, numbered};
use crate::harness::{Tool, ToolDefinition, ToolError, ToolRole};

pub const EDIT_FILE: &str = "edit_file";

/// Lines shown before and after each change in a snippet.
const CONTEXT_LINES: usize = 3;

/// Lines a snippet shows at most; the rest of a large edit is counted.
const MAX_SNIPPET_LINES: usize = 60;

/// Lines of the closest match shown at most when `old_text` is not found.
const MAX_CLOSEST_LINES: usize = 20;

/// Line numbers listed at most when `old_text` occurs several times.
const MAX_LISTED_LINES: usize = 20;

/// How similar (0 to 1) lines must be to `old_text` to be shown as the
/// closest: below it they would only mislead.
const MIN_SIMILARITY: f64 = 0.3;

/// Candidates of the first, cheap comparison compared again closely.
const RERANKED: usize = 5;

/// Texts longer than this (in bytes) are not compared closely: the edit
/// distance's cost grows with the product of the lengths.
const MAX_CLOSE_COMPARISON_BYTES: usize = 4000;

/// A successful edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The file's new text.
    pub text: String,
    pub replacements: usize,
    /// The changed lines with [`CONTEXT_LINES`] around each change, numbered.
    pub snippet: String,
}

/// Why an edit was refused. Nothing is written then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    EmptyOldText,
    Unchanged,
    NotFound { closest: Option<Closest> },
    Ambiguous { count: usize, lines: Vec<usize> },
}

/// The lines of a file most like a text that was not found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closest {
    pub start_line: usize,
    pub end_line: usize,
    /// The lines, numbered, at most [`MAX_CLOSEST_LINES`].
    pub numbered: Vec<String>,
    /// The lines are the text but for whitespace (indentation, usually).
    pub whitespace_only: bool,
}

impl EditError {
    /// The error as the model reads it.
    pub fn message(&self, path: &str) -> String {
        match self {
            Self::EmptyOldText => "old_text is empty: give the exact text to replace, copied from \
                                   the file with a line or two around it (to write a whole file, \
                                   use write_file)"
                .to_owned(),
            Self::Unchanged => {
                "old_text and new_text are the same: the edit would change nothing. old_text is \
                 the text as it is now; new_text is what it is to become."
                    .to_owned()
            }
            Self::NotFound { closest: None } => format!(
                "old_text was not found in {path}, and no lines of it are close to it. Read the \
                 file with read_file to see its current text."
            ),
            Self::NotFound {
                closest: Some(closest),
            } => {
                let range = if closest.start_line == closest.end_line {
                    format!("line {}", closest.start_line)
                } else {
                    format!("lines {}-{}", closest.start_line, closest.end_line)
                };
                let whitespace = if closest.whitespace_only {
                    "They differ from old_text only in whitespace or indentation. "
                } else {
                    ""
                };
                format!(
                    "old_text was not found in {path}. The closest text is at {range}:\n{}\n\
                     {whitespace}Copy old_text exactly from the file, whitespace included (the \
                     line numbers and `|` are not part of it), or read the file again with \
                     read_file.",
                    closest.numbered.join("\n")
                )
            }
            Self::Ambiguous { count, lines } => {
                let mut listed: Vec<String> = lines
                    .iter()
                    .take(MAX_LISTED_LINES)
                    .map(ToString::to_string)
                    .collect();
                if lines.len() > MAX_LISTED_LINES {
                    listed.push("…".to_owned());
                }
                format!(
                    "old_text occurs {count} times in {path}, at lines {}. Add surrounding lines \
                     to old_text so that it occurs only once, or set replace_all to true to \
                     replace every occurrence.",
                    listed.join(", ")
                )
            }
        }
    }
}

/// Replaces `old` with `new` in `content`: its one occurrence, or with
/// `replace_all` every one. When `old` is not found as given but the file's
/// lines end in CRLF and `old`'s in LF, the CRLF form of both is used (a
/// model writes `\n`).
pub fn apply(content: &str, old: &str, new: &str, replace_all: bool) -> Result<Edited, EditError> {
    if old.is_empty() {
        return Err(EditError::EmptyOldText);
    }
    // Not found comes first: an unchanged edit of text the file lacks is
    // better answered with the file's closest lines.
    let unchanged = old == new;
    let (old, new): (Cow<'_, str>, Cow<'_, str>) = if !content.contains(old)
        && content.contains("\r\n")
        && old.contains('\n')
        && !old.contains("\r\n")
    {
        (
            old.replace('\n', "\r\n").into(),
            new.replace("\r\n", "\n").replace('\n', "\r\n").into(),
        )
    } else {
        (old.into(), new.into())
    };
    let found: Vec<usize> = content.match_indices(&*old).map(|(at, _)| at).collect();
    if found.is_empty() {
        return Err(EditError::NotFound {
            closest: closest_lines(content, &old),
        });
    }
    if unchanged {
        return Err(EditError::Unchanged);
    }
    if found.len() > 1 && !replace_all {
        let index = LineIndex::new(content);
        let mut lines: Vec<usize> = found.iter().map(|&at| index.line_of(at)).collect();
        lines.dedup();
        return Err(EditError::Ambiguous {
            count: found.len(),
            lines,
        });
    }
    let mut text = String::with_capacity(content.len() + found.len() * new.len());
    let mut changed = Vec::with_capacity(found.len());
    let mut copied = 0;
    for &at in &found {
        text.push_str(&content[copied..at]);
        let start = text.len();
        text.push_str(&new);
        changed.push((start, text.len()));
        copied = at + old.len();
    }
    text.push_str(&content[copied..]);
    let snippet = snippet(&text, &changed);
    Ok(Edited {
        text,
        replacements: found.len(),
        snippet,
    })
}

/// The lines of `text` holding the byte ranges `changed` (in order), with
/// [`CONTEXT_LINES`] around each, numbered; ranges that meet are shown as
/// one, and gaps as `...`. At most [`MAX_SNIPPET_LINES`] lines.
pub fn snippet(text: &str, changed: &[(usize, usize)]) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.is_empty() {
        return "(the file is now empty)".to_owned();
    }
    let index = LineIndex::new(text);
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &(start, end) in changed {
        let first = index.line_of(start);
        let last = if end > start {
            index.line_of(end - 1)
        } else {
            first
        };
        let from = first.saturating_sub(CONTEXT_LINES).max(1);
        let to = (last + CONTEXT_LINES).min(lines.len());
        match ranges.last_mut() {
            Some(previous) if from <= previous.1 + 1 => previous.1 = previous.1.max(to),
            _ => ranges.push((from, to)),
        }
    }
    let width = digits(ranges.last().map_or(1, |range| range.1));
    let mut shown = 0;
    let mut out: Vec<String> = Vec::new();
    for (i, &(from, to)) in ranges.iter().enumerate() {
        if shown == MAX_SNIPPET_LINES {
            out.push(format!(
                "... ({} more changed places not shown)",
                ranges.len() - i
            ));
            break;
        }
        if i > 0 {
            out.push("...".to_owned());
        }
        let until = to.min(from + (MAX_SNIPPET_LINES - shown) - 1);
        out.extend(numbered(&lines, from, until, width));
        shown += until - from + 1;
        if until < to {
            out.push(format!("... (lines {}-{to} not shown)", until + 1));
        }
    }
    out.join("\n")
}

/// The window of lines of `content` most like `old` (as many lines as it
/// has), or `None` when nothing is close. Every window is scored by the
/// character pairs it shares with `old` (Sørensen–Dice, over lines with
/// their indentation trimmed, kept up to date as the window slides, so the
/// whole file costs one pass), and the best few again by their edit
/// distance (`strsim`) when they are short enough for it.
pub fn closest_lines(content: &str, old: &str) -> Option<Closest> {
    let lines: Vec<&str> = content.split_inclusive('\n').collect();
    if lines.is_empty() {
        return None;
    }
    let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
    let size = old_lines.len().clamp(1, lines.len());

    let mut wanted: HashMap<(char, char), i64> = HashMap::new();
    let mut wanted_total = 0i64;
    for line in &old_lines {
        for pair in pairs(line) {
            *wanted.entry(pair).or_default() += 1;
            wanted_total += 1;
        }
    }
    let line_pairs: Vec<Vec<(char, char)>> = lines.iter().map(|line| pairs(line)).collect();
    let mut window = Window {
        wanted: &wanted,
        held: HashMap::new(),
        held_total: 0,
        shared: 0,
    };
    for line in &line_pairs[..size] {
        window.add(line);
    }
    let mut scores = vec![(window.dice(wanted_total), 0)];
    for start in 1..=lines.len() - size {
        window.remove(&line_pairs[start - 1]);
        window.add(&line_pairs[start + size - 1]);
        scores.push((window.dice(wanted_total), start));
    }
    scores.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));

    // The close comparison ignores how whitespace is laid out, as the
    // first does: text that is right but for its indentation is the
    // likeliest miss, and must not lose to other lines indented alike.
    let squeezed_old = squeeze(&old_lines).join("\n");
    let (score, start) = scores
        .into_iter()
        .take(RERANKED)
        .map(|(dice, start)| {
            let text = squeeze(&lines[start..start + size]).join("\n");
            let close = text.len() <= MAX_CLOSE_COMPARISON_BYTES
                && squeezed_old.len() <= MAX_CLOSE_COMPARISON_BYTES;
            let score = if close {
                strsim::normalized_levenshtein(&text, &squeezed_old)
            } else {
                dice
            };
            (score, start)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))?;
    if score < MIN_SIMILARITY {
        return None;
    }
    let end = start + size;
    let shown_until = end.min(start + MAX_CLOSEST_LINES);
    let mut numbered = numbered(&lines, start + 1, shown_until, digits(end));
    if shown_until < end {
        numbered.push(format!("... (to line {end})"));
    }
    Some(Closest {
        start_line: start + 1,
        end_line: end,
        numbered,
        whitespace_only: squeeze(&lines[start..end]) == squeeze(&old_lines),
    })
}

/// Lines with their runs of whitespace made one space, and none at either
/// end.
fn squeeze(lines: &[&str]) -> Vec<String> {
    lines
        .iter()
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// The pairs of adjacent characters of a line, its indentation and
/// trailing space left out, and a newline before it so that line starts
/// count too.
fn pairs(line: &str) -> Vec<(char, char)> {
    let chars: Vec<char> = std::iter::once('\n').chain(line.trim().chars()).collect();
    chars.windows(2).map(|pair| (pair[0], pair[1])).collect()
}

/// The character pairs of a window of lines, and how many of them `old`
/// has too (each pair counted as often as both have it).
struct Window<'a> {
    wanted: &'a HashMap<(char, char), i64>,
    held: HashMap<(char, char), i64>,
    held_total: i64,
    shared: i64,
}

impl Window<'_> {
    fn add(&mut self, pairs: &[(char, char)]) {
        for pair in pairs {
            let held = self.held.entry(*pair).or_default();
            if *held < self.wanted.get(pair).copied().unwrap_or(0) {
                self.shared += 1;
            }
            *held += 1;
            self.held_total += 1;
        }
    }

    fn remove(&mut self, pairs: &[(char, char)]) {
        for pair in pairs {
            let held = self.held.entry(*pair).or_default();
            *held -= 1;
            if *held < self.wanted.get(pair).copied().unwrap_or(0) {
                self.shared -= 1;
            }
            self.held_total -= 1;
        }
    }

    fn dice(&self, wanted_total: i64) -> f64 {
        let total = self.held_total + wanted_total;
        if total == 0 {
            return 0.0;
        }
        2.0 * self.shared as f64 / total as f64
    }
}

/// Replaces exact text in a file of the workspace.
pub struct EditFile {
    workspace: Arc<RunWorkspace>,
    definition: Arc<ToolDefinition>,
}

impl EditFile {
    pub fn new(workspace: Arc<RunWorkspace>) -> Self {
        Self {
            workspace,
            definition: shared(EDIT_FILE, || ToolDefinition {
                name: EDIT_FILE.into(),
                description: format!(
                    "Change part of an existing text file: replace old_text, which must occur in \
                     the file exactly once, with new_text (set replace_all to replace every \
                     occurrence). Use it to fix or extend a file without rewriting it whole; copy \
                     old_text from the file as read_file shows it, whitespace and indentation \
                     included, with enough lines around the change to make it unique. Returns \
                     {{path, replacements, snippet}}: snippet shows the changed lines with \
                     {CONTEXT_LINES} lines around each, each line prefixed by its line number \
                     (the numbers are not part of the file). The file is replaced atomically; \
                     when old_text is not found, the error shows the closest lines."
                ),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "Path of the file, relative to the workspace root."
                        },
                        "old_text": {
                            "type": "string",
                            "description": "The exact text to replace, as it is in the file."
                        },
                        "new_text": {
                            "type": "string",
                            "description": "The text to put in its place (empty to delete it)."
                        },
                        "replace_all": {
                            "type": "boolean",
                            "description": "Replace every occurrence of old_text instead of \
                                            requiring exactly one. Default false."
                        }
                    },
                    "required": ["path", "old_text", "new_text"],
                    "additionalProperties": false
                }),
            }),
        }
    }
}

/// Why an edit gave no result: the workspace refused it, or the text did.
enum Failure {
    Workspace(WorkspaceError),
    Edit(EditError),
}

impl From<WorkspaceError> for Failure {
    fn from(error: WorkspaceError) -> Self {
        Self::Workspace(error)
    }
}

#[async_trait]
impl Tool for EditFile {
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    fn role(&self) -> ToolRole {
        ToolRole::Changes
    }

    async fn execute(&self, arguments: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        let path = string_argument(arguments, "path")?;
        let old_text = string_argument(arguments, "old_text")?;
        let new_text = string_argument(arguments, "new_text")?;
        let replace_all = match arguments.get("replace_all") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(all)) => *all,
            Some(_) => {
                return Err(ToolError::new(
                    "Invalid arguments: $.replace_all: expected true or false",
                ));
            }
        };
        let (replacements, snippet) = {
            let path = path.clone();
            blocking(&self.workspace, Access::Write, move |ws| {
                ws.edit_file(&path, |text| {
                    let edited =
                        apply(&text, &old_text, &new_text, replace_all).map_err(Failure::Edit)?;
                    Ok((edited.text, (edited.replacements, edited.snippet)))
                })
                .map_err(|failure| match failure {
                    Failure::Workspace(error) => explain(ws, error, Want::File),
                    Failure::Edit(error) => ToolError::new(error.message(&path)),
                })
            })
            .await?
        };
        Ok(json!({"path": path, "replacements": replacements, "snippet": snippet}))
    }
}

#[cfg(test)]
mod tests;
