//! Copying a workspace as it ended into a new one (a run that continues
//! another starts from it; the other's stays as it was). Files are cloned
//! where the filesystem shares extents (`FICLONE`: btrfs, XFS), else copied
//! in the kernel (`copy_file_range`). Symbolic links are copied as links and
//! never followed (no tool follows them either); other special files are
//! left out. The source is a finished run's: nothing writes to it meanwhile.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// What a copy did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CopyStats {
    pub files: u64,
    /// Files whose extents were shared rather than copied.
    pub cloned: u64,
    pub bytes: u64,
}

/// Copies the tree at `from` into `to`, which must not exist. A missing
/// `from` (a workspace never written to) copies nothing and makes nothing.
pub fn copy_workspace(from: &Path, to: &Path) -> io::Result<CopyStats> {
    let mut stats = CopyStats::default();
    match fs::symlink_metadata(from) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(stats),
        Err(error) => return Err(error),
        Ok(meta) if !meta.is_dir() => {
            return Err(io::Error::other("a workspace is not a directory"));
        }
        Ok(_) => {}
    }
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::create_dir(to)?;
    copy_dir(from, to, &mut stats)?;
    Ok(stats)
}

fn copy_dir(from: &Path, to: &Path, stats: &mut CopyStats) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        // The entry's own type: a link is a link, never its target.
        let kind = entry.file_type()?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if kind.is_dir() {
            fs::create_dir(&target)?;
            copy_dir(&source, &target, stats)?;
        } else if kind.is_file() {
            copy_file(&source, &target, stats)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&source)?, &target)?;
        }
    }
    Ok(())
}

fn copy_file(from: &Path, to: &Path, stats: &mut CopyStats) -> io::Result<()> {
    let source = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(from)?;
    let meta = source.metadata()?;
    let mut target = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(meta.permissions().mode() & 0o777)
        .open(to)?;
    stats.files += 1;
    stats.bytes += meta.len();
    if rustix::fs::ioctl_ficlone(&target, &source).is_ok() {
        stats.cloned += 1;
        return Ok(());
    }
    copy_contents(&source, &mut target)
}

/// In the kernel where it can (`std::io::copy` between files uses
/// `copy_file_range`).
fn copy_contents(source: &File, target: &mut File) -> io::Result<()> {
    let mut source = source;
    io::copy(&mut source, target)?;
    Ok(())
}

#[cfg(test)]
mod tests {
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
    fn a_workspace_never_written_copies_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let to = dir.path().join("to");
        let stats = copy_workspace(&dir.path().join("missing"), &to).unwrap();
        assert_eq!(stats, CopyStats::default());
        assert!(!to.exists());
    }
}
