//! The `*** Begin Patch` format OpenAI's models are trained to write
//! (codex's `apply_patch`). No crate reads it, so this small parser does,
//! following codex's grammar and its leniencies:
//!
//! ```text
//! *** Begin Patch
//! *** Add File: PATH          then its lines, each '+'
//! *** Delete File: PATH
//! *** Update File: PATH
//! *** Move to: NEW PATH       optional
//! @@ a line above the change  or a bare @@; the first change may omit it
//!  an unchanged line
//! -a removed line
//! +an added line
//! *** End of File             optional: the change ends the file
//! *** End Patch
//! ```
//!
//! Also taken: marker lines with spaces around them, the patch wrapped in
//! a shell heredoc (`<<'EOF'` … `EOF`, as GPT-4.1 writes it, perhaps after
//! `apply_patch` on the same line), an empty line inside a change as an
//! empty unchanged line, several `@@ LINE` lines in a row (each looked for
//! after the one before), `@@ -L,N +L,M @@` as the line a change starts
//! on, and a pure move (`Move to` with no change).

use super::{FileChange, Hunk, Kind, Line, LineKind, ParseError, checked_path};

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

/// Reads the patch `lines` (all of them, so that numbers are the patch's).
pub(super) fn parse(lines: &[&str]) -> Result<Vec<FileChange>, ParseError> {
    let mut body = non_blank(lines);
    let (Some(mut first), Some(mut last)) = (body.next(), body.next_back()) else {
        return Err(ParseError::at(
            1,
            format!("a patch in this format starts with `{BEGIN}` and ends with `{END}`."),
        ));
    };
    let heredoc = lines[first]
        .rsplit_once("<<")
        .is_some_and(|(_, tag)| tag.trim().trim_matches(['\'', '"']) == "EOF");
    if heredoc {
        if lines[last].trim() != "EOF" {
            return Err(ParseError::at(
                last + 1,
                "the patch opens a heredoc (`<<EOF`) that no `EOF` line closes.",
            ));
        }
        let mut inner = non_blank(&lines[..last]).filter(|&at| at > first);
        match (inner.next(), inner.next_back()) {
            (Some(begin), Some(end)) => (first, last) = (begin, end),
            _ => return Err(ParseError::at(first + 1, format!("`{BEGIN}` is missing."))),
        }
    }
    if lines[first].trim() != BEGIN {
        return Err(ParseError::at(
            first + 1,
            format!(
                "a patch in this format starts with `{BEGIN}`, not `{}`.",
                lines[first].trim()
            ),
        ));
    }
    if lines[last].trim() != END {
        return Err(ParseError::at(
            last + 1,
            format!(
                "the patch must end with `{END}`, not `{}`: was it cut off? Send it whole.",
                lines[last].trim()
            ),
        ));
    }
    let mut parser = Parser {
        lines,
        at: first + 1,
        end: last,
    };
    let mut changes = Vec::new();
    while let Some(change) = parser.file()? {
        changes.push(change);
    }
    Ok(changes)
}

/// The indexes of the lines that are not blank.
fn non_blank<'a>(lines: &'a [&str]) -> impl DoubleEndedIterator<Item = usize> + 'a {
    (0..lines.len()).filter(|&at| !lines[at].trim().is_empty())
}

struct Parser<'a> {
    lines: &'a [&'a str],
    /// The next line to read.
    at: usize,
    /// The `*** End Patch` line.
    end: usize,
}

