//! Placing hunks: where each hunk's old lines (unchanged and removed) are
//! in its file, and the text the file becomes.
//!
//! A hunk is looked for first where the patch says it is (moved by as
//! much as the hunks before it were found off their stated lines, as GNU
//! patch does), then ever further from there, up and down, within the part
//! of the file after the previous hunk; a hunk that states no line (the
//! envelope's) from the previous hunk on, after the lines it names with
//! `@@`. So hunks apply in order and never overlap. Each search is made
//! twice: with the lines as given, then ignoring whitespace at their ends
//! (a model drops or adds trailing spaces; codex's `apply_patch` makes the
//! same second pass). The file's own unchanged lines and line ends are
//! kept; new lines take the file's line end (CRLF when most of its lines
//! end so).

use std::borrow::Cow;

use super::super::suggest::{Closest, closest_lines};
use super::super::text::cut_line;
use super::{Hunk, LineKind};

/// Lines of a hunk an error quotes at most.
const MAX_QUOTED_LINES: usize = 20;

/// A file's new text.
#[derive(Debug)]
pub(super) struct Placed {
    pub text: String,
    /// The byte ranges of `text` the hunks wrote, in order (empty where
    /// lines were only removed), for a snippet.
    pub changed: Vec<(usize, usize)>,
    pub insertions: usize,
    pub deletions: usize,
}

/// A hunk that does not apply: its index among the file's hunks, and why.
#[derive(Debug)]
pub(super) struct Misplaced {
    pub index: usize,
    pub reason: Reason,
}

#[derive(Debug)]
pub(super) enum Reason {
    /// A line the hunk names after `@@` is not in the file after its first
    /// `after` lines.
    Anchor {
        anchor: String,
        after: usize,
        closest: Option<Closest>,
    },
    /// The hunk's old lines are not in the file after its first `after`
    /// lines.
    Lines {
        after: usize,
        closest: Option<Closest>,
        /// Where the hunk's new lines are, when they already are (1-based,
        /// inclusive): the patch may have been applied before.
        applied: Option<(usize, usize)>,
    },
}

/// A line of a file, and its end (`"\n"`, `"\r\n"`, or `""` for a last
/// line without one).
struct FileLine<'a> {
    text: &'a str,
    eol: &'a str,
}

fn split(content: &str) -> Vec<FileLine<'_>> {
    content
        .split_inclusive('\n')
        .map(|line| {
            let text = line.strip_suffix('\n').unwrap_or(line);
            let text = if text.len() < line.len() {
                text.strip_suffix('\r').unwrap_or(text)
            } else {
                text
            };
            FileLine {
                text,
                eol: &line[text.len()..],
            }
        })
        .collect()
}

/// The line end most of the file's lines have (`"\n"` for a new file).
fn line_end(content: &str) -> &'static str {
    let crlf = content.matches("\r\n").count();
    if crlf > 0 && crlf * 2 >= content.matches('\n').count() {
        "\r\n"
    } else {
        "\n"
    }
}

/// How a hunk's line is compared with a file's on one pass.
#[derive(Clone, Copy)]
enum Pass {
    Exact,
    TrailingSpace,
    /// Indentation too: only for the lines a hunk names after `@@`, which
    /// only say where to look.
    Trimmed,
}

impl Pass {
    fn same(self, file: &str, hunk: &str) -> bool {
        match self {
            Self::Exact => file == hunk,
            Self::TrailingSpace => file.trim_end() == hunk.trim_end(),
            Self::Trimmed => file.trim() == hunk.trim(),
        }
    }
}

const LINE_PASSES: [Pass; 2] = [Pass::Exact, Pass::TrailingSpace];
const ANCHOR_PASSES: [Pass; 3] = [Pass::Exact, Pass::TrailingSpace, Pass::Trimmed];

