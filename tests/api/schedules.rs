//! Schedules (SPEC section 23): a cron in a timezone that makes one run a
//! tick, through the real server; the ticks' exactly-once across replicas
//! killed and frozen is in `schedule_replicas`.

use agent_runner::config::TenantLimits;
use chrono::{DateTime, Duration, Timelike, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::*;

/// Every second.
const EVERY_SECOND: &str = "* * * * * *";

pub(crate) fn quick() -> Value {
    json!({"prompt": "tick", "tools": [], "model": {"scripted": [{"content": "ticked"}]}})
}

impl TestApp {
    pub async fn create_schedule(&self, body: Value) -> Value {
        let reply = self.post_schedule(body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        reply.body
    }

    pub async fn post_schedule(&self, body: Value) -> Reply {
        self.send(self.request(Method::POST, "/v1/schedules").json(&body))
            .await
    }

    pub async fn patch_schedule(&self, id: &str, body: Value) -> Reply {
        self.send(
            self.request(Method::PATCH, &format!("/v1/schedules/{id}"))
                .json(&body),
        )
        .await
    }

    /// The runs a schedule made, newest first.
    pub async fn runs_of_schedule(&self, id: &str) -> Vec<Value> {
        let reply = self
            .get(&format!("/v1/runs?schedule_id={id}&limit=100"))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        reply.body["runs"].as_array().unwrap().clone()
    }

    /// Waits until the schedule made at least `n` runs; returns them.
    pub async fn wait_schedule_runs(&self, id: &str, n: usize) -> Vec<Value> {
        eventually(&format!("schedule {id} to make {n} runs"), async || {
            let runs = self.runs_of_schedule(id).await;
            (runs.len() >= n).then_some(runs)
        })
        .await
    }
}

pub(crate) fn time(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().unwrap())
        .unwrap()
        .with_timezone(&Utc)
}

pub(crate) fn id(value: &Value) -> &str {
    value["id"].as_str().unwrap()
}

#[tokio::test]
async fn a_schedule_is_made_read_listed_changed_and_removed() {
    let app = spawn_app().await;
    let reply = app
        .post_schedule(json!({"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin",
                              "run": quick(), "name": "morning triage"}))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let made = reply.body;
    let location = reply.headers["location"].to_str().unwrap();
    assert_eq!(location, format!("/v1/schedules/{}", id(&made)));
    assert_eq!(made["cron"], "0 9 * * 1-5");
    assert_eq!(made["timezone"], "Europe/Berlin");
    assert_eq!(made["thread"], "new");
    assert_eq!(made["overlap"], "skip");
    assert_eq!(made["enabled"], true);
    assert_eq!(made["last_run_id"], Value::Null);
    assert_eq!(made["skipped_ticks"], 0);
    assert_eq!(made["refused_ticks"], 0);
    assert_eq!(made["run"], quick());
    // Nine in Berlin is 07:00 or 08:00 UTC, on a weekday, in the future.
    let next = time(&made["next_run_at"]);
    assert!(next > Utc::now());
    assert!(
        [7, 8].contains(&next.hour()) && next.minute() == 0,
        "{next}"
    );

    let read = app.get(location).await;
    assert_eq!(read.body, made);
    let defaults = app
        .create_schedule(json!({"cron": "*/5 * * * *", "run": quick()}))
        .await;
    assert_eq!(defaults["timezone"], "UTC");
    let page = app.get("/v1/schedules?limit=1").await;
    assert_eq!(page.body["schedules"], json!([made]));
    let cursor = page.body["next_cursor"].as_str().unwrap();
    let rest = app.get(&format!("/v1/schedules?cursor={cursor}")).await;
    assert_eq!(rest.body["schedules"][0]["id"], defaults["id"]);
    assert_eq!(rest.body["next_cursor"], Value::Null);

    // A change of the name keeps the next tick; a change of the cron
    // counts it again.
    let renamed = app.patch_schedule(id(&made), json!({"name": null})).await;
    assert_eq!(renamed.status, StatusCode::OK, "{}", renamed.text);
    assert_eq!(renamed.body["name"], Value::Null);
    assert_eq!(renamed.body["next_run_at"], made["next_run_at"]);
    let retimed = app
        .patch_schedule(id(&made), json!({"cron": "30 6 * * *", "timezone": "UTC"}))
        .await;
    let next = time(&retimed.body["next_run_at"]);
    assert_eq!((next.hour(), next.minute()), (6, 30));
    let disabled = app
        .patch_schedule(id(&made), json!({"enabled": false}))
        .await;
    assert_eq!(disabled.body["enabled"], false);
    assert_eq!(disabled.body["next_run_at"], Value::Null);

    let removed = app.delete(location).await;
    assert_eq!(removed.status, StatusCode::NO_CONTENT);
    assert_eq!(app.get(location).await.status, StatusCode::NOT_FOUND);
    assert_eq!(app.delete(location).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        app.get("/v1/schedules/not-an-id").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn refusals_name_what_is_wrong_and_make_nothing() {
    let app = spawn_app().await;
    for (body, names) in [
        (json!({"cron": "* * * *", "run": quick()}), "cron"),
        (json!({"cron": "61 * * * *", "run": quick()}), "cron"),
        (
            json!({"cron": "0 9 * * *", "timezone": "Mars/Olympus", "run": quick()}),
            "timezone",
        ),
        (
            json!({"cron": "0 9 * * *", "run": {"prompt": ""}}),
            "run: prompt",
        ),
        (json!({"cron": "0 9 * * *", "run": "hello"}), "run"),
        (
            json!({"cron": "0 9 * * *", "run": {"prompt": "hi", "model": "no-such-profile"}}),
            "run: model",
        ),
        (
            json!({"cron": "0 9 * * *", "run": {"prompt": "hi", "agent": "nobody"}}),
            "run: agent",
        ),
        (
            json!({"cron": "0 9 * * *", "run": {"prompt": "hi", "previous_run_id": uuid::Uuid::now_v7().to_string()}}),
            "run.previous_run_id",
        ),
        (
            json!({"cron": "0 9 * * *", "run": quick(), "thread": "old"}),
            "thread",
        ),
        (
            json!({"cron": "0 9 * * *", "run": quick(), "overlap": "queue"}),
            "overlap",
        ),
        (
            json!({"cron": "0 9 * * *", "run": quick(), "every": 3}),
            "every",
        ),
        (json!({"run": quick()}), "cron"),
    ] {
        let reply = app.post_schedule(body.clone()).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            reply.text
        );
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{body}: {message}");
    }
    assert_eq!(app.get("/v1/schedules").await.body["schedules"], json!([]));
    let made = app
        .create_schedule(json!({"cron": "0 9 * * *", "run": quick()}))
        .await;
    let refused = app
        .patch_schedule(id(&made), json!({"cron": "99 * * * *"}))
        .await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    let null = app.patch_schedule(id(&made), json!({"run": null})).await;
    assert_eq!(null.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        app.get(&format!("/v1/schedules/{}", id(&made))).await.body,
        made,
        "nothing changed"
    );
}

#[tokio::test]
async fn each_tick_makes_one_run_that_names_its_schedule_and_tick() {
    let app = spawn_app().await;
    let schedule = app
        .create_schedule(json!({"cron": EVERY_SECOND, "run": quick()}))
        .await;
    app.wait_schedule_runs(id(&schedule), 3).await;
    app.patch_schedule(id(&schedule), json!({"enabled": false}))
        .await;
    let runs = app.runs_of_schedule(id(&schedule)).await;
    let mut ticks: Vec<DateTime<Utc>> = runs.iter().map(|r| time(&r["schedule_tick"])).collect();
    for run in &runs {
        assert_eq!(run["schedule_id"], schedule["id"]);
        // Each its own thread.
        assert_eq!(run["thread_id"], run["id"]);
        assert_eq!(run["previous_run_id"], Value::Null);
    }
    ticks.sort();
    ticks.dedup();
    assert_eq!(ticks.len(), runs.len(), "one run a tick: {runs:?}");
    for run in &runs {
        assert_eq!(app.wait_terminal(id(run)).await["status"], "completed");
    }
    let read = app
        .get(&format!("/v1/schedules/{}", id(&schedule)))
        .await
        .body;
    assert_eq!(read["last_run_id"], runs[0]["id"]);
    // Counted once each (a tick under way as it was disabled included).
    eventually("the runs made counted", async || {
        let made = app.runs_of_schedule(id(&schedule)).await.len();
        let line = format!(
            "agent_runner_schedule_ticks_total{{tenant=\"default\",outcome=\"made\"}} {made}"
        );
        app.get("/metrics")
            .await
            .text
            .lines()
            .any(|l| l == line)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn continuing_runs_follow_each_other_in_one_thread() {
    let app = spawn_app().await;
    let schedule = app
        .create_schedule(json!({"cron": EVERY_SECOND, "run": quick(), "thread": "continue"}))
        .await;
    app.wait_schedule_runs(id(&schedule), 2).await;
    app.patch_schedule(id(&schedule), json!({"enabled": false}))
        .await;
    let mut runs = app.runs_of_schedule(id(&schedule)).await;
    runs.reverse();
    for pair in runs.windows(2) {
        assert_eq!(pair[1]["previous_run_id"], pair[0]["id"], "{runs:?}");
        assert_eq!(pair[1]["thread_id"], runs[0]["id"]);
    }
    let last = app.wait_terminal(id(runs.last().unwrap())).await;
    assert_eq!(last["status"], "completed");
    // It holds every earlier run's messages.
    assert_eq!(app.messages(id(&last)).await.len(), 2 * runs.len());
}

#[tokio::test]
async fn a_tick_while_the_previous_run_is_live_is_skipped_and_counted() {
    let app = spawn_app().await;
    let slow = json!({"prompt": "wait", "tools": [],
                      "model": {"scripted": [{"delay_ms": 60000, "content": "late"}]}});
    let schedule = app
        .create_schedule(json!({"cron": EVERY_SECOND, "run": slow}))
        .await;
    let first = app.wait_schedule_runs(id(&schedule), 1).await[0].clone();
    let skipped = eventually("two ticks skipped", async || {
        let read = app
            .get(&format!("/v1/schedules/{}", id(&schedule)))
            .await
            .body;
        (read["skipped_ticks"].as_u64().unwrap() >= 2).then_some(read)
    })
    .await;
    assert_eq!(skipped["last_run_id"], first["id"]);
    assert_eq!(app.runs_of_schedule(id(&schedule)).await.len(), 1);
    // A trigger while it is live is refused the same way.
    let trigger = app
        .send(app.request(
            Method::POST,
            &format!("/v1/schedules/{}/trigger", id(&schedule)),
        ))
        .await;
    assert_eq!(trigger.status, StatusCode::CONFLICT, "{}", trigger.text);
    assert_eq!(trigger.error_code(), "run_live");
    app.patch_schedule(id(&schedule), json!({"enabled": false}))
        .await;
    app.delete(&format!("/v1/runs/{}", id(&first))).await;
    app.wait_metrics(&["agent_runner_schedule_ticks_total{tenant=\"default\",outcome=\"made\"} 1"])
        .await;
}

#[tokio::test]
async fn an_enqueued_tick_waits_behind_the_live_run_and_continues_it() {
    let app = spawn_app().await;
    let asking = json!({"prompt": "write", "approval": {"tools": ["write_file"]},
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("w1", "write_file", json!({"path": "log.txt", "content": "x"}))]},
            {"content": "written"}]}});
    let schedule = app
        .create_schedule(json!({"cron": EVERY_SECOND, "run": asking,
                                "thread": "continue", "overlap": "enqueue"}))
        .await;
    app.wait_schedule_runs(id(&schedule), 2).await;
    // One run waits behind the live one; the ticks after it are skipped.
    eventually("a tick skipped", async || {
        let read = app
            .get(&format!("/v1/schedules/{}", id(&schedule)))
            .await
            .body;
        (read["skipped_ticks"].as_u64().unwrap() >= 1).then_some(())
    })
    .await;
    app.patch_schedule(id(&schedule), json!({"enabled": false}))
        .await;
    let mut runs = app.runs_of_schedule(id(&schedule)).await;
    assert_eq!(runs.len(), 2, "{runs:?}");
    runs.reverse();
    let first = app.wait_status(id(&runs[0]), "requires_action").await;
    assert_eq!(runs[1]["status"], "queued", "{runs:?}");
    assert_eq!(runs[1]["previous_run_id"], first["id"]);
    // Answered, the first ends and the next goes on from its end.
    let answer = app
        .send(
            app.request(Method::POST, &format!("/v1/runs/{}/actions", id(&first)))
                .json(&json!({"actions": [{"call_id": "w1", "decision": "approve"}]})),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    app.wait_status(id(&runs[1]), "requires_action").await;
    let started = app.messages(id(&runs[1])).await;
    assert_eq!(started[0]["content"], "write");
    for run in &runs {
        app.delete(&format!("/v1/runs/{}", id(run))).await;
    }
}

#[tokio::test]
async fn a_trigger_makes_one_run_now_without_a_tick() {
    let app = spawn_app().await;
    let schedule = app
        .create_schedule(json!({"cron": "0 0 1 1 *", "run": quick()}))
        .await;
    let reply = app
        .send(app.request(
            Method::POST,
            &format!("/v1/schedules/{}/trigger", id(&schedule)),
        ))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["schedule_id"], schedule["id"]);
    assert_eq!(reply.body["schedule_tick"], Value::Null);
    let done = app.wait_terminal(id(&reply.body)).await;
    assert_eq!(done["answer"], "ticked");
    let read = app
        .get(&format!("/v1/schedules/{}", id(&schedule)))
        .await
        .body;
    assert_eq!(read["last_run_id"], reply.body["id"]);
    assert_eq!(read["next_run_at"], schedule["next_run_at"]);
}

#[tokio::test]
async fn a_tick_a_tenant_limit_refuses_is_counted_and_not_retried() {
    let limits = TenantLimits {
        runs_per_minute: Some(1),
        ..TenantLimits::default()
    };
    let mut app = crate::fairness::spawn_tenants(4, limits).await;
    app.token = Some("token-a".into());
    // The tenant's one run a minute is spent.
    app.create_run(quick()).await;
    let schedule = app
        .create_schedule(json!({"cron": EVERY_SECOND, "run": quick()}))
        .await;
    let refused = eventually("two ticks refused", async || {
        let read = app
            .get(&format!("/v1/schedules/{}", id(&schedule)))
            .await
            .body;
        (read["refused_ticks"].as_u64().unwrap() >= 2).then_some(read)
    })
    .await;
    assert_eq!(refused["last_run_id"], Value::Null);
    // Each tick refused once: as many refusals as ticks went by.
    app.patch_schedule(id(&schedule), json!({"enabled": false}))
        .await;
    let read = app
        .get(&format!("/v1/schedules/{}", id(&schedule)))
        .await
        .body;
    let seconds = (time(&read["updated_at"]) - time(&schedule["created_at"])).num_seconds();
    assert!(
        read["refused_ticks"].as_i64().unwrap() <= seconds + 1,
        "{read} in {seconds} s"
    );
    let metrics = app.get("/metrics").await.text;
    assert!(
        metrics.contains("agent_runner_schedule_ticks_total{tenant=\"a\",outcome=\"refused\"}"),
        "{metrics}"
    );
    assert!(app.runs_of_schedule(id(&schedule)).await.is_empty());
    // Another tenant sees none of it.
    app.token = Some("token-b".into());
    assert_eq!(
        app.get(&format!("/v1/schedules/{}", id(&schedule)))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(app.get("/v1/schedules").await.body["schedules"], json!([]));
}

#[tokio::test]
async fn ticks_missed_while_no_server_ran_are_made_up_once_by_the_latest() {
    let app = spawn_app().await;
    let schedule = app
        .create_schedule(json!({"cron": "0 * * * *", "run": quick()}))
        .await;
    let dir = app.stop().await;
    // The server was down five hours: five ticks went by.
    sqlx::any::install_default_drivers();
    let mut connection =
        <sqlx::AnyConnection as sqlx::Connection>::connect(&database_url(dir.path()))
            .await
            .unwrap();
    let hour = |at: DateTime<Utc>| {
        at.with_minute(0)
            .and_then(|at| at.with_second(0))
            .and_then(|at| at.with_nanosecond(0))
            .unwrap()
    };
    let missed = hour(Utc::now() - Duration::hours(5));
    sqlx::query("UPDATE schedules SET next_run_at = $1 WHERE id = $2")
        .bind(agent_runner::run::format_time(&missed))
        .bind(id(&schedule))
        .execute(&mut connection)
        .await
        .unwrap();
    drop(connection);

    let config = test_config(&dir);
    let app = spawn_in(dir, config).await;
    let runs = app.wait_schedule_runs(id(&schedule), 1).await;
    let read = eventually("the tick moved on", async || {
        let read = app
            .get(&format!("/v1/schedules/{}", id(&schedule)))
            .await
            .body;
        (time(&read["next_run_at"]) > Utc::now()).then_some(read)
    })
    .await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    // The latest tick that fell due, not the first missed.
    let tick = time(&runs[0]["schedule_tick"]);
    assert!(
        tick >= missed + Duration::hours(4) && tick <= Utc::now(),
        "{tick}"
    );
    assert_eq!(tick, hour(tick));
    assert_eq!(time(&read["next_run_at"]), tick + Duration::hours(1));
    assert_eq!(app.runs_of_schedule(id(&schedule)).await.len(), 1);
}

#[tokio::test]
async fn the_schedules_answers_match_the_document() {
    use crate::openapi::check;
    let app = spawn_app().await;
    let slow = json!({"prompt": "wait", "tools": [],
                      "model": {"scripted": [{"delay_ms": 60000, "content": "late"}]}});
    let created = app
        .post_schedule(json!({"cron": "0 9 * * *", "run": slow, "name": "n"}))
        .await;
    check("post", "/v1/schedules", &created);
    let refused = app
        .post_schedule(json!({"cron": "nine", "run": quick()}))
        .await;
    check("post", "/v1/schedules", &refused);
    let path = format!("/v1/schedules/{}", id(&created.body));
    check("get", "/v1/schedules/{id}", &app.get(&path).await);
    check("get", "/v1/schedules", &app.get("/v1/schedules").await);
    check(
        "get",
        "/v1/schedules",
        &app.get("/v1/schedules?cursor=x").await,
    );
    let patched = app
        .patch_schedule(id(&created.body), json!({"enabled": false}))
        .await;
    check("patch", "/v1/schedules/{id}", &patched);
    let trigger = format!("{path}/trigger");
    let made = app.send(app.request(Method::POST, &trigger)).await;
    check("post", "/v1/schedules/{id}/trigger", &made);
    let live = app.send(app.request(Method::POST, &trigger)).await;
    check("post", "/v1/schedules/{id}/trigger", &live);
    assert_eq!(live.status, StatusCode::CONFLICT);
    check(
        "get",
        "/v1/runs",
        &app.get(&format!("/v1/runs?schedule_id={}", id(&created.body)))
            .await,
    );
    app.delete(&format!("/v1/runs/{}", id(&made.body))).await;
    check("delete", "/v1/schedules/{id}", &app.delete(&path).await);
    check("get", "/v1/schedules/{id}", &app.get(&path).await);
    check("delete", "/v1/schedules/{id}", &app.delete(&path).await);
}
