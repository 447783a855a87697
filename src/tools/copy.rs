//! Copying a workspace as it ended into a new one (a run that continues
//! another starts from it; the other's stays as it was). Files are cloned
//! where the filesystem shares extents (`FICLONE`: btrfs, XFS), else copied
//! in the kernel (`copy_file_range`).
//!
//! The tree is the model's work, and a process a command left behind could
//! still be changing it: the walk goes by directory descriptors, every
//! component opened relative to its parent with `O_NOFOLLOW`, and what is
//! opened is checked for its type (`fstat`), never its name. Symbolic links
//! are copied as links (no tool follows them), other special files are left
//! out, and so is what cannot be read (counted in `skipped`). At most
//! [`MAX_ENTRIES`] entries and [`MAX_BYTES`] bytes (files' apparent sizes:
//! a sparse file counts in full, as the copy fills it in) are copied.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Dir, FileType, Mode, OFlags, fstat, mkdirat, openat, readlinkat, symlinkat};

/// Most entries (files, directories, links) a copy takes.
pub const MAX_ENTRIES: u64 = 100_000;
/// Most bytes a copy takes.
pub const MAX_BYTES: u64 = 4 << 30;

/// Deepest a copy goes (a descriptor and a stack frame per level).
pub const MAX_DEPTH: usize = 256;

/// What a copy did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CopyStats {
    pub files: u64,
    /// Files whose extents were shared rather than copied.
    pub cloned: u64,
    pub bytes: u64,
    /// Entries left out: special files, and what could not be read.
    pub skipped: u64,
    entries: u64,
    /// Directories' modes, given them once everything is copied (a
    /// directory without write permission would otherwise refuse its own
    /// contents, and the removal of a copy that failed).
    modes: Vec<(std::path::PathBuf, Mode)>,
    options: CopyOptions,
}

/// Why a copy failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The source holds more than [`MAX_ENTRIES`] entries or
    /// [`MAX_BYTES`] bytes, or is deeper than [`MAX_DEPTH`].
    #[error(
        "the workspace holds more than {MAX_ENTRIES} entries or {MAX_BYTES} bytes, or is deeper than {MAX_DEPTH} directories"
    )]
    TooLarge,
    /// Writing the copy failed (the server's disk).
    #[error("{0}")]
    Write(io::Error),
    /// The source could not be opened at all.
    #[error("{0}")]
    Source(io::Error),
}

const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// How a copy treats what it meets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyOptions {
    /// Leave out the `.git` directory at the top of the tree (a starting
    /// tree is compared without it).
    pub skip_git: bool,
    /// `to` may exist already: what the copy brings replaces what is there
    /// (an upload's files over a clone's).
    pub over_existing: bool,
}

/// Copies the tree at `from` into `to`, which must not exist. A missing
/// `from` (a workspace never written to) copies nothing and makes nothing.
pub fn copy_workspace(from: &Path, to: &Path) -> Result<CopyStats, CopyError> {
    copy_tree(from, to, CopyOptions::default())
}

/// [`copy_workspace`], as `options` say.
pub fn copy_tree(from: &Path, to: &Path, options: CopyOptions) -> Result<CopyStats, CopyError> {
    let mut stats = CopyStats {
        options,
        ..CopyStats::default()
    };
    let source = match openat(rustix::fs::CWD, from, DIR, Mode::empty()) {
        Ok(source) => source,
        Err(rustix::io::Errno::NOENT) => return Ok(stats),
        Err(error) => return Err(CopyError::Source(error.into())),
    };
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(CopyError::Write)?;
    }
    match std::fs::create_dir(to) {
        Err(error) if !(options.over_existing && error.kind() == io::ErrorKind::AlreadyExists) => {
            return Err(CopyError::Write(error));
        }
        _ => {}
    }
    let target =
        openat(rustix::fs::CWD, to, DIR, Mode::empty()).map_err(|e| CopyError::Write(e.into()))?;
    copy_dir(&source, &target, Path::new(""), &mut stats)?;
    // Deepest first: a directory's mode never stands in the way of its
    // children's. The copy is the server's own; nothing else writes to it.
    for (path, mode) in std::mem::take(&mut stats.modes).into_iter().rev() {
        let dir =
            openat(&target, &path, DIR, Mode::empty()).map_err(|e| CopyError::Write(e.into()))?;
        rustix::fs::fchmod(&dir, mode).map_err(|e| CopyError::Write(e.into()))?;
    }
    Ok(stats)
}

