//! Sub-agents (SPEC section 24): a run's `delegate` calls start child runs
//! of its sub-agents, through the real server with scripted models.

use serde_json::{Value, json};

use crate::helpers::*;

/// A sub-agent whose model answers `answer` (after `delay_ms`).
fn answering(answer: &str, delay_ms: u64) -> Value {
    json!({"description": format!("answers {answer}"),
           "model": {"scripted": [{"delay_ms": delay_ms, "content": answer,
                                   "usage": {"input_tokens": 5, "output_tokens": 2}}]}})
}

async fn children_of(app: &TestApp, id: &str) -> Vec<Value> {
    let page = app.get(&format!("/v1/runs?parent_run_id={id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let mut runs = page.body["runs"].as_array().unwrap().clone();
    runs.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    runs
}

#[tokio::test]
async fn a_delegate_call_starts_a_child_run_and_answers_with_its_answer() {
    let app = spawn_app().await;
    let run = app
        .run_to_end(json!({
            "prompt": "ask the reader",
            "subagents": {"reader": answering("the file says hi", 0)},
            "model": {"scripted": [
                {"content": "", "tool_calls": [call("d1", "delegate", json!({"agent": "reader", "prompt": "read a.txt"}))],
                 "usage": {"input_tokens": 10, "output_tokens": 3}},
                {"content": "done", "usage": {"input_tokens": 20, "output_tokens": 4}}
            ]}
        }))
        .await;
    let id = run["id"].as_str().unwrap();
    assert_eq!(run["status"], "completed", "{run}");
    // Its own usage, and its children's added.
    assert_eq!(run["usage"]["input_tokens"], 30, "{run}");
    assert_eq!(run["usage_total"]["input_tokens"], 35, "{run}");
    assert_eq!(
        run["subagents"]["reader"]["description"], "answers the file says hi",
        "{run}"
    );
    let children = children_of(&app, id).await;
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_eq!(child["parent_run_id"], id);
    assert_eq!(child["root_run_id"], id);
    assert_eq!(child["prompt"], "read a.txt");
    assert_eq!(child["status"], "completed");
    let messages = app.messages(id).await;
    let result = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("the call's result: {messages:?}"));
    assert_eq!(result["content"], "\"the file says hi\"", "{messages:?}");
    let events = app.events(id).await;
    let kinds = types(&events);
    let start = kinds
        .iter()
        .position(|k| *k == "subrun_start")
        .expect("subrun_start");
    let end = kinds
        .iter()
        .position(|k| *k == "subrun_end")
        .expect("subrun_end");
    assert!(start < end, "{kinds:?}");
    assert_eq!(events[start].data["run_id"], child["id"]);
    assert_eq!(events[start].data["call_id"], "d1");
    assert_eq!(events[start].data["agent"], "reader");
    assert_eq!(events[end].data["status"], "completed");
}
