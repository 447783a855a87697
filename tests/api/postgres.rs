//! What only PostgreSQL has: a database that two servers could reach at
//! once. Runs when the suite runs on PostgreSQL (`AGENT_RUNNER_TEST_POSTGRES`,
//! as `.ci/run` does); on SQLite it says so and passes without running.

use agent_runner::app::Application;

use crate::helpers::{POSTGRES_VARIABLE, spawn_in, test_config};

#[tokio::test]
async fn a_second_server_on_one_database_is_refused_until_the_first_is_gone() {
    if std::env::var(POSTGRES_VARIABLE).is_err() {
        eprintln!("not run: the suite runs on SQLite ({POSTGRES_VARIABLE} is unset)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(&dir);
    assert!(config.storage.database_url.starts_with("postgres"));
    let first = spawn_in(dir, config.clone()).await;
    let second = Application::build(config.clone()).await;
    let error = second
        .err()
        .expect("a second server is refused")
        .to_string();
    assert!(
        error.contains("another agent-runner server serves this database"),
        "{error}"
    );
    // Once the first has stopped, its database is free again.
    let dir = first.stop().await;
    let again = spawn_in(dir, config).await;
    assert_eq!(again.get("/readyz").await.status, 200);
}
