//! `apply_patch`: change several files at once with a patch, in the form
//! the model knows best: a unified diff as `git diff` prints it, or the
//! `*** Begin Patch` envelope OpenAI's models are trained to write.
//!
//! `apply_patch {patch}` → `{"files": [{"path", "action", "from"?,
//! "insertions", "deletions"}], "snippet"?}`, where `action` is `"added"`,
//! `"updated"`, `"deleted"` or `"moved"` (`from` names a moved or copied
//! file's old path) and `snippet` shows the changed files' lines around
//! each change, numbered, as `edit_file`'s does.
//!
//! A patch is applied whole or not at all: every file is read and every
//! hunk placed in memory first ([`apply`]), and only when all of them
//! apply is anything written. A hunk that does not apply is an error
//! naming the file and the hunk, saying what it expected, with the file's
//! closest lines and their numbers ([`place`]). Paths are the workspace's
//! like every file tool's: an absolute path or one climbing out with `..`
//! is refused when the patch is read, before anything is touched.
//!
//! - [`unified`]: git's and diff's unified diffs (hunks parsed by `diffy`).
//! - [`envelope`]: the `*** Begin Patch` format.
//! - [`place`]: where each hunk goes in its file, and the new text.
//! - [`apply`]: the whole patch over the workspace.

mod apply;
mod envelope;
mod place;
mod unified;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::definitions::shared;
use super::files::{Access, blocking, string_argument};
use super::path::check_file_path;
use super::run_workspace::RunWorkspace;
use crate::harness::{Tool, ToolDefinition, ToolError, ToolRole};

pub const APPLY_PATCH: &str = "apply_patch";

/// What a patch does to one file, as either format says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileChange {
    /// The file read: the one changed, deleted, moved or copied; for a new
    /// file, the one made.
    pub path: String,
    pub kind: Kind,
    /// The hunks, in order. A new file's are applied to an empty text; a
    /// deleted file's, when it has any, must remove all of it.
    pub hunks: Vec<Hunk>,
    /// The line of the patch the file's part starts on (1-based).
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Add,
    Delete,
    /// Changed in place, or moved to another path with its changes.
    Update {
        move_to: Option<String>,
    },
    /// Copied to `to` with its changes (git's `copy from` / `copy to`); the
    /// original stays.
    Copy {
        to: String,
    },
}

/// One hunk: lines to find in the file, and what they become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hunk {
    /// How an error names it: its `@@` line as the patch wrote it.
    pub header: String,
    /// The patch line it starts on (1-based).
    pub line: usize,
    /// The line of the file its old lines are said to start on (1-based);
    /// for a hunk with no old lines, the line its new ones follow (0: the
    /// top). Only a hint: the lines are looked for around it.
    pub start: Option<usize>,
    /// Lines that come before the hunk's, found in turn (the envelope's
    /// `@@ def f():`).
    pub anchors: Vec<String>,
    /// The old lines end the file (the envelope's `*** End of File`).
    pub at_end: bool,
    pub lines: Vec<Line>,
}

impl Hunk {
    /// The lines the file has now: context and removed.
    fn old_lines(&self) -> impl Iterator<Item = &Line> {
        self.lines
            .iter()
            .filter(|line| line.kind != LineKind::Insert)
    }

    /// The lines the file will have: context and added.
    fn new_lines(&self) -> impl Iterator<Item = &Line> {
        self.lines
            .iter()
            .filter(|line| line.kind != LineKind::Delete)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineKind {
    Context,
    Delete,
    Insert,
}

/// A line of a hunk, without its newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    pub kind: LineKind,
    pub text: String,
    /// False for a last line marked `\ No newline at end of file`.
    pub newline: bool,
}

impl Line {
    fn new(kind: LineKind, text: impl Into<String>) -> Self {
        Self {
            kind,
            text: text.into(),
            newline: true,
        }
    }

    /// The line as a hunk writes it: its mark, then its text.
    fn marked(&self) -> String {
        let mark = match self.kind {
            LineKind::Context => ' ',
            LineKind::Delete => '-',
            LineKind::Insert => '+',
        };
        format!("{mark}{}", self.text)
    }
}

/// A patch that could not be read. Nothing is touched then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError {
    /// The patch line at fault (1-based), when one is.
    pub line: Option<usize>,
    pub message: String,
}

impl ParseError {
    fn at(line: usize, message: impl Into<String>) -> Self {
        Self {
            line: Some(line),
            message: message.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(
                f,
                "The patch could not be read: line {line}: {}",
                self.message
            ),
            None => write!(f, "The patch could not be read: {}", self.message),
        }?;
        write!(f, " Nothing was changed.")
    }
}

