//! A run's workspace: the one directory its file tools may touch.
//!
//! The root is canonicalised and opened once; every later operation resolves
//! its path from that directory descriptor (see [`super::confine`]), never from
//! a path string, so neither `..` nor a symbolic link swapped in at any moment
//! can take a read or a write outside. Writes land atomically: the content goes
//! to a fresh temporary file in the target's directory, which is then renamed
//! over the target, so a reader sees the old file or the new one, never half
//! of one.

use std::fs::File;
use std::io::{self, Read, Write};
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{
    AtFlags, FileType, Mode, OFlags, fchmod, fstat, openat, renameat, statat, unlinkat,
};
use rustix::io::Errno;
use serde::Serialize;

use super::confine::{self, Resolver};
use super::error::WorkspaceError;
use super::listing::{
    Budget, Flow, Found, MAX_WALK_ENTRIES, collect_files, read_entries, walk_tree,
};
use super::path::{RelativePath, Step, check_file_path};

/// The default read limit: 1 MiB.
pub const DEFAULT_MAX_READ_BYTES: u64 = 1024 * 1024;

/// [`Workspace::list_files`] does not descend deeper than this: it holds one
/// descriptor per level.
pub const MAX_LIST_DEPTH: usize = 128;

/// How a file is opened for reading. `O_NONBLOCK` so that a FIFO does not
/// block the open (it is refused once opened); it changes nothing for
/// regular files.
const READ_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::NONBLOCK).union(OFlags::NOCTTY);

/// Mode of a file created by a write (less the umask); an overwrite keeps the
/// mode of the file it replaces.
const NEW_FILE_MODE: u32 = 0o644;

/// How a [`Workspace`] is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceOptions {
    /// Files larger than this are refused by reads, with their size in the
    /// message, rather than cut.
    pub max_read_bytes: u64,
    /// `None` detects the best resolver this kernel offers. Tests force the
    /// walk to exercise the fallback.
    pub resolver: Option<Resolver>,
}

impl Default for WorkspaceOptions {
    fn default() -> Self {
        Self {
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
            resolver: None,
        }
    }
}

/// What a directory entry is. Symbolic links are reported, never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One entry of [`Workspace::list_dir`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DirEntry {
    /// The entry's name (lossily decoded if it is not UTF-8).
    pub name: String,
    pub kind: EntryKind,
}

/// One regular file of [`Workspace::list_files`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileInfo {
    /// Relative to the root, `/`-separated.
    pub path: String,
    /// In bytes.
    pub size: u64,
}

/// What [`Workspace::list_files`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileListing {
    pub files: Vec<FileInfo>,
    /// Some files are not listed.
    pub truncated: bool,
}

/// A directory that reads, writes and listings are confined to.
#[derive(Debug)]
pub struct Workspace {
    /// Canonical, so it names the same directory as `root_fd` for as long as
    /// nobody moves it; commands use it as their working directory.
    root: PathBuf,
    root_fd: OwnedFd,
    max_read_bytes: u64,
    resolver: Resolver,
}

impl Workspace {
    /// Opens the existing directory `root` with the default options.
    pub fn open(root: impl AsRef<Path>) -> io::Result<Self> {
        Self::open_with(root, WorkspaceOptions::default())
    }

