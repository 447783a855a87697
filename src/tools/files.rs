//! The three file tools: `read_file`, `write_file` and `list_dir`, each a thin
//! [`Tool`] over a shared [`Workspace`].
//!
//! Results, as the model sees them:
//! - `read_file {path}` → the file's text, as a JSON string.
//! - `write_file {path, content}` → `{"path": PATH, "bytes_written": N}`.
//! - `list_dir {path?}` → `{"entries": [{"name": NAME, "kind": KIND}, ...]}`,
//!   sorted by name, where `kind` is `"file"`, `"dir"`, `"symlink"` or
//!   `"other"`; an absent path, `""` or `"."` lists the workspace root.
//!
//! Every refusal is a [`ToolError`] whose message comes from
//! [`super::WorkspaceError`].

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::definitions::shared;
use super::run_workspace::RunWorkspace;
use super::workspace::Workspace;
use crate::harness::{Tool, ToolDefinition, ToolError};

pub const READ_FILE: &str = "read_file";
pub const WRITE_FILE: &str = "write_file";
pub const LIST_DIR: &str = "list_dir";

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
                    "Read a UTF-8 text file of the workspace (at most {limit} bytes). The path is \
                     relative to the workspace root; symbolic links are not followed."
                ),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "File path relative to the workspace root, e.g. \"src/main.rs\"."
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

    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    async fn execute(&self, arguments: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        let path = string_argument(arguments, "path")?;
        let text = blocking(&self.workspace, Access::Read, move |ws| ws.read_file(&path)).await?;
        Ok(Value::String(text))
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
                description: "Write a text file of the workspace, replacing it if it exists. The \
                              parent directory must already exist (directories are not created); \
                              the path is relative to the workspace root."
                    .into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "File path relative to the workspace root, e.g. \"notes.txt\"."
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
                              (file, dir, symlink or other), sorted by name. Without a path, \
                              lists the workspace root."
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
        let path = match arguments.get("path") {
            None | Some(Value::Null) => ".".to_owned(),
            Some(_) => string_argument(arguments, "path")?,
        };
        let entries = blocking(&self.workspace, Access::Read, move |ws| ws.list_dir(&path)).await?;
        Ok(json!({ "entries": entries }))
    }
}

/// The harness has checked the schema already; this only guards against a
/// tool being called without that check.
fn string_argument(arguments: &Value, key: &str) -> Result<String, ToolError> {
    arguments
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ToolError::new(format!("Invalid arguments: $.{key}: expected string")))
}

/// What a workspace operation does: a read sees an empty workspace until the
/// run's directory exists; a write makes it.
#[derive(Clone, Copy)]
enum Access {
    Read,
    Write,
}

/// Runs a workspace operation on the blocking pool: it is a handful of
/// syscalls, but on a slow disk those can block.
async fn blocking<T, E>(
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
