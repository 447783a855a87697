//! A busy thread (SPEC section 23): a follow-up of a live run, with
//! `multitask` `enqueue`, `interrupt` or `rollback`.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

/// A run that writes `path` (asking for approval first, so that it stays
/// live until the test answers) and then answers `answer`.
fn paused_writer(path: &str, content: &str, answer: &str) -> Value {
    json!({
        "prompt": format!("write {path}"),
        "approval": {"tools": ["write_file"]},
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("w1", "write_file", json!({"path": path, "content": content}))]},
            {"content": answer}
        ]}
    })
}

/// A follow-up of `previous` that reads `path` and answers what it found.
fn reader(previous: &str, multitask: &str, path: &str) -> Value {
    json!({
        "prompt": format!("read {path}"),
        "previous_run_id": previous,
        "multitask": multitask,
        "model": {"scripted": [
            {"content": "", "tool_calls": [call("r1", "read_file", json!({"path": path}))]},
            {"content": "read it"}
        ]}
    })
}

fn id(run: &Value) -> &str {
    run["id"].as_str().unwrap()
}

async fn approve(app: &TestApp, run: &str) {
    let reply = app
        .send(
            app.request(reqwest::Method::POST, &format!("/v1/runs/{run}/actions"))
                .json(&json!({"actions": [{"call_id": "w1", "decision": "approve"}]})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

/// What the run's `read_file` call returned.
async fn read_result(app: &TestApp, run: &str) -> String {
    let messages = app.messages(run).await;
    let result = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool result in {messages:?}"));
    result["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_enqueued_follow_up_waits_for_the_live_run_and_continues_from_its_end() {
    let app = spawn_app().await;
    let live = app
        .create_run(paused_writer("notes.txt", "from the first run", "written"))
        .await;
    app.wait_status(id(&live), "requires_action").await;

    let queued = app
        .post_run(reader(id(&live), "enqueue", "notes.txt"))
        .await;
    assert_eq!(queued.status, StatusCode::CREATED, "{}", queued.text);
    assert_eq!(queued.body["status"], "queued");
    assert_eq!(queued.body["previous_run_id"], id(&live));
    assert_eq!(queued.body["thread_id"], live["thread_id"]);
    // A second message while the thread is busy goes behind the first.
    let second = app
        .create_run(json!({"prompt": "and then?", "previous_run_id": id(&live),
                           "multitask": "enqueue", "model": {"scripted": [{"content": "done"}]}}))
        .await;
    assert_eq!(second["previous_run_id"], id(&queued.body));

    // Nothing of them starts while the run they wait for is live.
    let waiting = app.get(&format!("/v1/runs/{}", id(&queued.body))).await;
    assert_eq!(waiting.body["status"], "queued");
    assert_eq!(app.messages(id(&queued.body)).await, Vec::<Value>::new());

    approve(&app, id(&live)).await;
    assert_eq!(app.wait_terminal(id(&live)).await["status"], "completed");
    let done = app.wait_terminal(id(&queued.body)).await;
    assert_eq!(done["status"], "completed", "{done}");
    // It saw the file the live run wrote, and its transcript continues it.
    assert!(
        read_result(&app, id(&done))
            .await
            .contains("from the first run")
    );
    let before = app.messages(id(&live)).await;
    let after = app.messages(id(&done)).await;
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(after[before.len()]["content"], "read notes.txt");
    let last = app.wait_terminal(id(&second)).await;
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(
        app.messages(id(&second)).await.len(),
        after.len() + 2,
        "the second continues the first"
    );
}

#[tokio::test]
async fn an_interrupting_follow_up_stops_the_live_run_and_continues_what_it_did() {
    let app = spawn_app().await;
    let live = app
        .create_run(json!({
            "prompt": "write, then think for a long time",
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("w1", "write_file", json!({"path": "half.txt", "content": "half done"}))]},
                {"delay_ms": 60000, "content": "never"}
            ]}
        }))
        .await;
    let mut events = app.follow(id(&live)).await;
    events.until("tool_end").await;

    let next = app
        .create_run(reader(id(&live), "interrupt", "half.txt"))
        .await;
    let stopped = app.wait_terminal(id(&live)).await;
    assert_eq!(stopped["status"], "aborted", "{stopped}");
    let done = app.wait_terminal(id(&next)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["previous_run_id"], id(&live));
    assert!(read_result(&app, id(&done)).await.contains("half done"));
    // Its transcript starts with the stopped run's, as far as it went.
    let stopped_messages = app.messages(id(&live)).await;
    let messages = app.messages(id(&done)).await;
    assert_eq!(messages[..stopped_messages.len()], stopped_messages[..]);
}

