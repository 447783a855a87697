//! A workspace against the tree it started from, written as `git diff`
//! writes it (so that `git apply` applies it to that tree), or only
//! counted (the run object's `changes`).
//!
//! The changes are found by comparing the two trees' entries (their kinds,
//! sizes, and where those agree, their bytes). A file removed and a file
//! added with the same bytes are a rename (git's exact renames). A file
//! is text when it holds no NUL byte, is UTF-8 and is at most
//! [`MAX_TEXT_BYTES`]; its lines are compared by `similar` (Myers, with a
//! deadline past which the diff is simply less minimal). Anything else is
//! `Binary files ... differ`, which `git apply` cannot apply without the
//! bytes: a diff of text files is whole.
//!
//! Paths git would quote (control characters, `"`, `\`, bytes past ASCII)
//! are quoted as git quotes them, so the diff is ASCII where the files'
//! lines are not, and always UTF-8.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use similar::{Algorithm, DiffTag, TextDiff};

use super::Changes;
use super::tree::{Kind, Meta, Tree, TreeError};

/// Larger files are compared but not diffed line by line.
pub const MAX_TEXT_BYTES: u64 = 8 << 20;

/// Lines of context around each change, as git's default.
const CONTEXT_LINES: usize = 3;

/// Longest one file's line diff may search for the shortest edit.
const DIFF_DEADLINE: Duration = Duration::from_secs(2);

/// Most files removed and added that are compared for renames (each is
/// read whole and hashed).
const MAX_RENAME_CANDIDATES: usize = 10_000;

/// Whether a file's bytes are the same in both trees (its size is).
fn same_bytes(base: &Tree, now: &Tree, path: &[u8], meta: Meta) -> io::Result<bool> {
    match meta.kind {
        Kind::File { .. } => same_files(base.open_file(path)?, now.open_file(path)?),
        _ => Ok(base.read(path, meta.kind, meta.size)? == now.read(path, meta.kind, meta.size)?),
    }
}

fn files_of(tree: &Tree) -> BTreeMap<Vec<u8>, Meta> {
    tree.entries
        .iter()
        .filter(|(_, meta)| meta.kind != Kind::Dir)
        .map(|(path, meta)| (path.clone(), *meta))
        .collect()
}

/// Compares two open files chunk by chunk.
fn same_files(mut a: std::fs::File, mut b: std::fs::File) -> io::Result<bool> {
    let (mut left, mut right) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let read = read_full(&mut a, &mut left)?;
        let want = read.max(1).min(right.len());
        if read_full(&mut b, &mut right[..want])? != read {
            return Ok(false);
        }
        if read == 0 {
            return Ok(true);
        }
        if left[..read] != right[..read] {
            return Ok(false);
        }
    }
}

fn read_full(file: &mut std::fs::File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..])? {
            0 => break,
            read => filled += read,
        }
    }
    Ok(filled)
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    Added(Vec<u8>, Meta),
    Deleted(Vec<u8>, Meta),
    Modified(Vec<u8>, Meta, Meta),
    Renamed {
        from: Vec<u8>,
        to: Vec<u8>,
        old: Meta,
        new: Meta,
    },
}

impl Change {
    fn path(&self) -> &[u8] {
        match self {
            Change::Added(path, _) | Change::Deleted(path, _) | Change::Modified(path, _, _) => {
                path
            }
            Change::Renamed { to, .. } => to,
        }
    }
}

