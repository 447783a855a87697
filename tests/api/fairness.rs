//! Tenants share fairly (SPEC section 16): slots go to the tenants in turn,
//! and each tenant stays within its own `[tenants]` limits.
//!
//! On PostgreSQL the same hold for the whole database (tests/api/quotas.rs
//! has two replicas share them).

use agent_runner::config::{TenantLimits, TokenConfig};
use serde_json::{Value, json};

use crate::helpers::*;

pub(crate) fn token(tenant: &str) -> TokenConfig {
    toml::from_str(&format!(
        "tenant = \"{tenant}\"\ntoken = \"token-{tenant}\""
    ))
    .unwrap()
}

/// A server with tenants `a`, `b` and `c`, `max_concurrent` slots, and
/// `[tenants.a]` as given.
pub(crate) async fn spawn_tenants(max_concurrent: usize, a: TenantLimits) -> TestApp {
    spawn_with(move |config| with_tenants(config, max_concurrent, a)).await
}

pub(crate) fn with_tenants(
    config: &mut agent_runner::config::Config,
    max_concurrent: usize,
    a: TenantLimits,
) {
    config.auth.tokens = vec![token("a"), token("b"), token("c")];
    config.runs.max_concurrent = max_concurrent;
    config.tenants.insert("a".into(), a);
}

/// A run that takes `delay_ms` of the model's time, then answers.
pub(crate) fn slow(delay_ms: u64) -> Value {
    json!({"prompt": "wait", "tools": [],
           "model": {"scripted": [{"delay_ms": delay_ms, "content": "done"}]}})
}

pub(crate) async fn create_as(app: &mut TestApp, tenant: &str, body: Value) -> Value {
    app.token = Some(format!("token-{tenant}"));
    app.create_run(body).await
}

#[tokio::test]
async fn one_tenants_backlog_never_delays_anothers_run_by_more_than_one_run() {
    let mut app = spawn_tenants(1, TenantLimits::default()).await;
    // The one slot is held until everything is queued behind it.
    let holder = create_as(&mut app, "a", slow(60_000)).await;
    assert_eq!(holder["status"], "running", "{holder}");
    let mut backlog = Vec::new();
    for _ in 0..6 {
        backlog.push(create_as(&mut app, "a", slow(20)).await);
    }
    let b = create_as(&mut app, "b", slow(0)).await;
    let c = create_as(&mut app, "c", slow(0)).await;
    assert_eq!(b["status"], "queued", "{b}");
    app.token = Some("token-a".into());
    let cancel = app
        .delete(&format!("/v1/runs/{}", holder["id"].as_str().unwrap()))
        .await;
    assert!(cancel.status.is_success(), "{}", cancel.text);
    // Each ended run records when it started: after the holder, a's next
    // run, then b's, then c's, then the rest of a's backlog.
    app.token = Some("token-b".into());
    let b = app.wait_terminal(b["id"].as_str().unwrap()).await;
    app.token = Some("token-c".into());
    let c = app.wait_terminal(c["id"].as_str().unwrap()).await;
    app.token = Some("token-a".into());
    let mut a_started = Vec::new();
    for run in &backlog {
        let run = app.wait_terminal(run["id"].as_str().unwrap()).await;
        assert_eq!(run["status"], "completed", "{run}");
        a_started.push(run["started_at"].as_str().unwrap().to_owned());
    }
    let b_started = b["started_at"].as_str().unwrap();
    let c_started = c["started_at"].as_str().unwrap();
    let ahead = |started: &str| a_started.iter().filter(|a| a.as_str() < started).count();
    assert_eq!(
        ahead(b_started),
        1,
        "a's runs started before b's: {a_started:?}, b: {b_started}"
    );
    assert_eq!(
        ahead(c_started),
        1,
        "a's runs started before c's: {a_started:?}, c: {c_started}"
    );
    assert!(b_started < c_started, "b queued first");
}

