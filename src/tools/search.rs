//! `search`: the lines of the workspace's text files that match a regular
//! expression.
//!
//! `search {pattern, path?, glob?}` →
//! `{"matches": [{"path", "line", "text"}], "total": N, "truncated": B}`:
//! at most [`MAX_MATCHES`] matching lines, in the order of their paths and
//! line numbers; `total` counts every matching line of the files searched,
//! and `truncated` says some were left out. The walk is the workspace's:
//! from the root's descriptor, never following a link, each file opened
//! from its directory's descriptor.

use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use regex::{Regex, RegexBuilder};
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::definitions::shared;
use super::files::{Access, blocking, string_argument};
use super::run_workspace::RunWorkspace;
use super::suggest::{Want, explain, is_skipped_dir};
use super::text::{MAX_LINE_CHARS, cut_line};
use crate::harness::{Tool, ToolDefinition, ToolError};

pub const SEARCH: &str = "search";

/// Matching lines returned at most.
pub const MAX_MATCHES: usize = 100;

/// Files larger than this are not searched.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Files searched at most: a search of a huge tree stops there, and says
/// it was cut short with `truncated`.
pub const MAX_FILES: usize = 20_000;

/// How large a compiled pattern may grow: a pattern is the model's, and a
/// few characters of nested repetition can ask for gigabytes.
const MAX_PATTERN_BYTES: usize = 1 << 20;

/// Bytes of a file looked at for a NUL, the mark of a binary file.
const BINARY_PROBE_BYTES: usize = 8192;

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Match {
    /// Relative to the workspace root.
    pub path: String,
    /// 1-based.
    pub line: usize,
    /// The line, cut to [`MAX_LINE_CHARS`] characters around the match.
    pub text: String,
}

/// What a search found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Found {
    pub matches: Vec<Match>,
    /// Matching lines in the files searched, shown or not.
    pub total: usize,
    /// Matches were left out: more than [`MAX_MATCHES`], or the walk
    /// stopped at [`MAX_FILES`].
    pub truncated: bool,
}

/// Which files are searched: all, or those whose name (or, for a glob with
/// a `/`, whose path from the root) matches a glob.
pub struct FileFilter {
    glob: Option<(GlobMatcher, bool)>,
}

impl FileFilter {
    pub fn all() -> Self {
        Self { glob: None }
    }

    /// The filter of `glob`, or why it is not one.
    pub fn glob(glob: &str) -> Result<Self, String> {
        let matcher = GlobBuilder::new(glob)
            .literal_separator(true)
            .build()
            .map_err(|error| format!("Invalid glob {glob:?}: {}", error.kind()))?
            .compile_matcher();
        Ok(Self {
            glob: Some((matcher, glob.contains('/'))),
        })
    }

    pub fn accepts(&self, path: &str) -> bool {
        match &self.glob {
            None => true,
            Some((matcher, true)) => matcher.is_match(path),
            Some((matcher, false)) => {
                matcher.is_match(path.rsplit_once('/').map_or(path, |(_, name)| name))
            }
        }
    }
}

/// The compiled pattern, or an error naming what is wrong with it.
pub fn compile(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .size_limit(MAX_PATTERN_BYTES)
        .build()
        .map_err(|error| match error {
            regex::Error::Syntax(reason) => format!("Invalid pattern: {reason}"),
            regex::Error::CompiledTooBig(_) => {
                "Invalid pattern: it is too large once compiled; make it simpler".to_owned()
            }
            other => format!("Invalid pattern: {other}"),
        })
}

/// Whether `bytes` look like a binary file's: a NUL among the first few
/// kilobytes, as git and grep decide.
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_PROBE_BYTES)].contains(&0)
}

/// Adds the matching lines of the file `path`, whose content is `bytes`, to
/// `found` (counted always, kept while there is room).
pub fn search_file(pattern: &Regex, path: &str, bytes: &[u8], found: &mut Found) {
    let text = String::from_utf8_lossy(bytes);
    for (number, line) in text.split_inclusive('\n').enumerate() {
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let Some(matched) = pattern.find(line) else {
            continue;
        };
        found.total += 1;
        if found.matches.len() < MAX_MATCHES {
            found.matches.push(Match {
                path: path.to_owned(),
                line: number + 1,
                text: cut_line(line.trim_end(), matched.start()),
            });
        } else {
            found.truncated = true;
        }
    }
}

/// Searches a workspace's text files.
pub struct Search {
    workspace: Arc<RunWorkspace>,
    definition: Arc<ToolDefinition>,
}

impl Search {
    pub fn new(workspace: Arc<RunWorkspace>) -> Self {
        Self {
            workspace,
            definition: shared(SEARCH, || ToolDefinition {
                name: SEARCH.into(),
                description: format!(
                    "Search the workspace's text files for a regular expression, line by line. \
                     Use it to find which files mention something when you do not know where \
                     it is; when you know the file, read it with read_file instead. Returns {{matches: [{{path, line, text}}], total, \
                     truncated}}: at most {MAX_MATCHES} matching lines, sorted by path and line \
                     number; total counts every matching line, and truncated says some were \
                     left out (narrow the search with path or glob). Binary files, files over \
                     1 MiB, symbolic links and .git folders are skipped; lines longer than \
                     {MAX_LINE_CHARS} characters are cut around the match."
                ),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "pattern": {
                            "type": "string",
                            "description": "A regular expression (Rust regex syntax, like \
                                            Perl's without look-around or backreferences), \
                                            matched against each line."
                        },
                        "path": {
                            "type": "string",
                            "description": "A folder (or one file) to search, relative to the \
                                            workspace root. Default: the whole workspace."
                        },
                        "glob": {
                            "type": "string",
                            "description": "Search only files whose name matches this glob, \
                                            such as *.py or test_*; a glob with a / is matched \
                                            against the path from the workspace root."
                        }
                    },
                    "required": ["pattern"],
                    "additionalProperties": false
                }),
            }),
        }
    }
}

