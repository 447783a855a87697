//! `apply_patch` over a real workspace: whole or nothing, the files'
//! states, refusals, and the output of `git diff`.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use serde_json::json;
use tempfile::TempDir;

use super::*;
use crate::harness::ToolRegistry;
use crate::tools::workspace::Workspace;

/// A workspace holding `files`.
fn workspace(files: &[(&str, &str)]) -> (TempDir, Arc<RunWorkspace>) {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let workspace = Arc::new(RunWorkspace::from(Workspace::open(dir.path()).unwrap()));
    (dir, workspace)
}

async fn apply(workspace: &Arc<RunWorkspace>, patch: &str) -> Result<Value, String> {
    ApplyPatch::new(Arc::clone(workspace))
        .execute(&json!({ "patch": patch }), &CancellationToken::new())
        .await
        .map_err(|error| error.message().to_owned())
}

fn read(dir: &TempDir, path: &str) -> String {
    std::fs::read_to_string(dir.path().join(path)).unwrap()
}

#[tokio::test]
async fn a_patch_applies_to_the_workspace_and_reports_each_file() {
    let (dir, ws) = workspace(&[
        ("src/app.py", "import os\n\ndef main():\n    print('hi')\n"),
        ("old.txt", "bye\n"),
        ("a.txt", "one\ntwo\n"),
    ]);
    let patch = "*** Begin Patch
*** Update File: src/app.py
@@ def main():
-    print('hi')
+    print('hello')
+    return 0
*** Add File: pkg/new/mod.py
+X = 1
*** Delete File: old.txt
*** Update File: a.txt
*** Move to: b.txt
@@
 one
-two
+2
*** End Patch";
    let result = apply(&ws, patch).await.unwrap();
    assert_eq!(
        result["files"],
        json!([
            {"path": "src/app.py", "action": "updated", "insertions": 2, "deletions": 1},
            {"path": "pkg/new/mod.py", "action": "added", "insertions": 1, "deletions": 0},
            {"path": "old.txt", "action": "deleted", "insertions": 0, "deletions": 1},
            {"path": "b.txt", "action": "moved", "from": "a.txt", "insertions": 1,
             "deletions": 1},
        ])
    );
    let snippet = result["snippet"].as_str().unwrap();
    assert!(
        snippet.starts_with("src/app.py:\n1 | import os\n"),
        "{snippet}"
    );
    assert!(snippet.contains("5 |     return 0"), "{snippet}");
    assert!(snippet.contains("b.txt:\n1 | one\n2 | 2"), "{snippet}");
    assert_eq!(
        read(&dir, "src/app.py"),
        "import os\n\ndef main():\n    print('hello')\n    return 0\n"
    );
    assert_eq!(read(&dir, "pkg/new/mod.py"), "X = 1\n");
    assert_eq!(read(&dir, "b.txt"), "one\n2\n");
    assert!(!dir.path().join("old.txt").exists());
    assert!(!dir.path().join("a.txt").exists());
}

#[tokio::test]
async fn nothing_is_written_when_one_hunk_of_one_file_does_not_apply() {
    let (dir, ws) = workspace(&[("first.txt", "a\nb\n"), ("second.txt", "c\nd\n")]);
    let patch = "--- a/first.txt\n+++ b/first.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n\
                 --- /dev/null\n+++ b/third.txt\n@@ -0,0 +1 @@\n+new\n\
                 --- a/second.txt\n+++ b/second.txt\n@@ -1,2 +1,2 @@\n c\n-x\n+X\n";
    let error = apply(&ws, patch).await.unwrap_err();
    assert!(
        error.starts_with("Hunk 1 of second.txt (@@ -1,2 +1,2 @@"),
        "{error}"
    );
    assert!(error.contains("Nothing was changed"), "{error}");
    assert_eq!(read(&dir, "first.txt"), "a\nb\n");
    assert!(!dir.path().join("third.txt").exists());
}

#[tokio::test]
async fn files_that_are_missing_present_or_not_text_are_refused_by_name() {
    let (dir, ws) = workspace(&[("util.py", "x\n"), ("image.bin", "")]);
    std::fs::write(dir.path().join("image.bin"), [0xff, 0xfe, 0x00]).unwrap();
    let update = |path: &str| format!("--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-x\n+y\n");

    let error = apply(&ws, &update("utils.py")).await.unwrap_err();
    assert!(
        error.starts_with("Cannot update utils.py (line 1 of the patch)"),
        "{error}"
    );
    assert!(error.contains("Did you mean: util.py?"), "{error}");

    let error = apply(&ws, &update("image.bin")).await.unwrap_err();
    assert!(error.contains("not UTF-8 text"), "{error}");

    let add = "*** Begin Patch\n*** Add File: util.py\n+y\n*** End Patch";
    let error = apply(&ws, add).await.unwrap_err();
    assert!(error.contains("util.py already exists"), "{error}");

    let error = apply(&ws, "*** Begin Patch\n*** End Patch")
        .await
        .unwrap_err();
    assert!(error.contains("names no file"), "{error}");

    // A file the patch deletes, then updates.
    let twice = "*** Begin Patch\n*** Delete File: util.py\n*** Update File: util.py\n@@\n-x\n+y\n\
                 *** End Patch";
    let error = apply(&ws, twice).await.unwrap_err();
    assert!(
        error.contains("an earlier part of the patch deletes"),
        "{error}"
    );
    assert_eq!(read(&dir, "util.py"), "x\n");
}

