//! Repositories in (SPEC section 21): a run seeded from a clone of an
//! allowed repository (a real one, made here with `git`, served over
//! `file://`) or from an upload (a real `.tar.gz` or `.zip`), with its
//! request's files written over either.

use std::path::{Path, PathBuf};
use std::process::Command;

use agent_runner::config::TokenConfig;
use reqwest::Method;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A repository with two commits: `v1` (tagged) and the one after it on
/// `main`. Returns its path and the first commit's id.
pub fn repository(root: &Path) -> (PathBuf, String) {
    let repo = root.join("origin");
    std::fs::create_dir_all(repo.join("lib")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(
        repo.join("app.py"),
        "from lib.calc import add\nprint(add(1, 2))\n",
    )
    .unwrap();
    std::fs::write(
        repo.join("lib/calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    std::fs::write(repo.join("README.md"), "# calc\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    git(&repo, &["tag", "v1"]);
    let first = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("README.md"), "# calc\n\nAdds.\n").unwrap();
    git(&repo, &["commit", "-q", "-am", "second"]);
    (repo, first)
}

fn allowing(repo: &Path) -> impl FnOnce(&mut agent_runner::config::Config) {
    let prefix = format!("file://{}/", repo.parent().unwrap().display());
    move |config| {
        config.workspaces.git_allow = vec![prefix];
        config.workspaces.git_token_envs = vec!["HOME".into()];
    }
}

/// A run that fixes `lib/calc.py` with `write_file`.
fn fixing_run(workspace: Value) -> Value {
    json!({
        "prompt": "fix add",
        "tools": ["write_file", "read_file"],
        "workspace": workspace,
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("1", "write_file",
                json!({"path": "lib/calc.py", "content": "def add(a, b):\n    return a + b\n"}))]},
            {"content": "fixed"}
        ]}
    })
}

impl TestApp {
    pub async fn diff(&self, id: &str) -> String {
        let reply = self.get(&format!("/v1/runs/{id}/diff")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.headers["content-type"], "text/x-diff; charset=utf-8");
        reply.text
    }

    pub async fn upload(&self, bytes: Vec<u8>, content_type: &str) -> Reply {
        self.send(
            self.request(Method::POST, "/v1/uploads")
                .header("content-type", content_type)
                .body(bytes),
        )
        .await
    }
}

/// `git apply --check`, then `git apply`, of `diff` in `tree`.
pub fn git_apply(tree: &Path, diff: &str) {
    let patch = tree.parent().unwrap().join("run.diff");
    std::fs::write(&patch, diff).unwrap();
    let patch = patch.to_str().unwrap();
    git(tree, &["apply", "--check", patch]);
    git(tree, &["apply", patch]);
}

