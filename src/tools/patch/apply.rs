//! A patch over the workspace, whole or not at all: every file it touches
//! is read and every new text made in memory first, each part of the patch
//! seeing what the parts before it made (so a file updated twice, or moved
//! and then changed, comes out right); only when all of them apply is
//! anything written. Then new and changed files are written, each
//! atomically as `write_file` writes (a new file's missing folders are
//! made, as `git apply` makes them), and last the files deleted or moved
//! away are removed. A write that fails then (a full disk) leaves the patch
//! applied in part, and the error says which files were written.

use std::collections::HashMap;
use std::os::fd::AsFd;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, statat, unlinkat};
use rustix::io::Errno;
use serde_json::{Value, json};

use super::super::confine;
use super::super::edit::snippet;
use super::super::error::WorkspaceError;
use super::super::path::RelativePath;
use super::super::suggest::{Want, explain};
use super::super::text::count_lines;
use super::super::workspace::Workspace;
use super::place::{Placed, place};
use super::{FileChange, Kind};
use crate::harness::ToolError;

/// Lines the snippets of all the files show at most (each file's own at
/// most as many as `edit_file`'s).
const MAX_SNIPPET_LINES: usize = 120;

/// Ends every refusal: the model must know that nothing happened.
const NOTHING: &str = "Nothing was changed: a patch is applied whole or not at all.";

/// What to do about a hunk that does not apply.
const FIX: &str = "Copy the ' ' and '-' lines exactly from the file (read_file shows it; the \
                   line numbers and `|` are not part of it), then send the whole patch again.";

/// What a patch did, part by part.
pub(super) struct Applied {
    files: Vec<Done>,
}

/// What one part of a patch did to its file.
struct Done {
    path: String,
    action: &'static str,
    /// A moved or copied file's old path.
    from: Option<String>,
    insertions: usize,
    deletions: usize,
    /// The file's new text and where it changed, for the snippet.
    shown: Option<(String, Vec<(usize, usize)>)>,
}

/// Applies `changes` to the workspace, whole or not at all.
pub(super) fn apply(ws: &Workspace, changes: &[FileChange]) -> Result<Applied, ToolError> {
    let mut plan = Plan {
        ws,
        files: Vec::new(),
        before: HashMap::new(),
    };
    let files = changes
        .iter()
        .map(|change| plan.change(change))
        .collect::<Result<Vec<_>, _>>()?;
    plan.check_folders(changes)?;
    plan.write()?;
    Ok(Applied { files })
}

/// The files a patch touches, as they are and as they will be.
struct Plan<'w> {
    ws: &'w Workspace,
    /// Each file touched, in the order first touched, and its text once
    /// the patch is applied (`None`: gone).
    files: Vec<(String, Option<String>)>,
    /// Each file's text before the patch (`None`: it was not there).
    before: HashMap<String, Option<String>>,
}

