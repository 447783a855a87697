//! Reading directories of a workspace: one directory's entries, and walks
//! of a tree below it, never following a link.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, openat, statat};
use rustix::io::Errno;

use super::error::WorkspaceError;
use super::workspace::{EntryKind, FileInfo, MAX_LIST_DEPTH};

/// Most directory entries one walk of a tree reads: what a command left in
/// a workspace (a million empty files) sizes neither the time nor the
/// memory of a listing, a search or a suggestion.
pub const MAX_WALK_ENTRIES: usize = 200_000;

/// How many directory entries a walk may still read, and whether it had
/// to leave some unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Budget {
    left: usize,
    cut: bool,
}

impl Budget {
    pub(super) fn new(entries: usize) -> Self {
        Self {
            left: entries,
            cut: false,
        }
    }

    /// Whether some entry went unread.
    pub(super) fn cut(&self) -> bool {
        self.cut
    }

    /// Takes one entry; `false` when none is left.
    fn take(&mut self) -> bool {
        if self.left == 0 {
            self.cut = true;
            return false;
        }
        self.left -= 1;
        true
    }
}

/// A directory's entries (at most what `budget` has left), with the kind
/// from the directory itself when the filesystem reports it and from an
/// `fstatat` that does not follow links otherwise.
pub(super) fn read_entries(
    dir: OwnedFd,
    budget: &mut Budget,
) -> Result<Vec<(String, EntryKind)>, Errno> {
    let mut stream = Dir::new(dir)?;
    let mut entries = Vec::new();
    while let Some(entry) = stream.read() {
        let entry = entry?;
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
        }
        if !budget.take() {
            break;
        }
        let file_type = match entry.file_type() {
            FileType::Unknown => {
                let fd = stream.fd()?;
                match statat(fd, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                    // Removed since the directory was read.
                    Err(Errno::NOENT) => continue,
                    Err(errno) => return Err(errno),
                }
            }
            known => known,
        };
        let kind = match file_type {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        };
        entries.push((String::from_utf8_lossy(raw).into_owned(), kind));
    }
    Ok(entries)
}

/// What a walk meets: a regular file or a directory, by the account of the
/// directory holding it. Links and special files are never shown.
pub(super) enum Found<'a> {
    /// A regular file, to be opened (if at all) from `dir` by `name`, with
    /// `O_NOFOLLOW`: it may have been replaced since the directory was read.
    File {
        dir: BorrowedFd<'a>,
        name: &'a str,
        path: &'a str,
    },
    /// A directory; [`Flow::Skip`] keeps the walk out of it.
    Dir { name: &'a str, path: &'a str },
}

/// What a walk does after a visit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// On, and into the directory just met.
    Continue,
    /// On, but not into the directory just met.
    Skip,
    /// Nothing more.
    Stop,
}

/// Depth-first over `dir` (whose path is `prefix`, `""` for the root),
/// holding one descriptor per level and opening each subdirectory from its
/// parent with `O_NOFOLLOW`. Each directory's entries are taken in the order
/// of their names with a `/` after a directory's, so that the paths met come
/// in the order of the paths themselves (`a.txt` before `a/b`), and a walk
/// cut short has met the smallest ones. It reads at most what `budget`
/// allows of the directories' entries (then what is met is not all there
/// is, and `budget` says it was cut). Returns whether it was stopped.
pub(super) fn walk_tree(
    dir: OwnedFd,
    prefix: &str,
    budget: &mut Budget,
    visit: &mut dyn FnMut(Found<'_>) -> Result<Flow, WorkspaceError>,
) -> Result<bool, WorkspaceError> {
    walk_level(dir, prefix, 0, budget, visit)
}

fn walk_level(
    dir: OwnedFd,
    prefix: &str,
    depth: usize,
    budget: &mut Budget,
    visit: &mut dyn FnMut(Found<'_>) -> Result<Flow, WorkspaceError>,
) -> Result<bool, WorkspaceError> {
    if depth > MAX_LIST_DEPTH {
        return Err(WorkspaceError::TooDeep {
            limit: MAX_LIST_DEPTH,
        });
    }
    let here = if prefix.is_empty() { "." } else { prefix };
    let failed = |errno: Errno| WorkspaceError::Io {
        path: here.to_owned(),
        source: errno.into(),
    };
    let base = rustix::io::dup(&dir).map_err(failed)?;
    let mut entries: Vec<(String, EntryKind)> = read_entries(dir, budget)
        .map_err(failed)?
        .into_iter()
        .filter(|(_, kind)| matches!(kind, EntryKind::File | EntryKind::Dir))
        .collect();
    entries.sort_by_cached_key(|(name, kind)| match kind {
        EntryKind::Dir => format!("{name}/"),
        _ => name.clone(),
    });
    for (name, kind) in entries {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        if kind == EntryKind::File {
            let found = Found::File {
                dir: base.as_fd(),
                name: &name,
                path: &path,
            };
            if visit(found)? == Flow::Stop {
                return Ok(true);
            }
            continue;
        }
        match visit(Found::Dir {
            name: &name,
            path: &path,
        })? {
            Flow::Stop => return Ok(true),
            Flow::Skip => continue,
            Flow::Continue => {}
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match openat(&base, name.as_str(), flags, Mode::empty()) {
            Ok(sub) => {
                if walk_level(sub, &path, depth + 1, budget, visit)? {
                    return Ok(true);
                }
            }
            // Replaced by a link or removed since the directory was read.
            Err(Errno::NOTDIR | Errno::LOOP | Errno::NOENT) => {}
            Err(errno) => return Err(failed(errno)),
        }
    }
    Ok(false)
}

/// The regular files below `dir` with their sizes, in the order of their
/// paths, at most `limit` of them; returns whether there were more (or
/// entries the budget left unread).
pub(super) fn collect_files(
    dir: OwnedFd,
    limit: usize,
    files: &mut Vec<FileInfo>,
) -> Result<bool, WorkspaceError> {
    let mut budget = Budget::new(MAX_WALK_ENTRIES);
    let mut more = false;
    walk_tree(dir, "", &mut budget, &mut |found| {
        let Found::File { dir, name, path } = found else {
            return Ok(Flow::Continue);
        };
        if files.len() >= limit {
            more = true;
            return Ok(Flow::Stop);
        }
        match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {
                files.push(FileInfo {
                    path: path.to_owned(),
                    size: u64::try_from(stat.st_size).unwrap_or(0),
                });
            }
            // Replaced or removed since the directory was read.
            Ok(_) | Err(Errno::NOENT) => {}
            Err(errno) => {
                return Err(WorkspaceError::Io {
                    path: path.to_owned(),
                    source: errno.into(),
                });
            }
        }
        Ok(Flow::Continue)
    })?;
    Ok(more || budget.cut())
}
