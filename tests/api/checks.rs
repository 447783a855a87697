//! Checks after a change: a `check = true` preset runs after every model
//! response that changed files, as a call of that response, and a code
//! block answer that passes it ends the run.

use agent_runner::tools::CommandPreset;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::{Seen, mock_openai_profile, scripted_openai};

/// A `test` preset, a check after every change, that passes once `main.py`
/// says `ok`.
fn check_preset() -> CommandPreset {
    let preset = "program = \"sh\"\nargs = [\"-c\", \"grep -q ok main.py\"]\n\
                  timeout_ms = 20000\ncheck = true";
    toml::from_str(preset).unwrap()
}

/// A server taking code blocks as files and questioning unchecked answers
/// (as the real-model task set's does, drafting first or not), with the check
/// preset `test`, and the profile `oa` on a provider answering `replies`.
async fn spawn_checked(replies: Vec<Value>, draft_first: bool) -> (TestApp, Seen) {
    let (address, seen) = scripted_openai(replies).await;
    let app = spawn_with(move |config| {
        config.commands.insert("test".into(), check_preset());
        config.runs.draft_first = draft_first;
        config.runs.write_code_blocks = true;
        config.runs.check_answers = true;
        config
            .models
            .insert("oa".into(), mock_openai_profile(&address));
    })
    .await;
    (app, seen)
}

fn text(content: &str) -> Value {
    json!({"role": "assistant", "content": content})
}

fn request() -> Value {
    json!({"prompt": "make the program print ok", "model": {"profile": "oa"}, "commands": ["test"],
           "workspace": {"files": {"main.py": "print('no')\n"}}})
}

/// The exit code of a tool message holding a command's result.
fn exit_code(message: &Value) -> Value {
    assert_eq!(message["role"], "tool", "{message}");
    let result: Value = serde_json::from_str(message["content"].as_str().unwrap()).unwrap();
    result["exit_code"].clone()
}

#[tokio::test]
async fn a_code_block_answer_that_passes_the_check_ends_the_run() {
    let draft = "Here it is:\n\nmain.py\n```python\nprint('ok')\n```";
    let (app, seen) = spawn_checked(vec![text(draft)], true).await;
    let run = app.run_to_end(request()).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], draft);
    assert_eq!(run["steps"], 1, "{run}");
    assert_eq!(run["tool_calls"], 2, "the write and its check: {run}");
    assert_eq!(seen.lock().unwrap().len(), 1, "one model call");

    let messages = app.messages(run["id"].as_str().unwrap()).await;
    assert_eq!(messages.len(), 4, "{messages:?}");
    let calls = messages[1]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("code_block_"));
    assert_eq!(calls[1]["name"], "run_command");
    assert_eq!(calls[1]["arguments"], json!({"command": "test"}));
    assert!(calls[1]["id"].as_str().unwrap().starts_with("check_"));
    assert_eq!(exit_code(&messages[3]), 0);
    assert_eq!(messages[3]["call_id"], calls[1]["id"]);
}

#[tokio::test]
async fn a_failing_check_is_shown_to_the_model_and_runs_again_after_its_fix() {
    let edit = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "e1",
        "type": "function", "function": {"name": "edit_file", "arguments":
        "{\"path\": \"main.py\", \"old_text\": \"nope\", \"new_text\": \"ok\"}"}}]});
    let (app, seen) = spawn_checked(
        vec![
            text("main.py\n```python\nprint('nope')\n```"),
            edit,
            text("Fixed; the check passes."),
        ],
        false,
    )
    .await;
    let run = app.run_to_end(request()).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Fixed; the check passes.");
    assert_eq!(run["steps"], 3, "{run}");

    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    // The model is sent the failed check of the code it answered with,
    // with its tools, without having asked for it.
    let sent = requests[1]["messages"].as_array().unwrap();
    let check = sent.last().unwrap();
    assert_eq!(check["role"], "tool", "{check}");
    assert!(
        check["content"]
            .as_str()
            .unwrap()
            .starts_with("exit code 1"),
        "{check}"
    );
    assert!(requests[1]["tools"].is_array());

    let messages = app.messages(run["id"].as_str().unwrap()).await;
    assert_eq!(exit_code(&messages[3]), 1, "{messages:?}");
    // The model's own edit is followed by a check too, which passes; the
    // model, having made a call of its own, answers itself.
    let calls = messages[4]["tool_calls"].as_array().unwrap();
    let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["edit_file", "run_command"], "{messages:?}");
    assert!(calls[1]["id"].as_str().unwrap().starts_with("check_"));
    assert_eq!(exit_code(&messages[6]), 0);
    let note = messages[7]["content"].as_str().unwrap();
    assert!(
        note.starts_with("[agent-runner] That check passed"),
        "{note}"
    );
    assert_eq!(messages[8]["content"], "Fixed; the check passes.");
    assert_eq!(app.workspace_file(&run, "main.py").await, "print('ok')\n");
}

