//! "Did you mean": when a tool is given a path that does not exist, its
//! error names up to three paths of the workspace that are close to it. A
//! model that guessed `src/utils.py` where there is `src/util.py` then
//! needs no listing to find it. Likewise for text: when lines a model
//! quotes from a file (`edit_file`'s `old_text`, a hunk of `apply_patch`)
//! are not in it, the error shows the file's lines most like them, with
//! their numbers ([`closest_lines`]).

use std::cmp::Ordering;
use std::collections::HashMap;

use super::error::WorkspaceError;
use super::path::RelativePath;
use super::text::{digits, numbered};
use super::workspace::{EntryKind, Workspace};
use crate::harness::ToolError;

/// Most suggestions named.
pub const MAX_SUGGESTIONS: usize = 3;

/// Most paths of a workspace compared: a huge tree is not walked whole for
/// a hint.
pub const MAX_CANDIDATES: usize = 20_000;

/// How close (0 to 1) a path's last name must be to the missing one's for
/// the path to be suggested. The folders do not decide it: every file of
/// the folder a model guessed right shares most of its path.
const MIN_NAME_SCORE: f64 = 0.6;

/// Among close names, how much the folders' closeness counts in the order.
const FOLDER_WEIGHT: f64 = 0.2;

/// Lines of the closest match shown at most when quoted text is not found.
const MAX_CLOSEST_LINES: usize = 20;

/// How similar (0 to 1) lines must be to the quoted text to be shown as the
/// closest: below it they would only mislead.
const MIN_SIMILARITY: f64 = 0.3;

/// Candidates of the first, cheap comparison compared again closely.
const RERANKED: usize = 5;

/// Texts longer than this (in bytes) are not compared closely: the edit
/// distance's cost grows with the product of the lengths.
const MAX_CLOSE_COMPARISON_BYTES: usize = 4000;

/// The kind of path a tool wants, and so suggests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    File,
    Dir,
    Any,
}

impl Want {
    fn accepts(self, kind: EntryKind) -> bool {
        match self {
            Self::File => kind == EntryKind::File,
            Self::Dir => kind == EntryKind::Dir,
            Self::Any => true,
        }
    }
}

/// Folders no walk for a hint or a search enters: a repository's history,
/// which is neither the model's work nor readable text.
pub fn is_skipped_dir(name: &str) -> bool {
    name == ".git"
}

/// The tool error for `error`: its message, and when it says a path does
/// not exist, the workspace's paths closest to it, of the kind wanted.
pub fn explain(workspace: &Workspace, error: WorkspaceError, want: Want) -> ToolError {
    let (missing, prefix) = match &error {
        WorkspaceError::NotFound(path) => (normalized(path), None),
        // The parent is what is missing; the suggestions are the file's
        // path in the folders close to it.
        WorkspaceError::ParentMissing(path) => {
            let path = normalized(path);
            match path.rsplit_once('/') {
                Some((parent, name)) => (parent.to_owned(), Some(name.to_owned())),
                None => return error.into(),
            }
        }
        _ => return error.into(),
    };
    let want = if prefix.is_some() { Want::Dir } else { want };
    let candidates = workspace.list_paths(MAX_CANDIDATES, &is_skipped_dir);
    let mut close = closest_paths(&missing, &candidates, want);
    if let Some(name) = prefix {
        for path in &mut close {
            *path = format!("{path}/{name}");
        }
    }
    ToolError::new(with_suggestions(&error.to_string(), &close))
}

/// `message`, followed by `Did you mean: A, B?` when there are paths to
/// suggest.
pub fn with_suggestions(message: &str, paths: &[String]) -> String {
    if paths.is_empty() {
        return message.to_owned();
    }
    format!("{message}\nDid you mean: {}?", paths.join(", "))
}

/// The path as the workspace resolves it, lexically: `./a//b` is `a/b`.
fn normalized(path: &str) -> String {
    RelativePath::parse(path).map_or_else(|_| path.to_owned(), |parsed| parsed.normalized())
}

