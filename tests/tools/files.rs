//! The file tools as a model meets them: JSON arguments in, JSON or a
//! recoverable error out, against real directories.

use std::os::unix::fs::symlink;
use std::sync::Arc;

use agent_runner::harness::Tool;
use agent_runner::tools::{
    ListDir, ReadFile, Resolver, RunWorkspace, Workspace, WorkspaceOptions, WriteFile,
};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// A workspace inside a scratch directory that also holds an `outside/`
/// directory with a secret, so escapes have something to find.
struct Fixture {
    scratch: TempDir,
    workspace: Arc<Workspace>,
}

impl Fixture {
    fn new(resolver: Resolver) -> Self {
        let scratch = tempfile::tempdir().unwrap();
        std::fs::create_dir(scratch.path().join("ws")).unwrap();
        std::fs::create_dir(scratch.path().join("outside")).unwrap();
        std::fs::write(scratch.path().join("outside/secret.txt"), "OUTSIDE").unwrap();
        let workspace = Workspace::open_with(
            scratch.path().join("ws"),
            WorkspaceOptions {
                max_read_bytes: 1024,
                resolver: Some(resolver),
            },
        )
        .unwrap();
        Self {
            scratch,
            workspace: Arc::new(workspace),
        }
    }

    fn ws(&self, relative: &str) -> std::path::PathBuf {
        self.workspace.root().join(relative)
    }

    fn run_workspace(&self) -> Arc<RunWorkspace> {
        Arc::new(RunWorkspace::from(Arc::clone(&self.workspace)))
    }

    fn outside(&self) -> std::path::PathBuf {
        self.scratch.path().join("outside")
    }

    async fn read(&self, path: &str) -> Result<Value, String> {
        call(ReadFile::new(self.run_workspace()), json!({ "path": path })).await
    }

    async fn write(&self, path: &str, content: &str) -> Result<Value, String> {
        let tool = WriteFile::new(self.run_workspace());
        call(tool, json!({ "path": path, "content": content })).await
    }

    async fn list(&self, arguments: Value) -> Result<Value, String> {
        call(ListDir::new(self.run_workspace()), arguments).await
    }

    fn outside_names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.outside())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

async fn call(tool: impl Tool, arguments: Value) -> Result<Value, String> {
    tool.execute(&arguments, &CancellationToken::new())
        .await
        .map_err(|error| error.message().to_owned())
}

const RESOLVERS: [Resolver; 2] = [Resolver::Openat2, Resolver::Walk];

fn starts_with(result: Result<Value, String>, prefix: &str) -> bool {
    matches!(&result, Err(message) if message.starts_with(prefix))
}

#[tokio::test]
async fn files_are_written_read_overwritten_and_listed() {
    for resolver in RESOLVERS {
        let f = Fixture::new(resolver);
        assert_eq!(
            f.write("notes.txt", "héllo\n").await,
            Ok(json!({"path": "notes.txt", "bytes_written": 7}))
        );
        assert_eq!(f.read("notes.txt").await, Ok(json!("héllo\n")));
        assert_eq!(
            f.write("notes.txt", "second").await,
            Ok(json!({"path": "notes.txt", "bytes_written": 6}))
        );
        assert_eq!(f.read("./notes.txt").await, Ok(json!("second")));

        std::fs::create_dir(f.ws("src")).unwrap();
        f.write("src/lib.rs", "pub fn f() {}").await.unwrap();
        symlink("notes.txt", f.ws("link")).unwrap();
        let expected = json!({"entries": [
            {"name": "link", "kind": "symlink"},
            {"name": "notes.txt", "kind": "file"},
            {"name": "src", "kind": "dir"},
        ]});
        assert_eq!(f.list(json!({})).await, Ok(expected.clone()));
        assert_eq!(f.list(json!({"path": "."})).await, Ok(expected));
        assert_eq!(
            f.list(json!({"path": "src"})).await,
            Ok(json!({"entries": [{"name": "lib.rs", "kind": "file"}]}))
        );
        assert_eq!(
            f.list(json!({"path": "src/"})).await.unwrap()["entries"][0]["name"],
            "lib.rs"
        );
    }
}

