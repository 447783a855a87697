//! Patches out (SPEC section 21): every run's diff against the tree it
//! started from, whatever seeded it, applied by the real `git apply`; its
//! `changes`; its workspace as a `.tar.gz`.

use std::path::Path;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::repositories::{git, git_apply};

fn writes(calls: Vec<Value>) -> Value {
    json!({
        "prompt": "change things",
        "tools": ["write_file", "edit_file", "read_file"],
        "model": {"scripted": [
            {"content": "", "tool_calls": calls},
            {"content": "done"}
        ]}
    })
}

/// A directory holding `files`, as a run's request seeded them.
fn seeded(root: &Path, name: &str, files: &Value) -> std::path::PathBuf {
    let dir = root.join(name);
    for (path, content) in files.as_object().unwrap() {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content.as_str().unwrap()).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q"]);
    dir
}

#[tokio::test]
async fn a_run_of_files_and_the_run_that_continues_it_each_diff_against_their_start() {
    let app = spawn_app().await;
    let root = tempfile::tempdir().unwrap();
    let files = json!({
        "src/app.py": "def main():\n    print('hello')\n",
        "docs/old.md": "# Old\n",
        "gone.txt": "remove me\n",
    });
    let mut body = writes(vec![
        call(
            "1",
            "edit_file",
            json!({"path": "src/app.py", "old_text": "hello", "new_text": "hello, world"}),
        ),
        call(
            "2",
            "write_file",
            json!({"path": "src/new.py", "content": "X = 1\n"}),
        ),
    ]);
    body["workspace"] = json!({"files": files});
    let run = app.run_to_end(body).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["changes"],
        json!({"files": 2, "insertions": 2, "deletions": 1})
    );
    let id = run["id"].as_str().unwrap();
    let diff = app.diff(id).await;
    assert!(diff.contains("diff --git a/src/new.py b/src/new.py\nnew file mode 100644\n--- /dev/null\n+++ b/src/new.py\n@@ -0,0 +1 @@\n+X = 1\n"), "{diff}");
    let start = seeded(root.path(), "first", &files);
    git_apply(&start, &diff);
    assert_eq!(
        std::fs::read_to_string(start.join("src/app.py")).unwrap(),
        "def main():\n    print('hello, world')\n"
    );

    // Its follow-up starts from where it ended: its diff is its own work.
    let mut next = writes(vec![call(
        "1",
        "write_file",
        json!({"path": "docs/old.md", "content": "# Renamed\n"}),
    )]);
    next["previous_run_id"] = json!(id);
    let second = app.run_to_end(next).await;
    assert_eq!(second["status"], "completed", "{second}");
    let diff = app.diff(second["id"].as_str().unwrap()).await;
    assert_eq!(
        diff,
        "diff --git a/docs/old.md b/docs/old.md\n--- a/docs/old.md\n+++ b/docs/old.md\n@@ -1 +1 @@\n-# Old\n+# Renamed\n"
    );
    git_apply(&start, &diff);

    // Nothing written: nothing changed, and nothing to apply.
    let mut idle = json!({"prompt": "look", "tools": ["read_file"],
                          "model": {"scripted": [{"content": "fine"}]}});
    idle["workspace"] = json!({"files": files});
    let idle = app.run_to_end(idle).await;
    assert_eq!(
        idle["changes"],
        json!({"files": 0, "insertions": 0, "deletions": 0})
    );
    assert_eq!(app.diff(idle["id"].as_str().unwrap()).await, "");
    // Its starting tree was kept only by the run that wrote, on its first
    // write: the idle one's workspace is its own starting tree.
    let bases = app.dir.path().join("workspaces/.bases");
    assert!(bases.join(id).join("gone.txt").is_file());
    assert!(!bases.join(idle["id"].as_str().unwrap()).exists());
    // A live run has no changes yet; its diff is the workspace now.
    let live = app
        .create_run(json!({"prompt": "wait", "workspace": {"files": files},
                           "model": {"scripted": [{"delay_ms": 60_000, "content": "x"}]}}))
        .await;
    assert_eq!(live["changes"], Value::Null);
    let live_id = live["id"].as_str().unwrap();
    assert_eq!(app.diff(live_id).await, "");
    assert_eq!(
        app.get("/v1/runs/00000000-0000-7000-8000-000000000000/diff")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    app.delete(&format!("/v1/runs/{live_id}")).await;
}

