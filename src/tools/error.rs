//! Why a workspace operation was refused or failed.

use std::io;

use crate::harness::ToolError;

/// A refused or failed workspace operation.
///
/// Every message is written for a model (it is shown to one verbatim as a
/// recoverable tool error) and names the path as the caller wrote it, never
/// where the workspace lives on the server. The HTTP layer can match on the
/// variants to pick a status.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(
        "Path is empty: give a path relative to the workspace root (list_dir shows what is there)"
    )]
    EmptyPath,
    #[error("Path is too long: at most {limit} bytes, and 255 bytes per name")]
    PathTooLong { limit: usize },
    #[error("Invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    /// Absolute, or climbs above the root with `..`, or was found to leave the
    /// root while being resolved.
    #[error(
        "Path is outside the workspace: {0} (paths are relative to the workspace root and may not climb above it)"
    )]
    Outside(String),
    /// Files are read and written inside the root, never the root itself.
    #[error("Path is the workspace root itself: name a file inside it")]
    Root,
    /// A symbolic link in any component, pointing inside or not: the workspace
    /// is a plain tree, so a link could only be a way out.
    #[error("Symbolic links are not permitted: {0}")]
    Symlink(String),
    #[error("No such file or directory: {0}")]
    NotFound(String),
    /// `write_file` does not create directories.
    #[error("Parent directory does not exist: {0} (write_file does not create directories)")]
    ParentMissing(String),
    #[error("Not a directory: a component of {0} is a file")]
    NotADirectory(String),
    #[error("Is a directory: {0} (use list_dir to see what it contains)")]
    IsADirectory(String),
    /// A FIFO, socket or device: reading one could block or never end.
    #[error("Not a regular file: {0}")]
    NotRegularFile(String),
    #[error("File is too large: {path} is {size} bytes, the limit is {limit} bytes")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("File is not UTF-8 text: {0} (read_file only returns text)")]
    NotUtf8(String),
    #[error("Permission denied: {0}")]
    PermissionDenied(String),
    #[error("Directories are nested too deeply under the workspace root (more than {limit})")]
    TooDeep { limit: usize },
    /// Anything else the kernel said. The error text carries no path.
    #[error("Could not access {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl PartialEq for WorkspaceError {
    /// Equal when the variant and the message are; an `Io` error compares by
    /// its kind and text, which is all a caller can act on.
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.to_string() == other.to_string()
    }
}

impl From<WorkspaceError> for ToolError {
    fn from(error: WorkspaceError) -> Self {
        ToolError::new(error.to_string())
    }
}
