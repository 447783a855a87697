//! The entries of a tree (a workspace, a starting tree), walked by
//! descriptors: every component opened relative to its parent with
//! `O_NOFOLLOW`, and judged by what `fstat` says it is, never by its name.
//! A run may still be changing its workspace (a command left running), so
//! reading a file again later walks its path the same way: a directory
//! swapped for a link meanwhile is refused, never followed out.
//!
//! Regular files, directories and symbolic links are seen; other special
//! files are left out, and so is what cannot be read.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Dir, FileType, Mode, OFlags, fstat, openat, readlinkat};
use rustix::io::Errno;

/// Most entries a walk takes (as a copy does).
pub const MAX_ENTRIES: usize = crate::tools::copy::MAX_ENTRIES as usize;

/// Deepest a walk goes (a descriptor and a stack frame per level).
pub const MAX_DEPTH: usize = crate::tools::copy::MAX_DEPTH;

const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);
const FILE: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC);

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File { executable: bool },
    Dir,
    Symlink,
}

impl Kind {
    /// The mode git writes for it (a directory is never written: git
    /// has files only).
    pub fn git_mode(self) -> &'static str {
        match self {
            Kind::File { executable: true } => "100755",
            Kind::File { executable: false } => "100644",
            Kind::Symlink => "120000",
            Kind::Dir => "040000",
        }
    }
}

/// An entry's kind and size (a link's: its target's length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    pub size: u64,
}

/// A tree opened for reading: its entries by path (relative, `/`-joined
/// bytes, sorted), and the root's descriptor to read them from.
#[derive(Debug)]
pub struct Tree {
    root: Option<OwnedFd>,
    pub entries: BTreeMap<Vec<u8>, Meta>,
}

/// Why a tree could not be walked.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("the tree holds more than {MAX_ENTRIES} entries")]
    TooLarge,
    #[error("the tree is deeper than {MAX_DEPTH} directories")]
    TooDeep,
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl Tree {
    /// An empty tree.
    pub fn empty() -> Self {
        Self {
            root: None,
            entries: BTreeMap::new(),
        }
    }

    /// Walks the tree at `dir` (a missing one is empty), leaving out the
    /// `.git` directory at its top unless `with_git`.
    pub fn walk(dir: &Path, with_git: bool) -> Result<Self, TreeError> {
        let root = match openat(rustix::fs::CWD, dir, DIR, Mode::empty()) {
            Ok(root) => root,
            Err(Errno::NOENT) => return Ok(Self::empty()),
            Err(error) => return Err(TreeError::Io(error.into())),
        };
        let mut entries = BTreeMap::new();
        let mut prefix = Vec::new();
        walk_dir(&root, &mut prefix, 0, with_git, &mut entries)?;
        Ok(Self {
            root: Some(root),
            entries,
        })
    }

    /// Opens the regular file at `path`, walking each component without
    /// following links.
    pub fn open_file(&self, path: &[u8]) -> io::Result<File> {
        let (parent, name) = self.open_parent(path)?;
        let file = openat(&parent, name, FILE, Mode::empty())?;
        let stat = fstat(&file)?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(io::Error::other("no longer a regular file"));
        }
        Ok(File::from(file))
    }

    /// The bytes of the file at `path` (at most `max` of them: more is an
    /// error), or the target of the link at `path`.
    pub fn read(&self, path: &[u8], kind: Kind, max: u64) -> io::Result<Vec<u8>> {
        if kind == Kind::Symlink {
            let (parent, name) = self.open_parent(path)?;
            return Ok(readlinkat(&parent, name, Vec::new())?.into_bytes());
        }
        let mut bytes = Vec::new();
        self.open_file(path)?
            .take(max.saturating_add(1))
            .read_to_end(&mut bytes)?;
        if bytes.len() as u64 > max {
            return Err(io::Error::other("larger than it was"));
        }
        Ok(bytes)
    }

    fn open_parent<'p>(&self, path: &'p [u8]) -> io::Result<(OwnedFd, &'p OsStr)> {
        let root = self
            .root
            .as_ref()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let mut names = path.split(|byte| *byte == b'/');
        let last = names.next_back().unwrap_or_default();
        let mut dir = openat(root, ".", DIR, Mode::empty())?;
        for name in names {
            dir = openat(&dir, OsStr::from_bytes(name), DIR, Mode::empty())?;
        }
        Ok((dir, OsStr::from_bytes(last)))
    }
}

