//! Reading directories of a workspace: one directory's entries, and every
//! regular file below the root, never following a link.

use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, openat, statat};
use rustix::io::Errno;

use super::error::WorkspaceError;
use super::workspace::{EntryKind, FileInfo, MAX_LIST_DEPTH};

/// A directory's entries, with the kind from the directory itself when the
/// filesystem reports it and from an `fstatat` that does not follow links
/// otherwise.
pub(super) fn read_entries(dir: OwnedFd) -> Result<Vec<(String, EntryKind)>, Errno> {
    let mut stream = Dir::new(dir)?;
    let mut entries = Vec::new();
    while let Some(entry) = stream.read() {
        let entry = entry?;
        let raw = entry.file_name().to_bytes();
        if raw == b"." || raw == b".." {
            continue;
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

/// Depth-first over `dir`, holding one descriptor per level and opening each
/// subdirectory from its parent with `O_NOFOLLOW`.
pub(super) fn collect_files(
    dir: OwnedFd,
    prefix: String,
    depth: usize,
    files: &mut Vec<FileInfo>,
) -> Result<(), WorkspaceError> {
    if depth > MAX_LIST_DEPTH {
        return Err(WorkspaceError::TooDeep {
            limit: MAX_LIST_DEPTH,
        });
    }
    let here = if prefix.is_empty() { "." } else { &prefix };
    let failed = |errno: Errno| WorkspaceError::Io {
        path: here.to_owned(),
        source: errno.into(),
    };
    let base = rustix::io::dup(&dir).map_err(failed)?;
    for (name, kind) in read_entries(dir).map_err(failed)? {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        match kind {
            EntryKind::File => match statat(&base, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {
                    files.push(FileInfo {
                        path,
                        size: u64::try_from(stat.st_size).unwrap_or(0),
                    });
                }
                // Replaced or removed since the directory was read.
                Ok(_) | Err(Errno::NOENT) => {}
                Err(errno) => return Err(failed(errno)),
            },
            EntryKind::Dir => {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                match openat(&base, name.as_str(), flags, Mode::empty()) {
                    Ok(sub) => collect_files(sub, path, depth + 1, files)?,
                    // Replaced by a link or removed since the directory was read.
                    Err(Errno::NOTDIR | Errno::LOOP | Errno::NOENT) => {}
                    Err(errno) => return Err(failed(errno)),
                }
            }
            EntryKind::Symlink | EntryKind::Other => {}
        }
    }
    Ok(())
}
