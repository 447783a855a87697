//! `read_file` windows, `edit_file`, `search` and the paths suggested for
//! a missing one, as a model meets them, against real directories with
//! both resolvers.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::sync::Arc;

use agent_runner::harness::Tool;
use agent_runner::tools::{
    EditFile, ListDir, ReadFile, Resolver, RunWorkspace, Search, Workspace, WorkspaceOptions,
    WriteFile,
};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

const RESOLVERS: [Resolver; 2] = [Resolver::Openat2, Resolver::Walk];

/// A workspace beside an `outside/` directory with a secret in it.
struct Fixture {
    scratch: TempDir,
    workspace: Arc<RunWorkspace>,
}

impl Fixture {
    fn new(resolver: Resolver) -> Self {
        let scratch = tempfile::tempdir().unwrap();
        std::fs::create_dir(scratch.path().join("ws")).unwrap();
        std::fs::create_dir(scratch.path().join("outside")).unwrap();
        std::fs::write(scratch.path().join("outside/secret.py"), "SECRET = 1\n").unwrap();
        let workspace = Workspace::open_with(
            scratch.path().join("ws"),
            WorkspaceOptions {
                resolver: Some(resolver),
                ..WorkspaceOptions::default()
            },
        )
        .unwrap();
        Self {
            scratch,
            workspace: Arc::new(RunWorkspace::from(workspace)),
        }
    }

    fn path(&self, relative: &str) -> std::path::PathBuf {
        self.scratch.path().join("ws").join(relative)
    }

    /// Writes a file, making its folders.
    fn put(&self, relative: &str, content: impl AsRef<[u8]>) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    async fn call(&self, tool: &str, arguments: Value) -> Result<Value, String> {
        let ws = Arc::clone(&self.workspace);
        let tool: Box<dyn Tool> = match tool {
            "read_file" => Box::new(ReadFile::new(ws)),
            "write_file" => Box::new(WriteFile::new(ws)),
            "edit_file" => Box::new(EditFile::new(ws)),
            "list_dir" => Box::new(ListDir::new(ws)),
            "search" => Box::new(Search::new(ws)),
            other => panic!("no tool {other}"),
        };
        tool.execute(&arguments, &CancellationToken::new())
            .await
            .map_err(|error| error.message().to_owned())
    }
}

fn numbered_lines(count: usize) -> String {
    (1..=count).map(|i| format!("line {i}\n")).collect()
}

#[tokio::test]
async fn a_file_is_read_in_windows_of_lines() {
    let f = Fixture::new(Resolver::Openat2);
    f.put("long.txt", numbered_lines(10));
    assert_eq!(
        f.call(
            "read_file",
            json!({"path": "long.txt", "offset": 3, "limit": 2})
        )
        .await,
        Ok(
            json!({"path": "long.txt", "start_line": 3, "end_line": 4, "total_lines": 10,
                  "text": "line 3\nline 4\n"})
        )
    );
    let tail = f
        .call("read_file", json!({"path": "long.txt", "offset": 9}))
        .await
        .unwrap();
    assert_eq!(
        (tail["end_line"].clone(), tail["text"].clone()),
        (json!(10), json!("line 9\nline 10\n"))
    );
    let head = f
        .call("read_file", json!({"path": "long.txt", "limit": 1}))
        .await
        .unwrap();
    assert_eq!(head["text"], "line 1\n");
    // Without a window: the text, as always.
    assert_eq!(
        f.call("read_file", json!({"path": "long.txt"})).await,
        Ok(json!(numbered_lines(10)))
    );
    assert_eq!(
        f.call("read_file", json!({"path": "long.txt", "offset": 11}))
            .await,
        Err("offset 11 is past the end of long.txt: it has 10 lines".into())
    );
    for bad in [json!(0), json!(-1), json!(1.5), json!("2")] {
        let refused = f
            .call("read_file", json!({"path": "long.txt", "offset": bad}))
            .await
            .unwrap_err();
        assert!(refused.contains("$.offset"), "{bad}: {refused}");
    }
}