#[tokio::test]
async fn a_run_starts_from_a_clone_and_its_diff_applies_to_that_commit() {
    let root = tempfile::tempdir().unwrap();
    let (repo, first) = repository(root.path());
    let app = spawn_with(allowing(&repo)).await;
    let url = format!("file://{}", repo.display());

    // At the tag, with a file of the request's written over the clone.
    let run = app
        .run_to_end(fixing_run(json!({
            "git": {"url": url, "ref": "v1", "token_env": "HOME"},
            "files": {"README.md": "# calc, patched by the request\n"}
        })))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["changes"],
        json!({"files": 1, "insertions": 1, "deletions": 1})
    );
    let id = run["id"].as_str().unwrap();
    let workspace = app.dir.path().join("workspaces").join(id);
    assert_eq!(
        std::fs::read_to_string(workspace.join("README.md")).unwrap(),
        "# calc, patched by the request\n"
    );
    assert_eq!(git(&workspace, &["rev-parse", "HEAD"]), first);
    // The credential was sent through git's environment: never written.
    let home = std::env::var("HOME").unwrap();
    let config = std::fs::read_to_string(workspace.join(".git/config")).unwrap();
    assert!(
        !config.contains("extraHeader") && !config.contains(&home),
        "{config}"
    );

    let diff = app.diff(id).await;
    assert_eq!(
        diff,
        "diff --git a/lib/calc.py b/lib/calc.py\n--- a/lib/calc.py\n+++ b/lib/calc.py\n\
         @@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    );
    // `git apply` takes the starting tree (the commit, the request's files
    // over it) to the workspace.
    let check = root.path().join("check");
    git(
        root.path(),
        &["clone", "-q", "--branch", "v1", &url, "check"],
    );
    std::fs::write(check.join("README.md"), "# calc, patched by the request\n").unwrap();
    git_apply(&check, &diff);
    assert_eq!(
        std::fs::read_to_string(check.join("lib/calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );

    // A commit id is fetched by id; no ref is the default branch's head.
    let by_id = app
        .run_to_end(fixing_run(json!({"git": {"url": url, "ref": first}})))
        .await;
    assert_eq!(by_id["status"], "completed", "{by_id}");
    let by_id_dir = app
        .dir
        .path()
        .join("workspaces")
        .join(by_id["id"].as_str().unwrap());
    assert_eq!(git(&by_id_dir, &["rev-parse", "HEAD"]), first);
    let head = app
        .run_to_end(fixing_run(json!({"git": {"url": url}})))
        .await;
    let head_dir = app
        .dir
        .path()
        .join("workspaces")
        .join(head["id"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(head_dir.join("README.md")).unwrap(),
        "# calc\n\nAdds.\n"
    );
}

#[tokio::test]
async fn repositories_and_credentials_the_server_does_not_allow_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let (repo, _) = repository(root.path());
    let app = spawn_with(allowing(&repo)).await;
    let refused = |body: Value| fixing_run(json!({"git": body}));

    let reply = app
        .post_run(refused(json!({"url": "https://example.com/r.git"})))
        .await;
    assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reply.error_code(), "git_not_allowed");
    assert!(reply.text.contains("git_allow"), "{}", reply.text);

    let url = format!("file://{}", repo.display());
    let reply = app
        .post_run(refused(json!({"url": url, "token_env": "PATH"})))
        .await;
    assert_eq!(reply.error_code(), "git_not_allowed");
    assert!(reply.text.contains("git_token_envs"), "{}", reply.text);

    for (body, field) in [
        (json!({"url": "https://user:pw@example.com/r"}), "url"),
        (json!({"url": url, "ref": "--upload-pack=touch"}), "ref"),
        (json!({"url": url, "depth": 0}), "depth"),
        (json!({"url": url, "branch": "main"}), "branch"),
    ] {
        let reply = app.post_run(refused(body)).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{field}");
        assert!(reply.text.contains(field), "{field}: {}", reply.text);
    }
    let reply = app
        .post_run(
            json!({"prompt": "p", "previous_run_id": uuid::Uuid::now_v7().to_string(),
                         "workspace": {"git": {"url": url}}}),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );

    // Allowed, but not there: the run fails with git's own words.
    let missing = format!("file://{}/nothing-here", root.path().display());
    let run = app
        .run_to_end(fixing_run(json!({"git": {"url": missing}})))
        .await;
    assert_eq!(run["status"], "failed", "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(
        error.contains("git clone of") && error.contains("nothing-here"),
        "{error}"
    );
    assert_eq!(run["steps"], 0);
    // Never seeded: no starting tree, so nothing to count, and no diff.
    assert_eq!(run["changes"], Value::Null);
    assert_eq!(app.diff(run["id"].as_str().unwrap()).await, "");
    let workspaces = std::fs::read_dir(app.dir.path().join("workspaces")).unwrap();
    let clones: Vec<_> = workspaces
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".clone-"))
        .collect();
    assert!(clones.is_empty(), "a failed clone leaves nothing behind");
}

/// A `.tar.gz` of `entries` (name, content), each header written by hand so
/// that names a careful writer refuses (`..`, absolute) can be sent.
pub fn tar_gz(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (name, content) in entries {
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(content.len() as u64);
        header.set_cksum();
        builder.append(&header, *content).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

fn leftovers(app: &TestApp) -> Vec<String> {
    let dir = app.dir.path().join("workspaces/.uploads");
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn an_upload_seeds_runs_and_an_escaping_one_is_refused_whole() {
    let mut app = spawn_with(|config| {
        config.auth.tokens = vec![token("team-a", "secret-a"), token("team-b", "secret-b")];
        config.limits.max_upload_bytes = 64 * 1024;
    })
    .await;
    app.token = Some("secret-a".into());
    let archive = tar_gz(&[
        ("./src/app.py", b"print('v1')\n"),
        ("notes.txt", b"from the upload\n"),
    ]);
    let reply = app.upload(archive.clone(), "application/gzip").await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let id = reply.body["id"].as_str().unwrap().to_owned();
    assert_eq!(reply.headers["location"], format!("/v1/uploads/{id}"));
    assert_eq!(reply.body["files"], 2);
    assert_eq!(reply.body["size"], archive.len());
    assert_eq!(app.get(&format!("/v1/uploads/{id}")).await.body, reply.body);

    // Seeded from it, the request's files over it.
    let run = app
        .run_to_end(json!({
            "prompt": "p", "tools": ["edit_file"],
            "workspace": {"archive": id, "files": {"notes.txt": "from the request\n"}},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("1", "edit_file",
                    json!({"path": "src/app.py", "old_text": "v1", "new_text": "v2"}))]},
                {"content": "done"}
            ]}
        }))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        app.workspace_file(&run, "notes.txt").await,
        "from the request\n"
    );
    let diff = app.diff(run["id"].as_str().unwrap()).await;
    assert!(
        diff.starts_with("diff --git a/src/app.py b/src/app.py\n"),
        "{diff}"
    );
    assert!(diff.contains("-print('v1')\n+print('v2')\n"), "{diff}");

    // Another tenant's upload is not there for it.
    app.token = Some("secret-b".into());
    assert_eq!(
        app.get(&format!("/v1/uploads/{id}")).await.error_code(),
        "upload_not_found"
    );
    let named = app
        .post_run(json!({"prompt": "p", "workspace": {"archive": id},
                         "model": {"scripted": [{"content": "x"}]}}))
        .await;
    assert_eq!(named.status, StatusCode::NOT_FOUND);
    assert_eq!(named.error_code(), "upload_not_found");
    app.token = Some("secret-a".into());

    // Entries that would escape refuse the whole archive; nothing is kept.
    let before = leftovers(&app);
    for entries in [
        vec![("ok.txt", &b"x"[..]), ("../evil.txt", b"x")],
        vec![("ok.txt", &b"x"[..]), ("/tmp/evil.txt", b"x")],
    ] {
        let reply = app.upload(tar_gz(&entries), "application/gzip").await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            reply.text
        );
        assert_eq!(reply.error_code(), "invalid_archive");
        assert!(reply.text.contains("escape"), "{}", reply.text);
        assert_eq!(leftovers(&app), before);
    }
    let reply = app.upload(b"not gzip".to_vec(), "application/gzip").await;
    assert_eq!(reply.error_code(), "invalid_archive");
    let reply = app.upload(archive.clone(), "application/json").await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let reply = app.upload(vec![0u8; 65 * 1024], "application/zip").await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        reply.text
    );
    assert_eq!(leftovers(&app), before);

    // A zip, made by the zip writer.
    let mut zipped = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut zipped);
        zip.start_file("dir/z.txt", zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut zip, b"zipped\n").unwrap();
        zip.finish().unwrap();
    }
    let reply = app.upload(zipped.into_inner(), "application/zip").await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["files"], 1);

    // Deleted: gone for good, and runs may no longer name it.
    assert_eq!(app.delete(&format!("/v1/uploads/{id}")).await.status, 204);
    assert_eq!(
        app.get(&format!("/v1/uploads/{id}")).await.error_code(),
        "upload_not_found"
    );
    assert_eq!(app.delete(&format!("/v1/uploads/{id}")).await.status, 404);
    assert!(
        !app.dir
            .path()
            .join("workspaces/.uploads")
            .join(&id)
            .exists()
    );
}

