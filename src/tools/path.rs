//! Workspace-relative paths, parsed once from untrusted text.

use std::fmt;

use super::error::WorkspaceError;

/// Longest path text accepted, in bytes: the kernel's `PATH_MAX`. It also
/// bounds how many directory descriptors one resolution may hold.
pub const MAX_PATH_BYTES: usize = 4096;

/// The form of a file's path that a write may create: what the workspace
/// listing shows and the download route serves, so every file a run writes
/// can be fetched by the name it was written under. Relative, with no
/// empty, `.` or `..` component (so no `a//b`, no trailing `/`), no NUL and
/// no backslash (which other systems read as a separator). Reads and
/// listings take any [`RelativePath`]; this is the stricter rule for names.
pub fn check_file_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("the path is empty");
    }
    if path.len() > MAX_PATH_BYTES {
        return Err("the path is too long");
    }
    if path.starts_with('/') {
        return Err("the path must be relative to the workspace");
    }
    if path.contains('\0') || path.contains('\\') {
        return Err("the path contains a forbidden character (NUL or backslash)");
    }
    if path
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err("the path must not contain empty, '.' or '..' components");
    }
    if path.split('/').any(|part| part.len() > MAX_NAME_BYTES) {
        return Err("a name in the path is longer than 255 bytes");
    }
    Ok(())
}

/// Longest name of one path component, in bytes: the kernel's `NAME_MAX`.
pub const MAX_NAME_BYTES: usize = 255;

/// One step of a [`RelativePath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// A directory entry name: no `/`, no NUL, not `.` or `..`.
    Name(String),
    /// `..`: back to the directory the walk came from.
    Up,
}

/// A path relative to a workspace root that does not lexically leave it.
///
/// Parsing refuses empty text, absolute paths, NUL bytes, overlong paths and any
/// `..` that climbs above the root; it drops `.` and empty segments (`a//b`,
/// `a/`). Surviving `..` steps are kept rather than folded away, so that they
/// are resolved against real directories: `link/../x` still fails when `link`
/// is a symbolic link.
///
/// This check is lexical. It gives a model a clear message early, but it is not
/// what keeps a path inside the workspace: resolution from the root's directory
/// descriptor does that (see [`super::workspace`]).
#[derive(Clone, PartialEq, Eq)]
pub struct RelativePath {
    text: String,
    steps: Vec<Step>,
    depth: usize,
}

impl RelativePath {
    /// Parses `text`. `"."` (and anything equivalent, like `a/..`) is valid and
    /// names the root; callers that must not touch the root check
    /// [`RelativePath::is_root`].
    pub fn parse(text: &str) -> Result<Self, WorkspaceError> {
        if text.is_empty() {
            return Err(WorkspaceError::EmptyPath);
        }
        if text.len() > MAX_PATH_BYTES {
            return Err(WorkspaceError::PathTooLong {
                limit: MAX_PATH_BYTES,
            });
        }
        if text.contains('\0') {
            return Err(WorkspaceError::InvalidPath {
                path: text.to_owned(),
                reason: "it contains a NUL byte",
            });
        }
        if text.starts_with('/') {
            return Err(WorkspaceError::Outside(text.to_owned()));
        }
        let mut steps = Vec::new();
        let mut depth = 0usize;
        for segment in text.split('/') {
            match segment {
                "" | "." => {}
                ".." => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or_else(|| WorkspaceError::Outside(text.to_owned()))?;
                    steps.push(Step::Up);
                }
                name => {
                    depth += 1;
                    steps.push(Step::Name(name.to_owned()));
                }
            }
        }
        Ok(Self {
            text: text.to_owned(),
            steps,
            depth,
        })
    }

    /// The text this path was parsed from, as the caller wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the path names the workspace root itself.
    pub fn is_root(&self) -> bool {
        self.depth == 0
    }

    /// The path with its `.` and empty segments dropped and each `..`
    /// folded into the name before it: `./src//a/../b.py` is `src/b.py`,
    /// and the root is `""`. For showing paths found below this one; it
    /// names the same file as this path only where no link is involved,
    /// which is all a workspace resolves.
    pub fn normalized(&self) -> String {
        let mut names: Vec<&str> = Vec::new();
        for step in &self.steps {
            match step {
                Step::Name(name) => names.push(name),
                Step::Up => {
                    names.pop();
                }
            }
        }
        names.join("/")
    }

    pub(crate) fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The steps to the parent directory and the final name, when the path ends
    /// in a name. `None` for the root and for paths ending in `..`, which name
    /// directories.
    pub(crate) fn split_last(&self) -> Option<(&[Step], &str)> {
        match self.steps.split_last() {
            Some((Step::Name(name), parent)) => Some((parent, name)),
            _ => None,
        }
    }
}

