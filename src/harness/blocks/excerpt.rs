//! A file's top-level definitions, and a block that is an excerpt of its
//! file (some of its definitions, not the whole of it) merged into it.

use std::collections::HashSet;
use std::ops::Range;

use super::files::distinct_lines;

/// The top-level definitions of `text`: Python's `def`, `async def` and
/// `class`, and the functions and types of the brace languages (`fn`,
/// `func`, `function`, `struct`, `enum`, `trait`, `interface`, after
/// modifiers such as `pub` or `export`): each one's name and the lines it
/// spans, the decorators, attributes and comments right above it included
/// and the blank lines after it not.
pub(super) fn definitions(text: &str) -> Vec<(&str, Range<usize>)> {
    let lines: Vec<&str> = text.lines().collect();
    let top_level = |line: &str| !line.trim().is_empty() && !line.starts_with(char::is_whitespace);
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = defined_name(line) else {
            continue;
        };
        let mut start = at;
        while start > 0 && is_preface(lines[start - 1]) {
            start -= 1;
        }
        // A signature over several lines closes at the margin: `) -> int:`;
        // a brace language's body, with `}`.
        let next = (at + 1..lines.len())
            .find(|&later| top_level(lines[later]) && !lines[later].starts_with([')', ']', '}']))
            .unwrap_or(lines.len());
        let end = (at + 1..next)
            .rev()
            .find(|&later| !lines[later].trim().is_empty() && !is_preface(lines[later]))
            .map_or(at + 1, |last| last + 1);
        found.push((name, start..end));
    }
    found
}

