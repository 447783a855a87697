//! DELETE cancels queued and running runs promptly; the queue limit answers
//! 429.

use std::time::{Duration, Instant};

use agent_runner::tools::CommandPreset;
use serde_json::json;

use crate::helpers::*;

fn slow(ms: u64) -> serde_json::Value {
    json!({"prompt": "slow", "model": {"scripted": [{"delay_ms": ms, "content": "late"}]}})
}

#[tokio::test]
async fn a_run_waiting_on_its_model_is_cancelled_promptly() {
    let app = spawn_app().await;
    let run = app.create_run(slow(30_000)).await;
    let id = run["id"].as_str().unwrap();
    app.wait_status(id, "running").await;
    let started = Instant::now();
    let reply = app.delete(&format!("/v1/runs/{id}")).await;
    assert_eq!(reply.status, 202, "{}", reply.text);
    assert_eq!(reply.body["id"], id);
    let done = app.wait_terminal(id).await;
    // Well under the model's 30 s: the call was dropped, not waited for
    // (a bound near the expected time would fail on a loaded machine).
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(done["status"], "aborted");
    let events = app.events(id).await;
    assert_eq!(events.last().unwrap().event, "run_end");
    assert_eq!(events.last().unwrap().data["status"], "aborted");
    // Cancelling again: it is over.
    let again = app.delete(&format!("/v1/runs/{id}")).await;
    assert_eq!(again.status, 409);
    assert_eq!(again.error_code(), "run_not_live");
}

/// Whether a process with exactly this command line is alive.
fn process_alive(cmdline: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " ").trim() == cmdline)
            .unwrap_or(false)
    })
}

#[tokio::test]
async fn a_run_in_a_command_is_cancelled_and_the_command_killed() {
    let app = spawn_with(|config| {
        config.commands.insert(
            "nap".into(),
            toml::from_str::<CommandPreset>("program = \"sleep\"\nargs = [\"41.5\"]").unwrap(),
        );
    })
    .await;
    let run = app
        .create_run(json!({
            "prompt": "nap",
            "commands": ["nap"],
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("c1", "run_command", json!({"command": "nap"}))]},
                {"content": "rested"}
            ]}
        }))
        .await;
    let id = run["id"].as_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !process_alive("sleep 41.5") {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    assert_eq!(app.delete(&format!("/v1/runs/{id}")).await.status, 202);
    let done = app.wait_terminal(id).await;
    // Well under the command's 41.5 s: it was killed, not waited for.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(done["status"], "aborted");
    assert!(!process_alive("sleep 41.5"), "the command was killed");
}

#[tokio::test]
async fn a_queued_run_is_cancelled_and_the_full_queue_answers_429() {
    let app = spawn_with(|config| {
        config.runs.max_concurrent = 1;
        config.runs.max_queued = 1;
    })
    .await;
    let running = app.create_run(slow(30_000)).await;
    let running = running["id"].as_str().unwrap();
    app.wait_status(running, "running").await;
    let queued = app.create_run(slow(10)).await;
    let queued = queued["id"].as_str().unwrap();
    assert_eq!(queued_status(&app, queued).await, "queued");

    let refused = app.post_run(slow(10)).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.error_code(), "queue_full");
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(
        app.get("/v1/runs").await.body["runs"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "nothing created"
    );

    assert_eq!(app.delete(&format!("/v1/runs/{queued}")).await.status, 202);
    let done = app.wait_terminal(queued).await;
    assert_eq!(done["status"], "aborted");
    assert_eq!(done["started_at"], serde_json::Value::Null);
    assert_eq!(types(&app.events(queued).await), ["run_end"]);

    assert_eq!(app.delete(&format!("/v1/runs/{running}")).await.status, 202);
    assert_eq!(app.wait_terminal(running).await["status"], "aborted");
    // Room again.
    assert_eq!(app.post_run(slow(10)).await.status, 201);
}

async fn queued_status(app: &TestApp, id: &str) -> String {
    app.get(&format!("/v1/runs/{id}")).await.body["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn cancelling_an_unknown_run_is_404() {
    let app = spawn_app().await;
    let reply = app
        .delete("/v1/runs/0190a8c4-1234-7000-8000-000000000000")
        .await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.error_code(), "not_found");
    assert_eq!(app.delete("/v1/runs/not-a-uuid").await.status, 404);
}

#[tokio::test]
async fn post_cancel_is_idempotent_where_delete_is_a_conflict() {
    let app = spawn_app().await;
    let run = app.create_run(slow(30_000)).await;
    let id = run["id"].as_str().unwrap();
    app.wait_status(id, "running").await;
    let cancel = || app.send(app.request(reqwest::Method::POST, &format!("/v1/runs/{id}/cancel")));
    let first = cancel().await;
    assert_eq!(first.status, 202, "{}", first.text);
    assert_eq!(first.body["id"], id);
    let done = app.wait_terminal(id).await;
    assert_eq!(done["status"], "aborted");
    // Again, and again: its final state, 200, nothing changed.
    for _ in 0..2 {
        let again = cancel().await;
        assert_eq!(again.status, 200, "{}", again.text);
        assert_eq!(again.body, done);
    }
    assert_eq!(app.delete(&format!("/v1/runs/{id}")).await.status, 409);
    // A completed run is answered as it ended, not aborted.
    let completed = app.run_to_end(json!({"prompt": "hi"})).await;
    let other = completed["id"].as_str().unwrap();
    let answered = app
        .send(app.request(reqwest::Method::POST, &format!("/v1/runs/{other}/cancel")))
        .await;
    assert_eq!(answered.status, 200);
    assert_eq!(answered.body["status"], "completed");
    let missing = app
        .send(app.request(
            reqwest::Method::POST,
            &format!("/v1/runs/{}/cancel", uuid::Uuid::now_v7()),
        ))
        .await;
    assert_eq!(missing.status, 404);
}
