//! The run object, listing, transcripts and idempotent creation.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn a_created_run_is_answered_with_its_object_and_location() {
    let app = spawn_app().await;
    let reply = app
        .post_run(json!({
            "prompt": "Inspect the project",
            "model": {"scripted": [{"content": "Done"}]},
            "tools": ["read_file", "list_dir"],
            "limits": {"max_steps": 3, "max_tool_calls": 4, "timeout_ms": 5000},
            "context": {"max_context_chars": 2000, "max_tool_result_chars": 300},
            "metadata": {"ticket": "ABC-1"}
        }))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    let run = &reply.body;
    let id = run["id"].as_str().unwrap();
    assert_eq!(reply.headers["location"], format!("/v1/runs/{id}").as_str());
    let keys: Vec<&str> = run
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = vec![
        "id",
        "status",
        "prompt",
        "answer",
        "error",
        "steps",
        "tool_calls",
        "usage",
        "resumes",
        "limits",
        "context",
        "tools",
        "commands",
        "model",
        "metadata",
        "pending_actions",
        "approval",
        "client_tools",
        "mcp_servers",
        "instructions",
        "thread_id",
        "previous_run_id",
        "agent",
        "output_schema",
        "output",
        "changes",
        "parent_run_id",
        "attempt",
        "attempt_policy",
        "attempts",
        "chosen_attempt",
        "schedule_id",
        "schedule_tick",
        "subagents",
        "root_run_id",
        "usage_total",
        "created_at",
        "started_at",
        "finished_at",
        "trace_id",
    ];
    expected.sort();
    let mut keys = keys;
    keys.sort();
    assert_eq!(keys, expected);
    assert_eq!(run["prompt"], "Inspect the project");
    assert_eq!(run["resumes"], 0);
    assert_eq!(
        run["limits"],
        json!({"max_steps": 3, "max_tool_calls": 4, "timeout_ms": 5000, "action_timeout_ms": 3_600_000, "max_resumes": 3, "output_retries": 2})
    );
    assert_eq!(
        run["context"],
        json!({"max_context_chars": 2000, "max_tool_result_chars": 300})
    );
    assert_eq!(run["tools"], json!(["read_file", "list_dir"]));
    assert_eq!(run["commands"], json!([]));
    assert_eq!(run["model"], json!({"provider": "scripted"}));
    assert_eq!(run["metadata"], json!({"ticket": "ABC-1"}));
    assert!(chrono::DateTime::parse_from_rfc3339(run["created_at"].as_str().unwrap()).is_ok());
    assert!(run["created_at"].as_str().unwrap().ends_with('Z'));

    let done = app.wait_terminal(id).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["answer"], "Done");
    for key in ["started_at", "finished_at"] {
        assert!(chrono::DateTime::parse_from_rfc3339(done[key].as_str().unwrap()).is_ok());
    }
    assert_eq!(done["error"], Value::Null);
    // The script never shows.
    assert!(
        !app.get(&format!("/v1/runs/{id}"))
            .await
            .text
            .contains("scripted\":[")
    );
}

#[tokio::test]
async fn runs_are_listed_newest_first_with_a_cursor_and_a_status_filter() {
    let app = spawn_app().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let script = if i % 2 == 0 {
            json!([{"content": "ok"}])
        } else {
            json!([])
        };
        let run = app
            .run_to_end(json!({"prompt": format!("run {i}"), "model": {"scripted": script}}))
            .await;
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    ids.reverse();
    let page = app.get("/v1/runs?limit=2").await.body;
    let first: Vec<_> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(first, ids[..2]);
    let cursor = page["next_cursor"].as_str().unwrap();
    let page = app
        .get(&format!("/v1/runs?limit=2&cursor={cursor}"))
        .await
        .body;
    let second: Vec<_> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(second, ids[2..4]);
    let cursor = page["next_cursor"].as_str().unwrap();
    let page = app
        .get(&format!("/v1/runs?limit=2&cursor={cursor}"))
        .await
        .body;
    assert_eq!(page["runs"].as_array().unwrap().len(), 1);
    assert_eq!(page["next_cursor"], Value::Null);

    let failed = app.get("/v1/runs?status=model_error").await.body;
    let statuses: Vec<_> = failed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].clone())
        .collect();
    assert_eq!(statuses, vec![json!("model_error"); 2]);
    let default = app.get("/v1/runs").await.body;
    assert_eq!(default["runs"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn an_idempotency_key_returns_the_first_run_and_refuses_another_body() {
    let app = spawn_app().await;
    let body = json!({"prompt": "once", "model": {"scripted": [{"content": "done"}]}});
    let create = |body: Value, key: &str| {
        app.send(
            app.request(Method::POST, "/v1/runs")
                .header("Idempotency-Key", key)
                .json(&body),
        )
    };
    let first = create(body.clone(), "key-1").await;
    assert_eq!(first.status, 201);
    // Same body with its keys in another order: still the same request.
    let reordered = json!({"model": {"scripted": [{"content": "done"}]}, "prompt": "once"});
    let again = create(reordered, "key-1").await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["id"], first.body["id"]);
    let other = create(json!({"prompt": "twice"}), "key-1").await;
    assert_eq!(other.status, 409);
    assert_eq!(other.error_code(), "idempotency_key_reused");
    let fresh = create(body, "key-2").await;
    assert_eq!(fresh.status, 201);
    assert_ne!(fresh.body["id"], first.body["id"]);
    assert_eq!(
        app.get("/v1/runs").await.body["runs"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// `?wait=true` answers with the final run object from memory once its end
/// is stored: it is exactly what storage then serves, for a run that started
/// at once and for one that queued first.
#[tokio::test]
async fn a_waited_run_is_answered_exactly_as_it_is_stored() {
    let app = spawn_with(|config| config.runs.max_concurrent = 1).await;
    let slow =
        json!({"prompt": "first", "model": {"scripted": [{"delay_ms": 300, "content": "one"}]}});
    let quick = two_step("list_dir", json!({}), "two");
    // The second is made once the first has the only slot.
    let (first, second) = tokio::join!(app.run_to_end(slow), async {
        app.wait_listed("running").await;
        app.run_to_end(quick).await
    });
    for waited in [first, second] {
        assert_eq!(waited["status"], "completed", "{waited}");
        let id = waited["id"].as_str().unwrap();
        let stored = app.get(&format!("/v1/runs/{id}")).await.body;
        assert_eq!(waited, stored);
        assert!(waited["started_at"].is_string() && waited["finished_at"].is_string());
    }
}

/// PostgreSQL's text holds no NUL: an answer with one (a model's output) is
/// stored, on either engine, with U+FFFD in its place, and answered so.
#[tokio::test]
async fn an_answer_with_a_nul_character_is_stored_with_a_replacement() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(json!({"prompt": "x", "model": {"scripted": [{"content": "a\u{0}b"}]}}))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "a\u{FFFD}b");
    let stored = app
        .get(&format!("/v1/runs/{}", run["id"].as_str().unwrap()))
        .await;
    assert_eq!(stored.body["answer"], "a\u{FFFD}b");
}
