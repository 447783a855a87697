//! A tenant's rate limit and token quota (SPEC section 16): the next run is
//! refused with its code and `Retry-After`, other tenants go on, and a run
//! already running when the quota is crossed completes. `GET /v1/tenant`
//! shows the caller's use and limits.

use agent_runner::config::TenantLimits;
use serde_json::{Value, json};

use crate::fairness::{create_as, on_postgres, slow, spawn_tenants};
use crate::helpers::*;

fn retry_after(reply: &Reply) -> u64 {
    reply.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("Retry-After is whole seconds: {:?}", reply.headers))
}

#[tokio::test]
async fn a_rate_limit_refuses_the_next_run_with_retry_after_and_spares_other_tenants() {
    if on_postgres() {
        return;
    }
    let limits = TenantLimits {
        runs_per_minute: Some(2),
        ..TenantLimits::default()
    };
    let mut app = spawn_tenants(4, limits).await;
    for _ in 0..2 {
        create_as(&mut app, "a", slow(0)).await;
    }
    let refused = app.post_run(slow(0)).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.error_code(), "rate_limited");
    // A run comes back every 30 s: the next in at most that.
    let wait = retry_after(&refused);
    assert!((29..=30).contains(&wait), "Retry-After: {wait}");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("2 runs a minute"), "{message}");
    // Another tenant is not limited by a's rate.
    for _ in 0..3 {
        create_as(&mut app, "b", slow(0)).await;
    }
    app.token = Some("token-a".into());
    let tenant = app.get("/v1/tenant").await;
    assert_eq!(tenant.status, 200, "{}", tenant.text);
    assert_eq!(tenant.body["tenant"], "a");
    assert_eq!(tenant.body["runs_last_minute"], 2, "{}", tenant.text);
    assert_eq!(tenant.body["limits"]["runs_per_minute"], 2);
    assert_eq!(tenant.body["limits"]["max_tokens_per_day"], Value::Null);
    assert_eq!(tenant.body["limits"]["max_concurrent"], 4);
}

/// A run of tenant a that calls the client tool `ask` with `usage` on its
/// first step (so it pauses with those tokens spent), then answers.
fn pausing(input_tokens: u64) -> Value {
    json!({
        "prompt": "ask",
        "tools": [],
        "client_tools": [{"name": "ask"}],
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("c1", "ask", json!({}))],
             "usage": {"input_tokens": input_tokens, "output_tokens": 20}},
            {"content": "done", "usage": {"input_tokens": 5, "output_tokens": 5}}
        ]}
    })
}

#[tokio::test]
async fn a_token_quota_refuses_new_runs_and_follow_ups_but_not_a_run_under_way() {
    if on_postgres() {
        return;
    }
    let limits = TenantLimits {
        max_tokens_per_day: Some(100),
        ..TenantLimits::default()
    };
    let mut app = spawn_tenants(4, limits).await;
    let earlier = create_as(&mut app, "a", slow(0)).await;
    let earlier = app.wait_terminal(earlier["id"].as_str().unwrap()).await;
    // Under the quota: admitted; its first step crosses it (100 tokens).
    let run = create_as(&mut app, "a", pausing(80)).await;
    let id = run["id"].as_str().unwrap().to_owned();
    app.wait_status(&id, "requires_action").await;

    let refused = app.post_run(slow(0)).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.error_code(), "quota_exceeded");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("100 tokens of its 100"), "{message}");
    // The window frees when that run's tokens leave it: in a day.
    let wait = retry_after(&refused);
    assert!((86_300..=86_400).contains(&wait), "Retry-After: {wait}");
    let follow_up = json!({"prompt": "more", "tools": [], "previous_run_id": earlier["id"],
                           "model": {"scripted": [{"content": "ok"}]}});
    let refused = app.post_run(follow_up).await;
    assert_eq!(refused.error_code(), "quota_exceeded", "{}", refused.text);
    // Another tenant is not held to a's quota.
    create_as(&mut app, "b", slow(0)).await;

    // The paused run goes on when answered, past the quota.
    app.token = Some("token-a".into());
    let answered = app
        .send(
            app.request(reqwest::Method::POST, &format!("/v1/runs/{id}/actions"))
                .json(&json!({"actions": [{"call_id": "c1", "output": "yes"}]})),
        )
        .await;
    assert!(answered.status.is_success(), "{}", answered.text);
    let done = app.wait_terminal(&id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["answer"], "done");
    let tenant = app.get("/v1/tenant").await;
    assert_eq!(tenant.body["tokens_last_24h"], 110, "{}", tenant.text);
    assert_eq!(tenant.body["running"], 0);
    assert_eq!(tenant.body["queued"], 0);
    assert_eq!(tenant.body["limits"]["max_tokens_per_day"], 100);
    // The metrics count each tenant's runs, refusals and tokens.
    app.wait_metrics(&[
        "agent_runner_tenant_runs_rejected_total{tenant=\"a\",reason=\"quota_exceeded\"} 2",
        "agent_runner_tenant_runs_created_total{tenant=\"a\"} 2",
        "agent_runner_tenant_runs_created_total{tenant=\"b\"} 1",
        "agent_runner_tenant_tokens_total{tenant=\"a\",direction=\"input\"} 85",
        "agent_runner_tenant_tokens_total{tenant=\"a\",direction=\"output\"} 25",
    ])
    .await;
}
