//! The `run_command` tool of one run.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{CommandError, CommandRunner, MAX_OUTPUT_CHARS, RUN_COMMAND};
use crate::harness::{Tool, ToolDefinition, ToolError};
use crate::tools::SelectionError;
use crate::tools::workspace::Workspace;

/// The `run_command` tool of one run: the presets that run allows, run in its
/// workspace.
pub struct RunCommand {
    runner: Arc<CommandRunner>,
    workspace: Arc<Workspace>,
    allowed: Vec<String>,
    definition: ToolDefinition,
}

impl RunCommand {
    /// `allowed` must name presets of `runner`; the first that does not is
    /// the error. The model sees exactly the allowed names as the enum of
    /// `command`.
    pub fn new(
        runner: Arc<CommandRunner>,
        workspace: Arc<Workspace>,
        allowed: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self, SelectionError> {
        let mut allowed: Vec<String> = allowed.into_iter().map(Into::into).collect();
        allowed.sort();
        allowed.dedup();
        if let Some(unknown) = allowed.iter().find(|name| !runner.presets.contains(name)) {
            return Err(SelectionError::UnknownCommand(unknown.clone()));
        }
        let listed: Vec<String> = allowed
            .iter()
            .filter_map(|name| {
                let preset = runner.presets.get(name)?;
                let mut line = std::iter::once(preset.program.as_str())
                    .chain(preset.args.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ");
                line = format!("{name} (runs `{line}`, timeout {} ms)", preset.timeout_ms);
                Some(line)
            })
            .collect();
        let description = format!(
            "Run one of the server's preset commands in the workspace, with no shell and no \
             stdin. Returns {{exit_code, stdout, stderr, timed_out, truncated}} (and signal when \
             a signal ended it); stdout and stderr keep at most {MAX_OUTPUT_CHARS} characters \
             each, and more ends the command. Available: {}.",
            if listed.is_empty() {
                "none".to_owned()
            } else {
                listed.join("; ")
            }
        );
        let definition = ToolDefinition {
            name: RUN_COMMAND.into(),
            description,
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "enum": allowed,
                        "description": "The name of the preset command to run."
                    }
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        };
        Ok(Self {
            runner,
            workspace,
            allowed,
            definition,
        })
    }
}

#[async_trait]
impl Tool for RunCommand {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    async fn execute(
        &self,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let name = arguments
            .get("command")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !self.allowed.iter().any(|allowed| allowed == name) {
            return Err(CommandError::NotPermitted {
                name: name.to_owned(),
                allowed: self.allowed.join(", "),
            }
            .into());
        }
        let output = self.runner.run(name, self.workspace.root(), cancel).await?;
        serde_json::to_value(output)
            .map_err(|error| ToolError::new(format!("Command result not serialisable: {error}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{CommandPreset, CommandPresets, Sandbox};
    #[test]
    fn the_schema_lists_exactly_the_allowed_presets() {
        let presets: CommandPresets = [
            ("test", CommandPreset::new("cargo", ["test"])),
            ("lint", CommandPreset::new("cargo", ["clippy"])),
            ("fmt", CommandPreset::new("cargo", ["fmt"])),
        ]
        .into_iter()
        .collect();
        let runner = Arc::new(CommandRunner::new(presets, Arc::new(Sandbox::unconfined())));
        let dir = tempfile::tempdir().unwrap();
        let workspace = Arc::new(Workspace::open(dir.path()).unwrap());
        let tool = RunCommand::new(runner.clone(), workspace.clone(), ["test", "lint"]).unwrap();
        assert_eq!(
            tool.definition().parameters,
            json!({
                "type": "object",
                "properties": {"command": {
                    "type": "string",
                    "enum": ["lint", "test"],
                    "description": "The name of the preset command to run."
                }},
                "required": ["command"],
                "additionalProperties": false
            })
        );
        assert!(
            tool.definition()
                .description
                .contains("test (runs `cargo test`")
        );
        assert_eq!(
            RunCommand::new(runner, workspace, ["test", "deploy"]).err(),
            Some(SelectionError::UnknownCommand("deploy".to_owned()))
        );
    }
}