impl fmt::Debug for RelativePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RelativePath").field(&self.text).finish()
    }
}

impl fmt::Display for RelativePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The steps as one path string for `openat2`, `"."` when there are none.
pub(crate) fn join_steps(steps: &[Step]) -> String {
    if steps.is_empty() {
        return ".".to_owned();
    }
    let parts: Vec<&str> = steps
        .iter()
        .map(|step| match step {
            Step::Name(name) => name.as_str(),
            Step::Up => "..",
        })
        .collect();
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(text: &str) -> Vec<Step> {
        RelativePath::parse(text).unwrap().steps
    }

    fn name(text: &str) -> Step {
        Step::Name(text.to_owned())
    }

    #[test]
    fn plain_paths_become_names() {
        assert_eq!(steps("a/b.txt"), vec![name("a"), name("b.txt")]);
        assert_eq!(steps("./a//b/"), vec![name("a"), name("b")]);
        assert_eq!(steps("..."), vec![name("...")]);
    }

    #[test]
    fn the_root_is_recognised_however_it_is_spelt() {
        for root in [".", "./", "a/..", "a/b/../.."] {
            assert!(RelativePath::parse(root).unwrap().is_root(), "{root}");
        }
        assert!(!RelativePath::parse("a/../b").unwrap().is_root());
    }

    #[test]
    fn escapes_and_absolute_paths_are_outside() {
        for outside in ["..", "../x", "a/../../x", "/etc/passwd", "/", "a/../.."] {
            assert_eq!(
                RelativePath::parse(outside),
                Err(WorkspaceError::Outside(outside.to_owned())),
                "{outside}"
            );
        }
    }

    #[test]
    fn empty_nul_and_overlong_paths_are_refused() {
        assert_eq!(RelativePath::parse(""), Err(WorkspaceError::EmptyPath));
        assert!(matches!(
            RelativePath::parse("a\0b"),
            Err(WorkspaceError::InvalidPath { .. })
        ));
        assert!(matches!(
            RelativePath::parse(&"a/".repeat(3000)),
            Err(WorkspaceError::PathTooLong { .. })
        ));
    }

    #[test]
    fn split_last_needs_a_final_name() {
        let path = RelativePath::parse("a/b/c.txt").unwrap();
        let (parent, last) = path.split_last().unwrap();
        assert_eq!(parent, &[name("a"), name("b")]);
        assert_eq!(last, "c.txt");
        assert!(
            RelativePath::parse("a/b/..")
                .unwrap()
                .split_last()
                .is_none()
        );
        assert!(RelativePath::parse(".").unwrap().split_last().is_none());
    }

    #[test]
    fn normalising_folds_dots_and_dot_dots() {
        let normalized = |text: &str| RelativePath::parse(text).unwrap().normalized();
        assert_eq!(normalized("./src//a/../b.py"), "src/b.py");
        assert_eq!(normalized("."), "");
        assert_eq!(normalized("a/.."), "");
        assert_eq!(normalized("a/b/"), "a/b");
    }

    #[test]
    fn steps_join_back_for_the_kernel() {
        assert_eq!(join_steps(&steps("./a//b/../c")), "a/b/../c");
        assert_eq!(join_steps(&[]), ".");
    }
}
