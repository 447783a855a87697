//! Durability and lifecycle: graceful stops, restarts, and recovery after the
//! process is killed.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::*;

fn slow(ms: u64) -> serde_json::Value {
    json!({"prompt": "slow", "model": {"scripted": [{"delay_ms": ms, "content": "late"}]}})
}

#[tokio::test]
async fn a_graceful_stop_hands_running_runs_over_and_a_restart_resumes_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    config.runs.max_concurrent = 1;
    config.runs.shutdown_grace_ms = 300;
    let app = spawn_in(dir, config.clone()).await;

    let finished = app
        .run_to_end(two_step("list_dir", json!({}), "done"))
        .await;
    let finished_id = finished["id"].as_str().unwrap().to_owned();
    let finished_events = app.events(&finished_id).await;
    // Its second model call outlasts the grace.
    let running = app
        .create_run(json!({"prompt": "two steps", "model": {"scripted": [
            {"content": "", "tool_calls": [call("l", "list_dir", json!({}))]},
            {"delay_ms": 1500, "content": "late"}
        ]}}))
        .await;
    let running_id = running["id"].as_str().unwrap().to_owned();
    let queued = app
        .create_run(json!({"prompt": "later", "model": {"scripted": [{"content": "resumed"}]}}))
        .await;
    let queued_id = queued["id"].as_str().unwrap().to_owned();
    assert_eq!(
        app.get(&format!("/v1/runs/{queued_id}")).await.body["status"],
        "queued"
    );
    let mut following = app.follow(&running_id).await;
    following.until("tool_end").await;
    following.until("model_start").await;

    let started = Instant::now();
    let dir = app.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    let app = spawn_in(dir, config).await;
    // Nothing of the finished run was lost.
    assert_eq!(
        app.get(&format!("/v1/runs/{finished_id}")).await.body,
        finished
    );
    assert_eq!(app.events(&finished_id).await, finished_events);
    // The handed-over run goes on from its stored step and completes.
    let resumed = app.wait_terminal(&running_id).await;
    assert_eq!(resumed["status"], "completed", "{resumed}");
    assert_eq!(resumed["answer"], "late");
    assert_eq!(resumed["resumes"], 1);
    assert_eq!(resumed["steps"], 2);
    let events = app.events(&running_id).await;
    assert_gap_free(&events);
    let kinds = types(&events);
    for kind in ["run_start", "run_resumed", "run_end"] {
        assert_eq!(kinds.iter().filter(|k| **k == kind).count(), 1, "{kinds:?}");
    }
    let handed = events.iter().find(|e| e.event == "run_resumed").unwrap();
    assert_eq!(handed.data["reason"], "shutdown");
    // The queued run starts again and completes.
    let queued = app.wait_terminal(&queued_id).await;
    assert_eq!(queued["status"], "completed");
    assert_eq!(queued["answer"], "resumed");
}

#[tokio::test]
async fn a_stopping_server_takes_no_new_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    config.runs.shutdown_grace_ms = 1_500;
    let mut app = spawn_in(dir, config).await;
    let running = app.create_run(slow(1_000)).await;
    let id = running["id"].as_str().unwrap().to_owned();
    app.wait_status(&id, "running").await;
    let mut following = app.follow(&id).await;
    following.until("model_start").await;
    let follower = tokio::spawn(following.rest());
    app.begin_stop();
    // Stopping, once it says so: not ready, and no new run.
    eventually("the server to say it is stopping", async || {
        let ready = app.get("/readyz").await;
        (ready.status == 503).then(|| assert_eq!(ready.error_code(), "shutting_down"))
    })
    .await;
    let refused = app.post_run(json!({"prompt": "too late"})).await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.error_code(), "shutting_down");
    // The running run gets its grace and completes; then the server stops.
    let events = follower.await.unwrap();
    assert_eq!(events.last().unwrap().data["status"], "completed");
    let dir = app.stop().await;
    let mut config = test_config(&dir);
    config.runs.shutdown_grace_ms = 1_500;
    let app = spawn_in(dir, config).await;
    assert_eq!(
        app.get(&format!("/v1/runs/{id}")).await.body["status"],
        "completed"
    );
    assert_eq!(
        app.get("/v1/runs").await.body["runs"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "the refused run was not created"
    );
}

