//! Who a command runs as. A command never has the server's own user when
//! the server is root: it runs under its run's uid of `[sandbox] uids`
//! ([`super::uids`]), so files only root may read (`/etc/shadow`, `/root`)
//! are out of its reach whatever Landlock allows, and its supplementary
//! groups are dropped. A server that is not root gives its commands its own
//! unprivileged user (the start-up log says so).
//!
//! The command still owns its workspace: before each command starts, what
//! the server wrote there since (seeded files, `write_file`, a copied
//! workspace) is handed to the command's user. The server, root, still
//! reads and removes whatever a command wrote (the workspace download,
//! retention). The walk goes by directory descriptors, each component
//! opened relative to its parent with `O_NOFOLLOW` and changed through that
//! descriptor, never by name, so a link a command planted is changed itself
//! and never followed; a file with several hard links is left as it is (it
//! could be a file from elsewhere). The walk reads at most
//! [`MAX_HAND_OVER_ENTRIES`] entries (what a command left there, a million
//! empty files, does not hold up every later command): past them the rest
//! keeps its owner, and the log says so.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Gid, Mode, OFlags, Uid, chownat, fstat, openat};
use rustix::thread::CapabilitySet;

/// Most directories deep a workspace is walked (deeper ones are left as
/// they are: a command made them, and owns them already).
const MAX_DEPTH: usize = 256;

/// Most directory entries one hand-over reads.
pub const MAX_HAND_OVER_ENTRIES: u64 = 200_000;

/// The user and group a command runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// Whether this server can give its commands users of their own: it is
/// root with `CAP_SETUID`, `CAP_SETGID` and `CAP_CHOWN`.
pub fn can_give_users() -> bool {
    rustix::process::geteuid().is_root()
        && [
            CapabilitySet::CHOWN,
            CapabilitySet::SETUID,
            CapabilitySet::SETGID,
        ]
        .into_iter()
        .all(has_capability)
}

impl RunAs {
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

/// How a hand-over went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct HandedOver {
    /// Entries given to the new owner.
    pub changed: u64,
    /// Entries read.
    pub read: u64,
    /// The walk stopped at [`MAX_HAND_OVER_ENTRIES`].
    pub cut: bool,
}

/// Gives `root` and everything beneath it that `owner` does not own yet to
/// `owner`, reading at most `max_entries` directory entries. A missing
/// `root` changes nothing.
pub(super) fn hand_over(root: &Path, owner: RunAs, max_entries: u64) -> io::Result<HandedOver> {
    let dir = match openat(rustix::fs::CWD, root, DIR, Mode::empty()) {
        Ok(dir) => dir,
        Err(rustix::io::Errno::NOENT) => return Ok(HandedOver::default()),
        Err(error) => return Err(error.into()),
    };
    let mut done = HandedOver::default();
    give(&dir, owner, &mut done.changed)?;
    walk(&dir, 0, owner, max_entries, &mut done)?;
    Ok(done)
}

/// Hands over what `dir` holds, depth first, so that at most two
/// descriptors a level are open however wide a directory is.
fn walk(
    dir: &OwnedFd,
    depth: usize,
    owner: RunAs,
    max_entries: u64,
    done: &mut HandedOver,
) -> io::Result<()> {
    for entry in Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if done.read >= max_entries {
            done.cut = true;
            return Ok(());
        }
        done.read += 1;
        let changed = &mut done.changed;
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
        walk(&sub, depth + 1, owner, max_entries, done)?;
        if done.cut {
            return Ok(());
        }
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

        let done = hand_over(&root, owner, MAX_HAND_OVER_ENTRIES).unwrap();

        for path in ["", "a", "a/b", "a/b/f.py", "link", "dirlink"] {
            assert_eq!(owner_of(&root.join(path)), (65534, 65534), "{path}");
        }
        assert_eq!((done.changed, done.cut), (6, false));
        // What the links lead to is untouched, and so is the hard link's file.
        assert_eq!(owner_of(&target), (0, 0));
        assert_eq!(owner_of(outside.path()), (0, 0));
        // Again: nothing left to change.
        assert_eq!(
            hand_over(&root, owner, MAX_HAND_OVER_ENTRIES)
                .unwrap()
                .changed,
            0
        );
        let missing = dir.path().join("missing");
        assert_eq!(
            hand_over(&missing, owner, MAX_HAND_OVER_ENTRIES).unwrap(),
            HandedOver::default()
        );
        // A bounded walk reads no more than it may, and says it stopped.
        let other = RunAs {
            uid: 1234,
            gid: 1234,
        };
        let done = hand_over(&root, other, 2).unwrap();
        assert_eq!((done.read, done.cut), (2, true));
    }
}
