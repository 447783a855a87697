//! The built-in tools a run can use, and the confinement they work under.
//!
//! - [`workspace`]: a run's workspace directory, with race-free confined
//!   reads, writes and listings.
//! - [`path`]: workspace-relative paths, checked once at the edge.
//! - [`error`]: why a workspace operation was refused.
//! - [`files`]: the `read_file`, `write_file` and `list_dir` tools.
//! - [`command`]: command presets and the `run_command` tool.
//! - [`process_tree`]: a cgroup v2 and a process group per command, so the
//!   whole tree can be killed.
//!
//! The service builds one [`CommandRunner`] (with [`Containment::detect`]) at
//! start and opens a [`Workspace`] per run.

mod capture;
pub mod command;
mod confine;
pub mod error;
pub mod files;
pub mod path;
pub mod process_tree;
pub mod workspace;

pub use command::{
    CommandError, CommandOutput, CommandPreset, CommandPresets, CommandRunner, RunCommand,
};
pub use confine::Resolver;
pub use error::WorkspaceError;
pub use files::{ListDir, ReadFile, WriteFile};
pub use path::RelativePath;
pub use process_tree::{Containment, ContainmentKind};
pub use workspace::{DirEntry, EntryKind, FileInfo, Workspace, WorkspaceOptions};
