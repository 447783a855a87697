//! `[runs] check_answers`: an answer about a workspace file the prompt
//! names, given without reading it (or using any tool), is questioned once,
//! and the run goes on.

use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::{mock_openai_profile, scripted_openai};

fn fact_run(script: Value) -> Value {
    json!({
        "prompt": "Who owns billing, according to docs/team.md? Answer with the name.",
        "tools": ["read_file", "list_dir"],
        "workspace": {"files": {"docs/team.md": "- Billing: Priya Raman\n"}},
        "model": {"scripted": script}
    })
}

#[tokio::test]
async fn an_answer_from_memory_about_a_named_file_is_questioned_once() {
    let app = spawn_with(|config| config.runs.check_answers = true).await;
    let read = call("r1", "read_file", json!({"path": "docs/team.md"}));
    let run = app
        .run_to_end(fact_run(json!([
            {"content": "The billing team owns it."},
            {"content": "", "tool_calls": [read]},
            {"content": "Priya Raman."}
        ])))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Priya Raman.");
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    assert_eq!(messages[1]["content"], "The billing team owns it.");
    assert_eq!(
        messages[2]["content"],
        "[agent-runner] You answered without reading `docs/team.md`, which the task names, so \
         your answer is not from the workspace. Read it with read_file now, then answer from \
         what it says."
    );

    // Once in a turn: an answer from memory after the note stands.
    let run = app
        .run_to_end(fact_run(json!([
            {"content": "The billing team."},
            {"content": "Still the billing team."}
        ])))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Still the billing team.");
    assert_eq!(run["steps"], 2);
}

#[tokio::test]
async fn without_check_answers_or_a_named_file_the_answer_stands() {
    let app = spawn_with(|config| config.runs.check_answers = false).await;
    let run = app
        .run_to_end(fact_run(json!([{"content": "The billing team."}])))
        .await;
    assert_eq!(run["answer"], "The billing team.", "{run}");

    let app = spawn_with(|config| config.runs.check_answers = true).await;
    let mut request = fact_run(json!([{"content": "Four."}]));
    request["prompt"] = json!("What is 2 + 2?");
    let run = app.run_to_end(request).await;
    assert_eq!(run["answer"], "Four.", "{run}");
    assert_eq!(run["steps"], 1);
}

/// The call after the note must use a tool: a small model told in words
/// repeated its answer word for word.
#[tokio::test]
async fn the_call_after_the_note_requires_a_tool() {
    let (address, seen) = scripted_openai(vec![
        json!({"role": "assistant", "content": "The billing team."}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "r1",
            "type": "function", "function": {"name": "read_file",
            "arguments": "{\"path\": \"docs/team.md\"}"}}]}),
        json!({"role": "assistant", "content": "Priya Raman."}),
    ])
    .await;
    let app = spawn_with(move |config| {
        config.runs.check_answers = true;
        config
            .models
            .insert("oa".into(), mock_openai_profile(&address));
    })
    .await;
    let mut request = fact_run(json!([]));
    request["model"] = json!({"profile": "oa"});
    let run = app.run_to_end(request).await;
    assert_eq!(run["answer"], "Priya Raman.", "{run}");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].get("tool_choice"), None, "{}", requests[0]);
    assert_eq!(requests[1]["tool_choice"], "required", "{}", requests[1]);
    assert_eq!(requests[2].get("tool_choice"), None, "{}", requests[2]);
}

/// With `write_code_blocks`, a response whose block is a tool call written
/// as text (a small model's `{"name": ..., "arguments": ...}` that its
/// server did not parse) makes that call.
#[tokio::test]
async fn a_call_written_as_text_in_a_block_is_made() {
    let app = spawn_with(|config| config.runs.write_code_blocks = true).await;
    let text_call = "I need to read it:\n```json\n{\"name\": \"read_file\", \"arguments\": \
                     {\"path\": \"docs/team.md\"}}\n```";
    let run = app
        .run_to_end(fact_run(json!([
            {"content": text_call},
            {"content": "Priya Raman."}
        ])))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Priya Raman.");
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    let call = &messages[1]["tool_calls"][0];
    assert_eq!(call["name"], "read_file", "{messages:?}");
    assert!(call["id"].as_str().unwrap().starts_with("text_call_"));
    assert_eq!(messages[2]["role"], "tool");
    assert!(
        messages[2]["content"]
            .as_str()
            .unwrap()
            .contains("Priya Raman"),
        "{messages:?}"
    );
}