    /// Opens the existing directory `root`: canonicalises it once and keeps a
    /// descriptor of it that every later operation starts from.
    pub fn open_with(root: impl AsRef<Path>, options: WorkspaceOptions) -> io::Result<Self> {
        let root = std::fs::canonicalize(root)?;
        let root_fd = rustix::fs::open(
            &root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let resolver = options.resolver.unwrap_or_else(|| {
            let detected = Resolver::detect(root_fd.as_fd());
            if detected == Resolver::Walk {
                static WARN: Once = Once::new();
                WARN.call_once(|| {
                    tracing::warn!(
                        "openat2 with RESOLVE_BENEATH is not available; workspace paths are \
                         resolved by an openat walk with O_NOFOLLOW instead"
                    );
                });
            }
            detected
        });
        Ok(Self {
            root,
            root_fd,
            max_read_bytes: options.max_read_bytes,
            resolver,
        })
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// How this workspace resolves paths.
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    pub fn max_read_bytes(&self) -> u64 {
        self.max_read_bytes
    }

    /// A file's text. Refused when it is larger than the read limit or not
    /// UTF-8: a model is told so rather than handed mangled bytes.
    pub fn read_file(&self, path: &str) -> Result<String, WorkspaceError> {
        let bytes = self.read_bytes(path)?;
        String::from_utf8(bytes).map_err(|_| WorkspaceError::NotUtf8(path.to_owned()))
    }

    /// A regular file's bytes, up to the read limit (a larger file is refused,
    /// not cut).
    pub fn read_bytes(&self, path: &str) -> Result<Vec<u8>, WorkspaceError> {
        let path = RelativePath::parse(path)?;
        if path.is_root() {
            return Err(WorkspaceError::Root);
        }
        let fd = confine::open(self.root_dir(), self.resolver, path.steps(), READ_FLAGS)
            .map_err(|errno| refusal(errno, &path, Purpose::Read))?;
        self.read_opened(fd, &path)
    }

    /// A regular file opened for reading, with its size when opened, the
    /// read limit notwithstanding: for a download, which streams it from
    /// the descriptor rather than holding it.
    pub fn open_file(&self, path: &str) -> Result<(File, u64), WorkspaceError> {
        let path = RelativePath::parse(path)?;
        if path.is_root() {
            return Err(WorkspaceError::Root);
        }
        let fd = confine::open(self.root_dir(), self.resolver, path.steps(), READ_FLAGS)
            .map_err(|errno| refusal(errno, &path, Purpose::Read))?;
        let stat = fstat(&fd).map_err(|errno| refusal(errno, &path, Purpose::Read))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(WorkspaceError::IsADirectory(path.to_string())),
            _ => return Err(WorkspaceError::NotRegularFile(path.to_string())),
        }
        // Blocking reads from here on (O_NONBLOCK only kept a FIFO from
        // holding up the open; it means nothing to a regular file).
        Ok((File::from(fd), u64::try_from(stat.st_size).unwrap_or(0)))
    }

    /// The bytes of the file `fd`, which must be a regular file within the
    /// read limit.
    fn read_opened(&self, fd: OwnedFd, path: &RelativePath) -> Result<Vec<u8>, WorkspaceError> {
        let stat = fstat(&fd).map_err(|errno| refusal(errno, path, Purpose::Read))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(WorkspaceError::IsADirectory(path.to_string())),
            _ => return Err(WorkspaceError::NotRegularFile(path.to_string())),
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        let too_large = |size| WorkspaceError::TooLarge {
            path: path.to_string(),
            size,
            limit: self.max_read_bytes,
        };
        if size > self.max_read_bytes {
            return Err(too_large(size));
        }
        let bytes =
            read_at_most(fd, size, self.max_read_bytes).map_err(|source| io_error(path, source))?;
        let read = bytes.len() as u64;
        if read > self.max_read_bytes {
            return Err(too_large(read));
        }
        Ok(bytes)
    }

    /// Replaces the text of an existing file with what `edit` makes of it
    /// (the new text, and anything else the caller wants back), atomically
    /// as [`Workspace::write_file`] does, keeping the file's mode. The file
    /// is read and replaced through one descriptor of its directory, so the
    /// text edited and the file replaced are in the same place even if a
    /// component of the path is swapped meanwhile. Nothing is written when
    /// `edit` fails.
    pub fn edit_file<T, E>(
        &self,
        path: &str,
        edit: impl FnOnce(String) -> Result<(String, T), E>,
    ) -> Result<T, E>
    where
        E: From<WorkspaceError>,
    {
        let path = RelativePath::parse(path)?;
        let (parent, name) = split_for_write(&path)?;
        let dir = confine::open_dir(self.root_dir(), self.resolver, parent)
            .map_err(|errno| refusal(errno, &path, Purpose::Read))?;
        let fd = openat(
            &dir,
            name,
            READ_FLAGS | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| refusal(errno, &path, Purpose::Read))?;
        let bytes = self.read_opened(fd, &path)?;
        let text =
            String::from_utf8(bytes).map_err(|_| WorkspaceError::NotUtf8(path.to_string()))?;
        let (edited, out) = edit(text)?;
        write_atomically(dir.as_fd(), name, edited.as_bytes(), &path)?;
        Ok(out)
    }

    /// Writes `content` to a file whose parent directory must exist, replacing
    /// the file atomically if it exists. Returns the bytes written.
    pub fn write_file(&self, path: &str, content: &[u8]) -> Result<u64, WorkspaceError> {
        // Escapes and the root first, with their own refusals; then the
        // name's form.
        let parsed = RelativePath::parse(path)?;
        if !parsed.is_root() {
            check_name(path)?;
        }
        let path = parsed;
        let (parent, name) = split_for_write(&path)?;
        let dir = confine::open_dir(self.root_dir(), self.resolver, parent)
            .map_err(|errno| refusal(errno, &path, Purpose::WriteParent))?;
        write_atomically(dir.as_fd(), name, content, &path)
    }

    /// Like [`Workspace::write_file`], but creates missing parent directories
    /// (inside the root, still refusing symbolic links): for seeding a run's
    /// workspace from its request.
    pub fn write_seed(&self, path: &str, content: &[u8]) -> Result<u64, WorkspaceError> {
        // Escapes and the root first, with their own refusals; then the
        // name's form.
        let parsed = RelativePath::parse(path)?;
        if !parsed.is_root() {
            check_name(path)?;
        }
        let path = parsed;
        let (parent, name) = split_for_write(&path)?;
        let dir = confine::open_dir_creating(self.root_dir(), parent)
            .map_err(|errno| refusal(errno, &path, Purpose::WriteParent))?;
        write_atomically(dir.as_fd(), name, content, &path)
    }

    /// The entries of a directory, sorted by name, without `.` and `..`.
    /// `""` and `"."` list the root.
    pub fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>, WorkspaceError> {
        let path = RelativePath::parse(if path.is_empty() { "." } else { path })?;
        let dir = confine::open_dir(self.root_dir(), self.resolver, path.steps())
            .map_err(|errno| refusal(errno, &path, Purpose::List))?;
        let mut entries: Vec<DirEntry> = read_entries(dir, &mut Budget::new(usize::MAX))
            .map_err(|errno| refusal(errno, &path, Purpose::List))?
            .into_iter()
            .map(|(name, kind)| DirEntry { name, kind })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// The regular files under the root with their sizes, sorted by path:
    /// the first `limit` of them, and whether there were more (or more
    /// than [`MAX_WALK_ENTRIES`] directory entries to read, past which the
    /// walk stops). Symbolic links are neither listed nor followed;
    /// directories deeper than [`MAX_LIST_DEPTH`] are an error rather than
    /// silently skipped.
    pub fn list_files(&self, limit: usize) -> Result<FileListing, WorkspaceError> {
        let root = confine::open_dir(self.root_dir(), self.resolver, &[]).map_err(|errno| {
            WorkspaceError::Io {
                path: ".".to_owned(),
                source: errno.into(),
            }
        })?;
        // The walk meets the files in the order of their paths.
        let mut files = Vec::new();
        let truncated = collect_files(root, limit, &mut files)?;
        Ok(FileListing { files, truncated })
    }

    /// The paths of the files and directories below the root, in the order
    /// of the paths, at most `limit` of them; directories for which
    /// `skip_dir` (given the directory's name) is true are listed but not
    /// entered. Links are neither listed nor followed. For suggestions, so
    /// it gives what it found before anything went wrong.
    pub fn list_paths(
        &self,
        limit: usize,
        skip_dir: &dyn Fn(&str) -> bool,
    ) -> Vec<(String, EntryKind)> {
        let mut paths = Vec::new();
        let Ok(root) = confine::open_dir(self.root_dir(), self.resolver, &[]) else {
            return paths;
        };
        let _ = walk_tree(root, "", &mut Budget::new(MAX_WALK_ENTRIES), &mut |found| {
            if paths.len() >= limit {
                return Ok(Flow::Stop);
            }
            let (path, kind, flow) = match found {
                Found::File { path, .. } => (path, EntryKind::File, Flow::Continue),
                Found::Dir { name, path } if skip_dir(name) => (path, EntryKind::Dir, Flow::Skip),
                Found::Dir { path, .. } => (path, EntryKind::Dir, Flow::Continue),
            };
            paths.push((path.to_owned(), kind));
            Ok(flow)
        });
        paths
    }

    /// Shows `visit` every regular file at `path` (one file) or below it (a
    /// directory) with its bytes, in the order of their paths (relative to
    /// the root, lexically normalised), until it breaks. Files larger than
    /// `max_bytes`, and files that cannot be opened or read (gone, or not
    /// readable), are passed over; links are never followed, and
    /// directories for which `skip_dir` (given the directory's name) is
    /// true are not entered. Each file is opened from its directory's
    /// descriptor with `O_NOFOLLOW`, like every walk here.
    pub fn scan_files(
        &self,
        path: &str,
        max_bytes: u64,
        skip_dir: &dyn Fn(&str) -> bool,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), WorkspaceError> {
        let path = RelativePath::parse(if path.is_empty() { "." } else { path })?;
        let fd = confine::open(self.root_dir(), self.resolver, path.steps(), READ_FLAGS)
            .map_err(|errno| refusal(errno, &path, Purpose::Read))?;
        let stat = fstat(&fd).map_err(|errno| refusal(errno, &path, Purpose::Read))?;
        let shown = path.normalized();
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {}
            FileType::RegularFile => {
                let size = u64::try_from(stat.st_size).unwrap_or(0);
                if size <= max_bytes
                    && let Ok(bytes) = read_at_most(fd, size, max_bytes)
                    && bytes.len() as u64 <= max_bytes
                {
                    let _ = visit(&shown, &bytes);
                }
                return Ok(());
            }
            _ => return Err(WorkspaceError::NotRegularFile(path.to_string())),
        }
        walk_tree(
            fd,
            &shown,
            &mut Budget::new(MAX_WALK_ENTRIES),
            &mut |found| {
                let (dir, name, path) = match found {
                    Found::Dir { name, .. } if skip_dir(name) => return Ok(Flow::Skip),
                    Found::Dir { .. } => return Ok(Flow::Continue),
                    Found::File { dir, name, path } => (dir, name, path),
                };
                let flags = READ_FLAGS | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let Ok(file) = openat(dir, name, flags, Mode::empty()) else {
                    return Ok(Flow::Continue);
                };
                let Ok(stat) = fstat(&file) else {
                    return Ok(Flow::Continue);
                };
                let size = u64::try_from(stat.st_size).unwrap_or(0);
                if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile
                    || size > max_bytes
                {
                    return Ok(Flow::Continue);
                }
                match read_at_most(file, size, max_bytes) {
                    Ok(bytes) if bytes.len() as u64 <= max_bytes => match visit(path, &bytes) {
                        ControlFlow::Continue(()) => Ok(Flow::Continue),
                        ControlFlow::Break(()) => Ok(Flow::Stop),
                    },
                    _ => Ok(Flow::Continue),
                }
            },
        )?;
        Ok(())
    }

    fn root_dir(&self) -> BorrowedFd<'_> {
        self.root_fd.as_fd()
    }
}

