//! Runs that pause for a decision (SPEC section 8): approvals and client
//! tools, answered over HTTP, durable across restarts.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::*;

impl TestApp {
    pub async fn answer(&self, id: &str, actions: Value) -> Reply {
        self.send(
            self.request(Method::POST, &format!("/v1/runs/{id}/actions"))
                .json(&json!({ "actions": actions })),
        )
        .await
    }
}

fn approval_run(tools: &[&str], script: Value) -> Value {
    json!({
        "prompt": "change things, with permission",
        "approval": {"tools": tools},
        "model": {"scripted": script}
    })
}

#[tokio::test]
async fn an_approved_call_runs_after_the_pause_and_the_run_goes_on() {
    let app = spawn_app().await;
    let run = app
        .create_run(approval_run(
            &["write_file"],
            json!([
                {"content": "", "tool_calls": [call("w1", "write_file", json!({"path": "a.txt", "content": "hi"}))],
                 "usage": {"input_tokens": 7, "output_tokens": 2}},
                {"content": "written"}
            ]),
        ))
        .await;
    let id = run["id"].as_str().unwrap();
    let paused = app.wait_status(id, "requires_action").await;
    assert_eq!(
        paused["pending_actions"],
        json!([{"call_id": "w1", "kind": "approval", "name": "write_file",
                "arguments": {"path": "a.txt", "content": "hi"}}])
    );
    assert_eq!(paused["steps"], 1);
    assert_eq!(paused["tool_calls"], 1);
    assert_eq!(paused["usage"]["input_tokens"], 7);
    // Nothing of the batch ran.
    let files = app.get(&format!("/v1/runs/{id}/workspace")).await;
    assert_eq!(files.body["files"], json!([]));
    let answered = app
        .answer(id, json!([{"call_id": "w1", "decision": "approve"}]))
        .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    assert_eq!(answered.body["pending_actions"], json!([]));
    let done = app.wait_status(id, "completed").await;
    assert_eq!(done["answer"], "written");
    assert_eq!(done["steps"], 2);
    let events = app.events(id).await;
    let kinds = types(&events);
    assert_eq!(
        kinds,
        [
            "run_start",
            "message",
            "model_start",
            "model_end",
            "message",
            "actions_required",
            "tool_start",
            "tool_end",
            "message",
            "model_start",
            "model_end",
            "message",
            "run_end"
        ]
    );
    assert_gap_free(&events);
    let file = app.get(&format!("/v1/runs/{id}/workspace/a.txt")).await;
    assert_eq!(file.text, "hi");
}

fn lookup_tool() -> Value {
    json!({
        "name": "lookup_order",
        "description": "Find an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"], "additionalProperties": false}
    })
}

fn client_run(script: Value) -> Value {
    json!({
        "prompt": "where is my order?",
        "client_tools": [lookup_tool()],
        "model": {"scripted": script}
    })
}