fn walk_dir(
    dir: &OwnedFd,
    prefix: &mut Vec<u8>,
    depth: usize,
    with_git: bool,
    entries: &mut BTreeMap<Vec<u8>, Meta>,
) -> Result<(), TreeError> {
    if depth > MAX_DEPTH {
        return Err(TreeError::TooDeep);
    }
    let listing = Dir::read_from(dir).map_err(|e| TreeError::Io(e.into()))?;
    for entry in listing {
        let entry = entry.map_err(|e| TreeError::Io(e.into()))?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." || (!with_git && prefix.is_empty() && name == b".git") {
            continue;
        }
        if entries.len() >= MAX_ENTRIES {
            return Err(TreeError::TooLarge);
        }
        let length = prefix.len();
        if length > 0 {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(name);
        let name = OsStr::from_bytes(name);
        let seen = match openat(dir, name, FILE, Mode::empty()) {
            // A link: O_NOFOLLOW refuses to open it.
            Err(Errno::LOOP) => match readlinkat(dir, name, Vec::new()) {
                Ok(target) => Some(Meta {
                    kind: Kind::Symlink,
                    size: target.as_bytes().len() as u64,
                }),
                Err(Errno::NOENT) => None,
                Err(error) => return Err(TreeError::Io(error.into())),
            },
            // Gone since it was listed; a FIFO with no writer, a socket.
            Err(Errno::NOENT | Errno::NXIO | Errno::OPNOTSUPP) => None,
            Err(error) => return Err(TreeError::Io(error.into())),
            Ok(opened) => {
                let stat = fstat(&opened).map_err(|e| TreeError::Io(e.into()))?;
                let size = u64::try_from(stat.st_size).unwrap_or(0);
                match FileType::from_raw_mode(stat.st_mode) {
                    FileType::RegularFile => Some(Meta {
                        kind: Kind::File {
                            executable: stat.st_mode & 0o100 != 0,
                        },
                        size,
                    }),
                    FileType::Directory => Some(Meta {
                        kind: Kind::Dir,
                        size: 0,
                    }),
                    _ => None,
                }
            }
        };
        if let Some(meta) = seen {
            entries.insert(prefix.clone(), meta);
            if meta.kind == Kind::Dir {
                // Opened again as a directory, never through a link; one
                // descriptor (and its listing's) per level.
                let child =
                    openat(dir, name, DIR, Mode::empty()).map_err(|e| TreeError::Io(e.into()))?;
                walk_dir(&child, prefix, depth + 1, with_git, entries)?;
            }
        }
        prefix.truncate(length);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_walk_sees_files_links_and_directories_but_not_the_top_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("src/deep")).unwrap();
        fs::create_dir_all(root.join(".git/objects")).unwrap();
        fs::create_dir_all(root.join("sub/.git")).unwrap();
        fs::write(root.join("src/deep/a.py"), "print(1)\n").unwrap();
        fs::write(root.join("run.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("out")).unwrap();
        let tree = Tree::walk(root, false).unwrap();
        let paths: Vec<&[u8]> = tree.entries.keys().map(Vec::as_slice).collect();
        assert_eq!(
            paths,
            [
                &b"out"[..],
                b"run.sh",
                b"src",
                b"src/deep",
                b"src/deep/a.py",
                b"sub",
                b"sub/.git"
            ]
        );
        assert_eq!(
            tree.entries[&b"run.sh"[..]].kind,
            Kind::File { executable: true }
        );
        assert_eq!(
            tree.read(b"out", Kind::Symlink, 100).unwrap(),
            b"/etc/passwd"
        );
        assert_eq!(
            tree.read(b"src/deep/a.py", Kind::File { executable: false }, 100)
                .unwrap(),
            b"print(1)\n"
        );
        // The link is never followed when a file is read through it.
        assert!(tree.open_file(b"out").is_err());
        assert!(
            Tree::walk(root, true)
                .unwrap()
                .entries
                .contains_key(&b".git"[..])
        );
        assert!(
            Tree::walk(&root.join("missing"), false)
                .unwrap()
                .entries
                .is_empty()
        );
    }
}
