//! What a command sees of the filesystem's layout: its workspace at
//! `/workspace`, its private temporary directory at `/tmp`, and a private
//! `/dev/shm` (Python's `multiprocessing`, Node's workers), in a mount
//! namespace of its own. No path of the server's layout (its
//! `workspaces_dir`, a run's id) appears in what a command prints, and no
//! two commands share a `/tmp` or a `/dev/shm`.
//!
//! The private directories are bind mounts of directories the server made
//! for the command (inside its TMPDIR), so the Landlock rules that grant
//! them, which hold the directories' inodes, hold there too. Making a mount
//! namespace takes `CAP_SYS_ADMIN`: a root server has it; elsewhere the
//! command runs at the real paths (the start-up log says so).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::mount::{MountPropagationFlags, mount_bind, mount_bind_recursive, mount_change};
use rustix::thread::UnshareFlags;

/// Where a command sees its workspace.
pub const WORKSPACE: &str = "/workspace";
/// Where a command sees its private temporary directory (its `TMPDIR`),
/// unless one of its read paths lies under the server's `/tmp`.
pub const TMP: &str = "/tmp";
/// Shared memory, private to the command.
const SHM: &str = "/dev/shm";

/// Whether commands can be given the layout on this machine: the server
/// may make mount namespaces (root), and `/workspace`, the mount point,
/// exists (a root server makes it, empty, when it is missing).
pub fn available() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("a mount namespace needs a root server".into());
    }
    if !super::identity::has_capability(rustix::thread::CapabilitySet::SYS_ADMIN) {
        return Err("the server lacks CAP_SYS_ADMIN (a container's root)".into());
    }
    match std::fs::create_dir(WORKSPACE) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(format!("{WORKSPACE} cannot be made: {error}")),
    }
    if !Path::new(WORKSPACE).is_dir() {
        return Err(format!("{WORKSPACE} is not a directory"));
    }
    Ok(())
}

/// One command's mounts, prepared before the fork (the child may not
/// allocate).
#[derive(Debug)]
pub(super) struct Layout {
    workspace: CString,
    /// `None` when the command must read something under the server's
    /// `/tmp` (a read path there, as a checkout under `/tmp` has): its
    /// TMPDIR is then its private directory at its real path.
    tmp: Option<CString>,
    /// `None` where the machine has no `/dev/shm` to cover.
    shm: Option<CString>,
}

impl Layout {
    /// The mounts of a command whose workspace is `workspace` and whose
    /// private directories are `tmp` (bound at `/tmp` when given) and `shm`.
    pub(super) fn new(workspace: &Path, tmp: Option<&Path>, shm: &Path) -> io::Result<Self> {
        // Absolute, from the server's working directory: the child has
        // already changed into the workspace when it mounts.
        let c = |path: &Path| {
            let path = std::path::absolute(path)?;
            CString::new(path.as_os_str().as_bytes())
                .map_err(|_| io::Error::other("a NUL in a path"))
        };
        Ok(Self {
            workspace: c(workspace)?,
            tmp: tmp.map(c).transpose()?,
            shm: Path::new(SHM).is_dir().then(|| c(shm)).transpose()?,
        })
    }

    /// Runs in the forked child, while it still has its capabilities:
    /// system calls only.
    pub(super) fn apply(&self) -> io::Result<()> {
        // SAFETY: the child has one thread, and no file table is unshared.
        #[allow(unsafe_code)]
        unsafe {
            // Its own System V IPC and POSIX message queues too: commands
            // share a user, and Landlock does not cover those.
            rustix::thread::unshare_unsafe(UnshareFlags::NEWNS | UnshareFlags::NEWIPC)?;
        }
        // Nothing mounted here reaches the server's namespace.
        mount_change(
            c"/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        )?;
        // `/tmp` last: the sources may lie under the server's `/tmp`.
        mount_bind_recursive(self.workspace.as_c_str(), c"/workspace")?;
        if let Some(shm) = &self.shm {
            mount_bind(shm.as_c_str(), c"/dev/shm")?;
        }
        if let Some(tmp) = &self.tmp {
            mount_bind(tmp.as_c_str(), c"/tmp")?;
        }
        rustix::process::chdir(c"/workspace")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_made_absolute_before_the_child_changes_directory() {
        let layout = Layout::new(
            Path::new("data/workspaces/run"),
            Some(Path::new("tmp")),
            Path::new("/x/shm"),
        )
        .unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            layout.workspace.to_str().unwrap(),
            cwd.join("data/workspaces/run").to_str().unwrap()
        );
        assert!(layout.tmp.unwrap().to_str().unwrap().starts_with('/'));
    }
}
