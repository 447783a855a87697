//! `[runs] draft_first`: a run's first model call is made without tool
//! definitions, and the run goes on with them.

use agent_runner::tools::CommandPreset;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::{Seen, mock_openai_profile, scripted_openai};

/// A server drafting first, taking code blocks as files, with a `test`
/// preset that passes once `main.py` says `ok`, and the profile `oa` on a
/// provider answering `replies`.
async fn spawn_drafting(replies: Vec<Value>) -> (TestApp, Seen) {
    let (address, seen) = scripted_openai(replies).await;
    let app = spawn_with(move |config| {
        add_test_preset(config);
        config.runs.draft_first = true;
        config.runs.write_code_blocks = true;
        // Drafts alone: an answer that changed nothing stands (see
        // `unchanged.rs`).
        config.runs.question_unchanged = Some(false);
        config
            .models
            .insert("oa".into(), mock_openai_profile(&address));
    })
    .await;
    (app, seen)
}

/// The `test` preset: it passes once `main.py` says `ok`.
fn add_test_preset(config: &mut agent_runner::config::Config) {
    let preset = "program = \"sh\"\nargs = [\"-c\", \"grep -q ok main.py\"]\ntimeout_ms = 20000";
    let preset = toml::from_str::<CommandPreset>(preset).unwrap();
    config.commands.insert("test".into(), preset);
}

fn run_test_call() -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{"id": "t1", "type": "function",
           "function": {"name": "run_command", "arguments": "{\"command\": \"test\"}"}}]})
}

fn text(content: &str) -> Value {
    json!({"role": "assistant", "content": content})
}

/// The messages of a model request, its instructions left out.
fn conversation(request: &Value) -> Vec<&Value> {
    let messages = request["messages"].as_array().unwrap();
    messages
        .iter()
        .filter(|message| message["role"] != "system")
        .collect()
}

/// The system message of a model request, if any.
fn system(request: &Value) -> Option<&str> {
    let messages = request["messages"].as_array().unwrap();
    let system = messages
        .iter()
        .find(|message| message["role"] == "system")?;
    system["content"].as_str()
}

fn request(prompt: &str) -> Value {
    json!({"prompt": prompt, "model": {"profile": "oa"}, "commands": ["test"],
           "workspace": {"files": {"main.py": "print('no')\n"}}})
}

#[tokio::test]
async fn a_draft_is_made_without_tools_and_its_code_block_becomes_the_file() {
    let (app, seen) = spawn_drafting(vec![
        text("Here it is:\n\nmain.py\n```python\nprint('ok')\n```"),
        run_test_call(),
        text("Done; the test passes."),
    ])
    .await;
    let run = app.run_to_end(request("make the program print ok")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Done; the test passes.");
    assert_eq!(run["steps"], 3, "{run}");

    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    assert!(requests[0].get("tools").is_none(), "{}", requests[0]);
    // The server's default instructions are about tools: the draft, made
    // without them, is asked as the prompt alone; the calls after it get them.
    assert_eq!(system(&requests[0]), None, "{}", requests[0]);
    assert_eq!(
        system(&requests[1]),
        Some(agent_runner::config::DEFAULT_INSTRUCTIONS)
    );
    for later in &requests[1..] {
        let names: Vec<&str> = later["tools"]
            .as_array()
            .expect("tools after the draft")
            .iter()
            .map(|tool| tool["function"]["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"run_command"), "{names:?}");
    }
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    let call = &messages[1]["tool_calls"][0];
    assert_eq!(call["name"], "write_file", "{messages:?}");
    assert!(call["id"].as_str().unwrap().starts_with("code_block_"));
    assert_eq!(call["arguments"]["content"], "print('ok')\n");
    let test = &messages[4];
    assert_eq!(test["role"], "tool", "{messages:?}");
    let result: Value = serde_json::from_str(test["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["exit_code"], 0, "{test}");
    assert_eq!(app.workspace_file(&run, "main.py").await, "print('ok')\n");
}

#[tokio::test]
async fn a_draft_that_changes_nothing_is_kept_and_followed_by_a_note_the_model_is_not_sent() {
    let write = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "w1",
        "type": "function", "function": {"name": "write_file",
        "arguments": "{\"path\": \"main.py\", \"content\": \"print('ok')\\n\"}"}}]});
    let (app, seen) = spawn_drafting(vec![
        text("I would change main.py to print ok."),
        write,
        run_test_call(),
        text("Changed and tested."),
    ])
    .await;
    let run = app.run_to_end(request("make the program print ok")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Changed and tested.");
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    assert_eq!(
        messages[1]["content"],
        "I would change main.py to print ok."
    );
    assert_eq!(messages[2]["role"], "user");
    let note = messages[2]["content"].as_str().unwrap();
    assert!(
        note.starts_with("[agent-runner] That was a draft"),
        "{note}"
    );
    let requests = seen.lock().unwrap().clone();
    assert!(requests[0].get("tools").is_none());
    assert!(requests[1]["tools"].is_array(), "{}", requests[1]);
    // The model is sent the run as if it had not drafted: the prompt alone
    // (its answer from without its tools would lead it, a refusal
    // included), and the run's later steps after it.
    let sent = conversation(&requests[1]);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["content"], "make the program print ok");
    let sent = conversation(&requests[2]);
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[1]["tool_calls"][0]["id"], "w1");
}