/// Up to [`MAX_SUGGESTIONS`] of `candidates` (of the kind wanted) closest to
/// `missing`, closest first, compared without regard to case: those whose
/// last name is at least [`MIN_NAME_SCORE`] like `missing`'s, ordered by
/// that likeness and, a little, by their folders' likeness to `missing`'s.
pub fn closest_paths(missing: &str, candidates: &[(String, EntryKind)], want: Want) -> Vec<String> {
    if missing.is_empty() {
        return Vec::new();
    }
    let lower_missing = missing.to_lowercase();
    let (missing_folder, missing_name) = split(&lower_missing);
    let mut scored: Vec<(f64, &str)> = candidates
        .iter()
        .filter(|(_, kind)| want.accepts(*kind))
        .filter_map(|(path, _)| {
            if path == missing {
                return None;
            }
            let lower = path.to_lowercase();
            let (folder, name) = split(&lower);
            let name = strsim::normalized_damerau_levenshtein(missing_name, name);
            if name < MIN_NAME_SCORE {
                return None;
            }
            let folder = strsim::normalized_damerau_levenshtein(missing_folder, folder);
            let score = name * (1.0 - FOLDER_WEIGHT) + folder * FOLDER_WEIGHT;
            Some((score, path.as_str()))
        })
        .collect();
    scored.sort_by(|a, b| {
        b.0.partial_cmp(&a.0)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.1.cmp(b.1))
    });
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, path)| path.to_owned())
        .collect()
}

/// A path's folder (`""` at the root) and last name.
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// The lines of a file most like a text that was not found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closest {
    pub start_line: usize,
    pub end_line: usize,
    /// The lines, numbered, at most [`MAX_CLOSEST_LINES`].
    pub numbered: Vec<String>,
    /// The lines are the text but for whitespace (indentation, usually).
    pub whitespace_only: bool,
}

impl Closest {
    /// Where the lines are, as a message says it: `line 7` or
    /// `lines 7-9`.
    pub fn range(&self) -> String {
        if self.start_line == self.end_line {
            format!("line {}", self.start_line)
        } else {
            format!("lines {}-{}", self.start_line, self.end_line)
        }
    }
}

/// The window of lines of `content` most like `old` (as many lines as it
/// has), or `None` when nothing is close. Every window is scored by the
/// character pairs it shares with `old` (Sørensen–Dice, over lines with
/// their indentation trimmed, kept up to date as the window slides, so the
/// whole file costs one pass), and the best few again by their edit
/// distance (`strsim`) when they are short enough for it.
pub fn closest_lines(content: &str, old: &str) -> Option<Closest> {
    let lines: Vec<&str> = content.split_inclusive('\n').collect();
    if lines.is_empty() {
        return None;
    }
    let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
    let size = old_lines.len().clamp(1, lines.len());

    let mut wanted: HashMap<(char, char), i64> = HashMap::new();
    let mut wanted_total = 0i64;
    for line in &old_lines {
        for pair in pairs(line) {
            *wanted.entry(pair).or_default() += 1;
            wanted_total += 1;
        }
    }
    let line_pairs: Vec<Vec<(char, char)>> = lines.iter().map(|line| pairs(line)).collect();
    let mut window = Window {
        wanted: &wanted,
        held: HashMap::new(),
        held_total: 0,
        shared: 0,
    };
    for line in &line_pairs[..size] {
        window.add(line);
    }
    let mut scores = vec![(window.dice(wanted_total), 0)];
    for start in 1..=lines.len() - size {
        window.remove(&line_pairs[start - 1]);
        window.add(&line_pairs[start + size - 1]);
        scores.push((window.dice(wanted_total), start));
    }
    scores.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));

    // The close comparison ignores how whitespace is laid out, as the
    // first does: text that is right but for its indentation is the
    // likeliest miss, and must not lose to other lines indented alike.
    let squeezed_old = squeeze(&old_lines).join("\n");
    let (score, start) = scores
        .into_iter()
        .take(RERANKED)
        .map(|(dice, start)| {
            let text = squeeze(&lines[start..start + size]).join("\n");
            let close = text.len() <= MAX_CLOSE_COMPARISON_BYTES
                && squeezed_old.len() <= MAX_CLOSE_COMPARISON_BYTES;
            let score = if close {
                strsim::normalized_levenshtein(&text, &squeezed_old)
            } else {
                dice
            };
            (score, start)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))?;
    if score < MIN_SIMILARITY {
        return None;
    }
    let end = start + size;
    let shown_until = end.min(start + MAX_CLOSEST_LINES);
    let mut numbered = numbered(&lines, start + 1, shown_until, digits(end));
    if shown_until < end {
        numbered.push(format!("... (to line {end})"));
    }
    Some(Closest {
        start_line: start + 1,
        end_line: end,
        numbered,
        whitespace_only: squeeze(&lines[start..end]) == squeeze(&old_lines),
    })
}

