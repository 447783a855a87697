//! Unified diffs: `git diff`'s (a `diff --git` header per file, with
//! `new file mode`, `deleted file mode`, `rename from`/`rename to` and
//! `copy from`/`copy to`; modes are not kept, links and submodules are
//! refused), `diff -u`'s, and the ones models write.
//!
//! The patch is cut into files here (at `diff --git` lines, or at a
//! `--- `/`+++ ` pair outside a hunk) and each hunk's extent found; the
//! file names (quoted or not, with their tab-separated dates) and each
//! hunk's lines (with `\ No newline at end of file`) are read by `diffy`.
//! A hunk ends where its header's counts say, so that a removed line
//! reading `-- x` is not taken for a file header; but a model's counts are
//! often wrong, so a hunk whose counts run out while hunk lines go on takes
//! them too, and one whose lines stop before its counts are met ends there:
//! the counts given to `diffy` are the ones the lines make. git's `a/` and
//! `b/` prefixes are dropped.

use super::{FileChange, Hunk, Kind, Line, LineKind, ParseError, checked_path};

/// Reads the patch `lines` (all of them, so that numbers are the patch's).
pub(super) fn parse(lines: &[&str]) -> Result<Vec<FileChange>, ParseError> {
    let mut sections: Vec<Section<'_>> = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let line = lines[at];
        if line.starts_with("diff --git ") {
            let (git, next) = GitHeader::read(lines, at);
            sections.push(Section {
                at,
                git: Some(git),
                names: None,
                hunks: Vec::new(),
            });
            at = next;
        } else if is_file_header(lines, at) {
            let joins = sections.last().is_some_and(|section| {
                section.git.is_some() && section.names.is_none() && section.hunks.is_empty()
            });
            if !joins {
                sections.push(Section {
                    at,
                    git: None,
                    names: None,
                    hunks: Vec::new(),
                });
            }
            if let Some(section) = sections.last_mut() {
                section.names = Some(at);
            }
            at += 2;
        } else if line.starts_with("@@") {
            let Some(section) = sections.last_mut() else {
                return Err(ParseError::at(
                    at + 1,
                    "a hunk (`@@`) comes before any file's header: a diff names its file first \
                     (`--- a/PATH`, then `+++ b/PATH`).",
                ));
            };
            let (hunk, next) = RawHunk::read(lines, at)?;
            section.hunks.push(hunk);
            at = next;
        } else {
            // A preamble (a commit's message), or what comes between files.
            at += 1;
        }
    }
    let mut changes = Vec::new();
    for section in &sections {
        changes.extend(section.change(lines)?);
    }
    Ok(changes)
}

/// Whether lines `at` and `at + 1` are a file's `--- `, `+++ ` header.
fn is_file_header(lines: &[&str], at: usize) -> bool {
    lines[at].starts_with("--- ") && lines.get(at + 1).is_some_and(|l| l.starts_with("+++ "))
}

/// One file's part of the patch.
struct Section<'a> {
    /// Its first line's index.
    at: usize,
    git: Option<GitHeader<'a>>,
    /// The index of its `--- ` line.
    names: Option<usize>,
    hunks: Vec<RawHunk<'a>>,
}

/// What `git diff` says of a file before its hunks.
#[derive(Default)]
struct GitHeader<'a> {
    /// What follows `diff --git `: the two paths.
    paths: &'a str,
    rename: (Option<&'a str>, Option<&'a str>),
    copy: (Option<&'a str>, Option<&'a str>),
    new_file: bool,
    deleted: bool,
    /// The file's mode after the change, when it says.
    mode: Option<&'a str>,
    binary: bool,
}