fn copy_dir(
    source: &OwnedFd,
    target: &OwnedFd,
    path: &Path,
    stats: &mut CopyStats,
) -> Result<(), CopyError> {
    let write = |error: rustix::io::Errno| CopyError::Write(error.into());
    if path.components().count() > MAX_DEPTH {
        return Err(CopyError::TooLarge);
    }
    let entries = match Dir::read_from(source) {
        Ok(entries) => entries,
        Err(_) => {
            stats.skipped += 1;
            return Ok(());
        }
    };
    for entry in entries {
        let Ok(entry) = entry else {
            stats.skipped += 1;
            break;
        };
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        if stats.options.skip_git && path.as_os_str().is_empty() && name.to_bytes() == b".git" {
            continue;
        }
        stats.entries += 1;
        if stats.entries > MAX_ENTRIES {
            return Err(CopyError::TooLarge);
        }
        // Opened without following anything, then judged by what it is.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let opened = match openat(source, name, flags, Mode::empty()) {
            Ok(opened) => opened,
            // A link (O_NOFOLLOW refuses it): copied as a link.
            Err(rustix::io::Errno::LOOP) => {
                if stats.options.over_existing {
                    make_room(target, name, false).map_err(write)?;
                }
                match readlinkat(source, name, Vec::new()) {
                    Ok(link) => symlinkat(link.as_c_str(), target, name).map_err(write)?,
                    Err(_) => stats.skipped += 1,
                }
                continue;
            }
            Err(_) => {
                stats.skipped += 1;
                continue;
            }
        };
        let Ok(stat) = fstat(&opened) else {
            stats.skipped += 1;
            continue;
        };
        let mode = Mode::from_raw_mode(stat.st_mode) & Mode::from_bits_truncate(0o777);
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                if stats.options.over_existing {
                    make_room(target, name, true).map_err(write)?;
                }
                match mkdirat(target, name, Mode::RWXU) {
                    Err(rustix::io::Errno::EXIST) if stats.options.over_existing => {}
                    made => made.map_err(write)?,
                }
                let child = openat(target, name, DIR, Mode::empty()).map_err(write)?;
                let child_path = path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
                copy_dir(&opened, &child, &child_path, stats)?;
                stats.modes.push((child_path, mode));
            }
            FileType::RegularFile => {
                if stats.options.over_existing {
                    make_room(target, name, false).map_err(write)?;
                }
                let created = openat(
                    target,
                    name,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::RUSR | Mode::WUSR,
                )
                .map_err(write)?;
                let (source_file, mut target_file) = (File::from(opened), File::from(created));
                stats.files += 1;
                stats.bytes += u64::try_from(stat.st_size).unwrap_or(0);
                if stats.bytes > MAX_BYTES {
                    return Err(CopyError::TooLarge);
                }
                if rustix::fs::ioctl_ficlone(&target_file, &source_file).is_ok() {
                    stats.cloned += 1;
                } else {
                    let mut reader = &source_file;
                    io::copy(&mut reader, &mut target_file).map_err(CopyError::Write)?;
                }
                rustix::fs::fchmod(target_file.as_fd(), mode).map_err(write)?;
            }
            _ => stats.skipped += 1,
        }
    }
    Ok(())
}

/// Clears the way for `name` in `dir` before a copy over existing files
/// writes it: whatever is there is removed, but a directory where a
/// directory comes (the copy goes into it).
fn make_room(
    dir: &OwnedFd,
    name: &std::ffi::CStr,
    directory_comes: bool,
) -> Result<(), rustix::io::Errno> {
    let there = match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(there) => there,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(error) => return Err(error),
    };
    match FileType::from_raw_mode(there.st_mode) {
        FileType::Directory if directory_comes => Ok(()),
        FileType::Directory => {
            // By the descriptor's own name: the directory `dir` is, whatever
            // path led to it.
            use std::os::fd::AsRawFd;
            let path = Path::new("/proc/self/fd")
                .join(dir.as_raw_fd().to_string())
                .join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            crate::repo::places::remove_tree(&path)
                .map_err(|e| rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO))
        }
        _ => rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty()),
    }
}

