use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use super::*;

fn write(root: &Path, path: &str, content: &str) {
    let path = root.join(path);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn diff_text(base: &Tree, now: &Path) -> (String, Changes) {
    let tree = Tree::walk(now, false).unwrap();
    let mut out = Vec::new();
    let changes = super::write(base, &tree, &mut out).unwrap();
    assert_eq!(count(base, &tree).unwrap(), changes, "counted alike");
    (String::from_utf8(out).unwrap(), changes)
}

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap()
}

/// Every file of `dir` (without `.git`) and its bytes.
fn contents(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let tree = Tree::walk(dir, false).unwrap();
    tree.entries
        .iter()
        .filter(|(_, meta)| meta.kind != Kind::Dir)
        .map(|(path, meta)| (path.clone(), tree.read(path, meta.kind, 1 << 20).unwrap()))
        .collect()
}

#[test]
fn git_apply_takes_the_base_to_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let (base, now) = (dir.path().join("base"), dir.path().join("now"));
    let long: String = (1..=40).map(|n| format!("line {n}\n")).collect();
    for root in [&base, &now] {
        write(root, "src/long.txt", &long);
        write(root, "same.txt", "unchanged\n");
        write(root, "moved/old name.py", "def f():\n    return 1\n");
        write(root, "gone.txt", "bye\n");
        write(root, "tool.sh", "#!/bin/sh\necho hi\n");
        write(root, "empty-gone", "");
        write(root, "carriage.txt", "one\rstill one\n");
    }
    write(&now, "carriage.txt", "one\rstill one\ntwo\n");
    write(
        &now,
        "src/long.txt",
        &long
            .replace("line 3\n", "line three\n")
            .replace("line 30\n", ""),
    );
    fs::remove_file(now.join("gone.txt")).unwrap();
    fs::remove_file(now.join("empty-gone")).unwrap();
    fs::rename(now.join("moved/old name.py"), now.join("moved/new name.py")).unwrap();
    fs::set_permissions(now.join("tool.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    write(&now, "new/added.md", "# added\nno newline at the end");
    write(&now, "empty-new", "");
    write(&now, "tab\tname.txt", "quoted\n");
    std::os::unix::fs::symlink("src/long.txt", now.join("link")).unwrap();

    let (text, changes) = diff_text(&Tree::walk(&base, false).unwrap(), &now);
    assert!(text.contains("diff --git a/moved/old name.py b/moved/new name.py\nsimilarity index 100%\nrename from moved/old name.py\nrename to moved/new name.py\n"), "{text}");
    assert!(
        text.contains("diff --git a/tool.sh b/tool.sh\nold mode 100644\nnew mode 100755\n"),
        "{text}"
    );
    assert!(text.contains("diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"), "{text}");
    assert!(
        text.contains("diff --git a/empty-new b/empty-new\nnew file mode 100644\n"),
        "{text}"
    );
    assert!(text.contains("\\ No newline at end of file"), "{text}");
    assert!(
        text.contains("diff --git \"a/tab\\tname.txt\" \"b/tab\\tname.txt\""),
        "{text}"
    );
    assert!(text.contains("new file mode 120000"), "{text}");
    assert!(!text.contains("same.txt"));
    // 10 paths: long, gone, empty-gone, rename, tool.sh, added.md,
    // empty-new, tab name, link, carriage.
    assert_eq!(changes.files, 10, "{text}");
    assert_eq!(changes.insertions, 1 + 2 + 1 + 1 + 1);
    assert_eq!(changes.deletions, 2 + 1);

    // Applied by git to the starting tree, it gives the workspace.
    let out = git(&base, &["init", "-q"]);
    assert!(out.status.success());
    let patch = dir.path().join("run.diff");
    fs::write(&patch, &text).unwrap();
    let check = git(&base, &["apply", "--check", patch.to_str().unwrap()]);
    assert!(
        check.status.success(),
        "{}\n{text}",
        String::from_utf8_lossy(&check.stderr)
    );
    let applied = git(&base, &["apply", patch.to_str().unwrap()]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert_eq!(contents(&base), contents(&now));
    assert_eq!(
        fs::metadata(base.join("tool.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o111,
        0o111
    );
}

#[test]
fn a_workspace_never_made_against_the_empty_tree_changed_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        diff_text(&Tree::empty(), &dir.path().join("missing")),
        (String::new(), Changes::default())
    );
}

#[test]
fn binary_files_are_said_to_differ() {
    let dir = tempfile::tempdir().unwrap();
    let (base, now) = (dir.path().join("base"), dir.path().join("now"));
    fs::create_dir_all(&base).unwrap();
    fs::create_dir_all(&now).unwrap();
    fs::write(base.join("img.bin"), b"\x00\x01\x02").unwrap();
    fs::write(now.join("img.bin"), b"\x00\x01\x03").unwrap();
    fs::write(now.join("latin1.txt"), b"caf\xe9\n").unwrap();
    let (text, changes) = diff_text(&Tree::walk(&base, false).unwrap(), &now);
    assert!(
        text.contains(
            "diff --git a/img.bin b/img.bin\nBinary files a/img.bin and b/img.bin differ\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("new file mode 100644\nBinary files /dev/null and b/latin1.txt differ\n"),
        "{text}"
    );
    assert_eq!(
        (changes.files, changes.insertions, changes.deletions),
        (2, 0, 0)
    );
}
