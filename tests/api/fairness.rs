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
    spawn_with(move |config| {
        config.auth.tokens = vec![token("a"), token("b"), token("c")];
        config.runs.max_concurrent = max_concurrent;
        config.tenants.insert("a".into(), a);
    })
    .await
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
