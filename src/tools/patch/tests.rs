//! The patch formats read, and hunks placed in texts; [`workspace`]: the
//! tool over a workspace.

use super::*;

mod workspace;

/// Lines `line 1` to `line N`, each ended.
fn numbered(count: usize) -> String {
    (1..=count).map(|i| format!("line {i}\n")).collect()
}

/// `content` with the first file's hunks of `patch` placed, or the error
/// as the model reads it.
fn placed(content: &str, patch: &str) -> Result<String, String> {
    let changes = parse(patch).map_err(|error| error.to_string())?;
    let change = &changes[0];
    place::place(content, &change.hunks)
        .map(|placed| placed.text)
        .map_err(|misplaced| misplaced.message(&change.path, &change.hunks))
}

#[test]
fn a_unified_diff_is_read_file_by_file_and_its_prefixes_dropped() {
    let patch = "\
diff --git a/src/app.py b/src/app.py
index 3b18e51..a8f2a2c 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,2 +1,2 @@ def main():
 a
-b
+c
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/x.txt b/y.txt
similarity index 100%
rename from x.txt
rename to y.txt
diff --git a/script.sh b/script.sh
old mode 100644
new mode 100755
";
    let changes = parse(patch).unwrap();
    let summary: Vec<(&str, &Kind, usize)> = changes
        .iter()
        .map(|change| (change.path.as_str(), &change.kind, change.hunks.len()))
        .collect();
    assert_eq!(
        summary,
        [
            ("src/app.py", &Kind::Update { move_to: None }, 1),
            ("new.txt", &Kind::Add, 1),
            ("old.txt", &Kind::Delete, 1),
            (
                "x.txt",
                &Kind::Update {
                    move_to: Some("y.txt".into())
                },
                0
            ),
        ],
        "a change of mode only is left out"
    );
    let hunk = &changes[0].hunks[0];
    assert_eq!(hunk.header, "@@ -1,2 +1,2 @@ def main():");
    assert_eq!((hunk.line, hunk.start), (5, Some(1)));
    assert_eq!(
        hunk.lines,
        [
            Line::new(LineKind::Context, "a"),
            Line::new(LineKind::Delete, "b"),
            Line::new(LineKind::Insert, "c"),
        ]
    );
    // A plain diff, its names dated as `diff -u` dates them, in a fence.
    let plain = "```diff\n--- a/f.txt\t2024-01-01 10:00:00\n+++ b/f.txt\t2024-01-02\n@@ -1 +1 @@\n-x\n+y\n```\n";
    assert_eq!(parse(plain).unwrap()[0].path, "f.txt");
}

#[test]
fn hunks_find_their_lines_off_their_stated_lines() {
    let file = numbered(30);
    // Stated at 5 and 20; the lines are at 8 and 23.
    let patch = "--- a/f\n+++ b/f\n@@ -5,3 +5,3 @@\n line 7\n-line 8\n+eight\n line 9\n\
                 @@ -20,2 +20,2 @@\n-line 23\n+twenty-three\n line 24\n";
    let text = placed(&file, patch).unwrap();
    assert!(text.contains("line 7\neight\nline 9\n"), "{text}");
    assert!(text.contains("line 22\ntwenty-three\nline 24\n"), "{text}");
    // The nearest occurrence to the stated line wins.
    let twice = "x\na\nx\nb\nx\nc\n";
    let patch = "--- a/f\n+++ b/f\n@@ -5 +5 @@\n-x\n+y\n";
    assert_eq!(placed(twice, patch).unwrap(), "x\na\nx\nb\ny\nc\n");
}

#[test]
fn wrong_counts_and_missing_numbers_are_taken_from_the_lines() {
    let file = "a\nb\nc\nd\n";
    // Counts too small, then too large, and a header with no numbers.
    for header in ["@@ -1,1 +1,1 @@", "@@ -1,9 +1,9 @@", "@@ @@"] {
        let patch = format!("--- a/f\n+++ b/f\n{header}\n a\n-b\n+B\n c\n");
        assert_eq!(placed(file, &patch).unwrap(), "a\nB\nc\nd\n", "{header}");
    }
    // A removed line that reads like a file header stays a removed line.
    let dashes = "-- x\n++ y\nz\n";
    let patch = "--- a/f\n+++ b/f\n@@ -1,3 +1,1 @@\n--- x\n-++ y\n z\n";
    assert_eq!(placed(dashes, patch).unwrap(), "z\n");
    // A line that is no hunk line, before the counts are met: an error.
    let bad = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\nb\n c\n";
    let error = parse(bad).unwrap_err();
    assert_eq!(error.line, Some(5), "{error}");
    assert!(
        error.to_string().contains("`b` is not a line of the hunk"),
        "{error}"
    );
}

