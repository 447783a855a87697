use super::*;

fn file(lines: usize) -> String {
    (1..=lines).map(|i| format!("line {i}\n")).collect()
}

#[test]
fn one_occurrence_is_replaced_and_shown_with_its_neighbours() {
    let edited = apply(&file(10), "line 5\n", "five\nand a half\n", false).unwrap();
    assert_eq!(edited.replacements, 1);
    assert!(edited.text.contains("line 4\nfive\nand a half\nline 6\n"));
    assert_eq!(
        edited.snippet,
        [
            "2 | line 2",
            "3 | line 3",
            "4 | line 4",
            "5 | five",
            "6 | and a half",
            "7 | line 6",
            "8 | line 7",
            "9 | line 8"
        ]
        .join("\n")
    );
}

#[test]
fn a_snippet_stops_at_the_file_s_ends_and_joins_close_changes() {
    let edited = apply("a\nb\nc\n", "a", "A", false).unwrap();
    assert_eq!(edited.snippet, "1 | A\n2 | b\n3 | c");
    let text = "x\n1\n2\n3\n4\n5\n6\n7\n8\n9\nx\n";
    let far = apply(text, "x", "y", true).unwrap();
    assert_eq!(far.replacements, 2);
    assert_eq!(
        far.snippet,
        " 1 | y\n 2 | 1\n 3 | 2\n 4 | 3\n...\n 8 | 7\n 9 | 8\n10 | 9\n11 | y"
    );
    let near = apply("x\n1\nx\n", "x", "y", true).unwrap();
    assert_eq!(near.snippet, "1 | y\n2 | 1\n3 | y");
    let deleted = apply("a\nb\nc\n", "b\n", "", false).unwrap();
    assert_eq!(deleted.text, "a\nc\n");
    assert_eq!(deleted.snippet, "1 | a\n2 | c");
    let emptied = apply("all of it", "all of it", "", false).unwrap();
    assert_eq!(emptied.snippet, "(the file is now empty)");
}

#[test]
fn a_large_edit_shows_a_bounded_snippet() {
    let edited = apply(&file(500), "line", "LINE", true).unwrap();
    assert_eq!(edited.replacements, 500);
    let lines: Vec<&str> = edited.snippet.lines().collect();
    assert_eq!(lines.len(), MAX_SNIPPET_LINES + 1);
    assert_eq!(lines[0], "  1 | LINE 1");
    assert_eq!(lines[MAX_SNIPPET_LINES], "... (lines 61-500 not shown)");
}

#[test]
fn several_occurrences_need_replace_all() {
    let text = "a = 1\nb = 2\na = 1\nc = 3\na = 1; a = 1\n";
    assert_eq!(
        apply(text, "a = 1", "a = 9", false),
        Err(EditError::Ambiguous {
            count: 4,
            lines: vec![1, 3, 5]
        })
    );
    let message = EditError::Ambiguous {
        count: 4,
        lines: vec![1, 3, 5],
    }
    .message("conf.py");
    assert!(
        message.starts_with("old_text occurs 4 times in conf.py, at lines 1, 3, 5."),
        "{message}"
    );
    assert!(message.contains("replace_all"), "{message}");
    let all = apply(text, "a = 1", "a = 9", true).unwrap();
    assert_eq!(all.replacements, 4);
    assert_eq!(all.text, "a = 9\nb = 2\na = 9\nc = 3\na = 9; a = 9\n");
}

#[test]
fn empty_and_unchanged_edits_are_refused() {
    assert_eq!(apply("x", "", "y", false), Err(EditError::EmptyOldText));
    assert_eq!(apply("x", "x", "x", false), Err(EditError::Unchanged));
    assert!(
        matches!(
            apply("a\nb\n", "c", "c", false),
            Err(EditError::NotFound { .. })
        ),
        "text the file lacks is not found, changed or not"
    );
}

#[test]
fn text_not_found_shows_the_closest_lines() {
    let text = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n";
    let Err(EditError::NotFound {
        closest: Some(closest),
    }) = apply(text, "def sub(a, b):\n    return a-b\n", "x", false)
    else {
        panic!("not the error expected");
    };
    assert_eq!((closest.start_line, closest.end_line), (5, 6));
    assert_eq!(
        closest.numbered,
        ["5 | def sub(a, b):", "6 |     return a - b"]
    );
    assert!(!closest.whitespace_only);
    let message = EditError::NotFound {
        closest: Some(closest),
    }
    .message("calc.py");
    assert!(
        message.starts_with(
            "old_text was not found in calc.py. The closest text is at lines 5-6:\n\
             5 | def sub(a, b):\n6 |     return a - b\n"
        ),
        "{message}"
    );
}

#[test]
fn indentation_alone_is_named_as_the_difference() {
    let text = "if x:\n    if y:\n        go()\n";
    let Err(EditError::NotFound {
        closest: Some(closest),
    }) = apply(text, "if y:\n    go()", "z", false)
    else {
        panic!("not the error expected");
    };
    assert_eq!((closest.start_line, closest.end_line), (2, 3));
    assert!(closest.whitespace_only);
}

#[test]
fn nothing_alike_is_not_shown_as_close() {
    assert_eq!(
        closest_lines("aaaa\nbbbb\n", "zyxwvut"),
        None,
        "nothing in common"
    );
    assert_eq!(closest_lines("", "x"), None);
    // More lines wanted than the file has: the whole file is the window.
    let whole = closest_lines("one\ntwo\n", "one\ntwo\nthree\nfour\n").unwrap();
    assert_eq!((whole.start_line, whole.end_line), (1, 2));
}

#[test]
fn the_closest_window_is_found_in_a_long_file() {
    let mut text = file(3000);
    text.push_str("    total = compute_total(items, tax_rate)\n");
    text.push_str(&file(3000));
    let closest = closest_lines(&text, "total = compute_totals(items, tax)").unwrap();
    assert_eq!(closest.start_line, 3001);
}

#[test]
fn crlf_files_are_edited_with_lf_text() {
    let edited = apply("a\r\nb\r\nc\r\n", "a\nb\n", "x\ny\n", false).unwrap();
    assert_eq!(edited.text, "x\r\ny\r\nc\r\n");
}
