//! The built-in tools a run can use, and the confinement they work under.
//!
//! - [`workspace`]: a run's workspace directory, with race-free confined
//!   reads, writes and listings.
//! - [`confine`]: how a path is opened beneath the root: `openat2` or an
//!   `openat` walk, never following a symbolic link.
//! - [`path`]: workspace-relative paths, checked once at the edge.
//! - [`error`]: why a workspace operation was refused.
//! - [`files`]: the `read_file`, `write_file` and `list_dir` tools.
//! - [`edit`]: the `edit_file` tool.
//! - [`patch`]: the `apply_patch` tool.
//! - [`search`]: the `search` tool.
//! - [`suggest`]: the paths a "no such file" error suggests, and the lines
//!   an error about text not found in a file shows.
//! - [`text`]: windows of lines, numbered lines, long lines cut.
//! - [`command`]: command presets and the `run_command` tool.
//! - [`sandbox`]: what a command can touch (Landlock, seccomp, limits), and
//!   its process tree, kept together so the whole of it can be killed.
//!
//! The service builds one [`CommandRunner`] (with [`Sandbox::detect`]) at
//! start, opens a [`Workspace`] per run, and hands the run
//! [`builtin_tools`].

mod capture;
pub mod command;
pub mod confine;
pub mod copy;
mod definitions;
pub mod edit;
pub mod error;
pub mod files;
mod listing;
pub mod patch;
pub mod path;
pub mod run_workspace;
pub mod sandbox;
pub mod search;
pub mod suggest;
pub mod text;
pub mod workspace;

use std::sync::Arc;

pub use command::{
    CommandError, CommandOutput, CommandPreset, CommandPresets, CommandRunner, RunCommand,
};
pub use confine::Resolver;
pub use edit::EditFile;
pub use error::WorkspaceError;
pub use files::{ListDir, ReadFile, WriteFile};
pub use listing::MAX_WALK_ENTRIES;
pub use patch::ApplyPatch;
pub use path::RelativePath;
pub use run_workspace::{RunWorkspace, Workspaces};
pub use sandbox::{
    CommandPolicy, Containment, ContainmentKind, Sandbox, SandboxConfig, SandboxMode, SandboxReport,
};
pub use search::Search;
pub use workspace::{DirEntry, EntryKind, FileInfo, FileListing, Workspace, WorkspaceOptions};

use crate::harness::Tool;

/// Every built-in tool, in the order they are offered.
pub const BUILTIN_TOOL_NAMES: [&str; 7] = [
    files::READ_FILE,
    files::WRITE_FILE,
    edit::EDIT_FILE,
    patch::APPLY_PATCH,
    files::LIST_DIR,
    search::SEARCH,
    command::RUN_COMMAND,
];

/// A run asked for something the server does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error(
        "Unknown tool: {0} (built-in tools: read_file, write_file, edit_file, apply_patch, list_dir, search, run_command)"
    )]
    UnknownTool(String),
    #[error("Unknown command: {0} (not a preset configured on the server)")]
    UnknownCommand(String),
}

/// The tools of one run: the built-ins named in `tools` (in the order given,
/// each once) over `workspace`, with `run_command` offering exactly the
/// presets named in `commands`. Every name is checked, whether or not
/// `run_command` is selected.
pub fn builtin_tools(
    workspace: Arc<RunWorkspace>,
    runner: Arc<CommandRunner>,
    tools: &[impl AsRef<str>],
    commands: &[impl AsRef<str>],
) -> Result<Vec<Arc<dyn Tool>>, SelectionError> {
    if let Some(unknown) = commands
        .iter()
        .map(AsRef::as_ref)
        .find(|name| !runner.presets().contains(name))
    {
        return Err(SelectionError::UnknownCommand(unknown.to_owned()));
    }
    let mut selected: Vec<Arc<dyn Tool>> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for name in tools.iter().map(AsRef::as_ref) {
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        let tool: Arc<dyn Tool> = match name {
            files::READ_FILE => Arc::new(ReadFile::new(workspace.clone())),
            files::WRITE_FILE => Arc::new(WriteFile::new(workspace.clone())),
            edit::EDIT_FILE => Arc::new(EditFile::new(workspace.clone())),
            patch::APPLY_PATCH => Arc::new(ApplyPatch::new(workspace.clone())),
            files::LIST_DIR => Arc::new(ListDir::new(workspace.clone())),
            search::SEARCH => Arc::new(Search::new(workspace.clone())),
            command::RUN_COMMAND => Arc::new(RunCommand::new(
                runner.clone(),
                workspace.clone(),
                commands.iter().map(AsRef::as_ref),
            )?),
            other => return Err(SelectionError::UnknownTool(other.to_owned())),
        };
        selected.push(tool);
    }
    Ok(selected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::ToolRegistry;

    fn runner() -> Arc<CommandRunner> {
        let presets = [("test", CommandPreset::new("true", Vec::<String>::new()))]
            .into_iter()
            .collect();
        Arc::new(CommandRunner::new(presets, Arc::new(Sandbox::unconfined())))
    }

    #[test]
    fn all_builtins_register_with_valid_schemas() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Arc::new(RunWorkspace::from(Workspace::open(dir.path()).unwrap()));
        for commands in [vec!["test"], vec![]] {
            let tools =
                builtin_tools(workspace.clone(), runner(), &BUILTIN_TOOL_NAMES, &commands).unwrap();
            let registry = ToolRegistry::new(tools).unwrap();
            let names: Vec<_> = registry
                .definitions()
                .iter()
                .map(|d| d.name.as_str())
                .collect();
            assert_eq!(names, BUILTIN_TOOL_NAMES);
        }
    }

    #[test]
    fn a_subset_is_given_in_order_and_unknown_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Arc::new(RunWorkspace::from(Workspace::open(dir.path()).unwrap()));
        let tools = builtin_tools(
            workspace.clone(),
            runner(),
            &["list_dir", "read_file", "list_dir"],
            &[] as &[&str],
        )
        .unwrap();
        let names: Vec<_> = tools.iter().map(|t| t.definition().name.clone()).collect();
        assert_eq!(names, ["list_dir", "read_file"]);
        assert_eq!(
            builtin_tools(workspace.clone(), runner(), &["shell"], &[] as &[&str]).err(),
            Some(SelectionError::UnknownTool("shell".into()))
        );
        assert_eq!(
            builtin_tools(workspace, runner(), &["read_file"], &["deploy"]).err(),
            Some(SelectionError::UnknownCommand("deploy".into()))
        );
    }
}
