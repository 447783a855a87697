//! Who a command runs as. A command never has the server's own user when
//! the server is root: it runs under `[sandbox] uid`/`gid` (by default
//! 65534, Debian's `nobody`/`nogroup`), so files only root may read
//! (`/etc/shadow`, `/root`) are out of its reach whatever Landlock allows,
//! and its supplementary groups are dropped. A server that is not root
//! gives its commands its own unprivileged user (the start-up log says so).
//!
//! The command still owns its workspace: before each command starts, what
//! the server wrote there since (seeded files, `write_file`, a copied
//! workspace) is handed to the command's user. The server, root, still
//! reads and removes whatever a command wrote (the workspace download,
//! retention). The walk goes by directory descriptors, each component
//! opened relative to its parent with `O_NOFOLLOW` and changed through that
//! descriptor, never by name, so a link a command planted is changed itself
//! and never followed; a file with several hard links is left as it is (it
//! could be a file from elsewhere).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Gid, Mode, OFlags, Uid, chownat, fstat, openat};
use rustix::thread::CapabilitySet;

/// `[sandbox] uid` and `gid` when the config gives none: `nobody` and
/// `nogroup` on Debian.
pub const DEFAULT_UID: u32 = 65534;
pub const DEFAULT_GID: u32 = 65534;

/// Most directories deep a workspace is walked (deeper ones are left as
/// they are: a command made them, and owns them already).
const MAX_DEPTH: usize = 256;

/// The user and group a command runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

impl RunAs {
    /// The user commands run as under this server: `configured` when the
    /// server is root (it alone can give a command another user), else
    /// `None`, the server's own (unprivileged) user.
    pub fn for_this_server(configured: RunAs) -> Option<RunAs> {
        let able = rustix::process::geteuid().is_root()
            && [
                CapabilitySet::CHOWN,
                CapabilitySet::SETUID,
                CapabilitySet::SETGID,
            ]
            .into_iter()
            .all(has_capability);
        able.then_some(configured)
    }

    pub(super) fn uid(self) -> Uid {
        Uid::from_raw(self.uid)
    }

    pub(super) fn gid(self) -> Gid {
        Gid::from_raw(self.gid)
    }
}

/// Whether this process has `capability` in its effective set (a root
/// server in a container may lack some).
pub(super) fn has_capability(capability: CapabilitySet) -> bool {
    rustix::thread::capabilities(None).is_ok_and(|sets| sets.effective.contains(capability))
}

const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

const ANY: OFlags = OFlags::PATH.union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Gives `root` and everything beneath it that `owner` does not own yet to
/// `owner`. Returns how many entries were changed. A missing `root`
/// changes nothing.
pub(super) fn hand_over(root: &Path, owner: RunAs) -> io::Result<u64> {
    let dir = match openat(rustix::fs::CWD, root, DIR, Mode::empty()) {
        Ok(dir) => dir,
        Err(rustix::io::Errno::NOENT) => return Ok(0),
        Err(error) => return Err(error.into()),
    };
    let mut changed = 0;
    give(&dir, owner, &mut changed)?;
    walk(&dir, 0, owner, &mut changed)?;
    Ok(changed)
}

/// Hands over what `dir` holds, depth first, so that at most two
/// descriptors a level are open however wide a directory is.
fn walk(dir: &OwnedFd, depth: usize, owner: RunAs, changed: &mut u64) -> io::Result<()> {
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        // What it is now, from the descriptor, whatever the entry said
        // (some filesystems do not say).
        let fd = match openat(dir, name, ANY, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => continue, // gone meanwhile
            Err(error) => return Err(error.into()),
        };
        let is_dir = give(&fd, owner, changed)?;
        if !is_dir || depth >= MAX_DEPTH {
            continue;
        }
        let sub = match openat(dir, name, DIR, Mode::empty()) {
            Ok(sub) => sub,
            // Gone, or replaced by a link or a file meanwhile: not walked.
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        walk(&sub, depth + 1, owner, changed)?;
    }
    Ok(())
}

/// Gives what `fd` refers to (itself, never what a link points to) to
/// `owner`, unless it has it already or is a file with other names.
/// Returns whether it is a directory.
fn give(fd: &OwnedFd, owner: RunAs, changed: &mut u64) -> io::Result<bool> {
    let stat = fstat(fd)?;
    let is_dir = FileType::from_raw_mode(stat.st_mode) == FileType::Directory;
    if stat.st_uid == owner.uid && stat.st_gid == owner.gid {
        return Ok(is_dir);
    }
    if !is_dir && stat.st_nlink > 1 {
        return Ok(is_dir);
    }
    chownat(
        fd.as_fd(),
        c"",
        Some(owner.uid()),
        Some(owner.gid()),
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
    )?;
    *changed += 1;
    Ok(is_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn owner_of(path: &Path) -> (u32, u32) {
        let meta = std::fs::symlink_metadata(path).unwrap();
        (meta.uid(), meta.gid())
    }

    #[test]
    fn a_tree_is_handed_over_without_following_links_or_hard_links() {
        if !rustix::process::geteuid().is_root() {
            return; // only root can give files away
        }
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("secret.txt");
        std::fs::write(&target, "root's").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f.py"), "x").unwrap();
        std::os::unix::fs::symlink(&target, root.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("dirlink")).unwrap();
        std::fs::hard_link(&target, root.join("hard")).unwrap();
        let owner = RunAs {
            uid: 65534,
            gid: 65534,
        };

        let changed = hand_over(&root, owner).unwrap();

        for path in ["", "a", "a/b", "a/b/f.py", "link", "dirlink"] {
            assert_eq!(owner_of(&root.join(path)), (65534, 65534), "{path}");
        }
        assert_eq!(changed, 6);
        // What the links lead to is untouched, and so is the hard link's file.
        assert_eq!(owner_of(&target), (0, 0));
        assert_eq!(owner_of(outside.path()), (0, 0));
        // Again: nothing left to change.
        assert_eq!(hand_over(&root, owner).unwrap(), 0);
        assert_eq!(hand_over(&dir.path().join("missing"), owner).unwrap(), 0);
    }
}