/// The tool results of a transcript, as (call id, content, is_error).
fn results(messages: &[Value]) -> Vec<(String, String, bool)> {
    messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["call_id"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
                m["is_error"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn denied_calls_never_run_and_tell_the_model_why() {
    let app = spawn_app().await;
    let run = app
        .create_run(approval_run(
            &["*"],
            json!([
                {"content": "", "tool_calls": [
                    call("w1", "write_file", json!({"path": "a.txt", "content": "x"})),
                    call("w2", "write_file", json!({"path": "b.txt", "content": "y"}))
                ]},
                {"content": "as you wish"}
            ]),
        ))
        .await;
    let id = run["id"].as_str().unwrap();
    app.wait_status(id, "requires_action").await;
    let answered = app
        .answer(
            id,
            json!([
                {"call_id": "w1", "decision": "deny", "reason": "not on Fridays"},
                {"call_id": "w2", "decision": "deny"}
            ]),
        )
        .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    let done = app.wait_status(id, "completed").await;
    assert_eq!(done["tool_calls"], 2);
    assert_eq!(
        results(&app.messages(id).await),
        [
            ("w1".into(), "Denied: not on Fridays".into(), true),
            ("w2".into(), "Denied by the client".into(), true)
        ]
    );
    let files = app.get(&format!("/v1/runs/{id}/workspace")).await;
    assert_eq!(files.body["files"], json!([]), "a denied write never ran");
}

#[tokio::test]
async fn answers_may_come_one_by_one_and_the_batch_then_runs_in_call_order() {
    // One slot, so that a run made later starts only once this one let go
    // of it.
    let app = spawn_with(|config| config.runs.max_concurrent = 1).await;
    let run = app
        .create_run(json!({
            "prompt": "mixed",
            "approval": {"tools": ["write_file"]},
            "client_tools": [lookup_tool()],
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("l1", "list_dir", json!({})),
                    call("w1", "write_file", json!({"path": "a.txt", "content": "x"})),
                    call("c1", "lookup_order", json!({"order_id": "42"}))
                ]},
                {"content": "done"}
            ]}
        }))
        .await;
    let id = run["id"].as_str().unwrap();
    let paused = app.wait_status(id, "requires_action").await;
    let kinds: Vec<_> = paused["pending_actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["call_id"].clone(), a["kind"].clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (json!("w1"), json!("approval")),
            (json!("c1"), json!("client_tool"))
        ],
        "a call that needs no answer is not pending"
    );
    let first = app
        .answer(
            id,
            json!([{"call_id": "c1", "output": {"status": "shipped"}}]),
        )
        .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(first.body["status"], "requires_action");
    assert_eq!(first.body["pending_actions"][0]["call_id"], "w1");
    assert_eq!(first.body["pending_actions"].as_array().unwrap().len(), 1);
    // Still paused: nothing of the batch ran yet. Had the first answer
    // resumed the run, it would have taken the only slot before a run made
    // after it, and let go of it only once its batch ran: that run's end
    // comes after all of it.
    let later = app.run_to_end(json!({"prompt": "meanwhile"})).await;
    assert_eq!(later["status"], "completed");
    assert_eq!(
        app.get(&format!("/v1/runs/{id}")).await.body["status"],
        "requires_action"
    );
    assert!(results(&app.messages(id).await).is_empty());
    let second = app
        .answer(id, json!([{"call_id": "w1", "decision": "approve"}]))
        .await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.text);
    assert_eq!(second.body["pending_actions"], json!([]));
    app.wait_status(id, "completed").await;
    let results = results(&app.messages(id).await);
    let ids: Vec<&str> = results.iter().map(|(id, ..)| id.as_str()).collect();
    assert_eq!(ids, ["l1", "w1", "c1"], "in call order");
    assert_eq!(results[2].1, r#"{"status":"shipped"}"#);
    assert!(!results[2].2);
    let file = app.get(&format!("/v1/runs/{id}/workspace/a.txt")).await;
    assert_eq!(file.text, "x");
}

#[tokio::test]
async fn a_client_tool_error_is_recorded_as_an_error_result() {
    let app = spawn_app().await;
    let run = app
        .create_run(client_run(json!([
            {"content": "", "tool_calls": [call("c1", "lookup_order", json!({"order_id": "42"}))]},
            {"content": "sorry"}
        ])))
        .await;
    let id = run["id"].as_str().unwrap();
    let paused = app.wait_status(id, "requires_action").await;
    assert_eq!(
        paused["pending_actions"],
        json!([{"call_id": "c1", "kind": "client_tool", "name": "lookup_order",
                "arguments": {"order_id": "42"}}])
    );
    assert_eq!(paused["client_tools"], json!([lookup_tool()]));
    let answered = app
        .answer(
            id,
            json!([{"call_id": "c1", "error": "order service down"}]),
        )
        .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    app.wait_status(id, "completed").await;
    assert_eq!(
        results(&app.messages(id).await),
        [("c1".into(), "order service down".into(), true)]
    );
}