#[tokio::test]
async fn a_rolling_back_follow_up_continues_from_the_run_before_the_live_one() {
    let app = spawn_app().await;
    let first = app
        .run_to_end(json!({
            "prompt": "write one",
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("w1", "write_file", json!({"path": "one.txt", "content": "one"}))]},
                {"content": "written"}
            ]}
        }))
        .await;
    let live = app
        .create_run(json!({
            "prompt": "write two, then think",
            "previous_run_id": id(&first),
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("w2", "write_file", json!({"path": "two.txt", "content": "two"}))]},
                {"delay_ms": 60000, "content": "never"}
            ]}
        }))
        .await;
    let mut events = app.follow(id(&live)).await;
    events.until("tool_end").await;

    let instead = app
        .create_run(json!({
            "prompt": "list the files",
            "previous_run_id": id(&live),
            "multitask": "rollback",
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("l1", "list_dir", json!({"path": "."}))]},
                {"content": "listed"}
            ]}
        }))
        .await;
    assert_eq!(instead["previous_run_id"], id(&first));
    assert_eq!(instead["thread_id"], first["thread_id"]);
    let stopped = app.wait_terminal(id(&live)).await;
    assert_eq!(stopped["status"], "aborted");
    let done = app.wait_terminal(id(&instead)).await;
    assert_eq!(done["status"], "completed", "{done}");
    let listed = read_result(&app, id(&done)).await;
    assert!(listed.contains("one.txt"), "{listed}");
    assert!(!listed.contains("two.txt"), "{listed}");
    // As if the stopped run had not been: the first run's transcript, then
    // its own.
    let first_messages = app.messages(id(&first)).await;
    let messages = app.messages(id(&done)).await;
    assert_eq!(messages[..first_messages.len()], first_messages[..]);
    assert_eq!(messages[first_messages.len()]["content"], "list the files");
    // The stopped run is kept, as it ended.
    assert!(!app.messages(id(&live)).await.is_empty());
}

#[tokio::test]
async fn a_waiting_follow_up_can_be_cancelled_and_the_live_run_goes_on() {
    let app = spawn_app().await;
    let live = app.create_run(paused_writer("a.txt", "a", "done")).await;
    app.wait_status(id(&live), "requires_action").await;
    let queued = app.create_run(reader(id(&live), "enqueue", "a.txt")).await;
    let cancelled = app.delete(&format!("/v1/runs/{}", id(&queued))).await;
    assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{}", cancelled.text);
    assert_eq!(app.wait_terminal(id(&queued)).await["status"], "aborted");
    approve(&app, id(&live)).await;
    assert_eq!(app.wait_terminal(id(&live)).await["status"], "completed");
    // Stays as it ended.
    let after = app.get(&format!("/v1/runs/{}", id(&queued))).await;
    assert_eq!(after.body["status"], "aborted");
    assert_eq!(after.body["started_at"], Value::Null);
}

