//! Lines of a text as the file tools show them to a model: windows of
//! lines, numbered lines, and long lines cut to a readable length.
//!
//! A line is what `str::split_inclusive('\n')` gives: its text with its
//! newline, so `"a\nb"` and `"a\nb\n"` both have two lines and `""` none.

/// The longest line, in characters, a tool shows whole; a longer one (a
/// minified file's) is cut around what matters in it.
pub const MAX_LINE_CHARS: usize = 300;

/// How many lines `text` has.
pub fn count_lines(text: &str) -> usize {
    text.split_inclusive('\n').count()
}

/// The byte offset at which each line of a text starts, to find the line of
/// an offset.
pub struct LineIndex {
    starts: Vec<usize>,
    len: usize,
}

impl LineIndex {
    pub fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(at, _)| at + 1));
        // A newline at the very end starts no line.
        if starts.len() > 1 && starts.last() == Some(&text.len()) {
            starts.pop();
        }
        Self {
            starts,
            len: text.len(),
        }
    }

    /// The 1-based line holding the byte at `offset` (an offset at the end
    /// of the text is on the last line).
    pub fn line_of(&self, offset: usize) -> usize {
        let offset = offset.min(self.len);
        self.starts.partition_point(|&start| start <= offset).max(1)
    }
}

/// Lines `start..=end` (1-based) of a text, each cut to
/// [`MAX_LINE_CHARS`] and prefixed by its number, right-aligned to `width`
/// digits: `" 9 | text"`.
pub fn numbered(lines: &[&str], start: usize, end: usize, width: usize) -> Vec<String> {
    (start..=end)
        .filter_map(|number| {
            let line = lines.get(number - 1)?;
            let line = line.trim_end_matches(['\n', '\r']);
            Some(format!("{number:>width$} | {}", cut_line(line, 0)))
        })
        .collect()
}

/// How many digits `number` has: the width that aligns the numbers of
/// lines up to it.
pub fn digits(number: usize) -> usize {
    number.to_string().len()
}

/// `line`, or when it is longer than [`MAX_LINE_CHARS`] characters the
/// part of it around the byte offset `focus` (a match's start), with `…`
/// where something was cut.
pub fn cut_line(line: &str, focus: usize) -> String {
    let total = line.chars().count();
    if total <= MAX_LINE_CHARS {
        return line.to_owned();
    }
    // Some context before the focus, the rest after it.
    let focus_char = line
        .char_indices()
        .take_while(|&(at, _)| at < focus)
        .count();
    let first = focus_char
        .saturating_sub(MAX_LINE_CHARS / 3)
        .min(total - MAX_LINE_CHARS);
    let kept: String = line.chars().skip(first).take(MAX_LINE_CHARS).collect();
    let before = if first > 0 { "…" } else { "" };
    let after = if first + MAX_LINE_CHARS < total {
        "…"
    } else {
        ""
    };
    format!("{before}{kept}{after}")
}

/// A window of lines of a text, as `read_file` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub start_line: usize,
    /// Inclusive: a window holds at least one line.
    pub end_line: usize,
    pub total_lines: usize,
    /// The lines, exactly as in the text, newlines included.
    pub text: String,
}

/// Lines `offset..offset + limit` (1-based, `limit` lines at most, to the
/// end without one) of `text`. `None` when `offset` is past the last line.
pub fn window(text: &str, offset: usize, limit: Option<usize>) -> Option<Window> {
    let total_lines = count_lines(text);
    if offset == 0 || offset > total_lines {
        return None;
    }
    let wanted = limit.unwrap_or(usize::MAX);
    let lines: String = text
        .split_inclusive('\n')
        .skip(offset - 1)
        .take(wanted)
        .collect();
    let end_line = offset - 1 + wanted.min(total_lines - (offset - 1));
    Some(Window {
        start_line: offset,
        end_line,
        total_lines,
        text: lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_counted_with_or_without_a_final_newline() {
        assert_eq!(count_lines(""), 0);
        assert_eq!(count_lines("\n"), 1);
        assert_eq!(count_lines("a"), 1);
        assert_eq!(count_lines("a\nb"), 2);
        assert_eq!(count_lines("a\nb\n"), 2);
        assert_eq!(count_lines("a\n\nb\n"), 3);
    }

    #[test]
    fn an_offset_is_found_on_its_line() {
        let text = "ab\ncd\n\nef";
        let index = LineIndex::new(text);
        assert_eq!(index.line_of(0), 1);
        assert_eq!(index.line_of(2), 1, "the newline is its line's");
        assert_eq!(index.line_of(3), 2);
        assert_eq!(index.line_of(6), 3);
        assert_eq!(index.line_of(7), 4);
        assert_eq!(index.line_of(text.len()), 4);
        let ended = LineIndex::new("a\nb\n");
        assert_eq!(ended.line_of(4), 2, "the end is on the last line");
        assert_eq!(LineIndex::new("").line_of(0), 1);
    }

    #[test]
    fn windows_take_their_lines_and_stop_at_the_end() {
        let text = "one\ntwo\nthree\nfour";
        assert_eq!(
            window(text, 2, Some(2)),
            Some(Window {
                start_line: 2,
                end_line: 3,
                total_lines: 4,
                text: "two\nthree\n".into()
            })
        );
        let rest = window(text, 3, None).unwrap();
        assert_eq!((rest.end_line, rest.text.as_str()), (4, "three\nfour"));
        let past = window(text, 4, Some(10)).unwrap();
        assert_eq!((past.start_line, past.end_line), (4, 4));
        assert_eq!(window(text, 5, None), None);
        assert_eq!(window("", 1, None), None);
        assert_eq!(window(text, 0, None), None);
    }

    #[test]
    fn numbered_lines_are_aligned_and_cut() {
        let lines: Vec<&str> = "a\nb\r\nc\n".split_inclusive('\n').collect();
        assert_eq!(numbered(&lines, 1, 2, 1), ["1 | a", "2 | b"]);
        let many: Vec<String> = (1..=10).map(|i| format!("l{i}\n")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(numbered(&many, 9, 10, digits(10)), [" 9 | l9", "10 | l10"]);
        assert_eq!(numbered(&many, 10, 12, 3), [" 10 | l10"]);
    }

    #[test]
    fn a_long_line_is_cut_around_its_focus() {
        assert_eq!(cut_line("short", 2), "short");
        let long = format!("{}NEEDLE{}", "a".repeat(1000), "b".repeat(1000));
        let cut = cut_line(&long, 1000);
        assert!(cut.starts_with('…') && cut.ends_with('…'), "{cut}");
        assert!(cut.contains("NEEDLE"));
        assert_eq!(cut.chars().count(), MAX_LINE_CHARS + 2);
        let start = cut_line(&long, 0);
        assert!(start.starts_with("aaa") && start.ends_with('…'));
        let end = cut_line(&long, long.len());
        assert!(end.starts_with('…') && end.ends_with("bbb"));
        assert_eq!(end.chars().count(), MAX_LINE_CHARS + 1);
        // Characters, not bytes: a cut never splits one.
        let wide = "é".repeat(1000);
        let cut = cut_line(&wide, 1000);
        assert_eq!(cut.chars().count(), MAX_LINE_CHARS + 2);
        assert!(cut.starts_with('…') && cut.ends_with('…'));
    }
}