#[tokio::test]
async fn a_draft_cut_off_at_the_token_limit_is_a_step_that_changed_nothing() {
    let mut cut = text("```python\nprint('o");
    cut["_finish"] = json!("length");
    let (app, seen) = spawn_drafting(vec![cut, run_test_call(), text("Tested.")]).await;
    let run = app.run_to_end(request("make the program print ok")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Tested.");
    assert_eq!(run["steps"], 3, "the draft counts as a step: {run}");
    let requests = seen.lock().unwrap().clone();
    assert!(requests[1]["tools"].is_array(), "{}", requests[1]);
    assert_eq!(conversation(&requests[1]).len(), 1);
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    assert_eq!(
        messages[1]["tool_calls"][0]["name"], "run_command",
        "{messages:?}"
    );
}

#[tokio::test]
async fn a_run_of_one_step_or_without_tools_never_drafts() {
    let (app, seen) = spawn_drafting(vec![text("ok")]).await;
    let mut one = request("answer");
    one["limits"] = json!({"max_steps": 1});
    let run = app.run_to_end(one).await;
    assert_eq!(run["status"], "completed", "{run}");
    let mut none = request("answer");
    none["tools"] = json!([]);
    none.as_object_mut().unwrap().remove("commands");
    let run = app.run_to_end(none).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["steps"], 1,
        "no note after an answer without tools: {run}"
    );
    let requests = seen.lock().unwrap().clone();
    assert!(requests[0]["tools"].is_array(), "{}", requests[0]);
    assert!(requests[1].get("tools").is_none());
}

#[tokio::test]
async fn a_draft_is_shown_the_files_its_prompt_names_and_the_transcript_keeps_the_prompt() {
    let (app, seen) = spawn_drafting(vec![
        text("main.py\n```python\nprint('ok')\n```"),
        run_test_call(),
        text("Fixed."),
    ])
    .await;
    let mut body = request("fix main.py: it should print ok");
    body["workspace"]["files"]["other.py"] = json!("print('other')\n");
    let run = app.run_to_end(body).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(app.workspace_file(&run, "main.py").await, "print('ok')\n");
    let requests = seen.lock().unwrap().clone();
    assert!(requests[0].get("tools").is_none(), "{}", requests[0]);
    let sent = conversation(&requests[0]);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(
        sent[0]["content"],
        "fix main.py: it should print ok\n\nThe files it names, as they are now:\n\
         \nmain.py\n```\nprint('no')\n```\n",
        "only the named file is shown"
    );
    // After the draft, the model is sent the prompt as the client gave it.
    let after = conversation(&requests[1]);
    assert_eq!(after[0]["content"], "fix main.py: it should print ok");
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    assert_eq!(messages[0]["content"], "fix main.py: it should print ok");
}

