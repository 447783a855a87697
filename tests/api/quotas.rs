//! A tenant's rate limit and token quota (SPEC section 16): the next run is
//! refused with its code and `Retry-After`, other tenants go on, and a run
//! already running when the quota is crossed completes. `GET /v1/tenant`
//! shows the caller's use and limits. On PostgreSQL the limits are the
//! database's: two replicas share them.

use agent_runner::config::TenantLimits;
use serde_json::{Value, json};

use crate::fairness::{create_as, slow, spawn_tenants};
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
        .answer(&id, json!([{"call_id": "c1", "output": "yes"}]))
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

/// A run that answers at once, its one step spending `tokens`.
fn spending(tokens: u64) -> Value {
    json!({"prompt": "spend", "tools": [],
           "model": {"scripted": [{"content": "done",
                                   "usage": {"input_tokens": tokens - 10, "output_tokens": 10}}]}})
}

/// Runs admitted while their tenant's quota had room wait in the queue once
/// it is spent: the quota is checked when a run is taken from the queue to
/// start, not only when it is admitted. The tenant's other runs wait with
/// them; another tenant's go on past them.
#[tokio::test]
async fn queued_runs_wait_once_their_tenants_quota_is_spent() {
    let limits = TenantLimits {
        max_tokens_per_day: Some(1000),
        ..TenantLimits::default()
    };
    let mut app = spawn_tenants(1, limits).await;
    // b holds the one slot while a's six runs are admitted (a has spent
    // nothing yet), each to spend 600 tokens.
    let holder = create_as(&mut app, "b", slow(60_000)).await;
    assert_eq!(holder["status"], "running", "{holder}");
    let mut queued = Vec::new();
    for _ in 0..6 {
        let run = create_as(&mut app, "a", spending(600)).await;
        assert_eq!(run["status"], "queued", "{run}");
        queued.push(run["id"].as_str().unwrap().to_owned());
    }
    app.token = Some("token-b".into());
    let cancelled = app
        .delete(&format!("/v1/runs/{}", holder["id"].as_str().unwrap()))
        .await;
    assert!(cancelled.status.is_success(), "{}", cancelled.text);
    // a's first run (0 spent before it) and second (600) start; after them
    // a has spent 1200 of its 1000.
    app.token = Some("token-a".into());
    for id in &queued[..2] {
        assert_eq!(app.wait_terminal(id).await["status"], "completed");
    }
    // b's runs go past a's: were a's third run to start when its turn came,
    // it would have ended before b's second did.
    app.token = Some("token-b".into());
    for _ in 0..2 {
        let run = app.run_to_end(slow(0)).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    app.token = Some("token-a".into());
    for id in &queued[2..] {
        let run = app.get(&format!("/v1/runs/{id}")).await;
        assert_eq!(run.body["status"], "queued", "{}", run.text);
    }
    let tenant = app.get("/v1/tenant").await;
    assert_eq!(tenant.body["tokens_last_24h"], 1200, "{}", tenant.text);
    assert_eq!(tenant.body["queued"], 4, "{}", tenant.text);
    // A waiting run can still be cancelled.
    let cancelled = app.delete(&format!("/v1/runs/{}", queued[5])).await;
    assert!(cancelled.status.is_success(), "{}", cancelled.text);
    assert_eq!(app.wait_terminal(&queued[5]).await["status"], "aborted");
}

/// A replica of tenants `a` (at most one run executing, three runs a
/// minute) and `b`, one slot of its own, on the shared data directory:
/// the real binary, with the tenants' tables in a config file.
fn tenant_replica(dir: &tempfile::TempDir) -> (ServerProcess, String) {
    let config = dir.path().join("tenants.toml");
    std::fs::write(
        &config,
        "[[auth.tokens]]\ntenant = \"a\"\ntoken = \"token-a\"\n\
         [[auth.tokens]]\ntenant = \"b\"\ntoken = \"token-b\"\n\
         [tenants.a]\nmax_concurrent = 1\nruns_per_minute = 3\n",
    )
    .unwrap();
    let mut command = binary_command(dir, &[("AGENT_RUNNER_RUNS__MAX_CONCURRENT", "1")]);
    command.arg("--config").arg(&config);
    let log = server_log(&mut command);
    command.stderr(log);
    spawn_listening(command)
}

/// A tenant's client of one replica.
struct Client<'r> {
    address: &'r str,
    token: &'static str,
    http: reqwest::Client,
}

impl Client<'_> {
    async fn create(&self, body: &Value) -> Reply {
        let response = self
            .http
            .post(format!("{}/v1/runs", self.address))
            .bearer_auth(self.token)
            .json(body)
            .send()
            .await
            .unwrap();
        Reply::of(response).await
    }

    async fn created(&self, body: &Value) -> String {
        let reply = self.create(body).await;
        assert_eq!(reply.status, 201, "{}", reply.text);
        reply.body["id"].as_str().unwrap().to_owned()
    }

    async fn run(&self, id: &str) -> Value {
        self.http
            .get(format!("{}/v1/runs/{id}", self.address))
            .bearer_auth(self.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn wait_status(&self, id: &str, status: &str) -> Value {
        eventually(&format!("run {id} {status}"), async || {
            let run = self.run(id).await;
            (run["status"] == status).then_some(run)
        })
        .await
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set AGENT_RUNNER_TEST_POSTGRES"]
async fn two_replicas_hold_a_tenants_limits_for_the_whole_database() {
    require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let (_x, x) = tenant_replica(&dir);
    let (_y, y) = tenant_replica(&dir);
    let client = |address, token| Client {
        address,
        token,
        http: http_client(),
    };
    let (a_x, a_y, b_x, b_y) = (
        client(&x, "token-a"),
        client(&y, "token-a"),
        client(&x, "token-b"),
        client(&y, "token-b"),
    );
    // a's one run executing is on x.
    let a1 = a_x.created(&slow(60_000)).await;
    a_x.wait_status(&a1, "running").await;
    // y's slot is free, but a has no run left: its next waits.
    let a2 = a_y.created(&slow(0)).await;
    // b's run on y, then one queued behind x's busy slot, which y claims
    // (with a's waiting run passed over) once its slot is free again.
    let b1 = b_y.created(&slow(0)).await;
    b_y.wait_status(&b1, "completed").await;
    let b2 = b_x.created(&slow(0)).await;
    b_x.wait_status(&b2, "completed").await;
    assert_eq!(a_y.run(&a2).await["status"], "queued");
    // a's rate is the database's: its third run is taken on x, its fourth
    // refused on y.
    let a3 = a_x.created(&slow(0)).await;
    let refused = a_y.create(&slow(0)).await;
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.error_code(), "rate_limited");
    assert!(refused.headers.contains_key("retry-after"));
    // Once a's first ends, its waiting runs go, one at a time.
    let cancelled = a_x
        .http
        .delete(format!("{x}/v1/runs/{a1}"))
        .bearer_auth("token-a")
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status(), 202);
    let a2 = a_y.wait_status(&a2, "completed").await;
    let a3 = a_y.wait_status(&a3, "completed").await;
    assert!(
        a2["finished_at"].as_str() <= a3["started_at"].as_str(),
        "one at a time: {a2} {a3}"
    );
}