#[tokio::test]
async fn the_output_of_git_diff_applies_and_gives_git_s_tree() {
    let before: &[(&str, &str)] = &[
        (
            "src/calc.py",
            "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n",
        ),
        ("README.md", "# Calc\n\nAdds numbers."),
        ("notes.txt", "remove me\n"),
        (
            "docs/guide.md",
            "Guide\n=====\n\nStep one.\nStep two.\nStep three.\n",
        ),
        ("crlf.txt", "one\r\ntwo\r\n"),
    ];
    let after: &[(&str, &str)] = &[
        (
            "src/calc.py",
            "def add(a, b):\n    \"\"\"Sum.\"\"\"\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
        ),
        ("README.md", "# Calc\n\nAdds and multiplies numbers.\n"),
        ("src/new/helpers.py", "HELP = \"yes\"\n"),
        (
            "manual/guide.md",
            "Guide\n=====\n\nStep one.\nStep 2.\nStep three.\n",
        ),
        ("crlf.txt", "one\r\n2\r\n"),
        ("empty.txt", ""),
    ];
    let repo = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let output = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(["-c", "core.autocrlf=false", "-c", "diff.noprefix=false"])
            .args(args)
            .current_dir(repo.path())
            .output()
            .expect("git runs");
        assert!(output.status.success(), "git {args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let put = |root: &Path, files: &[(&str, &str)]| {
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    };
    git(&["init", "-q"]);
    put(repo.path(), before);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "before"]);
    for (path, _) in before {
        std::fs::remove_file(repo.path().join(path)).unwrap();
    }
    put(repo.path(), after);
    git(&["add", "-A"]);
    let diff = git(&["diff", "--cached", "-M", "--no-color", "--no-ext-diff"]);
    assert!(diff.contains("rename from docs/guide.md"), "{diff}");
    assert!(diff.contains("\\ No newline at end of file"), "{diff}");

    let (dir, ws) = workspace(before);
    let result = apply(&ws, &diff).await.unwrap();
    for (path, text) in after {
        assert_eq!(&read(&dir, path), text, "{path}");
    }
    assert!(!dir.path().join("notes.txt").exists());
    assert!(!dir.path().join("docs/guide.md").exists());
    let actions: Vec<(&str, &str)> = result["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|file| {
            (
                file["path"].as_str().unwrap(),
                file["action"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        actions.contains(&("manual/guide.md", "moved")),
        "{actions:?}"
    );
    assert!(actions.contains(&("notes.txt", "deleted")), "{actions:?}");
    assert!(actions.contains(&("empty.txt", "added")), "{actions:?}");
}

#[test]
fn the_files_a_call_changes_are_every_file_of_its_patch() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Arc::new(RunWorkspace::from(Workspace::open(dir.path()).unwrap()));
    let tool: Arc<dyn Tool> = Arc::new(ApplyPatch::new(ws));
    let registry = ToolRegistry::new([tool]).unwrap();
    let patch = "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n*** Add File: c.py\n\
                 +x\n*** Delete File: a.py\n*** End Patch";
    assert_eq!(
        registry.changed_paths(APPLY_PATCH, &json!({ "patch": patch })),
        ["a.py", "b.py", "c.py"]
    );
    assert!(
        registry
            .changed_paths(APPLY_PATCH, &json!({ "patch": "nonsense" }))
            .is_empty()
    );
    assert_eq!(registry.role(APPLY_PATCH), ToolRole::Changes);
}

#[tokio::test]
async fn links_folders_that_are_files_and_partial_deletions_are_refused() {
    let (dir, ws) = workspace(&[("a.txt", "one\ntwo\n"), ("outside/secret.txt", "s\n")]);
    std::os::unix::fs::symlink(dir.path().join("outside"), dir.path().join("link")).unwrap();
    let delete = "*** Begin Patch\n*** Delete File: link/secret.txt\n*** End Patch";
    let error = apply(&ws, delete).await.unwrap_err();
    assert!(
        error.contains("Symbolic links are not permitted"),
        "{error}"
    );
    assert!(dir.path().join("outside/secret.txt").exists());

    let into_file = "*** Begin Patch\n*** Add File: a.txt/b.txt\n+x\n*** End Patch";
    let error = apply(&ws, into_file).await.unwrap_err();
    assert!(error.contains("Cannot add a.txt/b.txt"), "{error}");

    let partial = "--- a/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-one\n";
    let error = apply(&ws, partial).await.unwrap_err();
    assert!(error.contains("1 more would be left"), "{error}");
    assert_eq!(read(&dir, "a.txt"), "one\ntwo\n");

    let whole = "--- a/a.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-one\n-two\n";
    let result = apply(&ws, whole).await.unwrap();
    assert_eq!(result["files"][0]["action"], "deleted");
    assert!(!dir.path().join("a.txt").exists());
}

#[tokio::test]
async fn files_are_deleted_through_either_resolver() {
    use crate::tools::{Resolver, WorkspaceOptions};
    for resolver in [Resolver::Openat2, Resolver::Walk] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sub/deeper")).unwrap();
        std::fs::write(dir.path().join("sub/deeper/x.txt"), "x\n").unwrap();
        std::fs::write(dir.path().join("top.txt"), "t\n").unwrap();
        let options = WorkspaceOptions {
            resolver: Some(resolver),
            ..WorkspaceOptions::default()
        };
        let opened = Workspace::open_with(dir.path(), options).unwrap();
        let ws = Arc::new(RunWorkspace::from(opened));
        let patch = "*** Begin Patch\n*** Delete File: sub/deeper/x.txt\n*** Delete File: \
                     top.txt\n*** End Patch";
        apply(&ws, patch).await.unwrap();
        assert!(
            !dir.path().join("sub/deeper/x.txt").exists(),
            "{resolver:?}"
        );
        assert!(!dir.path().join("top.txt").exists(), "{resolver:?}");
        assert!(dir.path().join("sub/deeper").is_dir(), "folders stay");
    }
}