#[tokio::test]
async fn invalid_client_tool_arguments_are_answered_to_the_model_without_a_pause() {
    let app = spawn_app().await;
    let done = app
        .run_to_end(client_run(json!([
            {"content": "", "tool_calls": [call("c1", "lookup_order", json!({"order_id": 42, "x": 1}))]},
            {"content": "I will ask properly"}
        ])))
        .await;
    assert_eq!(done["status"], "completed");
    let id = done["id"].as_str().unwrap();
    let results = results(&app.messages(id).await);
    assert_eq!(results.len(), 1);
    assert!(
        results[0].1.starts_with("Invalid arguments: ") && results[0].1.contains("$.order_id"),
        "{:?}",
        results[0]
    );
    assert!(results[0].2);
    let events = app.events(id).await;
    assert!(!types(&events).contains(&"actions_required"));
}

#[tokio::test]
async fn every_wrong_answer_is_refused_whole_and_nothing_of_it_is_applied() {
    let app = spawn_app().await;
    let run = app
        .create_run(json!({
            "prompt": "both kinds",
            "approval": {"tools": ["write_file"]},
            "client_tools": [lookup_tool()],
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("w1", "write_file", json!({"path": "a.txt", "content": "x"})),
                    call("c1", "lookup_order", json!({"order_id": "42"}))
                ]},
                {"content": "done"}
            ]}
        }))
        .await;
    let id = run["id"].as_str().unwrap();
    let before = app.wait_status(id, "requires_action").await;
    let refused = [
        (
            json!([{"call_id": "zz", "decision": "approve"}]),
            "is not a pending action",
        ),
        (
            json!([{"call_id": "c1", "decision": "approve"}]),
            "client's tool lookup_order",
        ),
        (
            json!([{"call_id": "w1", "output": 1}]),
            "waits for approval",
        ),
        (
            json!([{"call_id": "w1", "decision": "approve"}, {"call_id": "w1", "decision": "deny"}]),
            "twice",
        ),
        // A right answer beside a wrong one: neither is applied.
        (
            json!([{"call_id": "w1", "decision": "approve"}, {"call_id": "c1", "decision": "deny"}]),
            "actions[1]",
        ),
        (json!([{"call_id": "w1"}]), "exactly one of"),
        (
            json!([{"call_id": "w1", "decision": "approve", "output": 1}]),
            "exactly one of",
        ),
        (
            json!([{"call_id": "w1", "decision": "maybe"}]),
            "approve or deny",
        ),
        (
            json!([{"call_id": "w1", "decision": "approve", "reason": "x"}]),
            "only for a denial",
        ),
        (
            json!([{"call_id": "w1", "decision": "approve", "when": "now"}]),
            "when",
        ),
        (
            json!([{"call_id": "w1", "decision": "approve", "reason": null}]),
            "only for a denial",
        ),
        (
            json!([{"call_id": "w1", "decision": "deny", "reason": 5}]),
            "must be a string",
        ),
        (json!([]), "at least one"),
    ];
    for (actions, expected) in refused {
        let reply = app.answer(id, actions.clone()).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{actions}: {}",
            reply.text
        );
        assert_eq!(reply.error_code(), "invalid_request");
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{actions}: {message}");
        let now = app.get(&format!("/v1/runs/{id}")).await.body;
        assert_eq!(now, before, "nothing of {actions} was applied");
    }
    let unknown = app
        .answer(
            &uuid::Uuid::now_v7().to_string(),
            json!([{"call_id": "w1", "decision": "approve"}]),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);

    let partial = app
        .answer(id, json!([{"call_id": "w1", "decision": "approve"}]))
        .await;
    assert_eq!(partial.status, StatusCode::OK, "{}", partial.text);
    let again = app
        .answer(id, json!([{"call_id": "w1", "decision": "deny"}]))
        .await;
    assert_eq!(again.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(again.text.contains("answered already"), "{}", again.text);
    let last = app
        .answer(id, json!([{"call_id": "c1", "output": null}]))
        .await;
    assert_eq!(last.status, StatusCode::OK, "{}", last.text);
    let done = app.wait_status(id, "completed").await;
    let late = app
        .answer(id, json!([{"call_id": "c1", "output": 1}]))
        .await;
    assert_eq!(late.status, StatusCode::CONFLICT, "{}", late.text);
    assert_eq!(late.error_code(), "run_not_paused");
    assert!(late.text.contains("completed"), "{}", late.text);
    assert_eq!(app.get(&format!("/v1/runs/{id}")).await.body, done);
    let results = results(&app.messages(id).await);
    assert_eq!(results[1], ("c1".into(), "null".into(), false));

    // A running run is not paused either.
    let slow = app
        .create_run(json!({"prompt": "slow", "model": {"scripted": [{"delay_ms": 5000, "content": "late"}]}}))
        .await;
    let slow_id = slow["id"].as_str().unwrap();
    app.wait_status(slow_id, "running").await;
    let running = app
        .answer(slow_id, json!([{"call_id": "w1", "decision": "approve"}]))
        .await;
    assert_eq!(running.status, StatusCode::CONFLICT);
    assert_eq!(running.error_code(), "run_not_paused");
    app.delete(&format!("/v1/runs/{slow_id}")).await;
}

