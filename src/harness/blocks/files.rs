//! Which workspace file a block without a name is, and the new content a
//! block gives its file.

use std::collections::HashSet;
use std::ops::Range;

use super::excerpt::definitions;

pub(super) fn distinct_lines(text: &str) -> HashSet<&str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect()
}

/// Whether a line of `block` stands for lines left out (`...`,
/// `# ... rest unchanged`): it is then not a whole file.
pub(super) fn is_elided(block: &str) -> bool {
    block.lines().map(str::trim).any(|line| {
        let bare = line
            .trim_start_matches(['#', '/', '*', '-', ' '])
            .trim_end_matches(['*', '/', ' ']);
        bare == "..."
            || bare == "…"
            || ((line.starts_with('#') || line.starts_with("//"))
                && (bare.starts_with("...") || bare.starts_with('…')))
    })
}

/// Whether `block` has a non-blank line `file` lacks: one that has none
/// only quotes the file.
pub(super) fn adds_lines(block: &str, file: &str) -> bool {
    !distinct_lines(block).is_subset(&distinct_lines(file))
}

/// The file the block is a new version of (path, text): the one with the
/// largest share of its distinct non-blank lines in the block, if that is
/// at least half and no other file's share equals it.
pub(super) fn rewritten_file<'f>(
    block: &str,
    files: &'f [(String, String)],
) -> Option<(&'f str, &'f str)> {
    let held = distinct_lines(block);
    let mut best: Option<((&str, &str), f64)> = None;
    let mut tied = false;
    for (path, text) in files {
        let lines = distinct_lines(text);
        if lines.is_empty() {
            continue;
        }
        let share = lines.intersection(&held).count() as f64 / lines.len() as f64;
        match best {
            Some((_, top)) if share < top => {}
            Some((_, top)) if share == top => tied = true,
            _ => {
                best = Some(((path, text), share));
                tied = false;
            }
        }
    }
    best.filter(|(_, share)| *share >= 0.5 && !tied)
        .map(|(file, _)| file)
}

