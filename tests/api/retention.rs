//! Removing runs that have ended: `POST /v1/runs/{id}/purge` and
//! `[retention] keep_days`, whose clock the tests move by back-dating when
//! runs ended, in the real database.

use reqwest::Method;
use serde_json::json;
use sqlx::Connection;

use crate::helpers::*;

async fn purge(app: &TestApp, id: &str) -> Reply {
    app.send(app.request(Method::POST, &format!("/v1/runs/{id}/purge")))
        .await
}

#[tokio::test]
async fn a_purged_run_is_gone_with_its_events_messages_and_workspace() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(two_step(
            "write_file",
            json!({"path": "notes.txt", "content": "x"}),
            "done",
        ))
        .await;
    let id = run["id"].as_str().unwrap();
    let dir = app.dir.path().join("workspaces").join(id);
    assert!(dir.join("notes.txt").exists(), "{}", dir.display());
    let kept = app.run_to_end(json!({"prompt": "keep me"})).await;
    let purged = purge(&app, id).await;
    assert_eq!(purged.status, 204, "{}", purged.text);
    assert!(purged.text.is_empty());
    for path in [
        format!("/v1/runs/{id}"),
        format!("/v1/runs/{id}/events"),
        format!("/v1/runs/{id}/messages"),
        format!("/v1/runs/{id}/workspace"),
    ] {
        assert_eq!(app.get(&path).await.status, 404, "{path}");
    }
    assert!(!dir.exists(), "its workspace is gone");
    let follow = app
        .post_run(json!({"prompt": "go on", "previous_run_id": id}))
        .await;
    assert_eq!(follow.status, 404);
    assert_eq!(purge(&app, id).await.status, 404, "once");
    // The others are untouched.
    let listed = app.get("/v1/runs").await.body;
    let ids: Vec<&str> = listed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [kept["id"].as_str().unwrap()]);
    assert_eq!(app.events(kept["id"].as_str().unwrap()).await.len(), 12);
}

#[tokio::test]
async fn a_live_run_is_not_purged() {
    let app = spawn_app().await;
    let run = app
        .create_run(json!({"prompt": "slow", "model": {"scripted": [{"delay_ms": 30000, "content": "late"}]}}))
        .await;
    let id = run["id"].as_str().unwrap();
    app.wait_status(id, "running").await;
    let refused = purge(&app, id).await;
    assert_eq!(refused.status, 409, "{}", refused.text);
    assert_eq!(refused.error_code(), "run_live");
    // Nothing of it was lost: it ends as any cancelled run does.
    assert_eq!(app.delete(&format!("/v1/runs/{id}")).await.status, 202);
    let done = app.wait_terminal(id).await;
    assert_eq!(done["status"], "aborted");
    assert_gap_free(&app.events(id).await);
    assert_eq!(purge(&app, id).await.status, 204);
}

#[tokio::test]
async fn runs_past_their_retention_are_removed_and_the_rest_kept() {
    let app = spawn_with(|config| {
        config.retention.keep_days = Some(7);
        config.retention.sweep_interval_ms = 100;
    })
    .await;
    let old = app.run_to_end(json!({"prompt": "old"})).await;
    let recent = app.run_to_end(json!({"prompt": "recent"})).await;
    let live = app
        .create_run(json!({"prompt": "slow", "model": {"scripted": [{"delay_ms": 30000, "content": "late"}]}}))
        .await;
    let (old, recent, live) = (
        old["id"].as_str().unwrap(),
        recent["id"].as_str().unwrap(),
        live["id"].as_str().unwrap(),
    );
    app.wait_status(live, "running").await;
    // The clock moves: the first ended eight days ago, the second six; the
    // live one is given an end long past too, which must not count while
    // it runs.
    let mut db = sqlx::AnyConnection::connect(&database_url(app.dir.path()))
        .await
        .unwrap();
    for (id, days) in [(old, 8), (recent, 6), (live, 30)] {
        ended_days_ago(&mut db, id, days).await;
    }
    removed(&app, old).await;
    assert!(!app.dir.path().join("workspaces").join(old).exists());
    assert_eq!(app.get(&format!("/v1/runs/{old}/events")).await.status, 404);
    // A later sweep, the one that removes a run past its retention only
    // now, still keeps the others.
    let later = app.run_to_end(json!({"prompt": "later"})).await;
    let later = later["id"].as_str().unwrap();
    ended_days_ago(&mut db, later, 9).await;
    removed(&app, later).await;
    assert_eq!(app.get(&format!("/v1/runs/{recent}")).await.status, 200);
    assert_eq!(app.events(recent).await.len(), 12);
    assert_eq!(
        app.get(&format!("/v1/runs/{live}")).await.body["status"],
        "running"
    );
}

/// Waits until run `id` is gone (a sweep removed it).
async fn removed(app: &TestApp, id: &str) {
    eventually(&format!("run {id} to be removed"), async || {
        (app.get(&format!("/v1/runs/{id}")).await.status == 404).then_some(())
    })
    .await;
}

/// Moves the clock for run `id`: it ended `days` days ago.
async fn ended_days_ago(db: &mut sqlx::AnyConnection, id: &str, days: i64) {
    let ended =
        agent_runner::run::format_time(&(chrono::Utc::now() - chrono::TimeDelta::days(days)));
    sqlx::query("UPDATE runs SET finished_at = $1 WHERE id = $2")
        .bind(ended)
        .bind(id)
        .execute(db)
        .await
        .unwrap();
}