#[tokio::test]
async fn requests_with_wrong_client_tools_or_approvals_are_refused_and_create_nothing() {
    let app = spawn_app().await;
    let base = |extra: Value| {
        let mut body = json!({"prompt": "p", "model": {"scripted": [{"content": "x"}]}});
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    let many: Vec<Value> = (0..65)
        .map(|i| json!({"name": format!("t{i}"), "parameters": {"type": "object"}}))
        .collect();
    let cases = [
        (
            json!({"client_tools": [{"name": "bad name"}]}),
            "client_tools[0].name",
        ),
        (json!({"client_tools": [{"name": "read_file"}]}), "clashes"),
        (
            json!({"client_tools": [lookup_tool(), lookup_tool()]}),
            "client_tools[1].name",
        ),
        (
            json!({"client_tools": [{"name": "t", "parameters": {"type": "object", "properties": {"a": {"type": "nope"}}}}]}),
            "schema of tool t does not compile",
        ),
        (
            json!({"client_tools": [{"name": "t", "parameters": {"type": "string"}}]}),
            "\"type\": \"object\"",
        ),
        (
            json!({"client_tools": [{"name": "t", "parameters": {"type": "object", "$ref": "https://example.com/s.json"}}]}),
            "client_tools[0].parameters",
        ),
        (json!({"client_tools": many}), "at most 64"),
        (
            json!({"client_tools": [{"name": "t", "parameters": {"type": "object", "description": "x".repeat(17 * 1024)}}]}),
            "client_tools[0].parameters: at most 16384 bytes",
        ),
        (
            json!({"client_tools": [{"name": "t", "extra": 1}]}),
            "extra",
        ),
        (
            json!({"approval": {"tools": ["delete_everything"]}}),
            "approval.tools",
        ),
        (
            json!({"approval": {"tools": ["read_file", "read_file"]}}),
            "listed twice",
        ),
        (json!({"approval": {}}), "tools"),
        (
            json!({"limits": {"action_timeout_ms": 0}}),
            "limits.action_timeout_ms",
        ),
        (
            json!({"limits": {"action_timeout_ms": 86_400_001u64}}),
            "limits.action_timeout_ms",
        ),
    ];
    for (extra, expected) in cases {
        let reply = app.post_run(base(extra.clone())).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{extra}: {}",
            reply.text
        );
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{extra}: {message}");
    }
    let listed = app.get("/v1/runs").await;
    assert_eq!(listed.body["runs"], json!([]), "nothing was created");
    // A client tool may be approved, and approval of a client tool's name
    // is accepted (its calls wait for the client anyway).
    let accepted = app
        .post_run(base(json!({
            "client_tools": [lookup_tool()],
            "approval": {"tools": ["lookup_order", "write_file"]},
            "limits": {"action_timeout_ms": 1000}
        })))
        .await;
    assert_eq!(accepted.status, StatusCode::CREATED, "{}", accepted.text);
    assert_eq!(accepted.body["limits"]["action_timeout_ms"], 1000);
    assert_eq!(
        accepted.body["approval"]["tools"],
        json!(["lookup_order", "write_file"])
    );
}

