//! A tree written as a `.tar.gz`: `GET /v1/runs/{id}/archive`.
//!
//! The walk is [`super::tree`]'s (links kept as links, never followed;
//! special files left out), and a file is read through its directory's
//! descriptor as it is archived. A run may still be writing: a file that
//! shrank since it was measured is padded with zeros and one that grew is
//! cut, so the archive is always well formed, as of its entries' sizes.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::tree::{Kind, Tree};

/// Writes `tree` (walked by the caller, so that a tree too large is
/// refused before anything is sent) to `out` as a gzip-compressed tar
/// archive.
pub fn pack(tree: &Tree, out: impl Write) -> io::Result<()> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        out,
        flate2::Compression::fast(),
    ));
    builder.mode(tar::HeaderMode::Deterministic);
    builder.follow_symlinks(false);
    for (path, meta) in &tree.entries {
        let name = Path::new(OsStr::from_bytes(path));
        let mut header = tar::Header::new_gnu();
        match meta.kind {
            Kind::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder.append_data(&mut header, name, io::empty())?;
            }
            Kind::Symlink => {
                let Ok(target) = tree.read(path, meta.kind, 4096) else {
                    continue;
                };
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                builder.append_link(&mut header, name, Path::new(OsStr::from_bytes(&target)))?;
            }
            Kind::File { executable } => {
                // Gone since the walk: left out.
                let Ok(file) = tree.open_file(path) else {
                    continue;
                };
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(if executable { 0o755 } else { 0o644 });
                header.set_size(meta.size);
                let exactly = Exactly {
                    inner: file.take(meta.size),
                    left: meta.size,
                };
                builder.append_data(&mut header, name, exactly)?;
            }
        }
    }
    builder.into_inner()?.finish()?;
    Ok(())
}

/// `left` bytes of `inner`, padded with zeros if it ends early.
struct Exactly<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exactly<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buffer
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let read = match self.inner.read(&mut buffer[..want])? {
            0 => {
                buffer[..want].fill(0);
                want
            }
            read => read,
        };
        self.left -= read as u64;
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn a_tree_round_trips_through_its_archive_without_git_unless_asked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("w");
        fs::create_dir_all(root.join(".git")).unwrap();
        fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::create_dir_all(root.join("src/empty")).unwrap();
        fs::write(root.join("src/a.py"), "a = 1\n").unwrap();
        std::os::unix::fs::symlink("src/a.py", root.join("link")).unwrap();
        for with_git in [false, true] {
            let mut bytes = Vec::new();
            pack(&Tree::walk(&root, with_git).unwrap(), &mut bytes).unwrap();
            let out = dir.path().join(format!("out-{with_git}"));
            tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]))
                .unpack(&out)
                .unwrap();
            assert_eq!(fs::read_to_string(out.join("src/a.py")).unwrap(), "a = 1\n");
            assert!(out.join("src/empty").is_dir());
            assert_eq!(
                fs::read_link(out.join("link")).unwrap(),
                Path::new("src/a.py")
            );
            assert_eq!(out.join(".git/HEAD").exists(), with_git);
        }
    }
}
