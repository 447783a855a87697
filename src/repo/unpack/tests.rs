use std::fs;
use std::io::Write;

use super::*;

/// A tar entry written byte by byte, so that it can say what a well-behaved
/// writer would refuse to (`..`, absolute names).
fn raw_entry(
    builder: &mut tar::Builder<impl Write>,
    name: &str,
    kind: tar::EntryType,
    link: &str,
    data: &[u8],
) {
    let mut header = tar::Header::new_gnu();
    {
        let old = header.as_old_mut();
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        old.linkname[..link.len()].copy_from_slice(link.as_bytes());
    }
    header.set_entry_type(kind);
    header.set_mode(0o644);
    header.set_size(data.len() as u64);
    header.set_cksum();
    builder.append(&header, data).unwrap();
}

fn tar_gz(path: &Path, entries: &[(&str, tar::EntryType, &str, &[u8])]) {
    let file = fs::File::create(path).unwrap();
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        file,
        flate2::Compression::fast(),
    ));
    for (name, kind, link, data) in entries {
        raw_entry(&mut builder, name, *kind, link, data);
    }
    builder.into_inner().unwrap().finish().unwrap();
}

fn unpacked(
    entries: &[(&str, tar::EntryType, &str, &[u8])],
) -> (tempfile::TempDir, Result<Unpacked, UnpackError>) {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.tar.gz");
    tar_gz(&archive, entries);
    let into = dir.path().join("tree");
    fs::create_dir(&into).unwrap();
    let result = unpack(&archive, Format::TarGz, &into, 1 << 20);
    (dir, result)
}

use tar::EntryType::{Directory, Regular, Symlink};

#[test]
fn a_well_formed_archive_is_unpacked_with_its_links_and_modes() {
    let (dir, result) = unpacked(&[
        ("./", Directory, "", b""),
        ("./src/", Directory, "", b""),
        ("./src/app.py", Regular, "", b"print('hi')\n"),
        ("README.md", Regular, "", b"# r\n"),
        ("src/alias.py", Symlink, "app.py", b""),
        ("docs/up", Symlink, "../README.md", b""),
    ]);
    let done = result.unwrap();
    assert_eq!(
        done,
        Unpacked {
            files: 2,
            bytes: 16
        }
    );
    let tree = dir.path().join("tree");
    assert_eq!(
        fs::read_to_string(tree.join("src/app.py")).unwrap(),
        "print('hi')\n"
    );
    assert_eq!(
        fs::read_link(tree.join("docs/up")).unwrap(),
        Path::new("../README.md")
    );
}

#[test]
fn an_entry_that_would_escape_refuses_the_whole_archive() {
    for (why, entries) in [
        (
            "dot-dot",
            vec![
                ("ok.txt", Regular, "", &b"x"[..]),
                ("../evil.txt", Regular, "", b"x"),
            ],
        ),
        ("absolute", vec![("/tmp/evil.txt", Regular, "", &b"x"[..])]),
        (
            "nested dot-dot",
            vec![("a/../../evil", Regular, "", &b"x"[..])],
        ),
        ("link out", vec![("l", Symlink, "../../etc", &b""[..])]),
        (
            "absolute link",
            vec![("l", Symlink, "/etc/passwd", &b""[..])],
        ),
        (
            "through a link",
            vec![("l", Symlink, ".", &b""[..]), ("l/x", Regular, "", b"x")],
        ),
    ] {
        let (dir, result) = unpacked(&entries);
        match result {
            Err(UnpackError::Refused(message)) => assert!(!message.is_empty(), "{why}"),
            other => panic!("{why}: {other:?}"),
        }
        assert!(!dir.path().join("evil.txt").exists(), "{why}");
    }
}

#[test]
fn an_archive_unpacking_past_the_ceiling_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.tar.gz");
    let big = vec![b'a'; 4096];
    tar_gz(
        &archive,
        &[("a", Regular, "", &big), ("b", Regular, "", &big)],
    );
    let into = dir.path().join("tree");
    fs::create_dir(&into).unwrap();
    let result = unpack(&archive, Format::TarGz, &into, 6000);
    assert!(matches!(result, Err(UnpackError::Refused(m)) if m.contains("max_unpacked_bytes")));
}

#[test]
fn zip_archives_are_checked_alike() {
    let dir = tempfile::tempdir().unwrap();
    let write_zip = |name: &str, entries: &[(&str, &[u8])]| {
        let path = dir.path().join(name);
        let mut zip = zip::ZipWriter::new(fs::File::create(&path).unwrap());
        for (entry, data) in entries {
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated)
                .unix_permissions(0o755);
            zip.start_file(*entry, options).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap();
        path
    };
    let good = write_zip(
        "good.zip",
        &[("src/run.sh", b"#!/bin/sh\n"), ("b.txt", b"b")],
    );
    let into = dir.path().join("good");
    fs::create_dir(&into).unwrap();
    assert_eq!(unpack(&good, Format::Zip, &into, 1 << 20).unwrap().files, 2);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(into.join("src/run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o111,
        0o111
    );
    let bad = write_zip("bad.zip", &[("ok.txt", b"x"), ("../evil", b"x")]);
    let into = dir.path().join("bad");
    fs::create_dir(&into).unwrap();
    assert!(matches!(
        unpack(&bad, Format::Zip, &into, 1 << 20),
        Err(UnpackError::Refused(_))
    ));
    let not_zip = dir.path().join("not.zip");
    fs::write(&not_zip, b"hello").unwrap();
    assert!(matches!(
        unpack(&not_zip, Format::Zip, &into, 1 << 20),
        Err(UnpackError::Refused(_))
    ));
}

#[test]
fn links_that_leave_through_other_links_and_oversized_headers_are_refused() {
    let (_dir, result) = unpacked(&[
        ("a/b", Symlink, "..", b""),
        ("c", Symlink, "a/b/a/b/../../../etc", b""),
    ]);
    assert!(matches!(result, Err(UnpackError::Refused(m)) if m.contains("out of the tree")));
    // Inside, through a link: kept.
    let (_dir, result) = unpacked(&[("a/b", Symlink, "..", b""), ("c", Symlink, "a/b/a", b"")]);
    assert!(result.is_ok(), "{result:?}");
    // A long name the tar crate would read whole: bounded.
    let big = vec![b'x'; 70 * 1024];
    let (_dir, result) = unpacked(&[("././@LongLink", tar::EntryType::GNULongName, "", &big)]);
    assert!(matches!(result, Err(UnpackError::Refused(m)) if m.contains("GNULongName")));
    // A long name within the bound names the entry after it.
    let name = format!("{}/f.txt", "d".repeat(150));
    let mut data = name.clone().into_bytes();
    data.push(0);
    let (dir, result) = unpacked(&[
        ("././@LongLink", tar::EntryType::GNULongName, "", &data),
        ("short", Regular, "", b"long\n"),
    ]);
    assert_eq!(result.unwrap().files, 1);
    assert_eq!(
        fs::read_to_string(dir.path().join("tree").join(&name)).unwrap(),
        "long\n"
    );
}
