//! Edited approvals (SPEC section 25): an approval answered with other
//! arguments runs those, checked against the tool's schema first; the
//! transcript keeps the proposal, the result says what ran.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

fn write_run(calls: Vec<Value>) -> Value {
    json!({
        "prompt": "write it, with permission",
        "tools": ["write_file"],
        "approval": {"tools": ["write_file"]},
        "model": {"scripted": [
            {"content": "", "tool_calls": calls},
            {"content": "written"}
        ]}
    })
}

#[tokio::test]
async fn an_approval_with_arguments_runs_them_and_tells_the_model() {
    let app = spawn_app().await;
    let run = app
        .create_run(write_run(vec![call(
            "w1",
            "write_file",
            json!({"path": "a.txt", "content": "rm -rf /"}),
        )]))
        .await;
    let id = run["id"].as_str().unwrap();
    let paused = app.wait_status(id, "requires_action").await;
    // The tool's schema stays with the pause: clients see the action alone.
    assert_eq!(
        paused["pending_actions"],
        json!([{"call_id": "w1", "kind": "approval", "name": "write_file",
                "arguments": {"path": "a.txt", "content": "rm -rf /"}}])
    );
    let edited = json!({"path": "a.txt", "content": "echo safe"});
    let answered = app
        .answer(
            id,
            json!([{"call_id": "w1", "decision": "approve", "arguments": edited}]),
        )
        .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    let done = app.wait_status(id, "completed").await;
    assert_eq!(done["answer"], "written");
    let file = app.get(&format!("/v1/runs/{id}/workspace/a.txt")).await;
    assert_eq!(file.text, "echo safe");

    let messages = app.messages(id).await;
    // The assistant message keeps what the model proposed.
    assert_eq!(
        messages[1]["tool_calls"][0]["arguments"]["content"],
        "rm -rf /"
    );
    let result = &messages[2];
    assert_eq!(
        (&result["role"], &result["edited"]),
        (&json!("tool"), &json!(true))
    );
    assert_eq!(result["arguments"], edited);
    let content = result["content"].as_str().unwrap();
    assert!(
        content.starts_with("[A reviewer changed the arguments of this call")
            && content.contains(&edited.to_string()),
        "{content}"
    );
    let events = app.events(id).await;
    let start = events.iter().find(|e| e.event == "tool_start").unwrap();
    assert_eq!(start.data["edited"], true, "{:?}", start.data);
    assert_eq!(start.data["arguments"], edited);
    let proposal = events
        .iter()
        .find(|e| e.event == "actions_required")
        .unwrap();
    assert!(proposal.data["actions"][0].get("input_schema").is_none());
}

#[tokio::test]
async fn an_invalid_edit_is_refused_whole_and_nothing_is_answered() {
    let app = spawn_app().await;
    let run = app
        .create_run(write_run(vec![
            call("w1", "write_file", json!({"path": "a.txt", "content": "a"})),
            call("w2", "write_file", json!({"path": "b.txt", "content": "b"})),
        ]))
        .await;
    let id = run["id"].as_str().unwrap();
    app.wait_status(id, "requires_action").await;
    let refused = [
        (
            json!([{"call_id": "w1", "decision": "approve"},
                   {"call_id": "w2", "decision": "approve", "arguments": {"path": 7}}]),
            "actions[1].arguments: not valid for write_file",
        ),
        (
            json!([{"call_id": "w1", "decision": "approve",
                    "arguments": {"path": "a.txt", "content": "a", "mode": "x"}}]),
            "actions[0].arguments: not valid for write_file",
        ),
        (
            json!([{"call_id": "w1", "decision": "deny", "arguments": {"path": "a.txt"}}]),
            "actions[0].arguments are only for an approval",
        ),
        (
            json!([{"call_id": "w1", "decision": "approve", "arguments": "a.txt"}]),
            "actions[0].arguments must be an object",
        ),
        (
            json!([{"call_id": "w1", "output": "x", "arguments": {}}]),
            "only for an approval",
        ),
    ];
    for (answers, why) in refused {
        let reply = app.answer(id, answers.clone()).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{answers}: {}",
            reply.text
        );
        assert_eq!(reply.error_code(), "invalid_request", "{}", reply.text);
        assert!(reply.text.contains(why), "{answers}: {}", reply.text);
    }
    // Nothing of those was applied: both still wait.
    let run = app.get(&format!("/v1/runs/{id}")).await;
    assert_eq!(run.body["status"], "requires_action");
    assert_eq!(run.body["pending_actions"].as_array().unwrap().len(), 2);
    let answered = app
        .answer(
            id,
            json!([{"call_id": "w1", "decision": "approve"},
                   {"call_id": "w2", "decision": "approve",
                    "arguments": {"path": "c.txt", "content": "c"}}]),
        )
        .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    app.wait_status(id, "completed").await;
    let files = app.get(&format!("/v1/runs/{id}/workspace")).await;
    let names: Vec<&str> = files.body["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.txt", "c.txt"], "{}", files.text);
}

#[tokio::test]
async fn an_invalid_edit_through_a_parent_answers_none_of_its_children() {
    let app = spawn_app().await;
    let writer = |id: &str, path: &str| {
        json!({"tools": ["write_file"], "approval": {"tools": ["write_file"]},
               "model": {"scripted": [
                   {"content": "", "tool_calls": [call(id, "write_file", json!({"path": path, "content": "x"}))]},
                   {"content": "written"}]}})
    };
    let run = app
        .create_run(json!({
            "prompt": "delegate the writing",
            "subagents": {"one": writer("w1", "one.txt"), "two": writer("w2", "two.txt")},
            "model": {"scripted": [
                {"content": "", "tool_calls": [
                    call("d1", "delegate", json!({"agent": "one", "prompt": "write"})),
                    call("d2", "delegate", json!({"agent": "two", "prompt": "write"}))]},
                {"content": "done"}]}
        }))
        .await;
    let id = run["id"].as_str().unwrap();
    let both = eventually("both children's actions on the parent", async || {
        let run = app.get(&format!("/v1/runs/{id}")).await;
        (run.body["pending_actions"].as_array().map(Vec::len) == Some(2)).then_some(run)
    })
    .await;
    assert_eq!(both.body["status"], "requires_action");
    let refused = app
        .answer(
            id,
            json!([{"call_id": "w1", "decision": "approve"},
                   {"call_id": "w2", "decision": "approve", "arguments": {"path": 2}}]),
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert!(
        refused
            .text
            .contains("actions[1].arguments: not valid for write_file"),
        "{}",
        refused.text
    );
    // The first child was not answered either.
    let children = app.get(&format!("/v1/runs?parent_run_id={id}")).await;
    for child in children.body["runs"].as_array().unwrap() {
        assert_eq!(child["status"], "requires_action", "{child}");
        assert_eq!(child["pending_actions"].as_array().unwrap().len(), 1);
    }
    let answered = app
        .answer(
            id,
            json!([{"call_id": "w1", "decision": "approve"},
                   {"call_id": "w2", "decision": "approve",
                    "arguments": {"path": "edited.txt", "content": "y"}}]),
        )
        .await;
    assert_eq!(answered.status, StatusCode::OK, "{}", answered.text);
    let done = app.wait_status(id, "completed").await;
    assert_eq!(done["answer"], "done");
    let file = app
        .get(&format!("/v1/runs/{id}/workspace/edited.txt"))
        .await;
    assert_eq!(file.text, "y");
}