/// The Python file a block redefines a function or class of, when no file
/// holds most of its lines (a function written without the docstring of
/// its stub), and the file's new content: the block in place of the
/// definitions it redefines, the file's other lines kept (a head of
/// only the imports the block repeats left out). Only one file may define what the block
/// does.
pub(super) fn redefined_file<'f>(
    block: &str,
    files: &'f [(String, String)],
) -> Option<(&'f str, String)> {
    let defined: HashSet<&str> = definitions(block)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    if defined.is_empty() {
        return None;
    }
    let mut found = files.iter().filter_map(|(path, text)| {
        let spans: Vec<Range<usize>> = definitions(text)
            .into_iter()
            .filter(|(name, _)| defined.contains(name))
            .map(|(_, span)| span)
            .collect();
        let start = spans.iter().map(|span| span.start).min()?;
        let end = spans.iter().map(|span| span.end).max()?;
        path.ends_with(".py").then_some((path, text, start..end))
    });
    let (path, text, span) = found.next()?;
    if found.next().is_some() {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    let held = distinct_lines(block);
    let head = &lines[..span.start];
    let mut content = String::with_capacity(text.len() + block.len());
    // A head of nothing but what the block repeats (the stub's imports)
    // gives way to the block's; any other is kept whole.
    if head
        .iter()
        .any(|line| !line.trim().is_empty() && !held.contains(line.trim()))
    {
        for line in head {
            content.push_str(line);
            content.push('\n');
        }
    }
    content.push_str(block);
    for line in &lines[span.end..] {
        content.push_str(line);
        content.push('\n');
    }
    Some((path, content))
}

/// `block` as the file's new content: the file's lines above the block's
/// first line (when the block starts further down the file and holds none
/// of them), the block, and likewise the file's lines below its last line.
pub(super) fn keep_around(current: &str, block: &str) -> String {
    let file: Vec<&str> = current.lines().collect();
    let held = distinct_lines(block);
    let shown: Vec<&str> = block
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    let (Some(first), Some(last)) = (shown.first(), shown.last()) else {
        return block.to_owned();
    };
    let unique_at = |wanted: &str| {
        let mut found = file
            .iter()
            .enumerate()
            .filter(|(_, line)| line.trim() == wanted.trim());
        match (found.next(), found.next()) {
            (Some((at, _)), None) => Some(at),
            _ => None,
        }
    };
    let none_held = |lines: &[&str]| lines.iter().all(|line| !held.contains(line.trim()));
    let head = unique_at(first)
        .filter(|&at| at > 0 && none_held(&file[..at]))
        .map_or(&[][..], |at| &file[..at]);
    let tail = unique_at(last)
        .filter(|&at| at + 1 < file.len() && none_held(&file[at + 1..]))
        .map_or(&[][..], |at| &file[at + 1..]);
    let mut content = String::with_capacity(current.len() + block.len());
    for line in head {
        content.push_str(line);
        content.push('\n');
    }
    content.push_str(block);
    for line in tail {
        content.push_str(line);
        content.push('\n');
    }
    content
}

#[cfg(test)]
mod tests {
    use super::super::{Write, parse, writes};

    const STUB: &str = "from typing import List\n\n\ndef first(xs: List[int]) -> int:\n    \"\"\"The first.\"\"\"\n";

    fn files() -> Vec<(String, String)> {
        vec![
            ("solution.py".to_owned(), STUB.to_owned()),
            (
                "test_examples.py".to_owned(),
                "from solution import first\nassert first([1]) == 1\n".to_owned(),
            ),
        ]
    }

    #[test]
    fn an_unnamed_block_rewrites_the_file_it_mostly_holds() {
        let fixed = format!("{STUB}    return xs[0]\n");
        let blocks = parse(&format!("Fixed:\n```python\n{fixed}```\n"));
        let writes = writes(&blocks, &files(), &[]);
        assert_eq!(
            writes,
            [Write {
                path: "solution.py".into(),
                content: fixed
            }]
        );
    }

    #[test]
    fn a_block_without_the_imports_keeps_them() {
        let blocks = parse(
            "```python\ndef first(xs: List[int]) -> int:\n    \"\"\"The first.\"\"\"\n    return xs[0]\n```",
        );
        let writes = writes(&blocks, &files(), &[]);
        assert_eq!(writes.len(), 1);
        assert_eq!(
            writes[0].content,
            "from typing import List\n\n\ndef first(xs: List[int]) -> int:\n    \"\"\"The first.\"\"\"\n    return xs[0]\n"
        );
    }

    #[test]
    fn a_block_of_the_top_of_a_file_keeps_the_lines_below_it() {
        let file = "import os\n\nTIMEOUT = 5\n\n\ndef main():\n    run(TIMEOUT)\n";
        let files = vec![("app.py".to_owned(), file.to_owned())];
        let blocks = parse("```python\nimport os\n\nTIMEOUT = 30\n\n\ndef main():\n```");
        let writes = writes(&blocks, &files, &[]);
        assert_eq!(writes.len(), 1, "{writes:?}");
        assert_eq!(
            writes[0].content,
            "import os\n\nTIMEOUT = 30\n\n\ndef main():\n    run(TIMEOUT)\n"
        );
    }

    #[test]
    fn unchanged_unmatched_and_skipped_blocks_are_not_written() {
        let same = parse(&format!("```python\n{STUB}```"));
        assert!(writes(&same, &files(), &[]).is_empty());
        let other = parse("```\nTraceback (most recent call last):\nNameError\n```");
        assert!(writes(&other, &files(), &[]).is_empty());
        // A quote of the file, whole or with lines left out, is no rewrite.
        let quote =
            parse("```python\nfrom typing import List\n\n\ndef first(xs: List[int]) -> int:\n```");
        assert!(writes(&quote, &files(), &[]).is_empty());
        let elided = parse(&format!(
            "```python\n{STUB}    # ...\n    return xs[0]\n```"
        ));
        assert!(writes(&elided, &files(), &[]).is_empty());
        let named = parse("solution.py\n```\nx = 2\n```");
        assert!(writes(&named, &files(), &["solution.py"]).is_empty());
        // Two files held equally: which one is meant is not known.
        let twins = vec![
            ("a.py".to_owned(), "x = 1\n".to_owned()),
            ("b.py".to_owned(), "x = 1\n".to_owned()),
        ];
        assert!(writes(&parse("```\nx = 1\ny = 2\n```"), &twins, &[]).is_empty());
    }

    #[test]
    fn a_function_written_without_its_stubs_docstring_replaces_its_definition() {
        let stub = "from typing import List\n\n\ndef first(xs: List[int]) -> int:\n    \"\"\"The first of xs.\n\n    >>> first([1, 2])\n    1\n    \"\"\"\n\n\n@cache\ndef second(\n    xs,\n):\n    pass\n\n\nTAIL = 1\n";
        let files = vec![
            ("solution.py".to_owned(), stub.to_owned()),
            ("notes.md".to_owned(), "def first(x):\n".to_owned()),
        ];
        let blocks =
            parse("```python\nfrom typing import List\n\ndef second(xs):\n    return xs[1]\n```");
        let written = writes(&blocks, &files, &[]);
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(written[0].path, "solution.py");
        assert_eq!(
            written[0].content,
            "from typing import List\n\n\ndef first(xs: List[int]) -> int:\n    \"\"\"The first of xs.\n\n    >>> first([1, 2])\n    1\n    \"\"\"\n\n\nfrom typing import List\n\ndef second(xs):\n    return xs[1]\n\n\nTAIL = 1\n"
        );
        // The stub's head is only the import the block repeats.
        let blocks =
            parse("```python\nfrom typing import List\n\ndef first(xs):\n    return xs[0]\n```");
        assert_eq!(
            writes(&blocks, &files, &[])[0].content,
            "from typing import List\n\ndef first(xs):\n    return xs[0]\n\n\n@cache\ndef second(\n    xs,\n):\n    pass\n\n\nTAIL = 1\n"
        );
        // Defined in two Python files: which one is meant is not known.
        let twins = vec![
            (
                "a.py".to_owned(),
                "def f():\n    \"\"\"Doc.\"\"\"\n".to_owned(),
            ),
            (
                "b.py".to_owned(),
                "def f():\n    \"\"\"Other.\"\"\"\n".to_owned(),
            ),
        ];
        assert!(writes(&parse("```\ndef f():\n    return 1\n```"), &twins, &[]).is_empty());
    }

    #[test]
    fn a_named_block_may_create_a_file_and_the_last_block_of_a_path_wins() {
        let blocks = parse("new.py\n```\na\n```\nnew.py\n```\nb\n```\n");
        assert_eq!(
            writes(&blocks, &files(), &[]),
            [Write {
                path: "new.py".into(),
                content: "b\n".into()
            }]
        );
    }
}