#[tokio::test]
async fn a_paused_run_holds_no_slot() {
    let app = spawn_with(|config| config.runs.max_concurrent = 1).await;
    let paused = app
        .create_run(approval_run(
            &["list_dir"],
            json!([{"content": "", "tool_calls": [call("l1", "list_dir", json!({}))]}, {"content": "ok"}]),
        ))
        .await;
    let paused_id = paused["id"].as_str().unwrap();
    app.wait_status(paused_id, "requires_action").await;
    // The only slot is free: another run runs to its end meanwhile.
    let other = app
        .run_to_end(two_step("list_dir", json!({}), "done"))
        .await;
    assert_eq!(other["status"], "completed");
    let metrics = app.get("/metrics").await.text;
    assert!(metrics.contains("agent_runner_active_runs 0"), "{metrics}");
    assert!(
        metrics.contains("agent_runner_runs_paused_total 1"),
        "{metrics}"
    );
    // Listed by its status, and only it.
    let waiting = app.get("/v1/runs?status=requires_action").await;
    let ids: Vec<&str> = waiting.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [paused_id]);
    app.answer(paused_id, json!([{"call_id": "l1", "decision": "approve"}]))
        .await;
    assert_eq!(
        app.wait_status(paused_id, "completed").await["answer"],
        "ok"
    );
    let waiting = app.get("/v1/runs?status=requires_action").await;
    assert_eq!(waiting.body["runs"], json!([]));
}