#[tokio::test]
async fn a_killed_server_leaves_its_unresumable_runs_interrupted_and_loses_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, address) = start_binary(&dir);
    let server = Remote::new(address);
    let finished = server
        .post_json(
            "/v1/runs?wait=true",
            &two_step("list_dir", json!({}), "done"),
        )
        .await;
    assert_eq!(finished["status"], "completed");
    let running = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "mid-run",
                // Resumes are off: it ends as runs did before they resumed
                // (durable.rs tests the resume).
                "limits": {"max_resumes": 0},
                "model": {"scripted": [
                    {"content": "", "tool_calls": [call("c1", "list_dir", json!({}))]},
                    {"delay_ms": 60000, "content": "never"}
                ]}
            }),
        )
        .await;
    let running_id = running["id"].as_str().unwrap().to_owned();
    // Wait until the first step is stored, so there is something to keep.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let messages = server
            .get_json(&format!("/v1/runs/{running_id}/messages"))
            .await;
        if messages["messages"].as_array().unwrap().len() == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "the first step never got stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let (mut child, address) = start_binary(&dir);
    let server = Remote::new(address);
    // At once on SQLite; on PostgreSQL once the dead server's lease ran out.
    let run = server.wait_status(&running_id, "interrupted").await;
    assert_eq!(run["steps"], 1, "counts are those of its last stored step");
    let messages = server
        .get_json(&format!("/v1/runs/{running_id}/messages"))
        .await;
    assert_eq!(messages["messages"].as_array().unwrap().len(), 3);
    let (events, _) = read_sse(server.get(&format!("/v1/runs/{running_id}/events")).await).await;
    let last = events.last().unwrap();
    assert_eq!(last.event, "run_end");
    assert_eq!(last.data["status"], "interrupted");
    let sequences: Vec<_> = events.iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(
        sequences,
        (1..=sequences.len() as u64).collect::<Vec<_>>(),
        "no gap"
    );
    let kept = server
        .get_json(&format!("/v1/runs/{}", finished["id"].as_str().unwrap()))
        .await;
    assert_eq!(kept, finished);

    // SIGTERM: a clean exit.
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn a_queued_run_whose_profile_is_gone_after_a_restart_ends_failed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&dir);
    config.runs.max_concurrent = 1;
    config.runs.shutdown_grace_ms = 100;
    let mut with_profile = config.clone();
    with_profile.models.insert(
        "temporary".into(),
        toml::from_str("kind = \"scripted\"\nscript = [{content = \"x\"}]").unwrap(),
    );
    let app = spawn_in(dir, with_profile).await;
    // Not resumed after the stop: it frees the only slot.
    let mut blocker = slow(30_000);
    blocker["limits"] = json!({"max_resumes": 0});
    let blocker = app.create_run(blocker).await;
    app.wait_status(blocker["id"].as_str().unwrap(), "running")
        .await;
    let queued = app
        .create_run(json!({"prompt": "later", "model": {"profile": "temporary"}}))
        .await;
    let id = queued["id"].as_str().unwrap().to_owned();
    assert_eq!(
        queued["model"],
        json!({"provider": "scripted", "profile": "temporary"})
    );
    let dir = app.stop().await;

    let app = spawn_in(dir, config).await;
    let run = app.wait_terminal(&id).await;
    assert_eq!(run["status"], "failed");
    assert!(
        run["error"].as_str().unwrap().contains("temporary"),
        "the error says what is missing: {run}"
    );
    let events = app.events(&id).await;
    assert_eq!(types(&events), ["run_end"]);
    assert_eq!(events[0].data["status"], "failed");
}