impl<'a> GitHeader<'a> {
    /// The header starting at the `diff --git` line `at`, and the index of
    /// the line after it.
    fn read(lines: &[&'a str], at: usize) -> (Self, usize) {
        let mut header = Self {
            paths: lines[at]["diff --git ".len()..].trim_end(),
            ..Self::default()
        };
        let mut next = at + 1;
        while let Some(line) = lines.get(next) {
            let line = line.trim_end();
            if let Some(path) = line.strip_prefix("rename from ") {
                header.rename.0 = Some(path);
            } else if let Some(path) = line.strip_prefix("rename to ") {
                header.rename.1 = Some(path);
            } else if let Some(path) = line.strip_prefix("copy from ") {
                header.copy.0 = Some(path);
            } else if let Some(path) = line.strip_prefix("copy to ") {
                header.copy.1 = Some(path);
            } else if let Some(mode) = line.strip_prefix("new file mode ") {
                header.new_file = true;
                header.mode = Some(mode);
            } else if line.starts_with("deleted file mode ") {
                header.deleted = true;
            } else if let Some(mode) = line.strip_prefix("new mode ") {
                header.mode = Some(mode);
            } else if line.starts_with("Binary files ") || line.starts_with("GIT binary patch") {
                header.binary = true;
            } else if ![
                "old mode ",
                "index ",
                "similarity index ",
                "dissimilarity index ",
            ]
            .iter()
            .any(|prefix| line.starts_with(prefix))
            {
                break;
            }
            next += 1;
        }
        (header, next)
    }
}

/// A hunk's lines, before `diffy` reads them.
struct RawHunk<'a> {
    /// The index of its `@@` line.
    at: usize,
    header: &'a str,
    /// The old and new start lines its header states, if it states them.
    starts: Option<(usize, usize)>,
    body: &'a [&'a str],
}

impl<'a> RawHunk<'a> {
    /// The hunk whose `@@` line is `at`, and the index of the line after
    /// it.
    fn read(lines: &'a [&'a str], at: usize) -> Result<(Self, usize), ParseError> {
        let header = lines[at];
        let ranges = ranges(header);
        let counts = ranges.map(|(old, new)| (old.1, new.1));
        let (mut old, mut new) = (0, 0);
        let mut end = at + 1;
        while let Some(&line) = lines.get(end) {
            if line.starts_with("@@") || line.starts_with("diff --git ") {
                break;
            }
            let counted = counts.is_none_or(|(o, n)| old >= o && new >= n);
            if counted && !extends(lines, end) {
                break;
            }
            match line.as_bytes().first() {
                None | Some(b' ') => (old, new) = (old + 1, new + 1),
                Some(b'-') => old += 1,
                Some(b'+') => new += 1,
                Some(b'\\') => {}
                Some(_) => {
                    return Err(ParseError::at(
                        end + 1,
                        format!(
                            "`{}` is not a line of the hunk `{}` (line {}): each line of a hunk \
                             starts with ' ' (unchanged), '-' (removed) or '+' (added).",
                            line.trim_end(),
                            header.trim_end(),
                            at + 1
                        ),
                    ));
                }
            }
            end += 1;
        }
        if end == at + 1 {
            return Err(ParseError::at(
                at + 1,
                format!("the hunk `{}` has no lines.", header.trim_end()),
            ));
        }
        let hunk = Self {
            at,
            header,
            starts: ranges.map(|(old, new)| (old.0, new.0)),
            body: &lines[at + 1..end],
        };
        Ok((hunk, end))
    }

    /// The hunk as `diffy` reads it, with the counts its lines make.
    fn hunk(&self) -> Result<Hunk, ParseError> {
        let (mut old, mut new) = (0, 0);
        for line in self.body {
            match line.as_bytes().first() {
                None | Some(b' ') => (old, new) = (old + 1, new + 1),
                Some(b'-') => old += 1,
                Some(b'+') => new += 1,
                _ => {}
            }
        }
        let (old_start, new_start) = self.starts.unwrap_or((1, 1));
        let mut text = format!("@@ -{old_start},{old} +{new_start},{new} @@\n");
        for line in self.body {
            text.push_str(line);
            text.push('\n');
        }
        let patch = diffy::Patch::from_str(&text).map_err(|error| {
            let message = error.to_string();
            let found = message
                .strip_prefix("error parsing patch at byte ")
                .and_then(|rest| rest.split_once(": "))
                .and_then(|(byte, kind)| Some((byte.parse::<usize>().ok()?, kind)));
            match found {
                Some((byte, kind)) => {
                    let line = text
                        .get(..byte)
                        .map_or(0, |before| before.matches('\n').count());
                    ParseError::at(
                        self.at + 1 + line,
                        format!("the hunk cannot be read: {kind}."),
                    )
                }
                None => ParseError::at(self.at + 1, format!("the hunk cannot be read: {message}.")),
            }
        })?;
        let Some(parsed) = patch.hunks().first() else {
            return Err(ParseError::at(self.at + 1, "the hunk cannot be read."));
        };
        let lines = parsed
            .lines()
            .iter()
            .map(|line| {
                let (kind, text) = match *line {
                    diffy::Line::Context(text) => (LineKind::Context, text),
                    diffy::Line::Delete(text) => (LineKind::Delete, text),
                    diffy::Line::Insert(text) => (LineKind::Insert, text),
                };
                Line {
                    kind,
                    text: text.strip_suffix('\n').unwrap_or(text).to_owned(),
                    newline: text.ends_with('\n'),
                }
            })
            .collect();
        Ok(Hunk {
            header: self.header.trim_end().to_owned(),
            line: self.at + 1,
            start: self.starts.map(|(old, _)| old),
            anchors: Vec::new(),
            at_end: false,
            lines,
        })
    }
}