/// Reads a patch in either format. Carriage returns before newlines are
/// dropped (a file's own line ends are kept when it is changed), and a
/// Markdown fence around the patch is ignored; line numbers stay those of
/// the patch as given.
pub(crate) fn parse(patch: &str) -> Result<Vec<FileChange>, ParseError> {
    let text = patch.replace("\r\n", "\n");
    let mut lines: Vec<&str> = text.lines().collect();
    let first = lines.iter().position(|line| !line.trim().is_empty());
    let last = lines.iter().rposition(|line| !line.trim().is_empty());
    if let (Some(first), Some(last)) = (first, last)
        && first < last
        && lines[first].trim_start().starts_with("```")
        && lines[last].trim() == "```"
    {
        lines[first] = "";
        lines[last] = "";
    }
    let Some(first) = lines.iter().find(|line| !line.trim().is_empty()) else {
        return Err(no_files());
    };
    // The envelope, unless a diff's header comes before its first line (a
    // shell line such as `apply_patch <<'EOF'` may come before it).
    let envelope = first.trim().starts_with("*** ")
        || lines
            .iter()
            .find(|line| {
                line.trim() == "*** Begin Patch"
                    || ["--- ", "diff --git ", "@@"]
                        .iter()
                        .any(|header| line.starts_with(header))
            })
            .is_some_and(|line| line.trim() == "*** Begin Patch");
    let changes = if envelope {
        envelope::parse(&lines)?
    } else {
        unified::parse(&lines)?
    };
    if changes.is_empty() {
        return Err(no_files());
    }
    Ok(changes)
}

fn no_files() -> ParseError {
    ParseError {
        line: None,
        message: "it names no file. Give a unified diff as `git diff` prints it (`--- a/PATH`, \
                  `+++ b/PATH`, then `@@` hunks), or a patch from `*** Begin Patch` to `*** End \
                  Patch` with `*** Update File: PATH`, `*** Add File: PATH` or `*** Delete File: \
                  PATH` sections."
            .to_owned(),
    }
}

/// A path of the patch as the workspace takes it, or why not: relative to
/// the workspace root, never climbing above it (a leading `./` is
/// dropped).
fn checked_path(raw: &str, line: usize) -> Result<String, ParseError> {
    let trimmed = raw.trim();
    let path = trimmed.trim_start_matches("./");
    let outside = path.starts_with('/') || path.split('/').any(|part| part == "..");
    if outside {
        return Err(ParseError::at(
            line,
            format!(
                "the path {trimmed:?} is outside the workspace: paths in a patch are relative to \
                 the workspace root and may not climb above it."
            ),
        ));
    }
    check_file_path(path).map_err(|reason| {
        ParseError::at(
            line,
            format!("the path {trimmed:?} cannot be used: {reason}."),
        )
    })?;
    Ok(path.to_owned())
}

/// Every path a patch changes, in the order it names them, each once;
/// none when it cannot be read.
fn changed_paths(patch: &str) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    for change in parse(patch).unwrap_or_default() {
        let touched = match change.kind {
            Kind::Update { move_to: Some(to) } => vec![change.path, to],
            Kind::Copy { to } => vec![to],
            Kind::Add | Kind::Delete | Kind::Update { move_to: None } => vec![change.path],
        };
        for path in touched {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    paths
}

/// Applies a patch to files of the workspace.
pub struct ApplyPatch {
    workspace: Arc<RunWorkspace>,
    definition: Arc<ToolDefinition>,
}

impl ApplyPatch {
    pub fn new(workspace: Arc<RunWorkspace>) -> Self {
        Self {
            workspace,
            definition: shared(APPLY_PATCH, || ToolDefinition {
                name: APPLY_PATCH.into(),
                description: "Change, add, delete or move several files in one go with a patch, \
                              applied whole or not at all. Write it either as a unified diff like \
                              `git diff` prints (`--- a/PATH`, `+++ b/PATH`, then `@@ -L,N +L,M \
                              @@` hunks of ' ' unchanged, '-' removed and '+' added lines; \
                              `--- /dev/null` for a new file, `+++ /dev/null` for a deleted one), \
                              or as `*** Begin Patch`, then sections `*** Update File: PATH` \
                              (optionally `*** Move to: NEW`, then changes each starting with `@@` \
                              or `@@ a line above the change`), `*** Add File: PATH` (every line \
                              '+'), `*** Delete File: PATH`, and `*** End Patch`. Unchanged and \
                              removed lines must be copied exactly from the file. Returns {files: \
                              [{path, action, from?, insertions, deletions}], snippet}: snippet \
                              shows the changed lines with 3 lines around each, numbered (the \
                              numbers are not part of the file). When a hunk does not apply, \
                              nothing is written and the error shows the file's closest lines."
                    .into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "patch": {
                            "type": "string",
                            "description": "The patch: a unified diff, or the text from \
                                            `*** Begin Patch` to `*** End Patch`. Paths are \
                                            relative to the workspace root."
                        }
                    },
                    "required": ["patch"],
                    "additionalProperties": false
                }),
            }),
        }
    }
}

#[async_trait]
impl Tool for ApplyPatch {
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    fn role(&self) -> ToolRole {
        ToolRole::Changes
    }

    /// Every file the patch adds, changes, deletes or moves (both paths of
    /// a move).
    fn changed_paths(&self, arguments: &Value) -> Vec<String> {
        arguments
            .get("patch")
            .and_then(Value::as_str)
            .map(changed_paths)
            .unwrap_or_default()
    }

    async fn execute(&self, arguments: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        let patch = string_argument(arguments, "patch")?;
        let changes = parse(&patch).map_err(|error| ToolError::new(error.to_string()))?;
        let applied = blocking(&self.workspace, Access::Write, move |ws| {
            apply::apply(ws, &changes)
        })
        .await?;
        Ok(applied.to_json())
    }
}

#[cfg(test)]
mod tests;
