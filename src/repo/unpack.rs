//! An upload's archive (`.tar.gz` or `.zip`) unpacked into a directory of
//! its own, checked entry by entry: an entry that would escape (`..`, an
//! absolute path, a link whose target leaves the tree) refuses the whole
//! archive, and nothing of it is kept.
//!
//! The lexical checks give the client a clear reason; what keeps the
//! writes inside is that every one goes through the directory's descriptor
//! without following a link (see [`crate::tools::confine`]): an entry
//! written "through" a link the archive made earlier is refused too.
//! Sizes are counted as the bytes come out, not as the headers claim them,
//! so a small archive cannot unpack to more than the ceiling.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, fchmod, openat, symlinkat, unlinkat};
use rustix::io::Errno;

use crate::tools::confine;
use crate::tools::path::RelativePath;

/// Most entries an archive may hold.
pub const MAX_ENTRIES: u64 = 100_000;

/// The archive formats taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    TarGz,
    Zip,
}

impl Format {
    /// The format a `Content-Type` names.
    pub fn of_content_type(content_type: &str) -> Option<Self> {
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/gzip" | "application/x-gzip" | "application/x-tar+gzip" => {
                Some(Self::TarGz)
            }
            "application/zip" | "application/x-zip-compressed" => Some(Self::Zip),
            _ => None,
        }
    }
}

/// What was unpacked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Unpacked {
    /// Regular files.
    pub files: u64,
    pub bytes: u64,
}

/// Why an archive was not unpacked.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The archive's fault (422): escaping, corrupt, too large.
    #[error("{0}")]
    Refused(String),
    /// Ours: writing the tree failed (the server's disk).
    #[error("{0}")]
    Write(io::Error),
}

fn refused(message: impl Into<String>) -> UnpackError {
    UnpackError::Refused(message.into())
}

/// Unpacks `archive` into the directory `into` (which exists, empty), at
/// most `max_bytes` of files.
pub fn unpack(
    archive: &Path,
    format: Format,
    into: &Path,
    max_bytes: u64,
) -> Result<Unpacked, UnpackError> {
    let root = openat(
        rustix::fs::CWD,
        into,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| UnpackError::Write(e.into()))?;
    let file = File::open(archive).map_err(UnpackError::Write)?;
    let mut writer = Writer {
        root,
        max_bytes,
        done: Unpacked::default(),
        entries: 0,
        links: Default::default(),
    };
    match format {
        Format::TarGz => unpack_tar(file, &mut writer)?,
        Format::Zip => unpack_zip(file, &mut writer)?,
    }
    Ok(writer.done)
}

/// Longest a long name, a long link or a PAX header may be: the tar crate
/// would read any size of them into memory.
const MAX_HEADER_DATA: u64 = 64 * 1024;

