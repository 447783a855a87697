//! An answer that changed nothing when the prompt asks for a change is
//! questioned once (`question_unchanged`, on for a provider's model unless
//! set off), through the real server with a provider mock in OpenAI's wire
//! format.

use serde_json::{Value, json};

use crate::helpers::*;
use crate::providers::{Seen, mock_openai_profile, scripted_openai};

/// A server with the `test` preset (it fails) and the profile `oa` on a
/// provider answering `replies`; `question_unchanged` as given.
async fn spawn_unchanged(replies: Vec<Value>, question: Option<bool>) -> (TestApp, Seen) {
    let (address, seen) = scripted_openai(replies).await;
    let app = spawn_with(move |config| {
        let preset = "program = \"sh\"\nargs = [\"-c\", \"grep -q ok main.py\"]";
        config
            .commands
            .insert("test".into(), toml::from_str(preset).unwrap());
        config.runs.question_unchanged = question;
        config
            .models
            .insert("oa".into(), mock_openai_profile(&address));
    })
    .await;
    (app, seen)
}

fn run_test() -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{"id": "t1", "type": "function",
           "function": {"name": "run_command", "arguments": "{\"command\": \"test\"}"}}]})
}

fn write_ok() -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{"id": "w1", "type": "function",
           "function": {"name": "write_file",
                        "arguments": "{\"path\": \"main.py\", \"content\": \"print('ok')\\n\"}"}}]})
}

fn text(content: &str) -> Value {
    json!({"role": "assistant", "content": content})
}

fn request(prompt: &str) -> Value {
    json!({"prompt": prompt, "model": "oa", "commands": ["test"],
           "workspace": {"files": {"main.py": "print('no')\n"}}})
}

/// The last message a model request was sent.
fn last(request: &Value) -> &Value {
    request["messages"].as_array().unwrap().last().unwrap()
}

#[tokio::test]
async fn an_answer_that_changed_nothing_is_questioned_and_the_model_makes_the_change() {
    let (app, seen) = spawn_unchanged(
        vec![
            run_test(),
            text("Change main.py to print ok."),
            write_ok(),
            text("Done."),
        ],
        None,
    )
    .await;
    let run = app
        .run_to_end(request("Fix main.py so that it prints ok."))
        .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["answer"], "Done.");
    assert_eq!(app.workspace_file(&run, "main.py").await, "print('ok')\n");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    let note = last(&requests[2]);
    assert_eq!(note["role"], "user", "{note}");
    let note = note["content"].as_str().unwrap();
    assert!(
        note.starts_with("[agent-runner] You changed no file, but the task asks for a change"),
        "{note}"
    );
    assert!(
        note.ends_with("The workspace's files: `main.py`."),
        "{note}"
    );
    // The note stays in the transcript, after the answer it questions.
    let messages = app.messages(run["id"].as_str().unwrap()).await;
    let position = messages
        .iter()
        .position(|m| m["content"] == note)
        .expect("the note is stored");
    assert_eq!(
        messages[position - 1]["content"],
        "Change main.py to print ok."
    );
}

#[tokio::test]
async fn it_is_questioned_once_and_a_question_or_a_server_that_turns_it_off_is_not() {
    // Once: the answer after the note stands.
    let (app, seen) = spawn_unchanged(vec![text("Nothing to change.")], None).await;
    let run = app.run_to_end(request("Fix main.py.")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["steps"], 2, "questioned once: {run}");
    assert_eq!(seen.lock().unwrap().len(), 2);

    // A question is answered as it is.
    let (app, seen) = spawn_unchanged(vec![text("It prints no.")], None).await;
    let run = app.run_to_end(request("What does main.py print?")).await;
    assert_eq!(run["steps"], 1, "{run}");
    assert_eq!(seen.lock().unwrap().len(), 1);

    // Set off, the answer ends the run.
    let (app, _) = spawn_unchanged(vec![text("Change it yourself.")], Some(false)).await;
    let run = app.run_to_end(request("Fix main.py.")).await;
    assert_eq!(run["steps"], 1, "{run}");
    assert_eq!(run["answer"], "Change it yourself.");
}

#[tokio::test]
async fn a_scripted_model_is_not_questioned_unless_the_server_says_so() {
    let scripted = |prompt: &str| json!({"prompt": prompt, "model": {"scripted": [{"content": "Left as is."}, {"content": "Still."}]}});
    let (app, _) = spawn_unchanged(vec![], None).await;
    let run = app.run_to_end(scripted("Fix main.py.")).await;
    assert_eq!(run["steps"], 1, "{run}");
    let (app, _) = spawn_unchanged(vec![], Some(true)).await;
    let run = app.run_to_end(scripted("Fix main.py.")).await;
    assert_eq!(run["steps"], 2, "{run}");
    assert_eq!(run["answer"], "Still.");
}