#[test]
fn a_missing_newline_at_the_end_is_kept_added_or_removed() {
    let header = "--- a/f\n+++ b/f\n";
    let end = "\\ No newline at end of file\n";
    // The last line changes; the file still has no newline at its end.
    let patch = format!("{header}@@ -1,2 +1,2 @@\n a\n-b\n{end}+c\n{end}");
    assert_eq!(placed("a\nb", &patch).unwrap(), "a\nc");
    // A newline is added at the end.
    let patch = format!("{header}@@ -1,2 +1,2 @@\n a\n-b\n{end}+b\n");
    assert_eq!(placed("a\nb", &patch).unwrap(), "a\nb\n");
    // A newline is taken away.
    let patch = format!("{header}@@ -1,2 +1,2 @@\n a\n-b\n+b\n{end}");
    assert_eq!(placed("a\nb\n", &patch).unwrap(), "a\nb");
    // Lines added after a last line without a newline give it one.
    let envelope = "*** Begin Patch\n*** Update File: f\n@@\n b\n+c\n*** End Patch";
    assert_eq!(placed("a\nb", envelope).unwrap(), "a\nb\nc\n");
}

#[test]
fn trailing_whitespace_is_forgiven_on_a_second_pass_and_the_file_s_lines_kept() {
    let file = "def f():   \n    return 1  \n";
    let patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n";
    assert_eq!(placed(file, patch).unwrap(), "def f():   \n    return 2\n");
    // Indentation is not forgiven: the error says that it differs.
    let patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n def f():\n-return 1\n+return 2\n";
    let error = placed(file, patch).unwrap_err();
    assert!(
        error.contains("only in whitespace or indentation"),
        "{error}"
    );
}

#[test]
fn a_crlf_file_keeps_its_line_ends() {
    let file = "a\r\nb\r\nc\r\n";
    let patch = "--- a/f\n+++ b/f\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n+B2\n c\n";
    assert_eq!(placed(file, patch).unwrap(), "a\r\nB\r\nB2\r\nc\r\n");
    // A patch written with CRLF reads the same.
    let patch = patch.replace('\n', "\r\n");
    assert_eq!(placed(file, &patch).unwrap(), "a\r\nB\r\nB2\r\nc\r\n");
}

