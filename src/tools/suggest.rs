//! "Did you mean": when a tool is given a path that does not exist, its
//! error names up to three paths of the workspace that are close to it. A
//! model that guessed `src/utils.py` where there is `src/util.py` then
//! needs no listing to find it.

use std::cmp::Ordering;

use super::error::WorkspaceError;
use super::path::RelativePath;
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