#[tokio::test]
async fn an_edit_replaces_in_place_keeps_the_mode_and_refuses_links() {
    for resolver in RESOLVERS {
        let f = Fixture::new(resolver);
        f.put("bin/run.sh", "#!/bin/sh\necho old\n");
        std::fs::set_permissions(f.path("bin/run.sh"), std::fs::Permissions::from_mode(0o751))
            .unwrap();
        let edited = f
            .call(
                "edit_file",
                json!({"path": "bin/run.sh", "old_text": "echo old", "new_text": "echo new"}),
            )
            .await
            .unwrap();
        assert_eq!(
            edited,
            json!({"path": "bin/run.sh", "replacements": 1,
                   "snippet": "1 | #!/bin/sh\n2 | echo new"})
        );
        assert_eq!(
            std::fs::read_to_string(f.path("bin/run.sh")).unwrap(),
            "#!/bin/sh\necho new\n"
        );
        let mode = std::fs::metadata(f.path("bin/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o751);
        let names: Vec<_> = std::fs::read_dir(f.path("bin"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["run.sh"], "no temporary file is left");

        symlink(
            f.scratch.path().join("outside/secret.py"),
            f.path("link.py"),
        )
        .unwrap();
        symlink(f.scratch.path().join("outside"), f.path("out")).unwrap();
        for path in ["link.py", "out/secret.py"] {
            let refused = f
                .call(
                    "edit_file",
                    json!({"path": path, "old_text": "SECRET", "new_text": "X"}),
                )
                .await
                .unwrap_err();
            assert!(
                refused.starts_with("Symbolic links are not permitted"),
                "{refused}"
            );
        }
        assert!(
            f.call(
                "edit_file",
                json!({"path": "../outside/secret.py", "old_text": "SECRET", "new_text": "X"})
            )
            .await
            .unwrap_err()
            .starts_with("Path is outside the workspace")
        );
        assert_eq!(
            std::fs::read_to_string(f.scratch.path().join("outside/secret.py")).unwrap(),
            "SECRET = 1\n"
        );
        // A refused edit writes nothing.
        let refused = f
            .call(
                "edit_file",
                json!({"path": "bin/run.sh", "old_text": "", "new_text": "x"}),
            )
            .await
            .unwrap_err();
        assert!(refused.starts_with("old_text is empty"), "{refused}");
        assert_eq!(
            std::fs::read_to_string(f.path("bin/run.sh")).unwrap(),
            "#!/bin/sh\necho new\n"
        );
    }
}

#[tokio::test]
async fn a_missing_path_names_close_ones() {
    for resolver in RESOLVERS {
        let f = Fixture::new(resolver);
        f.put("src/util.py", "");
        f.put("src/main.py", "");
        f.put("tests/test_util.py", "");
        assert_eq!(
            f.call("read_file", json!({"path": "src/utils.py"})).await,
            Err("No such file or directory: src/utils.py\nDid you mean: src/util.py?".into())
        );
        assert_eq!(
            f.call(
                "edit_file",
                json!({"path": "main.py", "old_text": "a", "new_text": "b"})
            )
            .await,
            Err("No such file or directory: main.py\nDid you mean: src/main.py?".into())
        );
        assert_eq!(
            f.call("list_dir", json!({"path": "test"})).await,
            Err("No such file or directory: test\nDid you mean: tests?".into())
        );
        assert_eq!(
            f.call("search", json!({"pattern": "x", "path": "./srcs"}))
                .await,
            Err("No such file or directory: ./srcs\nDid you mean: src?".into())
        );
        assert_eq!(
            f.call("write_file", json!({"path": "test/new.py", "content": ""}))
                .await,
            Err(
                "Parent directory does not exist: test/new.py (write_file does not create \
                 directories)\nDid you mean: tests/new.py?"
                    .into()
            )
        );
        // Nothing close: the error alone.
        assert_eq!(
            f.call("read_file", json!({"path": "Cargo.toml"})).await,
            Err("No such file or directory: Cargo.toml".into())
        );
    }
}

#[tokio::test]
async fn a_search_walks_the_tree_in_path_order_and_skips_what_it_must() {
    for resolver in RESOLVERS {
        let f = Fixture::new(resolver);
        f.put("a.py", "hit = 1\n");
        f.put("a/b.py", "x = 1\nhit()\n");
        f.put("a-b.py", "hit\n");
        f.put("a/c/d.txt", "a hit\n");
        f.put("b/hit.bin", b"hit\0\x01\x02");
        f.put("big.txt", format!("hit\n{}", "x".repeat(1024 * 1024)));
        f.put(".git/config", "hit\n");
        symlink(f.scratch.path().join("outside"), f.path("out")).unwrap();
        symlink(f.path("a.py"), f.path("link.py")).unwrap();
        let found = f.call("search", json!({"pattern": "hit"})).await.unwrap();
        let places: Vec<(String, u64)> = found["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["path"].as_str().unwrap().to_owned(),
                    m["line"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            places,
            [
                ("a-b.py".to_owned(), 1),
                ("a.py".to_owned(), 1),
                ("a/b.py".to_owned(), 2),
                ("a/c/d.txt".to_owned(), 1),
            ]
        );
        assert_eq!(
            (found["total"].clone(), found["truncated"].clone()),
            (json!(4), json!(false))
        );
        assert_eq!(found["matches"][2]["text"], "hit()");
        // Empty optional arguments, as models fill them, are absent ones.
        let empty = f
            .call("search", json!({"pattern": "hit", "path": "", "glob": ""}))
            .await
            .unwrap();
        assert_eq!(empty, found);
        let root = f.call("list_dir", json!({})).await.unwrap();
        assert_eq!(f.call("list_dir", json!({"path": ""})).await.unwrap(), root);

        // A folder, a glob, one file, and nothing outside.
        let python = f
            .call(
                "search",
                json!({"pattern": "hit", "path": "a", "glob": "*.py"}),
            )
            .await
            .unwrap();
        assert_eq!(
            python["matches"],
            json!([{"path": "a/b.py", "line": 2, "text": "hit()"}])
        );
        let one = f
            .call("search", json!({"pattern": "hit", "path": "./a/c/d.txt"}))
            .await
            .unwrap();
        assert_eq!(
            one["matches"],
            json!([{"path": "a/c/d.txt", "line": 1, "text": "a hit"}])
        );
        for path in ["out", "../outside", "link.py"] {
            let refused = f
                .call("search", json!({"pattern": "SECRET|hit", "path": path}))
                .await
                .unwrap_err();
            assert!(
                refused.starts_with("Symbolic links are not permitted")
                    || refused.starts_with("Path is outside the workspace"),
                "{path}: {refused}"
            );
        }
    }
}