#[tokio::test]
async fn escapes_absolute_paths_empty_paths_and_the_root_are_refused() {
    for resolver in RESOLVERS {
        let f = Fixture::new(resolver);
        std::fs::create_dir(f.ws("a")).unwrap();
        for path in [
            "../x",
            "a/../../x",
            "/etc/passwd",
            "..",
            "../outside/secret.txt",
        ] {
            assert!(
                starts_with(f.read(path).await, "Path is outside the workspace"),
                "read {path}"
            );
            assert!(
                starts_with(f.write(path, "x").await, "Path is outside the workspace"),
                "write {path}"
            );
            assert!(
                starts_with(
                    f.list(json!({ "path": path })).await,
                    "Path is outside the workspace"
                ),
                "list {path}"
            );
        }
        for root in [".", "./", "a/.."] {
            assert!(starts_with(
                f.read(root).await,
                "Path is the workspace root"
            ));
            assert!(starts_with(
                f.write(root, "x").await,
                "Path is the workspace root"
            ));
        }
        assert!(starts_with(f.read("").await, "Path is empty"));
        assert!(starts_with(f.write("", "x").await, "Path is empty"));
        assert_eq!(f.outside_names(), ["secret.txt"]);
    }
}

#[tokio::test]
async fn a_symlink_in_any_component_is_refused_wherever_it_points() {
    for resolver in RESOLVERS {
        let f = Fixture::new(resolver);
        std::fs::create_dir(f.ws("dir")).unwrap();
        std::fs::write(f.ws("dir/inside.txt"), "INSIDE").unwrap();
        symlink("dir/inside.txt", f.ws("last_in")).unwrap();
        symlink(f.outside().join("secret.txt"), f.ws("last_out")).unwrap();
        symlink("dir", f.ws("mid_in")).unwrap();
        symlink(f.outside(), f.ws("mid_out")).unwrap();
        symlink("../outside", f.ws("mid_rel_out")).unwrap();

        let cases = [
            ("last_in", "last component, inside"),
            ("last_out", "last component, outside"),
            ("mid_in/inside.txt", "middle component, inside"),
            ("mid_out/secret.txt", "middle component, outside"),
            (
                "mid_rel_out/secret.txt",
                "middle component, relative, outside",
            ),
        ];
        for (path, case) in cases {
            let refused = format!("Symbolic links are not permitted: {path}");
            assert_eq!(f.read(path).await, Err(refused.clone()), "read: {case}");
            assert_eq!(f.write(path, "x").await, Err(refused), "write: {case}");
        }
        for path in ["mid_in", "mid_out", "mid_out/"] {
            assert!(
                starts_with(
                    f.list(json!({ "path": path })).await,
                    "Symbolic links are not permitted"
                ),
                "list {path}"
            );
        }
        assert!(starts_with(
            f.write("mid_in/new.txt", "x").await,
            "Symbolic links are not permitted"
        ));
        // Nothing moved: the links are links, the targets untouched.
        assert_eq!(
            std::fs::read_to_string(f.ws("dir/inside.txt")).unwrap(),
            "INSIDE"
        );
        assert!(
            std::fs::symlink_metadata(f.ws("last_in"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(f.outside_names(), ["secret.txt"]);
        assert_eq!(
            std::fs::read_to_string(f.outside().join("secret.txt")).unwrap(),
            "OUTSIDE"
        );
    }
}

#[tokio::test]
async fn a_write_needs_an_existing_parent_directory() {
    for resolver in RESOLVERS {
        let f = Fixture::new(resolver);
        assert_eq!(
            f.write("missing/new.txt", "x").await,
            Err("Parent directory does not exist: missing/new.txt \
                 (write_file does not create directories)"
                .into())
        );
        assert!(!f.ws("missing").exists());
        std::fs::write(f.ws("file"), "x").unwrap();
        assert!(starts_with(
            f.write("file/new.txt", "x").await,
            "Not a directory"
        ));
        std::fs::create_dir(f.ws("dir")).unwrap();
        assert!(starts_with(f.write("dir", "x").await, "Is a directory"));
        assert!(starts_with(f.read("dir").await, "Is a directory"));
        assert!(starts_with(
            f.read("nope.txt").await,
            "No such file or directory"
        ));
        assert!(starts_with(
            f.list(json!({"path": "nope"})).await,
            "No such file or directory"
        ));
        assert!(starts_with(
            f.list(json!({"path": "file"})).await,
            "Not a directory"
        ));
    }
}

#[tokio::test]
async fn reads_are_bounded_and_binary_content_is_refused() {
    for resolver in RESOLVERS {
        let f = Fixture::new(resolver);
        std::fs::write(f.ws("big.txt"), "x".repeat(1025)).unwrap();
        assert_eq!(
            f.read("big.txt").await,
            Err("File is too large: big.txt is 1025 bytes, the limit is 1024 bytes".into())
        );
        std::fs::write(f.ws("exact.txt"), "x".repeat(1024)).unwrap();
        assert_eq!(
            f.read("exact.txt").await.unwrap().as_str().unwrap().len(),
            1024
        );

        std::fs::write(f.ws("blob.bin"), [0x89, b'P', b'N', b'G', 0xff, 0xfe, 0]).unwrap();
        assert_eq!(
            f.read("blob.bin").await,
            Err("File is not UTF-8 text: blob.bin (read_file only returns text)".into())
        );
    }
}

#[test]
fn the_default_read_limit_is_one_mebibyte() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::open(dir.path()).unwrap();
    assert_eq!(workspace.max_read_bytes(), 1024 * 1024);
    std::fs::write(dir.path().join("big"), vec![b'a'; 1024 * 1024 + 1]).unwrap();
    assert!(workspace.read_bytes("big").is_err());
    std::fs::write(dir.path().join("fits"), vec![b'a'; 1024 * 1024]).unwrap();
    assert_eq!(workspace.read_bytes("fits").unwrap().len(), 1024 * 1024);
}

#[test]
fn seeding_creates_parent_directories_but_stays_confined() {
    for resolver in RESOLVERS {
        let f = Fixture::new(resolver);
        let ws = &f.workspace;
        assert_eq!(ws.write_seed("src/deep/lib.rs", b"pub fn f() {}"), Ok(13));
        assert_eq!(ws.write_seed("README.md", b"hi"), Ok(2));
        assert_eq!(ws.read_file("src/deep/lib.rs").unwrap(), "pub fn f() {}");

        symlink(f.outside(), f.ws("out")).unwrap();
        let refused = ws.write_seed("out/planted.txt", b"x").unwrap_err();
        assert!(
            refused
                .to_string()
                .starts_with("Symbolic links are not permitted")
        );
        let refused = ws.write_seed("../planted.txt", b"x").unwrap_err();
        assert!(
            refused
                .to_string()
                .starts_with("Path is outside the workspace")
        );
        assert_eq!(f.outside_names(), ["secret.txt"]);

        let listing = ws.list_files(10).unwrap();
        let files: Vec<(String, u64)> = listing
            .files
            .into_iter()
            .map(|file| (file.path, file.size))
            .collect();
        assert_eq!(
            files,
            [
                ("README.md".to_owned(), 2),
                ("src/deep/lib.rs".to_owned(), 13)
            ]
        );
        assert!(!listing.truncated);
        // Capped: the first by path, and a flag that there are more.
        let first = ws.list_files(1).unwrap();
        assert_eq!(first.files.len(), 1);
        assert_eq!(first.files[0].path, "README.md");
        assert!(first.truncated);
        assert_eq!(ws.read_bytes("README.md").unwrap(), b"hi");
        assert!(ws.read_bytes("out/secret.txt").is_err());
    }
}

#[tokio::test]
async fn a_write_creates_only_names_the_download_route_serves() {
    let f = Fixture::new(Resolver::Openat2);
    std::fs::create_dir(f.ws("a")).unwrap();
    for path in ["a\\b", "x/", "a//b", "a/./b", "a/../b"] {
        assert!(
            starts_with(f.write(path, "x").await, "Invalid path"),
            "write {path}"
        );
    }
    assert!(f.write("a/b.txt", "x").await.is_ok());
    assert_eq!(std::fs::read_to_string(f.ws("a/b.txt")).unwrap(), "x");
    assert!(!f.ws("a\\b").exists() && !f.ws("b").exists() && !f.ws("x").exists());
}