impl<'a> Parser<'a> {
    /// The line at `at`, if it is before the end.
    fn peek(&self) -> Option<&'a str> {
        (self.at < self.end).then(|| self.lines[self.at])
    }

    /// The next file's section, if there is one.
    fn file(&mut self) -> Result<Option<FileChange>, ParseError> {
        while self.peek().is_some_and(|line| line.trim().is_empty()) {
            self.at += 1;
        }
        let Some(line) = self.peek() else {
            return Ok(None);
        };
        let number = self.at + 1;
        let marker = line.trim();
        self.at += 1;
        if let Some(path) = marker.strip_prefix(ADD) {
            let path = checked_path(path, number)?;
            let hunk = self.added(number)?;
            return Ok(Some(FileChange {
                path,
                kind: Kind::Add,
                hunks: vec![hunk],
                line: number,
            }));
        }
        if let Some(path) = marker.strip_prefix(DELETE) {
            return Ok(Some(FileChange {
                path: checked_path(path, number)?,
                kind: Kind::Delete,
                hunks: Vec::new(),
                line: number,
            }));
        }
        if let Some(path) = marker.strip_prefix(UPDATE) {
            let path = checked_path(path, number)?;
            let move_to = match self.peek().map(str::trim) {
                Some(line) if line.starts_with(MOVE) => {
                    let to = checked_path(&line[MOVE.len()..], self.at + 1)?;
                    self.at += 1;
                    Some(to).filter(|to| *to != path)
                }
                _ => None,
            };
            let hunks = self.changes(&path)?;
            if hunks.is_empty() && move_to.is_none() {
                return Err(ParseError::at(
                    number,
                    format!(
                        "`{UPDATE} {path}` has no change after it: a change is an `@@` line, \
                         then its lines (' ' unchanged, '-' removed, '+' added)."
                    ),
                ));
            }
            return Ok(Some(FileChange {
                path,
                kind: Kind::Update { move_to },
                hunks,
                line: number,
            }));
        }
        let found = if marker == END {
            format!("`{END}` before the patch's last line")
        } else {
            format!("`{marker}`")
        };
        Err(ParseError::at(
            number,
            format!(
                "expected `{ADD} PATH`, `{UPDATE} PATH`, `{DELETE} PATH` or `{END}`, found \
                 {found}."
            ),
        ))
    }

    /// An added file's lines, each `+`: one hunk of them.
    fn added(&mut self, header: usize) -> Result<Hunk, ParseError> {
        let mut lines = Vec::new();
        while let Some(line) = self.peek() {
            if let Some(text) = line.strip_prefix('+') {
                lines.push(Line::new(LineKind::Insert, text));
            } else if self.at_section_end() {
                break;
            } else {
                return Err(ParseError::at(
                    self.at + 1,
                    "every line of an added file starts with '+' (an empty line is a lone '+').",
                ));
            }
            self.at += 1;
        }
        Ok(Hunk {
            header: "the added file's lines".to_owned(),
            line: header,
            start: Some(0),
            anchors: Vec::new(),
            at_end: false,
            lines,
        })
    }

    /// Whether only blank lines stand between `at` and the next section
    /// (or the end).
    fn at_section_end(&self) -> bool {
        let next = (self.at..self.end).find(|&at| !self.lines[at].trim().is_empty());
        next.is_none_or(|at| is_section(self.lines[at]))
    }

    /// An updated file's changes, up to the next section.
    fn changes(&mut self, path: &str) -> Result<Vec<Hunk>, ParseError> {
        let mut hunks: Vec<Hunk> = Vec::new();
        let mut current: Option<Hunk> = None;
        while let Some(line) = self.peek() {
            let number = self.at + 1;
            if line.trim().is_empty() && self.at_section_end() || is_section(line) {
                break;
            }
            self.at += 1;
            if line.trim() == END_OF_FILE {
                let Some(mut hunk) = current.take().filter(|hunk| !hunk.lines.is_empty()) else {
                    return Err(ParseError::at(
                        number,
                        format!("`{END_OF_FILE}` ends a change, and no change is before it."),
                    ));
                };
                hunk.at_end = true;
                hunks.push(hunk);
                continue;
            }
            if let Some(rest) = line.strip_prefix("@@") {
                let hunk = match current.take() {
                    // `@@` lines in a row: each a line to find before the next.
                    Some(hunk) if hunk.lines.is_empty() => hunk,
                    done => {
                        hunks.extend(done);
                        Hunk {
                            header: line.trim_end().to_owned(),
                            line: number,
                            start: None,
                            anchors: Vec::new(),
                            at_end: false,
                            lines: Vec::new(),
                        }
                    }
                };
                current = Some(with_header(hunk, rest));
                continue;
            }
            let (kind, text) = match line.chars().next() {
                Some(' ') | None => (LineKind::Context, line.get(1..).unwrap_or("")),
                Some('-') => (LineKind::Delete, &line[1..]),
                Some('+') => (LineKind::Insert, &line[1..]),
                // A blank line whose mark was lost, as a tab's.
                _ if line.trim().is_empty() => (LineKind::Context, ""),
                _ => {
                    return Err(ParseError::at(
                        number,
                        format!(
                            "`{}` is not a line of a change to {path}: each starts with ' ' \
                             (unchanged), '-' (removed) or '+' (added), and a change starts \
                             with an `@@` line.",
                            line.trim_end()
                        ),
                    ));
                }
            };
            current
                .get_or_insert_with(|| Hunk {
                    header: "the change without an @@ line".to_owned(),
                    line: number,
                    start: None,
                    anchors: Vec::new(),
                    at_end: false,
                    lines: Vec::new(),
                })
                .lines
                .push(Line::new(kind, text));
        }
        match current {
            Some(hunk) if hunk.lines.is_empty() => Err(ParseError::at(
                hunk.line,
                "an `@@` line with no change after it.",
            )),
            done => {
                hunks.extend(done);
                Ok(hunks)
            }
        }
    }
}

/// Whether `line` starts a file's section or ends the patch.
fn is_section(line: &str) -> bool {
    let line = line.trim();
    line == END
        || [ADD, DELETE, UPDATE]
            .iter()
            .any(|marker| line.starts_with(marker))
}

/// `hunk` with what followed an `@@`: the line a unified header states
/// (`-L,N +L,M @@`), or a line to find before the change, or nothing.
fn with_header(mut hunk: Hunk, rest: &str) -> Hunk {
    let rest = rest.trim();
    if rest.is_empty() {
        return hunk;
    }
    if let Some(start) = unified_start(rest) {
        hunk.start = Some(start);
        return hunk;
    }
    if hunk.header != format!("@@ {rest}") {
        hunk.header = format!("{} / @@ {rest}", hunk.header);
    }
    hunk.anchors.push(rest.to_owned());
    hunk
}

/// The old start of a unified hunk header's ranges, `-L,N +L,M @@`.
fn unified_start(rest: &str) -> Option<usize> {
    let (ranges, _) = rest.split_once("@@")?;
    let mut parts = ranges.split_whitespace();
    let old = parts.next()?.strip_prefix('-')?;
    parts.next()?.strip_prefix('+')?;
    let start = old.split(',').next()?;
    start.parse().ok()
}