#[tokio::test]
async fn a_draft_is_sent_the_runs_own_instructions() {
    let (app, seen) = spawn_drafting(vec![
        text("main.py\n```python\nprint('ok')\n```"),
        run_test_call(),
        text("Done."),
    ])
    .await;
    let mut body = request("make the program print ok");
    body["instructions"] = json!("Answer in French.");
    let run = app.run_to_end(body).await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = seen.lock().unwrap().clone();
    assert!(requests[0].get("tools").is_none(), "{}", requests[0]);
    for request in &requests {
        assert_eq!(system(request), Some("Answer in French."), "{request}");
    }
}

/// A server whose `[runs]` switches are `server`, with the `test` preset
/// and two profiles on one provider answering `replies`: `small`, whose
/// own switches are `small`, and `strong`, which sets none.
async fn spawn_two_profiles(
    replies: Vec<Value>,
    server: bool,
    small: Option<bool>,
) -> (TestApp, Seen) {
    use agent_runner::models::profile::{LoopSettings, ModelProfile};
    let (address, seen) = scripted_openai(replies).await;
    let app = spawn_with(move |config| {
        add_test_preset(config);
        config.runs.draft_first = server;
        config.runs.write_code_blocks = server;
        config.runs.question_unchanged = Some(false);
        let mut profile = mock_openai_profile(&address);
        if let ModelProfile::OpenAi(http) = &mut profile {
            http.loop_settings = LoopSettings {
                draft_first: small,
                check_answers: None,
                write_code_blocks: small,
                question_unchanged: None,
            };
        }
        config.models.insert("small".into(), profile);
        config
            .models
            .insert("strong".into(), mock_openai_profile(&address));
    })
    .await;
    (app, seen)
}

fn request_of(profile: &str) -> Value {
    let mut request = request("make the program print ok");
    request["model"] = json!({"profile": profile});
    request
}

#[tokio::test]
async fn a_profile_drafts_first_on_a_server_that_does_not_and_another_profile_does_not() {
    let (app, seen) = spawn_two_profiles(
        vec![
            text("main.py\n```python\nprint('ok')\n```"),
            run_test_call(),
            text("Done; the test passes."),
            text("I would make main.py print ok."),
        ],
        false,
        Some(true),
    )
    .await;
    let small = app.run_to_end(request_of("small")).await;
    assert_eq!(small["status"], "completed", "{small}");
    assert_eq!(app.workspace_file(&small, "main.py").await, "print('ok')\n");
    let strong = app.run_to_end(request_of("strong")).await;
    assert_eq!(strong["status"], "completed", "{strong}");
    // Without write_code_blocks, the answer's words end the run and change
    // nothing.
    assert_eq!(strong["answer"], "I would make main.py print ok.");
    assert_eq!(
        app.workspace_file(&strong, "main.py").await,
        "print('no')\n"
    );

    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    assert!(requests[0].get("tools").is_none(), "{}", requests[0]);
    assert!(requests[1]["tools"].is_array(), "{}", requests[1]);
    assert!(requests[3]["tools"].is_array(), "{}", requests[3]);
}

#[tokio::test]
async fn a_profile_that_turns_a_switch_off_does_not_draft_on_a_server_that_does() {
    let (app, seen) = spawn_two_profiles(
        vec![
            text("No draft here."),
            text("main.py\n```python\nprint('ok')\n```"),
            run_test_call(),
            text("Done."),
        ],
        true,
        Some(false),
    )
    .await;
    let small = app.run_to_end(request_of("small")).await;
    assert_eq!(small["answer"], "No draft here.", "{small}");
    let strong = app.run_to_end(request_of("strong")).await;
    assert_eq!(strong["answer"], "Done.", "{strong}");
    assert_eq!(
        app.workspace_file(&strong, "main.py").await,
        "print('ok')\n"
    );

    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    assert!(requests[0]["tools"].is_array(), "{}", requests[0]);
    assert!(requests[1].get("tools").is_none(), "{}", requests[1]);
}
