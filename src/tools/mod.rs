//! The built-in tools a run can use, and the confinement they work under.
//!
//! - [`workspace`]: a run's workspace directory, with race-free confined
//!   reads, writes and listings.
//! - [`files`]: the `read_file`, `write_file` and `list_dir` tools.
//! - [`path`]: workspace-relative paths, checked once at the edge.
//! - [`error`]: why a workspace operation was refused.

mod confine;
pub mod error;
pub mod files;
pub mod path;
pub mod workspace;

pub use confine::Resolver;
pub use error::WorkspaceError;
pub use files::{ListDir, ReadFile, WriteFile};
pub use path::RelativePath;
pub use workspace::{DirEntry, EntryKind, FileInfo, Workspace, WorkspaceOptions};
