//! The three plain file tools: `read_file`, `write_file` and `list_dir`,
//! each a thin [`Tool`] over a shared [`Workspace`] (`edit_file` and
//! `search` are in their own modules).
//!
//! Results, as the model sees them:
//! - `read_file {path}` → the file's text, as a JSON string;
//!   `read_file {path, offset?, limit?}` with either → `{"path", "start_line",
//!   "end_line", "total_lines", "text"}`: lines `offset..offset + limit`
//!   (1-based; to the end without a limit).
//! - `write_file {path, content}` → `{"path": PATH, "bytes_written": N}`.
//! - `list_dir {path?}` → `{"entries": [{"name": NAME, "kind": KIND}, ...]}`,
//!   sorted by name, where `kind` is `"file"`, `"dir"`, `"symlink"` or
//!   `"other"`; an absent path, `""` or `"."` lists the workspace root.
//!
//! Every refusal is a [`ToolError`] whose message comes from
//! [`super::WorkspaceError`]; a path that does not exist adds the
//! workspace's paths closest to it (see [`super::suggest`]).

use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::definitions::shared;
use super::run_workspace::RunWorkspace;
use super::search::is_binary;
use super::suggest::{Want, explain, is_skipped_dir};
use super::text;
use super::workspace::Workspace;
use crate::harness::{Tool, ToolDefinition, ToolError, ToolRole};

pub const READ_FILE: &str = "read_file";
pub const WRITE_FILE: &str = "write_file";
pub const LIST_DIR: &str = "list_dir";

/// Files [`WriteFile::text_files`] shows at most, and the largest it reads.
const MAX_TEXT_FILES: usize = 200;
const MAX_TEXT_FILE_BYTES: u64 = 256 * 1024;

/// Reads a UTF-8 text file of the workspace.
pub struct ReadFile {
    workspace: Arc<RunWorkspace>,
    definition: Arc<ToolDefinition>,
}

impl ReadFile {
    pub fn new(workspace: Arc<RunWorkspace>) -> Self {
        let limit = workspace.max_read_bytes();
        Self {
            workspace,
            definition: shared(&format!("{READ_FILE}:{limit}"), || ToolDefinition {
                name: READ_FILE.into(),
                description: format!(
                    "Read a text file of the workspace. Use it to learn what a file says (to \
                     answer a question about it, when the task names it), to see its current \
                     content before changing it, or to check what you wrote. Returns the file's whole \
                     text; with offset and/or limit, returns {{path, start_line, end_line, \
                     total_lines, text}} for that window of lines instead, for long files. \
                     Files over {limit} bytes, and files that are not UTF-8 text, are refused. \
                     Symbolic links are not followed."
                ),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "Path of the file, relative to the workspace root \
                                            (list_dir shows what is there)."
                        },
                        "offset": {
                            "type": "integer",
                            "minimum": 1,
                            "description": "The first line to return, counting from 1. \
                                            Default: 1."
                        },
                        "limit": {
                            "type": "integer",
                            "minimum": 1,
                            "description": "How many lines to return at most. Default: to the \
                                            end of the file."
                        }
                    },
                    "required": ["path"],
                    "additionalProperties": false
                }),
            }),
        }
    }
}

#[async_trait]
impl Tool for ReadFile {
    /// It only reads.
    fn idempotent(&self, _arguments: &Value) -> bool {
        true
    }

    fn role(&self) -> ToolRole {
        ToolRole::Reads
    }

    async fn text_files(&self) -> Vec<(String, String)> {
        text_files(&self.workspace).await
    }

    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    async fn execute(&self, arguments: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        let path = string_argument(arguments, "path")?;
        let offset = line_argument(arguments, "offset")?;
        let limit = line_argument(arguments, "limit")?;
        let text = {
            let path = path.clone();
            blocking(&self.workspace, Access::Read, move |ws| {
                ws.read_file(&path)
                    .map_err(|error| explain(ws, error, Want::File))
            })
            .await?
        };
        if offset.is_none() && limit.is_none() {
            return Ok(Value::String(text));
        }
        let offset = offset.unwrap_or(1);
        let Some(window) = text::window(&text, offset, limit) else {
            let total = text::count_lines(&text);
            return Err(ToolError::new(format!(
                "offset {offset} is past the end of {path}: it has {total} line{}",
                if total == 1 { "" } else { "s" }
            )));
        };
        Ok(json!({
            "path": path,
            "start_line": window.start_line,
            "end_line": window.end_line,
            "total_lines": window.total_lines,
            "text": window.text,
        }))
    }
}

/// Writes a text file of the workspace, replacing it atomically.
pub struct WriteFile {
    workspace: Arc<RunWorkspace>,
    definition: Arc<ToolDefinition>,
}

impl WriteFile {
    pub fn new(workspace: Arc<RunWorkspace>) -> Self {
        Self {
            workspace,
            definition: shared(WRITE_FILE, || ToolDefinition {
                name: WRITE_FILE.into(),
                description: "Create a text file, or replace a file's whole content. Use it for \
                              new files and complete rewrites; to change part of an existing \
                              file, edit_file is shorter and safer. The parent directory must \
                              already exist (directories are not created). The file is replaced \
                              atomically. Returns {path, bytes_written}."
                    .into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "Path of the file, relative to the workspace root."
                        },
                        "content": {
                            "type": "string",
                            "description": "The complete new content of the file."
                        }
                    },
                    "required": ["path", "content"],
                    "additionalProperties": false
                }),
            }),
        }
    }
}