#[tokio::test]
async fn a_tenants_own_limits_hold_while_another_runs_at_full_width() {
    let limits = TenantLimits {
        max_concurrent: Some(1),
        max_queued: Some(1),
        ..TenantLimits::default()
    };
    let mut app = spawn_tenants(3, limits).await;
    let first = create_as(&mut app, "a", slow(60_000)).await;
    // On PostgreSQL a tenant with a concurrency limit of its own always
    // queues first: its runs are claimed where the limit holds across
    // replicas.
    let first = app
        .wait_status(first["id"].as_str().unwrap(), "running")
        .await;
    // Slots are free, but a has its one running.
    let second = create_as(&mut app, "a", slow(0)).await;
    assert_eq!(second["status"], "queued", "{second}");
    // And its queue of one is full.
    app.token = Some("token-a".into());
    let refused = app.post_run(slow(0)).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.error_code(), "queue_full");
    // b runs at once, in the slots a may not take.
    for _ in 0..2 {
        let run = create_as(&mut app, "b", slow(60_000)).await;
        assert_eq!(run["status"], "running", "{run}");
    }
    // a's queued run starts once its first ends.
    app.token = Some("token-a".into());
    let cancel = app
        .delete(&format!("/v1/runs/{}", first["id"].as_str().unwrap()))
        .await;
    assert!(cancel.status.is_success(), "{}", cancel.text);
    let second = app.wait_terminal(second["id"].as_str().unwrap()).await;
    assert_eq!(second["status"], "completed", "{second}");
}

/// Runs `statement` on the database at `url` (a SQLite file, or the
/// tests' PostgreSQL), binding `run`.
async fn on_database(url: &str, statement: &str, run: &str) {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let mut connection = sqlx::AnyConnection::connect(url).await.unwrap();
    sqlx::query(statement)
        .bind(run)
        .execute(&mut connection)
        .await
        .unwrap();
    connection.close().await.unwrap();
}

/// A queued run whose stored transcript cannot be read (the database's
/// failure, here a message made unreadable while no server ran) neither
/// holds up the runs behind it nor is given up: it is tried again with a
/// growing wait, and starts once it can be read.
#[tokio::test]
async fn a_run_that_cannot_be_read_waits_without_holding_up_the_queue() {
    let mut app = spawn_tenants(1, TenantLimits::default()).await;
    let earlier = create_as(&mut app, "a", slow(0)).await;
    let earlier = app.wait_terminal(earlier["id"].as_str().unwrap()).await;
    // The one slot is held while a follow-up of it and a run behind that
    // are queued; then the server stops, and they stay queued.
    let holder = create_as(&mut app, "b", slow(60_000)).await;
    let holder = holder["id"].as_str().unwrap().to_owned();
    let follow_up = json!({"prompt": "more", "tools": [], "previous_run_id": earlier["id"],
                           "model": {"scripted": [{"content": "followed up"}]}});
    let unreadable = create_as(&mut app, "a", follow_up).await;
    let unreadable = unreadable["id"].as_str().unwrap().to_owned();
    let behind = create_as(&mut app, "a", slow(0)).await;
    assert_eq!(behind["status"], "queued", "{behind}");
    let dir = app.stop().await;
    let database = database_url(dir.path());
    on_database(
        &database,
        "UPDATE messages SET body = 'not json: ' || body WHERE run_id = $1 AND position = 0",
        &unreadable,
    )
    .await;
    let mut config = test_config(&dir);
    with_tenants(&mut config, 1, TenantLimits::default());
    let mut app = spawn_in(dir, config).await;
    app.token = Some("token-b".into());
    let cancelled = app.delete(&format!("/v1/runs/{holder}")).await;
    assert!(cancelled.status.is_success(), "{}", cancelled.text);
    app.token = Some("token-a".into());
    let behind = app.wait_terminal(behind["id"].as_str().unwrap()).await;
    assert_eq!(behind["status"], "completed", "{behind}");
    let waiting = app.get(&format!("/v1/runs/{unreadable}")).await;
    assert_eq!(waiting.body["status"], "queued", "{}", waiting.text);
    // Readable again: it starts at its next try.
    on_database(
        &database,
        "UPDATE messages SET body = substr(body, 11) WHERE run_id = $1 AND position = 0",
        &unreadable,
    )
    .await;
    let done = app.wait_terminal(&unreadable).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["answer"], "followed up");
}