#[test]
fn an_envelope_is_read_with_its_anchors_moves_and_ends() {
    let patch = "\
<<'EOF'
*** Begin Patch
*** Add File: docs/new.md
+# New
+
+text
*** Update File: src/app.py
*** Move to: src/main.py
@@ class App:
@@     def greet(self):
-        print(\"Hi\")
+        print(\"Hello\")

@@
 last
+after
*** End of File
*** Delete File: old.txt
*** End Patch
EOF
";
    let changes = parse(patch).unwrap();
    assert_eq!(changes.len(), 3);
    assert_eq!(
        (changes[0].path.as_str(), &changes[0].kind),
        ("docs/new.md", &Kind::Add)
    );
    let added: Vec<&str> = changes[0].hunks[0]
        .lines
        .iter()
        .map(|l| l.text.as_str())
        .collect();
    assert_eq!(added, ["# New", "", "text"]);
    let update = &changes[1];
    assert_eq!(
        update.kind,
        Kind::Update {
            move_to: Some("src/main.py".into())
        }
    );
    assert_eq!(update.hunks.len(), 2);
    assert_eq!(update.hunks[0].anchors, ["class App:", "def greet(self):"]);
    assert_eq!(
        update.hunks[0].header,
        "@@ class App: / @@ def greet(self):"
    );
    assert!(update.hunks[1].at_end);
    assert_eq!(update.line, 7);
    assert_eq!(
        (changes[2].path.as_str(), &changes[2].kind),
        ("old.txt", &Kind::Delete)
    );

    // The anchors lead to the right `print`, and the end is the end.
    let file = "class Other:\n    def greet(self):\n        print(\"Hi\")\nclass App:\n    def \
                greet(self):\n        print(\"Hi\")\nlast\n";
    let change = &changes[1];
    let text = place::place(file, &change.hunks).unwrap().text;
    // A hunk that repeats its anchor as its first line.
    let repeated = "*** Begin Patch\n*** Update File: f\n@@ def g():\n def g():\n-    a\n+    b\n\
                    *** End Patch";
    assert_eq!(
        placed("def g():\n    a\n", repeated).unwrap(),
        "def g():\n    b\n"
    );
    assert_eq!(
        text,
        "class Other:\n    def greet(self):\n        print(\"Hi\")\nclass App:\n    def \
         greet(self):\n        print(\"Hello\")\nlast\nafter\n"
    );
}

#[test]
fn an_envelope_that_is_cut_off_or_malformed_names_its_line() {
    let cases = [
        (
            "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n",
            5,
            "End Patch",
        ),
        (
            "*** Begin Patch\n*** Frobnicate File: a\n*** End Patch",
            2,
            "expected",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\nx\n*** End Patch",
            4,
            "not a line of a change",
        ),
        (
            "*** Begin Patch\n*** Add File: a\n+x\ny\n+z\n*** End Patch",
            4,
            "starts with '+'",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n*** End Patch",
            2,
            "no change",
        ),
    ];
    for (patch, line, says) in cases {
        let error = parse(patch).unwrap_err();
        assert_eq!(error.line, Some(line), "{patch}: {error}");
        assert!(error.to_string().contains(says), "{patch}: {error}");
        assert!(
            error.to_string().ends_with("Nothing was changed."),
            "{error}"
        );
    }
    let shell = "apply_patch <<'EOF'\n*** Begin Patch\n*** Delete File: a\n*** End Patch\nEOF\n";
    assert_eq!(parse(shell).unwrap()[0].kind, Kind::Delete);
    let error = parse("  \n").unwrap_err().to_string();
    assert!(error.contains("names no file"), "{error}");
    assert!(parse("just some words\n").is_err());
}

#[test]
fn paths_that_leave_the_workspace_are_refused_when_read() {
    for patch in [
        "--- a/../escape.txt\n+++ b/../escape.txt\n@@ -0,0 +1 @@\n+x\n",
        "--- /dev/null\n+++ /etc/cron.d/x\n@@ -0,0 +1 @@\n+x\n",
        "*** Begin Patch\n*** Add File: /tmp/x\n+x\n*** End Patch",
        "*** Begin Patch\n*** Update File: a.txt\n*** Move to: ../../b.txt\n*** End Patch",
        "diff --git a/x b/x\nrename from x\nrename to sub/../../y\n",
    ] {
        let error = parse(patch).unwrap_err().to_string();
        assert!(
            error.contains("is outside the workspace"),
            "{patch}: {error}"
        );
    }
}

#[test]
fn a_hunk_that_does_not_apply_names_its_file_its_hunk_and_the_closest_lines() {
    let file = "def total(items):\n    return sum(items)\n\n\ndef mean(items):\n    return \
                total(items) / len(items)\n";
    let patch = "--- a/src/stats.py\n+++ b/src/stats.py\n@@ -1,2 +1,2 @@\n def total(items):\n\
                 -    return sum(items)\n+    return sum(items, 0)\n@@ -5,2 +5,2 @@\n def \
                 mean(values):\n-    return total(values) / len(values)\n+    return 0\n";
    let error = placed(file, patch).unwrap_err();
    assert!(
        error.starts_with(
            "Hunk 2 of src/stats.py (@@ -5,2 +5,2 @@, line 7 of the patch) does not apply"
        ),
        "{error}"
    );
    assert!(
        error.contains(" def mean(values):\n-    return total(values)"),
        "{error}"
    );
    assert!(
        error.contains(
            "closest lines of src/stats.py, at lines 5-6:\n5 | def mean(items):\n6 |     \
             return total(items)"
        ),
        "{error}"
    );
    assert!(
        error.contains("after line 2 (where hunk 1 ends)"),
        "{error}"
    );

    // Already applied: said so.
    let patch = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-old\n+new\n";
    let error = placed("new\n", patch).unwrap_err();
    assert!(error.contains("already at lines 1-1"), "{error}");

    // Hunks out of the file's order.
    let patch = "--- a/f\n+++ b/f\n@@ -3 +3 @@\n-c\n+C\n@@ -1 +1 @@\n-a\n+A\n";
    let error = placed("a\nb\nc\n", patch).unwrap_err();
    assert!(error.contains("in the order of the file"), "{error}");

    // An anchor that is not there.
    let patch = "*** Begin Patch\n*** Update File: f\n@@ def nope():\n-a\n+b\n*** End Patch";
    let error = placed("def nope(x):\na\n", patch).unwrap_err();
    assert!(
        error.contains("the line `def nope():` it names after @@"),
        "{error}"
    );
    assert!(error.contains("1 | def nope(x):"), "{error}");
}

#[test]
fn lines_only_added_go_where_the_hunk_says() {
    // After line 2, as `-2,0` says.
    let patch = "--- a/f\n+++ b/f\n@@ -2,0 +3,1 @@\n+new\n";
    assert_eq!(placed("a\nb\nc\n", patch).unwrap(), "a\nb\nnew\nc\n");
    // After the line an envelope names, or at the end without one.
    let after = "*** Begin Patch\n*** Update File: f\n@@ b\n+new\n*** End Patch";
    assert_eq!(placed("a\nb\nc\n", after).unwrap(), "a\nb\nnew\nc\n");
    let end = "*** Begin Patch\n*** Update File: f\n@@\n+new\n*** End Patch";
    assert_eq!(placed("a\nb\nc\n", end).unwrap(), "a\nb\nc\nnew\n");
}