/// Copies the workspace at `dir` (without `.git`) to `base`, a run's
/// starting tree, through a partial copy renamed into place: whoever finds
/// `base` finds it whole. A workspace never made is an empty tree.
pub fn keep_starting_tree(dir: &Path, base: &Path) -> io::Result<()> {
    use crate::repo::places;
    let partial = places::partial(base);
    places::remove_tree(&partial)?;
    let options = CopyOptions {
        skip_git: true,
        over_existing: false,
    };
    let kept = copy_tree(dir, &partial, options)
        .map_err(io::Error::other)
        .and_then(|_| std::fs::create_dir_all(&partial))
        .and_then(|()| std::fs::rename(&partial, base));
    if kept.is_err() {
        let _ = places::remove_tree(&partial);
    }
    kept
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_tree_is_copied_with_its_links_as_links() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        fs::create_dir_all(from.join("src/deep")).unwrap();
        fs::write(from.join("a.txt"), "a").unwrap();
        fs::write(from.join("src/deep/b.rs"), "fn b() {}").unwrap();
        fs::set_permissions(from.join("a.txt"), fs::Permissions::from_mode(0o750)).unwrap();
        fs::write(dir.path().join("secret"), "outside").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), from.join("link")).unwrap();
        let to = dir.path().join("runs/to");
        let stats = copy_workspace(&from, &to).unwrap();
        assert_eq!(stats.files, 2);
        assert_eq!(stats.bytes, 10);
        assert_eq!(stats.skipped, 0);
        assert_eq!(
            fs::read_to_string(to.join("src/deep/b.rs")).unwrap(),
            "fn b() {}"
        );
        let mode = fs::metadata(to.join("a.txt")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o750);
        // The link is a link still, to the same place: not the secret's bytes.
        let link = fs::symlink_metadata(to.join("link")).unwrap();
        assert!(link.file_type().is_symlink());
        assert_eq!(
            fs::read_link(to.join("link")).unwrap(),
            dir.path().join("secret")
        );
        // The source is left as it was.
        assert_eq!(fs::read_to_string(from.join("a.txt")).unwrap(), "a");
        fs::write(to.join("a.txt"), "changed").unwrap();
        assert_eq!(fs::read_to_string(from.join("a.txt")).unwrap(), "a");
    }

    #[test]
    fn special_files_are_left_out_and_a_link_is_never_entered() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        fs::create_dir_all(&from).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            from.join("fifo"),
            FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        let outside = dir.path().join("outside");
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret"), "outside").unwrap();
        std::os::unix::fs::symlink(&outside, from.join("dir-link")).unwrap();
        let to = dir.path().join("to");
        let stats = copy_workspace(&from, &to).unwrap();
        assert_eq!(stats.files, 0, "nothing of the outside came in");
        assert_eq!(
            stats.skipped, 1,
            "the fifo is left out, and opening it never blocked"
        );
        assert!(!to.join("fifo").exists());
        assert!(
            fs::symlink_metadata(to.join("dir-link"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read_dir(&to).unwrap().count(), 1, "the link alone");
    }

    #[test]
    fn a_sparse_file_counts_in_full_and_is_refused_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        fs::create_dir_all(&from).unwrap();
        // A hole of more than the bound costs the source nothing.
        let file = fs::File::create(from.join("holes")).unwrap();
        file.set_len(MAX_BYTES + 1).unwrap();
        let error = copy_workspace(&from, &dir.path().join("to")).unwrap_err();
        assert!(matches!(error, CopyError::TooLarge), "{error}");
    }

    #[test]
    fn directories_get_their_modes_once_their_contents_are_in() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        fs::create_dir_all(from.join("locked/inner")).unwrap();
        fs::write(from.join("locked/inner/f"), "f").unwrap();
        fs::set_permissions(from.join("locked"), fs::Permissions::from_mode(0o555)).unwrap();
        let to = dir.path().join("to");
        let stats = copy_workspace(&from, &to).unwrap();
        assert_eq!(stats.files, 1);
        assert_eq!(fs::read_to_string(to.join("locked/inner/f")).unwrap(), "f");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&to.join("locked")), 0o555);
        assert_eq!(
            mode(&to.join("locked/inner")),
            mode(&from.join("locked/inner"))
        );
        fs::set_permissions(from.join("locked"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(to.join("locked"), fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_workspace_never_written_copies_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let to = dir.path().join("to");
        let stats = copy_workspace(&dir.path().join("missing"), &to).unwrap();
        assert_eq!(stats.files + stats.skipped, 0);
        assert!(!to.exists());
    }
}