#[async_trait]
impl Tool for WriteFile {
    /// Writing the same content to the same file twice leaves what once does.
    fn idempotent(&self, _arguments: &Value) -> bool {
        true
    }

    fn role(&self) -> ToolRole {
        ToolRole::Writes
    }

    async fn text_files(&self) -> Vec<(String, String)> {
        text_files(&self.workspace).await
    }

    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    async fn execute(&self, arguments: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        let path = string_argument(arguments, "path")?;
        let content = string_argument(arguments, "content")?;
        let written = {
            let path = path.clone();
            blocking(&self.workspace, Access::Write, move |ws| {
                ws.write_file(&path, content.as_bytes())
                    .map_err(|error| explain(ws, error, Want::File))
            })
            .await?
        };
        Ok(json!({"path": path, "bytes_written": written}))
    }
}

/// Lists one directory of the workspace.
pub struct ListDir {
    workspace: Arc<RunWorkspace>,
    definition: Arc<ToolDefinition>,
}

impl ListDir {
    pub fn new(workspace: Arc<RunWorkspace>) -> Self {
        Self {
            workspace,
            definition: shared(LIST_DIR, || ToolDefinition {
                name: LIST_DIR.into(),
                description: "List a directory of the workspace: each entry's name and kind \
                              (file, dir, symlink or other), sorted by name. Use it to find your \
                              way around the workspace; without a path it lists the root. \
                              Returns {entries: [{name, kind}]}."
                    .into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "Directory path relative to the workspace root; \".\" or absent for the root."
                        }
                    },
                    "additionalProperties": false
                }),
            }),
        }
    }
}

#[async_trait]
impl Tool for ListDir {
    /// It only reads.
    fn idempotent(&self, _arguments: &Value) -> bool {
        true
    }

    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    async fn execute(&self, arguments: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        // Absent, null or empty (as models fill optional arguments): the root.
        let path = match arguments.get("path") {
            None | Some(Value::Null) => ".".to_owned(),
            Some(_) => Some(string_argument(arguments, "path")?)
                .filter(|path| !path.is_empty())
                .unwrap_or_else(|| ".".to_owned()),
        };
        let entries = blocking(&self.workspace, Access::Read, move |ws| {
            ws.list_dir(&path)
                .map_err(|error| explain(ws, error, Want::Dir))
        })
        .await?;
        Ok(json!({ "entries": entries }))
    }
}

/// The harness has checked the schema already; this only guards against a
/// tool being called without that check.
pub(super) fn string_argument(arguments: &Value, key: &str) -> Result<String, ToolError> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ToolError::new(format!("Invalid arguments: $.{key}: expected string")))
}

/// An optional line number or count: a positive integer. The schema says
/// so already; a number like `3.0` passes it, and is taken as `3`.
fn line_argument(arguments: &Value, key: &str) -> Result<Option<usize>, ToolError> {
    let value = match arguments.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => value,
    };
    let whole = value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|n| n.fract() == 0.0 && *n >= 1.0 && *n <= u32::MAX as f64)
            .map(|n| n as u64)
    });
    match whole.and_then(|n| usize::try_from(n).ok()) {
        Some(n) if n >= 1 => Ok(Some(n)),
        _ => Err(ToolError::new(format!(
            "Invalid arguments: $.{key}: expected a positive whole number (lines count from 1)"
        ))),
    }
}

/// What a workspace operation does: a read sees an empty workspace until the
/// run's directory exists; a write makes it.
#[derive(Clone, Copy)]
pub(super) enum Access {
    Read,
    Write,
}

/// Runs a workspace operation on the blocking pool: it is a handful of
/// syscalls, but on a slow disk those can block.
pub(super) async fn blocking<T, E>(
    workspace: &Arc<RunWorkspace>,
    access: Access,
    operation: impl FnOnce(&Workspace) -> Result<T, E> + Send + 'static,
) -> Result<T, ToolError>
where
    T: Send + 'static,
    E: Into<ToolError> + Send + 'static,
{
    let workspace = Arc::clone(workspace);
    let work = move || {
        let opened = match access {
            Access::Read => workspace.for_reading(),
            Access::Write => workspace.for_writing(),
        };
        let opened = opened.map_err(|error| {
            tracing::error!(%error, "a run's workspace could not be opened");
            ToolError::new(format!("The workspace could not be opened: {error}"))
        })?;
        operation(&opened).map_err(Into::into)
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(_) => Err(ToolError::new(
            "The file operation was stopped before it finished",
        )),
    }
}

/// Up to [`MAX_TEXT_FILES`] files of at most [`MAX_TEXT_FILE_BYTES`],
/// in the order of their paths; binary and non-UTF-8 files left out.
async fn text_files(workspace: &Arc<RunWorkspace>) -> Vec<(String, String)> {
    let scanned = blocking(workspace, Access::Read, |ws| {
        let mut files = Vec::new();
        ws.scan_files(
            ".",
            MAX_TEXT_FILE_BYTES,
            &is_skipped_dir,
            &mut |path, bytes| {
                if let Ok(text) = std::str::from_utf8(bytes)
                    && !is_binary(bytes)
                {
                    files.push((path.to_owned(), text.to_owned()));
                }
                if files.len() == MAX_TEXT_FILES {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )
        .map(|()| files)
    })
    .await;
    scanned.unwrap_or_default()
}
