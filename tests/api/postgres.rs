//! What only PostgreSQL has: a database that two servers could reach at
//! once. Ignored unless asked for: it runs with `--include-ignored` when the
//! suite runs on PostgreSQL (`AGENT_RUNNER_TEST_POSTGRES`, as `.ci/run`
//! does), and fails, rather than passes without running, when asked for on
//! SQLite.

use crate::helpers::{POSTGRES_VARIABLE, require_postgres, spawn_in, test_config};

/// Ends every connection to the test server's database from PostgreSQL's
/// side, as a restart of PostgreSQL or a broken network would.
async fn terminate_connections(database_url: &str) {
    use sqlx::Connection;
    let server = std::env::var(POSTGRES_VARIABLE).unwrap();
    let name = database_url.rsplit_once('/').unwrap().1.to_owned();
    let mut admin = sqlx::PgConnection::connect(&server).await.unwrap();
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(name)
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(!ended.is_empty(), "the server had connections to end");
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn a_lost_connection_is_opened_again_and_loses_nothing() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&dir);
    let url = config.storage.database_url.clone();
    let app = spawn_in(dir, config).await;
    // A run in the middle of its work when the connections go.
    let run = app
        .create_run(serde_json::json!({
            "prompt": "wait", "model": {"scripted": [{"delay_ms": 500, "content": "done"}]}
        }))
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    app.wait_status(&id, "running").await;
    terminate_connections(&url).await;
    let ended = app.wait_terminal(&id).await;
    assert_eq!(ended["status"], "completed", "{ended}");
    crate::helpers::assert_gap_free(&app.events(&id).await);
    // New runs are taken again once the writer has its connection back.
    let mut created = None;
    for _ in 0..100 {
        let reply = app
            .post_run(
                serde_json::json!({"prompt": "again", "model": {"scripted": [{"content": "ok"}]}}),
            )
            .await;
        if reply.status == 201 {
            created = Some(reply.body);
            break;
        }
        assert_eq!(reply.status, 503, "{}", reply.text);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let created = created.expect("runs are taken again");
    let done = app.wait_terminal(created["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done}");
}