#[tokio::test]
async fn a_draft_whose_check_fails_is_redrafted_with_the_file_and_the_failure() {
    let (app, seen) = spawn_checked(
        vec![
            text("main.py\n```python\nprint('nope')\n```"),
            text("main.py\n```python\nprint('ok')\n```"),
        ],
        true,
    )
    .await;
    let run = app.run_to_end(request()).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["steps"], 2, "{run}");
    assert_eq!(run["answer"], "main.py\n```python\nprint('ok')\n```");
    assert_eq!(app.workspace_file(&run, "main.py").await, "print('ok')\n");

    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    // The redraft, without tools, is one message: the prompt, the file as
    // the draft left it, and what its check printed.
    assert!(requests[1].get("tools").is_none(), "{}", requests[1]);
    let sent: Vec<&Value> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] != "system")
        .collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let text = sent[0]["content"].as_str().unwrap();
    assert!(
        text.starts_with(
            "make the program print ok\n\nYour answer was saved as:\n\nmain.py\n```\n\
             print('nope')\n```\n\nThe check of it failed:\n```\nexit code 1\n"
        ),
        "{text}"
    );
    assert!(
        text.ends_with("Answer with the whole fixed main.py in one code block."),
        "{text}"
    );
    // The transcript has both answers, and no trace of the redraft's text.
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    assert_eq!(messages.len(), 7, "{messages:?}");
    assert_eq!(messages[0]["content"], "make the program print ok");
}

#[tokio::test]
async fn a_run_drafts_three_times_at_most_then_goes_on_with_its_tools() {
    let block = |word: &str| text(&format!("main.py\n```python\nprint('{word}')\n```"));
    let (app, seen) = spawn_checked(
        vec![
            block("one"),
            block("two"),
            block("three"),
            text("It still fails."),
            text("It still fails."),
        ],
        true,
    )
    .await;
    let run = app.run_to_end(request()).await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = seen.lock().unwrap().clone();
    assert!(requests.len() >= 4, "{}", requests.len());
    for draft in &requests[..3] {
        assert!(draft.get("tools").is_none(), "{draft}");
    }
    assert!(requests[3]["tools"].is_array(), "{}", requests[3]);
}

#[tokio::test]
async fn a_redraft_that_repeats_the_draft_is_the_last_one() {
    let block = |word: &str| text(&format!("main.py\n```python\nprint('{word}')\n```"));
    let (app, seen) = spawn_checked(
        vec![
            block("one"),
            block("one"),
            text("It still fails."),
            text("It still fails."),
        ],
        true,
    )
    .await;
    let run = app.run_to_end(request()).await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = seen.lock().unwrap().clone();
    for draft in &requests[..2] {
        assert!(draft.get("tools").is_none(), "{draft}");
    }
    // The same code twice: the tools take over, no third draft.
    assert!(requests[2]["tools"].is_array(), "{}", requests[2]);
}

#[tokio::test]
async fn no_check_is_added_after_a_step_that_checks_itself_changes_nothing_or_has_no_room() {
    let app = spawn_with(|config| {
        config.commands.insert("test".into(), check_preset());
    })
    .await;
    let write = call(
        "w1",
        "write_file",
        json!({"path": "main.py", "content": "print('ok')\n"}),
    );
    let test = call("t1", "run_command", json!({"command": "test"}));
    let read = call("r1", "read_file", json!({"path": "main.py"}));
    let script = json!([
        {"content": "", "tool_calls": [write, test]},
        {"content": "", "tool_calls": [read]},
        {"content": "Done."}
    ]);
    let body = json!({"prompt": "make main.py print ok", "commands": ["test"],
                      "workspace": {"files": {"main.py": "print('no')\n"}},
                      "model": {"scripted": script}});
    let run = app.run_to_end(body.clone()).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["tool_calls"], 3, "no call added: {run}");

    // A check that would pass the run's max_tool_calls is left out: the
    // model's own calls come first.
    let script = json!([
        {"content": "", "tool_calls": [call("w1", "write_file",
            json!({"path": "main.py", "content": "print('ok')\n"}))]},
        {"content": "Done."}
    ]);
    let mut body = body;
    body["model"] = json!({"scripted": script});
    body["limits"] = json!({"max_tool_calls": 1});
    let run = app.run_to_end(body).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["tool_calls"], 1, "{run}");
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    assert_eq!(messages[1]["tool_calls"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_preset_not_allowed_in_the_run_is_never_run_as_a_check() {
    let app = spawn_with(|config| {
        config.commands.insert("test".into(), check_preset());
        let lint = "program = \"true\"";
        let lint = toml::from_str::<CommandPreset>(lint).unwrap();
        config.commands.insert("lint".into(), lint);
    })
    .await;
    let mut body = two_step(
        "write_file",
        json!({"path": "main.py", "content": "print('ok')\n"}),
        "Done.",
    );
    body["workspace"] = json!({"files": {"main.py": "print('no')\n"}});
    body["commands"] = json!(["lint"]);
    let run = app.run_to_end(body).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["tool_calls"], 1, "{run}");
}
