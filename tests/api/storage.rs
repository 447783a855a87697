//! A real full disk: the database and the workspaces on a small tmpfs that
//! the test fills while runs go on, then frees, then restarts the server on.
//! What a client was told must be what storage says: nothing live is lost,
//! no run stays live, none runs twice, every event log is one gap-free
//! sequence.
//!
//! Mounting needs root (CI runs as root); elsewhere the test says so and
//! passes without running.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::helpers::{TestApp, call, spawn_in, test_config};

/// A tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: TempDir,
}

impl SmallDisk {
    fn mount(megabytes: u32) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|status| status.success());
        mounted.then_some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file until the disk refuses more.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path().join("filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while file.write_all(&chunk).is_ok() {}
        // Then byte by byte, so that not even a small write fits.
        while file.write_all(&[0]).is_ok() {}
        let _ = file.flush();
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn config_on(disk: &SmallDisk, holder: &TempDir) -> agent_runner::config::Config {
    let mut config = test_config(holder);
    config.storage.database_url = format!("sqlite://{}/runs.db", disk.path().display());
    config.storage.workspaces_dir = disk.path().join("workspaces");
    config.storage.write_retry_ms = 1_500;
    config
}

/// A run that keeps going for a while: `steps` tool calls, each after a
/// pause, each result a few KiB, so its records need room as it goes.
fn long_run(steps: usize, pause_ms: u64) -> Value {
    let mut script: Vec<Value> = (0..steps)
        .map(|i| {
            json!({"delay_ms": pause_ms, "content": "x".repeat(4000),
                   "tool_calls": [call(&format!("c{i}"), "list_dir", json!({}))]})
        })
        .collect();
    script.push(json!({"content": "y".repeat(20_000)}));
    json!({
        "prompt": "keep going",
        "limits": {"max_steps": steps + 1, "max_tool_calls": steps, "timeout_ms": 120000},
        "model": {"scripted": script}
    })
}

/// Every stored event of a run: its sequences, and how many `run_start`.
async fn stored_events(app: &TestApp, id: &str) -> (Vec<u64>, usize) {
    let (events, _) = app.events_from(id, None).await;
    let sequences = events.iter().filter_map(|e| e.id).collect();
    let starts = events.iter().filter(|e| e.event == "run_start").count();
    (sequences, starts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_loses_nothing_a_client_was_told_and_runs_nothing_twice() {
    let Some(disk) = SmallDisk::mount(16) else {
        eprintln!("skipped: mounting a tmpfs is not permitted here (the test needs root)");
        return;
    };
    let holder = tempfile::tempdir().unwrap();
    let app = spawn_in(tempfile::tempdir().unwrap(), config_on(&disk, &holder)).await;
    let warm = app
        .run_to_end(json!({"prompt": "hi", "model": {"scripted": [{"content": "fine"}]}}))
        .await;
    assert_eq!(warm["status"], "completed");

    // Two runs in flight as the disk fills: a short one that finishes while
    // storage refuses its records, and a long one still going when
    // write_retry_ms runs out.
    let short = app.create_run(long_run(3, 400)).await;
    let long = app.create_run(long_run(40, 250)).await;
    let short_id = short["id"].as_str().unwrap().to_owned();
    let long_id = long["id"].as_str().unwrap().to_owned();
    app.wait_status(&long_id, "running").await;
    let filler = disk.fill();

    // While storage refuses writes: not ready, no new run (and never a 422),
    // nothing of a refused run left behind.
    let mut refused_ready = false;
    for _ in 0..200 {
        if app.get("/readyz").await.status == 503 {
            refused_ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(refused_ready, "/readyz kept saying ready on a full disk");
    let refused = app
        .post_run(json!({"prompt": "more", "workspace": {"files": {"a.txt": "z".repeat(100_000)}}}))
        .await;
    assert!(
        matches!(refused.status.as_u16(), 503 | 507),
        "{} {}",
        refused.status,
        refused.text
    );
    let listed: Vec<String> = app.get("/v1/runs?limit=100").await.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed.len(), 3, "{listed:?}");
    // Workspaces are made on a run's first write (or its seeding): whatever
    // is there belongs to a listed run, or is the shared empty one.
    let leftovers: Vec<String> = std::fs::read_dir(disk.path().join("workspaces"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".empty" && !listed.contains(name))
        .collect();
    assert_eq!(leftovers, Vec::<String>::new());

    // Past write_retry_ms, the long run is stopped; neither run is reported
    // ended while its end is unstored. Both have ended in memory once their
    // tasks counted them (the short one completed, the long one failed).
    app.wait_metrics(&[
        "agent_runner_runs_finished_total{status=\"completed\"} 2",
        "agent_runner_runs_finished_total{status=\"failed\"} 1",
    ])
    .await;
    for id in [&short_id, &long_id] {
        let run = app.get(&format!("/v1/runs/{id}")).await.body;
        assert_eq!(run["status"], "running", "{run}");
    }

    // Storage comes back: everything held is written.
    std::fs::remove_file(&filler).unwrap();
    let short = app.wait_terminal(&short_id).await;
    let long = app.wait_terminal(&long_id).await;
    assert_eq!(short["status"], "completed", "{short}");
    assert_eq!(long["status"], "failed", "{long}");
    assert!(
        long["error"].as_str().unwrap().contains("Storage refused"),
        "{long}"
    );
    assert_eq!(app.get("/readyz").await.status, 200);
    let mut logs = Vec::new();
    for id in [&short_id, &long_id] {
        let (sequences, starts) = stored_events(&app, id).await;
        assert_eq!(
            sequences,
            (1..=sequences.len() as u64).collect::<Vec<_>>(),
            "a gap in {id}"
        );
        assert_eq!(starts, 1);
        let messages = app.messages(id).await;
        let events = app.events(id).await;
        let announced = events.iter().filter(|e| e.event == "message").count();
        assert_eq!(
            messages.len(),
            announced,
            "every announced message is stored"
        );
        logs.push(sequences.len());
    }
    let after = app
        .run_to_end(json!({"prompt": "again", "model": {"scripted": [{"content": "back"}]}}))
        .await;
    assert_eq!(after["status"], "completed");

    // A restart finds nothing live, and runs nothing again.
    let dir = app.stop().await;
    let app = spawn_in(dir, config_on(&disk, &holder)).await;
    for (id, count) in [&short_id, &long_id].into_iter().zip(logs) {
        let run = app.get(&format!("/v1/runs/{id}")).await.body;
        assert!(
            matches!(run["status"].as_str(), Some("completed" | "failed")),
            "{run}"
        );
        let (sequences, starts) = stored_events(&app, id).await;
        assert_eq!(
            (sequences.len(), starts),
            (count, 1),
            "{id} changed after the restart"
        );
    }
    let live = app.get("/v1/runs?status=running").await.body;
    assert_eq!(live["runs"], json!([]));
    let queued = app.get("/v1/runs?status=queued").await.body;
    assert_eq!(queued["runs"], json!([]));
}

#[tokio::test]
async fn a_full_disk_while_a_workspace_is_seeded_is_a_507_and_leaves_nothing() {
    let Some(disk) = SmallDisk::mount(4) else {
        eprintln!("skipped: mounting a tmpfs is not permitted here (the test needs root)");
        return;
    };
    let holder = tempfile::tempdir().unwrap();
    let app = spawn_in(tempfile::tempdir().unwrap(), config_on(&disk, &holder)).await;
    let _filler = disk.fill();
    let reply = app
        .post_run(
            json!({"prompt": "seed", "workspace": {"files": {"big.txt": "b".repeat(200_000)}}}),
        )
        .await;
    assert_eq!(reply.status, 507, "{}", reply.text);
    assert_eq!(reply.error_code(), "insufficient_storage");
    assert_eq!(app.get("/v1/runs").await.body["runs"], json!([]));
    assert_eq!(
        std::fs::read_dir(disk.path().join("workspaces"))
            .unwrap()
            .count(),
        0
    );
}
