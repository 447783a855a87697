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
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::definitions::shared;
use super::error::WorkspaceError;
use super::files::{Access, blocking, string_argument};
use super::run_workspace::RunWorkspace;
use super::suggest::{Closest, Want, closest_lines, explain};
use super::text::{LineIndex, digits, numbered};
use crate::harness::{Tool, ToolDefinition, ToolError, ToolRole};

pub const EDIT_FILE: &str = "edit_file";

/// Lines shown before and after each change in a snippet.
const CONTEXT_LINES: usize = 3;

/// Lines a snippet shows at most; the rest of a large edit is counted.
const MAX_SNIPPET_LINES: usize = 60;

/// Line numbers listed at most when `old_text` occurs several times.
const MAX_LISTED_LINES: usize = 20;

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
                let range = closest.range();
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