/// The text `content` becomes with `hunks` applied in order, or the first
/// hunk that does not apply.
pub(super) fn place(content: &str, hunks: &[Hunk]) -> Result<Placed, Misplaced> {
    let lines = split(content);
    let mut out = Output {
        text: String::with_capacity(content.len()),
        eol: line_end(content),
        open: false,
        changed: Vec::new(),
        insertions: 0,
        deletions: 0,
    };
    // Lines before `cursor` are written (or removed) already.
    let mut cursor = 0;
    let mut drift: isize = 0;
    for (index, hunk) in hunks.iter().enumerate() {
        let mut after = cursor;
        let mut anchored = None;
        for anchor in &hunk.anchors {
            let found = ANCHOR_PASSES.iter().find_map(|pass| {
                (after..lines.len()).find(|&at| pass.same(lines[at].text, anchor))
            });
            let Some(at) = found else {
                return Err(Misplaced {
                    index,
                    reason: Reason::Anchor {
                        anchor: anchor.clone(),
                        after,
                        closest: closest_lines(content, anchor),
                    },
                });
            };
            after = at + 1;
            anchored = Some(at);
        }
        // The lines follow the last anchor; a hunk that repeats it as its
        // first line is taken too.
        let located = locate(&lines, hunk, after, drift)
            .or_else(|| anchored.and_then(|at| locate(&lines, hunk, at, drift)));
        let (hunk, at, stated) = located.ok_or_else(|| {
            let old = joined(hunk.old_lines().map(|line| line.text.as_str()));
            Misplaced {
                index,
                reason: Reason::Lines {
                    after,
                    closest: closest_lines(content, &old),
                    applied: already_applied(&lines, hunk),
                },
            }
        })?;
        if let Some(stated) = stated {
            drift = at as isize - stated as isize;
        }
        for line in &lines[cursor..at] {
            out.push(line.text, line.eol);
        }
        cursor = at;
        let mut run: Option<usize> = None;
        for line in &hunk.lines {
            match line.kind {
                LineKind::Context => {
                    out.close(&mut run);
                    let kept = &lines[cursor];
                    out.push(kept.text, kept.eol);
                    cursor += 1;
                }
                LineKind::Delete => {
                    out.open(&mut run, false);
                    out.deletions += 1;
                    cursor += 1;
                }
                LineKind::Insert => {
                    out.open(&mut run, true);
                    let eol = if line.newline { out.eol } else { "" };
                    out.push(&line.text, eol);
                    out.insertions += 1;
                }
            }
        }
        out.close(&mut run);
    }
    for line in &lines[cursor..] {
        out.push(line.text, line.eol);
    }
    Ok(Placed {
        text: out.text,
        changed: out.changed,
        insertions: out.insertions,
        deletions: out.deletions,
    })
}

/// Where `hunk`'s old lines start, at or after line index `after`: the
/// hunk as placed (without the blank lines it ended with, when only
/// without them it is found, as codex allows), the index, and the index
/// the patch stated (moved by `drift`), if it stated one.
fn locate<'h>(
    lines: &[FileLine<'_>],
    hunk: &'h Hunk,
    after: usize,
    drift: isize,
) -> Option<(Cow<'h, Hunk>, usize, Option<usize>)> {
    let mut hunk = Cow::Borrowed(hunk);
    loop {
        let old: Vec<&str> = hunk.old_lines().map(|line| line.text.as_str()).collect();
        let stated = hunk.start.map(|start| {
            if old.is_empty() {
                start
            } else {
                start.saturating_sub(1)
            }
        });
        let hint = stated.map(|at| at.saturating_add_signed(drift));
        let found = if old.is_empty() {
            // Nothing to find: where it is said to go, or after the lines it
            // names, or at the end.
            Some(match hint {
                Some(hint) => hint.clamp(after, lines.len()),
                None if !hunk.anchors.is_empty() && !hunk.at_end => after,
                None => lines.len(),
            })
        } else {
            find(lines, &old, after, hint, hunk.at_end)
        };
        if let Some(at) = found {
            return Some((hunk, at, stated));
        }
        let blank_end = hunk
            .lines
            .last()
            .is_some_and(|line| line.kind == LineKind::Context && line.text.trim().is_empty());
        if !blank_end {
            return None;
        }
        let mut shorter = hunk.into_owned();
        while shorter
            .lines
            .last()
            .is_some_and(|line| line.kind == LineKind::Context && line.text.trim().is_empty())
        {
            shorter.lines.pop();
        }
        hunk = Cow::Owned(shorter);
    }
}