impl Plan<'_> {
    /// Makes the new text of `change`'s files.
    fn change(&mut self, change: &FileChange) -> Result<Done, ToolError> {
        let path = &change.path;
        let done = |action, from: Option<&String>, placed: &Placed, to: &String| Done {
            path: to.clone(),
            action,
            from: from.cloned(),
            insertions: placed.insertions,
            deletions: placed.deletions,
            shown: Some((placed.text.clone(), placed.changed.clone())),
        };
        match &change.kind {
            Kind::Add => {
                self.absent("add", change, path)?;
                let placed = placed(change, path, "")?;
                self.set(path, Some(placed.text.clone()));
                Ok(done("added", None, &placed, path))
            }
            Kind::Delete => {
                let text = self.text("delete", change, path)?;
                if !change.hunks.is_empty() {
                    let placed = placed(change, path, &text)?;
                    let left = count_lines(&placed.text);
                    if !placed.text.trim().is_empty() {
                        return Err(refused(
                            "delete",
                            change,
                            path,
                            &format!(
                                "the patch removes {} of its lines, and {left} more would be \
                                 left. A deleted file's hunk removes all of it (read it to see \
                                 what it holds).",
                                placed.deletions
                            ),
                        ));
                    }
                }
                self.set(path, None);
                Ok(Done {
                    path: path.clone(),
                    action: "deleted",
                    from: None,
                    insertions: 0,
                    deletions: count_lines(&text),
                    shown: None,
                })
            }
            Kind::Update { move_to } => {
                let verb = if move_to.is_some() { "move" } else { "update" };
                let text = self.text(verb, change, path)?;
                let placed = placed(change, path, &text)?;
                match move_to {
                    Some(to) => {
                        self.absent("move", change, to)?;
                        self.set(path, None);
                        self.set(to, Some(placed.text.clone()));
                        Ok(done("moved", Some(path), &placed, to))
                    }
                    None => {
                        self.set(path, Some(placed.text.clone()));
                        Ok(done("updated", None, &placed, path))
                    }
                }
            }
            Kind::Copy { to } => {
                let text = self.text("copy", change, path)?;
                self.absent("copy", change, to)?;
                let placed = placed(change, path, &text)?;
                self.set(to, Some(placed.text.clone()));
                Ok(done("added", Some(path), &placed, to))
            }
        }
    }

    /// The file's text as the parts of the patch before make it; it must
    /// be there.
    fn text(&mut self, verb: &str, change: &FileChange, path: &str) -> Result<String, ToolError> {
        if let Some((_, now)) = self.files.iter().find(|(known, _)| known == path) {
            return now.clone().ok_or_else(|| {
                refused(
                    verb,
                    change,
                    path,
                    "an earlier part of the patch deletes or moves it.",
                )
            });
        }
        match self.ws.read_file(path) {
            Ok(text) => {
                self.before.insert(path.to_owned(), Some(text.clone()));
                Ok(text)
            }
            Err(WorkspaceError::NotUtf8(_)) => Err(refused(
                verb,
                change,
                path,
                "it is not UTF-8 text, and apply_patch changes text files only.",
            )),
            Err(error) => {
                let why = explain(self.ws, error, Want::File);
                Err(refused(verb, change, path, why.message()))
            }
        }
    }

    /// Checks that `path` is not there, as the parts of the patch before
    /// leave it: a new file, or a move's or copy's target.
    fn absent(&mut self, verb: &str, change: &FileChange, path: &str) -> Result<(), ToolError> {
        if let Some((_, now)) = self.files.iter().find(|(known, _)| known == path) {
            return match now {
                None => Ok(()),
                Some(_) => Err(refused(
                    verb,
                    change,
                    path,
                    &format!("an earlier part of the patch makes {path}."),
                )),
            };
        }
        match self.ws.read_bytes(path) {
            Err(WorkspaceError::NotFound(_)) => {
                self.before.insert(path.to_owned(), None);
                Ok(())
            }
            Ok(_) | Err(WorkspaceError::TooLarge { .. }) => Err(refused(
                verb,
                change,
                path,
                &format!(
                    "{path} already exists. To change it, update it (a diff against it, or \
                     `*** Update File: {path}`)."
                ),
            )),
            Err(error) => Err(refused(verb, change, path, &error.to_string())),
        }
    }

    fn set(&mut self, path: &str, text: Option<String>) {
        match self.files.iter_mut().find(|(known, _)| known == path) {
            Some((_, now)) => *now = text,
            None => self.files.push((path.to_owned(), text)),
        }
    }

    /// Checks that each new file's folder is a folder, or not there yet
    /// (it is made): a write then has nothing to refuse but the disk.
    fn check_folders(&self, changes: &[FileChange]) -> Result<(), ToolError> {
        for (path, now) in &self.files {
            let new = now.is_some() && matches!(self.before.get(path), Some(None));
            let Some((folder, _)) = path.rsplit_once('/').filter(|_| new) else {
                continue;
            };
            let problem = match self.ws.read_bytes(folder) {
                Err(WorkspaceError::IsADirectory(_) | WorkspaceError::NotFound(_)) => continue,
                Ok(_) | Err(WorkspaceError::TooLarge { .. } | WorkspaceError::NotUtf8(_)) => {
                    format!("{folder} is a file, not a folder.")
                }
                Err(error) => error.to_string(),
            };
            let Some(change) = changes.iter().find(|change| names(change, path)) else {
                return Err(ToolError::new(format!(
                    "Cannot write {path}: {problem} {NOTHING}"
                )));
            };
            return Err(refused("write", change, path, &problem));
        }
        Ok(())
    }

    /// Writes the new and changed files, then removes the deleted ones.
    fn write(&self) -> Result<(), ToolError> {
        let mut written: Vec<&str> = Vec::new();
        let mut removed: Vec<&str> = Vec::new();
        let before = |path: &str| self.before.get(path).and_then(Option::as_ref);
        for (path, now) in &self.files {
            let Some(text) = now else { continue };
            let result = match before(path) {
                Some(old) if old == text => continue,
                Some(_) => self.ws.write_file(path, text.as_bytes()),
                None => self.ws.write_seed(path, text.as_bytes()),
            };
            if let Err(error) = result {
                return Err(self.partly("Writing", path, &error, &written, &removed));
            }
            written.push(path);
        }
        for (path, now) in &self.files {
            if now.is_some() || before(path).is_none() {
                continue;
            }
            if let Err(error) = remove(self.ws, path) {
                return Err(self.partly("Deleting", path, &error, &written, &removed));
            }
            removed.push(path);
        }
        Ok(())
    }

    /// The error of a write that failed after others may have been made.
    fn partly(
        &self,
        doing: &str,
        path: &str,
        error: &WorkspaceError,
        written: &[&str],
        removed: &[&str],
    ) -> ToolError {
        let mut made: Vec<String> = written
            .iter()
            .map(|path| format!("{path} written"))
            .collect();
        made.extend(removed.iter().map(|path| format!("{path} deleted")));
        let untouched: Vec<&str> = self
            .files
            .iter()
            .map(|(known, _)| known.as_str())
            .filter(|known| !written.contains(known) && !removed.contains(known))
            .collect();
        let made = if made.is_empty() {
            "no file was changed".to_owned()
        } else {
            format!("the patch is applied only in part: {}", made.join(", "))
        };
        ToolError::new(format!(
            "{doing} {path} failed: {error}. Every hunk applied, but {made}; not changed: {}. \
             Read those files to see where they stand before patching them again.",
            untouched.join(", ")
        ))
    }
}