#[tokio::test]
async fn a_run_s_workspace_downloads_as_a_tar_gz_with_git_only_when_asked() {
    let root = tempfile::tempdir().unwrap();
    let (repo, _) = crate::repositories::repository(root.path());
    let prefix = format!("file://{}/", root.path().display());
    let app = spawn_with(|config| config.workspaces.git_allow = vec![prefix]).await;
    let mut body = writes(vec![call(
        "1",
        "write_file",
        json!({"path": "lib/extra.py", "content": "E = 2\n"}),
    )]);
    body["workspace"] = json!({"git": {"url": format!("file://{}", repo.display())}});
    let run = app.run_to_end(body).await;
    assert_eq!(run["status"], "completed", "{run}");
    let id = run["id"].as_str().unwrap();
    for with_git in [false, true] {
        let response = app
            .request(
                reqwest::Method::GET,
                &format!("/v1/runs/{id}/archive?include_git={with_git}"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "application/gzip");
        assert_eq!(
            response.headers()["content-disposition"],
            format!("attachment; filename=\"{id}.tar.gz\"")
        );
        let bytes = response.bytes().await.unwrap();
        let out = root.path().join(format!("unpacked-{with_git}"));
        tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]))
            .unpack(&out)
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("lib/extra.py")).unwrap(),
            "E = 2\n"
        );
        assert_eq!(
            std::fs::read_to_string(out.join("lib/calc.py")).unwrap(),
            "def add(a, b):\n    return a - b\n"
        );
        assert_eq!(out.join(".git/HEAD").exists(), with_git);
        if with_git {
            // A repository still: git sees the run's file as untracked.
            let status = git(&out, &["status", "--porcelain"]);
            assert_eq!(status, "?? lib/extra.py");
        }
    }
    let reply = app
        .get(&format!("/v1/runs/{id}/archive?include_git=maybe"))
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn apply_patch_changes_several_files_at_once_or_none_of_them() {
    let app = spawn_app().await;
    let files = json!({
        "src/calc.py": "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a + b\n",
        "README.md": "# calc\n",
    });
    let unified = "diff --git a/src/calc.py b/src/calc.py\n--- a/src/calc.py\n+++ b/src/calc.py\n\
        @@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n\
        @@ -5,2 +5,2 @@\n def sub(a, b):\n-    return a + b\n+    return a - b\n\
        diff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES.md\n@@ -0,0 +1 @@\n+fixed both\n";
    let envelope =
        "*** Begin Patch\n*** Update File: README.md\n@@\n-# calc\n+# calc, fixed\n*** End Patch\n";
    // The second call's hunk is not in the file: it changes nothing.
    let stale = "--- a/src/calc.py\n+++ b/src/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a * b\n+    return b + a\n\
        --- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-# calc, fixed\n+# gone\n";
    let run = app
        .run_to_end(json!({
            "prompt": "fix calc", "tools": ["apply_patch"],
            "workspace": {"files": files},
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("1", "apply_patch", json!({"patch": unified})),
                    call("2", "apply_patch", json!({"patch": envelope}))]},
                {"content": "", "tool_calls": [call("3", "apply_patch", json!({"patch": stale}))]},
                {"content": "done"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    let id = run["id"].as_str().unwrap();
    let results: Vec<Value> = app
        .messages(id)
        .await
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results[0]["is_error"], false, "{}", results[0]);
    let stale_result = results[2]["content"].as_str().unwrap();
    assert_eq!(results[2]["is_error"], true);
    assert!(
        stale_result.contains("src/calc.py") && stale_result.contains("1 | def add(a, b):"),
        "{stale_result}"
    );
    assert_eq!(
        app.workspace_file(&run, "README.md").await,
        "# calc, fixed\n"
    );
    assert_eq!(
        app.workspace_file(&run, "src/calc.py").await,
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    );
    assert_eq!(
        run["changes"],
        json!({"files": 3, "insertions": 4, "deletions": 3})
    );
    let root = tempfile::tempdir().unwrap();
    let start = seeded(root.path(), "start", &files);
    git_apply(&start, &app.diff(id).await);
    assert_eq!(
        std::fs::read_to_string(start.join("NOTES.md")).unwrap(),
        "fixed both\n"
    );
}