/// A hunk header's old and new ranges (start, count): `@@ -3,4 +3,5 @@`
/// (a count left out is 1); `None` when it states none (`@@ @@`, as a model
/// may write).
fn ranges(header: &str) -> Option<((usize, usize), (usize, usize))> {
    let rest = header.strip_prefix("@@")?;
    let (ranges, _) = rest.split_once("@@")?;
    let mut parts = ranges.split_whitespace();
    let old = range(parts.next()?.strip_prefix('-')?)?;
    let new = range(parts.next()?.strip_prefix('+')?)?;
    Some((old, new))
}

fn range(text: &str) -> Option<(usize, usize)> {
    match text.split_once(',') {
        Some((start, count)) => Some((start.parse().ok()?, count.parse().ok()?)),
        None => Some((text.parse().ok()?, 1)),
    }
}

/// Whether the hunk lines go on at `from` (past blank lines): the next
/// line that is not blank is a hunk line, and not a header or the `-- `
/// that starts `git format-patch`'s signature.
fn extends(lines: &[&str], from: usize) -> bool {
    let Some(at) = (from..lines.len()).find(|&at| !lines[at].is_empty()) else {
        return false;
    };
    let line = lines[at];
    let header = line.starts_with("@@")
        || line.starts_with("diff --git ")
        || is_file_header(lines, at)
        || line == "-- ";
    !header && matches!(line.as_bytes().first(), Some(b' ' | b'-' | b'+' | b'\\'))
}

impl Section<'_> {
    /// What the section does to its file; `None` for a change of mode
    /// only, which is not kept.
    fn change(&self, lines: &[&str]) -> Result<Option<FileChange>, ParseError> {
        let line = self.at + 1;
        let (old, new) = self.paths(lines)?;
        let shown = new.as_deref().or(old.as_deref()).unwrap_or("the file");
        if let Some(git) = &self.git {
            if git.binary {
                return Err(ParseError::at(
                    line,
                    format!(
                        "the change of {shown} is binary: apply_patch changes text files only."
                    ),
                ));
            }
            let refused = match git.mode {
                Some("120000") => Some("a symbolic link, which the workspace cannot hold"),
                Some("160000") => Some("a submodule, which the workspace cannot hold"),
                _ => None,
            };
            if let Some(what) = refused {
                return Err(ParseError::at(
                    line,
                    format!("the patch makes {shown} {what}."),
                ));
            }
        }
        let hunks = self
            .hunks
            .iter()
            .map(RawHunk::hunk)
            .collect::<Result<Vec<_>, _>>()?;
        let git = self.git.as_ref();
        let (kind, path) = if let Some((from, to)) = git.and_then(|git| both(git.rename)) {
            let (from, to) = (unquote(from, line)?, unquote(to, line)?);
            let move_to = (to != from).then_some(to);
            (Kind::Update { move_to }, from)
        } else if let Some((from, to)) = git.and_then(|git| both(git.copy)) {
            (
                Kind::Copy {
                    to: unquote(to, line)?,
                },
                unquote(from, line)?,
            )
        } else {
            match (old, new) {
                (None, Some(new)) => (Kind::Add, new),
                (Some(old), None) => (Kind::Delete, old),
                (Some(old), Some(_)) if git.is_some_and(|git| git.new_file) => (Kind::Add, old),
                (Some(old), Some(_)) if git.is_some_and(|git| git.deleted) => (Kind::Delete, old),
                (Some(old), Some(_)) => (Kind::Update { move_to: None }, old),
                (None, None) => {
                    return Err(ParseError::at(line, "the file's header names no file."));
                }
            }
        };
        let kind = match kind {
            Kind::Update { move_to } => Kind::Update {
                move_to: move_to.map(|to| checked_path(&to, line)).transpose()?,
            },
            Kind::Copy { to } => Kind::Copy {
                to: checked_path(&to, line)?,
            },
            other => other,
        };
        let path = checked_path(&path, line)?;
        if hunks.is_empty() && kind == (Kind::Update { move_to: None }) {
            if self.git.is_some() {
                return Ok(None);
            }
            return Err(ParseError::at(
                line,
                format!(
                    "the diff of {path} has no hunk (an `@@ -L,N +L,M @@` line, then its lines)."
                ),
            ));
        }
        Ok(Some(FileChange {
            path,
            kind,
            hunks,
            line,
        }))
    }

    /// The old and new paths, without git's `a/` and `b/` (`None` for
    /// `/dev/null`).
    fn paths(&self, lines: &[&str]) -> Result<(Option<String>, Option<String>), ParseError> {
        if let Some(git) = &self.git
            && let Some((from, to)) = both(git.rename).or(both(git.copy))
        {
            // git writes these without its prefixes.
            let line = self.at + 1;
            return Ok((Some(unquote(from, line)?), Some(unquote(to, line)?)));
        }
        let (old, new) = match (self.names, &self.git) {
            (Some(at), _) => header_names(lines, at)?,
            (None, Some(git)) => match git_paths(git.paths, self.at + 1)? {
                Some((old, new)) => (Some(old), Some(new)),
                None => {
                    return Err(ParseError::at(
                        self.at + 1,
                        format!(
                            "the paths of `diff --git {}` cannot be told apart.",
                            git.paths
                        ),
                    ));
                }
            },
            (None, None) => (None, None),
        };
        let prefixed = match &self.git {
            Some(git) => git.paths.starts_with("a/") || git.paths.starts_with("\"a/"),
            None => {
                (old.is_some() || new.is_some())
                    && old.as_deref().is_none_or(|old| old.starts_with("a/"))
                    && new.as_deref().is_none_or(|new| new.starts_with("b/"))
            }
        };
        let strip = |path: Option<String>, prefix: &str| {
            path.map(|path| match path.strip_prefix(prefix) {
                Some(stripped) if prefixed => stripped.to_owned(),
                _ => path,
            })
        };
        Ok((strip(old, "a/"), strip(new, "b/")))
    }
}