/// Whether `change` makes or changes `path`.
fn names(change: &FileChange, path: &str) -> bool {
    change.path == path
        || match &change.kind {
            Kind::Update { move_to: Some(to) } | Kind::Copy { to } => to == path,
            _ => false,
        }
}

/// `text` with `change`'s hunks applied, or the error naming the hunk that
/// does not apply.
fn placed(change: &FileChange, path: &str, text: &str) -> Result<Placed, ToolError> {
    place(text, &change.hunks).map_err(|misplaced| {
        let message = misplaced.message(path, &change.hunks);
        ToolError::new(format!("{message}\n{NOTHING} {FIX}"))
    })
}

/// Why the part of the patch at `change` cannot be applied to `path`.
fn refused(verb: &str, change: &FileChange, path: &str, why: &str) -> ToolError {
    ToolError::new(format!(
        "Cannot {verb} {path} (line {} of the patch): {why}\n{NOTHING}",
        change.line
    ))
}

/// Removes the regular file `path`, confined as every workspace operation
/// is: its folder is opened beneath the root without following a link,
/// and the file itself must not be one. (The workspace has no removal of
/// its own; this is the one tool that removes files.)
fn remove(ws: &Workspace, path: &str) -> Result<(), WorkspaceError> {
    let parsed = RelativePath::parse(path)?;
    let Some((parent, name)) = parsed.split_last() else {
        return Err(WorkspaceError::Root);
    };
    let refusal = |errno: Errno| match errno {
        Errno::LOOP => WorkspaceError::Symlink(path.to_owned()),
        Errno::XDEV => WorkspaceError::Outside(path.to_owned()),
        Errno::NOENT => WorkspaceError::NotFound(path.to_owned()),
        Errno::NOTDIR => WorkspaceError::NotADirectory(path.to_owned()),
        Errno::ISDIR => WorkspaceError::IsADirectory(path.to_owned()),
        Errno::ACCESS | Errno::PERM => WorkspaceError::PermissionDenied(path.to_owned()),
        other => WorkspaceError::Io {
            path: path.to_owned(),
            source: other.into(),
        },
    };
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let root = rustix::fs::open(ws.root(), flags, Mode::empty()).map_err(refusal)?;
    let dir = confine::open_dir(root.as_fd(), ws.resolver(), parent).map_err(refusal)?;
    let stat = statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(refusal)?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => {}
        FileType::Symlink => return Err(WorkspaceError::Symlink(path.to_owned())),
        FileType::Directory => return Err(WorkspaceError::IsADirectory(path.to_owned())),
        _ => return Err(WorkspaceError::NotRegularFile(path.to_owned())),
    }
    unlinkat(&dir, name, AtFlags::empty()).map_err(refusal)
}

impl Applied {
    /// The result as the model reads it.
    pub(super) fn to_json(&self) -> Value {
        let files: Vec<Value> = self
            .files
            .iter()
            .map(|done| {
                let mut file = json!({
                    "path": done.path,
                    "action": done.action,
                    "insertions": done.insertions,
                    "deletions": done.deletions,
                });
                if let Some(from) = &done.from {
                    file["from"] = json!(from);
                }
                file
            })
            .collect();
        let mut result = json!({ "files": files });
        let snippet = self.snippet();
        if !snippet.is_empty() {
            result["snippet"] = json!(snippet);
        }
        result
    }

    /// Each changed file's lines around its changes, numbered, under its
    /// path; at most about [`MAX_SNIPPET_LINES`] in all, the files past
    /// them named.
    fn snippet(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut shown = 0;
        let mut left: Vec<&str> = Vec::new();
        for done in &self.files {
            let Some((text, changed)) = &done.shown else {
                continue;
            };
            if changed.is_empty() {
                continue;
            }
            if shown >= MAX_SNIPPET_LINES {
                left.push(&done.path);
                continue;
            }
            let lines = snippet(text, changed);
            shown += lines.lines().count();
            parts.push(format!("{}:\n{lines}", done.path));
        }
        if !left.is_empty() {
            parts.push(format!("(not shown: {})", left.join(", ")));
        }
        parts.join("\n\n")
    }
}