fn unpack_tar(file: File, writer: &mut Writer) -> Result<(), UnpackError> {
    // Every decompressed byte counts, headers and skipped data too: a small
    // archive cannot make the server read without end.
    let ceiling = writer
        .max_bytes
        .saturating_add(MAX_ENTRIES * 1024 + (64 << 20));
    let decompressed = Capped {
        inner: flate2::read::GzDecoder::new(io::BufReader::new(file)),
        left: ceiling,
    };
    let mut archive = tar::Archive::new(decompressed);
    // Raw: the long names and PAX headers come as entries of their own,
    // read here within a bound rather than whole by the tar crate.
    let entries = archive
        .entries()
        .map_err(|e| refused(format!("not a .tar.gz archive: {e}")))?
        .raw(true);
    let mut long_name: Option<Vec<u8>> = None;
    let mut long_link: Option<Vec<u8>> = None;
    use tar::EntryType;
    for entry in entries {
        let mut entry = entry.map_err(corrupt)?;
        let kind = entry.header().entry_type();
        if matches!(
            kind,
            EntryType::GNULongName
                | EntryType::GNULongLink
                | EntryType::XHeader
                | EntryType::XGlobalHeader
        ) {
            let size = entry.header().size().map_err(corrupt)?;
            if size > MAX_HEADER_DATA {
                return Err(refused(format!(
                    "a {kind:?} header of {size} bytes (at most {MAX_HEADER_DATA})"
                )));
            }
            let mut data = Vec::new();
            entry.read_to_end(&mut data).map_err(corrupt)?;
            match kind {
                EntryType::GNULongName => long_name = Some(trim_nul(data)),
                EntryType::GNULongLink => long_link = Some(trim_nul(data)),
                EntryType::XHeader => {
                    for extension in tar::PaxExtensions::new(&data) {
                        let extension = extension.map_err(corrupt)?;
                        match extension
                            .key()
                            .map_err(|_| refused("a PAX header key is not UTF-8"))?
                        {
                            "path" => long_name = Some(extension.value_bytes().to_vec()),
                            "linkpath" => long_link = Some(extension.value_bytes().to_vec()),
                            "size" => {
                                return Err(refused(
                                    "an entry whose size needs a PAX header (over 8 GiB)",
                                ));
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
            continue;
        }
        let name = long_name
            .take()
            .unwrap_or_else(|| entry.header().path_bytes().into_owned());
        let link = long_link
            .take()
            .or_else(|| entry.header().link_name_bytes().map(|l| l.into_owned()));
        let shown = String::from_utf8_lossy(&name).into_owned();
        let mode = entry.header().mode().unwrap_or(0o644);
        match kind {
            EntryType::Regular | EntryType::Continuous => {
                let path = writer.path(&name)?;
                writer.file(&path, &mut entry, mode & 0o111 != 0)?;
            }
            EntryType::Directory => {
                let path = writer.path(&name)?;
                writer.dir(&path)?;
            }
            EntryType::Symlink => {
                let path = writer.path(&name)?;
                let target =
                    link.ok_or_else(|| refused(format!("{shown}: a link without a target")))?;
                writer.link(&path, &target)?;
            }
            EntryType::Link => {
                return Err(refused(format!(
                    "{shown}: hard links are not supported (archive the file itself)"
                )));
            }
            other => {
                return Err(refused(format!(
                    "{shown}: {other:?} entries (devices, pipes) are not supported"
                )));
            }
        }
    }
    writer.check_links()
}

fn corrupt(error: io::Error) -> UnpackError {
    if error.kind() == io::ErrorKind::FileTooLarge {
        return refused(error.to_string());
    }
    refused(format!("the archive is corrupt: {error}"))
}

fn trim_nul(mut bytes: Vec<u8>) -> Vec<u8> {
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

/// A reader that fails past `left` bytes.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buffer)?;
        self.left = self.left.checked_sub(read as u64).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::FileTooLarge,
                "it decompresses to more than workspaces.max_unpacked_bytes allows",
            )
        })?;
        Ok(read)
    }
}

fn unpack_zip(file: File, writer: &mut Writer) -> Result<(), UnpackError> {
    let mut archive = zip::ZipArchive::new(io::BufReader::new(file))
        .map_err(|e| refused(format!("not a .zip archive: {e}")))?;
    if archive.len() as u64 > MAX_ENTRIES {
        return Err(refused(format!("more than {MAX_ENTRIES} entries")));
    }
    for index in 0..archive.len() {
        let mut entry = archive
            .by_index(index)
            .map_err(|e| refused(format!("the archive is corrupt: {e}")))?;
        let name = entry.name_raw().to_vec();
        let mode = entry.unix_mode().unwrap_or(0o644);
        let path = writer.path(&name)?;
        if entry.is_dir() {
            writer.dir(&path)?;
        } else if mode & 0o170000 == 0o120000 {
            let mut target = Vec::new();
            (&mut entry)
                .take(4097)
                .read_to_end(&mut target)
                .map_err(|e| refused(format!("{}: {e}", path.as_str())))?;
            writer.link(&path, &target)?;
        } else {
            writer.file(&path, &mut entry, mode & 0o111 != 0)?;
        }
    }
    writer.check_links()
}

/// Writes entries beneath one directory's descriptor.
struct Writer {
    root: std::os::fd::OwnedFd,
    max_bytes: u64,
    done: Unpacked,
    entries: u64,
    /// The links made, by path (normalised), with their targets: checked
    /// together once every entry is in (see [`Writer::check_links`]).
    links: std::collections::BTreeMap<String, String>,
}

impl Writer {
    /// An entry's name as a path inside the tree, or the archive's refusal.
    fn path(&mut self, name: &[u8]) -> Result<RelativePath, UnpackError> {
        self.entries += 1;
        if self.entries > MAX_ENTRIES {
            return Err(refused(format!("more than {MAX_ENTRIES} entries")));
        }
        let text = std::str::from_utf8(name).map_err(|_| {
            refused(format!(
                "{}: entry names must be UTF-8",
                String::from_utf8_lossy(name)
            ))
        })?;
        if text.starts_with('/') {
            return Err(refused(format!("{text}: an absolute path would escape")));
        }
        if text.split('/').any(|part| part == "..") {
            return Err(refused(format!("{text}: `..` would escape")));
        }
        let path = RelativePath::parse(text).map_err(|e| refused(format!("{text}: {e}")))?;
        Ok(path)
    }

    fn dir(&mut self, path: &RelativePath) -> Result<(), UnpackError> {
        if path.is_root() {
            return Ok(());
        }
        confine::open_dir_creating(self.root_fd(), path.steps())
            .map(drop)
            .map_err(|errno| self.failed(path, errno))
    }

    fn file(
        &mut self,
        path: &RelativePath,
        content: &mut dyn Read,
        executable: bool,
    ) -> Result<(), UnpackError> {
        let (parent, name) = path
            .split_last()
            .ok_or_else(|| refused(format!("{}: not a file's path", path.as_str())))?;
        let dir = confine::open_dir_creating(self.root_fd(), parent)
            .map_err(|errno| self.failed(path, errno))?;
        // A later entry of the same name replaces an earlier one, as tar
        // does; never through a link.
        match unlinkat(&dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(errno) => return Err(self.failed(path, errno)),
        }
        let created = openat(
            &dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|errno| self.failed(path, errno))?;
        if executable {
            fchmod(&created, Mode::from_raw_mode(0o755))
                .map_err(|e| UnpackError::Write(e.into()))?;
        }
        let mut file = File::from(created);
        let room = self.max_bytes - self.done.bytes;
        let mut limited = content.take(room.saturating_add(1));
        let written = io::copy(&mut limited, &mut file).map_err(|error| {
            // Reading is the archive's side (corrupt data); writing, ours.
            if error.kind() == io::ErrorKind::InvalidData
                || error.kind() == io::ErrorKind::UnexpectedEof
                || error.kind() == io::ErrorKind::InvalidInput
            {
                refused(format!(
                    "{}: the archive is corrupt: {error}",
                    path.as_str()
                ))
            } else {
                UnpackError::Write(error)
            }
        })?;
        if written > room {
            return Err(refused(format!(
                "it unpacks to more than workspaces.max_unpacked_bytes ({} bytes)",
                self.max_bytes
            )));
        }
        file.flush().map_err(UnpackError::Write)?;
        self.done.bytes += written;
        self.done.files += 1;
        Ok(())
    }

    fn link(&mut self, path: &RelativePath, target: &[u8]) -> Result<(), UnpackError> {
        let shown = path.as_str();
        let target_text = std::str::from_utf8(target)
            .map_err(|_| refused(format!("{shown}: a link's target must be UTF-8")))?;
        if target_text.is_empty() || target_text.starts_with('/') {
            return Err(refused(format!(
                "{shown}: a link to {target_text:?} would point out of the tree"
            )));
        }
        let (parent, name) = path
            .split_last()
            .ok_or_else(|| refused(format!("{shown}: not a link's path")))?;
        let dir = confine::open_dir_creating(self.root_fd(), parent)
            .map_err(|errno| self.failed(path, errno))?;
        match unlinkat(&dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(errno) => return Err(self.failed(path, errno)),
        }
        symlinkat(target_text, &dir, name).map_err(|errno| self.failed(path, errno))?;
        self.links.insert(path.normalized(), target_text.to_owned());
        Ok(())
    }

    /// Whether every link the archive made resolves inside the tree,
    /// following the archive's own links on the way (`a/b -> ..` then
    /// `c -> a/b/a/b/../../..` leaves it, though each is inside by its
    /// text alone).
    fn check_links(&self) -> Result<(), UnpackError> {
        for (path, target) in &self.links {
            let mut at: Vec<String> = path.split('/').map(str::to_owned).collect();
            at.pop();
            if resolve(&self.links, at, target, 0).is_none() {
                return Err(refused(format!(
                    "{path}: a link to {target:?} would point out of the tree"
                )));
            }
        }
        Ok(())
    }

    fn root_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.root.as_fd()
    }

    /// A write refused by the filesystem: through a link, over a
    /// directory (the archive's doing), or our disk failing.
    fn failed(&self, path: &RelativePath, errno: Errno) -> UnpackError {
        match errno {
            Errno::LOOP | Errno::NOTDIR | Errno::XDEV => refused(format!(
                "{}: the entry goes through a link or a file the archive made",
                path.as_str()
            )),
            Errno::ISDIR | Errno::EXIST | Errno::NOTEMPTY => refused(format!(
                "{}: the archive has a directory and a file of this name",
                path.as_str()
            )),
            Errno::NAMETOOLONG => refused(format!("{}: the name is too long", path.as_str())),
            errno => UnpackError::Write(errno.into()),
        }
    }
}

/// Where `target`, read from the directory `at` (names from the root),
/// leads, following `links` (the archive's own) as it goes; `None` when it
/// leaves the tree (or follows too many links).
fn resolve(
    links: &std::collections::BTreeMap<String, String>,
    mut at: Vec<String>,
    target: &str,
    followed: usize,
) -> Option<Vec<String>> {
    if followed > 40 || target.starts_with('/') {
        return None;
    }
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                at.pop()?;
            }
            name => {
                at.push(name.to_owned());
                if let Some(next) = links.get(&at.join("/")) {
                    at.pop();
                    at = resolve(links, at, next, followed + 1)?;
                }
            }
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests;