/// Both sides of a `rename` or `copy` pair, when both are there.
fn both<'a>(pair: (Option<&'a str>, Option<&'a str>)) -> Option<(&'a str, &'a str)> {
    Some((pair.0?, pair.1?))
}

/// The names of the `--- `, `+++ ` lines at `at`, as `diffy` reads them.
fn header_names(lines: &[&str], at: usize) -> Result<(Option<String>, Option<String>), ParseError> {
    let text = format!("{}\n{}\n", lines[at], lines[at + 1]);
    let patch = diffy::Patch::from_str(&text).map_err(|error| {
        ParseError::at(at + 1, format!("the file names cannot be read: {error}."))
    })?;
    let name = |name: Option<&str>| {
        name.map(str::trim_end)
            .filter(|name| *name != "/dev/null")
            .map(str::to_owned)
    };
    Ok((name(patch.original()), name(patch.modified())))
}

/// A name as git writes it: as it is, or quoted with C escapes.
fn unquote(name: &str, line: usize) -> Result<String, ParseError> {
    if !name.starts_with('"') {
        return Ok(name.to_owned());
    }
    let text = format!("--- {name}\n");
    diffy::Patch::from_str(&text)
        .ok()
        .and_then(|patch| patch.original().map(str::to_owned))
        .ok_or_else(|| ParseError::at(line, format!("the quoted name {name} cannot be read.")))
}

/// The two paths of a `diff --git` line that has no `--- `/`+++ ` after
/// it (an empty file's, a pure rename's): quoted, or the split whose two
/// sides name the same file.
fn git_paths(paths: &str, line: usize) -> Result<Option<(String, String)>, ParseError> {
    if paths.starts_with('"') {
        let bytes = paths.as_bytes();
        let mut at = 1;
        while at < bytes.len() && bytes[at] != b'"' {
            at += if bytes[at] == b'\\' { 2 } else { 1 };
        }
        let Some(split) = paths.get(..=at).zip(paths.get(at + 1..)) else {
            return Ok(None);
        };
        let old = unquote(split.0, line)?;
        let new = unquote(split.1.trim(), line)?;
        return Ok(Some((old, new)));
    }
    let found = paths.match_indices(' ').find_map(|(at, _)| {
        let (old, new) = (&paths[..at], &paths[at + 1..]);
        let same = old.strip_prefix("a/").unwrap_or(old) == new.strip_prefix("b/").unwrap_or(new);
        same.then(|| (old.to_owned(), new.to_owned()))
    });
    Ok(found)
}