/// Why a diff could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error(transparent)]
    Tree(#[from] TreeError),
    /// Reading a tree, or writing the diff (the reader went away).
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Writes the diff of `now` against `base` to `out` (git's format), and
/// counts it.
pub fn write(base: &Tree, now: &Tree, out: &mut dyn Write) -> Result<Changes, DiffError> {
    run(base, now, Some(out))
}

/// Counts the diff of `now` against `base`, writing nothing.
pub fn count(base: &Tree, now: &Tree) -> Result<Changes, DiffError> {
    run(base, now, None)
}

fn run(base: &Tree, now: &Tree, mut out: Option<&mut dyn Write>) -> Result<Changes, DiffError> {
    let changes = changed(base, now)?;
    let mut counts = Changes {
        files: changes.len() as u64,
        ..Changes::default()
    };
    for change in &changes {
        let (insertions, deletions) = file_diff(
            base,
            now,
            change,
            out.as_mut().map(|out| &mut **out as &mut dyn Write),
        )?;
        counts.insertions += insertions;
        counts.deletions += deletions;
    }
    Ok(counts)
}

/// The changed paths, in the order of their (new) paths.
fn changed(base: &Tree, now: &Tree) -> Result<Vec<Change>, DiffError> {
    let old = files_of(base);
    let new = files_of(now);
    let mut changes = Vec::new();
    for (path, before) in &old {
        match new.get(path) {
            None => changes.push(Change::Deleted(path.clone(), *before)),
            Some(after) if is_link(before) != is_link(after) => {
                // A file become a link (or the reverse): git writes a
                // removal and an addition.
                changes.push(Change::Deleted(path.clone(), *before));
                changes.push(Change::Added(path.clone(), *after));
            }
            Some(after) => {
                let differs = before.size != after.size
                    || !same_bytes(base, now, path, *after).unwrap_or(false);
                if differs || before.kind != after.kind {
                    changes.push(Change::Modified(path.clone(), *before, *after));
                }
            }
        }
    }
    for (path, after) in &new {
        if !old.contains_key(path) {
            changes.push(Change::Added(path.clone(), *after));
        }
    }
    find_renames(base, now, &mut changes);
    changes.sort_by(|a, b| a.path().cmp(b.path()));
    Ok(changes)
}

fn is_link(meta: &Meta) -> bool {
    meta.kind == Kind::Symlink
}

/// A file's identity for renames: whether it is a link, and its bytes'
/// SHA-256.
type RenameKey = (bool, [u8; 32]);

/// Pairs each removed file with an added one of the same bytes (and the
/// same kind of entry): a rename.
fn find_renames(base: &Tree, now: &Tree, changes: &mut Vec<Change>) {
    let deleted = changes
        .iter()
        .filter(|c| matches!(c, Change::Deleted(..)))
        .count();
    let added = changes
        .iter()
        .filter(|c| matches!(c, Change::Added(..)))
        .count();
    if deleted == 0 || added == 0 || deleted + added > MAX_RENAME_CANDIDATES {
        return;
    }
    // Only files of a size both sides have, and not large ones, are read
    // (whole: they are at most MAX_TEXT_BYTES).
    let candidate = |meta: &Meta| meta.size > 0 && meta.size <= MAX_TEXT_BYTES;
    let deleted_sizes: std::collections::HashSet<u64> = changes
        .iter()
        .filter_map(|change| match change {
            Change::Deleted(_, meta) if candidate(meta) => Some(meta.size),
            _ => None,
        })
        .collect();
    let added_sizes: std::collections::HashSet<u64> = changes
        .iter()
        .filter_map(|change| match change {
            Change::Added(_, meta) if candidate(meta) => Some(meta.size),
            _ => None,
        })
        .collect();
    // By (is a link, hash of its bytes): the removed files of those bytes.
    let mut removed: HashMap<RenameKey, Vec<(Vec<u8>, Meta)>> = HashMap::new();
    for change in changes.iter() {
        // Empty files are never renames (git pairs none either).
        if let Change::Deleted(path, meta) = change
            && candidate(meta)
            && added_sizes.contains(&meta.size)
            && let Ok(bytes) = base.read(path, meta.kind, meta.size)
        {
            let key = (is_link(meta), Sha256::digest(&bytes).into());
            removed.entry(key).or_default().push((path.clone(), *meta));
        }
    }
    let mut renamed: Vec<Vec<u8>> = Vec::new();
    for change in changes.iter_mut() {
        let Change::Added(path, meta) = change else {
            continue;
        };
        if !candidate(meta) || !deleted_sizes.contains(&meta.size) {
            continue;
        }
        let Ok(bytes) = now.read(path, meta.kind, meta.size) else {
            continue;
        };
        let key = (is_link(meta), Sha256::digest(&bytes).into());
        if let Some((from, old)) = removed.get_mut(&key).and_then(Vec::pop) {
            renamed.push(from.clone());
            *change = Change::Renamed {
                from,
                to: std::mem::take(path),
                old,
                new: *meta,
            };
        }
    }
    changes.retain(|change| !matches!(change, Change::Deleted(path, _) if renamed.contains(path)));
}

/// The bytes of one side of a change, and whether they are text.
enum Side {
    Missing,
    Text(String),
    Binary,
}

fn text(side: &Side) -> Option<&str> {
    match side {
        Side::Missing => Some(""),
        Side::Text(text) => Some(text.as_str()),
        Side::Binary => None,
    }
}

/// One side's bytes as text, or binary: with a NUL, not UTF-8, larger
/// than [`MAX_TEXT_BYTES`], or ending in a lone `\r` (which would end the
/// line a diff writes without a newline). A file that could not be read
/// as it was measured (a run still writing it) is a binary change too.
fn side(read: io::Result<Vec<u8>>, meta: Meta) -> Side {
    if meta.size > MAX_TEXT_BYTES {
        return Side::Binary;
    }
    let Ok(bytes) = read else {
        return Side::Binary;
    };
    if bytes.contains(&0) || bytes.ends_with(b"\r") {
        return Side::Binary;
    }
    String::from_utf8(bytes).map_or(Side::Binary, Side::Text)
}

/// Writes one change (when `out` is given) and counts its lines.
fn file_diff(
    base: &Tree,
    now: &Tree,
    change: &Change,
    out: Option<&mut dyn Write>,
) -> Result<(u64, u64), DiffError> {
    let read_old = |path: &[u8], meta: Meta| side(base.read(path, meta.kind, MAX_TEXT_BYTES), meta);
    let read_new = |path: &[u8], meta: Meta| side(now.read(path, meta.kind, MAX_TEXT_BYTES), meta);
    let (old_path, new_path, old, new) = match change {
        Change::Added(path, meta) => (path, path, None, Some(*meta)),
        Change::Deleted(path, meta) => (path, path, Some(*meta), None),
        Change::Modified(path, old, new) => (path, path, Some(*old), Some(*new)),
        // Same bytes: nothing but the header (and a mode, if it changed).
        Change::Renamed { from, to, old, new } => {
            if let Some(out) = out {
                header(out, from, to)?;
                modes(out, old.kind, new.kind)?;
                writeln!(out, "similarity index 100%")?;
                writeln!(out, "rename from {}", quoted(from, b""))?;
                writeln!(out, "rename to {}", quoted(to, b""))?;
            }
            return Ok((0, 0));
        }
    };
    let old_side = match old {
        Some(meta) => read_old(old_path, meta),
        None => Side::Missing,
    };
    let new_side = match new {
        Some(meta) => read_new(new_path, meta),
        None => Side::Missing,
    };
    let split = match (text(&old_side), text(&new_side)) {
        (Some(before), Some(after)) => Some((lines(before), lines(after))),
        _ => None,
    };
    let lines = split
        .as_ref()
        .map(|(before, after)| line_diff(before, after));
    let counts = lines.as_ref().map_or((0, 0), |diff| count_lines(diff));
    let Some(out) = out else {
        return Ok(counts);
    };
    header(out, old_path, new_path)?;
    match (old, new) {
        (None, Some(new)) => writeln!(out, "new file mode {}", new.kind.git_mode())?,
        (Some(old), None) => writeln!(out, "deleted file mode {}", old.kind.git_mode())?,
        (Some(old), Some(new)) => modes(out, old.kind, new.kind)?,
        (None, None) => {}
    }
    let from = if old.is_some() {
        quoted(old_path, b"a/")
    } else {
        "/dev/null".to_owned()
    };
    let to = if new.is_some() {
        quoted(new_path, b"b/")
    } else {
        "/dev/null".to_owned()
    };
    match lines {
        None => writeln!(out, "Binary files {from} and {to} differ")?,
        Some(diff) => {
            let mut unified = diff.unified_diff();
            unified.context_radius(CONTEXT_LINES);
            let mut hunks = unified.iter_hunks().peekable();
            if hunks.peek().is_some() {
                writeln!(out, "--- {from}")?;
                writeln!(out, "+++ {to}")?;
            }
            for hunk in hunks {
                hunk.to_writer(&mut *out)?;
            }
        }
    }
    Ok(counts)
}

/// The lines of a text as git sees them: ended by `\n` only (`similar`'s
/// own splitting also ends a line at a lone `\r`, which git does not).
fn lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

fn line_diff<'a>(before: &'a [&'a str], after: &'a [&'a str]) -> TextDiff<'a, 'a, 'a, str> {
    TextDiff::configure()
        .algorithm(Algorithm::Myers)
        .newline_terminated(true)
        .deadline(Instant::now() + DIFF_DEADLINE)
        .diff_slices(before, after)
}

fn count_lines(diff: &TextDiff<'_, '_, '_, str>) -> (u64, u64) {
    let (mut insertions, mut deletions) = (0u64, 0u64);
    for op in diff.ops() {
        match op.tag() {
            DiffTag::Insert => insertions += op.new_range().len() as u64,
            DiffTag::Delete => deletions += op.old_range().len() as u64,
            DiffTag::Replace => {
                insertions += op.new_range().len() as u64;
                deletions += op.old_range().len() as u64;
            }
            DiffTag::Equal => {}
        }
    }
    (insertions, deletions)
}

fn header(out: &mut dyn Write, from: &[u8], to: &[u8]) -> io::Result<()> {
    writeln!(
        out,
        "diff --git {} {}",
        quoted(from, b"a/"),
        quoted(to, b"b/")
    )
}

fn modes(out: &mut dyn Write, old: Kind, new: Kind) -> io::Result<()> {
    if old.git_mode() != new.git_mode() {
        writeln!(out, "old mode {}", old.git_mode())?;
        writeln!(out, "new mode {}", new.git_mode())?;
    }
    Ok(())
}

/// `prefix` and `path` as git writes a name: as they are, or in double
/// quotes with C escapes (and octal for bytes past ASCII) when the path
/// holds a control character, `"`, `\` or such a byte.
fn quoted(path: &[u8], prefix: &[u8]) -> String {
    let needs = |byte: &u8| *byte < 0x20 || *byte >= 0x7f || *byte == b'"' || *byte == b'\\';
    if !path.iter().any(needs) {
        let mut name = String::from_utf8_lossy(prefix).into_owned();
        name.push_str(&String::from_utf8_lossy(path));
        return name;
    }
    let mut name = String::from("\"");
    for &byte in prefix.iter().chain(path) {
        match byte {
            b'\x07' => name.push_str("\\a"),
            b'\x08' => name.push_str("\\b"),
            b'\t' => name.push_str("\\t"),
            b'\n' => name.push_str("\\n"),
            b'\x0b' => name.push_str("\\v"),
            b'\x0c' => name.push_str("\\f"),
            b'\r' => name.push_str("\\r"),
            b'"' => name.push_str("\\\""),
            b'\\' => name.push_str("\\\\"),
            byte if needs(&byte) => name.push_str(&format!("\\{byte:03o}")),
            byte => name.push(char::from(byte)),
        }
    }
    name.push('"');
    name
}

#[cfg(test)]
mod tests;