fn token(tenant: &str, token: &str) -> TokenConfig {
    toml::from_str(&format!("tenant = \"{tenant}\"\ntoken = \"{token}\"")).unwrap()
}

#[tokio::test]
async fn uploads_expire_with_retention_and_a_purged_run_takes_its_starting_tree() {
    use sqlx::Connection;
    let app = spawn_with(|config| {
        config.retention.keep_days = Some(7);
        config.retention.sweep_interval_ms = 100;
    })
    .await;
    let mut ids = Vec::new();
    for name in ["old.txt", "new.txt"] {
        let reply = app
            .upload(tar_gz(&[(name, b"x\n")]), "application/gzip")
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        assert!(reply.body["expires_at"].is_string(), "{}", reply.text);
        ids.push(reply.body["id"].as_str().unwrap().to_owned());
    }
    // A run from the first keeps its starting tree beside the workspaces.
    let run = app
        .run_to_end(json!({"prompt": "p", "workspace": {"archive": ids[0]},
                           "model": {"scripted": [{"content": "x"}]}}))
        .await;
    let run_id = run["id"].as_str().unwrap();
    let base = app.dir.path().join("workspaces/.bases").join(run_id);
    assert!(base.join("old.txt").is_file());
    // The clock moves: the first was made eight days ago.
    let mut db = sqlx::AnyConnection::connect(&database_url(app.dir.path()))
        .await
        .unwrap();
    let made = agent_runner::run::format_time(&(chrono::Utc::now() - chrono::TimeDelta::days(8)));
    sqlx::query("UPDATE uploads SET created_at = $1 WHERE id = $2")
        .bind(made)
        .bind(&ids[0])
        .execute(&mut db)
        .await
        .unwrap();
    let uploads = app.dir.path().join("workspaces/.uploads");
    // Its row goes first, then its files (the sweep deletes the expired
    // rows, then their directories): each waited for, with a deadline.
    eventually("the old upload to expire", async || {
        (app.get(&format!("/v1/uploads/{}", ids[0])).await.status == 404).then_some(())
    })
    .await;
    eventually("the old upload's files to go", async || {
        (!uploads.join(&ids[0]).exists()).then_some(())
    })
    .await;
    assert!(uploads.join(&ids[1]).is_dir());
    assert_eq!(
        app.get(&format!("/v1/uploads/{}", ids[1])).await.status,
        200
    );
    // The run seeded from it is its own: purged, its starting tree goes too.
    let purged = app
        .send(app.request(Method::POST, &format!("/v1/runs/{run_id}/purge")))
        .await;
    assert_eq!(purged.status, 204);
    assert!(!base.exists());
}

#[tokio::test]
async fn a_clone_past_its_size_ceiling_fails_the_run() {
    let root = tempfile::tempdir().unwrap();
    let (repo, _) = repository(root.path());
    let prefix = format!("file://{}/", root.path().display());
    let app = spawn_with(|config| {
        config.workspaces.git_allow = vec![prefix];
        config.workspaces.max_git_bytes = 200;
    })
    .await;
    let run = app
        .run_to_end(fixing_run(
            json!({"git": {"url": format!("file://{}", repo.display())}}),
        ))
        .await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"].as_str().unwrap().contains("max_git_bytes"),
        "{run}"
    );
}