/// The name a line at the margin starts a definition of (see
/// [`definitions`]).
fn defined_name(line: &str) -> Option<&str> {
    const MODIFIERS: [&str; 14] = [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "export default ",
        "export ",
        "async ",
        "unsafe ",
        "const ",
        "static ",
        "public ",
        "private ",
        "protected ",
        "abstract ",
        "final ",
    ];
    const KEYWORDS: [&str; 9] = [
        "def ",
        "class ",
        "fn ",
        "func ",
        "function ",
        "struct ",
        "enum ",
        "trait ",
        "interface ",
    ];
    let mut rest = line;
    while let Some(after) = MODIFIERS.iter().find_map(|word| rest.strip_prefix(word)) {
        rest = after;
    }
    let rest = KEYWORDS.iter().find_map(|word| rest.strip_prefix(word))?;
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Whether a line belongs to the definition below it: a decorator
/// (`@cache`), an attribute (`#[test]`) or a comment at the margin.
fn is_preface(line: &str) -> bool {
    line.starts_with(['@', '#']) && !line.starts_with("#!")
        || line.starts_with("//")
        || line.starts_with("/*")
        || line.starts_with(" *")
        || line.starts_with("*/")
}

/// Whether `new` lacks a top-level definition `current` has.
pub(super) fn drops_definitions(current: &str, new: &str) -> bool {
    let kept: HashSet<&str> = definitions(new).into_iter().map(|(name, _)| name).collect();
    definitions(current)
        .iter()
        .any(|(name, _)| !kept.contains(name))
}

/// `block`, an excerpt of the file at `path` (`current`): some of its
/// top-level definitions, perhaps new ones and the imports they need, and
/// none of the rest. Each definition the file has takes the place of the
/// file's; a new one goes after the definition the block shows before it
/// (before the first, or at the end of the file, when none is); the lines
/// of the block above its first definition that the file lacks (imports)
/// go after the file's lines above its first definition. `None` when the
/// excerpt has no place: no definition, a name the file defines twice, or
/// a line outside its definitions that the file lacks.
pub(super) fn merge_excerpt(current: &str, block: &str, path: &str) -> Option<String> {
    let file: Vec<&str> = current.lines().collect();
    let shown: Vec<&str> = block.lines().collect();
    let in_file = definitions(current);
    let in_block = definitions(block);
    let first = in_block.first()?.1.start;
    let known = distinct_lines(current);
    let unknown = |line: &&str| !line.trim().is_empty() && !known.contains(line.trim());
    let mut outside = vec![true; shown.len()];
    for (_, span) in &in_block {
        outside[span.clone()].fill(false);
    }
    if (first..shown.len()).any(|at| outside[at] && unknown(&shown[at])) {
        return None;
    }
    let head: Vec<&str> = shown[..first].iter().copied().filter(unknown).collect();
    // Lines between two definitions: as the file has them.
    let blanks = in_file
        .windows(2)
        .next()
        .map(|pair| pair[1].1.start.saturating_sub(pair[0].1.end).clamp(1, 2))
        .unwrap_or(if path.ends_with(".py") { 2 } else { 1 });
    // What goes where in the file: a span replaced, or definitions added
    // before a line (the file's length: at its end).
    let mut replaced: Vec<(Range<usize>, &[&str])> = Vec::new();
    let mut added: Vec<(usize, &[&str])> = Vec::new();
    let mut leading: Vec<&[&str]> = Vec::new();
    for (name, span) in &in_block {
        let lines = &shown[span.clone()];
        let mut same = in_file.iter().filter(|(defined, _)| defined == name);
        match (same.next(), same.next()) {
            (Some((_, theirs)), None) => {
                if replaced.iter().any(|(taken, _)| taken == theirs) {
                    return None;
                }
                replaced.push((theirs.clone(), lines));
            }
            (Some(_), Some(_)) => return None,
            (None, _) => match replaced.last() {
                Some((after, _)) => added.push((after.end, lines)),
                None => leading.push(lines),
            },
        }
    }
    let before_first = replaced
        .iter()
        .map(|(span, _)| span.start)
        .min()
        .unwrap_or(file.len());
    added.extend(leading.into_iter().map(|lines| (before_first, lines)));
    let head_at = in_file.first().map_or(0, |(_, span)| {
        (0..span.start)
            .rev()
            .find(|&at| !file[at].trim().is_empty())
            .map_or(0, |at| at + 1)
    });
    let mut out: Vec<&str> = Vec::with_capacity(file.len() + shown.len());
    let mut at = 0;
    while at <= file.len() {
        if at == head_at && !head.is_empty() {
            out.extend_from_slice(&head);
            if at == 0 {
                out.extend(std::iter::repeat_n("", blanks));
            }
        }
        for (_, lines) in added.iter().filter(|(place, _)| *place == at) {
            let after_code = out.last().is_some_and(|line| !line.trim().is_empty());
            if after_code || at == file.len() {
                out.extend(std::iter::repeat_n("", blanks));
            }
            out.extend_from_slice(lines);
            if at < file.len() && !after_code {
                out.extend(std::iter::repeat_n("", blanks));
            }
        }
        if at == file.len() {
            break;
        }
        match replaced.iter().find(|(span, _)| span.start == at) {
            Some((span, lines)) => {
                out.extend_from_slice(lines);
                at = span.end;
            }
            None => {
                out.push(file[at]);
                at += 1;
            }
        }
    }
    let mut merged = out.join("\n");
    merged.push('\n');
    Some(merged)
}

#[cfg(test)]
mod tests {
    use super::super::{parse, writes};
    use super::*;

    const APP: &str = "import sys\n\n\ndef parse(x):\n    return int(x)\n\n\ndef main():\n    print(parse(sys.argv[1]))\n\n\nif __name__ == \"__main__\":\n    main()\n";

    fn app() -> Vec<(String, String)> {
        vec![("app.py".to_owned(), APP.to_owned())]
    }

    #[test]
    fn a_named_excerpt_replaces_its_definitions_and_keeps_the_rest_of_the_file() {
        let blocks =
            parse("### app.py\n```python\ndef parse(x):\n    return int(x.strip())\n```\n");
        let written = writes(&blocks, &app(), &[]);
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(
            written[0].content,
            APP.replace("return int(x)", "return int(x.strip())")
        );
    }

    #[test]
    fn an_excerpt_brings_its_imports_and_new_definitions_along() {
        let blocks = parse(
            "app.py\n```python\nimport re\n\n\ndef parse(x):\n    return int(clean(x))\n\n\ndef clean(x):\n    return re.sub(r\"\\s\", \"\", x)\n```\n",
        );
        let written = writes(&blocks, &app(), &[]);
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(
            written[0].content,
            "import sys\nimport re\n\n\ndef parse(x):\n    return int(clean(x))\n\n\ndef clean(x):\n    return re.sub(r\"\\s\", \"\", x)\n\n\ndef main():\n    print(parse(sys.argv[1]))\n\n\nif __name__ == \"__main__\":\n    main()\n"
        );
        // A definition the file does not have, alone: added at the end.
        let blocks = parse("app.py\n```python\ndef usage():\n    return \"app X\"\n```\n");
        let written = writes(&blocks, &app(), &[]);
        assert_eq!(
            written[0].content,
            format!("{APP}\n\ndef usage():\n    return \"app X\"\n")
        );
    }

    #[test]
    fn an_excerpt_of_a_brace_language_keeps_the_rest_too() {
        let file = "use std::env;\n\n/// Parses.\nfn parse(x: &str) -> u32 {\n    x.parse().unwrap()\n}\n\n#[inline]\nfn main() {\n    parse(&env::args().nth(1).unwrap());\n}\n";
        let files = vec![("src/main.rs".to_owned(), file.to_owned())];
        let blocks = parse(
            "`src/main.rs`:\n```rust\n/// Parses, trimmed.\nfn parse(x: &str) -> u32 {\n    x.trim().parse().unwrap()\n}\n```\n",
        );
        let written = writes(&blocks, &files, &[]);
        assert_eq!(written.len(), 1, "{written:?}");
        assert_eq!(
            written[0].content,
            file.replace("/// Parses.", "/// Parses, trimmed.")
                .replace("x.parse()", "x.trim().parse()")
        );
    }

    #[test]
    fn an_excerpt_with_no_place_in_its_file_is_not_written() {
        // A statement outside its definitions that the file lacks.
        let blocks = parse("app.py\n```python\ndef parse(x):\n    return x\n\nparse(1)\n```\n");
        assert!(writes(&blocks, &app(), &[]).is_empty());
        // No definition at all: lines of the middle of a function.
        let blocks = parse("app.py\n```python\n    return int(x) + 1\n```\n");
        assert!(writes(&blocks, &app(), &[]).is_empty());
        // A whole new version that keeps every definition is written whole.
        let whole = APP.replace("int(x)", "float(x)");
        let blocks = parse(&format!("app.py\n```python\n{whole}```\n"));
        assert_eq!(writes(&blocks, &app(), &[])[0].content, whole);
    }

    proptest::proptest! {
        #[test]
        fn no_answer_makes_the_blocks_panic(answer in "(\\PC|\n|```|### |def |fn |\u{2019}|@|#|}){0,60}") {
            let blocks = parse(&answer);
            let files = vec![("app.py".to_owned(), APP.to_owned())];
            let _ = writes(&blocks, &files, &[]);
            for block in &blocks {
                let _ = merge_excerpt(APP, &block.text, "app.py");
            }
        }
    }
}
