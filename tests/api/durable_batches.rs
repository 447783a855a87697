//! Durable runs (SPEC sections 14 and 25) whose process dies while an
//! answered batch runs: the batch counted once, its denials and edits kept.

use std::path::Path;

use serde_json::json;

use crate::durable::{appending, assert_whole, kill, messages, start};
use crate::helpers::{call, eventually};

/// A batch counted whole when the run paused for it is not counted again
/// when the process dies while the answered batch runs.
#[tokio::test]
async fn a_crash_in_an_answered_batch_counts_its_calls_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = appending(false);
    let (mut child, server) = start(&dir, &config);
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "append twice",
                "tools": ["run_command", "list_dir"],
                "commands": ["append"],
                "approval": {"tools": ["run_command"]},
                "model": {"scripted": [
                    {"content": "", "tool_calls": [
                        call("l", "list_dir", json!({})),
                        call("a", "run_command", json!({"command": "append"}))
                    ]},
                    {"content": "done"}
                ]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let paused = server.wait_status(&id, "requires_action").await;
    assert_eq!(paused["tool_calls"], 2, "counted at the pause");
    let answered = server
        .client
        .post(format!("{}/v1/runs/{id}/actions", server.address))
        .json(&json!({"actions": [{"call_id": "a", "decision": "approve"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    let log = dir.path().join("workspaces").join(&id).join("log.txt");
    eventually("the command to run", async || {
        Path::exists(&log).then_some(())
    })
    .await;
    kill(&mut child);

    let (mut child, server) = start(&dir, &config);
    let done = server.wait_status(&id, "completed").await;
    assert_eq!(done["resumes"], 1);
    assert_eq!(done["tool_calls"], 2, "{done}");
    assert_eq!(done["steps"], 2, "{done}");
    let transcript = messages(&server, &id).await;
    assert_whole(&transcript);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "line\n");
    kill(&mut child);
}

/// The answers of a batch outlive a crash while it runs: a call denied
/// stays denied, and one approved with other arguments runs with those,
/// never with the model's proposal (SPEC sections 14 and 25).
#[tokio::test]
async fn a_crash_in_an_answered_batch_keeps_its_denials_and_edits() {
    let dir = tempfile::tempdir().unwrap();
    let config = appending(false);
    let (mut child, server) = start(&dir, &config);
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "append, then write two files",
                "tools": ["run_command", "write_file"],
                "commands": ["append"],
                "approval": {"tools": ["*"]},
                "model": {"scripted": [
                    {"content": "", "tool_calls": [
                        call("a", "run_command", json!({"command": "append"})),
                        call("w", "write_file", json!({"path": "b.txt", "content": "proposed"})),
                        call("d", "write_file", json!({"path": "c.txt", "content": "denied"}))
                    ]},
                    {"content": "done"}
                ]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    server.wait_status(&id, "requires_action").await;
    let answered = server
        .client
        .post(format!("{}/v1/runs/{id}/actions", server.address))
        .json(&json!({"actions": [
            {"call_id": "a", "decision": "approve"},
            {"call_id": "w", "decision": "approve",
             "arguments": {"path": "b.txt", "content": "edited"}},
            {"call_id": "d", "decision": "deny", "reason": "not that one"}
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    let workspace = dir.path().join("workspaces").join(&id);
    eventually("the command to run", async || {
        Path::exists(&workspace.join("log.txt")).then_some(())
    })
    .await;
    kill(&mut child);

    let (mut child, server) = start(&dir, &config);
    let done = server.wait_status(&id, "completed").await;
    assert_eq!(done["resumes"], 1, "{done}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("b.txt")).unwrap(),
        "edited"
    );
    assert!(!workspace.join("c.txt").exists(), "a denied call ran");
    let transcript = messages(&server, &id).await;
    assert_whole(&transcript);
    let result = |id: &str| {
        transcript
            .iter()
            .find(|m| m["role"] == "tool" && m["call_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(result("w")["edited"], true, "{transcript:?}");
    assert_eq!(result("w")["arguments"]["content"], "edited");
    assert_eq!(result("d")["content"], "Denied: not that one");
    kill(&mut child);
}
