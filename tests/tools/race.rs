//! A directory component swapped for a symbolic link to the outside, in a
//! tight loop, while reads and writes go through it: none may escape.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agent_runner::tools::{Resolver, Workspace, WorkspaceOptions};
use rustix::fs::{CWD, RenameFlags, renameat_with};

/// Each resolver is attacked at least this long and for at least this many
/// reads and writes, whichever ends later, but never longer than the cap.
const ATTACK_FOR: Duration = Duration::from_millis(1500);
const AT_LEAST: u64 = 3000;
const CAP: Duration = Duration::from_secs(6);

#[derive(Debug, Default)]
struct Counts {
    swaps: u64,
    reads_inside: u64,
    reads_refused: u64,
    reads_outside: u64,
    writes_done: u64,
    writes_refused: u64,
}

fn attack(resolver: Resolver) -> (Counts, Vec<String>, usize) {
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().join("ws");
    let outside = scratch.path().join("outside");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(root.join("sub/secret.txt"), "INSIDE").unwrap();
    std::fs::write(outside.join("secret.txt"), "OUTSIDE").unwrap();
    // The swap partner: a link to the outside directory, exchanged with the
    // real `sub` atomically, so `sub` is always one or the other.
    std::os::unix::fs::symlink(&outside, root.join("swap")).unwrap();

    let workspace = Workspace::open_with(
        &root,
        WorkspaceOptions {
            resolver: Some(resolver),
            ..WorkspaceOptions::default()
        },
    )
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let attacker = {
        let (stop, swaps, root) = (stop.clone(), swaps.clone(), root.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                exchange(&root);
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let mut counts = Counts::default();
    let started = Instant::now();
    let mut i = 0u64;
    while (started.elapsed() < ATTACK_FOR || i < AT_LEAST) && started.elapsed() < CAP {
        match workspace.read_file("sub/secret.txt") {
            Ok(text) if text == "INSIDE" => counts.reads_inside += 1,
            Ok(_) => counts.reads_outside += 1,
            Err(_) => counts.reads_refused += 1,
        }
        match workspace.write_file(&format!("sub/w-{i}.txt"), b"written") {
            Ok(_) => counts.writes_done += 1,
            Err(_) => counts.writes_refused += 1,
        }
        i += 1;
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    counts.swaps = swaps.load(Ordering::Relaxed);

    // Put the real directory back under its name to count what landed in it.
    if std::fs::symlink_metadata(root.join("sub"))
        .unwrap()
        .is_symlink()
    {
        exchange(&root);
    }
    let mut outside_names: Vec<String> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    outside_names.sort();
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "OUTSIDE"
    );
    let inside_written = std::fs::read_dir(root.join("sub"))
        .unwrap()
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("w-")
        })
        .count();
    (counts, outside_names, inside_written)
}

fn exchange(root: &Path) {
    renameat_with(
        CWD,
        root.join("sub"),
        CWD,
        root.join("swap"),
        RenameFlags::EXCHANGE,
    )
    .unwrap();
}

#[test]
fn swapping_a_component_for_a_symlink_never_lets_a_read_or_write_escape() {
    for resolver in [Resolver::Openat2, Resolver::Walk] {
        let (counts, outside_names, inside_written) = attack(resolver);
        println!(
            "race ({resolver:?}): {} swaps; reads: {} inside, {} refused, {} outside; \
             writes: {} done (found inside: {inside_written}), {} refused; \
             files written outside: {}",
            counts.swaps,
            counts.reads_inside,
            counts.reads_refused,
            counts.reads_outside,
            counts.writes_done,
            counts.writes_refused,
            outside_names.len() - 1,
        );
        assert_eq!(counts.reads_outside, 0, "{resolver:?}: a read escaped");
        assert_eq!(
            outside_names,
            ["secret.txt"],
            "{resolver:?}: a write escaped"
        );
        assert_eq!(inside_written as u64, counts.writes_done, "{resolver:?}");
        // The attack really raced: both outcomes happened.
        assert!(counts.swaps > 0, "{resolver:?}: the attacker never ran");
        assert!(counts.reads_inside + counts.writes_done > 0, "{resolver:?}");
        assert!(
            counts.reads_refused + counts.writes_refused > 0,
            "{resolver:?}"
        );
    }
}