/// Lines with their runs of whitespace made one space, and none at either
/// end.
fn squeeze(lines: &[&str]) -> Vec<String> {
    lines
        .iter()
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// The pairs of adjacent characters of a line, its indentation and
/// trailing space left out, and a newline before it so that line starts
/// count too.
fn pairs(line: &str) -> Vec<(char, char)> {
    let chars: Vec<char> = std::iter::once('\n').chain(line.trim().chars()).collect();
    chars.windows(2).map(|pair| (pair[0], pair[1])).collect()
}

/// The character pairs of a window of lines, and how many of them `old`
/// has too (each pair counted as often as both have it).
struct Window<'a> {
    wanted: &'a HashMap<(char, char), i64>,
    held: HashMap<(char, char), i64>,
    held_total: i64,
    shared: i64,
}

impl Window<'_> {
    fn add(&mut self, pairs: &[(char, char)]) {
        for pair in pairs {
            let held = self.held.entry(*pair).or_default();
            if *held < self.wanted.get(pair).copied().unwrap_or(0) {
                self.shared += 1;
            }
            *held += 1;
            self.held_total += 1;
        }
    }

    fn remove(&mut self, pairs: &[(char, char)]) {
        for pair in pairs {
            let held = self.held.entry(*pair).or_default();
            *held -= 1;
            if *held < self.wanted.get(pair).copied().unwrap_or(0) {
                self.shared -= 1;
            }
            self.held_total -= 1;
        }
    }

    fn dice(&self, wanted_total: i64) -> f64 {
        let total = self.held_total + wanted_total;
        if total == 0 {
            return 0.0;
        }
        2.0 * self.shared as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(paths: &[&str]) -> Vec<(String, EntryKind)> {
        paths
            .iter()
            .map(|path| match path.strip_suffix('/') {
                Some(dir) => (dir.to_owned(), EntryKind::Dir),
                None => ((*path).to_owned(), EntryKind::File),
            })
            .collect()
    }

    #[test]
    fn close_names_are_suggested_closest_first() {
        let candidates = tree(&[
            "src/",
            "src/main.py",
            "src/util.py",
            "src/utils_test.py",
            "tests/",
            "tests/test_util.py",
            "README.md",
        ]);
        assert_eq!(
            closest_paths("src/utils.py", &candidates, Want::File),
            ["src/util.py", "src/utils_test.py"]
        );
        // The same name in another folder, and another case.
        assert_eq!(
            closest_paths("main.py", &candidates, Want::File),
            ["src/main.py"]
        );
        assert_eq!(
            closest_paths("readme.md", &candidates, Want::Any),
            ["README.md"]
        );
        // Nothing close: nothing named.
        assert!(closest_paths("Cargo.toml", &candidates, Want::Any).is_empty());
        assert!(closest_paths("", &candidates, Want::Any).is_empty());
    }

    #[test]
    fn only_the_kind_wanted_is_suggested_and_at_most_three() {
        let candidates = tree(&[
            "test/", "tests/", "test.py", "tests.py", "text.py", "best.py",
        ]);
        assert_eq!(
            closest_paths("tests_", &candidates, Want::Dir),
            ["tests", "test"]
        );
        let files = closest_paths("test_.py", &candidates, Want::File);
        assert_eq!(files.len(), MAX_SUGGESTIONS, "{files:?}");
        assert!(files.iter().all(|f| f.ends_with(".py")), "{files:?}");
    }

    #[test]
    fn suggestions_follow_the_message() {
        assert_eq!(
            with_suggestions("No such file or directory: a", &["b".into(), "c".into()]),
            "No such file or directory: a\nDid you mean: b, c?"
        );
        assert_eq!(with_suggestions("Gone", &[]), "Gone");
    }
}