#[tokio::test]
async fn a_pause_that_no_one_answers_ends_the_run_timeout() {
    let app = spawn_app().await;
    let mut body = approval_run(
        &["list_dir"],
        json!([{"content": "", "tool_calls": [call("l1", "list_dir", json!({}))]}, {"content": "ok"}]),
    );
    body["limits"] = json!({"action_timeout_ms": 300});
    let run = app.create_run(body).await;
    let id = run["id"].as_str().unwrap();
    let ended = app.wait_status(id, "timeout").await;
    assert!(
        ended["error"]
            .as_str()
            .unwrap()
            .contains("No answer came in time"),
        "{ended}"
    );
    assert_eq!(ended["pending_actions"], json!([]));
    assert_eq!(ended["steps"], 1);
    assert!(ended["finished_at"].is_string());
    let events = app.events(id).await;
    let last = events.last().unwrap();
    assert_eq!(last.data["status"], "timeout");
    assert_eq!(last.data["tool_calls"], 1);
    assert_gap_free(&events);
    let late = app
        .answer(id, json!([{"call_id": "l1", "decision": "approve"}]))
        .await;
    assert_eq!(late.status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn the_run_timeout_counts_running_time_only() {
    let app = spawn_app().await;
    let script = |delay: u64| {
        json!([
            {"delay_ms": delay, "content": "", "tool_calls": [call("l1", "list_dir", json!({}))]},
            {"delay_ms": delay, "content": "ok"}
        ])
    };
    // 2 x 400 ms of running time within 2000 ms, around a pause longer than that.
    let mut within = approval_run(&["list_dir"], script(400));
    within["limits"] = json!({"timeout_ms": 2000});
    let within = app.create_run(within).await;
    let within_id = within["id"].as_str().unwrap();
    // 2 x 1200 ms of running time: over 2000 ms only once the pause is past.
    let mut over = approval_run(&["list_dir"], script(1200));
    over["limits"] = json!({"timeout_ms": 2000});
    let over = app.create_run(over).await;
    let over_id = over["id"].as_str().unwrap();
    app.wait_status(within_id, "requires_action").await;
    app.wait_status(over_id, "requires_action").await;
    // The pauses outlast the budget: a run with the same budget, made once
    // both have paused and never paused itself, ends `timeout` after both
    // would have, had their pauses counted.
    let mut clock = json!({"prompt": "the clock", "model": {"scripted": [{"delay_ms": 60000, "content": "late"}]}});
    clock["limits"] = json!({"timeout_ms": 2000});
    let clock = app.create_run(clock).await;
    app.wait_status(clock["id"].as_str().unwrap(), "timeout")
        .await;
    for id in [within_id, over_id] {
        let reply = app
            .answer(id, json!([{"call_id": "l1", "decision": "approve"}]))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
    assert_eq!(
        app.wait_status(within_id, "completed").await["answer"],
        "ok"
    );
    let over = app.wait_status(over_id, "timeout").await;
    assert_eq!(
        over["steps"], 1,
        "the deadline came during the second model call"
    );
}

#[tokio::test]
async fn deleting_a_paused_run_ends_it_aborted() {
    let app = spawn_app().await;
    let run = app
        .create_run(client_run(json!([
            {"content": "", "tool_calls": [call("c1", "lookup_order", json!({"order_id": "1"}))]},
            {"content": "never"}
        ])))
        .await;
    let id = run["id"].as_str().unwrap();
    app.wait_status(id, "requires_action").await;
    // A follower that has read what is stored so far follows the run live.
    let mut following = app.follow(id).await;
    following.until("actions_required").await;
    let deleted = app.delete(&format!("/v1/runs/{id}")).await;
    assert_eq!(deleted.status, StatusCode::ACCEPTED, "{}", deleted.text);
    assert_eq!(deleted.body["status"], "aborted");
    assert_eq!(deleted.body["pending_actions"], json!([]));
    let stored = app.get(&format!("/v1/runs/{id}")).await.body;
    assert_eq!(stored["status"], "aborted");
    assert_eq!(stored["tool_calls"], 1);
    // A follower of the paused run sees its end.
    let events = following.rest().await;
    assert_eq!(events.last().unwrap().data["status"], "aborted");
    assert_eq!(
        types(&events).iter().filter(|t| **t == "run_end").count(),
        1
    );
    let again = app.delete(&format!("/v1/runs/{id}")).await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    let late = app
        .answer(id, json!([{"call_id": "c1", "output": 1}]))
        .await;
    assert_eq!(late.status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn wait_true_answers_once_the_run_ends_across_its_pause() {
    let app = spawn_app().await;
    let body = approval_run(
        &["list_dir"],
        json!([{"content": "", "tool_calls": [call("l1", "list_dir", json!({}))]}, {"content": "ok"}]),
    );
    let request = app.request(Method::POST, "/v1/runs?wait=true").json(&body);
    let waiting = tokio::spawn(async move { request.send().await.unwrap() });
    let paused = app.wait_listed("requires_action").await;
    let id = paused["id"].as_str().unwrap();
    app.answer(id, json!([{"call_id": "l1", "decision": "approve"}]))
        .await;
    // A pause is not an end: the one answer the request gets is the
    // completed run, which exists only once the pause was answered (an
    // answer at the pause would have been the paused run, or a 503).
    let response = waiting.await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let run: Value = response.json().await.unwrap();
    assert_eq!(run["id"], id);
    assert_eq!(run["status"], "completed");
    assert_eq!(run["answer"], "ok");
}

#[tokio::test]
async fn a_pause_survives_sigkill_and_resumes_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, address) = start_binary(&dir);
    let server = Remote::new(address);
    let run = server
        .post_json(
            "/v1/runs",
            &approval_run(
                &["*"],
                json!([
                    {"content": "", "tool_calls": [
                        call("w1", "write_file", json!({"path": "a.txt", "content": "one"})),
                        call("w2", "write_file", json!({"path": "b.txt", "content": "two"}))
                    ]},
                    {"content": "both written"}
                ]),
            ),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    server.wait_status(&id, "requires_action").await;
    let partial = server
        .post_json(
            &format!("/v1/runs/{id}/actions"),
            &json!({"actions": [{"call_id": "w1", "decision": "approve"}]}),
        )
        .await;
    assert_eq!(partial["status"], "requires_action");
    child.kill().unwrap();
    child.wait().unwrap();

    let (mut child, address) = start_binary(&dir);
    let server = Remote::new(address);
    let paused = server.get_json(&format!("/v1/runs/{id}")).await;
    assert_eq!(
        paused["status"], "requires_action",
        "still paused after the restart"
    );
    assert_eq!(paused["pending_actions"][0]["call_id"], "w2");
    assert_eq!(paused["pending_actions"].as_array().unwrap().len(), 1);
    let answered = server
        .post_json(
            &format!("/v1/runs/{id}/actions"),
            &json!({"actions": [{"call_id": "w2", "decision": "deny"}]}),
        )
        .await;
    assert_eq!(answered["status"], "queued");
    let done = server.wait_status(&id, "completed").await;
    assert_eq!(done["answer"], "both written");
    assert_eq!(
        done["started_at"], paused["started_at"],
        "its first start stays"
    );
    let (events, _) = read_sse(server.get(&format!("/v1/runs/{id}/events")).await).await;
    assert_gap_free(&events);
    let kinds = types(&events);
    for once in ["run_start", "actions_required", "run_end"] {
        assert_eq!(kinds.iter().filter(|k| **k == once).count(), 1, "{kinds:?}");
    }
    let messages = server.get_json(&format!("/v1/runs/{id}/messages")).await;
    let messages = messages["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool", "assistant"]);
    assert_eq!(messages[3]["content"], "Denied by the client");
    let file = server.get(&format!("/v1/runs/{id}/workspace/a.txt")).await;
    assert_eq!(file.text().await.unwrap(), "one");
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn an_answered_pause_waiting_for_a_slot_resumes_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let one_slot = [("AGENT_RUNNER_RUNS__MAX_CONCURRENT", "1")];
    let (mut child, address) = start_binary_with(&dir, &one_slot);
    let server = Remote::new(address);
    let run = server
        .post_json(
            "/v1/runs",
            &approval_run(
                &["list_dir"],
                json!([{"content": "", "tool_calls": [call("l1", "list_dir", json!({}))]}, {"content": "resumed"}]),
            ),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    server.wait_status(&id, "requires_action").await;
    // The slot is taken by a long run; the answered pause waits for it.
    let long = server
        .post_json(
            "/v1/runs",
            // Not resumed after the kill: it frees the slot.
            &json!({"prompt": "long", "limits": {"max_resumes": 0},
                    "model": {"scripted": [{"delay_ms": 60000, "content": "late"}]}}),
        )
        .await;
    server
        .wait_status(long["id"].as_str().unwrap(), "running")
        .await;
    let answered = server
        .post_json(
            &format!("/v1/runs/{id}/actions"),
            &json!({"actions": [{"call_id": "l1", "decision": "approve"}]}),
        )
        .await;
    assert_eq!(answered["status"], "queued");
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_at = chrono::Utc::now();

    let (mut child, address) = start_binary_with(&dir, &one_slot);
    let server = Remote::new(address);
    // At once on SQLite; on PostgreSQL once the dead server's lease ran out.
    server
        .wait_status(long["id"].as_str().unwrap(), "interrupted")
        .await;
    let done = server.wait_status(&id, "completed").await;
    assert_eq!(done["answer"], "resumed");
    // It waited through the kill: it ended in the second process.
    let finished_at: chrono::DateTime<chrono::Utc> =
        done["finished_at"].as_str().unwrap().parse().unwrap();
    assert!(finished_at > killed_at, "{done}");
    let (events, _) = read_sse(server.get(&format!("/v1/runs/{id}/events")).await).await;
    assert_gap_free(&events);
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");
}
