//! Durable runs (SPEC sections 14 and 25) whose process dies while an
//! answered batch runs: the batch counted once, its denials and edits kept.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::durable::{appending, assert_whole, kill, messages, start};
use crate::helpers::{Remote, ServerProcess, eventually};

/// A run whose first response is the batch `calls` (a call `a` of the
/// `append` preset among them, approval needed for `approval`): paused
/// (as `paused` shows it), answered with `answers`, killed while `a` runs,
/// restarted. The run as it completed, its transcript, its workspace, and
/// the server that finished it (to be killed).
struct Crashed {
    paused: Value,
    done: Value,
    transcript: Vec<Value>,
    workspace: PathBuf,
    child: ServerProcess,
    _dir: tempfile::TempDir,
}

async fn crashed_in_answered_batch(
    tools: &[&str],
    approval: &[&str],
    calls: Value,
    answers: Value,
) -> Crashed {
    let dir = tempfile::tempdir().unwrap();
    let config = appending(false);
    let (mut child, server) = start(&dir, &config);
    let run = server
        .post_json(
            "/v1/runs",
            &json!({
                "prompt": "append, and more",
                "tools": tools,
                "commands": ["append"],
                "approval": {"tools": approval},
                "model": {"scripted": [{"content": "", "tool_calls": calls}, {"content": "done"}]}
            }),
        )
        .await;
    let id = run["id"].as_str().unwrap().to_owned();
    let paused = server.wait_status(&id, "requires_action").await;
    answer(&server, &id, answers).await;
    let workspace = dir.path().join("workspaces").join(&id);
    eventually("the command to run", async || {
        Path::exists(&workspace.join("log.txt")).then_some(())
    })
    .await;
    kill(&mut child);

    let (child, server) = start(&dir, &config);
    let done = server.wait_status(&id, "completed").await;
    let transcript = messages(&server, &id).await;
    assert_whole(&transcript);
    Crashed {
        paused,
        done,
        transcript,
        workspace,
        child,
        _dir: dir,
    }
}

async fn answer(server: &Remote, id: &str, answers: Value) {
    let answered = server
        .client
        .post(format!("{}/v1/runs/{id}/actions", server.address))
        .json(&json!({ "actions": answers }))
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
}

/// A batch counted whole when the run paused for it is not counted again
/// when the process dies while the answered batch runs.
#[tokio::test]
async fn a_crash_in_an_answered_batch_counts_its_calls_once() {
    let mut crashed = crashed_in_answered_batch(
        &["run_command", "list_dir"],
        &["run_command"],
        json!([
            {"id": "l", "name": "list_dir", "arguments": {}},
            {"id": "a", "name": "run_command", "arguments": {"command": "append"}}
        ]),
        json!([{"call_id": "a", "decision": "approve"}]),
    )
    .await;
    assert_eq!(crashed.paused["tool_calls"], 2, "counted at the pause");
    let done = &crashed.done;
    assert_eq!(done["resumes"], 1);
    assert_eq!(done["tool_calls"], 2, "{done}");
    assert_eq!(done["steps"], 2, "{done}");
    assert_eq!(
        std::fs::read_to_string(crashed.workspace.join("log.txt")).unwrap(),
        "line\n"
    );
    kill(&mut crashed.child);
}

/// The answers of a batch outlive a crash while it runs: a call denied
/// stays denied, and one approved with other arguments runs with those,
/// never with the model's proposal (SPEC sections 14 and 25).
#[tokio::test]
async fn a_crash_in_an_answered_batch_keeps_its_denials_and_edits() {
    let mut crashed = crashed_in_answered_batch(
        &["run_command", "write_file"],
        &["*"],
        json!([
            {"id": "a", "name": "run_command", "arguments": {"command": "append"}},
            {"id": "w", "name": "write_file", "arguments": {"path": "b.txt", "content": "proposed"}},
            {"id": "d", "name": "write_file", "arguments": {"path": "c.txt", "content": "denied"}}
        ]),
        json!([
            {"call_id": "a", "decision": "approve"},
            {"call_id": "w", "decision": "approve",
             "arguments": {"path": "b.txt", "content": "edited"}},
            {"call_id": "d", "decision": "deny", "reason": "not that one"}
        ]),
    )
    .await;
    let done = &crashed.done;
    assert_eq!(done["resumes"], 1, "{done}");
    let workspace = &crashed.workspace;
    assert_eq!(
        std::fs::read_to_string(workspace.join("b.txt")).unwrap(),
        "edited"
    );
    assert!(!workspace.join("c.txt").exists(), "a denied call ran");
    let transcript = &crashed.transcript;
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
    kill(&mut crashed.child);
}