#[tokio::test]
async fn a_waiting_follow_up_survives_a_restart() {
    let app = spawn_app().await;
    let live = app
        .create_run(paused_writer("kept.txt", "kept", "done"))
        .await;
    app.wait_status(id(&live), "requires_action").await;
    let queued = app
        .create_run(reader(id(&live), "enqueue", "kept.txt"))
        .await;
    let dir = app.stop().await;

    let config = test_config(&dir);
    let app = spawn_in(dir, config).await;
    let still = app.get(&format!("/v1/runs/{}", id(&queued))).await;
    assert_eq!(still.body["status"], "queued");
    approve(&app, id(&live)).await;
    let done = app.wait_terminal(id(&queued)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(read_result(&app, id(&done)).await.contains("kept"));
}

#[tokio::test]
async fn multitask_is_checked() {
    let app = spawn_app().await;
    let alone = app
        .post_run(json!({"prompt": "hi", "multitask": "enqueue"}))
        .await;
    assert_eq!(alone.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(alone.text.contains("multitask"), "{}", alone.text);
    let first = app
        .run_to_end(json!({"prompt": "hi", "model": {"scripted": [{"content": "a"}]}}))
        .await;
    let unknown = app
        .post_run(json!({"prompt": "hi", "previous_run_id": id(&first), "multitask": "queue"}))
        .await;
    assert_eq!(unknown.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(unknown.text.contains("multitask"), "{}", unknown.text);
    // A follow-up of a run that has ended needs none of it: it starts.
    let after = app
        .run_to_end(json!({"prompt": "again", "previous_run_id": id(&first),
                           "multitask": "interrupt", "model": {"scripted": [{"content": "b"}]}}))
        .await;
    assert_eq!(after["status"], "completed");
    assert_eq!(after["previous_run_id"], id(&first));
}

#[tokio::test]
async fn a_follow_up_goes_behind_the_run_it_names_not_another_fork_of_its_thread() {
    let app = spawn_app().await;
    let first = app
        .run_to_end(json!({"prompt": "start", "model": {"scripted": [{"content": "a"}]}}))
        .await;
    let mut forks = Vec::new();
    for name in ["left.txt", "right.txt"] {
        let mut body = paused_writer(name, name, "done");
        body["previous_run_id"] = json!(id(&first));
        let fork = app.create_run(body).await;
        app.wait_status(id(&fork), "requires_action").await;
        forks.push(fork);
    }
    let behind_left = app
        .create_run(reader(id(&forks[0]), "enqueue", "left.txt"))
        .await;
    assert_eq!(behind_left["previous_run_id"], forks[0]["id"]);
    approve(&app, id(&forks[0])).await;
    let done = app.wait_terminal(id(&behind_left)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(read_result(&app, id(&done)).await.contains("left.txt"));
    // The other fork still waits for its approval; nothing waited for it.
    let right = app.get(&format!("/v1/runs/{}", id(&forks[1]))).await;
    assert_eq!(right.body["status"], "requires_action");
}

#[tokio::test]
async fn a_follow_up_behind_one_cancelled_while_it_waited_continues_the_live_run() {
    let app = spawn_app().await;
    let live = app
        .create_run(paused_writer("first.txt", "from the first", "written"))
        .await;
    app.wait_status(id(&live), "requires_action").await;
    let second = app
        .create_run(reader(id(&live), "enqueue", "first.txt"))
        .await;
    let third = app
        .create_run(reader(id(&live), "enqueue", "first.txt"))
        .await;
    assert_eq!(third["previous_run_id"], second["id"], "behind the second");
    let cancelled = app.delete(&format!("/v1/runs/{}", id(&second))).await;
    assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{}", cancelled.text);
    assert_eq!(app.wait_terminal(id(&second)).await["status"], "aborted");
    // The third does not start while the first is live...
    let waiting = app.get(&format!("/v1/runs/{}", id(&third))).await;
    assert_eq!(waiting.body["status"], "queued");
    approve(&app, id(&live)).await;
    // ...and then continues the first, as the cancelled one would have.
    let done = app.wait_terminal(id(&third)).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["previous_run_id"], live["id"]);
    assert!(
        read_result(&app, id(&done))
            .await
            .contains("from the first")
    );
    let first_messages = app.messages(id(&live)).await;
    let messages = app.messages(id(&done)).await;
    assert_eq!(messages[..first_messages.len()], first_messages[..]);
}