#[async_trait]
impl Tool for Search {
    fn definition(&self) -> Arc<ToolDefinition> {
        Arc::clone(&self.definition)
    }

    async fn execute(
        &self,
        arguments: &Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        let pattern = compile(&string_argument(arguments, "pattern")?).map_err(ToolError::new)?;
        let path = optional_string(arguments, "path")?.unwrap_or_else(|| ".".to_owned());
        let filter = match optional_string(arguments, "glob")? {
            Some(glob) => FileFilter::glob(&glob).map_err(ToolError::new)?,
            None => FileFilter::all(),
        };
        let cancel = cancel.clone();
        let found = blocking(&self.workspace, Access::Read, move |ws| {
            let mut found = Found::default();
            let mut files = 0;
            ws.scan_files(
                &path,
                MAX_FILE_BYTES,
                &is_skipped_dir,
                &mut |file, bytes| {
                    // The run was stopped: what was found is no longer wanted.
                    if cancel.is_cancelled() {
                        return ControlFlow::Break(());
                    }
                    if !filter.accepts(file) || is_binary(bytes) {
                        return ControlFlow::Continue(());
                    }
                    if files == MAX_FILES {
                        found.truncated = true;
                        return ControlFlow::Break(());
                    }
                    files += 1;
                    search_file(&pattern, file, bytes, &mut found);
                    ControlFlow::Continue(())
                },
            )
            .map_err(|error| explain(ws, error, Want::Any))?;
            Ok::<_, ToolError>(found)
        })
        .await?;
        serde_json::to_value(found)
            .map_err(|error| ToolError::new(format!("Search result not serialisable: {error}")))
    }
}

/// An optional string argument: absent and null are the same.
/// An optional string argument: absent, null or empty (models fill the
/// optional arguments they do not mean with empty strings) is `None`.
fn optional_string(arguments: &Value, key: &str) -> Result<Option<String>, ToolError> {
    match arguments.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => {
            string_argument(arguments, key).map(|value| (!value.is_empty()).then_some(value))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found_in(files: &[(&str, &str)], pattern: &str) -> Found {
        let pattern = compile(pattern).unwrap();
        let mut found = Found::default();
        for (path, text) in files {
            search_file(&pattern, path, text.as_bytes(), &mut found);
        }
        found
    }

    #[test]
    fn matching_lines_are_found_with_their_numbers() {
        let found = found_in(
            &[
                ("a.py", "import os\ndef main():\n    os.exit(0)\r\n"),
                ("b.py", "print('main')"),
            ],
            r"os\.|main",
        );
        let got: Vec<(&str, usize, &str)> = found
            .matches
            .iter()
            .map(|m| (m.path.as_str(), m.line, m.text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("a.py", 2, "def main():"),
                ("a.py", 3, "    os.exit(0)"),
                ("b.py", 1, "print('main')")
            ]
        );
        assert_eq!((found.total, found.truncated), (3, false));
    }

    #[test]
    fn at_most_a_hundred_are_kept_and_all_are_counted() {
        let text = "hit\n".repeat(150);
        let found = found_in(&[("many.txt", &text)], "hit");
        assert_eq!(found.matches.len(), MAX_MATCHES);
        assert_eq!(found.total, 150);
        assert!(found.truncated);
        assert_eq!(found.matches[99].line, 100);
    }

    #[test]
    fn a_long_line_is_cut_around_its_match() {
        let line = format!("{}needle{}", "x".repeat(5000), "y".repeat(5000));
        let found = found_in(&[("min.js", &line)], "needle");
        let text = &found.matches[0].text;
        assert!(text.contains("needle"), "{text}");
        assert!(text.chars().count() <= MAX_LINE_CHARS + 2);
    }

    #[test]
    fn an_invalid_pattern_is_named() {
        let error = compile("fn (").unwrap_err();
        assert!(error.starts_with("Invalid pattern: "), "{error}");
        assert!(error.contains("unclosed group"), "{error}");
        let huge = compile(r"\w{1000}{1000}").unwrap_err();
        assert!(huge.contains("too large"), "{huge}");
    }

    #[test]
    fn globs_match_names_or_paths() {
        let python = FileFilter::glob("*.py").unwrap();
        assert!(python.accepts("main.py") && python.accepts("src/deep/main.py"));
        assert!(!python.accepts("main.rs") && !python.accepts("py/main.rs"));
        let rooted = FileFilter::glob("src/*.py").unwrap();
        assert!(rooted.accepts("src/a.py"));
        assert!(!rooted.accepts("src/deep/a.py") && !rooted.accepts("a.py"));
        let deep = FileFilter::glob("src/**/*.py").unwrap();
        assert!(deep.accepts("src/deep/a.py"));
        let error = FileFilter::glob("[a-").err().unwrap();
        assert!(error.starts_with("Invalid glob \"[a-\": "), "{error}");
        assert!(FileFilter::all().accepts("anything"));
    }

    #[test]
    fn binary_files_are_recognised_by_a_nul() {
        assert!(is_binary(b"\x89PNG\r\n\x1a\n\0\0"));
        assert!(!is_binary("plain text, é".as_bytes()));
        assert!(!is_binary(b""));
    }
}