/// The first index at or after `after` where `old` is, on the first pass
/// that finds it: nearest `hint` first when there is one, at the very end
/// for a hunk that ends the file.
fn find(
    lines: &[FileLine<'_>],
    old: &[&str],
    after: usize,
    hint: Option<usize>,
    at_end: bool,
) -> Option<usize> {
    let last = lines.len().checked_sub(old.len())?;
    if last < after {
        return None;
    }
    LINE_PASSES.iter().find_map(|pass| {
        let matches = |at: usize| {
            old.iter()
                .zip(&lines[at..])
                .all(|(want, line)| pass.same(line.text, want))
        };
        if at_end {
            return matches(last).then_some(last);
        }
        match hint {
            Some(hint) => outward(hint.clamp(after, last), after, last).find(|&at| matches(at)),
            None => (after..=last).find(|&at| matches(at)),
        }
    })
}

/// `from`, then the indexes one further each way, then two, within
/// `low..=high`.
fn outward(from: usize, low: usize, high: usize) -> impl Iterator<Item = usize> {
    (0..=high - low).flat_map(move |distance| {
        let below = from.checked_sub(distance).filter(|&at| at >= low);
        let above = Some(from + distance).filter(|&at| distance > 0 && at <= high);
        below.into_iter().chain(above)
    })
}

/// Where the hunk's new lines already are, if they are and differ from
/// its old ones (1-based, inclusive).
fn already_applied(lines: &[FileLine<'_>], hunk: &Hunk) -> Option<(usize, usize)> {
    let new: Vec<&str> = hunk.new_lines().map(|line| line.text.as_str()).collect();
    let old: Vec<&str> = hunk.old_lines().map(|line| line.text.as_str()).collect();
    if new.is_empty() || new == old {
        return None;
    }
    let at = find(lines, &new, 0, None, false)?;
    Some((at + 1, at + new.len()))
}

/// Lines as one text, each ended by a newline.
fn joined<'a>(lines: impl Iterator<Item = &'a str>) -> String {
    lines.flat_map(|line| [line, "\n"]).collect()
}

/// The new text as it is written.
struct Output {
    text: String,
    /// The line end of new lines.
    eol: &'static str,
    /// The last line written has no line end yet.
    open: bool,
    changed: Vec<(usize, usize)>,
    insertions: usize,
    deletions: usize,
}

impl Output {
    /// Writes a line; a line before it that had no end (the file's last,
    /// which is no longer) gets one.
    fn push(&mut self, text: &str, eol: &str) {
        if self.open {
            self.text.push_str(self.eol);
        }
        self.text.push_str(text);
        self.text.push_str(eol);
        self.open = eol.is_empty();
    }

    /// Starts a run of changed lines, unless one is started; `writing`:
    /// with a line about to be written (after the end a line before it
    /// may still need).
    fn open(&mut self, run: &mut Option<usize>, writing: bool) {
        if run.is_none() {
            let pending = if writing && self.open {
                self.eol.len()
            } else {
                0
            };
            *run = Some(self.text.len() + pending);
        }
    }

    fn close(&mut self, run: &mut Option<usize>) {
        if let Some(start) = run.take() {
            self.changed.push((start, self.text.len().max(start)));
        }
    }
}

impl Misplaced {
    /// The error as the model reads it (what to do about it is the
    /// caller's to add).
    pub(super) fn message(&self, path: &str, hunks: &[Hunk]) -> String {
        let Some(hunk) = hunks.get(self.index) else {
            return format!("A hunk of {path} does not apply.");
        };
        let name = format!(
            "Hunk {} of {path} ({}, line {} of the patch)",
            self.index + 1,
            hunk.header,
            hunk.line
        );
        match &self.reason {
            Reason::Anchor {
                anchor,
                after,
                closest,
            } => {
                let mut message = format!(
                    "{name} does not apply: the line `{}` it names after @@ is not in {path}{}. \
                     After @@, name a line of the file exactly as it is (or nothing).",
                    anchor.trim(),
                    searched(*after, self.index)
                );
                message.push_str(&closest_text(path, closest.as_ref(), *after, "it"));
                message
            }
            Reason::Lines {
                after,
                closest,
                applied,
            } => {
                let place = if hunk.at_end {
                    " at its end (the hunk is marked `*** End of File`)".to_owned()
                } else {
                    searched(*after, self.index)
                };
                let mut message = format!(
                    "{name} does not apply: its unchanged and removed lines are not in \
                     {path}{place}. It expects these lines (' ' unchanged, '-' removed):\n{}",
                    quoted(hunk)
                );
                if let Some((first, last)) = applied {
                    message.push_str(&format!(
                        "\nIts new lines are already at lines {first}-{last} of {path}: the \
                         change may have been made already."
                    ));
                }
                message.push_str(&closest_text(path, closest.as_ref(), *after, "them"));
                message
            }
        }
    }
}

/// Where a hunk was looked for, when not in the whole file.
fn searched(after: usize, index: usize) -> String {
    match (after, index) {
        (0, _) => String::new(),
        (after, 0) => format!(" after line {after}"),
        (after, index) => format!(" after line {after} (where hunk {index} ends)"),
    }
}

/// The hunk's old lines as the patch has them, at most
/// [`MAX_QUOTED_LINES`].
fn quoted(hunk: &Hunk) -> String {
    let old: Vec<String> = hunk
        .old_lines()
        .map(|line| cut_line(&line.marked(), 0))
        .collect();
    let mut shown: Vec<String> = old.iter().take(MAX_QUOTED_LINES).cloned().collect();
    if old.len() > MAX_QUOTED_LINES {
        shown.push(format!("... ({} more lines)", old.len() - MAX_QUOTED_LINES));
    }
    shown.join("\n")
}

/// The file's lines closest to what was not found, or that none are.
fn closest_text(path: &str, closest: Option<&Closest>, after: usize, them: &str) -> String {
    let Some(closest) = closest else {
        return format!("\nNo lines of {path} are close to {them}.");
    };
    let lines = if closest.start_line == closest.end_line {
        "line"
    } else {
        "lines"
    };
    let mut text = format!(
        "\nThe closest {lines} of {path}, at {}:\n{}",
        closest.range(),
        closest.numbered.join("\n")
    );
    if closest.whitespace_only {
        text.push_str("\nThey differ from the hunk's only in whitespace or indentation.");
    }
    if after > 0 && closest.start_line <= after {
        text.push_str(&format!(
            "\nThat is before line {}, where this hunk could start: hunks must come in the \
             order of the file, without overlapping.",
            after + 1
        ));
    }
    text
}
