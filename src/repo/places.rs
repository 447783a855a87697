//! Where the trees beside the runs' workspaces are kept, in the workspaces'
//! directory (so that replicas sharing it share them too), under names
//! that are never a run id (a UUID):
//!
//! - `.bases/ID`: the tree a run started from. Copied once it is seeded,
//!   before the run's first step, when it started from more than its
//!   request's files (a clone, an upload, a run it continues); on its first
//!   write when it started from its files alone (until then its workspace
//!   is that tree); never when it started empty (the empty tree).
//! - `.uploads/ID`: an upload, unpacked (checked once, when it came).
//!
//! A directory being made is `NAME.partial` until it is complete, then
//! renamed: whoever finds `NAME` finds it whole.

use std::path::{Path, PathBuf};

use uuid::Uuid;

/// Starting trees.
pub const BASES_DIR: &str = ".bases";
/// Unpacked uploads.
pub const UPLOADS_DIR: &str = ".uploads";

/// The starting tree of the run `id`.
pub fn base(workspaces: &Path, id: Uuid) -> PathBuf {
    workspaces.join(BASES_DIR).join(id.to_string())
}

/// The unpacked upload `id`.
pub fn upload(workspaces: &Path, id: Uuid) -> PathBuf {
    workspaces.join(UPLOADS_DIR).join(id.to_string())
}

/// Where `complete` is made before it is renamed into place.
pub fn partial(complete: &Path) -> PathBuf {
    let mut name = complete.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Removes a tree, giving directories whose write permission a command
/// took away their permission back first. Missing is fine.
pub fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            writable(dir);
            std::fs::remove_dir_all(dir)
        }
        Err(error) => Err(error),
    }
}

/// Makes every directory under `dir` (itself included) writable by its
/// owner again, never following a link.
pub fn writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode();
    if mode & 0o700 != 0o700 {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o700));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            writable(&entry.path());
        }
    }
}
