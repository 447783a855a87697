//! The `run_command` tool of one run.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{CommandError, CommandRunner, MAX_OUTPUT_CHARS, RUN_COMMAND};
use crate::harness::{Tool, ToolDefinition, ToolError, ToolRole};
use crate::tools::SelectionError;
use crate::tools::definitions::shared;
use crate::tools::run_workspace::RunWorkspace;

/// The `run_command` tool of one run: the presets that run allows, run in its
/// workspace.
pub struct RunCommand {
    runner: Arc<CommandRunner>,
    workspace: Arc<RunWorkspace>,
    allowed: Vec<String>,
    definition: Arc<ToolDefinition>,
}

impl RunCommand {
    /// `allowed` must name presets of `runner`; the first that does not is
    /// the error. The model sees exactly the allowed names as the enum of
    /// `command`.
    pub fn new(
        runner: Arc<CommandRunner>,
        workspace: Arc<RunWorkspace>,
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
                let runs = std::iter::once(preset.program.as_str())
                    .chain(preset.args.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ");
                let what = match &preset.description {
                    Some(description) => format!("{name}: {}", description.trim()),
                    None => name.clone(),
                };
                Some(format!(
                    "- {what} (runs `{runs}`, timeout {} ms)",
                    preset.timeout_ms
                ))
            })
            .collect();
        let description = format!(
            "Run one of the server's preset commands in the workspace: you pick a preset by \
             name and cannot pass it arguments; it runs with no shell and no stdin. Use it to \
             build, test or run your work and check that it does what was asked. Returns \
             {{exit_code, stdout, stderr, timed_out, truncated}} (and signal when a signal \
             ended it); stdout and stderr keep at most {MAX_OUTPUT_CHARS} characters each, \
             and more ends the command. The presets:\n{}",
            if listed.is_empty() {
                "(none)".to_owned()
            } else {
                listed.join("\n")
            }
        );
        // The description names every allowed preset and what it runs, and
        // the schema only those names: the description is the whole key.
        let definition = shared(&description, || ToolDefinition {
            name: RUN_COMMAND.into(),
            description: description.clone(),
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
        });
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
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    fn role(&self) -> ToolRole {
        ToolRole::Checks
    }

    /// The allowed presets marked `check = true`, in name order.
    fn checks_after_change(&self) -> Vec<Value> {
        self.allowed
            .iter()
            .filter(|name| {
                self.runner
                    .presets()
                    .get(name)
                    .is_some_and(|preset| preset.check)
            })
            .map(|name| json!({ "command": name }))
            .collect()
    }

    /// As its preset is marked (`idempotent = true`).
    fn idempotent(&self, arguments: &Value) -> bool {
        arguments
            .get("command")
            .and_then(Value::as_str)
            .and_then(|name| self.runner.presets().get(name))
            .is_some_and(|preset| preset.idempotent)
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
        // A command may write anywhere in the workspace: it gets the run's
        // own directory, made now if nothing made it before.
        let workspace = Arc::clone(&self.workspace);
        let opened = tokio::task::spawn_blocking(move || workspace.for_writing())
            .await
            .map_err(|_| ToolError::new("The command was stopped before it started"))?
            .map_err(|error| {
                tracing::error!(%error, "a run's workspace could not be made");
                ToolError::new(format!("The workspace could not be opened: {error}"))
            })?;
        let output = self.runner.run(name, opened.root(), cancel).await?;
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
            (
                "test",
                CommandPreset::new("cargo", ["test"]).with_description("Runs the unit tests"),
            ),
            ("lint", CommandPreset::new("cargo", ["clippy"])),
            ("fmt", CommandPreset::new("cargo", ["fmt"])),
        ]
        .into_iter()
        .collect();
        let runner = Arc::new(CommandRunner::new(presets, Arc::new(Sandbox::unconfined())));
        let dir = tempfile::tempdir().unwrap();
        let workspace = Arc::new(RunWorkspace::from(
            crate::tools::workspace::Workspace::open(dir.path()).unwrap(),
        ));
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
        let description = &tool.definition().description;
        assert!(
            description.ends_with(
                "The presets:\n- lint (runs `cargo clippy`, timeout 10000 ms)\n\
                 - test: Runs the unit tests (runs `cargo test`, timeout 10000 ms)"
            ),
            "{description}"
        );
        assert_eq!(
            RunCommand::new(runner, workspace, ["test", "deploy"]).err(),
            Some(SelectionError::UnknownCommand("deploy".to_owned()))
        );
    }
}
