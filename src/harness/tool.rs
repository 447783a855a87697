//! The contract every tool implements.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// What the model is told about a tool: its name, what it does, and the JSON
/// Schema its arguments must satisfy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// A tool's own failure. It is answered to the model as a recoverable tool
/// message (`is_error: true`) carrying exactly this message, so write it for the
/// model: say what was wrong and what would work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    message: String,
}

impl ToolError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// What a tool does to the work of a run, as far as checking an answer goes
/// (see [`crate::harness::review`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolRole {
    /// Neither of the below.
    #[default]
    Other,
    /// It changes files: those [`Tool::changed_paths`] names (by default
    /// its `path` argument).
    Changes,
    /// It changes files by writing one whole (its arguments are `{path,
    /// content}`), and shows the workspace's text files
    /// ([`Tool::text_files`]): code the model writes in an answer may be
    /// taken as its call (see [`crate::harness::blocks`]).
    Writes,
    /// It runs a command, whose result (an `exit_code` of 0) says whether
    /// the work passes a check.
    Checks,
    /// It shows a file of the workspace (its `path` argument), and shows
    /// the workspace's text files ([`Tool::text_files`]): an answer about a
    /// file the task names, given without reading it, is questioned.
    Reads,
}

impl ToolRole {
    /// Whether a successful call changes files (those
    /// [`Tool::changed_paths`] names).
    pub fn changes_files(self) -> bool {
        matches!(self, Self::Changes | Self::Writes)
    }
}

/// A capability the harness may execute on a model's behalf.
///
/// `execute` receives arguments that already satisfy the tool's schema, and the
/// run's cancellation token, which fires on client cancel and on the run's
/// deadline: a tool that waits on anything must stop promptly when it fires.
/// A tool that ignores it is dropped by the harness shortly after.
#[async_trait]
pub trait Tool: Send + Sync {
    /// What the model is told about the tool. Shared rather than copied: a
    /// service builds the same few definitions for every run.
    fn definition(&self) -> Arc<ToolDefinition>;

    /// The schema its arguments are checked against, when it is not the
    /// definition's `parameters` (a server's schema in a dialect the model
    /// is not shown).
    fn schema(&self) -> Option<&Value> {
        None
    }

    /// What the tool does to the work, for checking answers.
    fn role(&self) -> ToolRole {
        ToolRole::Other
    }

    /// For a tool whose role changes files ([`ToolRole::changes_files`]):
    /// the files a successful call with `arguments` changes, as the call
    /// names them (relative to the workspace). By default its `path`
    /// argument: the tool changes one file. A tool that changes several in
    /// one call (`apply_patch`) names every one, so that what checks a
    /// change (the review of an answer, the checks run after a change) sees
    /// them all.
    fn changed_paths(&self, arguments: &Value) -> Vec<String> {
        arguments
            .get("path")
            .and_then(Value::as_str)
            .map(|path| vec![path.to_owned()])
            .unwrap_or_default()
    }

    /// For a [`ToolRole::Writes`] or [`ToolRole::Reads`] tool: the
    /// workspace's UTF-8 text files (path, text), as many as are cheap to
    /// read; empty for any other.
    async fn text_files(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// For a [`ToolRole::Checks`] tool: the arguments of each call the
    /// harness makes of it after a model response that changed files and
    /// ran no check after (a test preset marked to run after every change);
    /// empty for any other, and by default.
    fn checks_after_change(&self) -> Vec<Value> {
        Vec::new()
    }

    /// Whether the client executes this tool: its calls pause the run for
    /// the client's result rather than execute here.
    fn is_client(&self) -> bool {
        false
    }

    /// Whether a call with `arguments` may safely run again when it is not
    /// known whether it ran to its end (its server stopped while it ran):
    /// it reads only, or doing it twice leaves what doing it once does.
    fn idempotent(&self, _arguments: &Value) -> bool {
        false
    }

    /// Whether a call the run's stop cut short is left without a result,
    /// to be made again if the run is resumed (its work goes on elsewhere
    /// and is found again by the call's id), rather than answered as
    /// cancelled. By default not.
    fn resumes_on_stop(&self) -> bool {
        false
    }

    /// Whether it is told of a batch's calls before they run
    /// ([`Tool::batch`]). By default not.
    fn takes_batches(&self) -> bool {
        false
    }

    /// Told of the valid calls of it in a batch, in order, before the
    /// batch runs (its calls then run one after another), when it
    /// [`Tool::takes_batches`] and the batch has several: a tool whose
    /// calls wait on work elsewhere may start it all at once. By default
    /// nothing.
    fn batch(&self, _calls: &[(&str, &Value)]) {}

    async fn execute(
        &self,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError>;

    /// [`Tool::execute`] for the call `call_id` of the run: a tool whose
    /// work must not be done twice for one call (after its run was resumed)
    /// keys it by the id. By default `execute`.
    async fn execute_call(
        &self,
        _call_id: &str,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        self.execute(arguments, cancel).await
    }
}

/// A tool the client executes: the model sees its definition, the harness
/// checks its arguments, and the run pauses for the client's result.
pub struct ClientTool {
    definition: Arc<ToolDefinition>,
}

impl ClientTool {
    pub fn new(definition: ToolDefinition) -> Self {
        Self {
            definition: Arc::new(definition),
        }
    }
}

#[async_trait]
impl Tool for ClientTool {
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    fn is_client(&self) -> bool {
        true
    }

    async fn execute(&self, _: &Value, _: &CancellationToken) -> Result<Value, ToolError> {
        Err(ToolError::new(
            "This tool is the client's: its result comes from the client",
        ))
    }
}
