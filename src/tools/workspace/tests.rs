//! The workspace against the real file system: both resolvers, links,
//! special files, and what a write leaves behind.

use super::*;

fn both_resolvers() -> [Resolver; 2] {
    [Resolver::Openat2, Resolver::Walk]
}

fn workspace(resolver: Resolver) -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::open_with(
        dir.path(),
        WorkspaceOptions {
            max_read_bytes: 64,
            resolver: Some(resolver),
        },
    )
    .unwrap();
    (dir, workspace)
}

#[test]
fn this_kernel_offers_openat2() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        Workspace::open(dir.path()).unwrap().resolver(),
        Resolver::Openat2
    );
}

#[test]
fn a_path_ending_in_dot_dot_names_a_directory() {
    for resolver in both_resolvers() {
        let (_dir, ws) = workspace(resolver);
        std::fs::create_dir_all(ws.root().join("a/b")).unwrap();
        assert_eq!(
            ws.read_file("a/b/.."),
            Err(WorkspaceError::IsADirectory("a/b/..".into()))
        );
        // A write names the file it creates in the one form downloads
        // serve: no `..` at all.
        assert!(matches!(
            ws.write_file("a/b/..", b"x"),
            Err(WorkspaceError::InvalidPath { .. })
        ));
        assert_eq!(ws.list_dir("a/b/..").unwrap().len(), 1);
    }
}

#[test]
fn dot_dot_through_a_real_directory_stays_usable() {
    for resolver in both_resolvers() {
        let (_dir, ws) = workspace(resolver);
        std::fs::create_dir(ws.root().join("a")).unwrap();
        ws.write_file("top.txt", b"top").unwrap();
        assert_eq!(ws.read_file("a/../top.txt").unwrap(), "top");
        assert_eq!(
            ws.read_file("missing/../top.txt"),
            Err(WorkspaceError::NotFound("missing/../top.txt".into()))
        );
    }
}

#[test]
fn dot_dot_after_a_symlink_is_refused() {
    for resolver in both_resolvers() {
        let (_dir, ws) = workspace(resolver);
        std::fs::create_dir(ws.root().join("a")).unwrap();
        std::os::unix::fs::symlink("a", ws.root().join("link")).unwrap();
        std::fs::write(ws.root().join("top.txt"), "top").unwrap();
        assert_eq!(
            ws.read_file("link/../top.txt"),
            Err(WorkspaceError::Symlink("link/../top.txt".into()))
        );
    }
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    for resolver in both_resolvers() {
        let (_dir, ws) = workspace(resolver);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            ws.root().join("pipe"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        assert_eq!(
            ws.read_file("pipe"),
            Err(WorkspaceError::NotRegularFile("pipe".into()))
        );
        assert_eq!(
            ws.write_file("pipe", b"x"),
            Err(WorkspaceError::NotRegularFile("pipe".into()))
        );
        assert_eq!(
            ws.list_dir(".").unwrap(),
            vec![DirEntry {
                name: "pipe".into(),
                kind: EntryKind::Other
            }]
        );
    }
}

#[test]
fn an_overwrite_keeps_the_file_mode_and_leaves_no_temporary_file() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, ws) = workspace(Resolver::Openat2);
    let target = ws.root().join("run.sh");
    std::fs::write(&target, "old").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o751)).unwrap();
    ws.write_file("run.sh", b"new").unwrap();
    let mode = std::fs::metadata(&target).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o751);
    let names: Vec<_> = ws
        .list_dir(".")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["run.sh"]);
}

#[test]
fn a_file_that_grew_past_the_limit_is_still_refused() {
    // The limit is checked on the bytes actually read, not only on the
    // size fstat saw; here both see it, which is the common case.
    let (_dir, ws) = workspace(Resolver::Walk);
    std::fs::write(ws.root().join("big"), vec![b'x'; 65]).unwrap();
    assert_eq!(
        ws.read_bytes("big"),
        Err(WorkspaceError::TooLarge {
            path: "big".into(),
            size: 65,
            limit: 64
        })
    );
    std::fs::write(ws.root().join("fits"), vec![b'x'; 64]).unwrap();
    assert_eq!(ws.read_bytes("fits").unwrap().len(), 64);
}