/// What an operation was doing when the kernel refused it: the same `ENOENT`
/// means a missing file to a read and a missing parent to a write.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Read,
    WriteParent,
    Write,
    List,
}

/// Turns a refusal from the kernel into the message a model can act on.
fn refusal(errno: Errno, path: &RelativePath, purpose: Purpose) -> WorkspaceError {
    let text = path.to_string();
    match errno {
        Errno::LOOP => WorkspaceError::Symlink(text),
        Errno::XDEV => WorkspaceError::Outside(text),
        Errno::NOENT if purpose == Purpose::WriteParent => WorkspaceError::ParentMissing(text),
        Errno::NOENT => WorkspaceError::NotFound(text),
        Errno::NOTDIR => WorkspaceError::NotADirectory(text),
        Errno::ISDIR => WorkspaceError::IsADirectory(text),
        Errno::ACCESS | Errno::PERM => WorkspaceError::PermissionDenied(text),
        Errno::NAMETOOLONG => WorkspaceError::PathTooLong {
            limit: super::path::MAX_PATH_BYTES,
        },
        Errno::NXIO => WorkspaceError::NotRegularFile(text),
        other => io_error(path, other.into()),
    }
}

/// The content of the open file `fd`, whose size was `size`: at most one
/// byte past `max_bytes`, so that a file that grew after its `fstat` is
/// noticed.
fn read_at_most(fd: OwnedFd, size: u64, max_bytes: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(usize::try_from(size.min(max_bytes)).unwrap_or(0));
    File::from(fd)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn io_error(path: &RelativePath, source: io::Error) -> WorkspaceError {
    WorkspaceError::Io {
        path: path.to_string(),
        source,
    }
}

fn split_for_write(path: &RelativePath) -> Result<(&[Step], &str), WorkspaceError> {
    if path.is_root() {
        return Err(WorkspaceError::Root);
    }
    path.split_last()
        .ok_or_else(|| WorkspaceError::IsADirectory(path.to_string()))
}

/// Writes `content` to a new temporary file in `dir`, then renames it over
/// `name`. The temporary file is created with `O_CREAT | O_EXCL | O_NOFOLLOW`,
/// so it is always a new inode in `dir`; the rename replaces the directory
/// entry `name` itself and never follows it, so even a symbolic link planted
/// at `name` after the check below is replaced rather than written through.
fn write_atomically(
    dir: BorrowedFd<'_>,
    name: &str,
    content: &[u8],
    path: &RelativePath,
) -> Result<u64, WorkspaceError> {
    let existing_mode = match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Some(Mode::from_raw_mode(stat.st_mode & 0o7777)),
            FileType::Symlink => return Err(WorkspaceError::Symlink(path.to_string())),
            FileType::Directory => return Err(WorkspaceError::IsADirectory(path.to_string())),
            _ => return Err(WorkspaceError::NotRegularFile(path.to_string())),
        },
        Err(Errno::NOENT) => None,
        Err(errno) => return Err(refusal(errno, path, Purpose::Write)),
    };
    let (temp_name, temp) = create_temporary(dir).map_err(|e| refusal(e, path, Purpose::Write))?;
    let written = (|| -> Result<(), Errno> {
        if let Some(mode) = existing_mode {
            fchmod(&temp, mode)?;
        }
        let mut file = File::from(temp);
        file.write_all(content)
            .map_err(|error| Errno::from_io_error(&error).unwrap_or(Errno::IO))?;
        renameat(dir, temp_name.as_str(), dir, name)
    })();
    if let Err(errno) = written {
        let _ = unlinkat(dir, temp_name.as_str(), AtFlags::empty());
        return Err(refusal(errno, path, Purpose::Write));
    }
    Ok(content.len() as u64)
}

/// A new file in `dir` whose name no one else uses: hidden, and unique per
/// process and call, retried if it exists anyway.
fn create_temporary(dir: BorrowedFd<'_>) -> Result<(String, OwnedFd), Errno> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let name = format!(
            ".write-{}-{}.tmp",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        match openat(
            dir,
            name.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(NEW_FILE_MODE),
        ) {
            Err(Errno::EXIST) => continue,
            Ok(fd) => return Ok((name, fd)),
            Err(errno) => return Err(errno),
        }
    }
}

/// A file a write creates must have a name the download route serves.
fn check_name(path: &str) -> Result<(), WorkspaceError> {
    check_file_path(path).map_err(|reason| WorkspaceError::InvalidPath {
        path: path.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests;
